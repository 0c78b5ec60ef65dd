package anchor

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlogclient"
)

// legacyEnv is key history as a release before ADR 0050 anchored it: a
// SQLite store with key00 and two versions (retired, active) on PKCS#11,
// and a log (logged) holding every fact and marker of it but the backend
// references (and approvals). newAnchor starts a process on it.
type legacyEnv struct {
	st        store.Store
	key       *EventKey
	logged    *memRecorder
	k         store.Key
	v1, v2    store.KeyVersion
	newAnchor func() *Anchor
	add       func(Event, error)
	old       *[]string
}

func newLegacyEnv(t *testing.T) *legacyEnv {
	ctx := context.Background()
	c := store.Config{SQLitePath: filepath.Join(t.TempDir(), "keysvc.db")}
	st, key := storeAndKey(t, c)
	logged := &memRecorder{} // the log: what was recorded is found
	newAnchor := func() *Anchor {
		a, err := New(Config{Key: key, Logs: []tlogclient.Log{&emptyLog{}}, Store: st, Recorder: logged,
			Scanned: logged.scanned})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}

	// Key history as an earlier release anchored it: every fact and
	// marker but the backend references.
	h := history(1, 2)
	k := h.Keys[0]
	for i := range h.Versions[k.Name] {
		h.Versions[k.Name][i].BackendRef = "pkcs11:token=keysvc;object=" + h.Versions[k.Name][i].KID
	}
	v1, v2 := h.Versions[k.Name][0], h.Versions[k.Name][1]
	if err := st.InTx(ctx, func(tx store.Tx) error {
		if err := tx.InsertKey(ctx, k); err != nil {
			return err
		}
		for _, v := range []store.KeyVersion{v1, v2} {
			if err := tx.InsertVersion(ctx, v); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var old []string
	add := func(ev Event, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, ev.JWS)
	}
	add(key.KeyFact(k))
	add(key.BootstrapMarker())
	for i, v := range []store.KeyVersion{v1, v2} {
		add(key.VersionFact(v))
		add(key.KIDMarker(v.KID))
		add(key.OrdinalMarker(k.Name, i+1))
		for _, s := range reachedStates(v) {
			add(key.StateMarker(v.KID, s))
		}
	}
	if err := logged.Record(ctx, tlogclient.ArtifactStatusEvent, old...); err != nil {
		t.Fatal(err)
	}

	return &legacyEnv{st: st, key: key, logged: logged, k: k, v1: v1, v2: v2, newAnchor: newAnchor, add: add, old: &old}
}

// TestBackendReferenceBound: a version's backend reference decides what
// a destroy destroys and what signs. Before ADR 0050 it was in no fact,
// so a database writer could point a version elsewhere (an HSM version at
// "software:…") and have its destruction backed by the log while the
// key it held lived on. Now the reference of every version is bound:
//   - versions minted before (a log holding the old release's events
//     only) are taken as stored and bound at the next start, on trust;
//   - after that, a reference altered in the database is withheld by
//     every check, refused by every change (409 key_history_not_backed),
//     and not bound again by a restart;
//   - a version an older replica mints later is bound by the next check
//     loop, not withheld.
func TestBackendReferenceBound(t *testing.T) {
	ctx := context.Background()
	e := newLegacyEnv(t)
	st, key, logged, k, v1, v2, newAnchor := e.st, e.key, e.logged, e.k, e.v1, e.v2, e.newAnchor
	read := func() store.History {
		t.Helper()
		h, err := st.ReadHistory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	bound := func(v store.KeyVersion) bool {
		f, _ := key.BackendFact(v)
		m, _ := key.BackendMarker(v.KID)
		return logged.has(f.JWS) && logged.has(m.JWS)
	}

	a := newAnchor()
	if v := a.CheckAll(ctx, read()); len(v.Keys)+len(v.Versions) != 0 {
		t.Fatalf("history anchored before references were: %+v, want every version backed", v)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !bound(v1) || !bound(v2) {
		t.Fatal("the first start did not bind the references of the versions minted before")
	}
	stored, err := a.as.ListAnchorEvents(ctx)
	if err != nil || len(stored) != 6 {
		t.Fatalf("anchor_events after binding: %d rows (%v), want the 2 facts, 2 markers, the approvals marker and the tokens marker", len(stored), err)
	}

	// Pointed elsewhere in the database: a restart does not bind it
	// again, every check withholds it, every change is refused.
	if err := store.ExecRawForTest(ctx, st, `UPDATE key_versions SET backend_ref = 'software:kid=`+v1.KID+`' WHERE kid = '`+v1.KID+`'`); err != nil {
		t.Fatal(err)
	}
	b := newAnchor()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	want := "version " + v1.KID + ": " + backendNotBacked
	if v := b.CheckAll(ctx, read()); len(v.Keys) != 0 || len(v.Versions) != 1 || v.Versions[v1.KID] != want {
		t.Fatalf("a reference altered after it was bound: %+v, want %q", v, want)
	}
	destroy := func() error {
		return b.Wrap(st).InTx(ctx, func(tx store.Tx) error { return tx.DestroyVersionMaterial(ctx, v1.KID, store.Now()) })
	}
	err = destroy()
	if !errors.Is(err, rotation.ErrHistoryNotBacked) || !strings.Contains(err.Error(), backendNotBacked) {
		t.Fatalf("destroying a version pointed elsewhere: %v, want ErrHistoryNotBacked", err)
	}
	if got, err := st.GetVersion(ctx, v1.KID); err != nil || got.MaterialDestroyedAt != nil {
		t.Fatalf("after the refused destroy: %+v, %v", got, err)
	}
	// Its fact row deleted from anchor_events too: still not taken as
	// never bound (the log has the marker).
	if err := store.ExecRawForTest(ctx, st, `DELETE FROM anchor_events WHERE kind = 'version_backend'`); err != nil && !errors.Is(err, store.ErrAuditAppendOnly) {
		t.Fatal(err)
	}
	c2 := newAnchor()
	if v := c2.CheckAll(ctx, read()); v.Versions[v1.KID] != want {
		t.Fatalf("with the fact rows deleted: %+v", v)
	}

	// Put back: backed, and the destroy goes through.
	if err := store.ExecRawForTest(ctx, st, `UPDATE key_versions SET backend_ref = '`+v1.BackendRef+`' WHERE kid = '`+v1.KID+`'`); err != nil {
		t.Fatal(err)
	}
	if v := b.CheckAll(ctx, read()); len(v.Keys)+len(v.Versions) != 0 {
		t.Fatalf("put back: %+v", v)
	}
	if err := destroy(); err != nil {
		t.Fatalf("destroying the version put back: %v", err)
	}

	// A version an older replica mints now (no reference bound): backed
	// as stored, and bound by the check loop's next pass.
	v3 := store.KeyVersion{KID: "key00.example-2026-12-01-03", KeyName: k.Name, Algorithm: "EdDSA", PublicJWK: v2.PublicJWK,
		State: store.StatePending, CreatedAt: v2.CreatedAt, BackendRef: "pkcs11:token=keysvc;object=three"}
	if err := st.InTx(ctx, func(tx store.Tx) error { return tx.InsertVersion(ctx, v3) }); err != nil {
		t.Fatal(err)
	}
	*e.old = (*e.old)[:0]
	e.add(key.VersionFact(v3))
	e.add(key.KIDMarker(v3.KID))
	e.add(key.OrdinalMarker(k.Name, 3))
	if err := logged.Record(ctx, tlogclient.ArtifactStatusEvent, *e.old...); err != nil {
		t.Fatal(err)
	}
	if v := b.CheckAll(ctx, read()); v.Versions[v3.KID] != "" || !b.unbound[v3.KID] {
		t.Fatalf("a version minted by an older replica: %+v, unbound %v", v, b.unbound)
	}
	if err := b.bindBackends(ctx); err != nil || !bound(v3) || len(b.unbound) != 0 {
		t.Fatalf("binding it: %v, bound %v, unbound %v", err, bound(v3), b.unbound)
	}
}

// TestApprovalsAnchored: a pending approval is carried out, in its
// requester's name, once a second officer approves it (ADR 0051). Before
// approval requests were anchored, a database writer could insert one
// "requested by" an officer, or set a decided one back to pending.
//   - the first start of this release anchors the approvals pending then,
//     as stored, and the ApprovalsMarker;
//   - from then on an approval inserted in the database, or one whose
//     request was edited, is refused when locked to be decided, also by
//     a process that restarted;
//   - one the log records as decided is refused while the row says
//     pending.
func TestApprovalsAnchored(t *testing.T) {
	ctx := context.Background()
	e := newLegacyEnv(t)
	now := store.Now()
	insert := func(id, by string) store.Approval {
		t.Helper()
		ap := store.Approval{ID: id, KeyName: e.k.Name, Action: "revoke", KID: e.v1.KID, Params: []byte(`{"reason":"compromised"}`),
			RequestedBy: "principal:" + by, RequestedByName: by, RequestedAt: now, ExpiresAt: now.Add(time.Hour), Status: "pending"}
		if err := e.st.InTx(ctx, func(tx store.Tx) error { return tx.InsertApproval(ctx, ap) }); err != nil {
			t.Fatal(err)
		}
		return ap
	}
	lock := func(a *Anchor, id string) error {
		return a.Wrap(e.st).InTx(ctx, func(tx store.Tx) error {
			_, err := tx.LockApproval(ctx, id)
			return err
		})
	}
	filed := insert("0000000000000001", "alice") // filed by the release before

	a := e.newAnchor()
	if err := lock(a, filed.ID); err != nil {
		t.Fatalf("an approval filed before approvals were anchored, before the first start: %v", err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	f, _ := e.key.ApprovalFact(filed)
	m, _ := e.key.ApprovalsMarker()
	if !e.logged.has(f.JWS) || !e.logged.has(m.JWS) {
		t.Fatal("the first start did not anchor the pending approval and the approvals marker")
	}
	if err := lock(a, filed.ID); err != nil {
		t.Fatalf("the approval pending at the first start: %v", err)
	}

	forged := insert("0000000000000002", "bob")
	for _, b := range []*Anchor{a, e.newAnchor()} {
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		err := lock(b, forged.ID)
		if !errors.Is(err, rotation.ErrHistoryNotBacked) || !strings.Contains(err.Error(), "approval 0000000000000002 as stored is not backed") {
			t.Fatalf("an approval inserted in the database: %v, want ErrHistoryNotBacked", err)
		}
	}
	if e.logged.has(func() string { f, _ := e.key.ApprovalFact(forged); return f.JWS }()) {
		t.Fatal("a restart anchored the inserted approval")
	}
	if err := store.ExecRawForTest(ctx, e.st, `UPDATE approvals SET requested_by = 'principal:carol' WHERE id = '`+filed.ID+`'`); err != nil {
		t.Fatal(err)
	}
	if err := lock(e.newAnchor(), filed.ID); !errors.Is(err, rotation.ErrHistoryNotBacked) {
		t.Fatalf("an approval whose requester was edited: %v, want ErrHistoryNotBacked", err)
	}
	if err := store.ExecRawForTest(ctx, e.st, `UPDATE approvals SET requested_by = 'principal:alice' WHERE id = '`+filed.ID+`'`); err != nil {
		t.Fatal(err)
	}

	// Decided through the anchored store: its marker is written; set
	// back to pending, it is refused.
	if err := a.Wrap(e.st).InTx(ctx, func(tx store.Tx) error {
		ap, err := tx.LockApproval(ctx, filed.ID)
		if err != nil {
			return err
		}
		ap.Status, ap.DecidedBy, ap.DecidedAt = "approved", "principal:bob", &now
		return tx.DecideApproval(ctx, ap)
	}); err != nil {
		t.Fatal(err)
	}
	if d, _ := e.key.ApprovalDecidedMarker(filed.ID); !e.logged.has(d.JWS) {
		t.Fatal("deciding an approval did not record its marker")
	}
	if err := store.ExecRawForTest(ctx, e.st, `UPDATE approvals SET status = 'pending' WHERE id = '`+filed.ID+`'`); err != nil {
		t.Fatal(err)
	}
	err := lock(e.newAnchor(), filed.ID)
	if !errors.Is(err, rotation.ErrHistoryNotBacked) || !strings.Contains(err.Error(), "records approval 0000000000000001 as decided") {
		t.Fatalf("a decided approval set back to pending: %v, want ErrHistoryNotBacked", err)
	}
}

// droppingRecorder takes records and loses them (an outbox whose rows a
// database writer deleted) until keep is set.
type droppingRecorder struct {
	log  *memRecorder
	keep bool
	n    int
}

func (r *droppingRecorder) Record(ctx context.Context, typ string, artifacts ...string) error {
	r.n++
	if !r.keep {
		return nil
	}
	return r.log.Record(ctx, typ, artifacts...)
}

// TestOwedEventsRecordedAgain: the events of a change are owed to the
// log from memory until a log proves them (ADR 0052). A revocation made
// while its outbox rows (and anchor_events) are deleted before delivery
// is recorded again by the process that made it, at doubling intervals,
// and settled once the log has it; Owed reports it meanwhile.
func TestOwedEventsRecordedAgain(t *testing.T) {
	ctx := context.Background()
	e := newLegacyEnv(t)
	a := e.newAnchor()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	a.settleOwed(ctx) // what Start bound, proved in the log
	drop := &droppingRecorder{log: e.logged}
	a.rec = drop
	clock := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	a.now = func() time.Time { return clock }
	if n, _ := a.Owed(); n != 0 {
		t.Fatalf("owed after start, once the log was asked: %d", n)
	}
	if err := a.Wrap(e.st).InTx(ctx, func(tx store.Tx) error {
		v, err := tx.GetVersion(ctx, e.v1.KID)
		if err != nil {
			return err
		}
		v.State, v.RevokedAt, v.CompromisedAt = store.StateRevoked, &clock, &clock
		return tx.UpdateVersion(ctx, v)
	}); err != nil {
		t.Fatal(err)
	}
	revoked, err := e.key.StateMarker(e.v1.KID, "revoked")
	if err != nil {
		t.Fatal(err)
	}
	n, oldest := a.Owed()
	if n != 4 || !oldest.Equal(clock) || e.logged.has(revoked.JWS) || drop.n != 1 {
		t.Fatalf("after the revocation: %d owed since %v, recorded %d times; want the fact, its backend fact and marker, and the revoked marker, owed since %v", n, oldest, drop.n, clock)
	}
	a.settleOwed(ctx) // not yet time to record again
	if n, _ := a.Owed(); drop.n != 1 || n != 2 {
		t.Fatalf("before a minute: recorded %d times, %d owed; want 1, and the fact and revoked marker owed (the backend's were logged at start)", drop.n, n)
	}
	clock = clock.Add(time.Minute)
	a.settleOwed(ctx) // recorded again, lost again
	clock = clock.Add(time.Minute)
	a.settleOwed(ctx) // next try at +3 min
	if drop.n != 2 {
		t.Fatalf("records after 2 minutes: %d, want 2", drop.n)
	}
	drop.keep = true
	clock = clock.Add(time.Minute)
	a.settleOwed(ctx) // recorded, kept
	if drop.n != 3 || !e.logged.has(revoked.JWS) {
		t.Fatalf("after 3 minutes: %d records, revoked marker logged %v", drop.n, e.logged.has(revoked.JWS))
	}
	if n, _ := a.Owed(); n != 2 {
		t.Fatalf("owed before the log was asked again: %d", n)
	}
	a.settleOwed(ctx)
	if n, _ := a.Owed(); n != 0 || drop.n != 3 {
		t.Fatalf("owed once the log has them: %d (%d records)", n, drop.n)
	}
}
