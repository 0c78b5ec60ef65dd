package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/internal/kmstest"
)

// awskmsEnv is the environment of a keysvc process talking to an emulator:
// dummy static credentials, and no shared AWS files or instance metadata.
func awskmsEnv(t *testing.T) []string {
	dir := t.TempDir()
	return []string{
		"AWS_ACCESS_KEY_ID=AKIDKEYSVCTEST", "AWS_SECRET_ACCESS_KEY=keysvc-test-secret", "AWS_SESSION_TOKEN=",
		"AWS_PROFILE=", "AWS_CONFIG_FILE=" + filepath.Join(dir, "config"),
		"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "credentials"), "AWS_EC2_METADATA_DISABLED=true",
	}
}

// TestKMSServeES256 runs the real `keysvc serve` with the awskms backend
// pointed at the local-kms emulator: create an ES256 key through the API,
// sign a transport assertion over HTTP, verify it with go-jose using only
// the published JWKS (kty EC, crv P-256, x, y, alg ES256), rotate, and have
// `keysvc verify` fully verify a receipt holding both attestations. Then
// the officer commands: schedule-deletion refuses the active version and
// schedules the retired one (the receipt still verifies from key history),
// and disable makes signing fail with key_disabled.
func TestKMSServeES256(t *testing.T) {
	lk := kmstest.StartLocalKMS(t)
	e := newLifecycleEnv(t, "")
	env := awskmsEnv(t)
	srv := startServer(t, env, "--data-dir", e.dir, "--kek-file", e.kek,
		"--awskms-region", lk.Region, "--awskms-endpoint", lk.Endpoint, "--awskms-timeout", "5s")
	ctx := context.Background()
	c := client.New(srv.URL, e.token)

	k, v1, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se", Algorithm: "ES256", Backend: "awskms", Reason: "kms e2e"})
	if err != nil {
		t.Fatal(err)
	}
	if k.Backend != "awskms" || k.Algorithm != "ES256" || !strings.HasPrefix(v1.BackendRef, "awskms:arn:aws:kms:"+lk.Region+":") ||
		!strings.Contains(v1.BackendRef, "alias=alias%2Fkeysvc%2Fvillaakerlyckan_se-") {
		t.Fatalf("created %+v %+v", k, v1)
	}
	callArgs := map[string]any{"checkIn": "2026-09-02", "checkOut": "2026-09-05", "guests": 2}
	first, err := c.MCPTransport(ctx, "villa", client.TransportRequest{Tool: "get_verified_stay_offer", Arguments: callArgs, OfferRef: "offer:villaakerlyckan.se:2026-09-02/05"})
	if err != nil {
		t.Fatal(err)
	}
	if first.KID != v1.KID {
		t.Fatalf("signed with %s, want %s", first.KID, v1.KID)
	}
	signed, err := c.Sign(ctx, "villa", map[string]any{"offer_id": "offer:villaakerlyckan.se:2026-09-02/05"}, "JWT")
	if err != nil || signed.Alg != "ES256" {
		t.Fatalf("sign: %+v %v", signed, err)
	}

	jwks, err := c.JWKS(ctx, "villa")
	if err != nil {
		t.Fatal(err)
	}
	checkES256JWKS(t, jwks, first.JWS, v1.KID)
	checkES256JWKS(t, jwks, signed.JWS, v1.KID)

	// Readiness includes the KMS health check.
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz %d", resp.StatusCode)
	}

	// Rotate: the new version is a new KMS key; both verify.
	v2, retired, err := c.Rotate(ctx, "villa", "kms e2e rotation")
	if err != nil {
		t.Fatal(err)
	}
	if retired.KID != v1.KID || v2.BackendRef == v1.BackendRef {
		t.Fatalf("rotate: %+v %+v", v2, retired)
	}
	second, err := c.MCPTransport(ctx, "villa", client.TransportRequest{Tool: "get_verified_stay_offer", Arguments: callArgs, OfferRef: "offer:villaakerlyckan.se:2026-09-02/05"})
	if err != nil || second.KID != v2.KID {
		t.Fatalf("after rotation: %+v %v", second, err)
	}
	jwks, err = c.JWKS(ctx, "villa")
	if err != nil {
		t.Fatal(err)
	}
	checkES256JWKS(t, jwks, first.JWS, v1.KID)
	checkES256JWKS(t, jwks, second.JWS, v2.KID)
	receipt := writeJSON(t, e.dir, "receipt.json", map[string]any{
		"vrp_receipt_version": "1.0",
		"subject":             map[string]any{"property": "villaakerlyckan.se", "stay": "2026-09-02/2026-09-05"},
		"issuer":              map[string]any{"node": "villaakerlyckan.se"},
		"attestations":        []any{first.Attestation, second.Attestation},
	})
	jwksFile := filepath.Join(e.dir, "jwks.json")
	if err := os.WriteFile(jwksFile, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	verifyFully(t, receipt, jwksFile, v1.KID, v2.KID)

	// Officer commands, on key history directly.
	officer := append(append([]string{}, env...), "KEYSVC_AWSKMS_ENDPOINT="+lk.Endpoint)
	out, errOut, code := runCLI(t, officer, "awskms", "schedule-deletion", v2.KID, "--pending-days", "7", "--data-dir", e.dir, "--reason", "test", "--unanchored")
	if code == 0 || !strings.Contains(errOut, "is active") {
		t.Fatalf("schedule-deletion of the active version: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = runCLI(t, officer, "awskms", "schedule-deletion", v1.KID, "--data-dir", e.dir)
	if code == 0 || !strings.Contains(errOut, "--reason is required") {
		t.Fatalf("schedule-deletion without a reason: exit %d\n%s%s", code, out, errOut)
	}
	// Whether key history is anchored is the operator's statement: without
	// the event key, only --unanchored acts (ADR 0050).
	out, errOut, code = runCLI(t, officer, "awskms", "schedule-deletion", v1.KID, "--pending-days", "7", "--data-dir", e.dir, "--reason", "retired a year ago")
	if code == 0 || !strings.Contains(errOut, "or --unanchored when serve runs without key-history anchoring") {
		t.Fatalf("schedule-deletion without the event key or --unanchored: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = runCLI(t, officer, "awskms", "schedule-deletion", v1.KID, "--pending-days", "7", "--data-dir", e.dir, "--reason", "retired a year ago", "--unanchored")
	if code != 0 || !strings.Contains(out, "scheduled deletion of "+v1.KID) || !strings.Contains(out, "aws kms cancel-key-deletion") ||
		!strings.Contains(errOut, "historical public keys stay published from key history") {
		t.Fatalf("schedule-deletion: exit %d\n%s%s", code, out, errOut)
	}
	// The retired version's public key is still published; the receipt still verifies.
	jwks2, err := c.JWKS(ctx, "villa")
	if err != nil {
		t.Fatal(err)
	}
	checkES256JWKS(t, jwks2, first.JWS, v1.KID)
	verifyFully(t, receipt, srv.URL+"/v1/keys/villa/jwks.json", v1.KID, v2.KID)
	// The audit trail records it.
	out, _, code = runCLI(t, nil, "audit", "list", "--key", "villa", "--json", "--data-dir", e.dir)
	if code != 0 || !strings.Contains(out, `"awskms.schedule_deletion"`) {
		t.Fatalf("audit: %s", out)
	}

	// Disable the active version's KMS key: signing fails with key_disabled.
	out, errOut, code = runCLI(t, officer, "awskms", "disable", v2.KID, "--data-dir", e.dir, "--reason", "kill switch drill", "--unanchored")
	if code != 0 || !strings.Contains(errOut, "WARNING") {
		t.Fatalf("disable: exit %d\n%s%s", code, out, errOut)
	}
	_, err = c.Sign(ctx, "villa", map[string]any{"n": 1}, "")
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Code != "key_disabled" || apiErr.Status != http.StatusServiceUnavailable {
		t.Fatalf("sign with a disabled KMS key: %v", err)
	}
}

// checkES256JWKS finds kid in the JWKS, checks its EC members, and verifies
// jws with go-jose and with crypto/ecdsa over the 64-byte r||s.
func checkES256JWKS(t *testing.T, raw []byte, jws, kid string) {
	t.Helper()
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		t.Fatal(err)
	}
	for _, k := range set.Keys {
		var m map[string]any
		if err := json.Unmarshal(k, &m); err != nil {
			t.Fatal(err)
		}
		if m["kid"] != kid {
			continue
		}
		if m["kty"] != "EC" || m["crv"] != "P-256" || m["alg"] != "ES256" || m["use"] != "sig" || m["d"] != nil {
			t.Fatalf("JWK %v", m)
		}
		var jwk jose.JSONWebKey
		if err := jwk.UnmarshalJSON(k); err != nil {
			t.Fatalf("go-jose JWK: %v", err)
		}
		obj, err := jose.ParseSignedCompact(jws, []jose.SignatureAlgorithm{jose.ES256})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := obj.Verify(jwk); err != nil {
			t.Fatalf("go-jose: %v", err)
		}
		x, _ := base64.RawURLEncoding.DecodeString(m["x"].(string))
		y, _ := base64.RawURLEncoding.DecodeString(m["y"].(string))
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			t.Fatalf("JWK x, y: %v", err)
		}
		parts := strings.Split(jws, ".")
		sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
		d := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
		if len(sig) != 64 || !ecdsa.Verify(pub, d[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
			t.Fatalf("ES256 r||s (%d bytes) does not verify", len(sig))
		}
		return
	}
	t.Fatalf("kid %s not in JWKS %s", kid, raw)
}

// TestKMSDestroy runs `keysvc keys destroy` on an AWS KMS version (the
// local-kms emulator behind a real `keysvc serve`): the KMS key is
// scheduled for deletion with the requested window, key history records
// material_destroyed_at, and a receipt the version signed still verifies.
// `keysvc awskms schedule-deletion` refuses a version whose key has the
// two-person rule and points to `keysvc keys destroy`.
func TestKMSDestroy(t *testing.T) {
	lk := kmstest.StartLocalKMS(t)
	e := newLifecycleEnv(t, "")
	env := awskmsEnv(t)
	srv := startServer(t, env, "--data-dir", e.dir, "--kek-file", e.kek,
		"--awskms-region", lk.Region, "--awskms-endpoint", lk.Endpoint, "--awskms-timeout", "5s")
	ctx := context.Background()
	c := client.New(srv.URL, e.token)
	officer := append(append([]string{}, env...), "KEYSVC_AWSKMS_ENDPOINT="+lk.Endpoint, "KEYSVC_TOKEN="+e.token)

	_, v1, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se", Algorithm: "ES256", Backend: "awskms"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.MCPTransport(ctx, "villa", client.TransportRequest{Tool: "get_verified_stay_offer", Arguments: map[string]any{"guests": 2}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Rotate(ctx, "villa", "retire v1"); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, officer, "keys", "destroy", v1.KID, "--reason", "retired; KMS key no longer needed", "--pending-days", "6", "--server", srv.URL)
	if code == 0 || !strings.Contains(errOut, "--pending-days must be 7 to 30") {
		t.Fatalf("keys destroy --pending-days 6: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = runCLI(t, officer, "keys", "destroy", v1.KID, "--reason", "retired; KMS key no longer needed", "--pending-days", "7", "--server", srv.URL, "--yes")
	if code != 0 || !strings.Contains(out, "destroyed: key material of "+v1.KID+" (retired, backend awskms)") || !strings.Contains(out, "KMS deletes the key on ") {
		t.Fatalf("keys destroy: exit %d\n%s%s", code, out, errOut)
	}
	vs, err := c.Versions(ctx, "villa")
	if err != nil || vs[0].KID != v1.KID || vs[0].MaterialDestroyedAt == "" || vs[1].MaterialDestroyedAt != "" {
		t.Fatalf("versions after destroy: %+v %v", vs, err)
	}
	jwks, err := c.JWKS(ctx, "villa")
	if err != nil {
		t.Fatal(err)
	}
	checkES256JWKS(t, jwks, first.JWS, v1.KID)
	out, _, code = runCLI(t, nil, "audit", "list", "--key", "villa", "--json", "--data-dir", e.dir)
	if code != 0 || !strings.Contains(out, `"version.destroy_material"`) || !strings.Contains(out, `"pending_days": 7`) || !strings.Contains(out, `"deletion_date"`) {
		t.Fatalf("audit after keys destroy: %s", out)
	}

	// Under the two-person rule the direct KMS command refuses.
	_, w1, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "tpr", Issuer: "tpr.example", Algorithm: "ES256", Backend: "awskms",
		Policy: &client.Policy{TwoPersonRule: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Rotate(ctx, "tpr", "retire w1"); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runCLI(t, officer, "awskms", "schedule-deletion", w1.KID, "--pending-days", "7", "--data-dir", e.dir, "--reason", "bypass attempt", "--unanchored")
	if code == 0 || !strings.Contains(errOut, "two-person rule") || !strings.Contains(errOut, "keysvc keys destroy "+w1.KID) {
		t.Fatalf("schedule-deletion under the two-person rule: exit %d\n%s%s", code, out, errOut)
	}
	out, _, _ = runCLI(t, nil, "audit", "list", "--key", "tpr", "--json", "--data-dir", e.dir)
	if strings.Contains(out, "awskms.schedule_deletion") {
		t.Fatalf("a refused schedule-deletion was audited: %s", out)
	}
	// Signing with the key's active version is unaffected.
	if _, err := c.Sign(ctx, "tpr", map[string]any{"n": 1}, ""); err != nil {
		t.Fatal(err)
	}
	out, _, code = runCLI(t, nil, "awskms", "schedule-deletion", "--help")
	if code != 0 || !strings.Contains(out, "keysvc keys destroy") {
		t.Fatalf("schedule-deletion --help does not point to keys destroy:\n%s", out)
	}
}
