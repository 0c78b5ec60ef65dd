package verifier

import (
	"context"
	"testing"
	"time"

	"github.com/keysvc/keysvc/signer"
)

// TestLayerTyps (ADR 0013): checked only when asked. The public vector 01
// (offer + transport, both typ "JWT") verifies fully by default; with
// keysvc's layer typs its transport attestation is sig_invalid (legacy
// typ) and the offer still verifies; pinning transport to "JWT" accepts it
// again. A transport-typed JWS presented as an offer is refused.
func TestLayerTyps(t *testing.T) {
	if TransportTyp != signer.TransportJWSTyp {
		t.Fatalf("verifier.TransportTyp %q != signer.TransportJWSTyp %q", TransportTyp, signer.TransportJWSTyp)
	}
	v := loadReceiptVectors(t)["01-offer-transport-verified.json"]
	set, err := ParseJWKS(v.JWKS)
	if err != nil {
		t.Fatal(err)
	}
	now, _ := time.Parse(time.RFC3339, v.Now)
	run := func(typs map[string]string) []string {
		res := VerifyReceipt(context.Background(), v.Receipt, Options{Now: now, Resolve: StaticJWKS(set), LayerTyps: typs})
		var out []string
		for _, a := range res.Attestations {
			code := "-"
			if a.Error != nil {
				code = *a.Error
			}
			out = append(out, a.Layer+":"+a.Status+":"+code)
		}
		return out
	}
	for _, c := range []struct {
		name string
		typs map[string]string
		want []string
	}{
		{"off", nil, []string{"offer:verified:-", "transport:verified:-"}},
		{"keysvc typs", KeysvcLayerTyps(), []string{"offer:verified:-", "transport:invalid:sig_invalid"}},
		// "JWT" then belongs to the transport layer: the vector's offer, also
		// typ JWT, no longer passes for an offer unless the offer layer is
		// given the same typ.
		{"legacy transport typ, any case", map[string]string{"transport": "application/jwt"}, []string{"offer:invalid:sig_invalid", "transport:verified:-"}},
		{"legacy typ for both layers", map[string]string{"transport": "JWT", "offer": "jwt"}, []string{"offer:verified:-", "transport:verified:-"}},
		{"offer typ JWT claimed by the offer layer", map[string]string{"offer": "JWT"}, []string{"offer:verified:-", "transport:invalid:sig_invalid"}},
	} {
		got := run(c.typs)
		if len(got) != len(c.want) || got[0] != c.want[0] || got[1] != c.want[1] {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	lt := newLayerTyps(KeysvcLayerTyps())
	for _, c := range []struct {
		layer string
		hdr   map[string]any
		ok    bool
	}{
		{"transport", map[string]any{"typ": "vrp-mcp-transport+jws"}, true},
		{"transport", map[string]any{"typ": "Application/VRP-MCP-Transport+JWS"}, true},
		{"transport", map[string]any{}, false},
		{"transport", map[string]any{"typ": 7}, false},
		{"offer", map[string]any{"typ": "vrp-mcp-transport+jws"}, false},
		{"offer", map[string]any{"typ": "JWT"}, true},
		{"offer", map[string]any{}, true},
		{"offer", map[string]any{"typ": true}, false},
	} {
		if got := lt.fits(c.layer, c.hdr); got != c.ok {
			t.Errorf("fits(%s, %v) = %v, want %v", c.layer, c.hdr, got, c.ok)
		}
	}
}
