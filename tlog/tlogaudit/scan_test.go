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
// the others), leaving out cosignatures dated ahead of the clock; without
// witnesses, the STH's own time.
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
			_, err := checkTreeAge(sth, cosigs, c.required, time.Hour, t0)
			if c.want == "" && err != nil || c.want != "" && (!errors.Is(err, ErrStaleTree) || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("checkTreeAge: %v, want %q", err, c.want)
			}
		})
	}
	// A witness whose clock runs fast (a cosignature an hour ahead) is left
	// out rather than taken as the newest; with it needed to make up K,
	// the tree is refused.
	fast := append([]tlogfmt.Cosignature{{Name: "d", Timestamp: t0.Add(time.Hour)}}, cosigs...)
	if _, err := checkTreeAge(sth, fast, 1, time.Hour, t0); err != nil {
		t.Fatalf("checkTreeAge with a fast witness among fresh ones: %v", err)
	}
	if at, _, ok := currentAt(sth, fast, 1, t0); !ok || !at.Equal(t0.Add(-10*time.Minute)) {
		t.Fatalf("currentAt with a fast witness: %v %v, want the newest of the others (%v)", at, ok, t0.Add(-10*time.Minute))
	}
	if _, err := checkTreeAge(sth, fast[:2], 2, time.Hour, t0); !errors.Is(err, ErrStaleTree) ||
		!strings.Contains(err.Error(), "fewer than 2 of its trusted cosignatures are dated before 2026-12-04T12:05:00Z") {
		t.Fatalf("checkTreeAge needing the fast witness: %v", err)
	}
	// The time returned is never more than the allowed skew ahead of the
	// clock. With the bound off (maxAge 0) and no time to trust — an STH
	// or the only cosignature dated further ahead — it is the clock plus
	// that skew, not the time ahead (which would move the NOT LOGGED
	// cutoff forward) nor zero (which would turn that check off).
	for _, c := range []struct {
		name     string
		sth      tlogfmt.STH
		cosigs   []tlogfmt.Cosignature
		required int
		maxAge   time.Duration
		want     time.Time
	}{
		{"a cosignature 3 minutes ahead, bound on", sth, []tlogfmt.Cosignature{{Name: "a", Timestamp: t0.Add(3 * time.Minute)}}, 1, time.Hour, t0.Add(3 * time.Minute)},
		{"an STH 2 hours ahead, bound off", tlogfmt.STH{LogID: sth.LogID, TreeSize: 7, Timestamp: t0.Add(2 * time.Hour)}, nil, 0, 0, t0.Add(MaxClockSkew)},
		{"the only cosignature an hour ahead, bound off", sth, fast[:1], 1, 0, t0.Add(MaxClockSkew)},
	} {
		if at, err := checkTreeAge(c.sth, c.cosigs, c.required, c.maxAge, t0); err != nil || !at.Equal(c.want) {
			t.Errorf("checkTreeAge, %s: %v %v, want %v", c.name, at, err, c.want)
		}
	}
	// Bound off, enough cosignatures within the skew: the fast one is left
	// out as with the bound on (the second newest of the others).
	if at, err := checkTreeAge(sth, fast, 2, 0, t0); err != nil || !at.Equal(t0.Add(-90*time.Minute)) {
		t.Errorf("checkTreeAge, bound off, 2 of a fast and three others: %v %v, want %v", at, err, t0.Add(-90*time.Minute))
	}
	_, err := checkTreeAge(sth, nil, 0, time.Hour, t0.Add(61*time.Minute))
	// No witnesses required: the reason names none.
	if want := "tlogaudit: the tree is stale: log log.example.test/vrp, tree size 7, was signed at 2026-12-04T12:00:00Z, 1h1m0s ago, over the 1h0m0s allowed: the log (or whoever answers for it) serves a tree from before anything written since"; err == nil || err.Error() != want {
		t.Fatalf("checkTreeAge of an STH 61 minutes old: %v, want %q", err, want)
	}
}
