// Package sameorigin is the redirect policy of keysvc's HTTP clients that
// fetch what a check rests on — a transparency log's answers, tree heads,
// entry bundles and keys, and the documents `keysvc verify` fetches: a
// redirect is followed only within the origin of the first request (RFC
// 6454 §4: scheme, host and port), at most a few times. A redirect to
// another origin would let that origin answer for the one configured —
// an https log sent to plain HTTP, where whoever is on the path answers
// "not found", or to another host serving keys of its own — so it is
// refused, and the caller names the URL it was sent to.
package sameorigin

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// MaxRedirects bounds the redirects CheckRedirect follows.
const MaxRedirects = 5

// CheckRedirect is an http.Client CheckRedirect: it refuses a redirect to
// another scheme, host or port than the first request's, and stops after
// MaxRedirects. The error names the target without credentials or query.
func CheckRedirect(next *http.Request, via []*http.Request) error {
	first := via[0].URL
	if !strings.EqualFold(next.URL.Scheme, first.Scheme) || !strings.EqualFold(next.URL.Host, first.Host) {
		u := *next.URL
		u.User, u.RawQuery, u.Fragment = nil, "", "" // credentials and query values stay out of errors
		return fmt.Errorf("redirect to another origin (%s) refused: give that URL itself if you trust it", u.String())
	}
	if len(via) >= MaxRedirects {
		return fmt.Errorf("stopped after %d redirects", MaxRedirects)
	}
	return nil
}

// Client returns an http.Client with the given timeout whose redirects
// follow CheckRedirect.
func Client(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, CheckRedirect: CheckRedirect}
}
