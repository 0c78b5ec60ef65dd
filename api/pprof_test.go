package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/api"
)

// TestPprof: profiles are off unless configured; when on they need a token
// with admin:keys, and the command line (which may hold a database
// password) is never served.
func TestPprof(t *testing.T) {
	off := newHarness(t, harnessOpts{})
	admin := off.token("ops", tokenOK, api.ScopeAdminKeys)
	resp, body := off.get("/debug/pprof/heap", admin)
	wantError(t, "pprof off", resp, body, http.StatusNotFound, api.CodeNotFound)

	h := newHarness(t, harnessOpts{Pprof: true})
	admin = h.token("ops", tokenOK, api.ScopeAdminKeys)
	signer := h.token("node", tokenOK, api.ScopeSignAll)
	resp, body = h.get("/debug/pprof/heap", "")
	wantError(t, "no token", resp, body, http.StatusUnauthorized, api.CodeUnauthorized)
	resp, body = h.get("/debug/pprof/heap", signer)
	wantError(t, "sign token", resp, body, http.StatusForbidden, api.CodeForbidden)
	for _, name := range []string{"cmdline", "Cmdline", "cmdline/", "nosuch"} {
		resp, body = h.get("/debug/pprof/"+name, admin)
		wantError(t, name, resp, body, http.StatusNotFound, api.CodeNotFound)
	}
	resp, body = h.get("/debug/pprof/", admin)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine") {
		t.Fatalf("index: %d %.200s", resp.StatusCode, body)
	}
	resp, body = h.get("/debug/pprof/heap?debug=1", admin)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "heap profile") {
		t.Fatalf("heap: %d %.200s", resp.StatusCode, body)
	}
}
