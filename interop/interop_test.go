package interop_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/pkcs11"
	"github.com/keysvc/keysvc/backends/pkcs11/softhsmtest"
	"github.com/keysvc/keysvc/backends/software"
	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/internal/pgtest"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// The deployment: two issuers, four keys, both algorithms on each issuer
// (the second key of an issuer shares it, VRP K5).
// villa-transport lives in a PKCS#11 token (SoftHSM2), the others in the
// software backend: the README's SoftHSM example, a second key of an
// issuer in another backend.
var keys = []struct{ name, issuer, alg, backend string }{
	{"villa", "villaakerlyckan.se", "EdDSA", software.Kind}, // oldest: the default key
	{"villa-transport", "villaakerlyckan.se", "ES256", pkcs11.Kind},
	{"shop", "example.com", "ES256", software.Kind},
	{"shop-ed", "example.com", "EdDSA", software.Kind},
}

var issuers = []string{"villaakerlyckan.se", "example.com"}

// deployment is keysvc's API in-process behind TLS with a certificate for
// every issuer, and an HTTPS client that reaches it for any of their
// names (what DNS would do for the issuers' domains).
type deployment struct {
	t      *testing.T
	srv    *httptest.Server
	caPEM  []byte
	client *http.Client
	signer string // token with sign:*
	admin  string // token with admin:keys and admin:revoke
}

func newDeployment(t *testing.T, postgres bool) *deployment {
	t.Helper()
	ctx := context.Background()
	cfg := store.Config{SQLitePath: filepath.Join(t.TempDir(), "keysvc.db")}
	if postgres {
		cfg = store.Config{PostgresURL: pgtest.URL(t)}
	}
	if _, err := store.Migrate(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kek := make([]byte, software.KEKSize)
	if _, err := rand.Read(kek); err != nil {
		t.Fatal(err)
	}
	sw, err := software.New(kek)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	tk := softhsmtest.New(t)
	hsm, err := pkcs11.Open(ctx, pkcs11.Config{ModulePath: tk.Module, TokenLabel: tk.Label, PIN: tk.PIN, Timeout: 5 * time.Second, Logger: log})
	if err != nil {
		t.Fatalf("open SoftHSM2: %v", err)
	}
	mgr := rotation.New(rotation.Config{Store: st, Backends: []backends.Backend{sw, hsm}, Logger: log})
	if err := mgr.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, _, err := mgr.CreateKey(ctx, rotation.CreateKeyRequest{Name: k.name, Issuer: k.issuer, Algorithm: k.alg, Backend: k.backend, ShareIssuer: true},
			rotation.Actor{Name: "interop", Reason: "setup"}); err != nil {
			t.Fatalf("create %s: %v", k.name, err)
		}
	}
	auth := api.NewAuthenticator(st, log)
	tok := func(scopes ...string) string {
		secret, rec, err := api.NewToken("interop", scopes, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.InTx(ctx, func(tx store.Tx) error { return tx.InsertToken(ctx, rec) }); err != nil {
			t.Fatal(err)
		}
		return secret
	}
	d := &deployment{t: t, signer: tok(api.ScopeSignAll), admin: tok(api.ScopeAdminKeys, api.ScopeAdminRevoke)}
	if err := auth.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	h := api.New(api.Config{Manager: mgr, Auth: auth, Store: st, Logger: log}).Handler()

	ca, leaf := testPKI(t, issuers)
	d.caPEM = ca
	d.srv = httptest.NewUnstartedServer(h)
	d.srv.TLS = &tls.Config{Certificates: []tls.Certificate{leaf}, MinVersion: tls.VersionTLS12}
	d.srv.StartTLS()
	t.Cleanup(func() {
		d.srv.Close()
		time.Sleep(20 * time.Millisecond) // the Authenticator's last-used updates
		_ = st.Close()
		_ = hsm.Close()
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	addr := d.srv.Listener.Addr().String()
	d.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
	return d
}

// testPKI returns a CA certificate (PEM) and a leaf for names signed by it.
func testPKI(t *testing.T, names []string) ([]byte, tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "keysvc interop CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}
}

// call sends an API request to the server's own address.
func (d *deployment) call(method, path, tok, body string) []byte {
	d.t.Helper()
	req, err := http.NewRequest(method, d.srv.URL+path, strings.NewReader(body))
	if err != nil {
		d.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		d.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return b
}

// get fetches an https URL the way a verifier does: by its host.
func (d *deployment) get(u string) []byte {
	d.t.Helper()
	resp, err := d.client.Get(u)
	if err != nil {
		d.t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		d.t.Fatalf("GET %s: %d %s", u, resp.StatusCode, b)
	}
	return b
}

type attestation struct {
	Layer  string `json:"layer"`
	Alg    string `json:"alg"`
	KID    string `json:"kid"`
	Source string `json:"source"`
	JWS    string `json:"jws"`
	key    string
	issuer string
}

// signAll makes an offer JWS and a transport attestation with every key.
// The offer's source is what a node writes (examples/vrp-node): its
// issuer's /.well-known/jwks.json.
func (d *deployment) signAll() []attestation {
	var out []attestation
	for _, k := range keys {
		var s api.SignResponse
		if err := json.Unmarshal(d.call(http.MethodPost, "/v1/keys/"+k.name+"/sign", d.signer, `{"payload":{"offer_ref":"offer:`+k.issuer+`:1","price":{"amount":"1200.00","currency":"SEK"}}}`), &s); err != nil {
			d.t.Fatal(err)
		}
		out = append(out, attestation{Layer: "offer", Alg: s.Alg, KID: s.KID, Source: "https://" + k.issuer + "/.well-known/jwks.json", JWS: s.JWS, key: k.name, issuer: k.issuer})
		var tr api.TransportResponse
		if err := json.Unmarshal(d.call(http.MethodPost, "/v1/keys/"+k.name+"/mcp-transport", d.signer, `{"tool":"get_verified_stay_offer","arguments":{"checkIn":"2026-09-02","guests":2}}`), &tr); err != nil {
			d.t.Fatal(err)
		}
		out = append(out, attestation{Layer: tr.Attestation.Layer, Alg: k.alg, KID: tr.KID, Source: tr.Attestation.Source, JWS: tr.Attestation.Signature, key: k.name, issuer: k.issuer})
	}
	return out
}

// verifyGo verifies every attestation with go-jose and lestrrat jwx, each
// reading the JWKS fetched from the attestation's source.
func (d *deployment) verifyGo(atts []attestation) {
	d.t.Helper()
	for _, a := range atts {
		body := d.get(a.Source)
		var set jose.JSONWebKeySet
		if err := json.Unmarshal(body, &set); err != nil {
			d.t.Fatalf("go-jose cannot read %s: %v", a.Source, err)
		}
		keys := set.Key(a.KID)
		if len(keys) != 1 {
			d.t.Fatalf("go-jose: %s lists %d keys with kid %s", a.Source, len(keys), a.KID)
		}
		obj, err := jose.ParseSignedCompact(a.JWS, []jose.SignatureAlgorithm{jose.EdDSA, jose.ES256})
		if err != nil {
			d.t.Fatal(err)
		}
		if _, err := obj.Verify(keys[0].Key); err != nil {
			d.t.Errorf("go-jose: %s %s %s from %s: %v", a.Layer, a.Alg, a.KID, a.Source, err)
		}
		jset, err := jwk.Fetch(context.Background(), a.Source, jwk.WithHTTPClient(d.client))
		if err != nil {
			d.t.Fatalf("jwx: fetch %s: %v", a.Source, err)
		}
		if _, err := jws.Verify([]byte(a.JWS), jws.WithKeySet(jset, jws.WithRequireKid(true))); err != nil {
			d.t.Errorf("jwx: %s %s %s from %s: %v", a.Layer, a.Alg, a.KID, a.Source, err)
		}
	}
}

// TestInterop (issue 15 acceptance): every layer (offer, transport) and
// algorithm (EdDSA, ES256) of a two-issuer, four-key deployment (one key
// in a SoftHSM2 token, three in the software backend) verifies
// with go-jose, lestrrat jwx and node jose, each fetching the JWKS over
// HTTPS from the attestation's source; did:web resolves per issuer with
// did-resolver + web-did-resolver and its keys verify the signatures; after
// a revocation, plain jose pointed at the key-history document refuses the
// revoked version and verifies its replacement. On SQLite and PostgreSQL.
func TestInterop(t *testing.T) {
	node := nodeSuite(t)
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) { testInterop(t, node, db == "postgres") })
	}
}

func testInterop(t *testing.T, node func(t *testing.T, c any), postgres bool) {
	d := newDeployment(t, postgres)
	atts := d.signAll()
	d.verifyGo(atts)

	// Revoke villa's only version (compromised a minute ago): a
	// replacement signs from then on.
	revoked := atts[0]
	body, _ := json.Marshal(map[string]string{"compromised_at": time.Now().Add(-time.Minute).UTC().Format(time.RFC3339), "reason": "interop: HSM backup leaked"})
	d.call(http.MethodPost, "/v1/versions/"+revoked.KID+"/revoke", d.admin, string(body))
	var good api.SignResponse
	if err := json.Unmarshal(d.call(http.MethodPost, "/v1/keys/villa/sign", d.signer, `{"payload":{"offer_ref":"after"}}`), &good); err != nil {
		t.Fatal(err)
	}
	if good.KID == revoked.KID {
		t.Fatalf("villa still signs with the revoked %s", revoked.KID)
	}
	var live, refused []attestation
	for _, a := range atts {
		if a.KID == revoked.KID {
			refused = append(refused, a)
		} else {
			live = append(live, a)
		}
	}
	// The replacement signs both layers; they verify like the rest.
	for _, a := range d.signAll() {
		if a.key == revoked.key {
			live = append(live, a)
		}
	}
	d.verifyGo(live)

	// go-jose reading the key history as a JWKS cannot find the revoked
	// version (ADR 0027).
	histURL := "https://villaakerlyckan.se/.well-known/vrp-key-history.json"
	var hist jose.JSONWebKeySet
	if err := json.Unmarshal(d.get(histURL), &hist); err != nil {
		t.Fatal(err)
	}
	if len(hist.Key(revoked.KID)) != 0 || len(hist.Key(good.KID)) != 1 {
		t.Fatalf("go-jose reads the key history %s with the revoked %s under keys", histURL, revoked.KID)
	}
	if !bytes.Contains(d.get(histURL), []byte(`"vrp_revoked_keys"`)) {
		t.Fatal("the key history has no vrp_revoked_keys")
	}

	type didCase struct {
		DID          string   `json:"did"`
		KIDs         []string `json:"kids"`
		Absent       []string `json:"absent"`
		Attestations []int    `json:"attestations"`
	}
	var dids []didCase
	for _, iss := range issuers {
		dc := didCase{DID: "did:web:" + iss, KIDs: []string{}, Absent: []string{}, Attestations: []int{}}
		for i, a := range live {
			if a.issuer == iss {
				dc.Attestations = append(dc.Attestations, i)
				if !contains(dc.KIDs, a.KID) {
					dc.KIDs = append(dc.KIDs, a.KID)
				}
			}
		}
		if iss == revoked.issuer {
			dc.Absent = append(dc.Absent, revoked.KID)
		}
		dids = append(dids, dc)
	}
	// Detached signatures (ADR 0028) through the Go client, one per
	// algorithm and issuer.
	cl := client.New(d.srv.URL, d.signer)
	cl.HTTP = d.client
	var detached []map[string]string
	for _, k := range keys {
		if k.name == revoked.key {
			continue
		}
		r, err := cl.SignDetached(context.Background(), k.name, map[string]any{"version": 1, "alg": k.alg,
			"backLink": map[string]string{"attestationNonce": "n-1"}, "receiptAsserted": map[string]any{"iss": k.issuer, "iat": 1764583200}})
		if err != nil {
			t.Fatalf("SignDetached %s: %v", k.name, err)
		}
		detached = append(detached, map[string]string{"alg": r.Alg, "kid": r.KID, "source": "https://" + k.issuer + "/.well-known/jwks.json",
			"signed_b64u": r.SignedB64, "signature_hex": r.SignatureHex})
	}
	addr := d.srv.Listener.Addr().(*net.TCPAddr)
	node(t, map[string]any{
		"connect":      map[string]any{"host": addr.IP.String(), "port": addr.Port},
		"ca":           string(d.caPEM),
		"attestations": live,
		"refused":      refused,
		"detached":     detached,
		"dids":         dids,
		"history":      map[string]string{"url": histURL, "revoked_jws": revoked.JWS, "revoked_kid": revoked.KID, "good_jws": good.JWS},
	})
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// nodeSuite returns a runner of interop/jose/verify.mjs. Outside CI a
// missing node or npm ci skips loudly; under CI=true it fails.
func nodeSuite(t *testing.T) func(t *testing.T, c any) {
	t.Helper()
	missing := func(err error) {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("interop: %v (CI=true: node and `npm ci --prefix interop/jose` are required)", err)
		}
		t.Skipf("SKIPPING interop with node: %v (run `npm ci --prefix interop/jose`; under CI=true this fails)", err)
	}
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		missing(err)
	}
	dir, err := filepath.Abs("jose")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"jose", "did-resolver", "web-did-resolver"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", m, "package.json")); err != nil {
			missing(errors.New("interop/jose/node_modules/" + m + " is not installed"))
		}
	}
	return func(t *testing.T, c any) {
		t.Helper()
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), "case.json")
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, nodeBin, filepath.Join(dir, "verify.mjs"), f)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		t.Logf("node jose / did-resolver:\n%s", out)
		if err != nil {
			t.Fatalf("interop/jose/verify.mjs: %v", err)
		}
		if !strings.Contains(string(out), "checks passed") {
			t.Fatal("verify.mjs did not finish")
		}
	}
}
