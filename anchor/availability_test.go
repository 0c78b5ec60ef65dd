package anchor

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlogclient"
)

// Availability of the checks added by the four review rounds of ADR 0050
// (a fifth review, session 47): honest flows the anchored ListVersions
// refused or slowed. Each test failed before its fix.

// recorderFunc is a Recorder.
type recorderFunc func(ctx context.Context, typ string, artifacts ...string) error

func (f recorderFunc) Record(ctx context.Context, typ string, artifacts ...string) error {
	return f(ctx, typ, artifacts...)
}

// TestRevokeAfterMintDuringOutage: ADR 0050's fourth-review decision is
// that "a replica running before the outage has the absences cached and
// revokes through it" (TestRevokeDuringOutage). That holds only for
// versions whose later-state markers a reload happened to probe before
// the outage. A version minted just before the outage (by this replica or
// another; or one a slow log's 750 ms check budget did not reach) has
// never had its "retired/revoked/destroyed" markers probed: the minting
// transaction learns its own markers but records nothing as absent,
// though a kid the log never saw minted cannot have later-state markers.
// The anchored ListVersions then probes them at the next transition, no
// log answers, and the whole key takes no change — an emergency
// revocation of the old, retired version included — on every replica,
// for the length of the outage. Now the minting transaction records the
// markers of the kid it minted as absent (noteAbsent). A version another
// replica minted is probed by this replica's next reload; an outage
// within that interval still holds the key's changes up (left).
func TestRevokeAfterMintDuringOutage(t *testing.T) {
	ctx := context.Background()
	e := newLifecycleEnv(t, store.Config{SQLitePath: filepath.Join(t.TempDir(), "keysvc.db")})
	_, v1, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "villa", Issuer: "villa.example"}, alice)
	if err != nil {
		t.Fatal(err)
	}
	// Control: a rotation well before the outage; its reload probed v2's
	// later states.
	if _, _, err := e.m.Rotate(ctx, "villa", alice); err != nil {
		t.Fatal(err)
	}
	// The next rotation's events reach the log; the log goes down right
	// after (before this replica's reload asked it anything).
	outage := false
	e.a.rec = recorderFunc(func(ctx context.Context, typ string, artifacts ...string) error {
		err := e.logged.Record(ctx, typ, artifacts...)
		if outage {
			e.a.logs, e.a.scanned = []tlogclient.Log{&downLog{}}, nil
		}
		return err
	})
	outage = true
	v3, _, err := e.m.Rotate(ctx, "villa", alice)
	if err != nil {
		t.Fatal(err)
	}
	if e.a.scanned != nil {
		t.Fatal("set-up: the log did not go down")
	}
	// (Older, and out of this review's scope: the reload right after the
	// rotation could not probe v3's later states either, so v3 — the
	// active version — is withheld and the key does not sign for the
	// length of the outage.)
	if ke := e.m.Keyring().Keys["villa"]; ke.LoadErr != nil || ke.Active == nil {
		t.Logf("(seen: after the rotation, %s cannot sign on this replica during the outage: %v)", v3.KID, ke.LoadErr)
	}
	// v1 (retired two rotations ago) turns out compromised: revoke it on
	// the replica that has been running all along.
	if _, _, err := e.m.Revoke(ctx, v1.KID, store.Now(), "compromised", alice); err != nil {
		t.Errorf("revoking retired %s on a replica running before the log outage: %v (the key's newest version %s was minted just before the outage; its later-state markers were never probed)", v1.KID, err, v3.KID)
	}
}

// slowEmptyLog answers every look-up "not found" after d, and counts them
// and the most in flight at once.
type slowEmptyLog struct {
	emptyLog
	d            time.Duration
	mu           sync.Mutex
	n, in, maxIn int
}

func (l *slowEmptyLog) Proof(ctx context.Context, _ [32]byte, _ uint64) ([]byte, error) {
	l.mu.Lock()
	l.n++
	l.in++
	l.maxIn = max(l.maxIn, l.in)
	l.mu.Unlock()
	defer func() { l.mu.Lock(); l.in--; l.mu.Unlock() }()
	select {
	case <-time.After(l.d):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return nil, tlogclient.ErrNotFound
}

func (l *slowEmptyLog) count() int { l.mu.Lock(); defer l.mu.Unlock(); return l.n }

// TestColdTransitionProbesEveryVersion: on a freshly (re)started replica
// the first transition of a key with many versions — here an emergency
// revocation — looks up the later-state markers of every version of the
// key (ListVersions) that the start's reload (750 ms of look-ups) did not
// reach, with the key row locked (on SQLite: the database's write lock).
// They were looked up one after another: 78 look-ups, 7.8 s with a log
// answering in 100 ms (a review, session 47). Now they are looked up at
// once, 16 in flight (markersPresent): the transition waits for the
// slowest, not the sum.
func TestColdTransitionProbesEveryVersion(t *testing.T) {
	ctx := context.Background()
	e := newLifecycleEnv(t, store.Config{SQLitePath: filepath.Join(t.TempDir(), "keysvc.db")})
	if _, _, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "villa", Issuer: "villa.example"}, alice); err != nil {
		t.Fatal(err)
	}
	var retired store.KeyVersion
	for i := 0; i < 40; i++ {
		var err error
		if _, retired, err = e.m.Rotate(ctx, "villa", alice); err != nil {
			t.Fatal(err)
		}
	}
	// The replica restarts; its log answers in 100 ms.
	l := &slowEmptyLog{d: 100 * time.Millisecond}
	_, m := e.restart(t, l, nil)
	before := l.count()
	if _, _, err := m.Revoke(ctx, retired.KID, store.Now(), "compromised", alice); err != nil {
		t.Fatal(err)
	}
	probes := l.count() - before
	l.mu.Lock()
	maxIn := l.maxIn
	l.mu.Unlock()
	if probes > 16 && maxIn < 16 {
		t.Errorf("one revocation of a 41-version key on a restarted replica made %d log look-ups, at most %d at once; want 16 in flight", probes, maxIn)
	}
}
