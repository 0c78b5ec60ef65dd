package sameorigin_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/internal/sameorigin"
)

// TestCheckRedirect: a redirect within the first request's origin is
// followed (up to MaxRedirects); one to another host, another port or
// from https to http is refused with the target named, its credentials
// and query left out.
func TestCheckRedirect(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "other origin") }))
	defer other.Close()
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/same":
			http.Redirect(w, r, "/target", http.StatusFound)
		case "/target":
			io.WriteString(w, "same origin")
		case "/other-port":
			http.Redirect(w, r, other.URL+"/x?token=secret", http.StatusTemporaryRedirect)
		case "/other-host":
			http.Redirect(w, r, strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)+"/target", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		}
	}))
	defer srv.Close()
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, srv.URL+"/target", http.StatusMovedPermanently)
	}))
	defer tls.Close()

	c := sameorigin.Client(0)
	resp, err := c.Get(srv.URL + "/same")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "same origin" {
		t.Fatalf("same-origin redirect: %q", body)
	}
	tc := tls.Client()
	tc.CheckRedirect = sameorigin.CheckRedirect
	for _, tt := range []struct {
		name string
		c    *http.Client
		url  string
		want string
	}{
		{"another port", c, srv.URL + "/other-port", "redirect to another origin (" + other.URL + "/x) refused"},
		{"another host", c, srv.URL + "/other-host", "redirect to another origin (" + strings.Replace(srv.URL, "127.0.0.1", "localhost", 1) + "/target) refused"},
		{"https to http", tc, tls.URL + "/", "redirect to another origin (" + srv.URL + "/target) refused"},
		{"a loop", c, srv.URL + "/loop", "stopped after 5 redirects"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := tt.c.Get(tt.url)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("followed to %s", resp.Request.URL)
			}
			var ue *url.Error // its message repeats the request URL; the policy's own error is inside
			if !errors.As(err, &ue) || !strings.Contains(ue.Err.Error(), tt.want) || strings.Contains(ue.Err.Error(), "secret") {
				t.Fatalf("error %q, want %q (and no query values)", err, tt.want)
			}
		})
	}
}
