package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/client"
)

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all signed by the CA, as PEM files in dir.
func testPKI(t *testing.T, dir string) (caFile, certFile, keyFile string, clientCert tls.Certificate, roots *x509.CertPool) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "keysvc test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, ip bool) ([]byte, *ecdsa.PrivateKey) {
		k := newKey()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage},
			KeyUsage: x509.KeyUsageDigitalSignature}
		if ip {
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		b, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	srvDER, srvKey := issue(2, "keysvc", x509.ExtKeyUsageServerAuth, true)
	cliDER, cliKey := issue(3, "officer-1", x509.ExtKeyUsageClientAuth, false)
	caFile = write("ca.pem", "CERTIFICATE", caDER)
	certFile = write("server.pem", "CERTIFICATE", srvDER)
	keyFile = write("server-key.pem", "EC PRIVATE KEY", keyDER(srvKey))
	clientCert = tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}
	roots = x509.NewCertPool()
	roots.AddCert(ca)
	return
}

// TestSeparateListeners runs serve with the public, signing and admin
// surfaces on three listeners, the admin one over TLS requiring client
// certificates: each listener serves only its surface, and the admin API
// refuses a client without a certificate at the TLS handshake.
func TestSeparateListeners(t *testing.T) {
	e := newLifecycleEnv(t, "")
	pki := t.TempDir()
	caFile, certFile, keyFile, clientCert, roots := testPKI(t, pki)
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(caPEM)
	fp := sha256.Sum256(block.Bytes)
	principals := filepath.Join(pki, "principals.json")
	entry := func(listener, ca string) string {
		return `[{"listener":"` + listener + `","ca_sha256":"` + ca + `","common_name":"officer-1","name":"alice","scopes":["audit:read"]}]`
	}
	// Every entry is bound to a listener that verifies client certificates
	// and to a CA of that listener's bundle (issue 13); serve refuses others.
	for _, bad := range []struct{ text, want string }{
		{`[{"common_name":"officer-1","name":"alice","scopes":["audit:read"]}]`, "needs listener, ca_sha256"},
		{entry("sign", hex.EncodeToString(fp[:])), "verifies no client certificates"},
		{entry("admin", strings.Repeat("ab", 32)), "is no certificate of --admin-client-ca"},
		{entry("public", hex.EncodeToString(fp[:])), `must be "sign" or "admin"`},
		{strings.Replace(entry("admin", hex.EncodeToString(fp[:])), `"alice"`, `"Alice"`, 1), "must be lower-case"},
	} {
		if err := os.WriteFile(principals, []byte(bad.text), 0o600); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := runCLI(t, e.env, "serve", "--data-dir", e.dir, "--kek-file", e.kek, "--listen", "127.0.0.1:0",
			"--admin-listen", "127.0.0.1:0", "--admin-tls-cert", certFile, "--admin-tls-key", keyFile, "--admin-client-ca", caFile,
			"--client-principals", principals)
		if code != 1 || !strings.Contains(errOut, bad.want) {
			t.Errorf("principals %s: exit %d, stderr %q, want %q", bad.text, code, errOut, bad.want)
		}
	}
	if err := os.WriteFile(principals, []byte(entry("admin", hex.EncodeToString(fp[:]))), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, e.env, "--data-dir", e.dir, "--kek-file", e.kek,
		"--sign-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--admin-tls-cert", certFile, "--admin-tls-key", keyFile, "--admin-client-ca", caFile,
		"--client-principals", principals)
	if srv.URL == srv.SignURL || srv.URL == srv.AdminURL || !strings.HasPrefix(srv.AdminURL, "https://") {
		t.Fatalf("listeners: public %s sign %s admin %s", srv.URL, srv.SignURL, srv.AdminURL)
	}
	ctx := context.Background()
	admin := client.New(srv.AdminURL, e.token)
	admin.HTTP = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS12}}}
	if _, _, err := admin.CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se"}); err != nil {
		t.Fatalf("admin over mutual TLS: %v", err)
	}
	// The certificate alone (no token) is the principal "alice" with
	// audit:read: it reads the audit trail and may not create keys.
	certOnly := client.New(srv.AdminURL, "")
	certOnly.HTTP = admin.HTTP
	var audit struct {
		Events []struct{ Action string } `json:"events"`
	}
	if err := certOnly.Do(ctx, http.MethodGet, "/v1/audit", nil, &audit); err != nil || len(audit.Events) == 0 {
		t.Fatalf("audit with a client certificate as principal: %v %+v", err, audit)
	}
	if _, _, err := certOnly.CreateKey(ctx, client.CreateKeyRequest{Name: "other", Issuer: "other.example"}); err == nil ||
		err.(*client.Error).Status != http.StatusForbidden {
		t.Fatalf("certificate principal without admin:keys created a key: %v", err)
	}
	// Without a client certificate the handshake fails.
	noCert := client.New(srv.AdminURL, e.token)
	noCert.HTTP = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	if _, err := noCert.ListKeys(ctx); err == nil {
		t.Fatal("admin API answered a client without a certificate")
	}
	// Signing works on its listener only; admin routes are not on it nor on the public one.
	waitFor(t, 5*time.Second, "the signing listener knows the key", func() bool {
		_, err := client.New(srv.SignURL, e.token).Sign(ctx, "villa", map[string]any{"a": 1}, "")
		return err == nil
	})
	for _, c := range []struct {
		base, what string
		call       func(*client.Client) error
	}{
		{srv.URL, "sign on the public listener", func(c *client.Client) error { _, err := c.Sign(ctx, "villa", map[string]any{"a": 1}, ""); return err }},
		{srv.URL, "admin on the public listener", func(c *client.Client) error { _, err := c.ListKeys(ctx); return err }},
		{srv.SignURL, "admin on the signing listener", func(c *client.Client) error { _, err := c.ListKeys(ctx); return err }},
		{srv.SignURL, "JWKS on the signing listener", func(c *client.Client) error { _, err := c.JWKS(ctx, "villa"); return err }},
	} {
		err := c.call(client.New(c.base, e.token))
		if ce, ok := err.(*client.Error); !ok || ce.Status != http.StatusNotFound || ce.Code != "not_found" {
			t.Errorf("%s: %v, want 404 not_found", c.what, err)
		}
	}
	if _, err := client.New(srv.URL, "").JWKS(ctx, "villa"); err != nil {
		t.Fatalf("JWKS on the public listener: %v", err)
	}
}
