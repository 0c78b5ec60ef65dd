package tlogaudit

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/tlog/tlogfmt"
)

// TestCheckTreeAge: with K witnesses required, a tree's age is that of its
// K-th newest trusted cosignature (one fresh witness does not vouch for
// the others); without witnesses, the STH's own time.
func TestCheckTreeAge(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	sth := tlogfmt.STH{LogID: "log.example.test/vrp", TreeSize: 7, Timestamp: t0}
	cosigs := []tlogfmt.Cosignature{
		{Name: "a", Timestamp: t0.Add(-3 * time.Hour)},
		{Name: "b", Timestamp: t0.Add(-10 * time.Minute)},
		{Name: "c", Timestamp: t0.Add(-90 * time.Minute)},
	}
	for _, c := range []struct {
		name     string
		required int
		want     string // "" when fresh enough
	}{
		{"one witness: the newest", 1, ""},
		{"two witnesses: the second newest", 2, "was last cosigned by 2 trusted witnesses at 2026-12-04T10:30:00Z, 1h30m0s ago, over the 1h0m0s allowed"},
		{"three witnesses: the oldest", 3, "was last cosigned by 3 trusted witnesses at 2026-12-04T09:00:00Z, 3h0m0s ago"},
		{"no witnesses: the STH", 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkTreeAge(sth, cosigs, c.required, time.Hour, func() time.Time { return t0 })
			if c.want == "" && err != nil || c.want != "" && (!errors.Is(err, ErrStaleTree) || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("checkTreeAge: %v, want %q", err, c.want)
			}
		})
	}
	err := checkTreeAge(sth, nil, 0, time.Hour, func() time.Time { return t0.Add(61 * time.Minute) })
	if want := "tlogaudit: the tree is stale: log log.example.test/vrp, tree size 7, was signed at 2026-12-04T12:00:00Z, 1h1m0s ago, over the 1h0m0s allowed"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("checkTreeAge of an STH 61 minutes old: %v, want %q", err, want)
	}
}
