package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/software"
	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/jwksserve"
	"github.com/keysvc/keysvc/store"
)

// TestNoSecretsInOutput drives a full lifecycle through the real binary —
// dev mode, tokens, keys, signing, rotation, revocation, bad requests — and
// searches everything the processes printed and every HTTP response for the
// secrets involved: the KEK, every private key seed, the API tokens and a
// wrong token an attacker presented. Only the two places meant to show a
// token once (`tokens create` stdout, the --dev banner) may contain it.
func TestNoSecretsInOutput(t *testing.T) {
	dir := t.TempDir()
	kekPath := writeKEK(t, dir)
	var seen bytes.Buffer // everything that must stay secret-free
	record := func(parts ...string) {
		for _, p := range parts {
			seen.WriteString(p)
			seen.WriteByte('\n')
		}
	}
	out, errOut, code := runCLI(t, nil, "migrate", "--data-dir", dir)
	record(out, errOut)
	if code != 0 {
		t.Fatalf("migrate: %s", errOut)
	}
	tokOut, errOut, code := runCLI(t, nil, "tokens", "create", "--name", "officer", "--data-dir", dir,
		"--scope", "sign:*", "--scope", "admin:keys", "--scope", "admin:revoke", "--scope", "audit:read")
	record(errOut) // stdout is the one place the token is shown
	if code != 0 {
		t.Fatal(errOut)
	}
	token := strings.TrimSpace(tokOut)
	srv := startServer(t, nil, "--data-dir", dir, "--kek-file", kekPath)
	ctx := context.Background()
	c := client.New(srv.URL, token)

	do := func(method, path, tok, ctype, body string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var hdr bytes.Buffer
		_ = resp.Header.Write(&hdr)
		record(hdr.String(), string(b))
	}
	if _, _, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se"}); err != nil {
		t.Fatal(err)
	}
	const wrongToken = "ksv_ATTACKERGUESS0123456789abcdefghijklmnopqrs"
	for _, r := range []struct{ method, path, tok, ctype, body string }{
		{"POST", "/v1/keys/villa/sign", token, "application/json", `{"payload":{"a":1}}`},
		{"POST", "/v1/keys/villa/mcp-transport", token, "application/json", `{"tool":"t","arguments":{"checkIn":"2026-09-02"}}`},
		{"POST", "/v1/keys/villa/sign", wrongToken, "application/json", `{"payload":{"a":1}}`},
		{"POST", "/v1/keys/villa/sign", token, "text/plain", `x`},
		{"POST", "/v1/keys/villa/sign", token, "application/json", `{"payload":{"a":1,"a":2}}`},
		{"POST", "/v1/keys/villa/sign", token, "application/json", `{"payload":{"a":1},"d":"` + token + `"}`},
		{"GET", "/v1/keys", token, "", ""},
		{"GET", "/v1/keys/villa/versions", token, "", ""},
		{"GET", "/v1/audit", token, "", ""},
		{"GET", "/.well-known/jwks.json", "", "", ""},
		{"GET", "/v1/keys/villa/history.json", "", "", ""},
		{"GET", "/.well-known/did.json", "", "", ""},
	} {
		do(r.method, r.path, r.tok, r.ctype, r.body)
	}
	if _, _, err := c.Rotate(ctx, "villa", "test"); err != nil {
		t.Fatal(err)
	}
	vs, err := c.Versions(ctx, "villa")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Revoke(ctx, vs[0].KID, time.Now().UTC().Format(time.RFC3339), "test"); err != nil {
		t.Fatal(err)
	}
	do("GET", "/v1/keys/villa/versions", token, "", "")
	for _, args := range [][]string{
		{"keys", "list", "--server", srv.URL}, {"keys", "versions", "villa", "--server", srv.URL, "--json"},
		{"audit", "list", "--data-dir", dir, "--json"}, {"audit", "verify", "--data-dir", dir}, {"tokens", "list", "--data-dir", dir},
	} {
		o, e, _ := runCLI(t, []string{"KEYSVC_TOKEN=" + token}, args...)
		record(o, e)
	}
	srv.stop(t)
	record(srv.stderr.String())

	// Dev mode: the banner shows the dev token once; the logs must not.
	devDir := t.TempDir()
	dev := startServer(t, nil, "--dev", "--data-dir", devDir)
	time.Sleep(500 * time.Millisecond)
	dev.stop(t)
	record(dev.stderr.String())
	devToken, err := os.ReadFile(filepath.Join(devDir, devTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	devKEK, err := software.ReadKEKFile(filepath.Join(devDir, "kek"))
	if err != nil {
		t.Fatal(err)
	}

	// The secrets.
	kek, err := software.ReadKEKFile(kekPath)
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string][]byte{"API token": []byte(token), "wrong token": []byte(wrongToken), "dev token": bytes.TrimSpace(devToken)}
	addKey := func(name string, k []byte) {
		secrets[name+" (raw)"] = k
		secrets[name+" (hex)"] = []byte(hex.EncodeToString(k))
		secrets[name+" (base64)"] = []byte(base64.StdEncoding.EncodeToString(k))
		secrets[name+" (base64url)"] = []byte(base64.RawURLEncoding.EncodeToString(k))
	}
	addKey("KEK", kek)
	addKey("dev KEK", devKEK)
	seeds := seedsOf(t, filepath.Join(dir, "keysvc.db"), kek)
	seeds = append(seeds, seedsOf(t, filepath.Join(devDir, "keysvc.db"), devKEK)...)
	if len(seeds) != 3 { // villa: created + rotated; dev: one
		t.Fatalf("opened %d private keys, want 3", len(seeds))
	}
	for i, s := range seeds {
		addKey("private key seed "+string(rune('A'+i)), s)
	}
	all := seen.Bytes()
	if len(all) < 2000 {
		t.Fatalf("captured only %d bytes; the test is not looking at the output", len(all))
	}
	for name, s := range secrets {
		if bytes.Contains(all, s) {
			t.Errorf("%s appears in process output or an HTTP response", name)
		}
	}
}

// seedsOf opens every sealed private key in a SQLite key history.
func seedsOf(t *testing.T, dbPath string, kek []byte) [][]byte {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{SQLitePath: dbPath})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := software.New(kek)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := st.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, k := range keys {
		vs, err := st.ListVersions(ctx, k.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			pub, err := jwksserve.ParsePublicJWK(v.PublicJWK)
			if err != nil {
				t.Fatal(err)
			}
			s, err := b.Signer(ctx, v.KID, backends.Handle{Ref: v.BackendRef, Sealed: v.SealedPrivateKey, Public: pub, KeyName: v.KeyName})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, s.(ed25519.PrivateKey).Seed())
		}
	}
	return out
}
