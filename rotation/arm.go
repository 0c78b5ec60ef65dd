package rotation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/keysvc/keysvc/store"
)

// Arming activations (ADR 0014). A pending version signs only once its
// activation is armed: committed with its final, whole-second instant A by
// A − L on the database's clock (store.Tx.CommitBy). Every replica then
// either knows A before it comes and switches from memory, or its lease
// ends before A. Scheduled rotations are armed armLead ahead of their
// planned instant; immediate rotations, early activations and revocations
// of the active version are armed at the first whole second at least L
// (plus what a slow store needs) after the commit.

// arm arms st's pending version at at inside a transition: ActivatesAt =
// at, ArmedAt = now, with the commit deadline at − L and a version.arm
// audit row.
func (m *Manager) arm(ctx context.Context, tx store.Tx, st *keyState, now, at time.Time, actor Actor) (store.KeyVersion, error) {
	return m.armWith(ctx, tx, st, now, at, nil, actor)
}

// armOpts qualify activateArmed for an early activation (Activate): the
// version must have been published longer than the JWKS max-age (issue 13,
// K3) unless emergency, which is then recorded in the version.arm audit
// row's details (armDetails).
type armOpts struct {
	checkAge, emergency bool
	armDetails          map[string]any
}

// publishedLongEnough returns how long p has been published at now, and
// ErrActivationTooEarly when that is not longer than the JWKS max-age and
// the activation is no emergency.
func (m *Manager) publishedLongEnough(p store.KeyVersion, now time.Time, emergency bool) (time.Duration, error) {
	published := p.CreatedAt
	if p.PublishedAt != nil {
		published = *p.PublishedAt
	}
	age := now.Sub(published)
	if !emergency && age <= m.maxAge {
		return age, fmt.Errorf("%w: %s has been published for %s, not longer than the JWKS max-age %s; wait until %s, or activate it as an emergency",
			ErrActivationTooEarly, p.KID, age.Round(time.Millisecond), m.maxAge, published.Add(m.maxAge).UTC().Format(time.RFC3339Nano))
	}
	return age, nil
}

// emergencyDetails are the audit details of an emergency activation.
func (m *Manager) emergencyDetails(age time.Duration) map[string]any {
	return map[string]any{"emergency": true, "published_for": age.Round(time.Millisecond).String(), "jwks_max_age": m.maxAge.String()}
}

// armWith is arm with extra members for the version.arm audit details.
func (m *Manager) armWith(ctx context.Context, tx store.Tx, st *keyState, now, at time.Time, extra map[string]any, actor Actor) (store.KeyVersion, error) {
	p := *st.pending
	p.ActivatesAt, p.ArmedAt = &at, &now
	if err := tx.CommitBy(ctx, at.Add(-m.lead)); err != nil {
		return p, err
	}
	if err := tx.UpdateVersion(ctx, p); err != nil {
		return p, err
	}
	d := map[string]any{"activates_at": at.UTC().Format(time.RFC3339Nano), "commit_by": at.Add(-m.lead).UTC().Format(time.RFC3339Nano)}
	for k, v := range extra {
		d[k] = v
	}
	details, _ := json.Marshal(d)
	if _, err := m.audit(ctx, tx, actor, "version.arm", st.key.Name, p.KID, string(details)); err != nil {
		return p, err
	}
	*st.pending = p
	crashPoint("arm.before-commit")
	return p, nil
}

// canLoad loads v's private half on this replica (kept for when it signs);
// the error says why it cannot sign from here.
func (m *Manager) canLoad(ctx context.Context, k store.Key, v store.KeyVersion) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, err := m.loadSignerReport(ctx, k, v)
	return err
}

// activateArmed is Rotate (kid "") and Activate (kid set) with a
// propagation bound: (1) make sure there is a pending version — kid, the
// key's pending one, or a new one minted unarmed, its planned activation
// now, so that the rotation survives a crash (the scheduler arms it);
// (2) hold unless this replica loads its private half; (3) arm it at
// ceil(now + L); (4) wait for the instant and record the transition.
func (m *Manager) activateArmed(ctx context.Context, name, kid string, o armOpts, actor Actor) (newV, oldV store.KeyVersion, err error) {
	var pending store.KeyVersion
	var done bool
	err = m.transition(ctx, name, func(tx store.Tx, st *keyState, now time.Time) error {
		done = false
		if st.active != nil {
			oldV = *st.active
		}
		switch {
		case kid != "" && st.completed && st.active != nil && st.active.KID == kid:
			newV, done = *st.active, true // its scheduled instant had already come
			return nil
		case kid != "" && (st.pending == nil || st.pending.KID != kid):
			return fmt.Errorf("%w: %s is not pending", ErrInvalidTransition, kid)
		case kid == "" && st.active == nil:
			return fmt.Errorf("%w: %s", ErrNoActive, name)
		case st.pending != nil:
			pending = *st.pending
			if o.checkAge {
				age, err := m.publishedLongEnough(pending, now, o.emergency)
				if err != nil {
					return err
				}
				if o.emergency {
					o.armDetails = m.emergencyDetails(age)
				}
			}
			return nil
		}
		v, err := m.prepublish(ctx, tx, st, now, ceilSecond(now), actor)
		pending = v
		return err
	})
	if err != nil || done {
		return newV, oldV, err
	}
	k, err := m.store.GetKey(ctx, name)
	if err != nil {
		return newV, oldV, err
	}
	if err := m.canLoad(ctx, k, pending); err != nil {
		m.stats.HeldActivations.Add(1)
		return newV, oldV, fmt.Errorf("%w: %s: %v", ErrActivationHeld, pending.KID, err)
	}
	var at time.Time
	err = m.transition(ctx, name, func(tx store.Tx, st *keyState, now time.Time) error {
		done = false // the closure may run again (a retried transaction)
		if st.pending == nil || st.pending.KID != pending.KID {
			if st.active != nil && st.active.KID == pending.KID {
				// A scheduler armed and activated it meanwhile (the version
				// minted unarmed above is due now, so any replica's
				// scheduler may finish this rotation): it is done.
				newV, done = *st.active, true
				return nil
			}
			return fmt.Errorf("%w: %s is no longer pending", ErrInvalidTransition, pending.KID)
		}
		at = m.activationInstant(now, st.extra)
		if st.pending.ArmedAt != nil && st.pending.ActivatesAt != nil && !st.pending.ActivatesAt.After(at) {
			at, pending = *st.pending.ActivatesAt, *st.pending // armed already, as soon or sooner
			return nil
		}
		v, err := m.armWith(ctx, tx, st, now, at, o.armDetails, actor)
		pending = v
		return err
	})
	if err != nil || done {
		return newV, oldV, err
	}
	newV, retired, err := m.awaitActivation(ctx, name, pending, at)
	if retired != nil {
		oldV = *retired
	}
	return newV, oldV, err
}

// awaitActivation waits until the armed activation of p at at and records
// it (completeDue, which any replica's scheduler also does). It returns p
// as recorded and the version that retired at at, if any. When recording
// fails, p is returned as armed (it still activates at at on every
// replica) and the failure is logged, not returned.
func (m *Manager) awaitActivation(ctx context.Context, name string, p store.KeyVersion, at time.Time) (store.KeyVersion, *store.KeyVersion, error) {
	if d := at.Sub(m.now()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return p, nil, nil // armed: it activates at at regardless
		case <-t.C:
		}
	}
	var out store.KeyVersion
	var retired *store.KeyVersion
	err := m.transition(ctx, name, func(tx store.Tx, st *keyState, now time.Time) error {
		retired = nil
		for _, v := range st.versions {
			switch {
			case v.KID == p.KID:
				out = v
			case v.RetiredAt != nil && v.RetiredAt.Equal(at):
				r := v
				retired = &r
			}
		}
		return nil
	})
	if err != nil {
		m.log.Warn("the activation is armed but recording it failed; the scheduler records it", "key", name, "kid", p.KID, "at", at, "err", err)
		return p, nil, nil
	}
	return out, retired, nil
}

// revokeActiveArmed prepares the revocation of st's active version target
// with a propagation bound: the replacement — the pending version, or a
// new one — is armed at A = ceil(now + L), and target stops signing at
// once on every replica that learns of the revocation and by A on every
// other (their lease ends first), so its vrp_not_after is A. Between the
// revocation and A no version signs (503 no_active_version): a
// compromised key must not sign on, and its successor cannot sign before
// every replica could know it. The caller records target as revoked.
func (m *Manager) revokeActiveArmed(ctx context.Context, tx store.Tx, st *keyState, now time.Time, target *store.KeyVersion, actor Actor) (store.KeyVersion, error) {
	at := m.activationInstant(now, st.extra)
	if p := st.pending; p != nil && p.ArmedAt != nil && p.ActivatesAt != nil && !p.ActivatesAt.After(at) {
		// Already armed sooner: every replica that may sign knows that
		// instant, so it stays (moving an armed instant later would let
		// replicas that switched at it sign before the new one).
		target.RetiredAt = p.ActivatesAt
		st.active = nil
		return *p, nil
	}
	if st.pending == nil {
		v, err := m.mintVersion(ctx, tx, st, now, actor)
		if err != nil {
			return v, err
		}
		v.State, v.ActivatesAt = store.StatePending, &at
		if err := tx.InsertVersion(ctx, v); err != nil {
			return v, err
		}
		st.pending = &v // not appended to st.versions: pointers into it stay valid
	}
	next, err := m.arm(ctx, tx, st, now, at, actor)
	if err != nil {
		return next, err
	}
	target.RetiredAt = &at
	st.active = nil
	return next, nil
}

// idemClaim is an Idempotency-Key carried by a request's context: the
// first transaction of the request that commits records it (in the same
// transaction), so a retried request never repeats the change.
type idemClaim struct {
	key     store.IdempotencyKey
	claimed bool
}

type idemKey struct{}

// WithIdempotencyKey returns ctx carrying the idempotency key k (Principal,
// Key, Fingerprint set): the first lifecycle transaction made with ctx that
// commits claims it (store.Tx.ClaimIdempotencyKey); a transaction that
// finds it claimed already fails with ErrIdempotencyConflict. Claimed
// reports whether a transaction made with ctx claimed it.
func WithIdempotencyKey(ctx context.Context, k store.IdempotencyKey) context.Context {
	return context.WithValue(ctx, idemKey{}, &idemClaim{key: k})
}

// Claimed reports whether a lifecycle change made with ctx committed and
// claimed its idempotency key.
func Claimed(ctx context.Context) bool {
	c := claimFrom(ctx)
	return c != nil && c.claimed
}

func claimFrom(ctx context.Context) *idemClaim {
	c, _ := ctx.Value(idemKey{}).(*idemClaim)
	return c
}

// claimIn claims the key in tx unless already claimed; nil c is a no-op.
func (c *idemClaim) claimIn(ctx context.Context, tx store.Tx, now time.Time) error {
	if c == nil || c.claimed {
		return nil
	}
	k := c.key
	k.CreatedAt = now
	err := tx.ClaimIdempotencyKey(ctx, k)
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("%w: %s", ErrIdempotencyConflict, k.Key)
	}
	return err
}

func (c *idemClaim) committed() {
	if c != nil {
		c.claimed = true
	}
}
