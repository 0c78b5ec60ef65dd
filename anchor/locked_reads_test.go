package anchor

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/software"
	"github.com/keysvc/keysvc/internal/pgtest"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlogclient"
)

// lifecycleEnv: a bootstrapped Anchor over st and a rotation.Manager
// (in-process mode, software backend) on the anchored store, as serve runs
// them. The tests below came from an attack review (session 47); each
// failed before its fix.
type lifecycleEnv struct {
	st     store.Store
	key    *EventKey
	logged *memRecorder
	a      *Anchor
	m      *rotation.Manager
}

func newLifecycleEnv(t *testing.T, c store.Config) *lifecycleEnv {
	t.Helper()
	ctx := context.Background()
	st, key := storeAndKey(t, c)
	logged := &memRecorder{}
	a, err := New(Config{Key: key, Logs: []tlogclient.Log{&emptyLog{}}, Store: st, Recorder: logged,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Scanned: logged.scanned})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := software.New([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	m := rotation.New(rotation.Config{Store: a.Wrap(st), Backends: []backends.Backend{sb}, History: a,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), JWKSMaxAge: -1})
	if err := m.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	return &lifecycleEnv{st: st, key: key, logged: logged, a: a, m: m}
}

// restart is another replica on e's store: a new Anchor reading log l
// (a start, its reload done), and a Manager on it with the software
// backend b (nil: a new one).
func (e *lifecycleEnv) restart(t *testing.T, l tlogclient.Log, b backends.Backend) (*Anchor, *rotation.Manager) {
	t.Helper()
	a, err := New(Config{Key: e.key, Logs: []tlogclient.Log{l}, Store: e.st, Recorder: e.logged,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatalf("a start: %v", err)
	}
	if b == nil {
		if b, err = software.New([]byte("0123456789abcdef0123456789abcdef")); err != nil {
			t.Fatal(err)
		}
	}
	m := rotation.New(rotation.Config{Store: a.Wrap(e.st), Backends: []backends.Backend{b}, History: a,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), JWKSMaxAge: -1})
	_ = m.Reload(context.Background())
	return a, m
}

// newVilla is a lifecycleEnv on SQLite with key villa rotated once, and
// villa's retired first version.
func newVilla(t *testing.T) (*lifecycleEnv, store.KeyVersion) {
	t.Helper()
	ctx := context.Background()
	e := newLifecycleEnv(t, store.Config{SQLitePath: filepath.Join(t.TempDir(), "keysvc.db")})
	if _, _, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "villa", Issuer: "villa.example"}, alice); err != nil {
		t.Fatal(err)
	}
	_, retired, err := e.m.Rotate(ctx, "villa", alice)
	if err != nil {
		t.Fatal(err)
	}
	return e, retired
}

var (
	alice = rotation.Actor{Name: "alice", ID: rotation.PrincipalID("alice"), Reason: "test"}
	bob   = rotation.Actor{Name: "bob", ID: rotation.PrincipalID("bob"), Reason: "test"}
)

// TestLockKeyRefusesRolledBackSettings: anchoredTx.LockKey (and
// settingsChange) check that the key row as stored has a backed fact,
// but any fact ever backed passes: it does not check that settings
// revision n+1 is absent, as Check does (ADR 0036). A database writer
// rolls the key row back to an older, once-anchored revision — the
// policy before the two-person rule was switched on, settings_rev 0 —
// and one officer alone destroys a version's material: the destroy does
// not write the key row, so finish's settings-marker check never runs.
// Serve's own check flags the key as rolled back at the same time.
func TestLockKeyRefusesRolledBackSettings(t *testing.T) {
	ctx := context.Background()
	e, retired := newVilla(t)
	before, err := e.st.GetKey(ctx, "villa") // revision 0: no two-person rule; anchored
	if err != nil {
		t.Fatal(err)
	}
	if ap, err := e.m.SetPolicy(ctx, "villa", rotation.Policy{TwoPersonRule: true}, alice); err != nil || ap != nil {
		t.Fatalf("two-person rule on: %v %v", ap, err)
	}
	// The writer puts the key row back to revision 0 (an anchored fact).
	if err := store.ExecRawForTest(ctx, e.st, `UPDATE keys SET policy = ?, settings_rev = ? WHERE name = ?`,
		string(before.Policy), before.SettingsRev, "villa"); err != nil {
		t.Fatal(err)
	}
	h, err := e.st.ReadHistory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v := e.a.CheckAll(ctx, h); v.Keys["villa"] == "" {
		t.Fatalf("the check does not see the rollback: %+v", v)
	}
	ap, d, err := e.m.RequestDestroy(ctx, retired.KID, "one officer", backends.DestroyOptions{}, alice)
	if !errors.Is(err, rotation.ErrHistoryNotBacked) {
		t.Errorf("one officer's destroy under a policy rolled back in the database: approval=%v destroyed=%v err=%v; want ErrHistoryNotBacked", ap, d != nil, err)
	}
	if got, _ := e.st.GetVersion(ctx, retired.KID); got.MaterialDestroyedAt != nil {
		t.Errorf("%s's material destroyed by one officer although the log records the two-person rule on (settings revision %d)", retired.KID, before.SettingsRev+1)
	}
}

// pgLifecycleEnv opens a fresh PostgreSQL database and a writer connection.
func pgLifecycleEnv(t *testing.T) (*lifecycleEnv, string) {
	url := pgtest.URL(t)
	return newLifecycleEnv(t, store.Config{PostgresURL: url}), url
}

// holdRestored has a writer commit edit, then — in a transaction that
// holds the row lock — undo it (restore), and commit that only once
// keysvc waits on the lock: keysvc's unlocked read saw the edit, its
// LockVersion/LockApproval sees the restored, backed row.
func holdRestored(t *testing.T, url, table string, edit, restore func(pgx.Tx) error, keysvc func() error) error {
	t.Helper()
	ctx := context.Background()
	w, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	tx, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := edit(tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err = w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := restore(tx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- keysvc() }()
	mon, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close(ctx)
	deadline := time.Now().Add(15 * time.Second)
	for {
		var n int
		if err := mon.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%`+table+`%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case err := <-done:
			tx.Rollback(ctx)
			return err
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("keysvc never waited on the writer's lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return <-done
}

// TestUnlockedVersionCopyWrittenBack (PostgreSQL): UpdateVersion locks and
// checks the row as stored now (LockVersion), then writes the caller's
// copy — read by readState's unlocked ListVersions before the lock —
// whose instants it never checked. A writer commits an edit (the active
// version's activated_at a year earlier), then holds the row while
// putting it back: keysvc's rotation reads the edit, LockVersion waits,
// reads the restored (backed) row and passes, and UpdateVersion writes
// the edited activated_at with the retirement; finish signs it. The log
// now backs a vrp_not_before the writer chose.
func TestUnlockedVersionCopyWrittenBack(t *testing.T) {
	ctx := context.Background()
	e, url := pgLifecycleEnv(t)
	_, v1, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "villa", Issuer: "villa.example"}, alice)
	if err != nil {
		t.Fatal(err)
	}
	orig, err := e.st.GetVersion(ctx, v1.KID)
	if err != nil {
		t.Fatal(err)
	}
	forged := orig.ActivatedAt.Add(-365 * 24 * time.Hour)
	err = holdRestored(t, url, "key_versions",
		func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE key_versions SET activated_at = $1, published_at = $1 WHERE kid = $2`, forged, v1.KID)
			return err
		},
		func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE key_versions SET activated_at = $1, published_at = $2 WHERE kid = $3`, *orig.ActivatedAt, orig.PublishedAt, v1.KID)
			return err
		},
		func() error { _, _, err := e.m.Rotate(ctx, "villa", alice); return err })
	if !errors.Is(err, rotation.ErrHistoryNotBacked) {
		t.Errorf("a rotation whose read of %s was edited and restored around its lock: %v, want ErrHistoryNotBacked", v1.KID, err)
	}
	got, err := e.st.GetVersion(ctx, v1.KID)
	if err != nil {
		t.Fatal(err)
	}
	// (Refused at its read, since ListVersions checks every version it
	// hands out; the writer's restore then never ran.)
	if got.State != store.StateActive {
		t.Errorf("%s after the refused rotation: %s", v1.KID, got.State)
	}
	forgedRow := got
	forgedRow.ActivatedAt = &forged
	for _, st := range []store.KeyState{store.StateActive, store.StateRetired} {
		forgedRow.State = st
		if f, _ := e.key.VersionFact(forgedRow); e.logged.has(f.JWS) {
			t.Errorf("keysvc logged %s (%s) with the writer's activated_at %s", v1.KID, st, forged)
		}
	}
}

// TestApproveKeyNameFromUnlockedRead (PostgreSQL): Approve finds the
// approval's key with an unlocked ListApprovals, runs the transition on
// that key (readState locks and checks *that* key), then LockApproval
// locks and checks the approval — but never compares the locked row's
// key_name with the key it acted on. A writer commits key_name = "other"
// on alice's pending policy request for "villa", then holds the row while
// putting it back: bob's approval checks the restored (backed) request and
// applies its policy — the two-person rule off — to "other", a key no one
// asked to change. The log backs the change.
func TestApproveKeyNameFromUnlockedRead(t *testing.T) {
	ctx := context.Background()
	e, url := pgLifecycleEnv(t)
	for _, n := range []string{"villa", "other"} {
		if _, _, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: n, Issuer: n + ".example", Policy: rotation.Policy{TwoPersonRule: true}}, alice); err != nil {
			t.Fatal(err)
		}
	}
	ap, err := e.m.SetPolicy(ctx, "villa", rotation.Policy{}, alice)
	if err != nil || ap == nil {
		t.Fatalf("filing the policy request: %v %v", ap, err)
	}
	err = holdRestored(t, url, "approvals",
		func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE approvals SET key_name = 'other' WHERE id = $1`, ap.ID)
			return err
		},
		func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE approvals SET key_name = 'villa' WHERE id = $1`, ap.ID)
			return err
		},
		func() error { _, err := e.m.Approve(ctx, ap.ID, bob); return err })
	if !errors.Is(err, rotation.ErrInvalidTransition) || !strings.Contains(err.Error(), "changed while it was being approved") {
		t.Errorf("approving a request whose key was edited and restored around the lock: %v, want ErrInvalidTransition", err)
	}
	for _, n := range []string{"villa", "other"} {
		k, err := e.st.GetKey(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		var p rotation.Policy
		if err := json.Unmarshal(k.Policy, &p); err != nil {
			t.Fatal(err)
		}
		if !p.TwoPersonRule {
			t.Errorf("key %s lost its two-person rule", n)
		}
	}
}

// TestUnboundVersionDuringLogOutage: a version an older-release replica
// minted (a rolling upgrade: its version fact and markers stored in
// anchor_events, no backend reference bound) has no backed BackendFact,
// so LockVersion (backendBacked) must ask the log whether its
// backend_bound marker exists. With the log down that is
// ErrHistoryUnconfirmed: revoking it — which ADR 0049 says a log outage
// never holds up — is refused, and a restart during the outage fails
// (Start → bindBackends), although everything else needs no log.
func TestUnboundVersionDuringLogOutage(t *testing.T) {
	ctx := context.Background()
	e := newLegacyEnv(t)
	a := e.newAnchor()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// An older replica mints v3 (pending), anchoring it as it did: fact,
	// kid and ordinal markers, state marker; no backend reference.
	v3 := e.v2
	v3.KID = "key00.example-2026-12-01-03"
	at := e.v2.CreatedAt.Add(time.Hour)
	v3.State, v3.CreatedAt, v3.ActivatedAt, v3.RetiredAt, v3.PublishedAt, v3.ActivatesAt = store.StatePending, at, nil, nil, &at, &at
	v3.BackendRef = "pkcs11:token=keysvc;object=" + v3.KID
	var evs []Event
	for _, f := range []func() (Event, error){
		func() (Event, error) { return e.key.VersionFact(v3) },
		func() (Event, error) { return e.key.KIDMarker(v3.KID) },
		func() (Event, error) { return e.key.OrdinalMarker(e.k.Name, 3) },
		func() (Event, error) { return e.key.StateMarker(v3.KID, "pending") },
	} {
		ev, err := f()
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	if err := e.st.InTx(ctx, func(tx store.Tx) error {
		if err := tx.InsertVersion(ctx, v3); err != nil {
			return err
		}
		return tx.(store.AnchorWriter).InsertAnchorEvents(ctx, toStore(evs, store.Now()))
	}); err != nil {
		t.Fatal(err)
	}
	// The log goes down.
	down := func(x *Anchor) { x.logs, x.scanned = []tlogclient.Log{&downLog{}}, nil }
	down(a)
	err := a.Wrap(e.st).InTx(ctx, func(tx store.Tx) error {
		v, err := tx.GetVersion(ctx, v3.KID)
		if err != nil {
			return err
		}
		now := store.Now()
		v.State, v.RevokedAt, v.CompromisedAt, v.RevocationReason = store.StateRevoked, &now, &now, "compromised"
		return tx.UpdateVersion(ctx, v)
	})
	if err != nil {
		t.Errorf("revoking %s (minted by an older replica, anchored) during a log outage: %v; want it to go on", v3.KID, err)
	}
	// As a real older release left it, anchor_events holds the
	// bootstrap marker (newLegacyEnv put it in the log only).
	boot, err := e.key.BootstrapMarker()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.InTx(ctx, func(tx store.Tx) error {
		got, err := tx.(store.AnchorStore).AnchorEventsByHash(ctx, [][32]byte{boot.Hash})
		if err != nil || len(got) > 0 {
			return err
		}
		return tx.(store.AnchorWriter).InsertAnchorEvents(ctx, toStore([]Event{boot}, store.Now()))
	}); err != nil {
		t.Fatal(err)
	}
	b := e.newAnchor() // a restart during the outage
	down(b)
	if err := b.Start(ctx); err != nil {
		t.Errorf("a restart during a log outage: %v", err)
	}
}
