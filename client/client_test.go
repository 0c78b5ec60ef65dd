package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// TestIdempotentRetry: with Idempotent set, a POST whose answer is lost
// (the connection drops: EOF) is sent again with the same
// Idempotency-Key, and the answer of the retry is returned (issue 14
// item 8: `keys rotate` exited 1 on EOF although the rotation committed).
func TestIdempotentRetry(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		n := len(keys)
		mu.Unlock()
		if n == 1 {
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close() // the change happened, the answer is lost
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"mode":"now","active":{"kid":"k-2"},"retired":{"kid":"k-1"}}`))
	}))
	defer srv.Close()
	seen := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), keys...) }
	c := New(srv.URL, "tok")
	c.Idempotent = true
	active, retired, err := c.Rotate(context.Background(), "villa", "drill")
	if err != nil || active.KID != "k-2" || retired.KID != "k-1" {
		t.Fatalf("Rotate: %+v %+v %v", active, retired, err)
	}
	if k := seen(); len(k) != 2 || k[0] == "" || k[0] != k[1] || len(k[0]) != 32 {
		t.Fatalf("Idempotency-Key of the attempts: %q, want one 128-bit hex key sent twice", k)
	}
	// Without Idempotent: no key, no retry.
	mu.Lock()
	keys = nil
	mu.Unlock()
	c.Idempotent = false
	if _, _, err := c.Rotate(context.Background(), "villa", "drill"); err == nil {
		t.Fatal("a lost answer without Idempotent was not reported")
	}
	if k := seen(); len(k) != 1 || k[0] != "" {
		t.Fatalf("attempts without Idempotent: %q", k)
	}
}
