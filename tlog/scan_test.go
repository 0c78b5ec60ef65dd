package tlog_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/tlog"
	"github.com/keysvc/keysvc/tlog/tlogaudit"
	"github.com/keysvc/keysvc/tlog/tlogfmt"
)

// TestScan: tlogaudit.Scan reads a log of 300 entries (one full entry
// bundle and a partial one) against its STH: it keeps exactly the status
// events, and Has answers for each of them and for nothing else. Under
// another key, or when the entry bundles it is served are not the ones the
// tree was signed over (an entry changed, an entry left out), it fails with
// an *Inconsistency and keeps nothing. With MaxAge, a tree signed longer
// ago, or dated more than MaxClockSkew ahead of the clock, fails with
// ErrStaleTree.
func TestScan(t *testing.T) {
	op, srv := startLog(t, tlog.Config{})
	var subs []tlogfmt.Submission
	for i := range 300 {
		typ := tlogfmt.ArtifactAttestation
		if i%7 == 3 {
			typ = tlogfmt.ArtifactStatusEvent
		}
		subs = append(subs, tlogfmt.Submission{ArtifactType: typ, ArtifactHash: artifact(1000 + i)})
	}
	if _, _, err := op.Add(context.Background(), subs); err != nil {
		t.Fatal(err)
	}
	waitProof(t, srv.URL, artifact(1299))
	hashOf := func(i int) [32]byte {
		var h [32]byte
		if _, err := hex.Decode(h[:], []byte(strings.TrimPrefix(artifact(i), "sha256:"))); err != nil {
			t.Fatal(err)
		}
		return h
	}
	key := testKey().Public().(ed25519.PublicKey)
	scan := func(base string, keys ...ed25519.PublicKey) (*tlogaudit.Scanned, error) {
		return tlogaudit.Scan(context.Background(), tlogaudit.ScanOptions{BaseURL: base, Keys: keys, ArtifactTypes: []string{tlogfmt.ArtifactStatusEvent}})
	}
	s, err := scan(srv.URL, key)
	if err != nil {
		t.Fatal(err)
	}
	if s.LogID != origin || s.TreeSize != 300 || s.Kept != 43 || !s.CurrentAt.Equal(s.Timestamp) {
		t.Fatalf("scanned log %q, tree size %d, %d status events; want %q, 300, 43", s.LogID, s.TreeSize, s.Kept, origin)
	}
	for i := range 300 {
		if got, want := s.Has(tlogfmt.ArtifactStatusEvent, hashOf(1000+i)), i%7 == 3; got != want {
			t.Errorf("Has(status event %d) = %v, want %v", i, got, want)
		}
		if s.Has(tlogfmt.ArtifactAttestation, hashOf(1000+i)) {
			t.Errorf("Has(attestation %d) = true: only status events are kept", i)
		}
	}
	if s.Has(tlogfmt.ArtifactStatusEvent, hashOf(1300)) {
		t.Error("Has(a hash never logged) = true")
	}

	// MaxAge: a tree older than allowed (from the STH's time, no witnesses
	// here) or dated ahead of the clock is refused before an entry is read.
	for _, c := range []struct {
		name string
		now  time.Time
		want string // "" for a scan that succeeds
	}{
		{"30 minutes old", s.Timestamp.Add(30 * time.Minute), ""},
		{"2 hours old", s.Timestamp.Add(2 * time.Hour), fmt.Sprintf("log %s, tree size 300, was signed at %s, 2h0m0s ago, over the 1h0m0s allowed", origin, s.Timestamp.UTC().Format(time.RFC3339))},
		{"4 minutes ahead", s.Timestamp.Add(-4 * time.Minute), ""},
		{"10 minutes ahead", s.Timestamp.Add(-10 * time.Minute), fmt.Sprintf("was signed at %s, 10m0s ahead of this clock", s.Timestamp.UTC().Format(time.RFC3339))},
	} {
		t.Run("max age/"+c.name, func(t *testing.T) {
			got, err := tlogaudit.Scan(context.Background(), tlogaudit.ScanOptions{BaseURL: srv.URL, Keys: []ed25519.PublicKey{key},
				ArtifactTypes: []string{tlogfmt.ArtifactStatusEvent}, MaxAge: time.Hour, Now: func() time.Time { return c.now }})
			switch {
			case c.want == "" && (err != nil || got.TreeSize != 300):
				t.Fatalf("scan: %v", err)
			case c.want != "" && (!errors.Is(err, tlogaudit.ErrStaleTree) || !strings.Contains(err.Error(), c.want) || got != nil):
				t.Fatalf("scan: %v %v, want ErrStaleTree with %q", got, err, c.want)
			}
		})
	}

	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)).Public().(ed25519.PublicKey)
	var inc *tlogaudit.Inconsistency
	if _, err := scan(srv.URL, other); !errors.As(err, &inc) || !strings.Contains(inc.Reason, "GET sth") {
		t.Errorf("scan under another key: %v", err)
	}

	target, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	for _, c := range []struct {
		name   string
		bundle func([]byte) []byte
		want   string
	}{
		// One status event's hash replaced by another's: every entry is
		// still a well-formed leaf, but not the one the tree holds.
		{"an entry changed", func(b []byte) []byte {
			return bytes.Replace(b, []byte(strings.TrimPrefix(artifact(1003), "sha256:")), []byte(strings.TrimPrefix(artifact(1300), "sha256:")), 1)
		}, "the entries hash to root"},
		// The last entry of the partial bundle left out.
		{"an entry left out", func(b []byte) []byte {
			if bytes.Count(b, []byte(`{"artifact_hash"`)) != 300-256 {
				return b
			}
			last := bytes.LastIndex(b, []byte(`{"artifact_hash"`))
			return b[:last-2]
		}, "the entry bundles hold 299 entries"},
	} {
		t.Run(c.name, func(t *testing.T) {
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !strings.HasPrefix(r.URL.Path, "/tile/entries/") {
					rp.ServeHTTP(w, r)
					return
				}
				rec := httptest.NewRecorder()
				rp.ServeHTTP(rec, r)
				w.WriteHeader(rec.Code)
				w.Write(c.bundle(rec.Body.Bytes()))
			}))
			defer proxy.Close()
			s, err := scan(proxy.URL, key)
			if !errors.As(err, &inc) || !strings.Contains(inc.Reason, c.want) || s != nil {
				t.Fatalf("scan: %v %v, want an inconsistency %q", s, err, c.want)
			}
		})
	}
}
