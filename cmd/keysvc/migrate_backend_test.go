package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/internal/kmstest"
)

// TestRotationAcrossBackends: an ES256 key starts in the software backend,
// moves to AWS KMS (the local-kms emulator) and rotates there; receipts
// signed before and after still verify from the published JWKS, with
// keysvc verify and with go-jose, and the key history names each version's
// backend.
func TestRotationAcrossBackends(t *testing.T) {
	lk := kmstest.StartLocalKMS(t)
	e := newLifecycleEnv(t, "")
	srv := startServer(t, awskmsEnv(t), "--data-dir", e.dir, "--kek-file", e.kek,
		"--awskms-region", lk.Region, "--awskms-endpoint", lk.Endpoint, "--awskms-timeout", "5s")
	ctx := context.Background()
	c := client.New(srv.URL, e.token)
	if _, _, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se", Algorithm: "ES256"}); err != nil {
		t.Fatal(err)
	}
	sign := func() client.TransportResult {
		t.Helper()
		r, err := c.MCPTransport(ctx, "villa", client.TransportRequest{Tool: "get_verified_stay_offer", Arguments: map[string]any{"guests": 2}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	before := sign()
	if out, errOut, code := runCLI(t, []string{"KEYSVC_TOKEN=" + e.token}, "keys", "backend", "villa", "--to", "awskms", "--server", srv.URL, "--reason", "move to KMS"); code != 0 {
		t.Fatalf("keys backend: %s%s", out, errOut)
	}
	if _, _, err := c.Rotate(ctx, "villa", "first KMS version"); err != nil {
		t.Fatal(err)
	}
	after := sign()
	if before.KID == after.KID {
		t.Fatal("rotation did not change the kid")
	}
	versions, err := c.Versions(ctx, "villa")
	if err != nil || len(versions) != 2 || !strings.HasPrefix(versions[0].BackendRef, "software:") || !strings.HasPrefix(versions[1].BackendRef, "awskms:") {
		t.Fatalf("versions %+v %v", versions, err)
	}
	history, err := c.History(ctx, "villa")
	if err != nil {
		t.Fatal(err)
	}
	var h struct{ Keys []map[string]any }
	if err := json.Unmarshal(history, &h); err != nil || h.Keys[0]["vrp_backend"] != "software" || h.Keys[1]["vrp_backend"] != "awskms" {
		t.Fatalf("history backends: %s", history)
	}

	// go-jose, with only the published JWKS.
	jwks, err := c.JWKS(ctx, "villa")
	if err != nil {
		t.Fatal(err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(jwks, &set); err != nil {
		t.Fatal(err)
	}
	for _, r := range []client.TransportResult{before, after} {
		sig, err := jose.ParseSignedCompact(r.JWS, []jose.SignatureAlgorithm{jose.ES256})
		if err != nil {
			t.Fatal(err)
		}
		keys := set.Key(sig.Signatures[0].Header.KeyID)
		if len(keys) != 1 {
			t.Fatalf("kid %s: %d keys in the JWKS", r.KID, len(keys))
		}
		if _, err := sig.Verify(keys[0]); err != nil {
			t.Fatalf("go-jose verify %s: %v", r.KID, err)
		}
	}
	receipt := writeJSON(t, t.TempDir(), "receipt.json", map[string]any{
		"vrp_receipt_version": "1.0", "subject": map[string]any{}, "issuer": map[string]any{"node": "villaakerlyckan.se"},
		"attestations": []any{before.Attestation, after.Attestation},
	})
	verifyFully(t, receipt, srv.URL+"/v1/keys/villa/jwks.json", before.KID, after.KID)
}
