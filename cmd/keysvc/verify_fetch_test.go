package main

import (
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/internal/testvectors"
)

// TestVerifyFetchStaysPut (issue 13, partial): `keysvc verify --jwks URL`
// follows a redirect only within the same origin (scheme, host and port):
// one to another host or port, or from https down to http, is refused; and
// no error echoes the credentials of a URL (userinfo, query).
func TestVerifyFetchStaysPut(t *testing.T) {
	var v cliVector
	if err := json.Unmarshal(testvectors.Read(t, "vrp-receipt-v1/01-offer-transport-verified.json"), &v); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	receipt := filepath.Join(dir, "receipt.json")
	if err := os.WriteFile(receipt, v.Receipt, 0o600); err != nil {
		t.Fatal(err)
	}
	serveJWKS := func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/jwks.json":
			w.Header().Set("Content-Type", "application/jwk-set+json")
			_, _ = w.Write(v.JWKS)
		default:
			http.NotFound(w, r)
		}
	}
	other := httptest.NewServer(http.HandlerFunc(serveJWKS))
	defer other.Close()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/elsewhere":
			http.Redirect(w, r, other.URL+"/jwks.json", http.StatusFound)
		case "/here":
			http.Redirect(w, r, "/jwks.json", http.StatusMovedPermanently)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		default:
			serveJWKS(w, r)
		}
	}))
	defer origin.Close()
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://"+r.Host+"/jwks.json", http.StatusFound)
	}))
	defer secure.Close()
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: secure.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"SSL_CERT_FILE=" + caFile}
	verify := func(url string) (string, int) {
		_, errOut, code := runCLI(t, env, "verify", receipt, "--jwks", url, "--at", v.Now)
		return errOut, code
	}
	if errOut, code := verify(origin.URL + "/jwks.json"); code != 0 {
		t.Fatalf("direct fetch: exit %d %s", code, errOut)
	}
	if errOut, code := verify(origin.URL + "/here"); code != 0 {
		t.Fatalf("same-origin redirect: exit %d %s", code, errOut)
	}
	for _, c := range []struct{ what, url, want string }{
		{"redirect to another host", origin.URL + "/elsewhere", "redirect to another origin"},
		{"redirect from https to http", secure.URL + "/jwks.json", "redirect to another origin"},
		{"redirect loop", origin.URL + "/loop", "redirects"},
	} {
		errOut, code := verify(c.url)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, stderr %q, want exit 1 mentioning %q", c.what, code, errOut, c.want)
		}
	}
	withCreds := strings.Replace(origin.URL, "http://", "http://officer:hunter2pw@", 1)
	for _, url := range []string{
		withCreds + "/missing?access_token=s3cr3tq&x=1",
		"http://officer:hunter2pw@127.0.0.1:20998/jwks.json?access_token=s3cr3tq", // nothing listens
		withCreds + "/elsewhere?access_token=s3cr3tq",
	} {
		errOut, code := verify(url)
		if code != 1 {
			t.Errorf("%s: exit %d", url, code)
		}
		if strings.Contains(errOut, "hunter2pw") || strings.Contains(errOut, "s3cr3tq") {
			t.Errorf("an error echoes URL credentials: %s", errOut)
		}
	}
}
