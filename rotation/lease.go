package rotation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/keysvc/keysvc/signer"
	"github.com/keysvc/keysvc/store"
)

// Windows true by construction (ADR 0014). Three numbers tie every replica's
// signing to the windows key history records:
//
//   - L, the propagation bound (Config.PropagationBound, serve
//     --propagation-bound, default 2 s): every activation instant A is
//     committed at least L before it takes effect. The transaction that
//     records A must commit by A − L on the database's clock
//     (store.Tx.CommitBy), or it is rolled back and retried with a later A.
//   - δ, the clock skew bound (Config.MaxClockSkew, serve
//     --max-clock-skew): how far any replica's clock may be from the
//     database's.
//   - D = L − δ − κ, the signing lease, with κ = min(250 ms, L/8) the margin
//     between the database's deadline check and the commit becoming
//     visible. A replica signs only while its clock is before F + D, where
//     F is the start (its clock) of its last read of key history that was
//     confirmed current (a freshness probe that found the lifecycle epoch
//     it had loaded, or a full reload).
//
// Why that suffices: a replica that does not know a transition committed
// (visible) at database time v read key history before v, so F ≤ v + δ
// on its clock, and it stops signing by F + D ≤ v + δ + D ≤ v + L − κ.
// The transition committed by A − L (database clock), so v ≤ A − L + κ and
// the replica stops by A on its own clock: the version it still holds
// signs only claims before A, its recorded vrp_not_after. A replica that
// knows the transition switches at A from memory. Activation instants are
// whole seconds, so the whole-second signing instants keysvc writes
// (served_at, valid_from) never straddle one.
//
// PropagationBound 0 selects in-process mode: activations take effect at
// the instant they are recorded and there is no lease. It is correct only
// when one Manager is the only signer and reads its own writes (unit
// tests); serve refuses it.

// ErrHistoryStale: the replica could not confirm its key history is
// current within the lease, so it must not sign (HTTP 503
// key_history_stale).
var ErrHistoryStale = errors.New("key history not confirmed fresh within the signing lease")

// ErrActivationHeld: the pending version's private half cannot be loaded
// on this replica, so its activation is not armed (it stays pending, and
// the active version keeps signing); the scheduler retries with backoff.
var ErrActivationHeld = errors.New("activation held: the pending version's private half cannot be loaded")

// ErrIdempotencyConflict: another request with the same Idempotency-Key
// committed first; replay its stored response.
var ErrIdempotencyConflict = errors.New("the idempotency key was used by another request")

// commitMargin is κ for lead L.
func commitMargin(lead time.Duration) time.Duration { return min(250*time.Millisecond, lead/8) }

// PropagationBound returns L (0 in in-process mode).
func (m *Manager) PropagationBound() time.Duration { return m.lead }

// Lease returns D, the signing lease (0 in in-process mode).
func (m *Manager) Lease() time.Duration { return m.leaseLen }

// LeaseUntil returns when this replica's signing lease ends (zero when
// nothing was ever confirmed fresh, or in in-process mode).
func (m *Manager) LeaseUntil() time.Time {
	n := m.freshUntil.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// LeaseValid reports whether the replica may sign at now.
func (m *Manager) LeaseValid(now time.Time) bool {
	return m.lead == 0 || now.Before(m.LeaseUntil())
}

// markFresh records that key history at lifecycle epoch epoch was
// confirmed current as of start (this replica's clock, taken before the
// read began): the lease runs to start + D. It never moves backwards.
func (m *Manager) markFresh(start time.Time, epoch int64) {
	m.epoch.Store(epoch)
	until := start.Add(m.leaseLen).UnixNano()
	for {
		old := m.freshUntil.Load()
		if until <= old || m.freshUntil.CompareAndSwap(old, until) {
			break
		}
	}
	m.stale.recover(m.log, "key history confirmed fresh again; signing resumes")
}

// Signing is what SignerFor returns: the version that signs at the
// instant asked for, and the claimed signing instants (served_at,
// valid_from) it may sign for: [NotBefore, Until). Until is the zero time
// when unbounded (in-process mode, no armed switch).
type Signing struct {
	Entry     *KeyEntry
	Signer    *signer.JWSSigner
	NotBefore time.Time
	Until     time.Time
}

// Allows reports whether a signature claiming instant claimed (served_at,
// valid_from) lies inside the window of s's version as keysvc's verifier
// judges it: claimed in [NotBefore, Until), where a whole-second claim is
// held to NotBefore rounded down to its second (verifier.inSigningWindow:
// the one rounding the wire format forces, for versions activated at a
// sub-second instant, such as a key's first version).
func (s Signing) Allows(claimed time.Time) bool {
	nb := s.NotBefore
	if claimed.Equal(claimed.Truncate(time.Second)) {
		nb = nb.Truncate(time.Second)
	}
	if claimed.Before(nb) {
		return false
	}
	return s.Until.IsZero() || claimed.Before(s.Until)
}

// SignerFor returns the version of key name that signs at now, chosen by
// that instant (the armed pending version from its activation instant on,
// else the active one), with the claimed signing instants it may sign
// for. Errors: ErrKeyNotFound; ErrHistoryStale when the lease has ended;
// ErrNoActive when the key cannot sign (Signing.Entry set; its LoadErr or
// NextErr says why when a private half failed to load).
func (m *Manager) SignerFor(name string, now time.Time) (Signing, error) {
	e, ok := m.Keyring().Keys[name]
	if !ok {
		return Signing{}, fmt.Errorf("%w: %s", ErrKeyNotFound, name)
	}
	out := Signing{Entry: e}
	if !m.LeaseValid(now) {
		m.stale.fail(m.log, "key history not confirmed fresh within the lease: signing refused until it is", ErrHistoryStale, "lease_until", m.LeaseUntil())
		return out, ErrHistoryStale
	}
	if m.lead > 0 {
		out.Until = m.LeaseUntil()
	}
	if e.NextKID != "" && !now.Before(e.NextAt) {
		if e.Next == nil {
			return out, fmt.Errorf("%w: %s: pending version %s activated but its private half is not loaded", ErrNoActive, name, e.NextKID)
		}
		out.Signer, out.NotBefore = e.Next, e.NextAt
		return out, nil
	}
	if e.Active == nil {
		return out, fmt.Errorf("%w: %s", ErrNoActive, name)
	}
	out.Signer, out.NotBefore = e.Active, e.ActiveSince
	if e.NextKID != "" && (out.Until.IsZero() || e.NextAt.Before(out.Until)) {
		out.Until = e.NextAt
	}
	return out, nil
}

// activationInstant is the armed activation instant for a transition
// starting at now: now + L + extra, rounded up to the whole second.
func (m *Manager) activationInstant(now time.Time, extra time.Duration) time.Time {
	return ceilSecond(now.Add(m.lead + extra))
}

func ceilSecond(t time.Time) time.Time {
	s := t.Truncate(time.Second)
	if s.Before(t) {
		s = s.Add(time.Second)
	}
	return s.UTC()
}

// Probe confirms that this replica's key history is current: it reads the
// lifecycle epoch and, when it differs from the epoch loaded, reloads. On
// success the lease is renewed from the probe's start.
func (m *Manager) Probe(ctx context.Context) error {
	start := m.now()
	epoch, err := m.store.LifecycleEpoch(ctx)
	if err != nil {
		return err
	}
	if epoch == m.epoch.Load() && m.ringLoaded.Load() {
		m.markFresh(start, epoch)
		return nil
	}
	return m.Reload(ctx)
}

// RunFreshness keeps the lease: it probes every D/5 (each probe bounded
// by D), reloads in full at least every fullEvery, and backs off
// exponentially with jitter (up to D/2) while the store fails, logging one
// line per failure episode and counting every failed attempt
// (Stats.ProbeFailures). In in-process mode it only reloads every
// fullEvery. It returns when ctx ends.
func (m *Manager) RunFreshness(ctx context.Context, fullEvery time.Duration) {
	every := fullEvery
	if m.lead > 0 {
		every = max(m.leaseLen/5, 10*time.Millisecond)
	}
	bo := &backoff.ExponentialBackOff{InitialInterval: every, RandomizationFactor: 0.5, Multiplier: 2,
		MaxInterval: max(every, m.leaseLen/2)}
	var ep episode
	lastFull := time.Now()
	for {
		wait := every
		// A probe that answers within the lease still renews it (from its
		// start), so it may take that long.
		pctx, cancel := context.WithTimeout(ctx, max(m.leaseLen, time.Second))
		var err error
		if time.Since(lastFull) >= fullEvery || m.lead == 0 {
			err = m.Reload(pctx)
			if err == nil {
				lastFull = time.Now()
			}
		} else {
			err = m.Probe(pctx)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			m.stats.ProbeFailures.Add(1)
			ep.fail(m.log, "key history unreachable: the signing lease is not renewed", err, "lease_until", m.LeaseUntil())
			wait = bo.NextBackOff()
		} else {
			ep.recover(m.log, "key history reachable again")
			bo.Reset()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Stats are counters of failed background attempts, for metrics. Each
// failed attempt counts once; logs get one line per failure episode.
type Stats struct {
	ReloadFailures    atomic.Int64 // Reload calls that failed (store errors)
	ProbeFailures     atomic.Int64 // freshness probes or periodic reloads that failed
	SchedulerFailures atomic.Int64 // scheduled transitions that failed, per key and attempt
	HeldActivations   atomic.Int64 // activations held because a private half could not be loaded
	CommitDeadlines   atomic.Int64 // transactions rolled back by their commit deadline and retried
	LoadFailures      atomic.Int64 // private halves that failed to load, per attempt
}

// Stats returns the Manager's counters.
func (m *Manager) Stats() *Stats { return &m.stats }

// episode logs one line when failures start and one when they end.
type episode struct {
	mu       sync.Mutex
	failing  bool
	attempts int
	since    time.Time
}

func (e *episode) fail(log *slog.Logger, msg string, err error, attrs ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.attempts++
	if e.failing {
		return
	}
	e.failing, e.since = true, time.Now()
	log.Error(msg, append(attrs, "err", err)...)
}

func (e *episode) recover(log *slog.Logger, msg string, attrs ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.failing {
		return
	}
	log.Info(msg, append(attrs, "failed_attempts", e.attempts, "failing_for", time.Since(e.since).Round(time.Millisecond).String())...)
	e.failing, e.attempts = false, 0
}

// keyBackoff is the scheduler's per-key retry state: bounded exponential
// backoff with jitter, and one log line per failure episode.
type keyBackoff struct {
	bo   *backoff.ExponentialBackOff
	next time.Time
	ep   episode
}

func newKeyBackoff() *keyBackoff {
	return &keyBackoff{bo: &backoff.ExponentialBackOff{InitialInterval: 200 * time.Millisecond, RandomizationFactor: 0.5,
		Multiplier: 2, MaxInterval: 30 * time.Second}}
}

// schedulerBackoff returns the backoff state of key name.
func (m *Manager) schedulerBackoff(name string) *keyBackoff {
	m.schedMu.Lock()
	defer m.schedMu.Unlock()
	b, ok := m.sched[name]
	if !ok {
		b = newKeyBackoff()
		m.sched[name] = b
	}
	return b
}

// retryDeadline runs attempt (a transaction that records an activation
// instant) until it commits, retrying at most four times when it missed
// its commit deadline (store.ErrCommitDeadline), each time with extra lead
// of twice the failed attempt's duration, so a slow connection to the
// database moves the activation later instead of breaking its window.
//
// The first attempt's extra lead is 250 ms or twice the recent duration
// of a transaction (an exponentially weighted average), so that under a
// steadily slow store the first attempt already succeeds.
func (m *Manager) retryDeadline(ctx context.Context, attempt func(extra time.Duration) error) error {
	extra := max(250*time.Millisecond, 2*time.Duration(m.txDur.Load()))
	for i := 0; ; i++ {
		start := time.Now()
		err := attempt(extra)
		if err == nil {
			d := int64(time.Since(start))
			m.txDur.Store((3*m.txDur.Load() + d) / 4)
		}
		if !errors.Is(err, store.ErrCommitDeadline) || i == 4 || ctx.Err() != nil {
			return err
		}
		m.stats.CommitDeadlines.Add(1)
		extra = max(2*time.Since(start), 2*extra)
		m.log.Warn("transition missed its commit deadline (slow store); retrying with a later activation instant", "extra_lead", extra.String(), "err", err)
	}
}
