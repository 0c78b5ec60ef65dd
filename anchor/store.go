package anchor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// Wrap returns s with every transaction anchored: the keys, versions and
// audit rows a transaction writes are read back before it commits, their
// facts and markers stored in anchor_events in the same transaction, and
// submitted to the logs once it committed. Minting consults the log: a kid
// the log records as minted is skipped (KIDsWithPrefix) and never inserted
// again (InsertVersion: ErrKIDMinted). Reads pass through.
func (a *Anchor) Wrap(s store.Store) store.Store { return &anchoredStore{Store: s, a: a} }

type anchoredStore struct {
	store.Store
	a *Anchor
}

// AnchorEventsByHash, ListAnchorEvents and AnchorEventHashes pass through.
func (s *anchoredStore) AnchorEventsByHash(ctx context.Context, hashes [][32]byte) (map[[32]byte]store.AnchorEvent, error) {
	return s.a.as.AnchorEventsByHash(ctx, hashes)
}

func (s *anchoredStore) ListAnchorEvents(ctx context.Context) ([]store.AnchorEvent, error) {
	return s.a.as.ListAnchorEvents(ctx)
}

func (s *anchoredStore) AnchorEventHashes(ctx context.Context) ([][32]byte, error) {
	return s.a.as.AnchorEventHashes(ctx)
}

// InTx implements store.Store.
func (s *anchoredStore) InTx(ctx context.Context, fn func(store.Tx) error) error {
	var t *anchoredTx
	err := s.Store.InTx(ctx, func(tx store.Tx) error {
		t = &anchoredTx{Tx: tx, a: s.a, keys: map[string]bool{}, keyRev: map[string]int64{}, keyChecked: map[string]bool{}, versions: map[string]bool{}, minted: map[string]bool{}, versionChecked: map[string]bool{},
			read: map[string]store.KeyVersion{}, noBind: map[string]bool{}}
		if err := fn(t); err != nil {
			return err
		}
		return t.finish(ctx)
	})
	if err != nil || t == nil || len(t.events) == 0 {
		return err
	}
	s.a.noteAbsent(t.absent...)
	s.a.committed(ctx, t.events)
	return nil
}

type anchoredTx struct {
	store.Tx
	a      *Anchor
	keys   map[string]bool  // written key names
	keyRev map[string]int64 // their settings revision before this transaction
	// keyChecked: key rows whose stored fact this transaction found
	// backed (keyBackedBefore).
	keyChecked map[string]bool
	versions   map[string]bool // written kids
	// versionChecked: version rows this transaction locked and found
	// backed (LockVersion).
	versionChecked map[string]bool
	// read: version rows as the transaction first read them, before it
	// locked them (GetVersion, ListVersions).
	read map[string]store.KeyVersion
	// noBind: versions written whose backend reference no log could
	// confirm (finish does not bind them).
	noBind map[string]bool
	minted map[string]bool // kids inserted
	order  []string        // kids in write order
	audits []store.AuditEvent
	// absent: markers known absent once the transaction commits (a
	// minted kid's later states, its key's next version number).
	absent []Event
	events []Event
	// approvals filed (their facts are signed at finish), checked
	// (LockApproval found them backed), decided (their markers are
	// written at finish); ADR 0051.
	approvalsFiled   []string
	approvalsChecked map[string]bool
	approvalsDecided []string
	// API tokens created (their facts are signed at finish) and revoked
	// (their markers are written at finish); ADR 0053.
	tokensCreated []string
	tokensRevoked []string
}

func (t *anchoredTx) InsertToken(ctx context.Context, tk store.APIToken) error {
	if err := t.Tx.InsertToken(ctx, tk); err != nil {
		return err
	}
	t.tokensCreated = append(t.tokensCreated, tk.ID)
	return nil
}

func (t *anchoredTx) RevokeToken(ctx context.Context, id string, at time.Time) error {
	if err := t.Tx.RevokeToken(ctx, id, at); err != nil {
		return err
	}
	t.tokensRevoked = append(t.tokensRevoked, id)
	return nil
}

// anchorStore is the anchor_events this transaction sees, on its
// connection (the store's when the transaction cannot read them).
func (t *anchoredTx) anchorStore() store.AnchorStore {
	if in, ok := t.Tx.(store.AnchorStore); ok {
		return in
	}
	return t.a.as
}

func (t *anchoredTx) InsertApproval(ctx context.Context, ap store.Approval) error {
	if err := t.Tx.InsertApproval(ctx, ap); err != nil {
		return err
	}
	t.approvalsFiled = append(t.approvalsFiled, ap.ID)
	if t.approvalsChecked == nil {
		t.approvalsChecked = map[string]bool{}
	}
	t.approvalsChecked[ap.ID] = true
	return nil
}

// LockApproval refuses to hand out an approval this service did not file
// as stored, or one the log records as decided while the row says pending
// (ADR 0051): the caller carries out what a pending approval asks for once
// a second officer approves it, so a row inserted or edited in the
// database (a forged "revoke", "destroy" or "policy" request in another
// officer's name, or an approved request set back to pending) must stop
// there. Approvals filed before approval requests were anchored, where
// the ApprovalsMarker is not backed yet, are taken as stored. Errors:
// rotation.ErrHistoryNotBacked, rotation.ErrHistoryUnconfirmed.
func (t *anchoredTx) LockApproval(ctx context.Context, id string) (store.Approval, error) {
	ap, err := t.Tx.LockApproval(ctx, id)
	if err != nil || t.approvalsChecked[id] {
		return ap, err
	}
	r := t.anchorStore()
	anchored, err := t.a.approvalsAnchored(ctx, r)
	if err != nil {
		return store.Approval{}, fmt.Errorf("%w: whether approval requests are anchored: %w", rotation.ErrHistoryUnconfirmed, err)
	}
	if anchored {
		f, err := t.a.key.ApprovalFact(ap)
		if err != nil {
			return store.Approval{}, err
		}
		if err := t.backedBefore(ctx, f, "approval "+id); err != nil {
			return store.Approval{}, fmt.Errorf("%w (file the request again)", err)
		}
		if ap.Status == "pending" {
			m, err := t.a.key.ApprovalDecidedMarker(id)
			if err != nil {
				return store.Approval{}, err
			}
			decided, err := t.a.storedOrLogged(ctx, r, m, false)
			if err != nil && ap.Action == "revoke" {
				// Taking access away is never held up by a log outage
				// (ADR 0049): a revocation carried out twice revokes what
				// is revoked. Its marker was not in anchor_events.
				t.a.log.Warn("approving a revocation while no transparency log answers whether it was decided before; going on", "approval", id, "err", err)
				decided, err = false, nil
			}
			if err != nil {
				return store.Approval{}, fmt.Errorf("%w: whether approval %s was decided: %w", rotation.ErrHistoryUnconfirmed, id, err)
			}
			if decided {
				t.a.log.Error("refusing to decide an approval the transparency log records as decided (set back to pending in the database)", "approval", id)
				return store.Approval{}, fmt.Errorf("anchor: the transparency log records approval %s as decided, key history says pending (set back in the database): %w", id, rotation.ErrHistoryNotBacked)
			}
		}
	}
	if t.approvalsChecked == nil {
		t.approvalsChecked = map[string]bool{}
	}
	t.approvalsChecked[id] = true
	return ap, nil
}

func (t *anchoredTx) DecideApproval(ctx context.Context, ap store.Approval) error {
	if err := t.Tx.DecideApproval(ctx, ap); err != nil {
		return err
	}
	t.approvalsDecided = append(t.approvalsDecided, ap.ID)
	return nil
}

// LockKey checks, the first time the transaction locks key name, that the
// key row as stored is backed (backedBefore): the lifecycle code reads the
// key's policy (the two-person rule, rotation periods), issuer, algorithm
// and backend from the row it locks and acts on them, and a new version's
// fact inherits some of them, so a settings row edited in the database
// must stop the change, not steer it (an attack review, session 46: one
// officer destroyed material under a two-person rule switched off in the
// database).
func (t *anchoredTx) LockKey(ctx context.Context, name string) (store.Key, error) {
	k, err := t.Tx.LockKey(ctx, name)
	if err != nil {
		return k, err
	}
	if err := t.keyBackedBefore(ctx, k); err != nil {
		return store.Key{}, err
	}
	return k, nil
}

// keyBackedBefore is backedBefore for key k as stored, once per
// transaction, before the transaction writes it.
func (t *anchoredTx) keyBackedBefore(ctx context.Context, k store.Key) error {
	if t.keyChecked[k.Name] || t.keys[k.Name] {
		return nil
	}
	f, err := t.a.key.KeyFact(k)
	if err != nil {
		return err
	}
	if err := t.backedBefore(ctx, f, "key "+k.Name); err != nil {
		return err
	}
	// A backed fact of an older revision is a rolled-back row (ADR 0036):
	// the policy it carries (a two-person rule switched on since) must
	// not decide what one officer may do (an attack review, session 47).
	// The marker of the next revision is probed as reloads probe it
	// (cached while absent).
	next, err := t.a.key.SettingsMarker(k.Name, k.SettingsRev+1)
	if err != nil {
		return err
	}
	present, err := t.a.markerPresent(ctx, next, true)
	if err != nil {
		// Never probed, and no log answers: a replica started during an
		// outage. Its reloads withhold every version for the same reason;
		// it takes no change until a log answers (a replica running
		// before the outage has the answer cached and revokes through it).
		return fmt.Errorf("%w: key %s never had settings revision %d: %w", rotation.ErrHistoryUnconfirmed, k.Name, k.SettingsRev+1, err)
	}
	if present {
		t.a.log.Error("refusing to act on a key whose settings were rolled back in the database: the transparency log records a later settings revision", "key", k.Name, "settings_rev", k.SettingsRev+1)
		return fmt.Errorf("anchor: key %s as stored is not backed by the transparency log: the log records settings revision %d, key history holds %d (rolled back in the database): %w", k.Name, k.SettingsRev+1, k.SettingsRev, rotation.ErrHistoryNotBacked)
	}
	t.keyChecked[k.Name] = true
	return nil
}

func (t *anchoredTx) InsertKey(ctx context.Context, k store.Key) error {
	t.keys[k.Name] = true
	if _, ok := t.keyRev[k.Name]; !ok {
		t.keyRev[k.Name] = k.SettingsRev
	}
	return t.Tx.InsertKey(ctx, k)
}

// settingsChange notes the key's settings revision before its first
// change in this transaction: finish writes a marker for every revision
// after it.
func (t *anchoredTx) settingsChange(ctx context.Context, name string) error {
	if _, ok := t.keyRev[name]; ok {
		t.keys[name] = true
		return nil
	}
	k, err := t.Tx.LockKey(ctx, name) // held as checked until the commit
	if err != nil {
		return err
	}
	if err := t.keyBackedBefore(ctx, k); err != nil {
		return err
	}
	t.keys[name] = true
	t.keyRev[name] = k.SettingsRev
	return nil
}

// backedBefore refuses the transaction's first change to a key or version
// row whose fact as stored now (f) the transparency log does not back.
// finish signs every row a transaction wrote as it reads it back,
// columns the transaction did not write included (a version's public key,
// its activation, its compromise instant): without this check a row
// edited in the database, withheld from publication as not backed, would
// become a signed, backed fact at its next lifecycle change (a scheduled
// rotation, an officer's rotate or destroy; an attack review, session 46).
// Errors: rotation.ErrHistoryNotBacked when the fact is not backed,
// rotation.ErrHistoryUnconfirmed when it could not be checked.
func (t *anchoredTx) backedBefore(ctx context.Context, f Event, what string) error {
	r := t.anchorStore()
	ok, err := t.a.factBacked(ctx, r, f)
	if err != nil {
		return fmt.Errorf("%w: %s as stored: %w", rotation.ErrHistoryUnconfirmed, what, err)
	}
	if !ok {
		t.a.log.Error("refusing to change a key-history row the transparency log does not back (altered in the database): signing the change would back the alteration", "row", what)
		return fmt.Errorf("anchor: %s as stored is not backed by the transparency log (altered in the database); it is not changed: %w", what, rotation.ErrHistoryNotBacked)
	}
	return nil
}

// versionBackedBefore is backedBefore for version kid, at the
// transaction's first write to it (a version inserted in this transaction
// has nothing stored before). A write does not act on the backend
// reference (signing uses versions the reloads checked; a destroy calls
// LockVersion itself first): when no log answers whether the reference
// was bound, the write goes on — a revocation is never held up by a log
// outage (ADR 0049) — and finish does not bind it.
func (t *anchoredTx) versionBackedBefore(ctx context.Context, kid string) error {
	_, err := t.lockVersion(ctx, kid, true)
	return err
}

// LockVersion locks version kid's row (store.Tx.LockVersion) and, the
// first time the transaction reads it, checks that the row as stored is
// backed: its fact (backedBefore) and its backend reference (ADR 0050),
// and that it is the row the transaction read before it locked it.
// Whatever acts on a stored version — a destroy calls its backend with
// the backend reference before anything is written (an attack review,
// session 47: a refused destroy had already scheduled the deletion of
// another KMS key) — locks it here first, and a write checks here too.
// The lock holds the row as checked until the commit: on PostgreSQL at
// READ COMMITTED an unlocked check let a writer change the row between
// the check and the write, and finish then signed the change (same
// review). Errors: rotation.ErrHistoryNotBacked,
// rotation.ErrHistoryUnconfirmed, store.ErrNotFound.
func (t *anchoredTx) LockVersion(ctx context.Context, kid string) (store.KeyVersion, error) {
	return t.lockVersion(ctx, kid, false)
}

func (t *anchoredTx) lockVersion(ctx context.Context, kid string, write bool) (store.KeyVersion, error) {
	v, err := t.Tx.LockVersion(ctx, kid)
	if err != nil {
		return v, err
	}
	if !write && !t.minted[kid] {
		// What acts on the version beyond a write (a destroy calls its
		// backend) needs what a write let go unconfirmed during a log
		// outage: its backend reference (an attack review, session 47: a
		// write earlier in the same transaction let the destroy skip the
		// check).
		if t.noBind[kid] {
			if err := t.backendBound(ctx, v); err != nil {
				return store.KeyVersion{}, err
			}
			delete(t.noBind, kid)
		}
	}
	if t.versions[kid] || t.versionChecked[kid] {
		return v, nil
	}
	// The caller may act on (and write back) the copy it read before
	// this lock: the lifecycle code reads a key's versions unlocked after
	// locking the key. Every keysvc change to a version holds its key's
	// lock, so a row that changed in between was changed by someone
	// else, and the copy must not be written back (an attack review,
	// session 47: an activated_at edited and restored around the lock
	// was signed from the copy).
	if read, ok := t.read[kid]; ok && !sameVersion(read, v) {
		t.a.log.Error("refusing to change a key version that changed in the database while this change read it", "kid", kid)
		return store.KeyVersion{}, fmt.Errorf("anchor: version %s changed in the database while this change read it; it is not changed: %w", kid, rotation.ErrHistoryNotBacked)
	}
	f, err := t.a.key.VersionFact(v)
	if err != nil {
		return store.KeyVersion{}, fmt.Errorf("anchor: version %s as stored: %w: %w", kid, err, rotation.ErrHistoryNotBacked)
	}
	if err := t.backedBefore(ctx, f, "version "+kid); err != nil {
		return store.KeyVersion{}, err
	}
	// Its backend reference decides what a destroy destroys (ADR 0050): a
	// version pointed elsewhere in the database would have its material
	// "destroyed" in the log while the key it names lives on.
	if err := t.backendBound(ctx, v); err != nil {
		if write && errors.Is(err, rotation.ErrHistoryUnconfirmed) {
			t.a.log.Warn("writing a key version whose backend reference no transparency log could confirm as bound; it is not bound by this change", "kid", kid, "err", err)
			t.noBind[kid] = true
			t.versionChecked[kid] = true
			return v, nil
		}
		return store.KeyVersion{}, err
	}
	t.versionChecked[kid] = true
	return v, nil
}

// backendBound checks version v's backend reference as stored (ADR 0050).
// Errors: rotation.ErrHistoryNotBacked, rotation.ErrHistoryUnconfirmed.
func (t *anchoredTx) backendBound(ctx context.Context, v store.KeyVersion) error {
	r := t.anchorStore()
	bound, _, err := t.a.backendBacked(ctx, r, v, true)
	if err != nil {
		return fmt.Errorf("%w: version %s's backend reference as stored: %w", rotation.ErrHistoryUnconfirmed, v.KID, err)
	}
	if !bound {
		t.a.log.Error("refusing to act on a key version whose backend reference the transparency log does not back (altered in the database)", "kid", v.KID, "backend_ref", v.BackendRef)
		return fmt.Errorf("anchor: version %s as stored is not backed by the transparency log: %s; it is not changed: %w", v.KID, backendNotBacked, rotation.ErrHistoryNotBacked)
	}
	return nil
}

// GetVersion notes the row the transaction read (LockVersion compares).
func (t *anchoredTx) GetVersion(ctx context.Context, kid string) (store.KeyVersion, error) {
	v, err := t.Tx.GetVersion(ctx, kid)
	if err == nil {
		t.noteRead(v)
	}
	return v, err
}

// ListVersions notes the rows the transaction read (LockVersion
// compares), and refuses to hand out a key's versions while one of them
// is not backed by the log: the lifecycle code decides on all of them,
// not only on those it writes (an attack review, session 47: a retired
// version's published_at moved to 2030, never written again, made the
// next rotation retire the active version in 2030 — keyState.clamp
// follows the latest instant recorded). Such a key takes no change until
// the row is put back; every reload withholds the row and /readyz names
// it. Errors: rotation.ErrHistoryNotBacked, rotation.ErrHistoryUnconfirmed.
func (t *anchoredTx) ListVersions(ctx context.Context, keyName string) ([]store.KeyVersion, error) {
	vs, err := t.Tx.ListVersions(ctx, keyName)
	if err != nil {
		return vs, err
	}
	// Facts first (memory, then this transaction's anchor_events), then
	// every version's later-state markers at once (markersPresent): a
	// process that has not probed them yet waits for the slowest look-up,
	// not their sum, while it holds the key's lock (a review, session 47:
	// 78 look-ups one after another on a 41-version key).
	var markers []Event
	var owner []store.KeyVersion
	for _, v := range vs {
		if t.versions[v.KID] || t.versionChecked[v.KID] {
			continue
		}
		f, err := t.a.key.VersionFact(v)
		if err != nil {
			return nil, fmt.Errorf("anchor: version %s as stored: %w: %w", v.KID, err, rotation.ErrHistoryNotBacked)
		}
		if err := t.backedBefore(ctx, f, "version "+v.KID); err != nil {
			return nil, fmt.Errorf("%w; key %s takes no change until it is put back", err, keyName)
		}
		// A fact signed once is not enough: a row put back to an earlier
		// fact of the same version (a retired version made pending and
		// armed again) would be activated by the next change (an attack
		// review, session 47). Its later states' markers must be absent,
		// as every reload requires (probed as reloads probe them).
		for _, st := range absentStates(v) {
			m, err := t.a.key.StateMarker(v.KID, st)
			if err != nil {
				return nil, err
			}
			markers, owner = append(markers, m), append(owner, v)
		}
	}
	present, err := t.a.markersPresent(ctx, markers, true)
	if err != nil {
		return nil, fmt.Errorf("%w: key %s: the later states of its versions: %w", rotation.ErrHistoryUnconfirmed, keyName, err)
	}
	for i, p := range present {
		if p {
			v, st := owner[i], strings.TrimPrefix(markers[i].Subject, owner[i].KID+"#")
			t.a.log.Error("refusing to change a key one of whose versions was rolled back in the database: the transparency log records a later state", "kid", v.KID, "state", st)
			return nil, fmt.Errorf("anchor: version %s as stored is not backed by the transparency log: the log records it %s, key history says %s (rolled back in the database); key %s takes no change until it is put back: %w", v.KID, st, v.State, keyName, rotation.ErrHistoryNotBacked)
		}
	}
	for _, v := range vs {
		t.noteRead(v)
	}
	return vs, nil
}

// ListKeys refuses to hand out keys while one of them is not backed: the
// lifecycle code decides on them (CreateKey's issuer sharing; an attack
// review, session 47: an issuer moved in the database let a second key
// take it without share_issuer). Errors: rotation.ErrHistoryNotBacked,
// rotation.ErrHistoryUnconfirmed.
func (t *anchoredTx) ListKeys(ctx context.Context) ([]store.Key, error) {
	ks, err := t.Tx.ListKeys(ctx)
	if err != nil {
		return ks, err
	}
	for _, k := range ks {
		if t.keys[k.Name] {
			continue
		}
		if err := t.keyBackedBefore(ctx, k); err != nil {
			return nil, err
		}
	}
	return ks, nil
}

func (t *anchoredTx) noteRead(v store.KeyVersion) {
	if _, ok := t.read[v.KID]; !ok && !t.versions[v.KID] && !t.versionChecked[v.KID] {
		t.read[v.KID] = v
	}
}

// sameVersion reports whether a and b are the same row: every column.
func sameVersion(a, b store.KeyVersion) bool {
	eqt := func(x, y *time.Time) bool { return (x == nil) == (y == nil) && (x == nil || x.Equal(*y)) }
	return a.KID == b.KID && a.KeyName == b.KeyName && a.Algorithm == b.Algorithm && a.BackendRef == b.BackendRef &&
		bytes.Equal(a.SealedPrivateKey, b.SealedPrivateKey) && bytes.Equal(a.PublicJWK, b.PublicJWK) && a.State == b.State &&
		a.CreatedAt.Equal(b.CreatedAt) && eqt(a.PublishedAt, b.PublishedAt) && eqt(a.ActivatesAt, b.ActivatesAt) &&
		eqt(a.ArmedAt, b.ArmedAt) && eqt(a.ActivatedAt, b.ActivatedAt) && eqt(a.RetiredAt, b.RetiredAt) &&
		eqt(a.RevokedAt, b.RevokedAt) && eqt(a.CompromisedAt, b.CompromisedAt) && a.RevocationReason == b.RevocationReason &&
		eqt(a.MaterialDestroyedAt, b.MaterialDestroyedAt)
}

func (t *anchoredTx) UpdateKeyPolicy(ctx context.Context, name string, policy []byte) error {
	if err := t.settingsChange(ctx, name); err != nil {
		return err
	}
	return t.Tx.UpdateKeyPolicy(ctx, name, policy)
}

func (t *anchoredTx) UpdateKeyBackend(ctx context.Context, name, backend string) error {
	if err := t.settingsChange(ctx, name); err != nil {
		return err
	}
	return t.Tx.UpdateKeyBackend(ctx, name, backend)
}

func (t *anchoredTx) touch(kid string) {
	if !t.versions[kid] {
		t.versions[kid] = true
		t.order = append(t.order, kid)
	}
}

// InsertVersion refuses a kid the log records as minted (ErrKIDMinted, and
// store.ErrConflict for callers that test for a duplicate kid).
func (t *anchoredTx) InsertVersion(ctx context.Context, v store.KeyVersion) error {
	m, err := t.a.key.KIDMarker(v.KID)
	if err != nil {
		return err
	}
	present, err := t.a.markerPresent(ctx, m, false)
	if err != nil {
		return fmt.Errorf("%w: kid %s was never minted: %w", rotation.ErrHistoryUnconfirmed, v.KID, err)
	}
	if present {
		t.a.log.Error("refusing to mint a kid the transparency log records as minted already (key history lost the version: deleted, or restored from an older backup)", "kid", v.KID, "key", v.KeyName)
		return fmt.Errorf("%w: %s (%w)", ErrKIDMinted, v.KID, rotation.ErrHistoryNotBacked)
	}
	t.minted[v.KID] = true
	t.touch(v.KID)
	return t.Tx.InsertVersion(ctx, v)
}

func (t *anchoredTx) UpdateVersion(ctx context.Context, v store.KeyVersion) error {
	if err := t.versionBackedBefore(ctx, v.KID); err != nil {
		return err
	}
	t.touch(v.KID)
	return t.Tx.UpdateVersion(ctx, v)
}

func (t *anchoredTx) DestroyVersionMaterial(ctx context.Context, kid string, at time.Time) error {
	if err := t.versionBackedBefore(ctx, kid); err != nil {
		return err
	}
	t.touch(kid)
	return t.Tx.DestroyVersionMaterial(ctx, kid, at)
}

func (t *anchoredTx) AppendAudit(ctx context.Context, ev store.AuditEvent) (store.AuditEvent, error) {
	out, err := t.Tx.AppendAudit(ctx, ev)
	if err == nil {
		t.audits = append(t.audits, out)
	}
	return out, err
}

// KIDsWithPrefix adds the kids the log records as minted after the highest
// one stored (NN+1, NN+2, … for "<issuer>-YYYY-MM-DD-"), so that the next
// kid is one never minted.
func (t *anchoredTx) KIDsWithPrefix(ctx context.Context, prefix string) ([]string, error) {
	kids, err := t.Tx.KIDsWithPrefix(ctx, prefix)
	if err != nil {
		return nil, err
	}
	max := 0
	for _, kid := range kids {
		if n, err := strconv.Atoi(strings.TrimPrefix(kid, prefix)); err == nil && n > max {
			max = n
		}
	}
	for {
		kid := fmt.Sprintf("%s%02d", prefix, max+1)
		m, err := t.a.key.KIDMarker(kid)
		if err != nil {
			return nil, err
		}
		present, err := t.a.markerPresent(ctx, m, false)
		if err != nil {
			return nil, fmt.Errorf("%w: which kids were minted: %w", rotation.ErrHistoryUnconfirmed, err)
		}
		if !present {
			return kids, nil
		}
		t.a.log.Warn("the transparency log records a kid that key history lacks; it is never minted again", "kid", kid)
		kids = append(kids, kid)
		max++
	}
}

// finish reads back what the transaction wrote and stores its events.
func (t *anchoredTx) finish(ctx context.Context) error {
	var evs []Event
	for name := range t.keys {
		k, err := t.Tx.GetKey(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		ev, err := t.a.key.KeyFact(k)
		if err != nil {
			return err
		}
		evs = append(evs, ev)
		from, ok := t.keyRev[name]
		if !ok {
			from = k.SettingsRev
		}
		for r := from + 1; r <= k.SettingsRev; r++ {
			m, err := t.a.key.SettingsMarker(name, r)
			if err != nil {
				return err
			}
			present, err := t.a.markerPresent(ctx, m, false)
			if err != nil {
				return fmt.Errorf("%w: key %s never had settings revision %d: %w", rotation.ErrHistoryUnconfirmed, name, r, err)
			}
			if present {
				t.a.log.Error("refusing to change key settings: the transparency log records a later settings revision than key history holds (altered, or restored from an older backup)", "key", name, "settings_rev", r)
				return fmt.Errorf("anchor: key %s: the transparency log records settings revision %d that key history lacks: %w", name, r, rotation.ErrHistoryNotBacked)
			}
			evs = append(evs, m)
		}
	}
	for _, kid := range t.order {
		v, err := t.Tx.GetVersion(ctx, kid)
		if err != nil {
			return err
		}
		n := 0
		if t.minted[kid] {
			vs, err := t.Tx.ListVersions(ctx, v.KeyName)
			if err != nil {
				return err
			}
			n = len(vs)
			om, err := t.a.key.OrdinalMarker(v.KeyName, n)
			if err != nil {
				return err
			}
			present, err := t.a.markerPresent(ctx, om, false)
			if err != nil {
				return fmt.Errorf("%w: key %s never had a version %d: %w", rotation.ErrHistoryUnconfirmed, v.KeyName, n, err)
			}
			if present {
				t.a.log.Error("refusing to mint: the transparency log records more versions of the key than key history holds (deleted, or restored from an older backup)", "key", v.KeyName, "version_number", n)
				return fmt.Errorf("anchor: key %s: the transparency log records a version number %d that key history lacks: %w", v.KeyName, n, rotation.ErrHistoryNotBacked)
			}
		}
		more, err := t.a.versionEvents(v, n, t.minted[kid])
		if err != nil {
			return err
		}
		if t.minted[kid] {
			// A kid the log never saw minted (InsertVersion checked) has
			// no later states, and its key no next version: known absent
			// without asking a log, so that a change during a log outage
			// right after a mint needs no look-up (a review, session 47).
			for _, st := range absentStates(v) {
				m, err := t.a.key.StateMarker(kid, st)
				if err != nil {
					return err
				}
				t.absent = append(t.absent, m)
			}
			om, err := t.a.key.OrdinalMarker(v.KeyName, n+1)
			if err != nil {
				return err
			}
			t.absent = append(t.absent, om)
		}
		for _, ev := range more {
			if t.noBind[kid] && (ev.Kind == FactBackend || ev.Kind == MarkerBackend) {
				continue
			}
			evs = append(evs, ev)
		}
	}
	for _, id := range t.approvalsFiled {
		ap, err := t.Tx.LockApproval(ctx, id) // as stored
		if err != nil {
			return err
		}
		f, err := t.a.key.ApprovalFact(ap)
		if err != nil {
			return err
		}
		evs = append(evs, f)
	}
	for _, id := range t.approvalsDecided {
		m, err := t.a.key.ApprovalDecidedMarker(id)
		if err != nil {
			return err
		}
		evs = append(evs, m)
	}
	if len(t.tokensCreated) > 0 {
		tokens, err := t.Tx.ListTokens(ctx) // as stored
		if err != nil {
			return err
		}
		byID := make(map[string]store.APIToken, len(tokens))
		for _, tk := range tokens {
			byID[tk.ID] = tk
		}
		for _, id := range t.tokensCreated {
			tk, ok := byID[id]
			if !ok {
				return fmt.Errorf("anchor: token %s: %w", id, store.ErrNotFound)
			}
			f, err := t.a.key.TokenFact(tk)
			if err != nil {
				return err
			}
			evs = append(evs, f)
			// Its revocation marker is not noted absent: a token id
			// registered again (an old secret) may be revoked in the log
			// (an attack review, session 48), and the first check asks.
			if tk.RevokedAt != nil {
				m, err := t.a.key.TokenRevokedMarker(id)
				if err != nil {
					return err
				}
				evs = append(evs, m)
			}
		}
	}
	for _, id := range t.tokensRevoked {
		m, err := t.a.key.TokenRevokedMarker(id)
		if err != nil {
			return err
		}
		evs = append(evs, m)
	}
	for _, r := range t.audits {
		more, err := t.a.auditEvents(r)
		if err != nil {
			return err
		}
		evs = append(evs, more...)
	}
	if len(evs) == 0 {
		return nil
	}
	w, ok := t.Tx.(store.AnchorWriter)
	if !ok {
		return errors.New("anchor: this key-history store cannot keep anchoring events")
	}
	if err := w.InsertAnchorEvents(ctx, toStore(evs, store.Now())); err != nil {
		return err
	}
	t.events = evs
	return nil
}
