package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestRedirectToAnotherOriginRefused: keysvc's API never redirects; a
// redirect to another origin (here a server that would answer a sign with
// a signature of its own) is refused, with or without the default
// http.Client, and the other server is never asked. One within the
// origin is followed.
func TestRedirectToAnotherOriginRefused(t *testing.T) {
	var otherAsked atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherAsked.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jws":"forged.by.another-server","kid":"villa-1"}`)
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/keys/villa/sign":
			http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
		case "/v1/keys/moved/sign":
			http.Redirect(w, r, "/v1/keys/here/sign", http.StatusTemporaryRedirect)
		case "/v1/keys/here/sign":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jws":"a.b.c","kid":"here-1"}`)
		}
	}))
	defer srv.Close()
	for _, c := range []*Client{New(srv.URL, "tok"), {BaseURL: srv.URL, Token: "tok"}} {
		res, err := c.Sign(context.Background(), "villa", map[string]any{"offer_id": "o-1"}, "")
		if err == nil || !strings.Contains(err.Error(), "redirect to another origin ("+other.URL+"/v1/keys/villa/sign) refused") {
			t.Fatalf("Sign redirected to another origin: %+v %v", res, err)
		}
		if res, err := c.Sign(context.Background(), "moved", map[string]any{"offer_id": "o-1"}, ""); err != nil || res.KID != "here-1" {
			t.Fatalf("Sign redirected within the origin: %+v %v", res, err)
		}
	}
	if n := otherAsked.Load(); n != 0 {
		t.Fatalf("the other origin was asked %d times", n)
	}
}

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
