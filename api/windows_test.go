package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/verifier"
)

// Issue 14 item 4: a served_at inside --max-served-at-skew but before the
// latest rotation. Before: it was signed by the version active now, whose
// window does not hold served_at, so keysvc's own verifier rejected the
// signature (key_retired_out_of_window). Now the version is chosen by the
// signing instant and a served_at outside its window is refused with
// 409 served_at_not_signable; every signature keysvc does issue verifies.
func TestServedAtOutsideSigningWindow(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("villa", villa, "software")
	tok := h.token("node", tokenOK, "sign:villa")
	time.Sleep(1100 * time.Millisecond) // the first version signs for more than a second
	before := time.Now().UTC().Add(-500 * time.Millisecond)
	if _, _, err := h.mgr.Rotate(context.Background(), "villa", rotation.Actor{Name: "test"}); err != nil {
		t.Fatal(err)
	}
	_, hist := h.get("/v1/keys/villa/history.json", "")
	history, err := verifier.ParseKeyHistory(hist)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		servedAt string
		want     int
	}{
		{"served_at before the rotation", before.Format(time.RFC3339Nano), http.StatusConflict},
		{"served_at before the rotation, whole second", before.Add(-time.Second).Truncate(time.Second).Format(time.RFC3339), http.StatusConflict},
		{"served_at now", time.Now().UTC().Format(time.RFC3339Nano), http.StatusOK},
		{"no served_at", "", http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := `{"tool":"get_verified_stay_offer","arguments":{"guests":2}}`
			if c.servedAt != "" {
				body = `{"tool":"get_verified_stay_offer","arguments":{"guests":2},"served_at":"` + c.servedAt + `"}`
			}
			resp, b := h.postJSON("/v1/keys/villa/mcp-transport", tok, body)
			if c.want != http.StatusOK {
				wantError(t, c.name, resp, b, c.want, api.CodeServedAtNotSignable)
				return
			}
			wantStatus(t, c.name, resp, b, http.StatusOK)
			var out api.TransportResponse
			decode(t, b, &out)
			receipt, _ := json.Marshal(map[string]any{"vrp_receipt_version": "1.0", "subject": map[string]any{"property": "p"},
				"issuer": map[string]any{"node": "n"}, "attestations": []any{out.Attestation}})
			res := verifier.VerifyReceipt(context.Background(), receipt, verifier.Options{History: history})
			if len(res.Attestations) != 1 || res.Attestations[0].Status != verifier.StatusVerified {
				t.Errorf("signature by %s at %s does not verify against the key history: %+v", out.KID, out.Attestation.ValidFrom, res)
			}
		})
	}
}

// Issue 14 item 8 (server side): an admin mutation retried with the same
// Idempotency-Key is performed once and its answer replayed; with another
// body the key is refused. Before: the header was ignored and a retried
// rotation rotated twice.
func TestIdempotentRotate(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("villa", villa, "software")
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys)
	rotate := func(key, body string) (*http.Response, []byte) {
		return h.do(request{method: http.MethodPost, path: "/v1/keys/villa/rotate", auth: bearer(admin), ctype: "application/json",
			body: []byte(body), header: map[string]string{"Idempotency-Key": key}})
	}
	r1, b1 := rotate("k-1", `{"mode":"now","reason":"drill"}`)
	wantStatus(t, "first rotate", r1, b1, http.StatusOK)
	r2, b2 := rotate("k-1", `{"mode":"now","reason":"drill"}`)
	wantStatus(t, "retried rotate", r2, b2, http.StatusOK)
	if string(b1) != string(b2) || r2.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry answered %s (replayed %q), want the first answer %s replayed", b2, r2.Header.Get("Idempotent-Replayed"), b1)
	}
	r3, b3 := rotate("k-1", `{"mode":"now","reason":"another"}`)
	wantError(t, "same key, other body", r3, b3, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	if n := len(h.mgr.Keyring().Keys["villa"].Versions); n != 2 {
		t.Errorf("%d versions after one rotation retried twice, want 2", n)
	}
	r4, b4 := rotate("k-2", `{"mode":"now","reason":"drill"}`)
	wantStatus(t, "new key", r4, b4, http.StatusOK)
	if n := len(h.mgr.Keyring().Keys["villa"].Versions); n != 3 {
		t.Errorf("%d versions after a second rotation, want 3", n)
	}
}
