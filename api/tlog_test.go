package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/tlogclient"
)

// fakeTlog is an api.TransparencyLog that remembers what was recorded: the
// api's side of the contract (record before answering, withhold on
// failure, proofs by scope). The real client and log are tested in
// tlogclient and cmd/keysvc.
type fakeTlog struct {
	mu       sync.Mutex
	recorded []string
	fail     error // RecordJWS fails with it when set
	notReady error
}

func newFakeTlog() *fakeTlog { return &fakeTlog{} }

func (f *fakeTlog) RecordJWS(_ context.Context, jws []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	f.recorded = append(f.recorded, jws...)
	return nil
}

func (f *fakeTlog) has(jws string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, j := range f.recorded {
		if j == jws {
			return true
		}
	}
	return false
}

func (f *fakeTlog) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.recorded)
}

func (f *fakeTlog) first() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.recorded) == 0 {
		return ""
	}
	return f.recorded[0]
}

// fakeProof is the tlog member the fake serves for a recorded JWS.
func fakeProof(jws string) []byte {
	sum := sha256.Sum256([]byte(jws))
	return fmt.Appendf(nil, `{"log_id":"log.test/vrp","leaf":{"artifact_hash":"sha256:%s","artifact_type":"vrp_attestation","leaf_version":"vrp-tlog-v0.1","logged_at":"2026-12-01T09:00:00Z"},"leaf_index":0,"tree_size":1,"inclusion_proof":[],"sth":"e30.e30.e30","checkpoint":"log.test/vrp\n1\nAAAA\n\n— log.test/vrp AAAA\n"}`, hex.EncodeToString(sum[:]))
}

func (f *fakeTlog) Proof(_ context.Context, jws string) ([]byte, error) {
	if !f.has(jws) {
		return nil, fmt.Errorf("fake: %w", tlogclient.ErrNotFound)
	}
	return fakeProof(jws), nil
}

func (f *fakeTlog) Ready() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.notReady
}

// TestTlogRecordBeforeAnswer: every JWS of a 200 answer (single, transport,
// both batches) was recorded before the answer; a failed record withholds
// the signatures (503 tlog_unavailable, no JWS in the body).
func TestTlogRecordBeforeAnswer(t *testing.T) {
	tl := newFakeTlog()
	h := newHarness(t, harnessOpts{Tlog: tl})
	h.createKey("villa", villa, fixedKind)
	tok := h.token("node", tokenOK, "sign:villa")

	jwsOf := func(body []byte) []string {
		var one struct{ JWS string }
		var batch struct {
			Results []struct{ Result *struct{ JWS string } }
		}
		if json.Unmarshal(body, &batch) == nil && len(batch.Results) > 0 {
			var out []string
			for _, r := range batch.Results {
				if r.Result != nil {
					out = append(out, r.Result.JWS)
				}
			}
			return out
		}
		if err := json.Unmarshal(body, &one); err != nil || one.JWS == "" {
			t.Fatalf("no jws in %s", body)
		}
		return []string{one.JWS}
	}
	calls := []struct{ path, body string }{
		{"/v1/keys/villa/sign", `{"payload":{"a":1}}`},
		{"/v1/keys/villa/mcp-transport", `{"tool":"t","arguments":{"checkIn":"2026-09-02"}}`},
		{"/v1/keys/villa/sign:batch", `{"items":[{"payload":{"a":2}},{"payload":[1]},{"payload":{"a":3}}]}`},
		{"/v1/keys/villa/mcp-transport:batch", `{"items":[{"tool":"t","arguments":{}},{"tool":"u","arguments":{}}]}`},
	}
	want := 0
	for _, c := range calls {
		resp, body := h.do(jsonReq(http.MethodPost, c.path, tok, c.body))
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.path, resp.StatusCode, body)
		}
		for _, j := range jwsOf(body) {
			if !tl.has(j) {
				t.Errorf("%s: returned JWS %.40s… was not recorded", c.path, j)
			}
			want++
		}
	}
	// The failed batch item is not recorded: nothing was signed for it.
	if got := tl.count(); got != want {
		t.Errorf("%d JWS recorded, %d returned", got, want)
	}

	tl.mu.Lock()
	tl.fail = errors.New("outbox down")
	tl.mu.Unlock()
	for _, c := range calls {
		resp, body := h.do(jsonReq(http.MethodPost, c.path, tok, c.body))
		wantError(t, c.path+" with the outbox down", resp, body, http.StatusServiceUnavailable, api.CodeTlogUnavailable)
		if strings.Contains(string(body), "eyJ") {
			t.Errorf("%s: a JWS escaped in the error answer: %s", c.path, body)
		}
	}
}

// TestTlogProofEndpoint: the proof endpoint's scope rule (a signing scope of
// the key named by the JWS kid), its errors, and the byte-for-byte body.
func TestTlogProofEndpoint(t *testing.T) {
	tl := newFakeTlog()
	h := newHarness(t, harnessOpts{Tlog: tl})
	h.createKey("villa", villa, fixedKind)
	h.createKey("alpha", "alpha.example", fixedKind)
	signer := h.token("signer", tokenOK, "sign:villa")
	resp, body := h.do(jsonReq(http.MethodPost, "/v1/keys/villa/mcp-transport", signer, `{"tool":"t","arguments":{}}`))
	if resp.StatusCode != 200 {
		t.Fatalf("transport: %d %s", resp.StatusCode, body)
	}
	var out struct{ JWS string }
	decode(t, body, &out)
	q := "/v1/tlog/proof?jws=" + url.QueryEscape(out.JWS)

	for _, c := range []struct {
		name   string
		scopes []string
		status int
		code   string
	}{
		{"sign:villa", []string{"sign:villa"}, 200, ""},
		{"sign:villa:transport", []string{"sign:villa:transport"}, 200, ""},
		{"sign:villa:jws", []string{"sign:villa:jws"}, 200, ""},
		{"sign:*", []string{api.ScopeSignAll}, 200, ""},
		{"sign:alpha", []string{"sign:alpha"}, 403, api.CodeForbidden},
		{"admin:keys", []string{api.ScopeAdminKeys}, 403, api.CodeForbidden},
	} {
		tok := h.token("t-"+c.name, tokenOK, c.scopes...)
		resp, body := h.do(plainReq(http.MethodGet, q, tok))
		if c.status != 200 {
			wantError(t, c.name, resp, body, c.status, c.code)
			continue
		}
		if resp.StatusCode != 200 || string(body) != string(fakeProof(out.JWS)) || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %q %s", c.name, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	resp, body = h.do(plainReq(http.MethodGet, q, ""))
	wantError(t, "no token", resp, body, 401, api.CodeUnauthorized)

	// A JWS never recorded (another payload under the same header).
	hdr, _, _ := strings.Cut(out.JWS, ".")
	resp, body = h.do(plainReq(http.MethodGet, "/v1/tlog/proof?jws="+hdr+".e30.AAAA", signer))
	wantError(t, "not logged", resp, body, 404, api.CodeTlogNotFound)
	// Unknown kid: eyJraWQiOiJub3BlIn0 is {"kid":"nope"}.
	resp, body = h.do(plainReq(http.MethodGet, "/v1/tlog/proof?jws=eyJraWQiOiJub3BlIn0.e30.AAAA", signer))
	wantError(t, "unknown kid", resp, body, 404, api.CodeVersionNotFound)
	for _, bad := range []string{"", "a.b", "a.b.c.d", "!!!.e30.AAAA", "e30.e30.AAAA" /* no kid */, strings.Repeat("a", 17000) + ".e30.AA"} {
		resp, body = h.do(plainReq(http.MethodGet, "/v1/tlog/proof?jws="+url.QueryEscape(bad), signer))
		if resp.StatusCode == 431 { // the oversized one may be refused by net/http first
			continue
		}
		wantError(t, fmt.Sprintf("bad jws %.20q", bad), resp, body, 400, api.CodeInvalidRequest)
	}

	// Without a transparency log.
	h2 := newHarness(t, harnessOpts{})
	h2.createKey("villa", villa, fixedKind)
	tok2 := h2.token("signer", tokenOK, "sign:villa")
	resp, body = h2.do(plainReq(http.MethodGet, q, tok2))
	wantError(t, "no log configured", resp, body, 404, api.CodeTlogNotConfigured)
}

// TestTlogReadiness: a backlog past the client's thresholds turns /readyz
// unready with the client's reason.
func TestTlogReadiness(t *testing.T) {
	tl := newFakeTlog()
	h := newHarness(t, harnessOpts{Tlog: tl})
	h.createKey("villa", villa, fixedKind)
	if resp, body := h.do(plainReq(http.MethodGet, "/readyz", "")); resp.StatusCode != 200 {
		t.Fatalf("readyz: %d %s", resp.StatusCode, body)
	}
	tl.mu.Lock()
	tl.notReady = errors.New("transparency log http://127.0.0.1:1: 7 leaves waiting, oldest 11m0s")
	tl.mu.Unlock()
	resp, body := h.do(plainReq(http.MethodGet, "/readyz", ""))
	if resp.StatusCode != 503 || !strings.Contains(string(body), "7 leaves waiting") {
		t.Fatalf("readyz with a backlog: %d %s", resp.StatusCode, body)
	}
}

// Record records artifacts other than JWS (the signed bytes of a detached
// signature, ADR 0028) like RecordJWS.
func (f *fakeTlog) Record(ctx context.Context, _ string, artifacts ...string) error {
	return f.RecordJWS(ctx, artifacts)
}
