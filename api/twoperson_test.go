package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/backends/software"
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

// TestDestroyTwoPersonRuleAPI: with the key's two-person rule on,
// POST /v1/versions/{kid}/destroy answers 202 with a "destroy" approval and
// destroys nothing; the requester cannot approve it (403 same_principal)
// and admin:keys alone cannot ask; a second officer's approval destroys the
// material (200 with material_destroyed_at), and the version stays in the
// key history. Without the rule the same request destroys at once (200);
// active versions and pending_days outside 7..30 are refused.
func TestDestroyTwoPersonRuleAPI(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("villa", villa, software.Kind)
	h.createKey("plain", "plain.example", software.Kind)
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys)
	alice := h.token("alice", tokenOK, api.ScopeAdminRevoke)
	bob := h.token("bob", tokenOK, api.ScopeAdminRevoke)
	resp, body := h.do(request{method: http.MethodPut, path: "/v1/keys/villa/policy", auth: bearer(admin), ctype: "application/json",
		body: []byte(`{"rotation_period":"","two_person_rule":true,"reason":"officers agree"}`)})
	wantStatus(t, "set policy", resp, body, http.StatusOK)
	old := h.mgr.Keyring().Keys["villa"].Active.KID()
	resp, body = h.postJSON("/v1/keys/villa/rotate", admin, `{"mode":"now","reason":"retire the first version"}`)
	wantStatus(t, "rotate", resp, body, http.StatusOK)
	active := h.mgr.Keyring().Keys["villa"].Active.KID()
	path := "/v1/versions/" + old + "/destroy"

	for _, c := range []struct{ what, path, tok, body, code string }{
		{"active version", "/v1/versions/" + active + "/destroy", alice, `{"reason":"x"}`, api.CodeInvalidTransition},
		{"pending_days 6", path, alice, `{"reason":"x","pending_days":6}`, api.CodeInvalidRequest},
		{"pending_days 31", path, alice, `{"reason":"x","pending_days":31}`, api.CodeInvalidRequest},
		{"blank reason", path, alice, `{"reason":" "}`, api.CodeInvalidRequest},
		{"admin:keys only", path, admin, `{"reason":"x"}`, api.CodeForbidden},
	} {
		resp, body := h.postJSON(c.path, c.tok, c.body)
		status := map[string]int{api.CodeInvalidTransition: 409, api.CodeInvalidRequest: 400, api.CodeForbidden: 403}[c.code]
		wantError(t, c.what, resp, body, status, c.code)
	}

	resp, body = h.postJSON(path, alice, `{"reason":"INC-9: old key material","pending_days":21}`)
	wantStatus(t, "destroy request", resp, body, http.StatusAccepted)
	var req struct{ Approval api.ApprovalInfo }
	decode(t, body, &req)
	if req.Approval.Status != "pending" || req.Approval.KID != old || req.Approval.Action != "destroy" || req.Approval.ID == "" {
		t.Fatalf("approval %+v", req.Approval)
	}
	var params struct {
		Reason      string `json:"reason"`
		PendingDays int    `json:"pending_days"`
	}
	if err := json.Unmarshal(req.Approval.Params, &params); err != nil || params.Reason != "INC-9: old key material" || params.PendingDays != 21 {
		t.Fatalf("params %s", req.Approval.Params)
	}
	v, err := h.store.GetVersion(context.Background(), old)
	if err != nil || v.MaterialDestroyedAt != nil || v.SealedPrivateKey == nil {
		t.Fatalf("a request alone destroyed %s: %+v %v", old, v, err)
	}
	resp, body = h.postJSON("/v1/approvals/"+req.Approval.ID+"/approve", alice, ``)
	wantError(t, "self-approval", resp, body, http.StatusForbidden, api.CodeSamePrincipal)
	resp, body = h.get("/v1/approvals?status=pending", bob)
	wantStatus(t, "list pending", resp, body, http.StatusOK)
	if !strings.Contains(string(body), `"action":"destroy"`) {
		t.Fatalf("pending approvals %s", body)
	}

	resp, body = h.postJSON("/v1/approvals/"+req.Approval.ID+"/approve", bob, ``)
	wantStatus(t, "approve", resp, body, http.StatusOK)
	var out api.DestroyResponse
	decode(t, body, &out)
	if out.Destroyed.KID != old || out.Destroyed.Status != "retired" || out.Destroyed.MaterialDestroyedAt == "" || out.Backend != "software" ||
		out.DeletionDate != "" || !strings.Contains(out.Note, "backups") {
		t.Fatalf("approved destruction %s", body)
	}
	v, err = h.store.GetVersion(context.Background(), old)
	if err != nil || v.MaterialDestroyedAt == nil || v.SealedPrivateKey != nil || v.MaterialDestroyedAt.Format(time.RFC3339Nano) != out.Destroyed.MaterialDestroyedAt {
		t.Fatalf("key history after approval: %+v %v (answer said %s)", v, err, out.Destroyed.MaterialDestroyedAt)
	}
	resp, body = h.postJSON(path, bob, `{"reason":"again"}`)
	wantError(t, "destroy twice", resp, body, http.StatusConflict, api.CodeInvalidTransition)

	// The version list shows it; the key history still publishes it.
	resp, body = h.get("/v1/keys/villa/versions", admin)
	wantStatus(t, "versions", resp, body, http.StatusOK)
	var vs struct{ Versions []api.VersionInfo }
	decode(t, body, &vs)
	if len(vs.Versions) != 2 || vs.Versions[0].KID != old || vs.Versions[0].MaterialDestroyedAt != out.Destroyed.MaterialDestroyedAt || vs.Versions[1].MaterialDestroyedAt != "" {
		t.Fatalf("versions %s", body)
	}
	resp, body = h.get("/v1/keys/villa/history.json", "")
	wantStatus(t, "history", resp, body, http.StatusOK)
	if !strings.Contains(string(body), `"kid": "`+old+`"`) {
		t.Fatalf("history lacks %s: %s", old, body)
	}

	// Both principals are in the audit trail.
	rows, err := h.store.ListAudit(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, r := range rows {
		if r.KID != old || !strings.HasPrefix(r.Action, "approval.") && r.Action != "version.destroy_material" {
			continue
		}
		seen = append(seen, r.Action+" by "+r.Actor)
		if r.Action == "version.destroy_material" {
			var d map[string]any
			if err := json.Unmarshal(r.Details, &d); err != nil || d["approval"] != req.Approval.ID || d["requested_by"] != req.Approval.RequestedBy ||
				d["approved_by"] == req.Approval.RequestedBy || !strings.HasSuffix(r.Actor, "(bob)") || r.Reason != "INC-9: old key material" {
				t.Fatalf("version.destroy_material row %+v details %s", r, r.Details)
			}
		}
	}
	if len(seen) != 3 || !strings.HasSuffix(seen[0], "(alice)") || !strings.HasPrefix(seen[0], "approval.request") ||
		!strings.HasPrefix(seen[1], "approval.grant") || !strings.HasSuffix(seen[1], "(bob)") || !strings.HasPrefix(seen[2], "version.destroy_material") {
		t.Fatalf("audit rows of %s: %q", old, seen)
	}

	// Without the rule: at once.
	plainOld := h.mgr.Keyring().Keys["plain"].Active.KID()
	resp, body = h.postJSON("/v1/keys/plain/rotate", admin, `{"mode":"now"}`)
	wantStatus(t, "rotate plain", resp, body, http.StatusOK)
	resp, body = h.postJSON("/v1/versions/"+plainOld+"/destroy", alice, `{"reason":"no longer needed"}`)
	wantStatus(t, "destroy without the rule", resp, body, http.StatusOK)
	decode(t, body, &out)
	if out.Destroyed.KID != plainOld || out.Destroyed.MaterialDestroyedAt == "" {
		t.Fatalf("destroy without the rule: %s", body)
	}
}

// TestTwoPersonRuleOffAPI: switching the rule off answers 202 with a
// "policy" approval and changes nothing; an identical second request is
// 409 approval_pending; a second officer's approval applies the policy.
func TestTwoPersonRuleOffAPI(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("villa", villa, fixedKind)
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys)
	bob := h.token("bob", tokenOK, api.ScopeAdminRevoke)
	put := func(body string) (*http.Response, []byte) {
		return h.do(request{method: http.MethodPut, path: "/v1/keys/villa/policy", auth: bearer(admin), ctype: "application/json", body: []byte(body)})
	}
	resp, body := put(`{"rotation_period":"","two_person_rule":true,"reason":"officers agree"}`)
	wantStatus(t, "rule on", resp, body, http.StatusOK)
	resp, body = put(`{"rotation_period":"","retention":"48h","reason":"one officer"}`)
	wantStatus(t, "rule off", resp, body, http.StatusAccepted)
	var req struct{ Approval api.ApprovalInfo }
	decode(t, body, &req)
	if req.Approval.Action != "policy" || req.Approval.KID != "" || req.Approval.Status != "pending" {
		t.Fatalf("approval %+v", req.Approval)
	}
	if !h.mgr.Keyring().Keys["villa"].Policy.TwoPersonRule {
		t.Fatal("the rule went off without a second officer")
	}
	resp, body = put(`{"rotation_period":"","retention":"48h","reason":"again"}`)
	wantError(t, "duplicate", resp, body, http.StatusConflict, api.CodeApprovalPending)
	resp, body = h.postJSON("/v1/approvals/"+req.Approval.ID+"/approve", bob, ``)
	wantStatus(t, "approve", resp, body, http.StatusOK)
	if p := h.mgr.Keyring().Keys["villa"].Policy; p.TwoPersonRule || time.Duration(p.Retention) != 48*time.Hour {
		t.Fatalf("policy after approval %+v", p)
	}
	if !strings.Contains(string(body), `"policy"`) {
		t.Fatalf("approve answer %s", body)
	}
}
