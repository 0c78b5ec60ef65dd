package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/backends/software"
)

// TestActivationWaitsForJWKSCaches (issue 13, item 3): with a JWKS max-age
// of 5 s, an officer cannot make a version published 0.2 s ago sign (409
// activation_too_early): verifiers holding a cached JWKS would reject its
// signatures. An explicit emergency activation (with a reason) is allowed
// and audited as such. A rotate request without a mode — an empty body,
// {} or only a reason — is refused instead of meaning "now".
func TestActivationWaitsForJWKSCaches(t *testing.T) {
	h := newHarness(t, harnessOpts{JWKSMaxAge: 5 * time.Second})
	h.createKey("villa", villa, software.Kind)
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys)
	resp, body := h.postJSON("/v1/keys/villa/rotate", admin, `{"mode":"scheduled","reason":"routine"}`)
	wantStatus(t, "schedule", resp, body, http.StatusOK)
	var rr api.RotateResponse
	decode(t, body, &rr)
	kid := rr.Pending.KID
	time.Sleep(200 * time.Millisecond)
	before := h.snapshot()
	for _, b := range []string{``, `{"reason":"go"}`, `{"reason":"go","emergency":false}`} {
		resp, body = h.do(request{method: http.MethodPost, path: "/v1/versions/" + kid + "/activate", auth: bearer(admin), ctype: "application/json", body: []byte(b)})
		wantError(t, "activate 0.2 s after publication, body "+b, resp, body, http.StatusConflict, api.CodeActivationTooEarly)
	}
	resp, body = h.postJSON("/v1/versions/"+kid+"/activate", admin, `{"emergency":true}`)
	wantError(t, "emergency without a reason", resp, body, http.StatusBadRequest, api.CodeInvalidRequest)
	for _, b := range []string{``, `{}`, `{"reason":"x"}`, `{"mode":""}`} {
		resp, body = h.do(request{method: http.MethodPost, path: "/v1/keys/villa/rotate", auth: bearer(admin), ctype: "application/json", body: []byte(b)})
		wantError(t, "rotate without a mode, body "+b, resp, body, http.StatusBadRequest, api.CodeInvalidRequest)
	}
	h.assertUnchanged("refused activations and rotations", before)
	if h.mgr.Keyring().Keys["villa"].Active.KID() == kid {
		t.Fatal("the pending version signs")
	}

	resp, body = h.postJSON("/v1/versions/"+kid+"/activate", admin, `{"reason":"INC-7: active key suspected","emergency":true}`)
	wantStatus(t, "emergency activation", resp, body, http.StatusOK)
	if h.mgr.Keyring().Keys["villa"].Active.KID() != kid {
		t.Fatal("the emergency activation did not make the version sign")
	}
	rows, err := h.store.ListAudit(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := rows[len(rows)-1]
	var det map[string]any
	if err := json.Unmarshal(last.Details, &det); err != nil || last.Action != "version.activate" || last.KID != kid ||
		det["emergency"] != true || det["jwks_max_age"] != "5s" || last.Reason != "INC-7: active key suspected" {
		t.Fatalf("emergency activation audit row %+v %s", last, last.Details)
	}

	// Once published longer than the max-age, a plain activation is fine.
	h2 := newHarness(t, harnessOpts{JWKSMaxAge: time.Second})
	h2.createKey("villa", villa, software.Kind)
	admin2 := h2.token("admin", tokenOK, api.ScopeAdminKeys)
	resp, body = h2.postJSON("/v1/keys/villa/rotate", admin2, `{"mode":"scheduled"}`)
	wantStatus(t, "schedule", resp, body, http.StatusOK)
	decode(t, body, &rr)
	time.Sleep(1100 * time.Millisecond)
	resp, body = h2.postJSON("/v1/versions/"+rr.Pending.KID+"/activate", admin2, `{"reason":"ahead of schedule"}`)
	wantStatus(t, "activation after the max-age", resp, body, http.StatusOK)
}
