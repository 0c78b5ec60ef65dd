package rotation

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/keysvc/keysvc/store"
)

// The lifecycle state machine of a key version (VRP K2–K4):
//
//	(new) ──schedule──▶ pending ──activate (at ActivatesAt, or early)──▶ active
//	(new) ──rotate now / create──────────────────────────────────────────▶ active
//	active ──next version activates──▶ retired
//	pending | active | retired ──revoke──▶ revoked (terminal)
//	retired | revoked ──destroy material──▶ same state, MaterialDestroyedAt set (destroy.go)
//
// At most one version per key is active (a unique index) and at most one is
// pending. When a version activates, the previous active version retires at
// the same instant: vrp_not_after of the old equals vrp_not_before of the
// new, so the published windows never leave a gap. Every transition runs in
// one transaction holding the key's row lock, re-reads the versions under
// that lock (so of several replicas exactly one performs a due transition
// and the others find nothing to do), writes its audit rows, and notifies
// the other replicas on commit.

// keyState is a key's versions as read under its lock.
type keyState struct {
	key      store.Key
	policy   Policy
	versions []store.KeyVersion
	active   *store.KeyVersion
	pending  *store.KeyVersion
	// completed is set when transition first completed a due scheduled
	// activation (see completeDue).
	completed bool
	// extra is the lead added to L for activation instants armed in this
	// attempt (retryDeadline raises it after a missed commit deadline).
	extra time.Duration
}

func (m *Manager) readState(ctx context.Context, tx store.Tx, name string) (*keyState, error) {
	key, err := tx.LockKey(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrKeyNotFound, name)
	} else if err != nil {
		return nil, err
	}
	pol, err := parsePolicy(key.Policy)
	if err != nil {
		return nil, err
	}
	versions, err := tx.ListVersions(ctx, name)
	if err != nil {
		return nil, err
	}
	st := &keyState{key: key, policy: pol, versions: versions}
	for i := range versions {
		switch versions[i].State {
		case store.StateActive:
			st.active = &versions[i]
		case store.StatePending:
			st.pending = &versions[i]
		}
	}
	return st, nil
}

// transition runs fn under the key's lock in one transaction, notifies the
// other replicas on commit and reloads the Keyring. A transaction that
// arms an activation carries a commit deadline (arm); when it misses it,
// the whole transaction is retried with a later instant (retryDeadline),
// so fn must only set variables it owns. The first transaction of a
// request that commits claims the request's idempotency key, if any
// (WithIdempotencyKey).
func (m *Manager) transition(ctx context.Context, name string, fn func(tx store.Tx, st *keyState, now time.Time) error) error {
	claim := claimFrom(ctx)
	err := m.retryDeadline(ctx, func(extra time.Duration) error {
		return m.store.InTx(ctx, func(tx store.Tx) error {
			st, err := m.readState(ctx, tx, name)
			if err != nil {
				return err
			}
			st.extra = extra
			now := st.clamp(m.now())
			if err := m.completeDue(ctx, tx, st, now); err != nil {
				return err
			}
			if err := fn(tx, st, now); err != nil {
				return err
			}
			if err := claim.claimIn(ctx, tx, now); err != nil {
				return err
			}
			return tx.NotifyChange(ctx, name)
		})
	})
	if err != nil {
		return err
	}
	claim.committed()
	crashPoint("transition.committed")
	m.reloadAfterCommit(ctx)
	return nil
}

// completeDue activates the pending version if its scheduled instant has
// passed, at that instant — what every replica's signing path already did
// (KeyEntry.SignerAt) — so any other change (revoke, rotate, activate) acts
// on the version that is really signing.
func (m *Manager) completeDue(ctx context.Context, tx store.Tx, st *keyState, now time.Time) error {
	p := st.pending
	if p == nil || p.ActivatesAt == nil || now.Before(*p.ActivatesAt) || !m.armed(*p) {
		return nil
	}
	if m.lead == 0 {
		// In-process mode arms at prepublication, so the hold happens
		// here: a version whose private half this (only) signer cannot
		// load does not activate; the active version keeps signing.
		if err := m.canLoad(ctx, st.key, *p); err != nil {
			m.stats.HeldActivations.Add(1)
			return nil
		}
	}
	next, err := m.activate(ctx, tx, st, *p, *p.ActivatesAt, schedulerActor)
	if err != nil {
		return err
	}
	if err := tx.UpdateVersion(ctx, next); err != nil {
		return err
	}
	if _, err := m.audit(ctx, tx, schedulerActor, "version.activate", st.key.Name, next.KID, ""); err != nil {
		return err
	}
	for i := range st.versions {
		if st.versions[i].KID == next.KID {
			st.versions[i] = next
			st.active = &st.versions[i]
		}
	}
	st.pending, st.completed = nil, true
	return nil
}

// clamp returns now, or the latest instant recorded for the key if now is
// earlier (a replica whose clock is behind): lifecycle windows never run
// backwards and versions stay ordered by creation.
func (st *keyState) clamp(now time.Time) time.Time {
	for _, v := range st.versions {
		for _, t := range []*time.Time{&v.CreatedAt, v.PublishedAt, v.ActivatedAt, v.RetiredAt, v.RevokedAt} {
			if t != nil && now.Before(*t) {
				now = *t
			}
		}
	}
	return now
}

// activate makes next the active version at instant at, retiring the
// current active version (if any) at the same instant.
func (m *Manager) activate(ctx context.Context, tx store.Tx, st *keyState, next store.KeyVersion, at time.Time, actor Actor) (store.KeyVersion, error) {
	if st.active != nil {
		old := *st.active
		old.State, old.RetiredAt = store.StateRetired, &at
		if err := tx.UpdateVersion(ctx, old); err != nil {
			return store.KeyVersion{}, err
		}
		if _, err := m.audit(ctx, tx, actor, "version.retire", st.key.Name, old.KID, ""); err != nil {
			return store.KeyVersion{}, err
		}
		*st.active = old
	}
	next.State, next.ActivatedAt = store.StateActive, &at
	crashPoint("activate.before-commit")
	return next, nil
}

// mintVersion creates a key pair in the backend for a new version of the
// key; the caller sets its state and inserts it in the same transaction.
func (m *Manager) mintVersion(ctx context.Context, tx store.Tx, st *keyState, now time.Time, actor Actor) (store.KeyVersion, error) {
	b, ok := m.backends[st.key.Backend]
	if !ok {
		return store.KeyVersion{}, fmt.Errorf("%w: %q", ErrUnknownBackend, st.key.Backend)
	}
	v, err := m.newVersion(ctx, tx, b, st.key, now, actor)
	if err != nil {
		return store.KeyVersion{}, err
	}
	crashPoint("version.created")
	return v, nil
}

// Rotate is an immediate (emergency) rotation: the key's pending version,
// if there is one, or else a new version activates now, and the active
// version retires at the same instant. It returns the new and the retired
// version. Errors: ErrKeyNotFound, ErrNoActive, backend errors.
//
// With a propagation bound L (ADR 0014) the switch is not immediate: the
// new version's activation is armed at the first whole second at least L
// after the commit, every replica switches then from memory, and Rotate
// waits for that instant and returns the transition as recorded. Errors
// then also: ErrActivationHeld (this replica cannot load the new
// version's private half; nothing switches).
func (m *Manager) Rotate(ctx context.Context, name string, actor Actor) (newV, oldV store.KeyVersion, err error) {
	if m.lead > 0 {
		newV, oldV, err = m.activateArmed(ctx, name, "", armOpts{}, actor)
		if err == nil {
			m.log.Info("key rotated", "key", name, "new_kid", newV.KID, "retired_kid", oldV.KID, "at", newV.ActivatedAt, "actor", actor.Name)
		}
		return newV, oldV, err
	}
	err = m.transition(ctx, name, func(tx store.Tx, st *keyState, now time.Time) error {
		if st.active == nil {
			return fmt.Errorf("%w: %s", ErrNoActive, name)
		}
		newV, err = m.rotateNow(ctx, tx, st, now, actor)
		oldV = *st.active
		return err
	})
	if err != nil {
		return store.KeyVersion{}, store.KeyVersion{}, err
	}
	m.log.Info("key rotated", "key", name, "new_kid", newV.KID, "retired_kid", oldV.KID, "actor", actor.Name)
	return newV, oldV, nil
}

// rotateNow activates the pending version (published already, so cached
// JWKS copies may hold it) or a freshly minted one at now.
func (m *Manager) rotateNow(ctx context.Context, tx store.Tx, st *keyState, now time.Time, actor Actor) (store.KeyVersion, error) {
	if st.pending != nil {
		next, err := m.activate(ctx, tx, st, *st.pending, now, actor)
		if err != nil {
			return next, err
		}
		if err := tx.UpdateVersion(ctx, next); err != nil {
			return next, err
		}
		_, err = m.audit(ctx, tx, actor, "version.activate", st.key.Name, next.KID, "")
		return next, err
	}
	v, err := m.mintVersion(ctx, tx, st, now, actor)
	if err != nil {
		return v, err
	}
	next, err := m.activate(ctx, tx, st, v, now, actor)
	if err != nil {
		return next, err
	}
	if err := tx.InsertVersion(ctx, next); err != nil {
		return next, err
	}
	_, err = m.audit(ctx, tx, actor, "version.activate", st.key.Name, next.KID, "")
	return next, err
}

// ScheduleRotation publishes a new pending version that activates after the
// key's prepublish period (K3). Errors: ErrKeyNotFound, ErrPendingExists.
func (m *Manager) ScheduleRotation(ctx context.Context, name string, actor Actor) (store.KeyVersion, error) {
	var v store.KeyVersion
	err := m.transition(ctx, name, func(tx store.Tx, st *keyState, now time.Time) error {
		if st.pending != nil {
			return fmt.Errorf("%w: %s activates at %s", ErrPendingExists, st.pending.KID, st.pending.ActivatesAt.Format(time.RFC3339))
		}
		var err error
		v, err = m.prepublish(ctx, tx, st, now, now.Add(m.effectivePrepublish(st.policy)), actor)
		return err
	})
	return v, err
}

// prepublish mints a pending version that activates at at.
func (m *Manager) prepublish(ctx context.Context, tx store.Tx, st *keyState, now, at time.Time, actor Actor) (store.KeyVersion, error) {
	v, err := m.mintVersion(ctx, tx, st, now, actor)
	if err != nil {
		return v, err
	}
	if m.lead > 0 {
		at = ceilSecond(at) // activation instants are whole seconds (ADR 0014)
	}
	v.State, v.ActivatesAt = store.StatePending, &at
	if m.lead == 0 {
		v.ArmedAt = &now // in-process mode: the planned instant is final
	}
	if err := tx.InsertVersion(ctx, v); err != nil {
		return v, err
	}
	details, _ := json.Marshal(map[string]string{"activates_at": at.UTC().Format(time.RFC3339Nano)})
	if _, err := m.audit(ctx, tx, actor, "version.prepublish", st.key.Name, v.KID, string(details)); err != nil {
		return v, err
	}
	crashPoint("prepublish.before-commit")
	return v, nil
}

// Activate promotes a pending version now, ahead of its schedule, once it
// has been published for longer than the JWKS max-age (K3): before that a
// verifier may hold a cached JWKS without it and would reject its
// signatures. Errors: ErrVersionNotFound, ErrInvalidTransition (not
// pending), ErrActivationTooEarly (use ActivateEmergency to accept the gap).
//
// With a propagation bound L (ADR 0014) the activation is armed at the
// first whole second at least L after the commit and Activate returns once
// it is recorded (see Rotate); ErrActivationHeld when this replica cannot
// load the version's private half.
func (m *Manager) Activate(ctx context.Context, kid string, actor Actor) (store.KeyVersion, error) {
	return m.activateNow(ctx, kid, false, actor)
}

// ActivateEmergency is Activate without the wait for JWKS caches: for an
// emergency (the active version is suspect), accepting that verifiers with
// a cached JWKS reject the version's first signatures. A reason is
// required; the activation is audited as an emergency, with how long the
// version had been published and the max-age. Errors: those of Activate
// except ErrActivationTooEarly, and ErrInvalidRequest without a reason.
func (m *Manager) ActivateEmergency(ctx context.Context, kid string, actor Actor) (store.KeyVersion, error) {
	if strings.TrimSpace(actor.Reason) == "" {
		return store.KeyVersion{}, invalid("an emergency activation needs a reason")
	}
	return m.activateNow(ctx, kid, true, actor)
}

func (m *Manager) activateNow(ctx context.Context, kid string, emergency bool, actor Actor) (store.KeyVersion, error) {
	name, err := m.keyOf(ctx, kid)
	if err != nil {
		return store.KeyVersion{}, err
	}
	if m.lead > 0 {
		v, _, err := m.activateArmed(ctx, name, kid, armOpts{checkAge: true, emergency: emergency}, actor)
		if err == nil && emergency {
			m.log.Warn("emergency activation: verifiers with a cached JWKS may reject this version's first signatures", "key", name, "kid", kid, "actor", actor.Name, "reason", actor.Reason)
		}
		return v, err
	}
	var out store.KeyVersion
	err = m.transition(ctx, name, func(tx store.Tx, st *keyState, now time.Time) error {
		if st.completed && st.active != nil && st.active.KID == kid {
			out = *st.active // its scheduled instant had already come
			return nil
		}
		if st.pending == nil || st.pending.KID != kid {
			return fmt.Errorf("%w: %s is not pending", ErrInvalidTransition, kid)
		}
		age, err := m.publishedLongEnough(*st.pending, now, emergency)
		if err != nil {
			return err
		}
		if out, err = m.activate(ctx, tx, st, *st.pending, now, actor); err != nil {
			return err
		}
		if err := tx.UpdateVersion(ctx, out); err != nil {
			return err
		}
		details := ""
		if emergency {
			d, _ := json.Marshal(m.emergencyDetails(age))
			details = string(d)
		}
		_, err = m.audit(ctx, tx, actor, "version.activate", name, kid, details)
		return err
	})
	if err == nil && emergency {
		m.log.Warn("emergency activation: verifiers with a cached JWKS may reject this version's first signatures", "key", name, "kid", kid, "actor", actor.Name, "reason", actor.Reason)
	}
	return out, err
}

// Revoke marks a version compromised (K4): state revoked, with
// vrp_compromised_at and the reason. Revoking the active version first
// rotates immediately (activating the pending version if any, else a new
// one), so signing never stops. compromisedAt must not be in the future and
// reason is required. It returns the revoked version and, when a rotation
// happened, the newly active one. When the key's policy enables the
// two-person rule, use RequestRevoke and Approve instead: Revoke then
// refuses with ErrApprovalRequired. Errors: ErrVersionNotFound,
// ErrInvalidRequest, ErrInvalidTransition (already revoked).
func (m *Manager) Revoke(ctx context.Context, kid string, compromisedAt time.Time, reason string, actor Actor) (revoked store.KeyVersion, replacement *store.KeyVersion, err error) {
	name, compromisedAt, err := m.checkRevoke(ctx, kid, compromisedAt, reason)
	if err != nil {
		return revoked, nil, err
	}
	err = m.transition(ctx, name, func(tx store.Tx, st *keyState, now time.Time) error {
		if st.policy.TwoPersonRule {
			return fmt.Errorf("%w: key %s requires a second officer's approval to revoke", ErrApprovalRequired, name)
		}
		revoked, replacement, err = m.revokeIn(ctx, tx, st, now, kid, compromisedAt, reason, actor)
		return err
	})
	if err != nil {
		return store.KeyVersion{}, nil, err
	}
	m.log.Warn("key version revoked", "key", name, "kid", kid, "compromised_at", compromisedAt, "actor", actor.Name)
	return revoked, replacement, nil
}

// checkRevoke validates a revocation request and finds the key of kid.
func (m *Manager) checkRevoke(ctx context.Context, kid string, compromisedAt time.Time, reason string) (string, time.Time, error) {
	if strings.TrimSpace(reason) == "" {
		return "", compromisedAt, invalid("a revocation reason is required")
	}
	if compromisedAt.IsZero() {
		return "", compromisedAt, invalid("compromised_at is required")
	}
	name, err := m.keyOf(ctx, kid)
	return name, compromisedAt.UTC().Truncate(store.Precision), err
}

// revokeIn performs a revocation inside a transition.
func (m *Manager) revokeIn(ctx context.Context, tx store.Tx, st *keyState, now time.Time, kid string, compromisedAt time.Time, reason string, actor Actor) (revoked store.KeyVersion, replacement *store.KeyVersion, err error) {
	if compromisedAt.After(now) {
		return revoked, nil, invalid("compromised_at %s is in the future", compromisedAt.Format(time.RFC3339))
	}
	var target *store.KeyVersion
	for i := range st.versions {
		if st.versions[i].KID == kid {
			target = &st.versions[i]
		}
	}
	if target == nil {
		return revoked, nil, fmt.Errorf("%w: %s", ErrVersionNotFound, kid)
	}
	if target.State == store.StateRevoked {
		return revoked, nil, fmt.Errorf("%w: %s is already revoked", ErrInvalidTransition, kid)
	}
	prev := target.State
	if prev == store.StateActive && m.lead > 0 {
		next, err := m.revokeActiveArmed(ctx, tx, st, now, target, Actor{Name: actor.Name, ID: actor.ID, Reason: "revocation of " + kid + ": " + reason})
		if err != nil {
			return revoked, nil, err
		}
		replacement = &next
	} else if prev == store.StateActive {
		next, err := m.rotateNow(ctx, tx, st, now, Actor{Name: actor.Name, ID: actor.ID, Reason: "revocation of " + kid + ": " + reason})
		if err != nil {
			return revoked, nil, err
		}
		replacement = &next
		*target = *st.active // now retired at now
	}
	if target.State == store.StatePending {
		st.pending = nil
	}
	target.State, target.RevokedAt, target.CompromisedAt, target.RevocationReason = store.StateRevoked, &now, &compromisedAt, reason
	if err := tx.UpdateVersion(ctx, *target); err != nil {
		return revoked, nil, err
	}
	details, _ := json.Marshal(map[string]string{"compromised_at": compromisedAt.Format(time.RFC3339Nano), "previous_state": string(prev)})
	if _, err := m.audit(ctx, tx, Actor{Name: actor.Name, Reason: reason}, "version.revoke", st.key.Name, kid, string(details)); err != nil {
		return revoked, nil, err
	}
	return *target, replacement, nil
}

// revokeParams are the parameters of a revocation awaiting approval.
type revokeParams struct {
	CompromisedAt time.Time `json:"compromised_at"`
	Reason        string    `json:"reason"`
}

// RequestRevoke revokes kid at once, or — when the key's policy enables the
// two-person rule — records a pending approval that a second principal
// must grant with Approve within the approval window. Exactly one of
// approval and revoked is set. Errors: those of Revoke.
func (m *Manager) RequestRevoke(ctx context.Context, kid string, compromisedAt time.Time, reason string, actor Actor) (approval *store.Approval, revoked *store.KeyVersion, replacement *store.KeyVersion, err error) {
	name, compromisedAt, err := m.checkRevoke(ctx, kid, compromisedAt, reason)
	if err != nil {
		return nil, nil, nil, err
	}
	err = m.transition(ctx, name, func(tx store.Tx, st *keyState, now time.Time) error {
		if !st.policy.TwoPersonRule {
			v, next, err := m.revokeIn(ctx, tx, st, now, kid, compromisedAt, reason, actor)
			revoked, replacement = &v, next
			return err
		}
		if compromisedAt.After(now) {
			return invalid("compromised_at %s is in the future", compromisedAt.Format(time.RFC3339))
		}
		found := false
		for _, v := range st.versions {
			if v.KID == kid {
				found = true
				if v.State == store.StateRevoked {
					return fmt.Errorf("%w: %s is already revoked", ErrInvalidTransition, kid)
				}
			}
		}
		if !found {
			return fmt.Errorf("%w: %s", ErrVersionNotFound, kid)
		}
		a, err := m.fileApproval(ctx, tx, now, name, "revoke", kid, revokeParams{CompromisedAt: compromisedAt, Reason: reason},
			Actor{Name: actor.Name, ID: actor.ID, Reason: reason}, map[string]any{"compromised_at": compromisedAt.Format(time.RFC3339Nano)})
		approval = &a
		return err
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return approval, revoked, replacement, nil
}

// Approved is what granting an approval did, by the approval's Action:
// "revoke" sets Revoked (and Replacement when the revoked version was the
// active one); "destroy" sets Destroyed.
type Approved struct {
	Approval    store.Approval
	Revoked     *store.KeyVersion
	Replacement *store.KeyVersion
	Destroyed   *Destroyed
	Policy      *Policy // the policy now in force, for a "policy" approval
}

// fileApproval records a pending approval of action on kid (two-person
// rule) with its parameters, and audits the request as actor with details
// plus the approval id, action and expiry.
//
// Errors: ErrApprovalPending when the same action on the same key and kid
// already awaits approval (approvals of a key are filed and decided only
// under its row lock, so the check cannot race).
func (m *Manager) fileApproval(ctx context.Context, tx store.Tx, now time.Time, name, action, kid string, params any, actor Actor, details map[string]any) (store.Approval, error) {
	pending, err := m.store.ListApprovals(ctx, "pending")
	if err != nil {
		return store.Approval{}, err
	}
	for _, a := range pending {
		if a.KeyName == name && a.Action == action && a.KID == kid && now.Before(a.ExpiresAt) {
			return store.Approval{}, fmt.Errorf("%w: approval %s (%s %s), expires %s", ErrApprovalPending, a.ID, action, cmp.Or(kid, name), a.ExpiresAt.Format(time.RFC3339))
		}
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return store.Approval{}, err
	}
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return store.Approval{}, err
	}
	a := store.Approval{ID: hex.EncodeToString(id), KeyName: name, Action: action, KID: kid, Params: raw,
		RequestedBy: actor.identity(), RequestedByName: actor.Name, RequestedAt: now, ExpiresAt: now.Add(m.approvalWindow), Status: "pending"}
	if err := tx.InsertApproval(ctx, a); err != nil {
		return store.Approval{}, err
	}
	details["approval"], details["action"], details["expires_at"] = a.ID, action, a.ExpiresAt.Format(time.RFC3339Nano)
	d, err := json.Marshal(details)
	if err != nil {
		return store.Approval{}, err
	}
	if _, err := m.audit(ctx, tx, actor, "approval.request", name, kid, string(d)); err != nil {
		return store.Approval{}, err
	}
	return a, nil
}

// Approve grants a pending approval as a second principal and performs the
// change it asks for (a revocation, or a key-material destruction) in the
// same transaction; both principals are in the audit trail.
// Errors: ErrApprovalNotFound, ErrInvalidTransition (already decided or
// expired), ErrSamePrincipal, and those of the change.
func (m *Manager) Approve(ctx context.Context, id string, actor Actor) (out Approved, err error) {
	list, err := m.store.ListApprovals(ctx, "")
	if err != nil {
		return out, err
	}
	name := ""
	for _, a := range list {
		if a.ID == id {
			name = a.KeyName
		}
	}
	if name == "" {
		return out, fmt.Errorf("%w: %s", ErrApprovalNotFound, id)
	}
	var expired bool
	err = m.transition(ctx, name, func(tx store.Tx, st *keyState, now time.Time) error {
		a, err := tx.LockApproval(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: %s", ErrApprovalNotFound, id)
		} else if err != nil {
			return err
		}
		if a.KeyName != name {
			// The key was found by an unlocked read, and this transaction
			// locked and checked that key: an approval whose key changed
			// in between must not act on it (an attack review, session 47).
			return fmt.Errorf("%w: approval %s changed while it was being approved (it named key %s, now %s); nothing was done", ErrInvalidTransition, id, name, a.KeyName)
		}
		if a.Status != "pending" {
			return fmt.Errorf("%w: approval %s is already %s", ErrInvalidTransition, id, a.Status)
		}
		requester, err := m.requesterIdentity(ctx, tx, a)
		if err != nil {
			return err
		}
		if requester == actor.identity() {
			return fmt.Errorf("%w: approval %s was requested by the same principal (%s)", ErrSamePrincipal, id, strings.TrimPrefix(requester, PrincipalIDPrefix))
		}
		a.DecidedBy, a.DecidedByName, a.DecidedAt = actor.identity(), actor.Name, &now
		if !now.Before(a.ExpiresAt) {
			a.Status, expired = "expired", true
			if err := tx.DecideApproval(ctx, a); err != nil {
				return err
			}
			_, err := m.audit(ctx, tx, actor, "approval.expire", name, a.KID, fmt.Sprintf(`{"approval":%q}`, id))
			return err // committed: the expiry is recorded
		}
		if a.Action != "revoke" && a.Action != "destroy" && a.Action != "policy" {
			return fmt.Errorf("rotation: approval %s: unknown action %q", id, a.Action)
		}
		a.Status = "approved"
		if err := tx.DecideApproval(ctx, a); err != nil {
			return err
		}
		details, _ := json.Marshal(map[string]string{"approval": id, "requested_by": requesterName(a)})
		if _, err := m.audit(ctx, tx, actor, "approval.grant", name, a.KID, string(details)); err != nil {
			return err
		}
		out.Approval = a
		if a.Action == "destroy" {
			out.Destroyed, err = m.approveDestroy(ctx, tx, st, now, a, actor)
			return err
		}
		if a.Action == "policy" {
			var p policyParams
			if err := json.Unmarshal(a.Params, &p); err != nil {
				return fmt.Errorf("rotation: approval %s: %w", id, err)
			}
			if err := m.validatePolicy(p.Policy); err != nil {
				return err
			}
			out.Policy = &p.Policy
			return m.setPolicyIn(ctx, tx, st, name, p.Policy, Actor{Name: requesterName(a) + " approved by " + actor.Name, ID: actor.ID, Reason: p.Reason})
		}
		var p revokeParams
		if err := json.Unmarshal(a.Params, &p); err != nil {
			return fmt.Errorf("rotation: approval %s: %w", id, err)
		}
		revoked, replacement, err := m.revokeIn(ctx, tx, st, now, a.KID, p.CompromisedAt, p.Reason,
			Actor{Name: requesterName(a) + " approved by " + actor.Name, ID: actor.ID})
		out.Revoked, out.Replacement = &revoked, replacement
		return err
	})
	if err == nil && expired {
		err = fmt.Errorf("%w: approval %s expired", ErrInvalidTransition, id)
	}
	if err != nil {
		return Approved{}, err
	}
	switch {
	case out.Destroyed != nil:
		m.log.Warn("key material destroyed (two-person rule)", "key", name, "kid", out.Approval.KID, "approval", id, "approved_by", actor.Name)
		m.scrub(ctx, out.Approval.KID)
	case out.Policy != nil:
		m.log.Warn("key policy changed (two-person rule)", "key", name, "approval", id, "approved_by", actor.Name)
	default:
		m.log.Warn("key version revoked (two-person rule)", "key", name, "kid", out.Revoked.KID, "approval", id, "approved_by", actor.Name)
	}
	return out, nil
}

// policyParams are the parameters of a policy change awaiting approval.
type policyParams struct {
	Policy Policy `json:"policy"`
	Reason string `json:"reason,omitempty"`
}

// SetPolicy replaces a key's rotation policy (validated against the JWKS
// max-age and the minimum retention) and audits the change. Switching the
// two-person rule off, and cutting the retention (shorter, or from
// forever to a bound), are themselves two-person changes: while the key's
// policy has the rule, such a policy is not applied but filed as a pending
// approval (action "policy") that a second principal grants with Approve;
// approval is then non-nil. Otherwise the policy is applied at once and
// approval is nil.
// Errors: invalid policies (ErrInvalidPolicy), ErrKeyNotFound,
// ErrApprovalPending.
func (m *Manager) SetPolicy(ctx context.Context, name string, p Policy, actor Actor) (approval *store.Approval, err error) {
	if err := m.validatePolicy(p); err != nil {
		return nil, err
	}
	err = m.transition(ctx, name, func(tx store.Tx, st *keyState, now time.Time) error {
		if off, cut := !p.TwoPersonRule, retentionCut(st.policy, p); st.policy.TwoPersonRule && (off || cut) {
			details := map[string]any{"two_person_rule": p.TwoPersonRule}
			if cut {
				details["retention"] = map[string]string{"old": time.Duration(st.policy.Retention).String(), "new": time.Duration(p.Retention).String()}
			}
			a, err := m.fileApproval(ctx, tx, now, name, "policy", "", policyParams{Policy: p, Reason: actor.Reason}, actor, details)
			approval = &a
			return err
		}
		return m.setPolicyIn(ctx, tx, st, name, p, actor)
	})
	if err != nil {
		return nil, err
	}
	return approval, nil
}

// setPolicyIn writes p as name's policy inside a transition and audits it.
func (m *Manager) setPolicyIn(ctx context.Context, tx store.Tx, st *keyState, name string, p Policy, actor Actor) error {
	raw, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if err := tx.UpdateKeyPolicy(ctx, name, raw); err != nil {
		return err
	}
	details, err := json.Marshal(map[string]Policy{"old": st.policy, "new": p})
	if err != nil {
		return err
	}
	_, err = m.audit(ctx, tx, actor, "key.policy", name, "", string(details))
	return err
}

func (m *Manager) keyOf(ctx context.Context, kid string) (string, error) {
	v, err := m.store.GetVersion(ctx, kid)
	if errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("%w: %s", ErrVersionNotFound, kid)
	}
	return v.KeyName, err
}

// prepublishLead: the scheduler publishes the next version prepublishLead
// prepublish periods before its activation, so a scheduler that runs late
// (load, a restart, a slow replica) still publishes it at least prepublish
// ahead and the activation keeps its exact place one rotation period after
// the previous one.
const prepublishLead = 2

// schedulerActor is the actor recorded for scheduled transitions.
var schedulerActor = Actor{Name: "keysvc-scheduler", Reason: "rotation policy"}

// due returns when key e next needs the scheduler: its pending version's
// activation, or the instant its next version must be prepublished. ok is
// false when nothing is scheduled.
func (m *Manager) due(e *KeyEntry) (at time.Time, ok bool) {
	var pending, active *store.KeyVersion
	for i := range e.Versions {
		switch e.Versions[i].State {
		case store.StatePending:
			pending = &e.Versions[i]
		case store.StateActive:
			active = &e.Versions[i]
		}
	}
	switch {
	case pending != nil && pending.ActivatesAt != nil && !m.armed(*pending):
		return pending.ActivatesAt.Add(-m.armLead()), true // time to arm it
	case pending != nil && pending.ActivatesAt != nil:
		return *pending.ActivatesAt, true
	case pending == nil && active != nil && active.ActivatedAt != nil && e.Policy.RotationPeriod > 0:
		return active.ActivatedAt.Add(time.Duration(e.Policy.RotationPeriod) - prepublishLead*m.effectivePrepublish(e.Policy)), true
	}
	return time.Time{}, false
}

// SetBackend moves a key to another backend: versions created from now on
// (by the next rotation) live there, while existing versions stay where
// they are and keep verifying. The algorithm never changes. Errors:
// ErrKeyNotFound, ErrUnknownBackend.
func (m *Manager) SetBackend(ctx context.Context, name, backend string, actor Actor) error {
	if _, ok := m.backends[backend]; !ok {
		return fmt.Errorf("%w: %q", ErrUnknownBackend, backend)
	}
	return m.transition(ctx, name, func(tx store.Tx, st *keyState, now time.Time) error {
		if st.key.Backend == backend {
			return nil
		}
		if err := tx.UpdateKeyBackend(ctx, name, backend); err != nil {
			return err
		}
		details, _ := json.Marshal(map[string]string{"old": st.key.Backend, "new": backend})
		_, err := m.audit(ctx, tx, actor, "key.backend", name, "", string(details))
		return err
	})
}

// NextTransition returns when the scheduler next acts on key e
// (prepublication or activation); ok is false when nothing is scheduled.
func (m *Manager) NextTransition(e *KeyEntry) (at time.Time, ok bool) {
	for _, v := range e.Versions {
		if v.State == store.StatePending && v.ActivatesAt != nil {
			return *v.ActivatesAt, true // planned or armed activation; overdue while held
		}
	}
	return m.due(e)
}

// Tick performs every due scheduled transition: prepublishing the next
// version of keys whose active version is within prepublish of its
// rotation period, arming pending activations (with a propagation bound:
// armLead before their planned instant, once this replica has loaded the
// version's private half — else the activation is held, ErrActivationHeld,
// and reported overdue), and recording activations whose instant has come
// (at that instant, which is also when every replica switched to them).
// A key whose transition fails is retried with bounded exponential
// backoff with jitter (200 ms to 30 s), with one log line per failure
// episode and a counter per attempt (Stats.SchedulerFailures); other keys
// are unaffected. It returns how many transitions it made.
func (m *Manager) Tick(ctx context.Context) (int, error) {
	ring := m.Keyring()
	now := m.now()
	n := 0
	var errs []error
	for _, name := range ring.SortedNames() {
		e := ring.Keys[name]
		if at, ok := m.due(e); !ok || now.Before(at) {
			continue
		}
		kb := m.schedulerBackoff(name)
		if now.Before(kb.next) {
			continue
		}
		made, err := m.tickKey(ctx, name, e)
		n += made
		if err != nil {
			if ctx.Err() != nil {
				return n, errors.Join(append(errs, err)...)
			}
			m.stats.SchedulerFailures.Add(1)
			kb.ep.fail(m.log, "scheduled transition failed; retrying with backoff", err, "key", name)
			kb.next = now.Add(kb.bo.NextBackOff())
			errs = append(errs, fmt.Errorf("key %s: %w", name, err))
			continue
		}
		kb.ep.recover(m.log, "scheduled transitions of the key succeed again", "key", name)
		kb.bo.Reset()
		kb.next = time.Time{}
	}
	return n, errors.Join(errs...)
}

// armLead is how long before a scheduled activation's planned instant the
// scheduler arms it: 3 L (at least L + 1 s), so that a slow store still
// commits it by the planned instant − L.
func (m *Manager) armLead() time.Duration { return max(3*m.lead, m.lead+time.Second) }

// tickKey performs key name's due scheduled transition.
func (m *Manager) tickKey(ctx context.Context, name string, e *KeyEntry) (int, error) {
	// The pending version whose activation this tick may arm (or, in
	// in-process mode, complete) must be loadable here.
	var hold *store.KeyVersion
	for i := range e.Versions {
		if v := e.Versions[i]; v.State == store.StatePending && (!m.armed(v) || m.lead == 0) {
			hold = &e.Versions[i]
		}
	}
	if hold != nil {
		// Hold the activation unless this replica holds the private half.
		if err := m.canLoad(ctx, e.Key, *hold); err != nil {
			m.stats.HeldActivations.Add(1)
			return 0, fmt.Errorf("%w: %s: %v", ErrActivationHeld, hold.KID, err)
		}
	}
	n := 0
	err := m.transition(ctx, name, func(tx store.Tx, st *keyState, now time.Time) error {
		n = 0
		if st.completed {
			n++ // transition activated the due pending version
		}
		switch {
		case st.pending != nil && !m.armed(*st.pending) && st.pending.ActivatesAt != nil && m.lead > 0:
			planned := *st.pending.ActivatesAt
			if hold == nil || hold.KID != st.pending.KID || now.Before(planned.Add(-m.armLead())) {
				return nil // changed meanwhile; the next tick sees it
			}
			at := m.activationInstant(now, st.extra)
			if at.Before(planned) {
				at = planned
			}
			if _, err := m.arm(ctx, tx, st, now, at, schedulerActor); err != nil {
				return err
			}
			n++
		case st.pending == nil && st.active != nil && st.active.ActivatedAt != nil && st.policy.RotationPeriod > 0:
			pre := m.effectivePrepublish(st.policy)
			at := st.active.ActivatedAt.Add(time.Duration(st.policy.RotationPeriod))
			if now.Before(at.Add(-prepublishLead * pre)) {
				return nil // another replica did it, or the policy changed
			}
			if earliest := now.Add(pre); at.Before(earliest) {
				at = earliest // never sign before being published for prepublish
			}
			if m.lead > 0 {
				at = ceilSecond(at) // activation instants are whole seconds
			}
			if _, err := m.prepublish(ctx, tx, st, now, at, schedulerActor); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// RunScheduler calls Tick until ctx ends: at each key's next due instant
// (or the end of its backoff), and at least every interval (which also
// picks up policy changes).
func (m *Manager) RunScheduler(ctx context.Context, interval time.Duration) {
	for {
		_, _ = m.Tick(ctx) // failures are logged per key and episode by Tick
		wait := interval
		ring := m.Keyring()
		now := m.now()
		for name, e := range ring.Keys {
			if at, ok := m.due(e); ok {
				if kb := m.schedulerBackoff(name); kb.next.After(at) {
					at = kb.next
				}
				if d := at.Sub(now); d < wait {
					wait = max(d, time.Millisecond)
				}
			}
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

// Watch reloads the Keyring whenever another process commits a lifecycle
// change (PostgreSQL LISTEN/NOTIFY), reconnecting with backoff until ctx
// ends. On stores without notifications it returns at once; the caller's
// polling reload covers them.
func (m *Manager) Watch(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		// Changes committed while we were not listening are picked up here.
		if err := m.Reload(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("key history reload failed", "err", err)
		}
		err := m.store.Watch(ctx, func(string) {
			if err := m.Reload(ctx); err != nil && ctx.Err() == nil {
				m.log.Warn("key history reload failed", "err", err)
			}
		})
		if errors.Is(err, store.ErrWatchUnsupported) || ctx.Err() != nil {
			return
		}
		m.log.Warn("change notifications interrupted; polling until reconnected", "err", err)
		if time.Since(start) > 30*time.Second {
			backoff = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// crashPoint kills the process with SIGKILL when $KEYSVC_TEST_CRASH_AT
// names this point — the fault-injection hook of the crash-safety tests.
// Unset in production; it can only end this process.
func crashPoint(name string) {
	if os.Getenv("KEYSVC_TEST_CRASH_AT") == name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

// requesterIdentity is the principal id that filed approval a. Approvals
// filed before principals were compared by person recorded the API token
// ("token:ID"): that token's name gives the person. One filed through a
// client certificate then ("token:cert:CN") cannot be resolved and must be
// filed again; an id of a token that no longer exists stays as it is.
func (m *Manager) requesterIdentity(ctx context.Context, tx store.Tx, a store.Approval) (string, error) {
	id, ok := strings.CutPrefix(a.RequestedBy, "token:")
	if !ok {
		return a.RequestedBy, nil
	}
	if strings.HasPrefix(id, "cert:") {
		return "", fmt.Errorf("%w: approval %s was filed through a client certificate before approvals compared principals; file it again", ErrInvalidTransition, a.ID)
	}
	tokens, err := tx.ListTokens(ctx)
	if err != nil {
		return "", err
	}
	for _, t := range tokens {
		if t.ID == id {
			return PrincipalID(t.Name), nil
		}
	}
	return a.RequestedBy, nil
}

// requesterName is how an approval's requester is named in the audit trail
// of the change it asked for: the display name, or the principal id of an
// approval filed before names were recorded.
func requesterName(a store.Approval) string { return cmp.Or(a.RequestedByName, a.RequestedBy) }
