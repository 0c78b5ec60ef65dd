package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/client"
)

// TestLayersStayApart (issue 13, item 2) against the real binary: a token
// with scope sign:villa:jws cannot have /sign mint a transport assertion
// (400 layer_mismatch), and `keysvc verify --check-typ` refuses a JWS of one
// layer presented as another (an offer JWS as the transport attestation, the
// transport JWS as an offer) while the real transport attestation verifies.
// Without --check-typ, typ is not looked at (VRP receipt v1 rules).
func TestLayersStayApart(t *testing.T) {
	e := newLifecycleEnv(t, "")
	out, errOut, code := runCLI(t, nil, "tokens", "create", "--name", "node-jws", "--scope", "sign:villa:jws", "--data-dir", e.dir)
	if code != 0 {
		t.Fatalf("tokens create: %s", errOut)
	}
	jwsToken := strings.TrimSpace(out)
	srv := startServer(t, nil, "--data-dir", e.dir, "--kek-file", e.kek)
	ctx := context.Background()
	officer := client.New(srv.URL, e.token)
	if _, _, err := officer.CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se"}); err != nil {
		t.Fatal(err)
	}
	node := client.New(srv.URL, jwsToken)
	forged := map[string]any{"type": "vrp.mcp.transport.1", "vrp_mcp_profile_version": "1.0", "tool": "get_verified_stay_offer",
		"arguments_sha256": strings.Repeat("0", 64), "served_at": "2020-01-01T00:00:00Z", "issuer": "villaakerlyckan.se"}
	_, err := node.Sign(ctx, "villa", forged, "JWT")
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "layer_mismatch" {
		t.Fatalf("a jws-only token signing a transport assertion: %v, want 400 layer_mismatch", err)
	}
	offer, err := node.Sign(ctx, "villa", map[string]any{"offer_id": "offer:villaakerlyckan.se:2026-09-02/05"}, "JWT")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := officer.MCPTransport(ctx, "villa", client.TransportRequest{Tool: "get_verified_stay_offer", Arguments: map[string]any{"guests": 2}, OfferRef: "offer:x"})
	if err != nil {
		t.Fatal(err)
	}
	from := time.Now().UTC().Add(-time.Minute).Format(time.RFC3339)
	until := time.Now().UTC().Add(time.Hour).Format(time.RFC3339)
	att := func(layer, jws string) map[string]any {
		return map[string]any{"layer": layer, "source": srv.URL + "/v1/keys/villa/jwks.json", "signature": jws, "valid_from": from, "valid_until": until}
	}
	receipt := writeJSON(t, t.TempDir(), "receipt.json", map[string]any{
		"vrp_receipt_version": "1.0", "subject": map[string]any{"property": "villaakerlyckan.se"}, "issuer": map[string]any{"node": "villaakerlyckan.se"},
		"attestations": []any{att("transport", tr.JWS), att("transport", offer.JWS), att("offer", tr.JWS), att("offer", offer.JWS)},
	})
	jwks := srv.URL + "/v1/keys/villa/jwks.json"
	results := func(args ...string) (string, int) {
		t.Helper()
		out, errOut, code := runCLI(t, nil, append([]string{"verify", receipt, "--jwks", jwks, "--json"}, args...)...)
		var res struct {
			Attestations []struct {
				Status string
				Error  *string
			}
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("verify %v: %v\n%s%s", args, err, out, errOut)
		}
		var got []string
		for _, a := range res.Attestations {
			s := a.Status
			if a.Error != nil {
				s += "/" + *a.Error
			}
			got = append(got, s)
		}
		return strings.Join(got, " "), code
	}
	if got, code := results("--check-typ"); got != "verified invalid/sig_invalid invalid/sig_invalid verified" || code != 2 {
		t.Errorf("verify --check-typ: %s (exit %d), want verified invalid/sig_invalid invalid/sig_invalid verified (exit 2)", got, code)
	}
	if got, code := results("--layer-typ", "offer=JWT", "--check-typ"); got != "verified invalid/sig_invalid invalid/sig_invalid verified" || code != 2 {
		t.Errorf("verify --check-typ --layer-typ offer=JWT: %s (exit %d)", got, code)
	}
	if got, code := results(); got != "verified verified verified verified" || code != 0 {
		t.Errorf("verify without --check-typ: %s (exit %d), want all verified", got, code)
	}
	if _, errOut, code := runCLI(t, nil, "verify", receipt, "--jwks", jwks, "--layer-typ", "transport"); code != 1 || !strings.Contains(errOut, "LAYER=TYP") {
		t.Errorf("--layer-typ without '=': exit %d %s", code, errOut)
	}
}
