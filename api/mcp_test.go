package api_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/api"
)

// TestMCPRoute: Config.MCP is served at /mcp, every method, on the public
// surface only; a listener without it answers 404 not_found as for an
// unknown path.
func TestMCPRoute(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	var got []string
	stub := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method)
		w.WriteHeader(http.StatusTeapot)
	})
	srv := api.New(api.Config{Manager: h.mgr, Auth: h.auth, Store: h.store, MCP: stub})
	for _, m := range []string{"POST", "GET", "DELETE", "OPTIONS", "PUT", "PATCH", "HEAD"} {
		rec := httptest.NewRecorder()
		srv.HandlerFor(api.SurfacePublic).ServeHTTP(rec, httptest.NewRequest(m, "/mcp", strings.NewReader("{}")))
		if rec.Code != http.StatusTeapot {
			t.Errorf("public %s /mcp: %d, want the MCP handler", m, rec.Code)
		}
		for _, sf := range []api.Surface{api.SurfaceSign, api.SurfaceAdmin} {
			rec := httptest.NewRecorder()
			srv.HandlerFor(sf).ServeHTTP(rec, httptest.NewRequest(m, "/mcp", strings.NewReader("{}")))
			if rec.Code != http.StatusNotFound || (m != "HEAD" && !strings.Contains(rec.Body.String(), `"not_found"`)) {
				t.Errorf("surface %b %s /mcp: %d %s, want 404 not_found", sf, m, rec.Code, rec.Body)
			}
		}
	}
	if len(got) != 7 {
		t.Fatalf("MCP handler saw %v", got)
	}
	// Without Config.MCP there is no /mcp.
	rec := httptest.NewRecorder()
	api.New(api.Config{Manager: h.mgr, Auth: h.auth, Store: h.store}).Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/mcp", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("no MCP: %d", rec.Code)
	}
}
