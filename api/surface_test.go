package api_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/api"
)

// TestSurfaces: each listener serves only its own surface; every other
// route answers 404 not_found as if it did not exist.
func TestSurfaces(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("villa", villa, fixedKind)
	tok := h.token("all", tokenOK, api.ScopeSignAll, api.ScopeAdminKeys, api.ScopeAdminRevoke, api.ScopeAuditRead)
	srv := api.New(api.Config{Manager: h.mgr, Auth: h.auth, Store: h.store})
	type call struct{ method, path, body string }
	jwks := call{"GET", "/v1/keys/villa/jwks.json", ""}
	did := call{"GET", "/.well-known/did.json", ""}
	sign := call{"POST", "/v1/keys/villa/sign", `{"payload":{"a":1}}`}
	digest := call{"POST", "/v1/digests/mcp-arguments", `{"arguments":{}}`}
	list := call{"GET", "/v1/keys", ""}
	audit := call{"GET", "/v1/audit", ""}
	health := call{"GET", "/healthz", ""}
	for _, c := range []struct {
		name    string
		surface api.Surface
		ok, nf  []call
	}{
		{"public", api.SurfacePublic, []call{jwks, did, health}, []call{sign, digest, list, audit}},
		{"sign", api.SurfaceSign, []call{sign, digest, health}, []call{jwks, did, list, audit}},
		{"admin", api.SurfaceAdmin, []call{list, audit, health}, []call{jwks, did, sign, digest}},
		{"all", api.SurfaceAll, []call{jwks, did, sign, digest, list, audit, health}, nil},
	} {
		ts := httptest.NewServer(srv.HandlerFor(c.surface))
		send := func(k call) (int, string) {
			req, _ := http.NewRequest(k.method, ts.URL+k.path, strings.NewReader(k.body))
			req.Header.Set("Authorization", "Bearer "+tok)
			if k.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(b)
		}
		for _, k := range c.ok {
			if st, b := send(k); st != http.StatusOK {
				t.Errorf("%s listener: %s %s = %d %s, want 200", c.name, k.method, k.path, st, b)
			}
		}
		for _, k := range c.nf {
			if st, b := send(k); st != http.StatusNotFound || !strings.Contains(b, `"code":"not_found"`) {
				t.Errorf("%s listener: %s %s = %d %s, want 404 not_found", c.name, k.method, k.path, st, b)
			}
		}
		ts.Close()
	}
}

// TestRequestID: every response carries X-Request-Id; a sane caller id is
// kept, an unsafe one (control characters, too long) is never echoed.
func TestRequestID(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	resp, _ := h.get("/healthz", "")
	if id := resp.Header.Get("X-Request-Id"); len(id) != 16 {
		t.Errorf("generated request id %q", id)
	}
	resp, _ = h.do(request{method: http.MethodGet, path: "/healthz", header: map[string]string{"X-Request-Id": "node-1:abc"}})
	if id := resp.Header.Get("X-Request-Id"); id != "node-1:abc" {
		t.Errorf("caller request id %q, want node-1:abc", id)
	}
	resp, _ = h.do(request{method: http.MethodGet, path: "/healthz", header: map[string]string{"X-Request-Id": strings.Repeat("x", 65)}})
	if id := resp.Header.Get("X-Request-Id"); id != "" {
		t.Errorf("an over-long request id was echoed: %q", id)
	}
}

// TestLayerScopes: "sign:<key>:<layer>" limits a token to one signing
// layer; "sign:<key>" grants every layer of that key and no other key.
func TestLayerScopes(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("villa", villa, fixedKind)
	h.createKey("villa-2", villa, fixedKind)
	transportOnly := h.token("node", tokenOK, "sign:villa:transport")
	whole := h.token("offers", tokenOK, "sign:villa")
	sign := `{"payload":{"a":1}}`
	transport := `{"tool":"t","arguments":{}}`
	for _, c := range []struct {
		tok, path, body string
		status          int
	}{
		{transportOnly, "/v1/keys/villa/mcp-transport", transport, http.StatusOK},
		{transportOnly, "/v1/keys/villa/mcp-transport:batch", `{"items":[` + transport + `]}`, http.StatusOK},
		{transportOnly, "/v1/keys/villa/sign", sign, http.StatusForbidden},
		{transportOnly, "/v1/keys/villa/sign:batch", `{"items":[` + sign + `]}`, http.StatusForbidden},
		{whole, "/v1/keys/villa/sign", sign, http.StatusOK},
		{whole, "/v1/keys/villa/mcp-transport", transport, http.StatusOK},
		{whole, "/v1/keys/villa-2/sign", sign, http.StatusForbidden},
		{transportOnly, "/v1/keys/villa-2/mcp-transport", transport, http.StatusForbidden},
	} {
		resp, body := h.postJSON(c.path, c.tok, c.body)
		if c.status == http.StatusForbidden {
			wantError(t, c.path, resp, body, c.status, api.CodeForbidden)
		} else {
			wantStatus(t, c.path, resp, body, c.status)
		}
	}
}

// TestJWKSDirectSameAnswer: the JWKS answered without echo's routing
// (serveJWKSDirect, issue 18) is the routed answer, status, headers and
// body, for every way of asking (default and per key, GET and HEAD, 200
// and 304, each X-Request-Id case, an issuer's Host), and what it does not
// answer — an unknown key, a nested path, an escaped path, a rate-limited
// caller — goes to echo and gets echo's error.
func TestJWKSDirectSameAnswer(t *testing.T) {
	h := newHarness(t, harnessOpts{PublicRateLimit: api.RateLimit{PerSecond: 0.001, Burst: 100}})
	h.createKey("villa", villa, fixedKind)
	srv := api.New(api.Config{Manager: h.mgr, Auth: h.auth, Store: h.store, PublicRateLimit: api.RateLimit{PerSecond: 0.001, Burst: 100}})
	direct := srv.HandlerForListener("public", api.SurfacePublic)
	routed := api.RoutedOnly(srv, api.SurfacePublic)
	etag := func() string {
		rec := httptest.NewRecorder()
		routed.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/keys/villa/jwks.json", nil))
		return rec.Header().Get("Etag")
	}()
	if etag == "" {
		t.Fatal("no ETag")
	}
	type ask struct {
		method, path string
		header       map[string]string
		host         string
	}
	answer := func(hd http.Handler, a ask) *httptest.ResponseRecorder {
		req := httptest.NewRequest(a.method, a.path, nil)
		for k, v := range a.header {
			req.Header.Set(k, v)
		}
		if a.host != "" {
			req.Host = a.host
		}
		rec := httptest.NewRecorder()
		hd.ServeHTTP(rec, req)
		return rec
	}
	same := func(a ask, wantStatus int) {
		t.Helper()
		d, r := answer(direct, a), answer(routed, a)
		if d.Code != wantStatus || r.Code != wantStatus {
			t.Fatalf("%s %s %v: direct %d, routed %d, want %d", a.method, a.path, a.header, d.Code, r.Code, wantStatus)
		}
		dh, rh := d.Header().Clone(), r.Header().Clone()
		if a.header["X-Request-Id"] == "" && len(dh.Get("X-Request-Id")) == 16 && len(rh.Get("X-Request-Id")) == 16 {
			dh.Del("X-Request-Id") // both generated: random
			rh.Del("X-Request-Id")
		}
		if fmt.Sprint(dh) != fmt.Sprint(rh) || d.Body.String() != r.Body.String() {
			t.Fatalf("%s %s %v:\ndirect %v %q\nrouted %v %q", a.method, a.path, a.header, dh, d.Body, rh, r.Body)
		}
	}
	for _, path := range []string{"/v1/keys/villa/jwks.json", "/.well-known/jwks.json"} {
		for _, m := range []string{http.MethodGet, http.MethodHead} {
			same(ask{method: m, path: path}, 200)
			same(ask{method: m, path: path, header: map[string]string{"X-Request-Id": "node-1:abc"}}, 200)
			same(ask{method: m, path: path, header: map[string]string{"X-Request-Id": strings.Repeat("x", 65)}}, 200)
			same(ask{method: m, path: path, header: map[string]string{"If-None-Match": etag}}, 304)
			same(ask{method: m, path: path, header: map[string]string{"If-None-Match": `"other", W/` + etag}}, 304)
			same(ask{method: m, path: path, host: villa + ":8443"}, 200)
		}
	}
	same(ask{method: http.MethodGet, path: "/v1/keys/nope/jwks.json"}, 404)
	same(ask{method: http.MethodGet, path: "/v1/keys/jwks.json"}, 404)  // the prefix and suffix overlap: no name
	same(ask{method: http.MethodGet, path: "/v1/keys//jwks.json"}, 404) // an empty name
	same(ask{method: http.MethodGet, path: "/v1/keys/villa/x/jwks.json"}, 404)
	same(ask{method: http.MethodGet, path: "/v1/keys/vill%61/jwks.json"}, 404) // echo does not unescape the name
	same(ask{method: http.MethodPost, path: "/v1/keys/villa/jwks.json"}, 405)
	// (The documents metric of direct answers: TestMetrics counts them.)
	// The direct path takes from the public bucket like the routed one;
	// once it is empty, echo answers the 429.
	var d *httptest.ResponseRecorder
	for n := 0; n < 200; n++ {
		if d = answer(direct, ask{method: http.MethodGet, path: "/v1/keys/villa/jwks.json"}); d.Code != http.StatusOK {
			break
		}
	}
	if d.Code != http.StatusTooManyRequests || !strings.Contains(d.Body.String(), `"code":"rate_limited"`) || d.Header().Get("Retry-After") == "" {
		t.Fatalf("over the public rate limit: %d %s", d.Code, d.Body)
	}
}

// TestSignDirectSameAnswer: the signing routes run without echo's router
// (serveSignDirect, issue 18) give the routed answer — status, headers,
// body — for successes and for every kind of refusal (no token, wrong
// scope, unknown key, wrong content type, bad JSON, an unknown field), and
// what the direct path does not take (an escaped or nested path, another
// method) goes to echo. The fixed test backend signs deterministically, so
// the JWS bytes of both paths are equal.
func TestSignDirectSameAnswer(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("villa", villa, fixedKind)
	tok := h.token("all", tokenOK, api.ScopeSignAll)
	jwsOnly := h.token("jws", tokenOK, "sign:villa:jws")
	srv := api.New(api.Config{Manager: h.mgr, Auth: h.auth, Store: h.store})
	direct := srv.HandlerForListener("sign", api.SurfaceSign)
	routed := api.RoutedOnly(srv, api.SurfaceSign)
	sign := `{"payload":{"offer_id":"offer:1","price":"10.00"}}`
	transport := `{"tool":"get_offer","arguments":{"checkIn":"2026-09-02"},"served_at":"` + time.Now().UTC().Format(time.RFC3339) + `"}`
	type ask struct{ method, path, tok, ctype, body string }
	answer := func(hd http.Handler, a ask) *httptest.ResponseRecorder {
		req := httptest.NewRequest(a.method, a.path, strings.NewReader(a.body))
		if a.tok != "" {
			req.Header.Set("Authorization", "Bearer "+a.tok)
		}
		if a.ctype != "" {
			req.Header.Set("Content-Type", a.ctype)
		}
		req.Header.Set("X-Request-Id", "node-1:abc")
		rec := httptest.NewRecorder()
		hd.ServeHTTP(rec, req)
		return rec
	}
	same := func(a ask, wantStatus int) {
		t.Helper()
		d, r := answer(direct, a), answer(routed, a)
		if d.Code != wantStatus || r.Code != wantStatus {
			t.Fatalf("%s %s: direct %d %s, routed %d %s, want %d", a.method, a.path, d.Code, d.Body, r.Code, r.Body, wantStatus)
		}
		if fmt.Sprint(d.Header()) != fmt.Sprint(r.Header()) || d.Body.String() != r.Body.String() {
			t.Fatalf("%s %s:\ndirect %v %q\nrouted %v %q", a.method, a.path, d.Header(), d.Body, r.Header(), r.Body)
		}
	}
	const js = "application/json"
	same(ask{"POST", "/v1/keys/villa/sign", tok, js, sign}, 200)
	same(ask{"POST", "/v1/keys/villa/sign", tok, "application/json; charset=UTF-8", sign}, 200)
	same(ask{"POST", "/v1/keys/villa/sign:batch", tok, js, `{"items":[` + sign + `,{"payload":[]}]}`}, 200)
	same(ask{"POST", "/v1/keys/villa/mcp-transport", tok, js, transport}, 200)
	same(ask{"POST", "/v1/keys/villa/mcp-transport:batch", tok, js, `{"items":[` + transport + `]}`}, 200)
	same(ask{"POST", "/v1/keys/villa/sign", "", js, sign}, 401)
	same(ask{"POST", "/v1/keys/villa/sign", "nope", js, sign}, 401)
	same(ask{"POST", "/v1/keys/villa/mcp-transport", jwsOnly, js, transport}, 403)
	same(ask{"POST", "/v1/keys/nope/sign", tok, js, sign}, 404)
	same(ask{"POST", "/v1/keys/villa/sign", tok, "text/plain", sign}, 415)
	same(ask{"POST", "/v1/keys/villa/sign", tok, "application/json; charset=latin1", sign}, 415)
	same(ask{"POST", "/v1/keys/villa/sign", tok, js, `{"payload":{"a":1,"a":2}}`}, 400)
	same(ask{"POST", "/v1/keys/villa/sign", tok, js, `{"payload":{"a":1},"extra":1}`}, 400)
	same(ask{"POST", "/v1/keys/villa/sign", tok, js, `{"payload":{"a":1}} x`}, 400)
	same(ask{"POST", "/v1/keys/villa/sign", tok, js, `{"typ":"x","payload":{"b":[1,2],"a":"\u00e9"}}`}, 200)
	same(ask{"POST", "/v1/keys/vill%61/sign", tok, js, sign}, 404) // echo does not unescape the name
	same(ask{"POST", "/v1/keys/villa/x/sign", tok, js, sign}, 404)
	same(ask{"POST", "/v1/keys//sign", tok, js, sign}, 404)
	same(ask{"POST", "/v1/keys/villa/sign/", tok, js, sign}, 404)
	same(ask{"GET", "/v1/keys/villa/sign", tok, "", ""}, 405)
}
