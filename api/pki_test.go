package api_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// testCA is a throwaway certificate authority for mutual-TLS tests.
type testCA struct {
	t      *testing.T
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{t: t, cert: cert, key: key, serial: 1}
}

// fingerprint is the lower-case hex SHA-256 of the CA certificate's DER.
func (ca *testCA) fingerprint() string {
	sum := sha256.Sum256(ca.cert.Raw)
	return hex.EncodeToString(sum[:])
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

var oidCommonName = asn1.ObjectIdentifier{2, 5, 4, 3}

// issue returns a certificate for subject common names cns (in order; more
// than one makes a multi-CN subject) with the given extended key usage.
func (ca *testCA) issue(usage x509.ExtKeyUsage, cns ...string) tls.Certificate {
	ca.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		ca.t.Fatal(err)
	}
	ca.serial++
	var subject pkix.Name
	for _, cn := range cns {
		subject.ExtraNames = append(subject.ExtraNames, pkix.AttributeTypeAndValue{Type: oidCommonName, Value: cn})
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(ca.serial), Subject: subject,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage},
		KeyUsage: x509.KeyUsageDigitalSignature, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsListener serves h over TLS with a server certificate from serverCA,
// verifying client certificates against clientCA when one is given (and
// letting clients without one through, so bearer tokens work too).
func tlsListener(t *testing.T, h http.Handler, serverCA, clientCA *testCA) *httptest.Server {
	t.Helper()
	if clientCA == nil {
		return tlsListenerPool(t, h, serverCA)
	}
	return tlsListenerPool(t, h, serverCA, clientCA)
}

// tlsListenerPool is tlsListener with a client CA bundle of several CAs.
func tlsListenerPool(t *testing.T, h http.Handler, serverCA *testCA, clientCAs ...*testCA) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serverCA.issue(x509.ExtKeyUsageServerAuth, "keysvc")}, MinVersion: tls.VersionTLS12}
	if len(clientCAs) > 0 {
		pool := x509.NewCertPool()
		for _, ca := range clientCAs {
			pool.AddCert(ca.cert)
		}
		srv.TLS.ClientCAs, srv.TLS.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// tlsClient trusts serverCA and presents cert (when it has one).
func tlsClient(serverCA *testCA, cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: serverCA.pool(), MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
}
