package api_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/api"
)

// TestBatch: results come back in item order, a bad item gets its own error
// code without failing the others, every item is signed by the same key
// version, and the item count is bounded.
func TestBatch(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("villa", villa, fixedKind)
	tok := h.token("node", tokenOK, "sign:villa")
	kid := h.mgr.Keyring().Keys["villa"].Active.KID()

	resp, body := h.postJSON("/v1/keys/villa/sign:batch", tok,
		`{"items":[{"payload":{"b":2,"a":1},"typ":"JWT"},{"payload":{"a":1,"a":2}},{"payload":{"a":1},"typ":"bad\u0001"},{"payload":{"x":true}},{"payload":[1]},{"payload":{"a":1},"extra":1}]}`)
	wantStatus(t, "sign batch", resp, body, http.StatusOK)
	sb := decodeBatch[api.SignResponse](t, body)
	wantCodes := []string{"", "duplicate_key", "invalid_request", "", "invalid_request", "unknown_field"}
	if len(sb) != len(wantCodes) {
		t.Fatalf("%d results: %s", len(sb), body)
	}
	for i, want := range wantCodes {
		r := sb[i]
		switch {
		case want == "" && (r.Result == nil || r.Error != nil || r.Result.KID != kid):
			t.Errorf("item %d: %+v %+v, want a JWS by %s", i, r.Result, r.Error, kid)
		case want != "" && (r.Error == nil || r.Error.Code != want || r.Result != nil):
			t.Errorf("item %d: %+v, want error %s", i, r.Error, want)
		}
	}
	// The first item is exactly the single-item route's answer.
	resp, single := h.postJSON("/v1/keys/villa/sign", tok, `{"payload":{"b":2,"a":1},"typ":"JWT"}`)
	wantStatus(t, "single sign", resp, single, http.StatusOK)
	var one api.SignResponse
	decode(t, single, &one)
	if sb[0].Result.JWS != one.JWS {
		t.Errorf("batch item JWS %s differs from the single-item JWS %s", sb[0].Result.JWS, one.JWS)
	}

	resp, body = h.postJSON("/v1/keys/villa/mcp-transport:batch", tok,
		`{"items":[{"tool":"get_verified_stay_offer","arguments":{"checkIn":"2026-09-02"}},{"tool":"t","arguments":{"checkIn":1,"check_in":2}}]}`)
	wantStatus(t, "transport batch", resp, body, http.StatusOK)
	tb := decodeBatch[api.TransportResponse](t, body)
	if len(tb) != 2 || tb[0].Result == nil || tb[0].Result.Attestation.Layer != "transport" ||
		tb[1].Error == nil || tb[1].Error.Code != api.CodeArgumentKeyCollision {
		t.Fatalf("transport batch %s", body)
	}

	items := make([]string, 101)
	for i := range items {
		items[i] = `{"payload":{"i":` + fmt.Sprint(i) + `}}`
	}
	resp, body = h.postJSON("/v1/keys/villa/sign:batch", tok, `{"items":[`+strings.Join(items, ",")+`]}`)
	wantError(t, "101 items", resp, body, http.StatusBadRequest, api.CodeBatchTooLarge)
	resp, body = h.postJSON("/v1/keys/villa/sign:batch", tok, `{"items":[]}`)
	wantError(t, "no items", resp, body, http.StatusBadRequest, api.CodeInvalidRequest)
	for _, c := range []struct{ body, code string }{
		{`{"items":[{"payload":{}}],"items":[]}`, "duplicate_key"},
		{`{"items":[{"payload":{}}],"more":1}`, "unknown_field"},
		{`{"items":{"payload":{}}}`, "invalid_field"},
		{`{"items":[{"payload":{}}]} x`, "trailing_data"},
		{`[{"payload":{}}]`, "invalid_json"},
		{`{"items":[{"payload":{}}`, "invalid_json"},
	} {
		resp, body = h.postJSON("/v1/keys/villa/sign:batch", tok, c.body)
		wantError(t, "envelope "+c.body, resp, body, http.StatusBadRequest, c.code)
	}
	resp, body = h.postJSON("/v1/keys/villa/sign:batch", tok, "{\"items\":[{\"payload\":{\"a\":\"\xff\"}},{\"payload\":{}}]}")
	wantStatus(t, "invalid UTF-8 in one item", resp, body, http.StatusOK)
	if !strings.Contains(string(body), `"code":"invalid_utf8"`) || !strings.Contains(string(body), `"jws":`) {
		t.Errorf("invalid UTF-8 must fail only its item: %s", body)
	}
	resp, body = h.postJSON("/v1/keys/villa/sign:batch", h.token("other", tokenOK, "sign:other"), `{"items":[{"payload":{}}]}`)
	wantError(t, "wrong scope", resp, body, http.StatusForbidden, api.CodeForbidden)

	// Batch routes belong to the signing surface.
	pub := httptest.NewServer(api.New(api.Config{Manager: h.mgr, Auth: h.auth, Store: h.store}).HandlerFor(api.SurfacePublic))
	defer pub.Close()
	req, _ := http.NewRequest(http.MethodPost, pub.URL+"/v1/keys/villa/sign:batch", strings.NewReader(`{"items":[{"payload":{}}]}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	r, err := pub.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusNotFound {
		t.Errorf("sign:batch on the public listener: %d, want 404", r.StatusCode)
	}
}

// TestBatchSignsTogether: a software key's batch items are signed at the
// end of each worker's run, together (ADR 0044). Every JWS must still be
// exactly the single route's for the same payload, in item order, with
// failed items between them and with one or several workers; and a
// transport item's attestation carries its JWS, which verifies. (TestMetrics
// counts one backend observation per signature.)
func TestBatchSignsTogether(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("villa", villa, fixedKind)
	tok := h.token("node", tokenOK, "sign:villa")
	pub := h.mgr.Keyring().Keys["villa"].Active.Public().(ed25519.PublicKey)

	items := make([]string, 100)
	for i := range items {
		switch {
		case i%17 == 5:
			items[i] = `{"payload":{"i":` + fmt.Sprint(i) + `,"i":0}}` // duplicate_key: fails alone
		case i%2 == 0:
			items[i] = `{"payload":{"i":` + fmt.Sprint(i) + `,"offer":"o"}}` // canonical
		default:
			items[i] = `{"payload":{"offer":"o","i":` + fmt.Sprint(i) + `},"typ":"JWT"}` // canonicalized here
		}
	}
	for _, workers := range []int{1, 2, 3} {
		restore := api.SetBatchWorkers(func(int) int { return workers })
		resp, body := h.postJSON("/v1/keys/villa/sign:batch", tok, `{"items":[`+strings.Join(items, ",")+`]}`)
		restore()
		wantStatus(t, "sign batch", resp, body, http.StatusOK)
		sb := decodeBatch[api.SignResponse](t, body)
		for i, r := range sb {
			if i%17 == 5 {
				if r.Error == nil || r.Error.Code != "duplicate_key" || r.Result != nil {
					t.Fatalf("workers %d, item %d: %+v %+v, want duplicate_key", workers, i, r.Result, r.Error)
				}
				continue
			}
			single := strings.TrimSuffix(strings.TrimPrefix(items[i], `{"payload":`), `}`)
			resp, one := h.postJSON("/v1/keys/villa/sign", tok, `{"payload":`+single+`}`)
			wantStatus(t, "single sign", resp, one, http.StatusOK)
			var want api.SignResponse
			decode(t, one, &want)
			if r.Result == nil || r.Result.JWS != want.JWS {
				t.Fatalf("workers %d, item %d: %+v, want JWS %s", workers, i, r.Result, want.JWS)
			}
		}
	}

	transport := make([]string, 20)
	for i := range transport {
		transport[i] = `{"tool":"get_verified_stay_offer","arguments":{"n":` + fmt.Sprint(i) + `}}`
	}
	resp, body := h.postJSON("/v1/keys/villa/mcp-transport:batch", tok, `{"items":[`+strings.Join(transport, ",")+`]}`)
	wantStatus(t, "transport batch", resp, body, http.StatusOK)
	tb := decodeBatch[api.TransportResponse](t, body)
	for i, r := range tb {
		if r.Result == nil || r.Result.JWS == "" || r.Result.Attestation.Signature != r.Result.JWS {
			t.Fatalf("transport item %d: %+v", i, r.Result)
		}
		parts := strings.Split(r.Result.JWS, ".")
		sig, err := base64.RawURLEncoding.DecodeString(parts[2])
		if err != nil || !ed25519.Verify(pub, []byte(parts[0]+"."+parts[1]), sig) {
			t.Fatalf("transport item %d: JWS %s does not verify", i, r.Result.JWS)
		}
	}
}
