package api_test

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/rotation"
)

// TestMetrics scrapes /metrics after signing, a failed request, a rotation
// and JWKS fetches, and checks each metric family with its labels and
// values.
func TestMetrics(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("villa", villa, fixedKind)
	tok := h.token("node", tokenOK, api.ScopeSignAll)
	for i := 0; i < 2; i++ {
		resp, body := h.postJSON("/v1/keys/villa/sign", tok, `{"payload":{"a":1}}`)
		wantStatus(t, "sign", resp, body, http.StatusOK)
	}
	resp, body := h.postJSON("/v1/keys/villa/mcp-transport", tok, `{"tool":"t","arguments":{"checkIn":"x"}}`)
	wantStatus(t, "transport", resp, body, http.StatusOK)
	resp, body = h.postJSON("/v1/keys/villa/sign", tok, `{"payload":{"a":1,"a":2}}`)
	wantStatus(t, "bad sign", resp, body, http.StatusBadRequest)
	// Batches: each signature is one backend observation, held until its
	// run ends (or 64 are held): one run of 100 items, one of them
	// refused before signing, then three transport items on two workers.
	restore := api.SetBatchWorkers(func(int) int { return 1 })
	items := make([]string, 100)
	for i := range items {
		items[i] = `{"payload":{"i":` + strconv.Itoa(i) + `}}`
	}
	items[70] = `{"payload":{"a":1,"a":2}}`
	resp, body = h.postJSON("/v1/keys/villa/sign:batch", tok, `{"items":[`+strings.Join(items, ",")+`]}`)
	wantStatus(t, "sign:batch", resp, body, http.StatusOK)
	restore()
	defer api.SetBatchWorkers(func(int) int { return 2 })()
	resp, body = h.postJSON("/v1/keys/villa/mcp-transport:batch", tok, `{"items":[{"tool":"t","arguments":{}},{"tool":"t","arguments":{"a":1}},{"tool":"t","arguments":{"b":2}}]}`)
	wantStatus(t, "mcp-transport:batch", resp, body, http.StatusOK)
	resp, body = h.postJSON("/v1/keys/nosuch/sign", tok, `{"payload":{"a":1}}`)
	wantStatus(t, "unknown key", resp, body, http.StatusNotFound)
	if _, err := h.mgr.SetPolicy(t.Context(), "villa", rotation.Policy{Retention: rotation.Duration(48 * time.Hour)}, rotation.Actor{Name: "test"}); err != nil {
		t.Fatal(err)
	}
	retiredKID := h.mgr.Keyring().Keys["villa"].Active.KID()
	if _, _, err := h.mgr.Rotate(t.Context(), "villa", rotation.Actor{Name: "test"}); err != nil {
		t.Fatal(err)
	}
	resp, _ = h.get("/v1/keys/villa/jwks.json", "")
	etag := resp.Header.Get("ETag")
	resp, _ = h.do(request{method: http.MethodGet, path: "/v1/keys/villa/jwks.json", header: map[string]string{"If-None-Match": etag}})
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("revalidation: %d", resp.StatusCode)
	}

	resp, body = h.get("/metrics", "")
	wantStatus(t, "metrics", resp, body, http.StatusOK)
	text := string(body)
	value := func(series string) float64 {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("series %s not in /metrics:\n%s", series, grepLines(text, "keysvc_"))
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for series, want := range map[string]float64{
		`keysvc_sign_requests_total{backend="software-fixed",key="villa",layer="jws",outcome="ok"}`:            2,
		`keysvc_sign_requests_total{backend="software-fixed",key="villa",layer="transport",outcome="ok"}`:      1,
		`keysvc_sign_requests_total{backend="software-fixed",key="villa",layer="jws",outcome="duplicate_key"}`: 1,
		`keysvc_sign_requests_total{backend="unknown",key="unknown",layer="jws",outcome="key_not_found"}`:      1,
		`keysvc_sign_duration_seconds_count{backend="software-fixed",key="villa",layer="jws"}`:                 3,
		`keysvc_backend_call_duration_seconds_count{backend="software-fixed",op="sign"}`:                       3 + 99 + 3,
		`keysvc_jwks_requests_total{code="200",document="jwks"}`:                                               1,
		`keysvc_jwks_requests_total{code="304",document="jwks"}`:                                               1,
		`keysvc_key_versions{key="villa",state="active"}`:                                                      1,
		`keysvc_key_versions{key="villa",state="retired"}`:                                                     1,
		`keysvc_audit_chain_length`: 7, // 3 create + 1 policy + 3 rotate
	} {
		if got := value(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if v := value(`keysvc_sign_duration_seconds_sum{backend="software-fixed",key="villa",layer="jws"}`); v <= 0 {
		t.Errorf("sign duration sum %v", v)
	}
	if v := value(`keysvc_version_jwks_retention_end_seconds{key="villa",kid="` + retiredKID + `"}`); v < 47*3600 || v > 48*3600 {
		t.Errorf("retention end %v s, want just under 48 h", v)
	}
	kid := h.mgr.Keyring().Keys["villa"].Active.KID()
	if v := value(`keysvc_key_age_seconds{key="villa",kid="` + kid + `"}`); v < 0 || v > 60 {
		t.Errorf("key age %v", v)
	}
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
