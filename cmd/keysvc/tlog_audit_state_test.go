package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/keysvc/keysvc/signer"
	"github.com/keysvc/keysvc/tlog/tlogaudit"
	"github.com/keysvc/keysvc/tlog/tlogfmt"
)

// TestSaveAuditStateNeverGoesBack: audits that overlap (a cron run still
// going when the next one starts) finish in any order. The --state file
// keeps the larger tree: a run that verified tree 6 and ends after one
// that verified tree 9 must not move the monitor back to 6, or a rewrite
// of trees 7–9 extending 6 would pass its next run. (From an attack
// review, session 45: the first version wrote whatever finished last.)
func TestSaveAuditStateNeverGoesBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit-state.json")
	head := func(n uint64) tlogfmt.ArchivedSTH {
		return tlogfmt.ArchivedSTH{TreeSize: n, STH: "sth-" + string(rune('a'+n)), Checkpoint: "checkpoint"}
	}
	read := func() uint64 {
		t.Helper()
		var kept tlogfmt.ArchivedSTH
		b, err := os.ReadFile(path)
		if err != nil || json.Unmarshal(b, &kept) != nil {
			t.Fatalf("state file: %s %v", b, err)
		}
		return kept.TreeSize
	}
	for _, step := range []struct{ save, want uint64 }{{6, 6}, {9, 9}, {6, 9}, {9, 9}, {12, 12}} {
		if err := saveAuditState(path, head(step.save), nil); err != nil {
			t.Fatal(err)
		}
		if got := read(); got != step.want {
			t.Fatalf("after saving tree %d the state holds tree %d, want %d", step.save, got, step.want)
		}
	}
	// Runs finishing at once: the largest tree wins, whatever the order.
	var wg sync.WaitGroup
	for n := uint64(13); n <= 40; n++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := saveAuditState(path, head(n), nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := read(); got != 40 {
		t.Fatalf("after concurrent saves of trees 13..40 the state holds tree %d, want 40", got)
	}
	// A state file damaged since the run began is left as it is.
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := saveAuditState(path, head(41), nil); err == nil {
		t.Fatal("saving over a damaged state file: no error")
	}
	if b, _ := os.ReadFile(path); string(b) != "{" {
		t.Fatalf("a damaged state file was replaced: %q", b)
	}
}

// TestSaveAuditStateTwoTreesOfOneSize: two overlapping runs that each
// checked a tree of size 9, with different roots: the log showed them two
// trees of one size. The run that saves second finds the other's tree in
// the file: INCONSISTENT, and the file keeps the first.
func TestSaveAuditStateTwoTreesOfOneSize(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	key, err := tlogfmt.NewLogKey("log.example.test/state", priv.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	js, err := signer.NewJWSSigner(key.KID, signer.AlgEdDSA, priv)
	if err != nil {
		t.Fatal(err)
	}
	head := func(root byte, ts time.Time) tlogfmt.ArchivedSTH {
		sth, err := tlogfmt.SignSTH(js, tlogfmt.STH{LogID: key.Origin, TreeSize: 9, RootHash: bytes.Repeat([]byte{root}, 32), Timestamp: ts})
		if err != nil {
			t.Fatal(err)
		}
		return tlogfmt.ArchivedSTH{TreeSize: 9, STH: sth, Checkpoint: "checkpoint"}
	}
	t0 := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	path := filepath.Join(t.TempDir(), "audit-state.json")
	keys := []tlogfmt.LogKey{key}
	if err := saveAuditState(path, head(0x01, t0), keys); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	// The same tree in another STH (re-signed later): kept, no error.
	if err := saveAuditState(path, head(0x01, t0.Add(time.Minute)), keys); err != nil {
		t.Fatalf("the same tree of size 9 in another STH: %v", err)
	}
	err = saveAuditState(path, head(0x02, t0), keys)
	var inc *tlogaudit.Inconsistency
	if !errors.As(err, &inc) || inc.First != 9 || inc.Second != -1 {
		t.Fatalf("another tree of size 9: %v; want an Inconsistency at tree size 9", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Fatalf("the state file changed: %s", after)
	}
}
