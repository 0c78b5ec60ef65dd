package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/api"
)

// TestSecondKeyOnAnIssuerIsExplicit (issue 13, partial): a key cannot take
// an issuer another key already has — did.json would silently merge both
// keys' versions as the issuer's — unless the request says so
// (share_issuer, VRP K5: a key per layer); that creation is audited with
// the keys it shares the issuer with.
func TestSecondKeyOnAnIssuerIsExplicit(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys)
	resp, body := h.postJSON("/v1/keys", admin, `{"name":"villa","issuer":"villaakerlyckan.se"}`)
	wantStatus(t, "first key", resp, body, http.StatusCreated)
	before := h.snapshot()
	resp, body = h.postJSON("/v1/keys", admin, `{"name":"intruder","issuer":"villaakerlyckan.se"}`)
	wantError(t, "a second key on the issuer", resp, body, http.StatusConflict, api.CodeIssuerInUse)
	if !strings.Contains(string(body), "villa") {
		t.Errorf("the refusal does not name the key holding the issuer: %s", body)
	}
	h.assertUnchanged("refused key", before)
	resp, body = h.get("/.well-known/did.json", "")
	wantStatus(t, "did.json", resp, body, http.StatusOK)
	if strings.Count(string(body), "JsonWebKey2020") != 1 {
		t.Fatalf("did.json holds another key's version: %s", body)
	}

	resp, body = h.postJSON("/v1/keys", admin, `{"name":"transport","issuer":"villaakerlyckan.se","share_issuer":true,"reason":"a key per layer (K5)"}`)
	wantStatus(t, "a second key, shared on purpose", resp, body, http.StatusCreated)
	rows, err := h.store.ListAudit(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var det map[string]any
	for _, r := range rows {
		if r.Action == "key.create" && r.KeyName == "transport" {
			if err := json.Unmarshal(r.Details, &det); err != nil {
				t.Fatal(err)
			}
		}
	}
	if shared, _ := det["shares_issuer_with"].([]any); len(shared) != 1 || shared[0] != "villa" {
		t.Fatalf("key.create details %v, want shares_issuer_with [villa]", det)
	}
	resp, body = h.postJSON("/v1/keys", admin, `{"name":"fresh","issuer":"fresh.example","share_issuer":true}`)
	wantStatus(t, "share_issuer on a new issuer", resp, body, http.StatusCreated)
}
