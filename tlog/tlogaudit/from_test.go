package tlogaudit

// Options.From (tlog audit --state): an audit that remembers the tree it
// checked last and requires the log's history to extend it.

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/merkle/testonly"

	"github.com/keysvc/keysvc/tlog/tlogfmt"
)

// rewrittenLog is a log whose whole history was replaced under the same
// key: n other leaves, an STH for each of sizes, self-consistent.
func rewrittenLog(t *testing.T, n int, sizes []uint64) *fallbackLog {
	t.Helper()
	l := &fallbackLog{tree: testonly.New(rfc6962.DefaultHasher)}
	for i := range n {
		l.tree.AppendData(leaf(1000 + i))
	}
	t0 := time.Date(2026, 12, 6, 2, 0, 0, 0, time.UTC)
	for i, s := range sizes {
		l.archive = append(l.archive, signedHead(t, s, l.tree.HashAt(s), t0.Add(time.Duration(i)*time.Second)))
	}
	l.tile = l.honestTiles
	return l
}

// TestAuditFromEarlierTree: an audit from the tree an earlier audit
// checked reads the archive from that size on and requires the history to
// extend it. Without From, a log that rewrote its whole history under its
// key passes (the history it serves is consistent with itself); with it,
// the rewrite is a fork, whether the archive still holds the earlier
// tree's size or left it out, and an archive ending below it is a
// rollback.
func TestAuditFromEarlierTree(t *testing.T) {
	ctx := context.Background()
	keys := []tlogfmt.LogKey{hostileKey(t)}
	first := newFallbackLog(t, 5, sizes(1, 5))
	first.tile = first.honestTiles
	rep, err := Audit(ctx, Options{BaseURL: first.start(t), Keys: keys})
	if err != nil || rep.Newest != first.archive[4] {
		t.Fatalf("first audit: %+v %v; want Newest the archive's STH of tree size 5", rep, err)
	}
	kept := rep.Newest

	t.Run("the log grew", func(t *testing.T) {
		l := newFallbackLog(t, 8, sizes(1, 8))
		rep, err := Audit(ctx, Options{BaseURL: l.start(t), Keys: keys, From: &kept})
		// Trees 5 (its root compared with the kept one), 6, 7, 8: three
		// proofs, the archive read from after=4.
		if err != nil || rep.STHs != 4 || rep.ConsistencyProofs != 3 || rep.TreeSize != 8 || rep.Newest != l.archive[7] || *l.firstAfter.Load() != "4" {
			t.Fatalf("Audit from tree 5: %+v %v, first page after=%q; want 4 STHs, 3 proofs, Newest tree 8, the archive read from after=4", rep, err, *l.firstAfter.Load())
		}
	})
	t.Run("nothing new", func(t *testing.T) {
		l := newFallbackLog(t, 5, sizes(1, 5))
		rep, err := Audit(ctx, Options{BaseURL: l.start(t), Keys: keys, From: &kept})
		if err != nil || rep.STHs != 1 || rep.ConsistencyProofs != 0 || rep.Newest != kept {
			t.Fatalf("Audit from the newest tree: %+v %v; want the kept tree alone, checked again", rep, err)
		}
	})
	t.Run("history rewritten under the log key", func(t *testing.T) {
		l := rewrittenLog(t, 8, sizes(1, 8))
		u := l.start(t)
		if rep, err := Audit(ctx, Options{BaseURL: u, Keys: keys}); err != nil || rep.STHs != 8 {
			t.Fatalf("Audit of the rewritten log without From: %+v %v; want it to pass (its history is consistent with itself: what From is for)", rep, err)
		}
		_, err := Audit(ctx, Options{BaseURL: u, Keys: keys, From: &kept})
		var inc *Inconsistency
		if !errors.As(err, &inc) || inc.First != 5 || inc.Second != -1 ||
			inc.Reason != "the archive's STH has another root than the STH of this tree size an earlier audit checked (From): the log forked, or rewrote its history" {
			t.Fatalf("Audit of the rewritten log from tree 5: %v; want an Inconsistency at tree size 5", err)
		}
	})
	t.Run("rewritten, tree 5 left out of the archive", func(t *testing.T) {
		l := rewrittenLog(t, 8, []uint64{1, 2, 3, 4, 6, 7, 8})
		_, err := Audit(ctx, Options{BaseURL: l.start(t), Keys: keys, From: &kept})
		var inc *Inconsistency
		if !errors.As(err, &inc) || inc.First != 5 || inc.Second != 6 ||
			!strings.HasPrefix(inc.Reason, "consistency proof does not verify: ") || !strings.Contains(inc.Reason, ", and the proof built from the log's hash tiles does not verify: ") {
			t.Fatalf("Audit from tree 5 of a rewritten archive without it: %v; want trees 5 and 6 inconsistent, by the endpoint's proof and the tiles'", err)
		}
	})
	t.Run("rolled back", func(t *testing.T) {
		l := newFallbackLog(t, 3, sizes(1, 3))
		_, err := Audit(ctx, Options{BaseURL: l.start(t), Keys: keys, From: &kept})
		var inc *Inconsistency
		if !errors.As(err, &inc) || inc.First != 5 || inc.Second != -1 || !strings.HasSuffix(inc.Reason, "the log rolled back") {
			t.Fatalf("Audit from tree 5 of a log back at tree 3: %v; want a rollback at tree size 5", err)
		}
	})
	t.Run("kept tree does not verify", func(t *testing.T) {
		l := newFallbackLog(t, 8, sizes(1, 8))
		bad := kept
		bad.TreeSize = 6 // the STH inside says 5
		_, err := Audit(ctx, Options{BaseURL: l.start(t), Keys: keys, From: &bad})
		var inc *Inconsistency
		if err == nil || errors.As(err, &inc) || err.Error() != "tlogaudit: the tree an earlier audit checked (From, the --state file) does not verify under the log keys: archived STH of tree size 6: the STH is for tree size 5" {
			t.Fatalf("Audit from a kept tree that does not verify: %v; want an error that is not an Inconsistency", err)
		}
	})
}

// TestAuditUntrustedKey: tree heads signed by a key that is none of the
// log keys. Before anything signed under the log keys has verified in the
// audit (no From, the first head read), the audit could not run (a plain
// error, exit 2): a monitor cannot tell a log that changed its key from
// log keys that are another log's, and a mistyped --log-key must not read
// as a fork. Once something has verified (From, or an earlier head), a
// head under another key is the log's fault: an Inconsistency (exit 1).
func TestAuditUntrustedKey(t *testing.T) {
	ctx := context.Background()
	otherPriv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32))
	other, err := tlogfmt.NewLogKey(hostileOrigin, otherPriv.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	hostileKID := hostileKey(t).KID
	var inc *Inconsistency

	t.Run("first head read", func(t *testing.T) {
		l := newFallbackLog(t, 5, sizes(1, 5)) // signed by hostileKey
		_, err := Audit(ctx, Options{BaseURL: l.start(t), Keys: []tlogfmt.LogKey{other}})
		want := `tlogaudit: GET sth is signed by kid "` + hostileKID + `", which is none of the log keys, and nothing signed under them has verified yet: the log keys are not this log's, or the log changed its key`
		if err == nil || errors.As(err, &inc) || err.Error() != want {
			t.Fatalf("Audit under another log's key: %v; want the error %q, not an Inconsistency", err, want)
		}
	})
	t.Run("first archived STH, GET sth down", func(t *testing.T) {
		l := newFallbackLog(t, 5, sizes(1, 5))
		l.firstSTH = &tlogfmt.ArchivedSTH{} // the first GET sth answers 503
		_, err := Audit(ctx, Options{BaseURL: l.start(t), Keys: []tlogfmt.LogKey{other}})
		if err == nil || errors.As(err, &inc) || !strings.HasPrefix(err.Error(), `tlogaudit: the archived STH of tree size 1 is signed by kid "`+hostileKID+`", which is none of the log keys`) {
			t.Fatalf("Audit under another log's key, GET sth down: %v; want the error naming the archived STH of tree size 1", err)
		}
	})
	t.Run("From verified, the log under another key", func(t *testing.T) {
		l := newFallbackLog(t, 5, sizes(1, 5))
		from := signedHeadBy(t, otherPriv, 3, l.tree.HashAt(3), time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC))
		_, err := Audit(ctx, Options{BaseURL: l.start(t), Keys: []tlogfmt.LogKey{other}, From: &from})
		var uk *tlogfmt.UntrustedKeyError
		if !errors.As(err, &inc) || !errors.As(err, &uk) || uk.KID != hostileKID ||
			err.Error() != `GET sth: tlogfmt: signature does not verify: kid "`+hostileKID+`" is not a trusted log key` {
			t.Fatalf("Audit from a tree signed under the log key, the log now under another: %v; want an Inconsistency", err)
		}
	})
	t.Run("the key changes within the archive", func(t *testing.T) {
		l := newFallbackLog(t, 5, sizes(1, 5))
		t0 := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
		for i := range 3 { // trees 1-3 under the trusted key, 4-5 under the hostile one
			l.archive[i] = signedHeadBy(t, otherPriv, uint64(i+1), l.tree.HashAt(uint64(i+1)), t0.Add(time.Duration(i)*time.Second))
		}
		l.published = &l.archive[2]
		l.tile = l.honestTiles
		_, err := Audit(ctx, Options{BaseURL: l.start(t), Keys: []tlogfmt.LogKey{other}})
		if !errors.As(err, &inc) || inc.First != 4 || inc.Second != -1 || !strings.Contains(inc.Reason, "is not a trusted log key") {
			t.Fatalf("Audit of an archive whose key changes at tree 4: %v; want an Inconsistency at tree size 4", err)
		}
	})
}
