package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/api"
)

// TestRetentionCoversAttestations (issue 13, item 4): a retention shorter
// than the longest an attestation keysvc issues stays valid (valid_for up to
// 24 h, plus the 5 min served_at skew) is refused — the retired key would
// leave the JWKS while receipts it signed are still inside their window —
// on PUT policy and on key creation. Under the two-person rule a retention
// cut (shorter, or from forever to a bound) is filed for a second officer;
// lengthening it applies at once.
func TestRetentionCoversAttestations(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("villa", villa, fixedKind)
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys, api.ScopeAdminRevoke)
	bob := h.token("bob", tokenOK, api.ScopeAdminRevoke)
	put := func(body string) (*http.Response, []byte) {
		return h.do(request{method: http.MethodPut, path: "/v1/keys/villa/policy", auth: bearer(admin), ctype: "application/json", body: []byte(body)})
	}
	before := h.snapshot()
	for _, r := range []string{"1s", "1h", "24h", "24h4m59s"} {
		resp, body := put(`{"rotation_period":"","retention":"` + r + `"}`)
		wantError(t, "retention "+r, resp, body, http.StatusBadRequest, api.CodeInvalidRequest)
		if !strings.Contains(string(body), "24h5m0s") {
			t.Errorf("retention %s: the message does not name the minimum: %s", r, body)
		}
	}
	resp, body := h.postJSON("/v1/keys", admin, `{"name":"other","issuer":"other.example","policy":{"rotation_period":"","retention":"1s"}}`)
	wantError(t, "create with retention 1s", resp, body, http.StatusBadRequest, api.CodeInvalidRequest)
	h.assertUnchanged("refused retentions", before)

	resp, body = put(`{"rotation_period":"","retention":"24h5m"}`)
	wantStatus(t, "retention at the minimum", resp, body, http.StatusOK)
	resp, body = put(`{"rotation_period":"","retention":"48h","two_person_rule":true}`)
	wantStatus(t, "rule on, retention lengthened", resp, body, http.StatusOK)

	resp, body = put(`{"rotation_period":"","retention":"30h","two_person_rule":true,"reason":"save space"}`)
	wantStatus(t, "retention cut under the rule", resp, body, http.StatusAccepted)
	var req struct{ Approval api.ApprovalInfo }
	decode(t, body, &req)
	if req.Approval.Action != "policy" || h.mgr.Keyring().Keys["villa"].Policy.Retention != 48*3600*1e9 {
		t.Fatalf("approval %+v, policy %+v", req.Approval, h.mgr.Keyring().Keys["villa"].Policy)
	}
	resp, body = h.postJSON("/v1/approvals/"+req.Approval.ID+"/approve", admin, ``)
	wantError(t, "self-approval of a retention cut", resp, body, http.StatusForbidden, api.CodeSamePrincipal)
	resp, body = h.postJSON("/v1/approvals/"+req.Approval.ID+"/approve", bob, ``)
	wantStatus(t, "bob approves the cut", resp, body, http.StatusOK)
	if got := time.Duration(h.mgr.Keyring().Keys["villa"].Policy.Retention); got != 30*time.Hour {
		t.Fatalf("retention after approval %s", got)
	}
	resp, body = put(`{"rotation_period":"","two_person_rule":true}`)
	wantStatus(t, "retention forever (lengthened)", resp, body, http.StatusOK)
	resp, body = put(`{"rotation_period":"","retention":"87600h","two_person_rule":true}`)
	wantStatus(t, "forever to ten years is a cut", resp, body, http.StatusAccepted)
}
