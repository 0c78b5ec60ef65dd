package rotation_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// TestLeaseAndArmedActivation: with a propagation bound (ADR 0014) every
// activation instant is a whole second at least L after the commit that
// armed it, the Manager signs only within its lease from the last read of
// key history, and SignerFor's window is what a claim must lie in.
func TestLeaseAndArmedActivation(t *testing.T) {
	s := openStore(t, store.Config{SQLitePath: filepath.Join(t.TempDir(), "k.db")})
	const lead = time.Second
	m := rotation.New(rotation.Config{Store: s, Backends: []backends.Backend{newTestBackend(t)}, Logger: quietLogger(),
		PropagationBound: lead, MaxClockSkew: 100 * time.Millisecond})
	if got, want := m.Lease(), lead-100*time.Millisecond-125*time.Millisecond; got != want {
		t.Fatalf("lease %s, want L - skew - L/8 = %s", got, want)
	}
	_, v1, err := m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "villa", Issuer: issuer}, alice)
	if err != nil {
		t.Fatal(err)
	}
	if !v1.ActivatedAt.Equal(v1.ActivatedAt.Truncate(time.Second)) {
		t.Errorf("first version activated at %s, want a whole second", v1.ActivatedAt)
	}
	now := time.Now()
	sig, err := m.SignerFor("villa", now)
	if err != nil || sig.Signer.KID() != v1.KID || !sig.Allows(now.Truncate(time.Second)) || sig.Allows(now.Add(time.Second)) {
		t.Fatalf("SignerFor: %+v, %v; want %s, allowing now but not beyond the lease", sig, err, v1.KID)
	}

	start := time.Now()
	newV, oldV, err := m.Rotate(ctx, "villa", bob)
	if err != nil {
		t.Fatal(err)
	}
	at := *newV.ActivatedAt
	if newV.State != store.StateActive || oldV.KID != v1.KID || oldV.RetiredAt == nil || !oldV.RetiredAt.Equal(at) {
		t.Fatalf("Rotate: new %s %s, old %s retired %v", newV.KID, newV.State, oldV.KID, oldV.RetiredAt)
	}
	if !at.Equal(at.Truncate(time.Second)) || at.Sub(start) < lead {
		t.Errorf("activation at %s, %s after the request: want a whole second at least L = %s later", at.Format(time.RFC3339Nano), at.Sub(start), lead)
	}
	var armedAt time.Time
	audit, _ := s.ListAudit(ctx, 0, 0)
	for _, ev := range audit {
		if ev.Action == "version.arm" && ev.KID == newV.KID {
			armedAt = ev.At
		}
	}
	if armedAt.IsZero() || at.Sub(armedAt) < lead {
		t.Errorf("armed at %s for %s: want at least L ahead", armedAt.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
	}
	// A claim before the switch is not the new version's to sign.
	sig, err = m.SignerFor("villa", time.Now())
	if err != nil || sig.Signer.KID() != newV.KID || sig.Allows(at.Add(-time.Second)) || !sig.Allows(at) {
		t.Fatalf("after the rotation SignerFor: %+v, %v", sig, err)
	}

	// No read of key history for longer than the lease: no signing.
	time.Sleep(time.Until(m.LeaseUntil()) + 10*time.Millisecond)
	if _, err := m.SignerFor("villa", time.Now()); !errors.Is(err, rotation.ErrHistoryStale) {
		t.Fatalf("SignerFor after the lease: %v, want ErrHistoryStale", err)
	}
	if err := m.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.SignerFor("villa", time.Now()); err != nil {
		t.Fatalf("SignerFor after a probe: %v", err)
	}
}

// TestRevokeKeepsAnArmedInstant: revoking the active version while its
// successor is armed keeps the armed instant (the successor's
// vrp_not_before and the revoked version's vrp_not_after): replicas that
// know it switch then, so moving it later would make them sign before the
// recorded activation.
func TestRevokeKeepsAnArmedInstant(t *testing.T) {
	s := openStore(t, store.Config{SQLitePath: filepath.Join(t.TempDir(), "k.db")})
	m := rotation.New(rotation.Config{Store: s, Backends: []backends.Backend{newTestBackend(t)}, Logger: quietLogger(),
		PropagationBound: time.Second, MaxClockSkew: 100 * time.Millisecond})
	_, v1, err := m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "villa", Issuer: issuer}, alice)
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.ScheduleRotation(ctx, "villa", bob)
	if err != nil {
		t.Fatal(err)
	}
	// Armed by hand at the soonest instant the scheduler could choose now:
	// PropagationBound (1 s) ahead, up to a whole second. (It was armed
	// 1.5 s ahead, rounded up: half the time later than the revocation's
	// own instant, which the revocation then rightly chose instead, and the
	// test failed.)
	armedAt := time.Now().UTC().Truncate(time.Microsecond)
	at := armedAt.Add(time.Second)
	if s := at.Truncate(time.Second); s.Before(at) {
		at = s.Add(time.Second)
	}
	p.ActivatesAt, p.ArmedAt = &at, &armedAt
	if err := s.InTx(ctx, func(tx store.Tx) error { return tx.UpdateVersion(ctx, p) }); err != nil {
		t.Fatal(err)
	}
	if err := m.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	// Revoked 0.8 s before the armed instant: the revocation's own soonest
	// instant is then a second after it, so keeping the armed one is seen.
	time.Sleep(time.Until(at.Add(-800 * time.Millisecond)))
	revoked, next, err := m.Revoke(ctx, v1.KID, time.Now().Add(-time.Hour), "leaked", bob)
	if err != nil {
		t.Fatal(err)
	}
	if next == nil || next.KID != p.KID || !next.ActivatesAt.Equal(at) || revoked.RetiredAt == nil || !revoked.RetiredAt.Equal(at) {
		t.Fatalf("revoked %+v, replacement %+v: want the armed instant %s kept for both", revoked, next, at)
	}
}
