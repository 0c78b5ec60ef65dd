package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/backends/pkcs11/softhsmtest"
	"github.com/keysvc/keysvc/client"
)

// pkcs11Args are the serve / backend flags for a SoftHSM2 test token.
func pkcs11Args(tk softhsmtest.Token, pinFile string) []string {
	return []string{"--pkcs11-module", tk.Module, "--pkcs11-token-label", tk.Label, "--pkcs11-pin-file", pinFile, "--pkcs11-timeout", "2s"}
}

func writePIN(t *testing.T, dir, pin string) string {
	t.Helper()
	p := filepath.Join(dir, "pkcs11-pin")
	if err := os.WriteFile(p, []byte(pin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPKCS11EndToEnd runs `keysvc serve` with the pkcs11 backend on a
// SoftHSM2 token: keys created with "backend":"pkcs11" sign over HTTP
// (verified with crypto/ed25519, crypto/ecdsa and through the JWKS), rotate
// by hand and by schedule and are revoked as with any backend; deleting the
// token gives backend_unavailable and an unready /readyz until it is back;
// `keysvc backend check` finds Ed25519 and ES256 working.
func TestPKCS11EndToEnd(t *testing.T) {
	tk := softhsmtest.New(t)
	e := newLifecycleEnv(t, "")
	pinFile := writePIN(t, e.dir, tk.PIN)
	srv := startServer(t, []string{tk.Env()}, append([]string{"--data-dir", e.dir, "--kek-file", e.kek, "--jwks-max-age", "0s",
		"--scheduler-interval", "100ms", "--reload-interval", "500ms"}, pkcs11Args(tk, pinFile)...)...)
	ctx := context.Background()
	c := client.New(srv.URL, e.token)
	today := time.Now().UTC().Format("2006-01-02")

	// Ed25519 (the default algorithm) in the token.
	k, v1, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se", Backend: "pkcs11", Reason: "hsm"})
	if err != nil {
		t.Fatal(err)
	}
	kid1 := "villaakerlyckan.se-" + today + "-01"
	if k.Backend != "pkcs11" || v1.KID != kid1 || v1.Alg != "EdDSA" {
		t.Fatalf("created %+v %+v", k, v1)
	}
	wantRef := "pkcs11:token=keysvc-test;object=" + kid1 + ";id=%"
	if !strings.HasPrefix(v1.BackendRef, wantRef) || !strings.HasSuffix(v1.BackendRef, ";type=private?module-path="+tk.Module) {
		t.Fatalf("backend_ref = %s", v1.BackendRef)
	}
	res, err := c.Sign(ctx, "villa", map[string]any{"offer_id": "offer:villaakerlyckan.se:2026-09-02/05"}, "JWT")
	if err != nil {
		t.Fatal(err)
	}
	if res.KID != kid1 {
		t.Fatalf("signed with %s", res.KID)
	}
	pub, err := base64.RawURLEncoding.DecodeString(v1.X)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		t.Fatalf("x = %q", v1.X)
	}
	parts := strings.Split(res.JWS, ".")
	sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
	if !ed25519.Verify(pub, []byte(parts[0]+"."+parts[1]), sig) {
		t.Fatal("the HSM's signature does not verify with crypto/ed25519")
	}
	jwks, err := c.JWKS(ctx, "villa")
	if err != nil {
		t.Fatal(err)
	}
	if k := jwksByKID(t, jwks)[kid1]; k == nil || !verifyJWS(t, k["x"], res.JWS) {
		t.Fatal("the HSM's signature does not verify through the JWKS")
	}
	tr, err := c.MCPTransport(ctx, "villa", client.TransportRequest{Tool: "get_verified_stay_offer", Arguments: map[string]any{"checkIn": "2026-09-02", "guests": 2}})
	if err != nil || !verifyJWS(t, jwksByKID(t, jwks)[kid1]["x"], tr.JWS) {
		t.Fatalf("transport assertion: %v", err)
	}

	// ES256 in the token.
	_, ev, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "vaara", Issuer: "vaara.example", Algorithm: "ES256", Backend: "pkcs11"})
	if err != nil {
		t.Fatal(err)
	}
	esRes, err := c.Sign(ctx, "vaara", map[string]any{"toolName": "x"}, "")
	if err != nil {
		t.Fatal(err)
	}
	esJWKS, err := c.JWKS(ctx, "vaara")
	if err != nil {
		t.Fatal(err)
	}
	if k := jwksByKID(t, esJWKS)[ev.KID]; k == nil || !verifyES256(t, k["x"], k["y"], esRes.JWS) {
		t.Fatal("the HSM's ES256 signature does not verify through the JWKS")
	}

	// Rotation by hand: the new version is generated in the token too.
	active, retired, err := c.Rotate(ctx, "villa", "routine")
	if err != nil {
		t.Fatal(err)
	}
	kid2 := "villaakerlyckan.se-" + today + "-02"
	if active.KID != kid2 || retired.KID != kid1 || !strings.HasPrefix(active.BackendRef, "pkcs11:token=keysvc-test;object="+kid2+";") {
		t.Fatalf("rotate: active %+v retired %+v", active, retired)
	}
	res2, err := c.Sign(ctx, "villa", map[string]any{"n": 2}, "")
	if err != nil || res2.KID != kid2 {
		t.Fatalf("sign after rotation: %+v %v", res2, err)
	}
	jwks, _ = c.JWKS(ctx, "villa")
	byKID := jwksByKID(t, jwks)
	if byKID[kid1]["vrp_key_status"] != "retired" || !verifyJWS(t, byKID[kid1]["x"], res.JWS) || !verifyJWS(t, byKID[kid2]["x"], res2.JWS) {
		t.Fatalf("JWKS after rotation: %s", jwks)
	}

	// Revocation of the retired version.
	revoked, _, err := c.Revoke(ctx, kid1, time.Now().UTC().Format(time.RFC3339), "test: compromised")
	if err != nil || revoked.Status != "revoked" {
		t.Fatalf("revoke: %+v %v", revoked, err)
	}
	history, err := c.History(ctx, "villa")
	if err != nil || jwksByKID(t, history)[kid1]["vrp_key_status"] != "revoked" {
		t.Fatalf("history after revocation: %s %v", history, err)
	}

	// Destruction of the revoked version's key material: the token's
	// objects go; the version stays in the history; kid2 still signs.
	d, err := c.DestroyVersion(ctx, kid1, "test: no longer needed", 0)
	if err != nil || d.Backend != "pkcs11" || d.Version.MaterialDestroyedAt == "" || d.AlreadyDestroyed || !strings.Contains(d.Note, "private key object destroyed") {
		t.Fatalf("destroy: %+v %v", d, err)
	}
	if _, err := c.DestroyVersion(ctx, kid1, "again", 0); err == nil || !strings.Contains(err.Error(), "invalid_transition") {
		t.Fatalf("destroy twice: %v", err)
	}
	if res3, err := c.Sign(ctx, "villa", map[string]any{"n": 3}, ""); err != nil || res3.KID != kid2 {
		t.Fatalf("sign after destroying %s: %+v %v", kid1, res3, err)
	}
	if history, err = c.History(ctx, "villa"); err != nil || !verifyJWS(t, jwksByKID(t, history)[kid1]["x"], res.JWS) {
		t.Fatalf("a signature of the destroyed %s does not verify from the history: %v", kid1, err)
	}

	// The scheduler rotates a pkcs11 key like any other.
	if _, _, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "sched", Issuer: "sched.example", Backend: "pkcs11",
		Policy: &client.Policy{RotationPeriod: "2s", Prepublish: "1s"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the scheduler rotated the pkcs11 key", func() bool {
		vs, err := c.Versions(ctx, "sched")
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if v.Status == "retired" {
				return true
			}
		}
		return false
	})
	sres, err := c.Sign(ctx, "sched", map[string]any{"n": 3}, "")
	if err != nil {
		t.Fatal(err)
	}
	sjwks, _ := c.JWKS(ctx, "sched")
	if k := jwksByKID(t, sjwks)[sres.KID]; k == nil || !verifyJWS(t, k["x"], sres.JWS) {
		t.Fatal("signature after a scheduled rotation does not verify")
	}

	// The token disappears under the running service, then comes back.
	if code := readyz(t, srv.URL); code != http.StatusOK {
		t.Fatalf("/readyz = %d before the token is deleted", code)
	}
	backup := tk.Backup(t)
	tk.Util(t, "--delete-token", "--token", tk.Label)
	start := time.Now()
	_, err = c.Sign(ctx, "villa", map[string]any{"n": 4}, "")
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable || apiErr.Code != "backend_unavailable" {
		t.Fatalf("sign without the token: %v, want 503 backend_unavailable", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("sign without the token took %s (timeout 2s)", took)
	}
	if code := readyz(t, srv.URL); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d without the token, want 503", code)
	}
	tk.Restore(t, backup)
	waitFor(t, 15*time.Second, "signing works again after the token is restored", func() bool {
		_, err := c.Sign(ctx, "villa", map[string]any{"n": 5}, "")
		return err == nil
	})
	if code := readyz(t, srv.URL); code != http.StatusOK {
		t.Fatalf("/readyz = %d after the token came back", code)
	}
	srv.stop(t)

	// keysvc backend check, with the PIN from the environment this time.
	env := []string{tk.Env(), "KEYSVC_PKCS11_PIN=" + tk.PIN}
	out, errOut, code := runCLI(t, env, "backend", "check", "--pkcs11-module", tk.Module, "--pkcs11-token-label", tk.Label)
	if code != 0 || !strings.Contains(out, "\nEd25519: ok\n") || !strings.Contains(out, "\nES256: ok\n") ||
		!strings.Contains(out, "label:        keysvc-test") || !strings.Contains(out, "manufacturer: SoftHSM project") ||
		!strings.Contains(out, "CKM_EDDSA") || !strings.Contains(out, "CKM_EC_EDWARDS_KEY_PAIR_GEN") {
		t.Fatalf("backend check: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("keysvc backend check:\n%s", out)

	// keysvc backend orphans: every object is known; a key pair made
	// outside keysvc's transaction shows up, and nothing is deleted.
	out, errOut, code = runCLI(t, env, append([]string{"backend", "orphans", "--data-dir", e.dir}, "--pkcs11-module", tk.Module, "--pkcs11-token-label", tk.Label)...)
	if code != 0 || !strings.Contains(out, "no orphaned key objects") {
		t.Fatalf("backend orphans: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := exec.LookPath("pkcs11-tool"); err == nil {
		orphan := "villaakerlyckan.se-" + today + "-99"
		if b, err := exec.Command("pkcs11-tool", "--module", tk.Module, "--token-label", tk.Label, "--login", "--pin", tk.PIN,
			"--keypairgen", "--key-type", "EC:edwards25519", "--label", orphan, "--id", "99").CombinedOutput(); err != nil {
			t.Fatalf("pkcs11-tool --keypairgen: %v\n%s", err, b)
		}
		for i := 0; i < 2; i++ {
			out, errOut, code = runCLI(t, env, "backend", "orphans", "--data-dir", e.dir, "--pkcs11-module", tk.Module, "--pkcs11-token-label", tk.Label)
			if code != 0 || strings.TrimSpace(out) != orphan {
				t.Fatalf("backend orphans: exit %d\n%s%s", code, out, errOut)
			}
		}
	}
}

// TestPKCS11StartupErrors: serve and backend check refuse to start with a
// wrong PIN or an unknown token label, saying so, and never print the PIN.
func TestPKCS11StartupErrors(t *testing.T) {
	tk := softhsmtest.New(t)
	e := newLifecycleEnv(t, "")
	wrong := "86420"
	pinFile := writePIN(t, e.dir, wrong)
	serve := append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", e.dir, "--kek-file", e.kek}, pkcs11Args(tk, pinFile)...)
	_, errOut, code := runCLI(t, []string{tk.Env()}, serve...)
	if code != 1 || !strings.Contains(errOut, `PKCS#11 login to token "keysvc-test" failed: incorrect PIN`) || strings.Contains(errOut, wrong) {
		t.Fatalf("serve with a wrong PIN: exit %d\n%s", code, errOut)
	}
	env := []string{tk.Env(), "KEYSVC_PKCS11_PIN=" + wrong}
	out, errOut, code := runCLI(t, env, "backend", "check", "--pkcs11-module", tk.Module, "--pkcs11-token-label", tk.Label)
	if code != 1 || !strings.Contains(errOut, "failed: incorrect PIN") || strings.Contains(out+errOut, wrong) {
		t.Fatalf("backend check with a wrong PIN: exit %d\n%s%s", code, out, errOut)
	}
	env = []string{tk.Env(), "KEYSVC_PKCS11_PIN=" + tk.PIN}
	_, errOut, code = runCLI(t, env, "backend", "check", "--pkcs11-module", tk.Module, "--pkcs11-token-label", "no-such-token")
	if code != 1 || !strings.Contains(errOut, `no PKCS#11 token labelled "no-such-token" in `+tk.Module+`; tokens present: "keysvc-test"`) {
		t.Fatalf("backend check with an unknown token: exit %d\n%s", code, errOut)
	}
	_, errOut, code = runCLI(t, env, "backend", "check", "--pkcs11-module", "/nonexistent/libhsm.so", "--pkcs11-token-label", tk.Label)
	if code != 1 || !strings.Contains(errOut, "PKCS#11 module /nonexistent/libhsm.so not found") {
		t.Fatalf("backend check with a missing module: exit %d\n%s", code, errOut)
	}
	// No PIN at all; and never as a flag.
	_, errOut, code = runCLI(t, []string{tk.Env()}, "backend", "check", "--pkcs11-module", tk.Module, "--pkcs11-token-label", tk.Label)
	if code != 1 || !strings.Contains(errOut, "no PKCS#11 user PIN") {
		t.Fatalf("backend check without a PIN: exit %d\n%s", code, errOut)
	}
	if _, errOut, code = runCLI(t, env, "backend", "check", "--pkcs11-pin", "1234"); code == 0 || !strings.Contains(errOut, "unknown flag") {
		t.Fatalf("--pkcs11-pin must not exist: exit %d %s", code, errOut)
	}
}

func readyz(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func verifyES256(t *testing.T, x, y, jws string) bool {
	t.Helper()
	xb, err1 := base64.RawURLEncoding.DecodeString(x)
	yb, err2 := base64.RawURLEncoding.DecodeString(y)
	parts := strings.Split(jws, ".")
	if err1 != nil || err2 != nil || len(parts) != 3 {
		return false
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, xb...), yb...))
	if err != nil {
		return false
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		return false
	}
	d := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	return ecdsa.Verify(pub, d[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:]))
}
