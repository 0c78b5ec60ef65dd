package api_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"math/big"
	"net/http"
	"testing"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/backends/software"
	"github.com/keysvc/keysvc/jwksserve"
	"github.com/keysvc/keysvc/rotation"
)

// TestES256SignsLowS (issue 13, partial): every ES256 signature keysvc
// makes has s <= n/2 (the low-S form, so a signature has one encoding and
// cannot be re-encoded as s' = n - s), and verifies. A random ECDSA s is
// high half the time: 64 signatures all low by chance is 2^-64.
func TestES256SignsLowS(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	if _, _, err := h.mgr.CreateKey(context.Background(), rotation.CreateKeyRequest{Name: "ec", Issuer: "ec.example", Algorithm: "ES256", Backend: software.Kind},
		rotation.Actor{Name: "test"}); err != nil {
		t.Fatal(err)
	}
	tok := h.token("node", tokenOK, "sign:ec")
	v := h.mgr.Keyring().Keys["ec"].Versions[0]
	pub, err := jwksserve.ParsePublicJWK(v.PublicJWK)
	if err != nil {
		t.Fatal(err)
	}
	ec := pub.(*ecdsa.PublicKey)
	halfN := new(big.Int).Rsh(elliptic.P256().Params().N, 1)
	items := `{"items":[`
	for i := 0; i < 63; i++ {
		items += `{"payload":{"i":` + string(rune('0'+i%10)) + `}},`
	}
	items += `{"payload":{"last":true}}]}`
	resp, body := h.postJSON("/v1/keys/ec/sign:batch", tok, items)
	wantStatus(t, "batch of 64", resp, body, http.StatusOK)
	out := decodeBatch[api.SignResponse](t, body)
	resp, body = h.postJSON("/v1/keys/ec/mcp-transport", tok, `{"tool":"t","arguments":{}}`)
	wantStatus(t, "transport", resp, body, http.StatusOK)
	var tr api.TransportResponse
	decode(t, body, &tr)
	jwss := []string{tr.JWS}
	for _, r := range out {
		jwss = append(jwss, r.Result.JWS)
	}
	high := 0
	for _, jws := range jwss {
		p := splitJWS(t, jws)
		sig := mustB64(t, p[2])
		r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
		digest := sha256.Sum256([]byte(p[0] + "." + p[1]))
		if !ecdsa.Verify(ec, digest[:], r, s) {
			t.Fatalf("signature does not verify: %s", jws)
		}
		if s.Cmp(halfN) > 0 {
			high++
		}
	}
	if high != 0 {
		t.Fatalf("%d of %d ES256 signatures have a high s", high, len(jwss))
	}
}
