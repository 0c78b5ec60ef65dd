package api_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/software"
	"github.com/keysvc/keysvc/internal/testvectors"
	"github.com/keysvc/keysvc/store"
)

const villa = "villaakerlyckan.se"

// ---------------------------------------------------------------------------
// 1. Authentication and authorization matrix
// ---------------------------------------------------------------------------

func TestPublicRoutesNeedNoToken(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("alpha", villa, fixedKind)
	for _, path := range []string{"/healthz", "/readyz", "/.well-known/jwks.json", "/v1/keys/alpha/jwks.json"} {
		for _, auth := range []string{"", "Basic x", "Bearer ksv_not-a-token"} {
			resp, body := h.do(request{method: http.MethodGet, path: path, auth: auth})
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s (Authorization %q): status %d, want 200 (%s)", path, auth, resp.StatusCode, body)
			}
		}
	}
	resp, body := h.get("/readyz", "")
	if !strings.Contains(string(body), `"ready"`) {
		t.Errorf("/readyz body %s (status %d)", body, resp.StatusCode)
	}
}

func TestAuthMatrix(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("alpha", villa, fixedKind)
	h.createKey("bravo", "example.com", software.Kind)

	signAlpha := h.token("sign-alpha", tokenOK, "sign:alpha")
	signBravo := h.token("sign-bravo", tokenOK, "sign:bravo")
	signAll := h.token("sign-all", tokenOK, api.ScopeSignAll)
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys)
	auditOnly := h.token("audit", tokenOK, api.ScopeAuditRead)
	noScopes := h.token("none", tokenOK)
	everything := []string{api.ScopeSignAll, api.ScopeAdminKeys, api.ScopeAdminRevoke, api.ScopeAuditRead}
	expired := h.token("expired", tokenExpired, everything...)
	revoked := h.token("revoked", tokenRevoked, everything...)

	var created atomic.Int64
	type route struct {
		method, path string
		body         func() string
		ok           int
		forbidden    map[string]string // token label -> secret: 403
		allowed      map[string]string // token label -> secret: ok
	}
	signBody := func() string { return `{"payload":{"a":1}}` }
	mcpBody := func() string { return `{"tool":"t","arguments":{}}` }
	signForbidden := map[string]string{"sign:bravo": signBravo, "admin:keys": admin, "audit:read": auditOnly, "no scopes": noScopes}
	signAllowed := map[string]string{"sign:alpha": signAlpha, "sign:*": signAll}
	adminForbidden := map[string]string{"sign:*": signAll, "sign:alpha": signAlpha, "audit:read": auditOnly, "no scopes": noScopes}
	adminAllowed := map[string]string{"admin:keys": admin}
	// The digest helpers sign nothing and use no key: any valid token may
	// call them (requireAnyToken), so no scope is "wrong" there.
	anyAllowed := map[string]string{"sign:bravo": signBravo, "admin:keys": admin, "audit:read": auditOnly, "no scopes": noScopes}
	routes := []route{
		{http.MethodPost, "/v1/keys/alpha/sign", signBody, 200, signForbidden, signAllowed},
		{http.MethodPost, "/v1/keys/alpha/mcp-transport", mcpBody, 200, signForbidden, signAllowed},
		{http.MethodPost, "/v1/digests/mcp-arguments", func() string { return `{"arguments":{"a":1}}` }, 200, nil, anyAllowed},
		{http.MethodPost, "/v1/digests/sep2828", func() string { return `{"params":{"name":"t","arguments":{}}}` }, 200, nil, anyAllowed},
		{http.MethodGet, "/v1/keys", nil, 200, adminForbidden, adminAllowed},
		{http.MethodPost, "/v1/keys", func() string {
			return fmt.Sprintf(`{"name":"k%d","issuer":"example.org","reason":"matrix","share_issuer":true}`, created.Add(1))
		}, 201, adminForbidden, adminAllowed},
		{http.MethodGet, "/v1/keys/alpha/versions", nil, 200, adminForbidden, adminAllowed},
		{http.MethodPost, "/v1/keys/bravo/rotate", func() string { return `{"mode":"now","reason":"matrix"}` }, 200, adminForbidden, adminAllowed},
	}
	unauth := []struct{ label, header string }{
		{"no Authorization header", ""},
		{"Basic scheme", "Basic x"},
		{"Basic with credentials", "Basic YWRtaW46YWRtaW4="},
		{"Bearer alone", "Bearer"},
		{"Bearer and a space", "Bearer "},
		{"token without scheme", signAll},
		{"unknown token", "Bearer ksv_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
		{"expired token", bearer(expired)},
		{"revoked token", bearer(revoked)},
	}
	send := func(r route, auth string) (*http.Response, []byte) {
		req := request{method: r.method, path: r.path, auth: auth}
		if r.body != nil {
			req.ctype, req.body = "application/json", []byte(r.body())
		}
		return h.do(req)
	}
	for _, r := range routes {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			for _, u := range unauth {
				before := h.snapshot()
				resp, body := send(r, u.header)
				wantError(t, u.label, resp, body, http.StatusUnauthorized, api.CodeUnauthorized)
				if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
					t.Errorf("%s: WWW-Authenticate %q, want a Bearer challenge", u.label, got)
				}
				h.assertUnchanged(u.label, before)
			}
			for label, tok := range r.forbidden {
				before := h.snapshot()
				resp, body := send(r, bearer(tok))
				wantError(t, "scope "+label, resp, body, http.StatusForbidden, api.CodeForbidden)
				h.assertUnchanged("scope "+label, before)
			}
			for label, tok := range r.allowed {
				resp, body := send(r, bearer(tok))
				if resp.StatusCode != r.ok {
					t.Errorf("scope %s: status %d, want %d (%s)", label, resp.StatusCode, r.ok, body)
				}
				// The scheme name is case-insensitive (RFC 9110 §11.1).
				resp, body = send(r, "bearer "+tok)
				if resp.StatusCode != r.ok {
					t.Errorf("scope %s, lower-case scheme: status %d, want %d (%s)", label, resp.StatusCode, r.ok, body)
				}
			}
		})
	}

	// Admin changes are attributed to the token in the audit trail.
	rows, err := h.store.ListAudit(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := rows[len(rows)-1]
	if !strings.HasPrefix(last.Actor, "token:") || !strings.HasSuffix(last.Actor, "(admin)") {
		t.Errorf("last audit row actor %q, want token:<id>(admin)", last.Actor)
	}

	// Per-key signing scopes: sign:alpha may not sign with bravo, nor with
	// a key that does not exist (403 without revealing whether it exists);
	// sign:* on a missing key gets 404.
	validBody := func(path string) string {
		if strings.HasSuffix(path, "/mcp-transport") {
			return `{"tool":"t","arguments":{}}`
		}
		return `{"payload":{}}`
	}
	for _, path := range []string{"/v1/keys/bravo/sign", "/v1/keys/bravo/mcp-transport", "/v1/keys/nosuchkey/sign", "/v1/keys/nosuchkey/mcp-transport"} {
		before := h.snapshot()
		resp, body := h.postJSON(path, signAlpha, validBody(path))
		wantError(t, "sign:alpha on "+path, resp, body, http.StatusForbidden, api.CodeForbidden)
		h.assertUnchanged("sign:alpha on "+path, before)
	}
	resp, body := h.postJSON("/v1/keys/bravo/sign", signBravo, `{"payload":{"a":1}}`)
	wantStatus(t, "sign:bravo on bravo", resp, body, http.StatusOK)
	// A scope names one key exactly, not every key whose name it prefixes.
	h.createKey("alpha-2", villa, software.Kind)
	for _, path := range []string{"/v1/keys/alpha-2/sign", "/v1/keys/alpha-2/mcp-transport"} {
		resp, body := h.postJSON(path, signAlpha, validBody(path))
		wantError(t, "sign:alpha on "+path, resp, body, http.StatusForbidden, api.CodeForbidden)
		resp, body = h.postJSON(path, signAll, validBody(path))
		wantStatus(t, "sign:* on "+path, resp, body, http.StatusOK)
	}
	resp, body = h.postJSON("/v1/keys/nosuchkey/sign", signAll, `{"payload":{"a":1}}`)
	wantError(t, "sign:* on a missing key", resp, body, http.StatusNotFound, api.CodeKeyNotFound)

}

// ---------------------------------------------------------------------------
// 2. Bad input: nothing is written, every refusal has its exact code
// ---------------------------------------------------------------------------

const limit = 1024

// padTo returns a JSON body {"<member>":{"pad":"xxx…"}<suffix>} of exactly n bytes.
func padTo(t *testing.T, member, suffix string, n int) string {
	t.Helper()
	base := `{"` + member + `":{"pad":""}` + suffix + `}`
	if n < len(base) {
		t.Fatalf("padTo: %d < %d", n, len(base))
	}
	s := `{"` + member + `":{"pad":"` + strings.Repeat("x", n-len(base)) + `"}` + suffix + `}`
	if len(s) != n {
		t.Fatalf("padTo produced %d bytes", len(s))
	}
	return s
}

func nested(depth int, leaf string) string {
	return strings.Repeat("[", depth) + leaf + strings.Repeat("]", depth)
}

func TestBadInput(t *testing.T) {
	h := newHarness(t, harnessOpts{MaxBodyBytes: limit, MaxServedAtSkew: 100 * 365 * 24 * time.Hour, ClockOffset: -time.Since(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	h.createKey("alpha", villa, fixedKind)
	tok := h.token("all", tokenOK, api.ScopeSignAll, api.ScopeAdminKeys)
	auth := bearer(tok)

	type post struct {
		path string
		body string // a valid body
		ok   int
	}
	posts := []post{
		{"/v1/keys/alpha/sign", `{"payload":{"a":1}}`, 200},
		{"/v1/keys/alpha/mcp-transport", `{"tool":"t","arguments":{}}`, 200},
		{"/v1/digests/mcp-arguments", `{"arguments":{"a":1}}`, 200},
		{"/v1/digests/sep2828", `{"params":{"name":"t","arguments":{}}}`, 200},
		{"/v1/keys", `{"name":"fresh","issuer":"example.org","share_issuer":true}`, 201},
		{"/v1/keys/alpha/rotate", `{"mode":"now","reason":"r"}`, 200},
	}
	// bigMember is where padTo puts its padding, per route.
	bigMember := map[string]string{
		"/v1/keys/alpha/sign": "payload", "/v1/keys/alpha/mcp-transport": "arguments",
		"/v1/digests/mcp-arguments": "arguments", "/v1/digests/sep2828": "params",
	}

	check := func(t *testing.T, what string, r request, status int, code string) {
		t.Helper()
		if r.auth == "" {
			r.auth = auth
		}
		before := h.snapshot()
		resp, body := h.do(r)
		wantError(t, what, resp, body, status, code)
		h.assertUnchanged(what, before)
	}

	t.Run("content type", func(t *testing.T) {
		for _, p := range posts {
			for _, ct := range []string{"text/plain", "", "application/json; charset=latin1", "application/x-www-form-urlencoded",
				"application/jsonx", "application/json; charset=utf-16", "not a media type"} {
				check(t, fmt.Sprintf("POST %s Content-Type %q", p.path, ct),
					request{method: http.MethodPost, path: p.path, ctype: ct, body: []byte(p.body)},
					http.StatusUnsupportedMediaType, api.CodeUnsupportedMediaType)
			}
		}
		// Accepted spellings of application/json.
		for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON;charset=UTF-8"} {
			resp, body := h.do(request{method: http.MethodPost, path: "/v1/keys/alpha/sign", auth: auth, ctype: ct, body: []byte(`{"payload":{}}`)})
			wantStatus(t, "Content-Type "+ct, resp, body, http.StatusOK)
		}
	})

	t.Run("body size", func(t *testing.T) {
		for _, p := range posts {
			member, ok := bigMember[p.path]
			var atLimit, over string
			switch {
			case ok:
				suffix := ""
				if member == "arguments" && strings.Contains(p.path, "mcp-transport") {
					suffix = `,"tool":"t"`
				}
				if member == "params" {
					atLimit = `{"params":{"name":"t","arguments":{"pad":"` + strings.Repeat("x", limit-len(`{"params":{"name":"t","arguments":{"pad":""}}}`)) + `"}}}`
					over = atLimit[:len(`{"params":{"name":"t","arguments":{"pad":"`)] + "x" + atLimit[len(`{"params":{"name":"t","arguments":{"pad":"`):]
				} else {
					atLimit, over = padTo(t, member, suffix, limit), padTo(t, member, suffix, limit+1)
				}
			case p.path == "/v1/keys":
				atLimit = `{"name":"big","issuer":"example.org","share_issuer":true,"reason":"` + strings.Repeat("r", limit-len(`{"name":"big","issuer":"example.org","share_issuer":true,"reason":""}`)) + `"}`
				over = strings.Replace(atLimit, `"reason":"`, `"reason":"r`, 1)
			default: // rotate
				atLimit = `{"mode":"now","reason":"` + strings.Repeat("r", limit-len(`{"mode":"now","reason":""}`)) + `"}`
				over = strings.Replace(atLimit, `"reason":"`, `"reason":"r`, 1)
			}
			if len(atLimit) != limit || len(over) != limit+1 {
				t.Fatalf("%s: test bodies have %d and %d bytes", p.path, len(atLimit), len(over))
			}
			huge := strings.Repeat(" ", 64<<10) + p.body // valid JSON, far over the limit

			for _, b := range []string{over, huge} {
				check(t, fmt.Sprintf("POST %s %d bytes", p.path, len(b)),
					request{method: http.MethodPost, path: p.path, ctype: "application/json", body: []byte(b)},
					http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge)
				check(t, fmt.Sprintf("POST %s %d bytes chunked", p.path, len(b)),
					request{method: http.MethodPost, path: p.path, ctype: "application/json", body: []byte(b), chunked: true},
					http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge)
				// A Content-Length that lies (smaller than the body the
				// handler can read): in process, so the body is not cut
				// at the declared length by net/http.
				before := h.snapshot()
				req := httptest.NewRequest(http.MethodPost, p.path, strings.NewReader(b))
				req.ContentLength = 10
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", auth)
				rec := httptest.NewRecorder()
				h.handler.ServeHTTP(rec, req)
				res := rec.Result()
				wantError(t, fmt.Sprintf("POST %s %d bytes, Content-Length: 10", p.path, len(b)), res, rec.Body.Bytes(),
					http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge)
				h.assertUnchanged("lying Content-Length", before)
			}
			// Exactly at the limit is fine (create-key gets a fresh name).
			if p.path == "/v1/keys" {
				atLimit = strings.Replace(atLimit, `"big"`, `"bog"`, 1)
			}
			for _, chunked := range []bool{false, true} {
				resp, body := h.do(request{method: http.MethodPost, path: p.path, auth: auth, ctype: "application/json", body: []byte(atLimit), chunked: chunked})
				wantStatus(t, fmt.Sprintf("POST %s with exactly %d bytes (chunked %v)", p.path, limit, chunked), resp, body, p.ok)
				if p.path == "/v1/keys" {
					atLimit = strings.Replace(atLimit, `"bog"`, `"bug"`, 1)
				}
			}
		}
	})

	t.Run("empty body", func(t *testing.T) {
		for _, p := range posts {
			if strings.HasSuffix(p.path, "/rotate") {
				continue // rotate's body is optional: see TestRotateWithoutBody
			}
			for _, b := range []string{"", "   \r\n\t "} {
				for _, chunked := range []bool{false, true} {
					check(t, fmt.Sprintf("POST %s body %q chunked %v", p.path, b, chunked),
						request{method: http.MethodPost, path: p.path, ctype: "application/json", body: []byte(b), chunked: chunked},
						http.StatusBadRequest, "empty_body")
				}
			}
		}
		check(t, "rotate with a whitespace-only body", request{method: http.MethodPost, path: "/v1/keys/alpha/rotate", ctype: "application/json", body: []byte("  ")},
			http.StatusBadRequest, "empty_body")
	})

	const (
		sign = "/v1/keys/alpha/sign"
		mcp  = "/v1/keys/alpha/mcp-transport"
		dArg = "/v1/digests/mcp-arguments"
		dSEP = "/v1/digests/sep2828"
		keys = "/v1/keys"
		rot  = "/v1/keys/alpha/rotate"
	)
	type bad struct {
		what, path, body string
		status           int
		code             string
	}
	cases := []bad{
		// duplicate member names, at any depth and however spelled
		{"top-level duplicate", sign, `{"payload":{"a":1},"payload":{"a":2}}`, 400, "duplicate_key"},
		{"top-level duplicate typ", sign, `{"payload":{},"typ":"a","typ":"b"}`, 400, "duplicate_key"},
		{"duplicate in payload", sign, `{"payload":{"a":1,"a":2}}`, 400, "duplicate_key"},
		{"duplicate deep in payload", sign, `{"payload":{"x":{"y":[{"a":1,"a":1}]}}}`, 400, "duplicate_key"},
		{"duplicate via \\u escape in payload", sign, `{"payload":{"a":1,"\u0061":2}}`, 400, "duplicate_key"},
		{"duplicate via \\u escape top level", mcp, `{"tool":"t","\u0074ool":"u","arguments":{}}`, 400, "duplicate_key"},
		{"duplicate via \\u escape of a non-ASCII name", sign, `{"payload":{"é":1,"\u00e9":2}}`, 400, "duplicate_key"},
		{"duplicate tool", mcp, `{"tool":"t","tool":"t","arguments":{}}`, 400, "duplicate_key"},
		{"duplicate in arguments", mcp, `{"tool":"t","arguments":{"checkIn":"x","checkIn":"y"}}`, 400, "duplicate_key"},
		{"duplicate nested in arguments", mcp, `{"tool":"t","arguments":{"a":{"b":1,"b":2}}}`, 400, "duplicate_key"},
		{"duplicate in digest arguments", dArg, `{"arguments":{"a":1,"a":1}}`, 400, "duplicate_key"},
		{"duplicate in sep2828 _meta", dSEP, `{"params":{"name":"t","arguments":{},"_meta":{"x":1,"x":2}}}`, 400, "duplicate_key"},
		{"duplicate key name member", keys, `{"name":"x","name":"y","issuer":"example.org"}`, 400, "duplicate_key"},
		{"duplicate reason", rot, `{"reason":"a","reason":"b"}`, 400, "duplicate_key"},
		// unknown members
		{"unknown top-level field (sign)", sign, `{"payload":{},"extra":1}`, 400, "unknown_field"},
		{"unknown top-level field (mcp)", mcp, `{"tool":"t","arguments":{},"served":"x"}`, 400, "unknown_field"},
		{"member names are case-sensitive", mcp, `{"Tool":"t","arguments":{}}`, 400, "unknown_field"},
		{"unknown field (digest)", dArg, `{"arguments":{},"x":null}`, 400, "unknown_field"},
		{"unknown field (sep2828)", dSEP, `{"params":{"name":"t","arguments":{}},"name":"t"}`, 400, "unknown_field"},
		{"unknown field (create key)", keys, `{"name":"x","issuer":"example.org","owner":"x"}`, 400, "unknown_field"},
		{"unknown field (rotate)", rot, `{"why":"x"}`, 400, "unknown_field"},
		// wrong JSON types
		{"typ is a number", sign, `{"payload":{},"typ":5}`, 400, "invalid_field"},
		{"tool is a number", mcp, `{"tool":5,"arguments":{}}`, 400, "invalid_field"},
		{"served_at is a number", mcp, `{"tool":"t","arguments":{},"served_at":1}`, 400, "invalid_field"},
		{"valid_for is a number", mcp, `{"tool":"t","arguments":{},"valid_for":3600}`, 400, "invalid_field"},
		{"name is a number", keys, `{"name":1,"issuer":"example.org"}`, 400, "invalid_field"},
		{"issuer is null-ish array", keys, `{"name":"x","issuer":["example.org"]}`, 400, "invalid_field"},
		{"reason is a number", rot, `{"reason":7}`, 400, "invalid_field"},
		{"body is an array", sign, `[{"payload":{}}]`, 400, "invalid_field"},
		{"body is a string", mcp, `"tool"`, 400, "invalid_field"},
		// trailing data
		{"second object", sign, `{"payload":{}} {}`, 400, "trailing_data"},
		{"garbage after", sign, `{"payload":{}}x`, 400, "trailing_data"},
		{"stray bracket", mcp, `{"tool":"t","arguments":{}}]`, 400, "trailing_data"},
		{"two bodies", keys, `{"name":"x","issuer":"example.org"}{"name":"y","issuer":"example.org"}`, 400, "trailing_data"},
		// invalid UTF-8 and lone surrogates
		{"invalid UTF-8 in payload", sign, "{\"payload\":{\"a\":\"\xff\"}}", 400, "invalid_utf8"},
		{"invalid UTF-8 in a name", sign, "{\"payload\":{\"\xc3\x28\":1}}", 400, "invalid_utf8"},
		{"invalid UTF-8 in arguments", mcp, "{\"tool\":\"t\",\"arguments\":{\"a\":\"\xed\xa0\x80\"}}", 400, "invalid_utf8"},
		{"lone high surrogate", sign, `{"payload":{"a":"\ud800"}}`, 400, "invalid_utf8"},
		{"lone low surrogate", sign, `{"payload":{"a":"x\udc00y"}}`, 400, "invalid_utf8"},
		{"reversed pair", sign, `{"payload":{"a":"\ude00\ud83d"}}`, 400, "invalid_utf8"},
		{"lone surrogate in a name", mcp, `{"tool":"t","arguments":{"\ud800":1}}`, 400, "invalid_utf8"},
		{"lone surrogate in tool", mcp, `{"tool":"\ud800","arguments":{}}`, 400, "invalid_utf8"},
		{"lone surrogate in typ", sign, `{"payload":{},"typ":"\udfff"}`, 400, "invalid_utf8"},
		// nesting
		{"payload nested 33 deep", sign, `{"payload":{"a":` + nested(31, "1") + `}}`, 400, "nesting_too_deep"},
		{"payload nested 100 deep", sign, `{"payload":{"a":` + nested(100, "1") + `}}`, 400, "nesting_too_deep"},
		{"arguments nested 40 deep", mcp, `{"tool":"t","arguments":{"a":` + nested(38, "{}") + `}}`, 400, "nesting_too_deep"},
		// numbers beyond I-JSON where they are hashed
		{"unsafe integer in arguments", mcp, `{"tool":"t","arguments":{"n":9007199254740993}}`, 400, "number_out_of_range"},
		{"unsafe negative integer in arguments", mcp, `{"tool":"t","arguments":{"n":[-9007199254740993]}}`, 400, "number_out_of_range"},
		{"unsafe integer in digest arguments", dArg, `{"arguments":{"n":9007199254740993}}`, 400, "number_out_of_range"},
		{"unsafe integer in payload", sign, `{"payload":{"n":9007199254740993}}`, 400, "number_out_of_range"},
		{"overflowing float in payload", sign, `{"payload":{"n":1e400}}`, 400, "number_out_of_range"},
		{"unsafe integer in sep2828 arguments", dSEP, `{"params":{"name":"t","arguments":{"n":9007199254740993}}}`, 400, "number_out_of_range"},
		// VRP profile key normalization
		{"checkIn and check_in", mcp, `{"tool":"t","arguments":{"checkIn":"2026-09-02","check_in":"2026-09-02"}}`, 400, "argument_key_collision"},
		{"offerID and offer_id", mcp, `{"tool":"t","arguments":{"offer_id":1,"offerID":2}}`, 400, "argument_key_collision"},
		{"collision in digest", dArg, `{"arguments":{"checkIn":1,"check_in":2}}`, 400, "argument_key_collision"},
		// field values
		{"arguments is an array", mcp, `{"tool":"t","arguments":[1]}`, 400, "invalid_request"},
		{"arguments is a string", mcp, `{"tool":"t","arguments":"{}"}`, 400, "invalid_request"},
		{"arguments is null", mcp, `{"tool":"t","arguments":null}`, 400, "invalid_request"},
		{"arguments is a number", mcp, `{"tool":"t","arguments":1}`, 400, "invalid_request"},
		{"missing tool", mcp, `{"arguments":{}}`, 400, "invalid_request"},
		{"empty tool", mcp, `{"tool":"","arguments":{}}`, 400, "invalid_request"},
		{"tool with a control character", mcp, `{"tool":"t\u0000","arguments":{}}`, 400, "invalid_request"},
		{"offer_ref with a control character", mcp, `{"tool":"t","arguments":{},"offer_ref":"a\nb"}`, 400, "invalid_request"},
		{"missing arguments", mcp, `{"tool":"t"}`, 400, "invalid_request"},
		{"served_at not a date", mcp, `{"tool":"t","arguments":{},"served_at":"yesterday"}`, 400, "invalid_request"},
		{"served_at date only", mcp, `{"tool":"t","arguments":{},"served_at":"2026-06-24"}`, 400, "invalid_request"},
		{"served_at without zone", mcp, `{"tool":"t","arguments":{},"served_at":"2026-06-24T11:40:00"}`, 400, "invalid_request"},
		{"valid_for 0s", mcp, `{"tool":"t","arguments":{},"valid_for":"0s"}`, 400, "invalid_request"},
		{"valid_for -1h", mcp, `{"tool":"t","arguments":{},"valid_for":"-1h"}`, 400, "invalid_request"},
		{"valid_for 48h", mcp, `{"tool":"t","arguments":{},"valid_for":"48h"}`, 400, "invalid_request"},
		{"valid_for abc", mcp, `{"tool":"t","arguments":{},"valid_for":"abc"}`, 400, "invalid_request"},
		{"valid_for 500ms", mcp, `{"tool":"t","arguments":{},"valid_for":"500ms"}`, 400, "invalid_request"},
		{"valid_for 1ns", mcp, `{"tool":"t","arguments":{},"valid_for":"1ns"}`, 400, "invalid_request"},
		{"valid_for 24h1s", mcp, `{"tool":"t","arguments":{},"valid_for":"24h1s"}`, 400, "invalid_request"},
		{"valid_for without unit", mcp, `{"tool":"t","arguments":{},"valid_for":"3600"}`, 400, "invalid_request"},
		{"payload missing", sign, `{}`, 400, "invalid_request"},
		{"payload is an array", sign, `{"payload":[1]}`, 400, "invalid_request"},
		{"payload is a string", sign, `{"payload":"{}"}`, 400, "invalid_request"},
		{"payload is null", sign, `{"payload":null}`, 400, "invalid_request"},
		{"payload is a number", sign, `{"payload":1}`, 400, "invalid_request"},
		{"typ with a control character", sign, `{"payload":{},"typ":"J\u0001WT"}`, 400, "invalid_request"},
		{"typ with a newline", sign, `{"payload":{},"typ":"JWT\n"}`, 400, "invalid_request"},
		{"typ with DEL", sign, `{"payload":{},"typ":"JWT\u007f"}`, 400, "invalid_request"},
		{"typ not ASCII", sign, `{"payload":{},"typ":"JWTé"}`, 400, "invalid_request"},
		{"typ longer than 64", sign, `{"payload":{},"typ":"` + strings.Repeat("T", 65) + `"}`, 400, "invalid_request"},
		{"sep2828 without name", dSEP, `{"params":{"arguments":{}}}`, 400, "invalid_request"},
		{"sep2828 without arguments", dSEP, `{"params":{"name":"t"}}`, 400, "invalid_request"},
		{"digest arguments not an object", dArg, `{"arguments":[]}`, 400, "invalid_request"},
		// invalid JSON
		{"truncated", sign, `{"payload":{`, 400, "invalid_json"},
		{"not JSON", sign, `payload=1`, 400, "invalid_json"},
		{"single quotes", mcp, `{'tool':'t'}`, 400, "invalid_json"},
		// create key: bad values
		{"name upper case", keys, `{"name":"Alpha","issuer":"example.org"}`, 400, "invalid_request"},
		{"name leading dash", keys, `{"name":"-alpha","issuer":"example.org"}`, 400, "invalid_request"},
		{"name empty", keys, `{"name":"","issuer":"example.org"}`, 400, "invalid_request"},
		{"name missing", keys, `{"issuer":"example.org"}`, 400, "invalid_request"},
		{"name with a space", keys, `{"name":"a b","issuer":"example.org"}`, 400, "invalid_request"},
		{"name with a slash", keys, `{"name":"a/b","issuer":"example.org"}`, 400, "invalid_request"},
		{"name too long", keys, `{"name":"` + strings.Repeat("a", 64) + `","issuer":"example.org"}`, 400, "invalid_request"},
		{"issuer missing", keys, `{"name":"x"}`, 400, "invalid_request"},
		{"issuer upper case", keys, `{"name":"x","issuer":"Example.org"}`, 400, "invalid_request"},
		{"issuer underscore", keys, `{"name":"x","issuer":"exa_mple.org"}`, 400, "invalid_request"},
		{"issuer leading dash label", keys, `{"name":"x","issuer":"-a.org"}`, 400, "invalid_request"},
		{"issuer empty label", keys, `{"name":"x","issuer":"a..org"}`, 400, "invalid_request"},
		{"issuer URL", keys, `{"name":"x","issuer":"https://example.org"}`, 400, "invalid_request"},
		{"algorithm RS256", keys, `{"name":"x","issuer":"example.org","algorithm":"RS256"}`, 400, "invalid_request"},
		{"algorithm lower case", keys, `{"name":"x","issuer":"example.org","algorithm":"eddsa"}`, 400, "invalid_request"},
		{"algorithm none", keys, `{"name":"x","issuer":"example.org","algorithm":"none"}`, 400, "invalid_request"},
		{"jwks_url http", keys, `{"name":"x","issuer":"example.org","jwks_url":"http://example.org/jwks.json"}`, 400, "invalid_request"},
		{"jwks_url relative", keys, `{"name":"x","issuer":"example.org","jwks_url":"/jwks.json"}`, 400, "invalid_request"},
		{"jwks_url without host", keys, `{"name":"x","issuer":"example.org","jwks_url":"https:///jwks.json"}`, 400, "invalid_request"},
		{"jwks_url with user info", keys, `{"name":"x","issuer":"example.org","jwks_url":"https://u:p@example.org/jwks.json"}`, 400, "invalid_request"},
		{"jwks_url with fragment", keys, `{"name":"x","issuer":"example.org","jwks_url":"https://example.org/jwks.json#x"}`, 400, "invalid_request"},
		{"jwks_url not a URL", keys, `{"name":"x","issuer":"example.org","jwks_url":"::"}`, 400, "invalid_request"},
		{"unknown backend", keys, `{"name":"x","issuer":"example.org","backend":"nope"}`, 400, "invalid_request"},
		{"backend refuses the algorithm", keys, `{"name":"x","issuer":"example.org","backend":"software-fixed","algorithm":"ES256","share_issuer":true}`, 400, "invalid_request"},
		{"duplicate key name", keys, `{"name":"alpha","issuer":"example.org"}`, 409, "key_exists"},
		{"duplicate key name, other issuer", keys, `{"name":"alpha","issuer":"other.example","algorithm":"ES256"}`, 409, "key_exists"},
		// unknown keys
		{"sign with an unknown key", "/v1/keys/nokey/sign", `{"payload":{}}`, 404, "key_not_found"},
		{"mcp with an unknown key", "/v1/keys/nokey/mcp-transport", `{"tool":"t","arguments":{}}`, 404, "key_not_found"},
		{"rotate an unknown key", "/v1/keys/nokey/rotate", `{"mode":"now","reason":"r"}`, 404, "key_not_found"},
	}
	t.Run("bodies", func(t *testing.T) {
		for _, c := range cases {
			check(t, c.what+" ("+c.path+")", request{method: http.MethodPost, path: c.path, ctype: "application/json", body: []byte(c.body)}, c.status, c.code)
		}
	})

	// Positive controls at the edges of the refusals above.
	t.Run("accepted edges", func(t *testing.T) {
		for _, c := range []struct{ path, body string }{
			{sign, `{"payload":{"a":` + nested(30, "1") + `}}`}, // exactly 32 deep
			{mcp, `{"tool":"t","arguments":{"n":9007199254740991,"m":-9007199254740991,"f":1e300}}`},
			{sign, `{"payload":{"emoji":"\ud83d\ude00","e":"\u00e9"}}`},
			{sign, "{\"payload\":{\"a\":1}}\n\r\n\t "},
			{mcp, `{"tool":"t","arguments":{"checkIn":"a","check_out":"b"},"valid_for":"24h"}`},
			{mcp, `{"tool":"t","arguments":{},"valid_for":"1s","served_at":"2026-06-24T13:40:00.5+02:00"}`},
			{sign, `{"payload":{},"typ":"` + strings.Repeat("T", 64) + `"}`},
		} {
			resp, body := h.do(request{method: http.MethodPost, path: c.path, auth: auth, ctype: "application/json", body: []byte(c.body)})
			wantStatus(t, c.body, resp, body, http.StatusOK)
		}
	})

	t.Run("routes and methods", func(t *testing.T) {
		for _, c := range []struct {
			method, path string
			status       int
			code         string
		}{
			{http.MethodGet, "/v1/nope", 404, "not_found"},
			{http.MethodGet, "/", 404, "not_found"},
			{http.MethodPost, "/v1/keys/alpha/sign/extra", 404, "not_found"},
			{http.MethodPost, "/v1/keys/alpha/revoke", 404, "not_found"},
			{http.MethodGet, "/v1/keys/nokey/versions", 404, "key_not_found"},
			{http.MethodGet, "/v1/keys/nokey/jwks.json", 404, "key_not_found"},
			{http.MethodGet, "/v1/keys/alpha/sign", 405, "method_not_allowed"},
			{http.MethodGet, "/v1/keys/alpha/mcp-transport", 405, "method_not_allowed"},
			{http.MethodPut, "/v1/keys/alpha/sign", 405, "method_not_allowed"},
			{http.MethodGet, "/v1/keys/alpha/rotate", 405, "method_not_allowed"},
			{http.MethodDelete, "/v1/keys", 405, "method_not_allowed"},
			{http.MethodPut, "/v1/keys", 405, "method_not_allowed"},
			{http.MethodGet, "/v1/digests/sep2828", 405, "method_not_allowed"},
			{http.MethodPost, "/v1/keys/alpha/versions", 405, "method_not_allowed"},
			{http.MethodPost, "/.well-known/jwks.json", 405, "method_not_allowed"},
			{http.MethodDelete, "/v1/keys/alpha/jwks.json", 405, "method_not_allowed"},
			{http.MethodPost, "/healthz", 405, "method_not_allowed"},
		} {
			check(t, c.method+" "+c.path, request{method: c.method, path: c.path, ctype: "application/json", body: []byte(`{}`)}, c.status, c.code)
		}
	})
}

// TestRotateNeedsMode: a rotate request must say which rotation it wants
// (issue 13): no body, an empty object or a body without mode is 400
// invalid_request and changes nothing; {"mode":"now"} is the emergency
// form, audited with its reason.
func TestRotateNeedsMode(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("alpha", villa, software.Kind)
	tok := h.token("admin", tokenOK, api.ScopeAdminKeys)
	before := h.snapshot()
	for _, r := range []request{
		{method: http.MethodPost, path: "/v1/keys/alpha/rotate", auth: bearer(tok)},
		{method: http.MethodPost, path: "/v1/keys/alpha/rotate", auth: bearer(tok), ctype: "application/json"},
		{method: http.MethodPost, path: "/v1/keys/alpha/rotate", auth: bearer(tok), ctype: "application/json", body: []byte(`{}`)},
		{method: http.MethodPost, path: "/v1/keys/alpha/rotate", auth: bearer(tok), ctype: "application/json", body: []byte(`{"reason":"scheduled"}`)},
	} {
		resp, body := h.do(r)
		wantError(t, fmt.Sprintf("rotate with body %q", r.body), resp, body, http.StatusBadRequest, api.CodeInvalidRequest)
	}
	h.assertUnchanged("rotate without a mode", before)
	resp, body := h.postJSON("/v1/keys/alpha/rotate", tok, `{"mode":"now","reason":"INC-1"}`)
	wantStatus(t, "rotate now", resp, body, http.StatusOK)
	var rr api.RotateResponse
	decode(t, body, &rr)
	if rr.Active.Status != "active" || rr.Retired.Status != "retired" || rr.Active.KID == rr.Retired.KID {
		t.Errorf("rotate response %s", body)
	}
	rows, err := h.store.ListAudit(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if last := rows[len(rows)-1]; last.Action != "version.activate" || last.Reason != "INC-1" {
		t.Errorf("last audit row %+v, want version.activate with reason \"INC-1\"", last)
	}
}

// TestSigningBackendErrors: a backend that fails while signing is a 503
// backend_unavailable when it says it is unavailable, and otherwise an
// internal error, never a client error.
func TestSigningBackendErrors(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("hsm", villa, brokenKind)
	tok := h.token("signer", tokenOK, api.ScopeSignAll)
	paths := map[string]string{
		"/v1/keys/hsm/sign":          `{"payload":{"a":1},"typ":"JWT"}`,
		"/v1/keys/hsm/mcp-transport": `{"tool":"t","arguments":{}}`,
	}
	for path, body := range paths {
		resp, b := h.postJSON(path, tok, body)
		wantStatus(t, path+" healthy backend", resp, b, http.StatusOK)
	}

	h.broken.setErr(fmt.Errorf("%w: PKCS#11 token removed", backends.ErrUnavailable))
	for path, body := range paths {
		resp, b := h.postJSON(path, tok, body)
		wantError(t, path+" unavailable backend", resp, b, http.StatusServiceUnavailable, api.CodeBackendUnavailable)
	}
	// An error that merely mentions a "type" is not a bad typ.
	h.broken.setErr(errors.New("pkcs11: unsupported key type for mechanism"))
	for path, body := range paths {
		resp, b := h.postJSON(path, tok, body)
		wantError(t, path+" failing backend", resp, b, http.StatusInternalServerError, api.CodeInternal)
		if strings.Contains(string(b), "pkcs11") {
			t.Errorf("%s: internal error detail leaked to the client: %s", path, b)
		}
	}
}

// ---------------------------------------------------------------------------
// 3. Exact bytes
// ---------------------------------------------------------------------------

// jwks fetches a key's JWKS and parses it with go-jose.
func (h *harness) jwks(name string) (jose.JSONWebKeySet, []byte) {
	h.t.Helper()
	resp, body := h.get("/v1/keys/"+name+"/jwks.json", "")
	wantStatus(h.t, "jwks "+name, resp, body, http.StatusOK)
	var set jose.JSONWebKeySet
	decode(h.t, body, &set)
	return set, body
}

// verifyJOSE verifies a compact JWS with go-jose against set, by its kid,
// and returns the payload.
func verifyJOSE(t *testing.T, set jose.JSONWebKeySet, jws, wantKID string) []byte {
	t.Helper()
	obj, err := jose.ParseSignedCompact(jws, []jose.SignatureAlgorithm{jose.EdDSA, jose.ES256})
	if err != nil {
		t.Fatalf("go-jose parse %q: %v", jws, err)
	}
	kid := obj.Signatures[0].Protected.KeyID
	if kid != wantKID {
		t.Fatalf("JWS kid %q, want %q", kid, wantKID)
	}
	keys := set.Key(kid)
	if len(keys) != 1 {
		t.Fatalf("JWKS has %d keys with kid %q", len(keys), kid)
	}
	payload, err := obj.Verify(keys[0].Key)
	if err != nil {
		t.Fatalf("go-jose verify (kid %s): %v", kid, err)
	}
	return payload
}

func TestSignExactBytes(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("alpha", villa, fixedKind)
	tok := h.token("signer", tokenOK, "sign:alpha")
	kid := h.mgr.Keyring().Keys["alpha"].Active.KID()
	if want := villa + "-" + time.Now().UTC().Format("2006-01-02") + "-01"; kid != want {
		t.Errorf("kid %q, want %q", kid, want)
	}
	set, _ := h.jwks("alpha")

	for _, c := range []struct {
		body, header, payload string
	}{
		{`{"payload":{"b":2,"a":1},"typ":"JWT"}`, `{"alg":"EdDSA","kid":"` + kid + `","typ":"JWT"}`, `{"a":1,"b":2}`},
		{`{"payload":{"b":2,"a":1}}`, `{"alg":"EdDSA","kid":"` + kid + `"}`, `{"a":1,"b":2}`},
		// RFC 8785: numbers, escapes and member order (by UTF-16 code units).
		{`{"typ":"vrp+jws","payload":{"z":[3,{"y":1e1,"x":"\u20ac\n"}],"a":0.5,"\ud83d\ude00":true,"\u00e9":-0,"b":"</>"}}`,
			`{"alg":"EdDSA","kid":"` + kid + `","typ":"vrp+jws"}`,
			`{"a":0.5,"b":"</>","z":[3,{"x":"€\n","y":10}],"é":0,"😀":true}`},
	} {
		resp, body := h.postJSON("/v1/keys/alpha/sign", tok, c.body)
		wantStatus(t, c.body, resp, body, http.StatusOK)
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("Content-Type %q", ct)
		}
		var sr api.SignResponse
		decode(t, body, &sr)
		input := b64([]byte(c.header)) + "." + b64([]byte(c.payload))
		want := input + "." + b64(ed25519.Sign(h.priv, []byte(input)))
		if sr.JWS != want {
			t.Errorf("%s:\n got JWS %s\nwant JWS %s", c.body, sr.JWS, want)
		}
		if sr.KID != kid || sr.Alg != "EdDSA" {
			t.Errorf("kid %q alg %q", sr.KID, sr.Alg)
		}
		if got := verifyJOSE(t, set, sr.JWS, kid); string(got) != c.payload {
			t.Errorf("go-jose payload %s, want %s", got, c.payload)
		}
	}
}

type transportCase struct {
	Name            string          `json:"name"`
	Tool            string          `json:"tool"`
	Arguments       json.RawMessage `json:"arguments"`
	ServedAt        string          `json:"served_at"`
	Issuer          string          `json:"issuer"`
	OfferRef        string          `json:"offer_ref"`
	SessionID       string          `json:"session_id"`
	ArgumentsJCS    string          `json:"expected_arguments_jcs"`
	ArgumentsSHA256 string          `json:"expected_arguments_sha256"`
	AssertionJCS    string          `json:"expected_assertion_jcs"`
}

func transportVectors(t *testing.T) []transportCase {
	t.Helper()
	var v struct {
		Cases []transportCase `json:"cases"`
	}
	decode(t, testvectors.Read(t, "vrp-mcp-transport.json"), &v)
	if len(v.Cases) == 0 {
		t.Fatal("no transport vectors")
	}
	return v.Cases
}

func TestMCPTransportVectors(t *testing.T) {
	// The vectors' served_at lies in 2026-06; allow it (the skew bound has
	// its own test), and let the key exist since before it (a served_at
	// outside the signing version's window is refused: ADR 0014).
	h := newHarness(t, harnessOpts{MaxServedAtSkew: 100 * 365 * 24 * time.Hour, ClockOffset: -time.Since(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	h.createKey("villa", villa, fixedKind)
	tok := h.token("node", tokenOK, "sign:villa")
	kid := h.mgr.Keyring().Keys["villa"].Active.KID()
	set, _ := h.jwks("villa")

	// The key's JWKS URL, as the admin API reports it.
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys)
	resp, body := h.get("/v1/keys", admin)
	wantStatus(t, "list keys", resp, body, http.StatusOK)
	var list struct{ Keys []api.KeyInfo }
	decode(t, body, &list)
	if len(list.Keys) != 1 || list.Keys[0].JWKSURL != "https://villaakerlyckan.se/.well-known/jwks.json" {
		t.Fatalf("keys %s", body)
	}
	source := list.Keys[0].JWKSURL

	header := b64([]byte(`{"alg":"EdDSA","kid":"` + kid + `","typ":"vrp-mcp-transport+jws"}`))
	for _, vc := range transportVectors(t) {
		if vc.Issuer != villa {
			t.Fatalf("%s: issuer %s", vc.Name, vc.Issuer)
		}
		served, err := time.Parse(time.RFC3339, vc.ServedAt)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []struct {
			name      string
			ref       string
			validFor  string
			wantRef   string
			wantUntil time.Time
		}{
			{"defaults", "", "", vc.OfferRef, served.Add(time.Hour)},
			{"explicit ref and valid_for", "receipt:ref-1", "90m", "receipt:ref-1", served.Add(90 * time.Minute)},
		} {
			t.Run(vc.Name+"/"+v.name, func(t *testing.T) {
				req := map[string]any{"tool": vc.Tool, "arguments": vc.Arguments, "served_at": vc.ServedAt}
				if vc.OfferRef != "" {
					req["offer_ref"] = vc.OfferRef
				}
				if vc.SessionID != "" {
					req["session_id"] = vc.SessionID
				}
				if v.ref != "" {
					req["ref"] = v.ref
				}
				if v.validFor != "" {
					req["valid_for"] = v.validFor
				}
				reqBody, err := json.Marshal(req)
				if err != nil {
					t.Fatal(err)
				}
				resp, body := h.postJSON("/v1/keys/villa/mcp-transport", tok, string(reqBody))
				wantStatus(t, "mcp-transport", resp, body, http.StatusOK)
				var tr api.TransportResponse
				decode(t, body, &tr)

				input := header + "." + b64([]byte(vc.AssertionJCS))
				want := input + "." + b64(ed25519.Sign(h.priv, []byte(input)))
				if tr.JWS != want {
					t.Errorf("JWS\n got %s\nwant %s", tr.JWS, want)
				}
				parts := splitJWS(t, tr.JWS)
				if got := string(mustB64(t, parts[1])); got != vc.AssertionJCS {
					t.Errorf("JWS payload\n got %s\nwant %s", got, vc.AssertionJCS)
				}
				if got := verifyJOSE(t, set, tr.JWS, kid); string(got) != vc.AssertionJCS {
					t.Errorf("go-jose payload %s", got)
				}
				if tr.KID != kid {
					t.Errorf("kid %q, want %q", tr.KID, kid)
				}
				if tr.Assertion.ArgumentsSHA256 != vc.ArgumentsSHA256 {
					t.Errorf("arguments_sha256 %s, want %s", tr.Assertion.ArgumentsSHA256, vc.ArgumentsSHA256)
				}
				if canon, err := tr.Assertion.Canonical(); err != nil || string(canon) != vc.AssertionJCS {
					t.Errorf("response assertion canonical %s (%v), want %s", canon, err, vc.AssertionJCS)
				}
				att := tr.Attestation
				wantAtt := api.Attestation{Layer: "transport", Source: source, Signature: tr.JWS, Ref: v.wantRef,
					ValidFrom: vc.ServedAt, ValidUntil: v.wantUntil.UTC().Format(time.RFC3339)}
				if att != wantAtt {
					t.Errorf("attestation\n got %+v\nwant %+v", att, wantAtt)
				}
				// Optional members are omitted, never null.
				if bytes.Contains(body, []byte("null")) {
					t.Errorf("response contains null: %s", body)
				}
				if v.wantRef == "" && bytes.Contains(body, []byte(`"ref"`)) {
					t.Errorf("empty ref is not omitted: %s", body)
				}
			})
		}

		// The digest helper agrees with the vector.
		resp, body := h.postJSON("/v1/digests/mcp-arguments", tok, `{"arguments":`+string(vc.Arguments)+`}`)
		wantStatus(t, "digest", resp, body, http.StatusOK)
		var d map[string]string
		decode(t, body, &d)
		if d["arguments_sha256"] != vc.ArgumentsSHA256 || d["canonical"] != vc.ArgumentsJCS {
			t.Errorf("%s: digest %v, want %s %s", vc.Name, d, vc.ArgumentsSHA256, vc.ArgumentsJCS)
		}
	}

	// served_at keeps sub-second precision and is normalized to UTC.
	resp, body = h.postJSON("/v1/keys/villa/mcp-transport", tok,
		`{"tool":"t","arguments":{},"served_at":"2026-06-24T13:40:00.25+02:00","valid_for":"1s","offer_ref":"o"}`)
	wantStatus(t, "fractional served_at", resp, body, http.StatusOK)
	var frac api.TransportResponse
	decode(t, body, &frac)
	if frac.Assertion.ServedAt != "2026-06-24T11:40:00.25Z" || frac.Attestation.ValidFrom != "2026-06-24T11:40:00.25Z" ||
		frac.Attestation.ValidUntil != "2026-06-24T11:40:01.25Z" || frac.Attestation.Ref != "o" {
		t.Errorf("fractional served_at: assertion %+v attestation %+v", frac.Assertion, frac.Attestation)
	}

	// served_at defaults to now (whole seconds, UTC).
	before := time.Now().UTC().Truncate(time.Second)
	resp, body = h.postJSON("/v1/keys/villa/mcp-transport", tok, `{"tool":"t","arguments":{}}`)
	after := time.Now().UTC()
	wantStatus(t, "default served_at", resp, body, http.StatusOK)
	var tr api.TransportResponse
	decode(t, body, &tr)
	at, err := time.Parse(time.RFC3339, tr.Assertion.ServedAt)
	if err != nil || at.Before(before) || at.After(after) || tr.Attestation.ValidFrom != tr.Assertion.ServedAt ||
		tr.Attestation.ValidUntil != at.Add(time.Hour).Format(time.RFC3339) || !strings.HasSuffix(tr.Assertion.ServedAt, "Z") {
		t.Errorf("default served_at: assertion %+v attestation %+v", tr.Assertion, tr.Attestation)
	}
}

func TestSEP2828DigestVectors(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	tok := h.token("any", tokenOK, api.ScopeAuditRead)
	var v struct {
		Cases []struct {
			Name   string          `json:"name"`
			Params json.RawMessage `json:"params"`
			JCS    string          `json:"expected_projection_jcs"`
			Digest string          `json:"expected_digest"`
		} `json:"cases"`
	}
	decode(t, testvectors.Read(t, "sep2828-fallback-projection.json"), &v)
	if len(v.Cases) == 0 {
		t.Fatal("no vectors")
	}
	for _, c := range v.Cases {
		resp, body := h.postJSON("/v1/digests/sep2828", tok, `{"params":`+string(c.Params)+`}`)
		wantStatus(t, c.Name, resp, body, http.StatusOK)
		var d map[string]string
		decode(t, body, &d)
		if d["digest"] != c.Digest || d["canonical"] != c.JCS {
			t.Errorf("%s: got %v, want %s %s", c.Name, d, c.Digest, c.JCS)
		}
	}
}

// TestSEP2828V1DigestVectors (issue 15): the API computes the v1
// authorization-binding projection by name, exactly as the shared vectors
// say, and fails closed with a stable code on each of their six refusals;
// the fallback stays the default and can be named too.
func TestSEP2828V1DigestVectors(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	tok := h.token("any", tokenOK, api.ScopeAuditRead)
	v := testvectors.ReadSEP2828V1(t)
	if v.Projection != api.SEP2828V1 || len(v.Cases) != 11 {
		t.Fatalf("vectors: projection %q, %d cases", v.Projection, len(v.Cases))
	}
	codes := map[string]string{
		"no_binding_fails_closed":         api.CodeAuthorizationBindingMissing,
		"no_meta_fails_closed":            api.CodeAuthorizationBindingMissing,
		"empty_nonce_fails_closed":        api.CodeAuthorizationBindingInvalid,
		"nonce_not_string_fails_closed":   api.CodeAuthorizationBindingInvalid,
		"binding_not_object_fails_closed": api.CodeAuthorizationBindingInvalid,
		"missing_arguments_fails_closed":  api.CodeInvalidRequest,
	}
	closed := 0
	for _, c := range v.Cases {
		resp, body := h.postJSON("/v1/digests/sep2828", tok, `{"projection":"`+v.Projection+`","params":`+string(c.Params)+`}`)
		if c.Expected.Error != "" {
			closed++
			if c.Expected.Error != "fails_closed" || codes[c.ID] == "" {
				t.Fatalf("%s: unexpected vector error %q", c.ID, c.Expected.Error)
			}
			wantError(t, c.ID, resp, body, http.StatusBadRequest, codes[c.ID])
			if strings.Contains(string(body), "sha256:") {
				t.Errorf("%s: a refusal carries a digest: %s", c.ID, body)
			}
			continue
		}
		wantStatus(t, c.ID, resp, body, http.StatusOK)
		var d map[string]string
		decode(t, body, &d)
		if d["digest"] != c.Expected.Digest || d["canonical"] != c.Expected.ProjectionBytes || d["projection"] != api.SEP2828V1 {
			t.Errorf("%s: got %v, want %s %s", c.ID, d, c.Expected.Digest, c.Expected.ProjectionBytes)
		}
	}
	if closed != 6 {
		t.Errorf("%d fail-closed cases, want 6", closed)
	}
	// The fallback, by default and by name, digests a call without a
	// binding; an unknown projection is refused.
	const noBinding = `{"name":"query_table","arguments":{"table":"employees"}}`
	for _, body := range []string{`{"params":` + noBinding + `}`, `{"projection":"fallback_v0","params":` + noBinding + `}`} {
		resp, b := h.postJSON("/v1/digests/sep2828", tok, body)
		wantStatus(t, "fallback", resp, b, http.StatusOK)
		var d map[string]string
		decode(t, b, &d)
		if d["projection"] != api.SEP2828FallbackV0 || d["canonical"] != `{"arguments":{"table":"employees"},"toolName":"query_table"}` {
			t.Errorf("fallback: %v", d)
		}
	}
	resp, b := h.postJSON("/v1/digests/sep2828", tok, `{"projection":"v2","params":`+noBinding+`}`)
	wantError(t, "unknown projection", resp, b, http.StatusBadRequest, api.CodeInvalidRequest)
}

// ---------------------------------------------------------------------------
// 4. JWKS
// ---------------------------------------------------------------------------

type jwksDoc struct {
	Keys []struct {
		KID       string `json:"kid"`
		Kty       string `json:"kty"`
		Crv       string `json:"crv"`
		X         string `json:"x"`
		D         string `json:"d"`
		Alg       string `json:"alg"`
		Use       string `json:"use"`
		Status    string `json:"vrp_key_status"`
		NotBefore string `json:"vrp_not_before"`
		NotAfter  string `json:"vrp_not_after"`
	} `json:"keys"`
}

func TestJWKS(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	// zulu is the oldest key although "alpha" sorts first: it is the default.
	h.createKey("zulu", villa, fixedKind)
	h.createKey("alpha", "example.com", software.Kind)
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys)

	resp, body := h.get("/v1/keys/zulu/jwks.json", "")
	wantStatus(t, "zulu jwks", resp, body, http.StatusOK)
	etag := resp.Header.Get("ETag")
	if etag == "" || !strings.HasPrefix(etag, `"`) || !strings.HasSuffix(etag, `"`) {
		t.Fatalf("ETag %q, want a strong quoted ETag", etag)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "public, max-age=300" {
		t.Errorf("Cache-Control %q", cc)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var doc jwksDoc
	decode(t, body, &doc)
	zuluKID := h.mgr.Keyring().Keys["zulu"].Active.KID()
	if len(doc.Keys) != 1 || doc.Keys[0].KID != zuluKID || doc.Keys[0].Status != "active" || doc.Keys[0].NotBefore == "" ||
		doc.Keys[0].NotAfter != "" || doc.Keys[0].D != "" || doc.Keys[0].Kty != "OKP" || doc.Keys[0].Crv != "Ed25519" ||
		doc.Keys[0].X != b64(h.priv.Public().(ed25519.PublicKey)) || doc.Keys[0].Alg != "EdDSA" || doc.Keys[0].Use != "sig" {
		t.Errorf("zulu JWKS %s", body)
	}

	// The default document is the oldest key's.
	resp2, body2 := h.get("/.well-known/jwks.json", "")
	wantStatus(t, "default jwks", resp2, body2, http.StatusOK)
	if !bytes.Equal(body2, body) || resp2.Header.Get("ETag") != etag {
		t.Errorf("/.well-known/jwks.json is not zulu's JWKS:\n%s", body2)
	}
	if cc := resp2.Header.Get("Cache-Control"); cc != "public, max-age=300" {
		t.Errorf("default Cache-Control %q", cc)
	}
	_, alphaBody := h.get("/v1/keys/alpha/jwks.json", "")
	if bytes.Equal(alphaBody, body) {
		t.Error("alpha and zulu have the same JWKS")
	}

	for _, path := range []string{"/v1/keys/zulu/jwks.json", "/.well-known/jwks.json"} {
		// Conditional requests.
		for _, inm := range []string{etag, "W/" + etag, `"other", ` + etag, "*"} {
			resp, body := h.do(request{method: http.MethodGet, path: path, header: map[string]string{"If-None-Match": inm}})
			if resp.StatusCode != http.StatusNotModified || len(body) != 0 {
				t.Errorf("%s If-None-Match %s: status %d, %d body bytes; want 304 and none", path, inm, resp.StatusCode, len(body))
			}
			if resp.Header.Get("ETag") != etag {
				t.Errorf("%s 304 ETag %q", path, resp.Header.Get("ETag"))
			}
		}
		for _, inm := range []string{`"other"`, `W/"other"`, strings.Trim(etag, `"`)} {
			resp, b := h.do(request{method: http.MethodGet, path: path, header: map[string]string{"If-None-Match": inm}})
			if resp.StatusCode != http.StatusOK || !bytes.Equal(b, body) {
				t.Errorf("%s If-None-Match %s: status %d, want 200 with the document", path, inm, resp.StatusCode)
			}
		}
		// HEAD.
		resp, b := h.do(request{method: http.MethodHead, path: path})
		if resp.StatusCode != http.StatusOK || len(b) != 0 || resp.Header.Get("ETag") != etag ||
			resp.ContentLength != int64(len(body)) || resp.Header.Get("Cache-Control") != "public, max-age=300" {
			t.Errorf("HEAD %s: status %d, %d body bytes, ETag %q, Content-Length %d (want %d)",
				path, resp.StatusCode, len(b), resp.Header.Get("ETag"), resp.ContentLength, len(body))
		}
		resp, b = h.do(request{method: http.MethodHead, path: path, header: map[string]string{"If-None-Match": etag}})
		if resp.StatusCode != http.StatusNotModified || len(b) != 0 {
			t.Errorf("conditional HEAD %s: status %d", path, resp.StatusCode)
		}
	}
	resp, b := h.do(request{method: http.MethodHead, path: "/v1/keys/nokey/jwks.json"})
	if resp.StatusCode != http.StatusNotFound || len(b) != 0 {
		t.Errorf("HEAD unknown key jwks: status %d, %d bytes", resp.StatusCode, len(b))
	}

	// Rotate zulu through the API.
	resp, b = h.postJSON("/v1/keys/zulu/rotate", admin, `{"mode":"now","reason":"test"}`)
	wantStatus(t, "rotate", resp, b, http.StatusOK)
	var rr api.RotateResponse
	decode(t, b, &rr)
	newKID := rr.Active.KID
	if rr.Retired.KID != zuluKID || newKID == zuluKID || !strings.HasSuffix(newKID, "-02") {
		t.Errorf("rotate response: active %s retired %s", newKID, rr.Retired.KID)
	}
	if rr.Retired.NotAfter == "" || rr.Retired.NotAfter != rr.Active.NotBefore {
		t.Errorf("rotate response: retired not_after %q, active not_before %q", rr.Retired.NotAfter, rr.Active.NotBefore)
	}

	for _, path := range []string{"/v1/keys/zulu/jwks.json", "/.well-known/jwks.json"} {
		resp, body := h.do(request{method: http.MethodGet, path: path, header: map[string]string{"If-None-Match": etag}})
		wantStatus(t, path+" after rotate with the old ETag", resp, body, http.StatusOK)
		newETag := resp.Header.Get("ETag")
		if newETag == "" || newETag == etag {
			t.Errorf("%s: ETag %q did not change after rotate", path, newETag)
		}
		var doc jwksDoc
		decode(t, body, &doc)
		if len(doc.Keys) != 2 {
			t.Fatalf("%s after rotate: %s", path, body)
		}
		active, retired := doc.Keys[0], doc.Keys[1] // newest first
		if active.KID != newKID || active.Status != "active" || active.NotAfter != "" {
			t.Errorf("%s: first entry %+v, want the active %s", path, active, newKID)
		}
		if retired.KID != zuluKID || retired.Status != "retired" {
			t.Errorf("%s: second entry %+v, want the retired %s", path, retired, zuluKID)
		}
		if retired.NotAfter == "" || retired.NotAfter != active.NotBefore {
			t.Errorf("%s: gap or overlap: retired vrp_not_after %q, active vrp_not_before %q", path, retired.NotAfter, active.NotBefore)
		}
		nb, err1 := time.Parse(time.RFC3339Nano, retired.NotBefore)
		na, err2 := time.Parse(time.RFC3339Nano, retired.NotAfter)
		if err1 != nil || err2 != nil || !nb.Before(na) || !strings.HasSuffix(retired.NotAfter, "Z") {
			t.Errorf("%s: retired window %q..%q", path, retired.NotBefore, retired.NotAfter)
		}
		resp, b := h.do(request{method: http.MethodGet, path: path, header: map[string]string{"If-None-Match": newETag}})
		if resp.StatusCode != http.StatusNotModified || len(b) != 0 {
			t.Errorf("%s: new ETag not honoured: %d", path, resp.StatusCode)
		}
	}
	// Both kids verify through go-jose: a JWS from before and after rotation.
	set, _ := h.jwks("zulu")
	if len(set.Keys) != 2 {
		t.Fatalf("go-jose sees %d keys", len(set.Keys))
	}
	signTok := h.token("signer", tokenOK, "sign:zulu")
	resp, b = h.postJSON("/v1/keys/zulu/sign", signTok, `{"payload":{"n":1}}`)
	wantStatus(t, "sign after rotate", resp, b, http.StatusOK)
	var sr api.SignResponse
	decode(t, b, &sr)
	verifyJOSE(t, set, sr.JWS, newKID)
	// The admin view of the versions agrees with the JWKS.
	resp, b = h.get("/v1/keys/zulu/versions", admin)
	wantStatus(t, "versions", resp, b, http.StatusOK)
	var vs struct {
		Key      string
		Versions []api.VersionInfo
	}
	decode(t, b, &vs)
	if len(vs.Versions) != 2 || vs.Versions[0].KID != zuluKID || vs.Versions[1].KID != newKID ||
		vs.Versions[0].NotAfter != vs.Versions[1].NotBefore || vs.Versions[1].BackendRef != fixedKind+":"+newKID {
		t.Errorf("versions %s", b)
	}
}

// ---------------------------------------------------------------------------
// 5. Concurrency
// ---------------------------------------------------------------------------

func TestConcurrentSignAndRotate(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("alpha", villa, software.Kind)
	signTok := h.token("signer", tokenOK, "sign:alpha")
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys)

	type result struct{ jws, kid string }
	const signers, rotations, minEach = 16, 5, 8
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		results  []result
		failures []string
		signed   atomic.Int64
		done     = make(chan struct{})
	)
	client := h.srv.Client()
	post := func(path, tok, body string) (int, []byte, error) {
		req, err := http.NewRequest(http.MethodPost, h.srv.URL+path, strings.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Authorization", bearer(tok))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, err = buf.ReadFrom(resp.Body)
		return resp.StatusCode, buf.Bytes(), err
	}
	for g := 0; g < signers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				if i >= minEach {
					select {
					case <-done:
						return
					default:
					}
				}
				body := fmt.Sprintf(`{"payload":{"g":%d,"i":%d},"typ":"JWT"}`, g, i)
				status, b, err := post("/v1/keys/alpha/sign", signTok, body)
				if err != nil || status != http.StatusOK {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("sign %s: %d %s %v", body, status, b, err))
					mu.Unlock()
					continue
				}
				var sr api.SignResponse
				if err := json.Unmarshal(b, &sr); err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("sign response %s: %v", b, err))
					mu.Unlock()
					continue
				}
				signed.Add(1)
				mu.Lock()
				results = append(results, result{sr.JWS, sr.KID})
				mu.Unlock()
			}
		}()
	}
	var rotated []string
	rotErr := make(chan error, 1)
	go func() {
		defer close(done)
		for r := 0; r < rotations; r++ {
			// Let some signatures happen under the current version first.
			mark := signed.Load()
			for deadline := time.Now().Add(10 * time.Second); signed.Load() < mark+int64(signers) && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			status, b, err := post("/v1/keys/alpha/rotate", admin, `{"mode":"now","reason":"concurrency"}`)
			if err != nil || status != http.StatusOK {
				rotErr <- fmt.Errorf("rotate %d: %d %s %v", r, status, b, err)
				return
			}
			var rr api.RotateResponse
			if err := json.Unmarshal(b, &rr); err != nil {
				rotErr <- err
				return
			}
			rotated = append(rotated, rr.Active.KID)
		}
		mark := signed.Load()
		for deadline := time.Now().Add(10 * time.Second); signed.Load() < mark+int64(signers) && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		rotErr <- nil
	}()
	if err := <-rotErr; err != nil {
		t.Error(err)
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	if len(rotated) != rotations {
		t.Fatalf("%d rotations succeeded, want %d", len(rotated), rotations)
	}

	set, raw := h.jwks("alpha")
	var doc jwksDoc
	decode(t, raw, &doc)
	if len(doc.Keys) != rotations+1 || doc.Keys[0].KID != rotated[len(rotated)-1] || doc.Keys[0].Status != "active" {
		t.Fatalf("final JWKS %s", raw)
	}
	for i := 1; i < len(doc.Keys); i++ {
		if doc.Keys[i].Status != "retired" || doc.Keys[i].NotAfter != doc.Keys[i-1].NotBefore {
			t.Errorf("final JWKS: entry %d (%s) %s, not_after %s; next not_before %s", i, doc.Keys[i].KID, doc.Keys[i].Status,
				doc.Keys[i].NotAfter, doc.Keys[i-1].NotBefore)
		}
	}
	kids := map[string]int{}
	for _, r := range results {
		payload := verifyJOSE(t, set, r.jws, r.kid)
		if !bytes.HasPrefix(payload, []byte(`{"g":`)) {
			t.Errorf("payload %s", payload)
		}
		kids[r.kid]++
	}
	if len(results) < signers*minEach {
		t.Errorf("%d signatures, want at least %d", len(results), signers*minEach)
	}
	if len(kids) < 2 {
		t.Errorf("all %d signatures used one kid %v; rotation did not overlap signing", len(results), kids)
	}
	t.Logf("%d signatures over %d kids: %v", len(results), len(kids), kids)
}

// TestCreateKey checks the create-key response and its audit rows.
func TestCreateKey(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys)
	resp, body := h.postJSON("/v1/keys", admin, `{"name":"fresh","issuer":"example.org","algorithm":"ES256","jwks_url":"https://keys.example.org/fresh/jwks.json","reason":"new node"}`)
	wantStatus(t, "create", resp, body, http.StatusCreated)
	var cr api.CreateKeyResponse
	decode(t, body, &cr)
	if cr.Key.Name != "fresh" || cr.Key.Algorithm != "ES256" || cr.Key.Backend != "software" || !cr.Key.Default ||
		cr.Key.JWKSURL != "https://keys.example.org/fresh/jwks.json" || cr.Key.ActiveKID != cr.Version.KID ||
		cr.Version.Status != "active" || cr.Version.Kty != "EC" || cr.Key.Versions != 1 {
		t.Errorf("create response %s", body)
	}
	rows, err := h.store.ListAudit(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[0].Action != "key.create" || rows[0].Reason != "new node" || !strings.HasSuffix(rows[0].Actor, "(admin)") {
		t.Errorf("audit rows %+v", rows)
	}
}

// touchFailStore fails every last-used update and reports each attempt.
type touchFailStore struct {
	store.Store
	touched chan struct{}
}

func (s touchFailStore) TouchToken(context.Context, string, time.Time) error {
	s.touched <- struct{}{}
	return errors.New("store unreachable")
}

// TestAuthenticatorNilLogger: a failed best-effort last-used update must not
// crash the process when the Authenticator was built without a logger.
func TestAuthenticatorNilLogger(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("alpha", villa, fixedKind)
	secret := h.token("n", tokenOK, api.ScopeSignAll)
	st := touchFailStore{Store: h.store, touched: make(chan struct{}, 1)}
	a := api.NewAuthenticator(st, nil)
	if err := a.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(api.Config{Manager: h.mgr, Auth: a, Store: h.store}).Handler())
	defer srv.Close()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/keys/alpha/sign", strings.NewReader(`{"payload":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", bearer(secret))
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	select {
	case <-st.touched:
	case <-time.After(5 * time.Second):
		t.Fatal("no last-used update attempted")
	}
	// Give the background goroutine time to log the failure (before the
	// fix, (*slog.Logger)(nil).Debug panicked and took the process down).
	time.Sleep(100 * time.Millisecond)
}

// TestServedAtSkew: a node may not backdate or postdate served_at beyond
// the configured clock skew.
func TestServedAtSkew(t *testing.T) {
	h := newHarness(t, harnessOpts{MaxServedAtSkew: 10 * time.Minute, ClockOffset: -time.Hour})
	h.createKey("villa", villa, fixedKind)
	tok := h.token("node", tokenOK, "sign:villa")
	now := time.Now().UTC()
	for _, c := range []struct {
		served time.Time
		status int
	}{
		{now.Add(-9 * time.Minute), http.StatusOK},
		{now.Add(-11 * time.Minute), http.StatusBadRequest},
		{now.Add(9 * time.Minute), http.StatusOK},
		{now.Add(11 * time.Minute), http.StatusBadRequest},
	} {
		resp, body := h.postJSON("/v1/keys/villa/mcp-transport", tok,
			`{"tool":"t","arguments":{},"served_at":"`+c.served.Format(time.RFC3339)+`"}`)
		if c.status == http.StatusBadRequest {
			wantError(t, "served_at "+c.served.Format(time.RFC3339), resp, body, c.status, api.CodeInvalidRequest)
		} else {
			wantStatus(t, "served_at "+c.served.Format(time.RFC3339), resp, body, c.status)
		}
	}
}

// TestRateLimit: each token has its own bucket; an empty bucket answers 429
// rate_limited with Retry-After, and other tokens and public routes are
// unaffected.
func TestRateLimit(t *testing.T) {
	h := newHarness(t, harnessOpts{RateLimit: api.RateLimit{PerSecond: 0.5, Burst: 3}})
	h.createKey("villa", villa, fixedKind)
	a := h.token("a", tokenOK, "sign:villa")
	b := h.token("b", tokenOK, "sign:villa")
	body := `{"payload":{"a":1}}`
	for i := 0; i < 3; i++ {
		resp, rb := h.postJSON("/v1/keys/villa/sign", a, body)
		wantStatus(t, fmt.Sprintf("request %d within the burst", i+1), resp, rb, http.StatusOK)
	}
	resp, rb := h.postJSON("/v1/keys/villa/sign", a, body)
	wantError(t, "request over the burst", resp, rb, http.StatusTooManyRequests, api.CodeRateLimited)
	if got := resp.Header.Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After %q, want \"2\" (one token at 0.5/s)", got)
	}
	resp, rb = h.postJSON("/v1/keys/villa/sign", b, body)
	wantStatus(t, "another token", resp, rb, http.StatusOK)
	resp, rb = h.get("/v1/keys/villa/jwks.json", "")
	wantStatus(t, "public JWKS", resp, rb, http.StatusOK)
}
