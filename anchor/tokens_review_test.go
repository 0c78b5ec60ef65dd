package anchor

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlogclient"
)

// What a second attack review (session 48) found in the first round of
// fixes to ADR 0053; each test failed on 98b01a2.

func execSQL(t *testing.T, st store.Store, q string, args ...any) {
	t.Helper()
	if err := store.ExecRawForTest(context.Background(), st, q, args...); err != nil {
		t.Fatal(err)
	}
}

// TestRevocationAnchoredWhenRowEditedAtRevocation: anchorRevocations
// signs a token's revocation marker only when the revoked row's fact *as
// stored* is backed. A database writer who edits any signed field of the
// row (name, created_at, scopes, expiry) when it is revoked without the
// event key — a trigger, or an edit before the next 5 s refresh — keeps
// serve from ever anchoring that revocation; later the writer restores the
// field and clears revoked_at, and the leaked token is accepted again.
// Before 98b01a2 the marker was anchored on sight, whatever the row said.
func TestRevocationAnchoredWhenRowEditedAtRevocation(t *testing.T) {
	ctx := context.Background()
	e := newLegacyEnv(t)
	a := e.newAnchor() // serve, running throughout
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	leaked := testToken("0000000000a1", "node-1", "sign:*")
	if err := e.newAnchor().Wrap(e.st).InTx(ctx, func(tx store.Tx) error { return tx.InsertToken(ctx, leaked) }); err != nil {
		t.Fatal(err)
	}
	if backed, _ := a.CheckTokens(ctx, tokenList(t, e.st)); !accepted(backed, leaked.ID) {
		t.Fatal("precondition: the created token is accepted")
	}
	// tokens revoke without --anchor-key-file; the writer's trigger
	// alters the row as it is revoked.
	execSQL(t, e.st, `UPDATE api_tokens SET revoked_at = created_at WHERE id = ?`, leaked.ID)
	execSQL(t, e.st, `UPDATE api_tokens SET name = 'node-1x' WHERE id = ?`, leaked.ID)
	for range 3 { // several refreshes see the revoked row
		a.CheckTokens(ctx, tokenList(t, e.st))
	}
	m, _ := e.key.TokenRevokedMarker(leaked.ID)
	if !e.logged.has(m.JWS) {
		t.Error("the revocation of a real token (its id's fact backed) was not anchored because its row was edited")
	}
	// Later: the row restored, the revocation cleared.
	execSQL(t, e.st, `UPDATE api_tokens SET name = 'node-1', revoked_at = NULL WHERE id = ?`, leaked.ID)
	for i, b := range []*Anchor{a, e.newAnchor()} {
		if backed, _ := b.CheckTokens(ctx, tokenList(t, e.st)); accepted(backed, leaked.ID) {
			t.Errorf("process %d: the revoked token is accepted again after its revocation was cleared", i)
		}
	}
}

// TestRevocationAnchoredWhenFactOnlyInLog: the same gate with no edit at
// all. The writer deletes the token's fact row (its fact stays in the log,
// so the token keeps being accepted); the token is revoked without the
// event key while no serve that checked it runs (a restart, a rolling
// deploy). A serve started afterwards never saw the token live: its
// backed() looks in memory and anchor_events only, not in the log, so it
// anchors nothing; the writer clears revoked_at and the token is back.
func TestRevocationAnchoredWhenFactOnlyInLog(t *testing.T) {
	ctx := context.Background()
	e := newLegacyEnv(t)
	if err := e.newAnchor().Start(ctx); err != nil {
		t.Fatal(err)
	}
	leaked := testToken("0000000000a2", "node-1", "sign:*")
	if err := e.newAnchor().Wrap(e.st).InTx(ctx, func(tx store.Tx) error { return tx.InsertToken(ctx, leaked) }); err != nil {
		t.Fatal(err)
	}
	execSQL(t, e.st, `DELETE FROM anchor_events WHERE kind = '`+FactToken+`'`)
	if backed, _ := e.newAnchor().CheckTokens(ctx, tokenList(t, e.st)); !accepted(backed, leaked.ID) {
		t.Fatal("precondition: the token is accepted from its fact in the log")
	}
	execSQL(t, e.st, `UPDATE api_tokens SET revoked_at = created_at WHERE id = ?`, leaked.ID) // no event key
	serve := e.newAnchor()                                                                    // started after the revocation
	if err := serve.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		serve.CheckTokens(ctx, tokenList(t, e.st))
	}
	execSQL(t, e.st, `UPDATE api_tokens SET revoked_at = NULL WHERE id = ?`, leaked.ID)
	if backed, _ := serve.CheckTokens(ctx, tokenList(t, e.st)); accepted(backed, leaked.ID) {
		t.Error("a token revoked without the event key is accepted again once the revocation is cleared (its fact was in the log only)")
	}
}

// TestInsertedAnchorEventNotOwed: resubmitStored now owes, from memory,
// every anchor_events row it records, without checking that the row is an
// event of this node (its hash the SHA-256 of its JWS, the JWS signed by
// the event key). One row a database writer inserts — or any event no log
// will ever prove — stays owed for the life of every running replica:
// /readyz turns unready after 15 min on all of them (ADR 0052), and the
// JWS, of any size, is held in memory for good.
func TestInsertedAnchorEventNotOwed(t *testing.T) {
	ctx := context.Background()
	e := newLegacyEnv(t)
	clock := time.Now()
	a, err := New(Config{Key: e.key, Logs: []tlogclient.Log{&emptyLog{}}, Store: e.st, Recorder: e.logged,
		Scanned: e.logged.scanned, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	junk := strings.Repeat("x", 1<<20)
	h := sha256.Sum256([]byte("not the hash of the jws"))
	execSQL(t, e.st, `INSERT INTO anchor_events (artifact_hash, kind, subject, jws, created_at) VALUES (?, 'marker.token_revoked', 'x', ?, 1)`, h[:], junk)
	// And a well-formed marker under its own hash, signed by another
	// event key (the writer's own).
	other, err := GenerateKeyFile(filepath.Join(t.TempDir(), "other.json"))
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := other.TokenRevokedMarker("0000000000aa")
	execSQL(t, e.st, `INSERT INTO anchor_events (artifact_hash, kind, subject, jws, created_at) VALUES (?, ?, ?, ?, 1)`, forged.Hash[:], forged.Kind, forged.Subject, forged.JWS)
	a.resubmitStored(ctx)
	a.mu.Lock()
	_, owed := a.owed[forged.Hash]
	a.mu.Unlock()
	if owed {
		t.Fatal("a marker signed by another event key is owed (adopted from anchor_events)")
	}
	for range 40 { // 20 min of check-loop ticks (--anchor-check-interval 30s)
		a.resubmitStored(ctx)
		clock = clock.Add(30 * time.Second)
		a.settleOwed(ctx)
	}
	if n, oldest := a.Owed(); n > 0 && clock.Sub(oldest) > anchorOwedUnreadyForTest {
		t.Fatalf("%d event(s) owed for %s after a database writer inserted one anchor_events row: /readyz unready on every running replica", n, clock.Sub(oldest))
	}
}

const anchorOwedUnreadyForTest = 15 * time.Minute // cmd/keysvc anchorOwedUnready

// TestPeerEventsDoNotMakeReplicaUnready: a replica now owes every event
// another replica (or a tokens command) stores, and settleOwed proves at
// most owedProbesMax (256) per tick. A burst of 10,000 events a peer made
// and the log already holds (e.g. 3,300 tokens created in a loop: fact,
// audit fact, audit seq marker each) keeps this replica owing past 15 min
// at the default 30 s interval: /readyz unready though nothing is wrong.
// Before 98b01a2 only the maker owed them.
func TestPeerEventsDoNotMakeReplicaUnready(t *testing.T) {
	ctx := context.Background()
	e := newLegacyEnv(t)
	var mu sync.Mutex
	inLog := map[[32]byte]bool{}
	rec := recorderFunc(func(_ context.Context, _ string, artifacts ...string) error {
		mu.Lock()
		defer mu.Unlock()
		for _, jws := range artifacts {
			inLog[sha256.Sum256([]byte(jws))] = true
		}
		return nil
	})
	clock := time.Now()
	a, err := New(Config{Key: e.key, Logs: []tlogclient.Log{&emptyLog{}}, Store: e.st, Recorder: rec,
		Scanned: func(h [32]byte) bool { mu.Lock(); defer mu.Unlock(); return inLog[h] }, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	evs := make([]Event, 0, 10000)
	for i := range cap(evs) {
		ev, err := e.key.Sign(MarkerAuditSeq, fmt.Sprint(100000+i), struct {
			Marker string `json:"marker"`
			Seq    int    `json:"seq"`
		}{"audit_seq", 100000 + i})
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
		mu.Lock()
		inLog[ev.Hash] = true // the peer's log took them
		mu.Unlock()
	}
	if err := e.st.InTx(ctx, func(tx store.Tx) error {
		return tx.(store.AnchorWriter).InsertAnchorEvents(ctx, toStore(evs, store.Now()))
	}); err != nil {
		t.Fatal(err)
	}
	for range 34 { // 17 min of ticks
		a.resubmitStored(ctx)
		clock = clock.Add(30 * time.Second)
		a.settleOwed(ctx)
	}
	if n, oldest := a.Owed(); n > 0 && clock.Sub(oldest) > anchorOwedUnreadyForTest {
		t.Fatalf("%d events a peer made, all in the log, still owed here after %s: /readyz unready", n, clock.Sub(oldest))
	}
}

// gatedLog answers "not found" to every look-up, and fails those of
// the hashes in fail (a log that fails some look-ups: among the
// thousands bindBackends makes for versions a writer inserted, one does).
type gatedLog struct {
	emptyLog
	down bool
	fail map[[32]byte]bool
}

func (l *gatedLog) Proof(_ context.Context, h [32]byte, _ uint64) ([]byte, error) {
	if l.down || l.fail[h] {
		return nil, fmt.Errorf("dial tcp: i/o timeout")
	}
	return nil, tlogclient.ErrNotFound
}

// TestTokensAnchoredAfterOutageStart: a first start of this release
// during a log outage leaves the bindings pending. Once the log answers,
// the next check-loop tick anchors API tokens even when binding a
// version's backend reference fails (a version a writer inserted whose
// look-up times out): anchorTokens ran only after bindBackends and
// anchorApprovals succeeded, and until it ran every refresh accepted every
// token as stored. The tokens stored when it runs are taken on trust, as
// at any first start; a token inserted after is refused.
func TestTokensAnchoredAfterOutageStart(t *testing.T) {
	ctx := context.Background()
	e := newLegacyEnv(t)
	// anchor_events as an earlier release left it (so that a start
	// during the outage proceeds).
	boot, _ := e.key.BootstrapMarker()
	if err := e.st.InTx(ctx, func(tx store.Tx) error {
		return tx.(store.AnchorWriter).InsertAnchorEvents(ctx, toStore([]Event{boot}, store.Now()))
	}); err != nil {
		t.Fatal(err)
	}
	l := &gatedLog{down: true, fail: map[[32]byte]bool{}}
	a, err := New(Config{Key: e.key, Logs: []tlogclient.Log{l}, Store: e.st, Recorder: e.logged})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !a.bindPending {
		t.Fatal("set-up: the start did not leave bindings pending")
	}
	// A version the writer inserted; the look-up of its backend fact is
	// the one that fails.
	bad := e.v1
	bad.KID, bad.BackendRef = "inserted-kid", "software:kid=inserted-kid"
	if err := e.st.InTx(ctx, func(tx store.Tx) error { return tx.InsertVersion(ctx, bad) }); err != nil {
		t.Fatal(err)
	}
	bf, _ := e.key.BackendFact(bad)
	l.fail[bf.Hash] = true
	l.down = false // the log is back, 2 s later
	a.mu.Lock()
	a.downUntil = map[string]time.Time{}
	a.mu.Unlock()
	if err := a.startBindings(ctx); err == nil || !strings.Contains(err.Error(), "binding backend references") {
		t.Fatalf("Run's pending path: %v, want the binding of the inserted version to fail", err)
	}
	if m, _ := e.key.TokensMarker(); !e.logged.has(m.JWS) {
		t.Fatal("a failed binding kept API tokens unanchored")
	}
	forged := testToken("0000000000f0", "officer-2", "sign:*", "admin:keys", "admin:revoke")
	execSQL(t, e.st, `INSERT INTO api_tokens (id, name, sha256, scopes, created_at) VALUES (?, ?, ?, '["sign:*","admin:keys","admin:revoke"]', 1)`,
		forged.ID, forged.Name, forged.SHA256)
	a.mu.Lock()
	a.downUntil = map[string]time.Time{}
	a.mu.Unlock()
	if backed, _ := a.CheckTokens(ctx, tokenList(t, e.st)); accepted(backed, forged.ID) {
		t.Fatal("a token inserted in the database after tokens were anchored is accepted")
	}
}

// TestExpiredRowsNotReturnedUnchecked (hardening): rows CheckTokens
// classifies as expired (by its own clock) are returned among the backed
// tokens without any check; only the Authenticator's later expiry test,
// on another clock reading, keeps an inserted row out. A wall clock that
// steps back (or a Config.Now ahead of the server's) lets a forged row in.
func TestExpiredRowsNotReturnedUnchecked(t *testing.T) {
	ctx := context.Background()
	e := newLegacyEnv(t)
	a := e.newAnchor()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	forged := testToken("0000000000e9", "officer-2", "admin:keys")
	exp := store.Now().Add(time.Minute)
	forged.ExpiresAt = &exp
	if err := e.st.InTx(ctx, func(tx store.Tx) error { return tx.InsertToken(ctx, forged) }); err != nil {
		t.Fatal(err)
	}
	a.now = func() time.Time { return exp.Add(time.Second) } // the refresh's clock reading
	if backed, _ := a.CheckTokens(ctx, tokenList(t, e.st)); accepted(backed, forged.ID) {
		t.Error("a row inserted in the database is returned as backed (unchecked because it looked expired)")
	}
}
