package main

import (
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"
)

// swapCert copies the certificate and key files of another test PKI over
// certFile and keyFile and moves their modification time forward, as a
// renewal would.
func swapCert(t *testing.T, fromCert, fromKey, certFile, keyFile string, at time.Time) {
	t.Helper()
	for _, p := range [][2]string{{fromCert, certFile}, {fromKey, keyFile}} {
		b, err := os.ReadFile(p[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p[1], at, at); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCertReloader (issue 15): a listener's certificate is loaded again
// once its files change, checked at most once per second; a pair that
// does not load keeps the previous certificate.
func TestCertReloader(t *testing.T) {
	_, cert1, key1, _, _ := testPKI(t, t.TempDir())
	_, cert2, key2, _, _ := testPKI(t, t.TempDir())
	want := func(certFile, keyFile string) []byte {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		return c.Certificate[0]
	}
	first, second := want(cert1, key1), want(cert2, key2)
	dir := t.TempDir()
	certFile, keyFile := dir+"/tls.pem", dir+"/tls-key.pem"
	swapCert(t, cert1, key1, certFile, keyFile, time.Now().Add(-time.Hour))
	now := time.Now()
	r, err := newCertReloader(certFile, keyFile, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	r.now = func() time.Time { return now }
	get := func() []byte {
		c, err := r.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.Certificate[0]
	}
	if !bytes.Equal(get(), first) {
		t.Fatal("not the loaded certificate")
	}
	swapCert(t, cert2, key2, certFile, keyFile, time.Now())
	if !bytes.Equal(get(), first) {
		t.Fatal("reloaded before a second passed")
	}
	now = now.Add(1100 * time.Millisecond)
	if !bytes.Equal(get(), second) {
		t.Fatal("the renewed certificate was not loaded")
	}
	// A half-written renewal (key of another pair) keeps serving the last
	// good certificate, and is retried.
	swapCert(t, cert1, key2, certFile, keyFile, time.Now().Add(time.Minute))
	now = now.Add(1100 * time.Millisecond)
	if !bytes.Equal(get(), second) {
		t.Fatal("a mismatched pair replaced the certificate")
	}
	swapCert(t, cert1, key1, certFile, keyFile, time.Now().Add(2*time.Minute))
	now = now.Add(1100 * time.Millisecond)
	if !bytes.Equal(get(), first) {
		t.Fatal("the completed renewal was not loaded")
	}
	if _, err := newCertReloader(certFile, key2, slog.Default()); err == nil {
		t.Fatal("a mismatched pair loaded at startup")
	}
}

// TestPublicListenerTLS (issue 15): serve --tls-cert/--tls-key serves the
// public documents over HTTPS (did:web needs it on the issuer's domain)
// and picks up a renewed certificate without a restart.
func TestPublicListenerTLS(t *testing.T) {
	e := newLifecycleEnv(t, "")
	pki := t.TempDir()
	_, cert1, key1, _, roots := testPKI(t, t.TempDir())
	certFile, keyFile := pki+"/tls.pem", pki+"/tls-key.pem"
	swapCert(t, cert1, key1, certFile, keyFile, time.Now().Add(-time.Hour))
	if _, errOut, code := runCLI(t, e.env, "serve", "--data-dir", e.dir, "--kek-file", e.kek, "--listen", "127.0.0.1:0", "--tls-cert", certFile); code != 1 ||
		!bytesContains(errOut, "--tls-cert and --tls-key go together") {
		t.Fatalf("--tls-cert alone: exit %d, %s", code, errOut)
	}
	srv := startServer(t, e.env, "--data-dir", e.dir, "--kek-file", e.kek, "--tls-cert", certFile, "--tls-key", keyFile,
		"--sign-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	if len(srv.URL) < 8 || srv.URL[:8] != "https://" {
		t.Fatalf("public listener %s is not https", srv.URL)
	}
	fetch := func() ([]byte, *http.Response) {
		t.Helper()
		cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
		resp, err := cl.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatalf("GET over TLS: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return b, resp
	}
	body, resp := fetch()
	if resp.StatusCode != http.StatusOK || !bytesContains(string(body), `"ok"`) {
		t.Fatalf("healthz over TLS: %d %s", resp.StatusCode, body)
	}
	c1, _ := tls.LoadX509KeyPair(cert1, key1)
	if !bytes.Equal(resp.TLS.PeerCertificates[0].Raw, c1.Certificate[0]) {
		t.Fatal("served another certificate")
	}
	// Renewal: another CA's certificate now; the client trusts both.
	ca2, cert2, key2, _, _ := testPKI(t, t.TempDir())
	pem2, err := os.ReadFile(ca2)
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(pem2)
	swapCert(t, cert2, key2, certFile, keyFile, time.Now())
	c2, _ := tls.LoadX509KeyPair(cert2, key2)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, resp := fetch()
		if bytes.Equal(resp.TLS.PeerCertificates[0].Raw, c2.Certificate[0]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the renewed certificate was not served within 10 s")
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func bytesContains(s, sub string) bool { return bytes.Contains([]byte(s), []byte(sub)) }
