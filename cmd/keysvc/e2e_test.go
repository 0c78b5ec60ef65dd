package main

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/internal/pgtest"
)

// TestEndToEnd runs the real binary on each key-history store: create a key
// for villaakerlyckan.se, sign a transport assertion, rotate, sign again,
// fetch the JWKS, verify a receipt holding both attestations with
// `keysvc verify`, restart, and verify again.
func TestEndToEnd(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { endToEnd(t, "") })
	t.Run("postgres", func(t *testing.T) { endToEnd(t, pgtest.URL(t)) })
}

func endToEnd(t *testing.T, pgURL string) {
	dir := t.TempDir()
	kek := writeKEK(t, dir)
	var env []string
	if pgURL != "" {
		env = append(env, "KEYSVC_POSTGRES_URL="+pgURL)
	}
	common := []string{"--data-dir", dir}

	// Migrate, then mint an admin+sign token through the CLI (shown once).
	out, errOut, code := runCLI(t, env, append([]string{"migrate"}, common...)...)
	if code != 0 {
		t.Fatalf("migrate: %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = runCLI(t, env, append([]string{"tokens", "create", "--name", "e2e", "--scope", "sign:*", "--scope", "admin:keys"}, common...)...)
	if code != 0 || !strings.HasPrefix(out, "ksv_") {
		t.Fatalf("tokens create: %d %q %s", code, out, errOut)
	}
	token := strings.TrimSpace(out)

	srv := startServer(t, env, append([]string{"--kek-file", kek}, common...)...)
	admin := append(env, "KEYSVC_TOKEN="+token)
	out, errOut, code = runCLI(t, admin, "keys", "create", "villa", "--issuer", "villaakerlyckan.se", "--server", srv.URL, "--reason", "e2e")
	if code != 0 {
		t.Fatalf("keys create: %d\n%s%s", code, out, errOut)
	}
	today := time.Now().UTC().Format("2006-01-02")
	kid1 := "villaakerlyckan.se-" + today + "-01"
	if !strings.Contains(out, "active kid: "+kid1) {
		t.Fatalf("keys create output %q lacks kid %s", out, kid1)
	}

	c := client.New(srv.URL, token)
	ctx := context.Background()
	callArgs := map[string]any{"checkIn": "2026-09-02", "checkOut": "2026-09-05", "guests": 2}
	first, err := c.MCPTransport(ctx, "villa", client.TransportRequest{Tool: "get_verified_stay_offer", Arguments: callArgs, OfferRef: "offer:villaakerlyckan.se:2026-09-02/05"})
	if err != nil {
		t.Fatal(err)
	}
	// camelCase arguments hash as their snake_case form (vector case 2).
	if got := first.Assertion["arguments_sha256"]; got != "2e5b4dc2f91bec3a762993c25676b05d083bd2fabfcb52a403a651dcec7ca050" {
		t.Fatalf("arguments_sha256 = %v", got)
	}
	if first.KID != kid1 || first.Attestation.Source != "https://villaakerlyckan.se/.well-known/jwks.json" || first.Attestation.Layer != "transport" {
		t.Fatalf("first attestation: kid %s, %+v", first.KID, first.Attestation)
	}

	out, errOut, code = runCLI(t, admin, "keys", "rotate", "villa", "--now", "--yes", "--server", srv.URL, "--reason", "e2e rotation")
	kid2 := "villaakerlyckan.se-" + today + "-02"
	if code != 0 || !strings.Contains(out, "active:  "+kid2) || !strings.Contains(out, "retired: "+kid1) {
		t.Fatalf("keys rotate: %d\n%s%s", code, out, errOut)
	}
	second, err := c.MCPTransport(ctx, "villa", client.TransportRequest{Tool: "get_verified_stay_offer", Arguments: callArgs, OfferRef: "offer:villaakerlyckan.se:2026-09-02/05"})
	if err != nil {
		t.Fatal(err)
	}
	if second.KID != kid2 {
		t.Fatalf("after rotation signed with %s, want %s", second.KID, kid2)
	}

	jwks, err := c.JWKS(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	checkJWKS(t, jwks, kid1, kid2)

	receipt := map[string]any{
		"vrp_receipt_version": "1.0",
		"subject":             map[string]any{"property": "villaakerlyckan.se", "stay": "2026-09-02/2026-09-05"},
		"issuer":              map[string]any{"node": "villaakerlyckan.se"},
		"attestations":        []any{first.Attestation, second.Attestation},
	}
	receiptFile := writeJSON(t, dir, "receipt.json", receipt)
	jwksFile := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(jwksFile, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	verifyFully(t, receiptFile, jwksFile, kid1, kid2)
	verifyFully(t, receiptFile, srv.URL+"/.well-known/jwks.json", kid1, kid2)

	// Restart: nothing is lost; the retired key still verifies.
	srv.stop(t)
	srv2 := startServer(t, env, append([]string{"--kek-file", kek}, common...)...)
	out, errOut, code = runCLI(t, admin, "keys", "versions", "villa", "--server", srv2.URL, "--json")
	if code != 0 {
		t.Fatalf("keys versions: %d %s", code, errOut)
	}
	var versions []client.Version
	if err := json.Unmarshal([]byte(out), &versions); err != nil {
		t.Fatal(err)
	}
	if len(versions) != 2 || versions[0].KID != kid1 || versions[0].Status != "retired" || versions[1].KID != kid2 || versions[1].Status != "active" {
		t.Fatalf("versions after restart: %+v", versions)
	}
	// RFC 7638 thumbprints (issue 15), in JSON and in the table.
	table, _, code := runCLI(t, admin, "keys", "versions", "villa", "--server", srv2.URL)
	for _, v := range versions {
		jwk := jose.JSONWebKey{}
		if err := jwk.UnmarshalJSON([]byte(`{"kty":"` + v.Kty + `","crv":"` + v.Crv + `","x":"` + v.X + `"}`)); err != nil {
			t.Fatal(err)
		}
		tp, err := jwk.Thumbprint(crypto.SHA256)
		if want := base64.RawURLEncoding.EncodeToString(tp); err != nil || v.Thumbprint != want || code != 0 || !strings.Contains(table, want) {
			t.Errorf("%s: thumbprint %q, want %q (table exit %d):\n%s", v.KID, v.Thumbprint, want, code, table)
		}
	}
	c2 := client.New(srv2.URL, token)
	jwks2, err := c2.JWKS(ctx, "villa")
	if err != nil {
		t.Fatal(err)
	}
	if string(jwks2) != string(jwks) {
		t.Fatalf("JWKS changed across restart:\n%s\n%s", jwks, jwks2)
	}
	verifyFully(t, receiptFile, srv2.URL+"/v1/keys/villa/jwks.json", kid1, kid2)
	third, err := c2.Sign(ctx, "villa", map[string]any{"offer_id": "offer:villaakerlyckan.se:2026-09-02/05"}, "JWT")
	if err != nil || third.KID != kid2 {
		t.Fatalf("sign after restart: %+v %v", third, err)
	}
	checkEd25519(t, jwks2, third.JWS, kid2)
}

func writeJSON(t *testing.T, dir, name string, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// verifyFully runs `keysvc verify --json` and requires a fully verified
// receipt whose two attestations name kidA and kidB.
func verifyFully(t *testing.T, receipt, jwks, kidA, kidB string) {
	t.Helper()
	out, errOut, code := runCLI(t, nil, "verify", receipt, "--jwks", jwks, "--json")
	if code != 0 {
		t.Fatalf("keysvc verify --jwks %s: exit %d\n%s%s", jwks, code, out, errOut)
	}
	var res struct {
		ReceiptValid  bool `json:"receipt_valid"`
		FullyVerified bool `json:"fully_verified"`
		Attestations  []struct {
			Status string  `json:"status"`
			KID    *string `json:"kid"`
		} `json:"attestations"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("verify output %q: %v", out, err)
	}
	if !res.ReceiptValid || !res.FullyVerified || len(res.Attestations) != 2 ||
		res.Attestations[0].KID == nil || *res.Attestations[0].KID != kidA ||
		res.Attestations[1].KID == nil || *res.Attestations[1].KID != kidB {
		t.Fatalf("verify result: %s", out)
	}
}

func checkJWKS(t *testing.T, raw []byte, retiredKID, activeKID string) {
	t.Helper()
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 2 {
		t.Fatalf("JWKS has %d keys: %s", len(set.Keys), raw)
	}
	active, retired := set.Keys[0], set.Keys[1]
	if active["kid"] != activeKID || active["vrp_key_status"] != "active" || active["vrp_not_after"] != "" {
		t.Fatalf("active entry %v", active)
	}
	if retired["kid"] != retiredKID || retired["vrp_key_status"] != "retired" || retired["vrp_not_after"] != active["vrp_not_before"] {
		t.Fatalf("retired entry %v (active %v): windows must meet without a gap", retired, active)
	}
	for _, k := range set.Keys {
		if k["kty"] != "OKP" || k["crv"] != "Ed25519" || k["alg"] != "EdDSA" || k["use"] != "sig" || k["d"] != "" {
			t.Fatalf("JWK members %v", k)
		}
		if _, err := time.Parse(time.RFC3339Nano, k["vrp_not_before"]); err != nil {
			t.Fatalf("vrp_not_before %q: %v", k["vrp_not_before"], err)
		}
	}
}

// checkEd25519 verifies jws with crypto/ed25519 against the JWKS entry kid.
func checkEd25519(t *testing.T, jwks []byte, jws, kid string) {
	t.Helper()
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(jwks, &set); err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(jws, ".")
	if len(parts) != 3 {
		t.Fatalf("not a compact JWS: %s", jws)
	}
	for _, k := range set.Keys {
		if k["kid"] != kid {
			continue
		}
		pub, _ := base64.RawURLEncoding.DecodeString(k["x"])
		sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
		if !ed25519.Verify(pub, []byte(parts[0]+"."+parts[1]), sig) {
			t.Fatalf("signature by %s does not verify", kid)
		}
		return
	}
	t.Fatalf("kid %s not in JWKS", kid)
}
