package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

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
		if err := saveAuditState(path, head(step.save)); err != nil {
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
			if err := saveAuditState(path, head(n)); err != nil {
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
	if err := saveAuditState(path, head(41)); err == nil {
		t.Fatal("saving over a damaged state file: no error")
	}
	if b, _ := os.ReadFile(path); string(b) != "{" {
		t.Fatalf("a damaged state file was replaced: %q", b)
	}
}
