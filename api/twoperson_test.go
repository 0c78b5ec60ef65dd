package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/keysvc/keysvc/api"
)

// TestTwoPersonRuleAPI: with the key's two-person rule on, a revoke answers
// 202 with an approval; the requester cannot approve it (403
// same_principal); a second officer with admin:revoke can, and the version
// is revoked then; admin:keys alone cannot list or approve.
func TestTwoPersonRuleAPI(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("villa", villa, fixedKind)
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys)
	alice := h.token("alice", tokenOK, api.ScopeAdminRevoke)
	bob := h.token("bob", tokenOK, api.ScopeAdminRevoke)
	resp, body := h.do(request{method: http.MethodPut, path: "/v1/keys/villa/policy", auth: bearer(admin), ctype: "application/json",
		body: []byte(`{"rotation_period":"","two_person_rule":true,"reason":"officers agree"}`)})
	wantStatus(t, "set policy", resp, body, http.StatusOK)
	kid := h.mgr.Keyring().Keys["villa"].Active.KID()

	resp, body = h.postJSON("/v1/versions/"+kid+"/revoke", alice, `{"compromised_at":"`+time.Now().UTC().Add(-time.Hour).Format(time.RFC3339)+`","reason":"leak"}`)
	wantStatus(t, "revoke request", resp, body, http.StatusAccepted)
	var req struct{ Approval api.ApprovalInfo }
	decode(t, body, &req)
	if req.Approval.Status != "pending" || req.Approval.KID != kid || req.Approval.Action != "revoke" || req.Approval.ID == "" {
		t.Fatalf("approval %+v", req.Approval)
	}
	if h.mgr.Keyring().Keys["villa"].Active.KID() != kid {
		t.Fatal("a revoke request changed the active version")
	}
	resp, body = h.postJSON("/v1/approvals/"+req.Approval.ID+"/approve", alice, ``)
	wantError(t, "self-approval", resp, body, http.StatusForbidden, api.CodeSamePrincipal)
	resp, body = h.postJSON("/v1/approvals/"+req.Approval.ID+"/approve", admin, ``)
	wantError(t, "approve without admin:revoke", resp, body, http.StatusForbidden, api.CodeForbidden)
	resp, body = h.get("/v1/approvals", admin)
	wantError(t, "list without admin:revoke", resp, body, http.StatusForbidden, api.CodeForbidden)
	resp, body = h.postJSON("/v1/approvals/nope/approve", bob, ``)
	wantError(t, "unknown approval", resp, body, http.StatusNotFound, api.CodeApprovalNotFound)

	resp, body = h.postJSON("/v1/approvals/"+req.Approval.ID+"/approve", bob, ``)
	wantStatus(t, "approve", resp, body, http.StatusOK)
	var out api.RevokeResponse
	decode(t, body, &out)
	if out.Revoked.KID != kid || out.Revoked.Status != "revoked" || out.Active == nil || out.Active.KID == kid {
		t.Fatalf("approved revocation %s", body)
	}
	resp, body = h.get("/v1/approvals?status=approved", bob)
	wantStatus(t, "list approvals", resp, body, http.StatusOK)
	var list struct{ Approvals []api.ApprovalInfo }
	decode(t, body, &list)
	if len(list.Approvals) != 1 || list.Approvals[0].DecidedBy == "" || list.Approvals[0].DecidedBy == list.Approvals[0].RequestedBy {
		t.Fatalf("approvals %s", body)
	}
	var params map[string]string
	if err := json.Unmarshal(list.Approvals[0].Params, &params); err != nil || params["reason"] != "leak" {
		t.Fatalf("params %s", list.Approvals[0].Params)
	}
	resp, body = h.get("/v1/approvals?status=bogus", bob)
	wantError(t, "bad status", resp, body, http.StatusBadRequest, api.CodeInvalidRequest)
}
