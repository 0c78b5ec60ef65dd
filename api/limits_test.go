package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/api"
)

// TestBatchItemsAreBoundedAndCounted (issue 13, partial): a batch item is
// bounded by the request body limit like the single request it stands for
// (a 2 KiB item under a 1 KiB limit fails alone, body_too_large), and the
// rate limit counts a batch's signatures, not the request: with a burst of
// 10, a batch of 6 after a batch of 5 is 429, a batch of 20 can never fit
// (400 batch_too_large), and a single signature still goes through.
func TestBatchItemsAreBoundedAndCounted(t *testing.T) {
	h := newHarness(t, harnessOpts{MaxBodyBytes: 1024, RateLimit: api.RateLimit{PerSecond: 0.001, Burst: 10}})
	h.createKey("villa", villa, fixedKind)
	tok := h.token("node", tokenOK, "sign:villa")
	items := func(n int) string {
		return `{"items":[` + strings.TrimSuffix(strings.Repeat(`{"payload":{"a":1}},`, n), ",") + `]}`
	}
	big := `{"payload":{"pad":"` + strings.Repeat("x", 2048) + `"}}`
	resp, body := h.postJSON("/v1/keys/villa/sign:batch", tok, `{"items":[`+big+`,{"payload":{"a":1}}]}`)
	wantStatus(t, "batch with an oversized item", resp, body, http.StatusOK)
	out := decodeBatch[api.SignResponse](t, body)
	if len(out) != 2 || out[0].Error == nil || out[0].Error.Code != api.CodeBodyTooLarge || out[1].Result == nil {
		t.Fatalf("batch with an oversized item: %.300s", body)
	}
	// 2 spent. 20 never fits a burst of 10.
	resp, body = h.postJSON("/v1/keys/villa/sign:batch", tok, items(20))
	wantError(t, "a batch larger than the burst", resp, body, http.StatusBadRequest, api.CodeBatchTooLarge)
	// 3 spent (the refused request took its one).
	resp, body = h.postJSON("/v1/keys/villa/sign:batch", tok, items(5))
	wantStatus(t, "a batch of 5", resp, body, http.StatusOK)
	// 8 spent: 6 more do not fit.
	resp, body = h.postJSON("/v1/keys/villa/sign:batch", tok, items(6))
	wantError(t, "a batch of 6 with 2 left", resp, body, http.StatusTooManyRequests, api.CodeRateLimited)
	if resp.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	resp, body = h.postJSON("/v1/keys/villa/mcp-transport:batch", tok, `{"items":[{"tool":"t","arguments":{}}]}`)
	wantStatus(t, "a transport batch of 1 (the 10th signature)", resp, body, http.StatusOK)
	resp, body = h.postJSON("/v1/keys/villa/sign", tok, `{"payload":{"a":1}}`)
	wantError(t, "the 11th signature", resp, body, http.StatusTooManyRequests, api.CodeRateLimited)
}

// TestPublicRateLimit (issue 13, partial): unauthenticated work — the
// public documents and requests whose authentication fails — spends its
// own bucket (burst 5 here): the 6th is 429 rate_limited with Retry-After,
// bad tokens included, while an authenticated signer keeps signing and
// health checks stay unlimited.
func TestPublicRateLimit(t *testing.T) {
	h := newHarness(t, harnessOpts{PublicRateLimit: api.RateLimit{PerSecond: 0.001, Burst: 5}})
	h.createKey("villa", villa, fixedKind)
	tok := h.token("node", tokenOK, "sign:villa")
	for _, path := range []string{"/.well-known/jwks.json", "/v1/keys/villa/jwks.json", "/v1/keys/villa/history.json", "/.well-known/did.json"} {
		resp, body := h.get(path, "")
		wantStatus(t, path, resp, body, http.StatusOK)
	}
	resp, body := h.postJSON("/v1/keys/villa/sign", "ksv_"+strings.Repeat("A", 43), `{"payload":{}}`)
	wantError(t, "the 5th unauthenticated request, a bad token", resp, body, http.StatusUnauthorized, api.CodeUnauthorized)
	for _, r := range []request{
		{method: http.MethodGet, path: "/.well-known/jwks.json"},
		{method: http.MethodHead, path: "/v1/keys/villa/jwks.json"},
		{method: http.MethodPost, path: "/v1/keys/villa/sign", auth: "Bearer ksv_bad", ctype: "application/json", body: []byte(`{"payload":{}}`)},
		{method: http.MethodPost, path: "/v1/keys/villa/sign", ctype: "application/json", body: []byte(`{"payload":{}}`)},
	} {
		resp, body := h.do(r)
		if r.method == http.MethodHead {
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Errorf("HEAD over the public limit: %d", resp.StatusCode)
			}
			continue
		}
		wantError(t, r.method+" "+r.path+" over the public limit", resp, body, http.StatusTooManyRequests, api.CodeRateLimited)
		if resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s: 429 without Retry-After", r.path)
		}
	}
	for i := 0; i < 20; i++ {
		resp, body := h.postJSON("/v1/keys/villa/sign", tok, `{"payload":{"a":1}}`)
		wantStatus(t, "an authenticated signature", resp, body, http.StatusOK)
	}
	resp, body = h.get("/healthz", "")
	wantStatus(t, "healthz", resp, body, http.StatusOK)
}
