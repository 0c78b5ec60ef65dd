package rotation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/store"
)

// Key-material destruction (issue 6): the private half of a version that
// no longer signs — retired or revoked — is destroyed in its backend for
// good, and key history records when (KeyVersion.MaterialDestroyedAt; the
// sealed blob of a software version is dropped in the same transaction).
// It is a lifecycle action, not a state: the version keeps its state,
// windows and public key, so it stays in the key-history document (and, if
// retired and within retention, in the JWKS) and every receipt it signed
// stays verifiable. It can never sign again, and the Keyring never loads a
// signer for it (Reload loads only active and pending versions, and
// loadSigner refuses a destroyed one).
//
// Under the key's two-person rule, RequestDestroy files an approval
// (action "destroy") that a second principal grants with Approve within
// the approval window, as for revocation.
//
// Ordering. The destruction runs inside the transaction that records it,
// under the key's row lock: the backend's DestroyKey (an irreversible
// external effect) first, then the store update and the audit row, then
// the commit. If the commit fails after DestroyKey succeeded, key history
// still says the material exists although it is gone (or scheduled for
// deletion, in KMS). That is the safe side of the two possible orders —
// recording first would let a failed backend call leave a version marked
// destroyed whose key still exists, which is worse for an officer relying
// on the record — and it heals: DestroyKey is idempotent (already gone =
// success), so a retry of the same request finds the object gone and
// records the destruction. Backend calls are bounded by the backend's own
// timeouts while the lock is held.

// destroyParams are the parameters of a destruction awaiting approval.
type destroyParams struct {
	Reason      string `json:"reason"`
	PendingDays int    `json:"pending_days,omitempty"`
}

// Destroyed describes a performed key-material destruction.
type Destroyed struct {
	// Version is the version as recorded afterwards: MaterialDestroyedAt
	// set, SealedPrivateKey nil, everything else unchanged.
	Version store.KeyVersion
	// Backend is the kind of the backend that held the private half (the
	// scheme of the version's backend reference).
	Backend string
	// Result is what the backend reported; for AWS KMS, DeletionDate is
	// when KMS deletes the key.
	Result backends.DestroyResult
}

// grant names the approval and both principals of a destruction made
// under the two-person rule.
type grant struct {
	id, requestedBy, approvedBy string
}

// checkDestroy validates a destruction request and finds the key of kid.
func (m *Manager) checkDestroy(ctx context.Context, kid, reason string, opt backends.DestroyOptions) (string, error) {
	if strings.TrimSpace(reason) == "" {
		return "", invalid("a reason is required to destroy key material")
	}
	if d := opt.PendingWindowDays; d != 0 && (d < backends.MinPendingWindowDays || d > backends.MaxPendingWindowDays) {
		return "", invalid("pending_days must be %d to %d, got %d", backends.MinPendingWindowDays, backends.MaxPendingWindowDays, d)
	}
	return m.keyOf(ctx, kid)
}

// destroyable returns the version kid of st if its material may be
// destroyed: it must have stopped signing (retired or revoked) and still
// have its material.
func destroyable(st *keyState, kid string) (*store.KeyVersion, error) {
	for i := range st.versions {
		v := &st.versions[i]
		if v.KID != kid {
			continue
		}
		switch {
		case v.MaterialDestroyedAt != nil:
			return nil, fmt.Errorf("%w: the key material of %s was already destroyed at %s", ErrInvalidTransition, kid, v.MaterialDestroyedAt.Format(time.RFC3339Nano))
		case v.State == store.StateActive || v.State == store.StatePending:
			return nil, fmt.Errorf("%w: %s is %s and still signs or is about to: only retired or revoked versions can have their key material destroyed (rotate, or revoke, first)", ErrInvalidTransition, kid, v.State)
		}
		return v, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrVersionNotFound, kid)
}

// RequestDestroy destroys the key material of version kid at once, or —
// when the key's policy enables the two-person rule — records a pending
// approval (action "destroy") that a second principal must grant with
// Approve within the approval window. Exactly one of approval and
// destroyed is set. Only retired and revoked versions qualify.
// opt.PendingWindowDays (0, or 7 to 30) matters only for AWS KMS versions.
// Errors: ErrInvalidRequest (no reason, bad pending window, a backend that
// cannot destroy), ErrVersionNotFound, ErrInvalidTransition (active or
// pending version; material already destroyed), ErrUnknownBackend, and
// the backend's errors (backends.ErrUnavailable, ...), after which nothing
// is recorded.
func (m *Manager) RequestDestroy(ctx context.Context, kid, reason string, opt backends.DestroyOptions, actor Actor) (approval *store.Approval, destroyed *Destroyed, err error) {
	name, err := m.checkDestroy(ctx, kid, reason, opt)
	if err != nil {
		return nil, nil, err
	}
	p := destroyParams{Reason: reason, PendingDays: opt.PendingWindowDays}
	err = m.transition(ctx, name, func(tx store.Tx, st *keyState, now time.Time) error {
		if !st.policy.TwoPersonRule {
			d, err := m.destroyIn(ctx, tx, st, now, kid, p, actor, nil)
			destroyed = &d
			return err
		}
		if _, err := destroyable(st, kid); err != nil {
			return err
		}
		details := map[string]any{}
		if p.PendingDays != 0 {
			details["pending_days"] = p.PendingDays
		}
		a, err := m.fileApproval(ctx, tx, now, name, "destroy", kid, p, Actor{Name: actor.Name, ID: actor.ID, Reason: reason}, details)
		approval = &a
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	if destroyed != nil {
		m.log.Warn("key material destroyed", "key", name, "kid", kid, "backend", destroyed.Backend, "actor", actor.Name)
		m.scrub(ctx, kid)
	}
	return approval, destroyed, nil
}

// destroyIn performs a destruction inside a transition: the backend's
// DestroyKey, then the store update and the version.destroy_material
// audit row (see the ordering note at the top of this file).
func (m *Manager) destroyIn(ctx context.Context, tx store.Tx, st *keyState, now time.Time, kid string, p destroyParams, actor Actor, g *grant) (Destroyed, error) {
	if _, err := destroyable(st, kid); err != nil {
		return Destroyed{}, err
	}
	// The backend is called with the version as locked (and, on anchored
	// key history, checked against the log: its backend reference and
	// public key; ADR 0050) before anything irreversible happens: the row
	// read with the key's state was not locked, and a refusal after
	// DestroyKey would come too late.
	locked, err := tx.LockVersion(ctx, kid)
	if err != nil {
		return Destroyed{}, err
	}
	for i := range st.versions {
		if st.versions[i].KID == kid {
			st.versions[i] = locked
		}
	}
	target, err := destroyable(st, kid)
	if err != nil {
		return Destroyed{}, err
	}
	kind := target.BackendKind(st.key.Backend)
	b, ok := m.backends[kind]
	if !ok {
		return Destroyed{}, fmt.Errorf("%w: version %s of key %s lives in backend %q, which this server does not have", ErrUnknownBackend, kid, st.key.Name, kind)
	}
	d, ok := b.(backends.Destroyer)
	if !ok {
		return Destroyed{}, invalid("backend %q cannot destroy key material", kind)
	}
	pub, err := parsePublic(target.PublicJWK)
	if err != nil {
		return Destroyed{}, fmt.Errorf("rotation: %s: %w", kid, err)
	}
	res, err := d.DestroyKey(ctx, kid, backends.Handle{Ref: target.BackendRef, Sealed: target.SealedPrivateKey, Public: pub, KeyName: target.KeyName},
		backends.DestroyOptions{PendingWindowDays: p.PendingDays})
	if err != nil {
		return Destroyed{}, fmt.Errorf("rotation: destroy the key material of %s: %w", kid, err)
	}
	crashPoint("destroy.before-commit")
	if err := tx.DestroyVersionMaterial(ctx, kid, now); err != nil {
		return Destroyed{}, err
	}
	target.MaterialDestroyedAt, target.SealedPrivateKey = &now, nil
	details := map[string]any{"backend": kind, "backend_ref": target.BackendRef, "state": string(target.State)}
	if res.DeletionDate != nil {
		details["deletion_date"] = res.DeletionDate.UTC().Format(time.RFC3339Nano)
	}
	if p.PendingDays != 0 {
		details["pending_days"] = p.PendingDays
	}
	if res.AlreadyDestroyed {
		details["already_destroyed"] = true
	}
	if res.Note != "" {
		details["note"] = res.Note
	}
	if g != nil {
		details["approval"], details["requested_by"], details["approved_by"] = g.id, g.requestedBy, g.approvedBy
	}
	raw, err := json.Marshal(details)
	if err != nil {
		return Destroyed{}, err
	}
	if _, err := m.audit(ctx, tx, Actor{Name: actor.Name, Reason: p.Reason}, "version.destroy_material", st.key.Name, kid, string(raw)); err != nil {
		return Destroyed{}, err
	}
	return Destroyed{Version: *target, Backend: kind, Result: res}, nil
}

// approveDestroy performs the destruction an approval a asked for, as
// granted by actor (see Approve).
func (m *Manager) approveDestroy(ctx context.Context, tx store.Tx, st *keyState, now time.Time, a store.Approval, actor Actor) (*Destroyed, error) {
	var p destroyParams
	if err := json.Unmarshal(a.Params, &p); err != nil {
		return nil, fmt.Errorf("rotation: approval %s: %w", a.ID, err)
	}
	d, err := m.destroyIn(ctx, tx, st, now, a.KID, p, Actor{Name: requesterName(a) + " approved by " + actor.Name, ID: actor.ID},
		&grant{id: a.ID, requestedBy: a.RequestedBy, approvedBy: actor.identity()})
	if err != nil {
		return nil, err
	}
	return &d, nil
}

// errDestroyed is returned by loadSigner for a version whose key material
// was destroyed: it can never sign again.
var errDestroyed = errors.New("key material destroyed")

// scrub asks the store to drop its own leftover copies of the rows a
// destruction overwrote (the software backend's sealed key in SQLite's WAL
// or PostgreSQL's dead row versions). Best effort: the destruction is
// committed either way; a failure is logged for the operator.
func (m *Manager) scrub(ctx context.Context, kid string) {
	if err := m.store.Scrub(ctx); err != nil {
		m.log.Warn("could not scrub the database after destroying key material; see docs/runbooks/destroying-key-material.md", "kid", kid, "err", err)
	}
}
