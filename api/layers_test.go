package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/signer"
)

// TestJWSTokenCannotMintTransport (issue 13, item 2): a token limited to
// the jws layer (sign:KEY:jws) cannot get POST /v1/keys/KEY/sign to sign a
// payload that claims the transport layer, however it is spelled, nor a JWS
// whose typ is the transport layer's (ADR 0013); the refusal is 400
// layer_mismatch, in a batch per item. Offers and other payloads, typ JWT
// included, still sign. The transport endpoint stamps its own typ.
func TestJWSTokenCannotMintTransport(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("villa", villa, fixedKind)
	jwsOnly := h.token("node-jws", tokenOK, "sign:villa:jws")
	transportOnly := h.token("node-transport", tokenOK, "sign:villa:transport")
	kid := h.mgr.Keyring().Keys["villa"].Active.KID()
	forged := `{"arguments_sha256":"2e5b4dc2f91bec3a762993c25676b05d083bd2fabfcb52a403a651dcec7ca050","issuer":"villaakerlyckan.se",` +
		`"served_at":"2020-01-01T00:00:00Z","tool":"get_verified_stay_offer","type":"vrp.mcp.transport.1","vrp_mcp_profile_version":"1.0"}`
	for _, c := range []struct{ what, body string }{
		{"a transport assertion with typ JWT (the report)", `{"payload":` + forged + `,"typ":"JWT"}`},
		{"a transport assertion without typ", `{"payload":` + forged + `}`},
		{"only the type member", `{"payload":{"type":"vrp.mcp.transport.1","tool":"t"}}`},
		{"a future transport type", `{"payload":{"type":"vrp.mcp.transport.2"}}`},
		{"type in another case", `{"payload":{"type":"VRP.MCP.Transport.1"}}`},
		{"type spelled with an escape", `{"payload":{"\u0074ype":"vrp.mcp.transport.1"}}`},
		{"only the profile version", `{"payload":{"vrp_mcp_profile_version":"1.0","tool":"t"}}`},
		{"the transport typ", `{"payload":{"offer_id":"x"},"typ":"` + signer.TransportJWSTyp + `"}`},
		{"the transport typ as a full media type, other case", `{"payload":{"offer_id":"x"},"typ":"application/VRP-MCP-Transport+JWS"}`},
	} {
		resp, body := h.postJSON("/v1/keys/villa/sign", jwsOnly, c.body)
		wantError(t, c.what, resp, body, http.StatusBadRequest, api.CodeLayerMismatch)
	}
	resp, body := h.postJSON("/v1/keys/villa/sign:batch", jwsOnly, `{"items":[{"payload":`+forged+`,"typ":"JWT"},{"payload":{"offer_id":"x"},"typ":"JWT"}]}`)
	wantStatus(t, "batch", resp, body, http.StatusOK)
	batch := decodeBatch[api.SignResponse](t, body)
	if len(batch) != 2 || batch[0].Error == nil || batch[0].Error.Code != api.CodeLayerMismatch || batch[1].Result == nil {
		t.Fatalf("batch %s", body)
	}

	// Offers (the VRP vectors sign them with typ JWT) and other payloads
	// whose "type" is not a transport one still sign.
	for _, p := range []string{`{"payload":{"offer_id":"offer:x"},"typ":"JWT"}`, `{"payload":{"type":"offer","tool":"t"}}`, `{"payload":{"type":7}}`} {
		resp, body := h.postJSON("/v1/keys/villa/sign", jwsOnly, p)
		wantStatus(t, p, resp, body, http.StatusOK)
	}

	// The transport endpoint's JWS carries the transport layer's typ.
	resp, body = h.postJSON("/v1/keys/villa/mcp-transport", transportOnly, `{"tool":"get_verified_stay_offer","arguments":{"guests":2}}`)
	wantStatus(t, "transport", resp, body, http.StatusOK)
	var tr api.TransportResponse
	decode(t, body, &tr)
	header := mustB64(t, splitJWS(t, tr.JWS)[0])
	if want := `{"alg":"EdDSA","kid":"` + kid + `","typ":"vrp-mcp-transport+jws"}`; string(header) != want {
		t.Fatalf("transport JWS header %s, want %s", header, want)
	}
	var hdr map[string]string
	if err := json.Unmarshal(header, &hdr); err != nil || !strings.EqualFold(hdr["typ"], signer.TransportJWSTyp) {
		t.Fatalf("header %s", header)
	}
}
