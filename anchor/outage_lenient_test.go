package anchor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/software"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlogclient"
)

// refRecorder is the software backend, noting the reference each
// DestroyKey was called with (for AWS KMS or PKCS#11 that reference is
// the key or object whose material is destroyed).
type refRecorder struct {
	*software.Backend
	mu   sync.Mutex
	refs []string
}

func (r *refRecorder) DestroyKey(ctx context.Context, kid string, h backends.Handle, opt backends.DestroyOptions) (backends.DestroyResult, error) {
	r.mu.Lock()
	r.refs = append(r.refs, h.Ref)
	r.mu.Unlock()
	return r.Backend.DestroyKey(ctx, kid, h, opt)
}

// TestDestroyAfterLenientRetireSkipsBackendCheck: the write
// path (versionBackedBefore, write=true) goes on without a binding check
// when no log answers (noBind) and marks the kid checked; the write also
// puts the kid in t.versions, so a later LockVersion in the same
// transaction returns the row unchecked. RequestDestroy of the active
// version whose successor's activation is due runs completeDue first: it
// retires the version with UpdateVersion (lenient during a log outage),
// then destroyIn's LockVersion skips the backend-reference check and the
// backend is called with the reference a database writer put there
// (ADR 0050's attack: another key's material destroyed).
//
// Set-up: replica A mints v1 (bound: its backend fact and marker are in
// anchor_events). The writer points v1.backend_ref elsewhere and deletes
// v1's backend_bound marker row. Replica B (which never learned the
// marker) serves the destroy while the log is down; its reloads probed
// the next settings revision's marker before the outage (cached absent,
// so LockKey goes on).
func TestDestroyAfterLenientRetireSkipsBackendCheck(t *testing.T) {
	ctx := context.Background()
	e := newLifecycleEnv(t, store.Config{SQLitePath: filepath.Join(t.TempDir(), "keysvc.db")})
	_, v1, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "villa", Issuer: "villa.example"}, alice)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := e.m.ScheduleRotation(ctx, "villa", alice)
	if err != nil {
		t.Fatal(err)
	}
	// Replica B, running (its reloads have checked history, probing the
	// next settings revision's marker: cached absent).
	b, err := New(Config{Key: e.key, Logs: []tlogclient.Log{&emptyLog{}}, Store: e.st, Recorder: e.logged,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Scanned: e.a.scanned})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := software.New([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &refRecorder{Backend: sb}
	m := rotation.New(rotation.Config{Store: b.Wrap(e.st), Backends: []backends.Backend{rec}, History: b,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), JWKSMaxAge: -1})
	if err := m.Reload(ctx); err != nil {
		t.Fatal(err)
	}

	// The writer: v1 now names another key's material; its backend_bound
	// marker row is gone, so only the log could say it was bound.
	victim := "software:victim-key-material?alg=EdDSA&kek=0000"
	if err := store.ExecRawForTest(ctx, e.st, `UPDATE key_versions SET backend_ref = ? WHERE kid = ?`, victim, v1.KID); err != nil {
		t.Fatal(err)
	}
	bm, err := e.key.BackendMarker(v1.KID)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.ExecRawForTest(ctx, e.st, `DELETE FROM anchor_events WHERE artifact_hash = ?`, bm.Hash[:]); err != nil {
		t.Fatal(err)
	}
	// Wait for v2's activation instant (recorded by the next transition).
	time.Sleep(time.Until(*v2.ActivatesAt) + 100*time.Millisecond)

	// The log goes down.
	b.logs, b.scanned = []tlogclient.Log{&downLog{}}, nil

	_, d, err := m.RequestDestroy(ctx, v1.KID, "rotated out", backends.DestroyOptions{}, alice)
	if !errors.Is(err, rotation.ErrHistoryUnconfirmed) && !errors.Is(err, rotation.ErrHistoryNotBacked) {
		t.Errorf("destroying %s, whose backend_ref was altered in the database, during a log outage: destroyed=%v err=%v; want ErrHistoryUnconfirmed (as a destroy of a retired version gets)", v1.KID, d != nil, err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, r := range rec.refs {
		if r == victim {
			t.Errorf("the backend was asked to destroy %q, the reference a database writer put on %s", r, v1.KID)
		}
	}
}

// TestRevokeDuringOutage: a replica running before a log outage, whose
// reloads probed the markers that must stay absent, revokes a retired
// version through the outage (ADR 0049): its fact and the key's are in
// anchor_events, the absences cached. A replica started during the
// outage has probed nothing: its reloads withhold every version, and it
// takes no change, a revocation included, until a log answers. (An attack
// review, session 47, asked for the second to revoke too; a later one
// showed that acting on a key's unconfirmed settings let one officer
// revoke under a two-person rule rolled back in the database:
// TestRolledBackKeyDuringOutage.)
func TestRevokeDuringOutage(t *testing.T) {
	ctx := context.Background()
	e, retired := newVilla(t)
	_, retired2, err := e.m.Rotate(ctx, "villa", alice)
	if err != nil {
		t.Fatal(err)
	}
	// A replica started during the outage.
	_, m := e.restart(t, &downLog{}, nil)
	if _, _, err := m.Revoke(ctx, retired.KID, store.Now(), "compromised", alice); !errors.Is(err, rotation.ErrHistoryUnconfirmed) {
		t.Errorf("revoking on a replica started during a log outage: %v, want ErrHistoryUnconfirmed", err)
	}
	// The replica that ran before the outage (e.m's reloads checked).
	e.a.logs, e.a.scanned = []tlogclient.Log{&downLog{}}, nil
	if _, _, err := e.m.Revoke(ctx, retired2.KID, store.Now(), "compromised", alice); err != nil {
		t.Errorf("revoking on a replica running before the log outage: %v", err)
	}
}

// TestClampReadsUnlockedVersionInstants: transition clamps
// "now" to the latest instant of any of the key's versions as read by
// readState's unlocked ListVersions (keyState.clamp). Only versions the
// transaction then writes are locked and compared with that read
// (sameVersion) and checked against the log; a version it only reads is
// neither. A database writer moves a retired version's published_at
// (never written again) to 2030: it is withheld by every check, but the
// officer's next rotation records the retirement of the active version
// and the activation of the new one at 2030, and finish signs them — the
// log backs vrp_not_after = 2030 for the version that was rotated out
// (it keeps signing until then), chosen by the writer. Now the anchored
// store's ListVersions refuses to hand out a key's versions while one is
// not backed: the key takes no change until the row is put back.
func TestClampReadsUnlockedVersionInstants(t *testing.T) {
	ctx := context.Background()
	e := newLifecycleEnv(t, store.Config{SQLitePath: filepath.Join(t.TempDir(), "keysvc.db")})
	_, v1, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "villa", Issuer: "villa.example"}, alice)
	if err != nil {
		t.Fatal(err)
	}
	v2, _, err := e.m.Rotate(ctx, "villa", alice)
	if err != nil {
		t.Fatal(err)
	}
	future := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := store.ExecRawForTest(ctx, e.st, `UPDATE key_versions SET published_at = ? WHERE kid = ?`, future.UnixMicro(), v1.KID); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.st.GetVersion(ctx, v1.KID); got.PublishedAt == nil || !got.PublishedAt.Equal(future) {
		t.Fatalf("edit did not take: %v", got.PublishedAt)
	}
	before := time.Now()
	_, _, err = e.m.Rotate(ctx, "villa", alice)
	got, gerr := e.st.GetVersion(ctx, v2.KID)
	if gerr != nil {
		t.Fatal(gerr)
	}
	if !errors.Is(err, rotation.ErrHistoryNotBacked) || got.State != store.StateActive {
		t.Errorf("a rotation of a key with a version edited in the database: %v; %s %s, want ErrHistoryNotBacked and it still active", err, v2.KID, got.State)
	}
	if err == nil && got.RetiredAt != nil && got.RetiredAt.After(before.Add(time.Minute)) {
		f, _ := e.key.VersionFact(got)
		t.Errorf("the rotation retired %s at %s, the instant a database writer put on another version's row (logged: %v)", v2.KID, got.RetiredAt, e.logged.has(f.JWS))
	}
}
