package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/backends/software"
	"github.com/keysvc/keysvc/internal/strictjson"
	"github.com/keysvc/keysvc/jwksserve"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// Tests of the lifecycle admin routes (policy, scheduled rotation,
// activate, revoke, audit) and of the public key-history and did:web
// documents, against the real API in-process (harness_test.go).

// lcSend sends a request with a bearer token (none when tok is "") and,
// when body is not "", a JSON body.
func (h *harness) lcSend(method, path, tok, body string) (*http.Response, []byte) {
	h.t.Helper()
	r := request{method: method, path: path}
	if tok != "" {
		r.auth = bearer(tok)
	}
	if body != "" {
		r.ctype, r.body = "application/json", []byte(body)
	}
	return h.do(r)
}

// pastRFC3339 is an instant safely before the harness clock.
func pastRFC3339(d time.Duration) string { return time.Now().Add(-d).UTC().Format(time.RFC3339Nano) }

func revokeBody(at, reason string) string {
	b, _ := json.Marshal(map[string]string{"compromised_at": at, "reason": reason})
	return string(b)
}

func (h *harness) versionsOf(name string) []store.KeyVersion {
	h.t.Helper()
	vs, err := h.store.ListVersions(context.Background(), name)
	if err != nil {
		h.t.Fatal(err)
	}
	return vs
}

// ---------------------------------------------------------------------------
// Route x scope matrix
// ---------------------------------------------------------------------------

func TestLifecycleAuthMatrix(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("alpha", villa, software.Kind)
	mgr := h.mgr
	bg := context.Background()
	actor := rotation.Actor{Name: "test", Reason: "matrix setup"}

	signAll := h.token("sign-all", tokenOK, api.ScopeSignAll)
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys)
	revoker := h.token("revoker", tokenOK, api.ScopeAdminRevoke)
	auditor := h.token("auditor", tokenOK, api.ScopeAuditRead)
	noScopes := h.token("none", tokenOK)
	everything := []string{api.ScopeSignAll, api.ScopeAdminKeys, api.ScopeAdminRevoke, api.ScopeAuditRead}
	all := h.token("all", tokenOK, everything...)
	expired := h.token("expired", tokenExpired, everything...)
	revokedTok := h.token("revoked", tokenRevoked, everything...)

	// Each route gets a fresh valid target before every request (prep),
	// so that a refusal is never a 404/409 in disguise.
	noPending := func() {
		if h.mgr.Keyring().Keys["alpha"].Next != nil {
			if _, _, err := mgr.Rotate(bg, "alpha", actor); err != nil {
				t.Fatal(err)
			}
		}
	}
	pendingKID := func() string {
		e := h.mgr.Keyring().Keys["alpha"]
		if e.Next == nil {
			v, err := mgr.ScheduleRotation(bg, "alpha", actor)
			if err != nil {
				t.Fatal(err)
			}
			return v.KID
		}
		return e.Next.KID()
	}
	retiredKID := func() string {
		noPending()
		_, old, err := mgr.Rotate(bg, "alpha", actor)
		if err != nil {
			t.Fatal(err)
		}
		return old.KID
	}
	type route struct {
		name      string
		method    string
		target    func() string // returns the path, preparing state
		body      string
		ok        int
		allowed   map[string]string
		forbidden map[string]string
	}
	adminOK := map[string]string{"admin:keys": admin, "all": all}
	adminNo := map[string]string{"sign:*": signAll, "admin:revoke": revoker, "audit:read": auditor, "no scopes": noScopes}
	routes := []route{
		{"set policy", http.MethodPut, func() string { return "/v1/keys/alpha/policy" },
			`{"rotation_period":"720h","prepublish":"10m","reason":"matrix"}`, 200, adminOK, adminNo},
		{"rotate now", http.MethodPost, func() string { return "/v1/keys/alpha/rotate" },
			`{"mode":"now","reason":"matrix"}`, 200, adminOK, adminNo},
		{"rotate scheduled", http.MethodPost, func() string { noPending(); return "/v1/keys/alpha/rotate" },
			`{"mode":"scheduled","reason":"matrix"}`, 200, adminOK, adminNo},
		{"activate", http.MethodPost, func() string { return "/v1/versions/" + pendingKID() + "/activate" },
			`{"reason":"matrix","emergency":true}`, 200, adminOK, adminNo},
		{"revoke", http.MethodPost, func() string { return "/v1/versions/" + retiredKID() + "/revoke" },
			revokeBody(pastRFC3339(time.Hour), "matrix"), 200,
			map[string]string{"admin:revoke": revoker, "all": all},
			map[string]string{"admin:keys": admin, "sign:*": signAll, "audit:read": auditor, "no scopes": noScopes}},
		{"destroy", http.MethodPost, func() string { return "/v1/versions/" + retiredKID() + "/destroy" },
			`{"reason":"matrix","pending_days":30}`, 200,
			map[string]string{"admin:revoke": revoker, "all": all},
			map[string]string{"admin:keys": admin, "sign:*": signAll, "audit:read": auditor, "no scopes": noScopes}},
		{"audit", http.MethodGet, func() string { return "/v1/audit?limit=5" }, "", 200,
			map[string]string{"audit:read": auditor, "all": all},
			map[string]string{"admin:keys": admin, "admin:revoke": revoker, "sign:*": signAll, "no scopes": noScopes}},
	}
	unauth := []struct{ label, header string }{
		{"no Authorization header", ""},
		{"Basic scheme", "Basic YWRtaW46YWRtaW4="},
		{"unknown token", "Bearer ksv_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
		{"expired token", bearer(expired)},
		{"revoked token", bearer(revokedTok)},
	}
	send := func(r route, path, auth string) (*http.Response, []byte) {
		req := request{method: r.method, path: path, auth: auth}
		if r.body != "" {
			req.ctype, req.body = "application/json", []byte(r.body)
		}
		return h.do(req)
	}
	for _, r := range routes {
		t.Run(r.name, func(t *testing.T) {
			for _, u := range unauth {
				path := r.target()
				before := h.snapshot()
				resp, body := send(r, path, u.header)
				wantError(t, u.label, resp, body, http.StatusUnauthorized, api.CodeUnauthorized)
				h.assertUnchanged(u.label, before)
			}
			for label, tok := range r.forbidden {
				path := r.target()
				before := h.snapshot()
				resp, body := send(r, path, bearer(tok))
				wantError(t, "scope "+label, resp, body, http.StatusForbidden, api.CodeForbidden)
				h.assertUnchanged("scope "+label, before)
			}
			for label, tok := range r.allowed {
				path := r.target()
				resp, body := send(r, path, bearer(tok))
				if resp.StatusCode != r.ok {
					t.Errorf("scope %s: %s %s: status %d, want %d (%s)", label, r.method, path, resp.StatusCode, r.ok, body)
				}
			}
		})
	}

	// Changes are attributed to the token; the revocation reason is audited.
	rows, err := h.store.ListAudit(bg, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	revokes := 0
	for _, r := range rows {
		if r.Action == "version.revoke" {
			revokes++
			if !strings.HasPrefix(r.Actor, "token:") || !(strings.HasSuffix(r.Actor, "(revoker)") || strings.HasSuffix(r.Actor, "(all)")) || r.Reason != "matrix" {
				t.Errorf("version.revoke row actor %q reason %q", r.Actor, r.Reason)
			}
		}
	}
	if revokes != 2 {
		t.Errorf("%d version.revoke rows, want 2 (one per allowed token)", revokes)
	}
	destroys := 0
	for _, r := range rows {
		if r.Action == "version.destroy_material" {
			destroys++
			if !(strings.HasSuffix(r.Actor, "(revoker)") || strings.HasSuffix(r.Actor, "(all)")) || r.Reason != "matrix" {
				t.Errorf("version.destroy_material row actor %q reason %q", r.Actor, r.Reason)
			}
		}
	}
	if destroys != 2 {
		t.Errorf("%d version.destroy_material rows, want 2 (one per allowed token)", destroys)
	}
	if broken, err := store.VerifyAuditChain(rows); err != nil || broken != 0 {
		t.Errorf("VerifyAuditChain = %d, %v", broken, err)
	}
}

// ---------------------------------------------------------------------------
// Bad input and lifecycle refusals
// ---------------------------------------------------------------------------

func TestLifecycleBadInput(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("alpha", villa, software.Kind)
	tok := h.token("all", tokenOK, api.ScopeAdminKeys, api.ScopeAdminRevoke, api.ScopeAuditRead)
	v1 := h.mgr.Keyring().Keys["alpha"].Active.KID()

	check := func(t *testing.T, what, method, path, body string, status int, code string, msgs ...string) {
		t.Helper()
		before := h.snapshot()
		resp, b := h.lcSend(method, path, tok, body)
		wantError(t, what, resp, b, status, code)
		h.assertUnchanged(what, before)
		var e errorBody
		_ = json.Unmarshal(b, &e)
		for _, m := range msgs {
			if !strings.Contains(e.Error.Message, m) {
				t.Errorf("%s: message %q does not mention %q", what, e.Error.Message, m)
			}
		}
	}

	t.Run("rotate mode", func(t *testing.T) {
		for _, mode := range []string{"later", "NOW", "Scheduled", " now", "immediate"} {
			check(t, "mode "+mode, http.MethodPost, "/v1/keys/alpha/rotate", `{"mode":"`+mode+`"}`, 400, api.CodeInvalidRequest, "mode")
		}
		check(t, "mode as a number", http.MethodPost, "/v1/keys/alpha/rotate", `{"mode":1}`, 400, strictjson.CodeInvalidField)
		check(t, "unknown member", http.MethodPost, "/v1/keys/alpha/rotate", `{"mode":"now","when":"now"}`, 400, strictjson.CodeUnknownField)
		for _, mode := range []string{"now", "scheduled"} {
			check(t, "rotate a missing key "+mode, http.MethodPost, "/v1/keys/nokey/rotate", `{"mode":"`+mode+`"}`, 404, api.CodeKeyNotFound)
		}
	})

	t.Run("policy", func(t *testing.T) {
		for _, c := range []struct{ body, field string }{
			{`{"rotation_period":"1 day"}`, "rotation_period"},
			{`{"rotation_period":"720"}`, "rotation_period"},
			{`{"rotation_period":"P30D"}`, "rotation_period"},
			{`{"prepublish":"abc"}`, "prepublish"},
			{`{"prepublish":"10 minutes"}`, "prepublish"},
			{`{"retention":"5"}`, "retention"},
			{`{"retention":"forever"}`, "retention"},
		} {
			check(t, "bad duration "+c.body, http.MethodPut, "/v1/keys/alpha/policy", c.body, 400, api.CodeInvalidRequest, c.field)
		}
		check(t, "duration as a number", http.MethodPut, "/v1/keys/alpha/policy", `{"rotation_period":3600}`, 400, strictjson.CodeInvalidField)
		for _, body := range []string{`{"rotation_period":"-1h"}`, `{"prepublish":"-10m"}`, `{"retention":"-1s"}`} {
			check(t, "negative "+body, http.MethodPut, "/v1/keys/alpha/policy", body, 400, api.CodeInvalidRequest, "negative")
		}
		// prepublish must exceed the JWKS max-age (300 s here), and say why.
		for _, pre := range []string{"5m", "300s", "299s", "1s", "1ns"} {
			check(t, "prepublish "+pre, http.MethodPut, "/v1/keys/alpha/policy", `{"rotation_period":"720h","prepublish":"`+pre+`"}`,
				400, api.CodeInvalidRequest, "max-age 5m0s", "verifiers may cache")
		}
		check(t, "rotation_period <= prepublish", http.MethodPut, "/v1/keys/alpha/policy", `{"rotation_period":"10m","prepublish":"10m"}`,
			400, api.CodeInvalidRequest, "rotation_period")
		check(t, "rotation_period <= default prepublish", http.MethodPut, "/v1/keys/alpha/policy", `{"rotation_period":"10m"}`,
			400, api.CodeInvalidRequest, "rotation_period")
		check(t, "policy of a missing key", http.MethodPut, "/v1/keys/nokey/policy", `{"rotation_period":"720h"}`, 404, api.CodeKeyNotFound)
		check(t, "create with prepublish = max-age", http.MethodPost, "/v1/keys",
			`{"name":"beta","issuer":"example.org","policy":{"rotation_period":"720h","prepublish":"5m"}}`, 400, api.CodeInvalidRequest, "max-age")

		resp, b := h.lcSend(http.MethodPut, "/v1/keys/alpha/policy", tok, `{"rotation_period":"720h","prepublish":"301s","retention":"8760h","reason":"ok"}`)
		wantStatus(t, "prepublish 301s", resp, b, http.StatusOK)
		var out struct {
			Key    string          `json:"key"`
			Policy rotation.Policy `json:"policy"`
		}
		decode(t, b, &out)
		want := rotation.Policy{RotationPeriod: rotation.Duration(720 * time.Hour), Prepublish: rotation.Duration(301 * time.Second), Retention: rotation.Duration(8760 * time.Hour)}
		if out.Key != "alpha" || out.Policy != want {
			t.Errorf("policy response %s", b)
		}
		if got := h.mgr.Keyring().Keys["alpha"].Policy; got != want {
			t.Errorf("Keyring policy %+v", got)
		}
	})

	t.Run("scheduled twice", func(t *testing.T) {
		resp, b := h.lcSend(http.MethodPost, "/v1/keys/alpha/rotate", tok, `{"mode":"scheduled","reason":"first"}`)
		wantStatus(t, "scheduled", resp, b, http.StatusOK)
		var rr api.RotateResponse
		decode(t, b, &rr)
		if rr.Mode != "scheduled" || rr.Pending == nil || rr.Pending.Status != "pending" || rr.Active != nil || rr.Retired != nil {
			t.Fatalf("scheduled response %s", b)
		}
		pend, err := h.store.GetVersion(context.Background(), rr.Pending.KID)
		if err != nil {
			t.Fatal(err)
		}
		if want := pend.PublishedAt.Add(301 * time.Second); !pend.ActivatesAt.Equal(want) || rr.Pending.NotBefore != want.UTC().Format(time.RFC3339Nano) {
			t.Errorf("pending activates %s (vrp_not_before %s), want published + 301s = %s", pend.ActivatesAt, rr.Pending.NotBefore, want)
		}
		check(t, "scheduled twice", http.MethodPost, "/v1/keys/alpha/rotate", `{"mode":"scheduled"}`, 409, api.CodePendingExists, rr.Pending.KID)
		// The admin key listing names the pending version.
		resp, b = h.lcSend(http.MethodGet, "/v1/keys", tok, "")
		wantStatus(t, "list keys", resp, b, http.StatusOK)
		var keys struct{ Keys []api.KeyInfo }
		decode(t, b, &keys)
		if len(keys.Keys) != 1 || keys.Keys[0].NextKID != rr.Pending.KID || keys.Keys[0].NextAt != rr.Pending.NotBefore {
			t.Errorf("key listing %s, want next_kid %s at %s", b, rr.Pending.KID, rr.Pending.NotBefore)
		}
	})

	t.Run("activate", func(t *testing.T) {
		check(t, "activate unknown kid", http.MethodPost, "/v1/versions/"+villa+"-2000-01-01-01/activate", "", 404, api.CodeVersionNotFound)
		check(t, "activate the active version", http.MethodPost, "/v1/versions/"+v1+"/activate", "", 409, api.CodeInvalidTransition)
		check(t, "activate unknown member", http.MethodPost, "/v1/versions/"+v1+"/activate", `{"why":"x"}`, 400, strictjson.CodeUnknownField)
	})

	t.Run("revoke", func(t *testing.T) {
		path := "/v1/versions/" + v1 + "/revoke"
		for _, at := range []string{"2026-05-18", "2026-05-18 10:00:00Z", "2026-05-18T10:00:00", "yesterday", "1716000000", ""} {
			check(t, "compromised_at "+at, http.MethodPost, path, revokeBody(at, "stolen"), 400, api.CodeInvalidRequest, "compromised_at")
		}
		check(t, "compromised_at missing", http.MethodPost, path, `{"reason":"stolen"}`, 400, api.CodeInvalidRequest, "compromised_at")
		check(t, "compromised_at a number", http.MethodPost, path, `{"compromised_at":1716000000,"reason":"stolen"}`, 400, strictjson.CodeInvalidField)
		check(t, "compromised_at in the future", http.MethodPost, path,
			revokeBody(time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "stolen"), 400, api.CodeInvalidRequest, "future")
		check(t, "reason missing", http.MethodPost, path, `{"compromised_at":"`+pastRFC3339(time.Hour)+`"}`, 400, api.CodeInvalidRequest, "reason")
		check(t, "reason blank", http.MethodPost, path, revokeBody(pastRFC3339(time.Hour), "   "), 400, api.CodeInvalidRequest, "reason")
		check(t, "unknown kid", http.MethodPost, "/v1/versions/"+villa+"-2000-01-01-01/revoke", revokeBody(pastRFC3339(time.Hour), "stolen"), 404, api.CodeVersionNotFound)
		check(t, "no body", http.MethodPost, path, "", 415, api.CodeUnsupportedMediaType)

		resp, b := h.lcSend(http.MethodPost, path, tok, revokeBody(pastRFC3339(time.Hour), "stolen"))
		wantStatus(t, "revoke", resp, b, http.StatusOK)
		check(t, "revoke twice", http.MethodPost, path, revokeBody(pastRFC3339(time.Hour), "again"), 409, api.CodeInvalidTransition)
		check(t, "activate a revoked version", http.MethodPost, "/v1/versions/"+v1+"/activate", "", 409, api.CodeInvalidTransition)
	})

	t.Run("audit paging parameters", func(t *testing.T) {
		for _, q := range []string{"after=-1", "after=x", "after=1.5", "after=1e3", "limit=0", "limit=-1", "limit=10001", "limit=x", "limit=2.5", "after=1&limit=0"} {
			check(t, "audit "+q, http.MethodGet, "/v1/audit?"+q, "", 400, api.CodeInvalidRequest)
		}
		for _, q := range []string{"", "?after=0", "?limit=1", "?limit=10000", "?after=999999"} {
			resp, b := h.lcSend(http.MethodGet, "/v1/audit"+q, tok, "")
			wantStatus(t, "audit "+q, resp, b, http.StatusOK)
		}
	})
}

// ---------------------------------------------------------------------------
// Public documents after a revocation
// ---------------------------------------------------------------------------

// getDoc fetches a public document (no token) and checks its caching headers.
func (h *harness) getDoc(t *testing.T, path string) ([]byte, string) {
	t.Helper()
	resp, body := h.do(request{method: http.MethodGet, path: path})
	wantStatus(t, "GET "+path, resp, body, http.StatusOK)
	etag := resp.Header.Get("ETag")
	if etag == "" || !strings.HasPrefix(etag, `"`) {
		t.Errorf("GET %s: ETag %q", path, etag)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "public, max-age=300" {
		t.Errorf("GET %s: Cache-Control %q", path, cc)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET %s: Content-Type %q", path, ct)
	}
	resp, b := h.do(request{method: http.MethodGet, path: path, header: map[string]string{"If-None-Match": etag}})
	if resp.StatusCode != http.StatusNotModified || len(b) != 0 || resp.Header.Get("ETag") != etag {
		t.Errorf("GET %s If-None-Match %s: status %d, %d bytes, ETag %q; want 304", path, etag, resp.StatusCode, len(b), resp.Header.Get("ETag"))
	}
	return body, etag
}

func TestLifecycleDocuments(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("villa", villa, software.Kind) // oldest: the default key
	h.createKey("transport", villa, software.Kind)
	h.createKey("other", "example.com", software.Kind)
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys)
	revoker := h.token("revoker", tokenOK, api.ScopeAdminRevoke)
	bg := context.Background()

	histBefore, histETag := h.getDoc(t, "/v1/keys/villa/history.json")
	didBefore, didETag := h.getDoc(t, "/.well-known/did.json")

	resp, b := h.lcSend(http.MethodPost, "/v1/keys/villa/rotate", admin, `{"mode":"now","reason":"rotate"}`)
	wantStatus(t, "rotate", resp, b, http.StatusOK)
	var rr api.RotateResponse
	decode(t, b, &rr)
	v1, v2 := rr.Retired.KID, rr.Active.KID
	resp, b = h.lcSend(http.MethodPost, "/v1/keys/transport/rotate", admin, `{"mode":"scheduled"}`)
	wantStatus(t, "schedule transport", resp, b, http.StatusOK)

	// compromised_at with an offset and nanoseconds: stored in UTC, to the µs.
	comp := time.Now().Add(-2 * time.Hour).In(time.FixedZone("CEST", 2*3600)).Truncate(time.Second).Add(123456789 * time.Nanosecond)
	wantComp := comp.UTC().Truncate(time.Microsecond).Format(time.RFC3339Nano)
	resp, b = h.lcSend(http.MethodPost, "/v1/versions/"+v1+"/revoke", revoker, revokeBody(comp.Format(time.RFC3339Nano), "backup disk stolen"))
	wantStatus(t, "revoke", resp, b, http.StatusOK)
	var rv api.RevokeResponse
	decode(t, b, &rv)
	if rv.Revoked.KID != v1 || rv.Revoked.Status != "revoked" || rv.Revoked.CompromisedAt != wantComp || rv.Active != nil {
		t.Errorf("revoke response %s, want %s revoked, compromised %s, no replacement", b, v1, wantComp)
	}

	// history.json: exactly the key-history document of the stored versions.
	key, err := h.store.GetKey(bg, "villa")
	if err != nil {
		t.Fatal(err)
	}
	want, err := jwksserve.BuildHistory(key, h.versionsOf("villa"))
	if err != nil {
		t.Fatal(err)
	}
	// The well-known document is the issuer's: both keys of villa's issuer
	// (by name), not example.com's.
	tkey, err := h.store.GetKey(bg, "transport")
	if err != nil {
		t.Fatal(err)
	}
	wantIssuer, err := jwksserve.BuildIssuerHistory(villa, []jwksserve.KeyVersions{
		{Key: tkey, Versions: h.versionsOf("transport")}, {Key: key, Versions: h.versionsOf("villa")}})
	if err != nil {
		t.Fatal(err)
	}
	if body, _ := h.getDoc(t, api.WellKnownHistory); !bytes.Equal(body, wantIssuer.Body) {
		t.Errorf("%s:\n%s\nwant\n%s", api.WellKnownHistory, body, wantIssuer.Body)
	}
	for _, path := range []string{"/v1/keys/villa/history.json"} {
		body, etag := h.getDoc(t, path)
		if !bytes.Equal(body, want.Body) || etag != want.ETag {
			t.Errorf("%s:\n%s\nwant\n%s", path, body, want.Body)
		}
		if etag == histETag || bytes.Equal(body, histBefore) {
			t.Errorf("%s did not change after the revocation", path)
		}
		// The old ETag no longer matches.
		resp, b := h.do(request{method: http.MethodGet, path: path, header: map[string]string{"If-None-Match": histETag}})
		if resp.StatusCode != http.StatusOK || !bytes.Equal(b, want.Body) {
			t.Errorf("%s with the old ETag: status %d", path, resp.StatusCode)
		}
	}
	var hist jwksserve.History
	decode(t, want.Body, &hist)
	if hist.Issuer != villa || hist.Key != "villa" || len(hist.Keys) != 1 || len(hist.Revoked) != 1 {
		t.Fatalf("history %s", want.Body)
	}
	r, a := hist.Revoked[0], hist.Keys[0]
	if r.KID != v1 || r.Status != "revoked" || r.CompromisedAt != wantComp || r.RevocationReason != "backup disk stolen" ||
		r.Backend != software.Kind || r.NotBefore == "" || r.NotAfter != rr.Retired.NotAfter || r.NotAfter != a.NotBefore {
		t.Errorf("revoked history entry %+v", r)
	}
	if a.KID != v2 || a.Status != "active" || a.Backend != software.Kind || a.CompromisedAt != "" || a.NotAfter != "" {
		t.Errorf("active history entry %+v", a)
	}
	if !strings.Contains(string(want.Body), `"vrp_compromised_at": "`+wantComp+`"`) ||
		!strings.Contains(string(want.Body), `"vrp_revocation_reason": "backup disk stolen"`) ||
		!strings.Contains(string(want.Body), `"vrp_backend": "software"`) {
		t.Errorf("history body lacks lifecycle members:\n%s", want.Body)
	}

	// The plain JWKS leaves the revoked version out.
	set, _ := h.jwks("villa")
	if len(set.Keys) != 1 || set.Keys[0].KeyID != v2 {
		t.Errorf("JWKS after revocation lists %d keys", len(set.Keys))
	}

	// did.json: every published version of every key of the default
	// key's issuer (keys by name, newest version first), revoked ones out.
	var entries []jwksserve.Entry
	for _, name := range []string{"transport", "villa"} {
		vs := h.versionsOf(name)
		for i := len(vs) - 1; i >= 0; i-- {
			if vs[i].State == store.StateRevoked {
				continue
			}
			e, err := jwksserve.EntryFor(vs[i])
			if err != nil {
				t.Fatal(err)
			}
			entries = append(entries, e)
		}
	}
	wantDID, err := jwksserve.BuildDID(villa, entries)
	if err != nil {
		t.Fatal(err)
	}
	didBody, didETag2 := h.getDoc(t, "/.well-known/did.json")
	if !bytes.Equal(didBody, wantDID.Body) || didETag2 != wantDID.ETag {
		t.Errorf("did.json:\n%s\nwant\n%s", didBody, wantDID.Body)
	}
	if didETag2 == didETag || bytes.Equal(didBody, didBefore) {
		t.Error("did.json did not change")
	}
	var did jwksserve.DIDDocument
	decode(t, didBody, &did)
	if did.ID != "did:web:"+villa || len(did.VerificationMethod) != 3 || len(did.AssertionMethod) != 3 {
		t.Errorf("did.json %s", didBody)
	}
	for i, vm := range did.VerificationMethod {
		if vm.Type != "JsonWebKey2020" || vm.Controller != did.ID || vm.ID != did.ID+"#"+vm.PublicKeyJwk.KID || did.AssertionMethod[i] != vm.ID {
			t.Errorf("verification method %+v", vm)
		}
	}
	if strings.Contains(string(didBody), v1) {
		t.Errorf("did.json lists the revoked %s", v1)
	}
	if !strings.Contains(string(didBody), v2) {
		t.Errorf("did.json lacks %s", v2)
	}

	resp, b = h.get("/v1/keys/nokey/history.json", "")
	wantError(t, "history of a missing key", resp, b, http.StatusNotFound, api.CodeKeyNotFound)
}

// TestPlainJOSEVerifierFailsClosed: a lifecycle-unaware JOSE verifier that
// reads /.well-known/jwks.json cannot find a revoked key, so it rejects a
// signature made before the revocation, and verifies the replacement's.
func TestPlainJOSEVerifierFailsClosed(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("villa", villa, software.Kind)
	signer := h.token("signer", tokenOK, "sign:villa")
	revoker := h.token("revoker", tokenOK, api.ScopeAdminRevoke)

	fetch := func() jose.JSONWebKeySet {
		t.Helper()
		resp, body := h.get("/.well-known/jwks.json", "")
		wantStatus(t, "jwks", resp, body, http.StatusOK)
		var ks jose.JSONWebKeySet
		if err := json.Unmarshal(body, &ks); err != nil {
			t.Fatalf("go-jose cannot read the JWKS: %v", err)
		}
		return ks
	}
	sign := func(payload string) api.SignResponse {
		t.Helper()
		resp, body := h.postJSON("/v1/keys/villa/sign", signer, `{"payload":`+payload+`}`)
		wantStatus(t, "sign", resp, body, http.StatusOK)
		var sr api.SignResponse
		decode(t, body, &sr)
		return sr
	}
	verify := func(ks jose.JSONWebKeySet, jws string) ([]byte, error) {
		obj, err := jose.ParseSignedCompact(jws, []jose.SignatureAlgorithm{jose.EdDSA})
		if err != nil {
			return nil, err
		}
		kid := obj.Signatures[0].Protected.KeyID
		keys := ks.Key(kid)
		if len(keys) == 0 {
			return nil, fmt.Errorf("no key with kid %q in the JWKS", kid)
		}
		return obj.Verify(keys[0].Key)
	}

	old := sign(`{"offer":"before"}`)
	if p, err := verify(fetch(), old.JWS); err != nil || string(p) != `{"offer":"before"}` {
		t.Fatalf("before the revocation: %q, %v", p, err)
	}

	resp, b := h.lcSend(http.MethodPost, "/v1/versions/"+old.KID+"/revoke", revoker, revokeBody(pastRFC3339(time.Minute), "HSM backup leaked"))
	wantStatus(t, "revoke", resp, b, http.StatusOK)
	var rv api.RevokeResponse
	decode(t, b, &rv)
	if rv.Active == nil || rv.Active.KID == old.KID || rv.Revoked.NotAfter != rv.Active.NotBefore {
		t.Fatalf("revoke response %s, want a replacement starting where the revoked version stopped", b)
	}

	ks := fetch()
	if got := ks.Key(old.KID); len(got) != 0 {
		t.Fatalf("the JWKS still offers the revoked %s to a plain JOSE verifier", old.KID)
	}
	if _, err := verify(ks, old.JWS); err == nil {
		t.Fatalf("a plain JOSE verifier accepted a signature of the revoked %s", old.KID)
	}
	fresh := sign(`{"offer":"after"}`)
	if fresh.KID != rv.Active.KID {
		t.Fatalf("signed with %s, want the replacement %s", fresh.KID, rv.Active.KID)
	}
	if p, err := verify(ks, fresh.JWS); err != nil || string(p) != `{"offer":"after"}` {
		t.Fatalf("replacement signature: %q, %v", p, err)
	}
	if len(ks.Keys) != 1 {
		t.Errorf("JWKS has %d keys, want only the replacement", len(ks.Keys))
	}
	// The key-history document still has the revoked key, for
	// lifecycle-aware verifiers.
	hist, _ := h.getDoc(t, api.WellKnownHistory)
	var doc jwksserve.History
	decode(t, hist, &doc)
	found := false
	for _, e := range doc.Revoked {
		if e.KID == old.KID {
			found = e.Status == "revoked" && e.CompromisedAt != "" && e.RevocationReason == "HSM backup leaked"
		}
	}
	if !found {
		t.Errorf("key history lacks the revoked %s with its metadata under vrp_revoked_keys:\n%s", old.KID, hist)
	}
	// ... and a plain JOSE library reading the history document as a JWKS
	// (RFC 7517 §5: its keys member) cannot verify with it (ADR 0027).
	var asJWKS jose.JSONWebKeySet
	if err := json.Unmarshal(hist, &asJWKS); err != nil {
		t.Fatalf("history as a JWKS: %v", err)
	}
	if got := asJWKS.Key(old.KID); len(got) != 0 {
		t.Fatalf("the key history offers the revoked %s to a plain JOSE verifier under keys", old.KID)
	}
	if _, err := verify(asJWKS, old.JWS); err == nil {
		t.Fatalf("a plain JOSE verifier accepted a signature of the revoked %s through the key history", old.KID)
	}
	if p, err := verify(asJWKS, fresh.JWS); err != nil || string(p) != `{"offer":"after"}` {
		t.Fatalf("replacement signature through the key history: %q, %v", p, err)
	}
}

// ---------------------------------------------------------------------------
// Audit trail
// ---------------------------------------------------------------------------

func TestAuditEndpoint(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys)
	revoker := h.token("revoker", tokenOK, api.ScopeAdminRevoke)
	auditor := h.token("auditor", tokenOK, api.ScopeAuditRead)

	resp, b := h.lcSend(http.MethodGet, "/v1/audit", auditor, "")
	wantStatus(t, "empty audit", resp, b, http.StatusOK)
	if strings.TrimSpace(string(b)) != `{"events":[]}` {
		t.Errorf("empty audit trail: %s, want {\"events\":[]}", b)
	}

	resp, b = h.lcSend(http.MethodPost, "/v1/keys", admin, `{"name":"villa","issuer":"`+villa+`","reason":"launch"}`)
	wantStatus(t, "create", resp, b, http.StatusCreated)
	var cr api.CreateKeyResponse
	decode(t, b, &cr)
	resp, b = h.lcSend(http.MethodPost, "/v1/keys/villa/rotate", admin, `{"mode":"scheduled","reason":"quarterly"}`)
	wantStatus(t, "schedule", resp, b, http.StatusOK)
	resp, b = h.lcSend(http.MethodPost, "/v1/versions/"+cr.Version.KID+"/revoke", revoker, revokeBody(pastRFC3339(time.Minute), "laptop stolen"))
	wantStatus(t, "revoke", resp, b, http.StatusOK)
	resp, b = h.lcSend(http.MethodPut, "/v1/keys/villa/policy", admin, `{"rotation_period":"2160h","reason":"policy"}`)
	wantStatus(t, "policy", resp, b, http.StatusOK)

	rows, err := h.store.ListAudit(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) < 8 {
		t.Fatalf("%d audit rows", len(rows))
	}
	wantAll := make([]api.AuditEvent, 0, len(rows))
	for _, r := range rows {
		wantAll = append(wantAll, api.AuditEventFrom(r))
	}

	get := func(q string) []api.AuditEvent {
		t.Helper()
		resp, b := h.lcSend(http.MethodGet, "/v1/audit"+q, auditor, "")
		wantStatus(t, "audit"+q, resp, b, http.StatusOK)
		var out struct {
			Events []api.AuditEvent `json:"events"`
		}
		decode(t, b, &out)
		return out.Events
	}
	same := func(what string, got, want []api.AuditEvent) {
		t.Helper()
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		if !bytes.Equal(gb, wb) {
			t.Errorf("%s:\n got %s\nwant %s", what, gb, wb)
		}
	}

	all := get("")
	same("all events", all, wantAll)
	for i, ev := range all {
		if ev.Seq != int64(i+1) {
			t.Errorf("event %d has seq %d: not ascending from 1 without gaps", i, ev.Seq)
		}
		if i > 0 && ev.PrevHash != all[i-1].Hash {
			t.Errorf("event %d prev_hash does not chain", ev.Seq)
		}
		if _, err := time.Parse("2006-01-02T15:04:05.000000Z07:00", ev.At); err != nil || !strings.HasSuffix(ev.At, "Z") {
			t.Errorf("event %d at %q", ev.Seq, ev.At)
		}
	}
	same("after=0", get("?after=0"), wantAll)
	same("after=2&limit=3", get("?after=2&limit=3"), wantAll[2:5])
	same("limit=1", get("?limit=1"), wantAll[:1])
	same("after=last", get(fmt.Sprintf("?after=%d", len(wantAll))), []api.AuditEvent{})
	same("after beyond", get("?after=1000000"), []api.AuditEvent{})

	// Paging with limit=2 gives the whole trail, in order.
	var paged []api.AuditEvent
	after := int64(0)
	for pages := 0; ; pages++ {
		if pages > len(wantAll) {
			t.Fatal("paging does not end")
		}
		page := get(fmt.Sprintf("?after=%d&limit=2", after))
		if len(page) == 0 {
			break
		}
		if len(page) > 2 {
			t.Fatalf("page of %d events with limit=2", len(page))
		}
		paged = append(paged, page...)
		after = page[len(page)-1].Seq
	}
	same("paged", paged, wantAll)

	// The revocation is attributed to the token, with its reason and facts.
	var rev *api.AuditEvent
	for i := range all {
		if all[i].Action == "version.revoke" {
			rev = &all[i]
		}
	}
	if rev == nil {
		t.Fatal("no version.revoke event")
	}
	if rev.KID != cr.Version.KID || rev.Key != "villa" || rev.Reason != "laptop stolen" || !strings.HasSuffix(rev.Actor, "(revoker)") {
		t.Errorf("version.revoke event %+v", *rev)
	}
	var det map[string]string
	if err := json.Unmarshal(rev.Details, &det); err != nil || det["compromised_at"] == "" {
		t.Errorf("version.revoke details %s", rev.Details)
	}
}

// TestPublicDocumentsHEAD: the public key documents answer HEAD like GET
// (RFC 9110 §9.1: general-purpose servers must support GET and HEAD), as
// /.well-known/jwks.json already does.
func TestPublicDocumentsHEAD(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("villa", villa, software.Kind)
	for _, path := range []string{"/v1/keys/villa/history.json", api.WellKnownHistory, "/.well-known/did.json"} {
		get, body := h.do(request{method: http.MethodGet, path: path})
		wantStatus(t, "GET "+path, get, body, http.StatusOK)
		resp, b := h.do(request{method: http.MethodHead, path: path})
		if resp.StatusCode != http.StatusOK || len(b) != 0 || resp.Header.Get("ETag") != get.Header.Get("ETag") ||
			resp.ContentLength != int64(len(body)) || resp.Header.Get("Cache-Control") != get.Header.Get("Cache-Control") {
			t.Errorf("HEAD %s: status %d, %d body bytes, ETag %q, Content-Length %d; want 200 with GET's headers and no body",
				path, resp.StatusCode, len(b), resp.Header.Get("ETag"), resp.ContentLength)
		}
		resp, _ = h.do(request{method: http.MethodHead, path: path, header: map[string]string{"If-None-Match": get.Header.Get("ETag")}})
		if resp.StatusCode != http.StatusNotModified {
			t.Errorf("conditional HEAD %s: status %d, want 304", path, resp.StatusCode)
		}
	}
}
