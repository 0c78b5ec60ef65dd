package anchor

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlogclient"
)

// TestTokensAnchored: API tokens are anchored (ADR 0053). Tokens stored
// before are taken as stored until the first start anchors them on
// trust; after it, a token inserted or edited in the database (more
// scopes, another principal, a later expiry) is refused, and so is one
// whose revocation was cleared — found in anchor_events, or in the log
// once anchor_events lost it too. A revocation made without the event
// key is anchored on sight.
func TestTokensAnchored(t *testing.T) {
	ctx := context.Background()
	e := newLegacyEnv(t)
	now := store.Now()
	token := func(id, name string, scopes ...string) store.APIToken {
		sum := sha256.Sum256([]byte("ksv_secret_" + id))
		return store.APIToken{ID: id, Name: name, SHA256: sum[:], Scopes: scopes, CreatedAt: now}
	}
	insert := func(st store.Store, tk store.APIToken) {
		t.Helper()
		if err := st.InTx(ctx, func(tx store.Tx) error { return tx.InsertToken(ctx, tk) }); err != nil {
			t.Fatal(err)
		}
	}
	exec := func(q string) {
		t.Helper()
		if err := store.ExecRawForTest(ctx, e.st, q); err != nil {
			t.Fatal(err)
		}
	}
	// check returns the ids a process accepts, and the refusals.
	check := func(a *Anchor) ([]string, map[string]error) {
		t.Helper()
		list, err := e.st.ListTokens(ctx)
		if err != nil {
			t.Fatal(err)
		}
		backed, refused := a.CheckTokens(ctx, list)
		var ids []string
		for _, tk := range backed {
			ids = append(ids, tk.ID)
		}
		return ids, refused
	}
	wantRefused := func(refused map[string]error, id string, is error, msg string) {
		t.Helper()
		err := refused[id]
		if !errors.Is(err, is) || !strings.Contains(err.Error(), msg) {
			t.Fatalf("token %s: refused with %v, want %v containing %q", id, err, is, msg)
		}
	}

	old := token("00000000000a", "alice", "admin:revoke")
	insert(e.st, old) // by a release before ADR 0053
	a := e.newAnchor()
	if ids, refused := check(a); strings.Join(ids, ",") != old.ID || len(refused) != 0 {
		t.Fatalf("before the first start: accepted %v, refused %v; want the stored token as stored", ids, refused)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	f, _ := e.key.TokenFact(old)
	m, _ := e.key.TokensMarker()
	if !e.logged.has(f.JWS) || !e.logged.has(m.JWS) {
		t.Fatal("the first start did not anchor the stored token and the tokens marker")
	}

	created := token("00000000000b", "bob", "sign:*")
	insert(a.Wrap(e.st), created)
	if f, _ := e.key.TokenFact(created); !e.logged.has(f.JWS) {
		t.Fatal("creating a token through the anchored store did not record its fact")
	}
	forged := token("00000000000c", "carol", "admin:keys", "admin:revoke")
	insert(e.st, forged) // a database writer
	for _, b := range []*Anchor{a, e.newAnchor()} {
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		ids, refused := check(b)
		if strings.Join(ids, ",") != old.ID+","+created.ID || len(refused) != 1 {
			t.Fatalf("accepted %v, refused %v; want the two anchored tokens", ids, refused)
		}
		wantRefused(refused, forged.ID, rotation.ErrHistoryNotBacked, "API token 00000000000c (carol) as stored is not backed")
	}
	if f, _ := e.key.TokenFact(forged); e.logged.has(f.JWS) {
		t.Fatal("a restart anchored the inserted token")
	}

	// Edits of an anchored token: each refused, on a fresh process.
	for _, c := range []struct{ set, undo string }{
		{`scopes = '["sign:*","admin:keys"]'`, `scopes = '["sign:*"]'`},
		{`name = 'alice'`, `name = 'bob'`},
		{`expires_at = NULL`, `expires_at = NULL`}, // control: unchanged
	} {
		exec(`UPDATE api_tokens SET ` + c.set + ` WHERE id = '` + created.ID + `'`)
		_, refused := check(e.newAnchor())
		if c.set == c.undo {
			if err := refused[created.ID]; err != nil {
				t.Fatalf("control: an unedited token refused: %v", err)
			}
			continue
		}
		wantRefused(refused, created.ID, rotation.ErrHistoryNotBacked, "as stored is not backed")
		exec(`UPDATE api_tokens SET ` + c.undo + ` WHERE id = '` + created.ID + `'`)
	}
	exp := created
	later := now.Add(time.Hour)
	exp.ID, exp.ExpiresAt = "00000000000d", &later
	exp.SHA256 = token(exp.ID, "").SHA256
	insert(a.Wrap(e.st), exp)
	exec(`UPDATE api_tokens SET expires_at = expires_at * 2 WHERE id = '` + exp.ID + `'`)
	if _, refused := check(e.newAnchor()); refused[exp.ID] == nil {
		t.Fatal("a token whose expiry was moved in the database was accepted")
	}

	// Revoked through the anchored store, then un-revoked in the
	// database: refused from anchor_events, then from the log alone.
	if err := a.Wrap(e.st).InTx(ctx, func(tx store.Tx) error { return tx.RevokeToken(ctx, created.ID, store.Now()) }); err != nil {
		t.Fatal(err)
	}
	rm, _ := e.key.TokenRevokedMarker(created.ID)
	if !e.logged.has(rm.JWS) {
		t.Fatal("revoking a token did not record its marker")
	}
	exec(`UPDATE api_tokens SET revoked_at = NULL WHERE id = '` + created.ID + `'`)
	for _, b := range []*Anchor{a, e.newAnchor()} {
		_, refused := check(b)
		wantRefused(refused, created.ID, rotation.ErrHistoryNotBacked, "is revoked in the transparency log")
	}
	exec(`DELETE FROM anchor_events WHERE kind = '` + MarkerTokenRevoked + `'`)
	_, refused := check(e.newAnchor())
	wantRefused(refused, created.ID, rotation.ErrHistoryNotBacked, "is revoked in the transparency log")

	// Revoked without the event key (tokens revoke with none): anchored
	// on sight, so clearing the revocation later is caught.
	exec(`UPDATE api_tokens SET revoked_at = created_at WHERE id = '` + old.ID + `'`)
	om, _ := e.key.TokenRevokedMarker(old.ID)
	if e.logged.has(om.JWS) {
		t.Fatal("precondition: the revocation is anchored already")
	}
	check(a)
	if !e.logged.has(om.JWS) {
		t.Fatal("a revocation made without the event key was not anchored on sight")
	}
	exec(`UPDATE api_tokens SET revoked_at = NULL WHERE id = '` + old.ID + `'`)
	_, refused = check(e.newAnchor())
	wantRefused(refused, old.ID, rotation.ErrHistoryNotBacked, "is revoked in the transparency log")
}

// TestTokensDuringLogOutage: a process that checked its tokens before a
// log outage keeps accepting them through it (the revocation markers it
// probed stay cached as absent); a token created meanwhile, and every
// token on a process started during the outage, is accepted once a log
// answers whether it was revoked (ErrHistoryUnconfirmed until then), as
// versions are withheld.
func TestTokensDuringLogOutage(t *testing.T) {
	ctx := context.Background()
	e := newLegacyEnv(t)
	a := e.newAnchor()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	now := store.Now()
	mk := func(id string) store.APIToken {
		sum := sha256.Sum256([]byte("ksv_" + id))
		return store.APIToken{ID: id, Name: "node-1", SHA256: sum[:], Scopes: []string{"sign:*"}, CreatedAt: now}
	}
	first, during := mk("0000000000f1"), mk("0000000000f2")
	if err := a.Wrap(e.st).InTx(ctx, func(tx store.Tx) error { return tx.InsertToken(ctx, first) }); err != nil {
		t.Fatal(err)
	}
	list := func() []store.APIToken {
		l, err := e.st.ListTokens(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	running := e.newAnchor() // another replica, running before the outage
	for _, b := range []*Anchor{a, running} {
		if got, refused := b.CheckTokens(ctx, list()); len(got) != 1 || len(refused) != 0 {
			t.Fatalf("before the outage: %d accepted, refused %v", len(got), refused)
		}
	}

	a.logs, a.scanned = []tlogclient.Log{&downLog{}}, nil
	running.logs, running.scanned = []tlogclient.Log{&downLog{}}, nil
	if err := a.Wrap(e.st).InTx(ctx, func(tx store.Tx) error { return tx.InsertToken(ctx, during) }); err != nil {
		t.Fatal(err)
	}
	for _, b := range []*Anchor{a, running} {
		got, refused := b.CheckTokens(ctx, list())
		if len(got) != 1 || got[0].ID != first.ID {
			t.Fatalf("a process running before the outage: accepted %v, want %s", got, first.ID)
		}
		// Not even where it was created: its id may be one revoked
		// before (TestTokenIDRevokedBefore).
		if !errors.Is(refused[during.ID], rotation.ErrHistoryUnconfirmed) {
			t.Fatalf("a token created during the outage: %v, want ErrHistoryUnconfirmed", refused[during.ID])
		}
	}

	fresh := e.newAnchor() // started during the outage
	fresh.logs, fresh.scanned = []tlogclient.Log{&downLog{}}, nil
	got, refused := fresh.CheckTokens(ctx, list())
	if len(got) != 0 || !errors.Is(refused[first.ID], rotation.ErrHistoryUnconfirmed) {
		t.Fatalf("a process started during the outage: accepted %v, refused %v; want none, unconfirmed", got, refused)
	}
	fresh.logs, fresh.scanned = []tlogclient.Log{&emptyLog{}}, e.logged.scanned // the log is back
	if got, refused = fresh.CheckTokens(ctx, list()); len(got) != 2 || len(refused) != 0 {
		t.Fatalf("once the log answers: %d accepted, refused %v", len(got), refused)
	}
}

// switchRecorder is a log's submission endpoint that can be down.
type switchRecorder struct {
	inner *memRecorder
	down  atomic.Bool
}

func (r *switchRecorder) Record(ctx context.Context, typ string, artifacts ...string) error {
	if r.down.Load() {
		return errors.New("dial tcp: connection refused")
	}
	return r.inner.Record(ctx, typ, artifacts...)
}

func tokenList(t *testing.T, st store.Store) []store.APIToken {
	t.Helper()
	l, err := st.ListTokens(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func accepted(backed []store.APIToken, id string) bool {
	return slices.ContainsFunc(backed, func(tk store.APIToken) bool { return tk.ID == id })
}

func testToken(id, name string, scopes ...string) store.APIToken {
	sum := sha256.Sum256([]byte("ksv_test_" + id))
	return store.APIToken{ID: id, Name: name, SHA256: sum[:], Scopes: scopes, CreatedAt: store.Now()}
}

// TestTokenRevocationOwedFromStore: tokens are revoked by tokens revoke,
// a process that exits. A revocation it made while no log took it was
// kept only by its anchor_events row: a database writer who deleted the
// row and cleared revoked_at during the outage brought the token back for
// good (an attack review, session 48). Now serve owes such a marker from
// memory once it has seen it (ADR 0052), records it again, and the log
// gets it.
func TestTokenRevocationOwedFromStore(t *testing.T) {
	ctx := context.Background()
	e := newLegacyEnv(t)
	rec := &switchRecorder{inner: e.logged}
	clock := time.Now()
	mk := func() *Anchor {
		a, err := New(Config{Key: e.key, Logs: []tlogclient.Log{&emptyLog{}}, Store: e.st, Recorder: rec, Scanned: e.logged.scanned,
			Now: func() time.Time { return clock }})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	serve := mk()
	if err := serve.Start(ctx); err != nil {
		t.Fatal(err)
	}
	leaked := testToken("0000000000e1", "node-1", "sign:*")
	if err := mk().Wrap(e.st).InTx(ctx, func(tx store.Tx) error { return tx.InsertToken(ctx, leaked) }); err != nil {
		t.Fatal(err)
	}
	if backed, _ := serve.CheckTokens(ctx, tokenList(t, e.st)); !accepted(backed, leaked.ID) {
		t.Fatal("precondition: the created token is accepted")
	}
	for _, via := range []string{"token refresh", "check loop"} {
		rec.down.Store(true)
		if err := mk().Wrap(e.st).InTx(ctx, func(tx store.Tx) error { return tx.RevokeToken(ctx, leaked.ID, store.Now()) }); err != nil {
			t.Fatal(err)
		}
		m, _ := e.key.TokenRevokedMarker(leaked.ID)
		if e.logged.has(m.JWS) {
			t.Fatal("precondition: the marker is not in the log")
		}
		serve := mk() // a replica that sees the row by one of its two paths
		if via == "token refresh" {
			serve.CheckTokens(ctx, tokenList(t, e.st))
		} else {
			serve.resubmitStored(ctx)
		}
		for _, q := range []string{
			`DELETE FROM anchor_events WHERE kind = '` + MarkerTokenRevoked + `'`,
			`UPDATE api_tokens SET revoked_at = NULL WHERE id = '` + leaked.ID + `'`,
		} {
			if err := store.ExecRawForTest(ctx, e.st, q); err != nil {
				t.Fatal(err)
			}
		}
		rec.down.Store(false)
		clock = clock.Add(2 * owedRetryFirst)
		serve.settleOwed(ctx)
		if !e.logged.has(m.JWS) {
			t.Fatalf("via the %s: the revocation seen in anchor_events was not recorded again once the log was back", via)
		}
		if backed, _ := mk().CheckTokens(ctx, tokenList(t, e.st)); accepted(backed, leaked.ID) {
			t.Fatalf("via the %s: the token is accepted again", via)
		}
		e.logged.mu.Lock()
		delete(e.logged.seen, m.JWS) // the next round starts without it
		e.logged.mu.Unlock()
	}
}

// TestRevokedRowsNotAnchoredWithoutFact: a revocation with no marker is
// anchored on sight only for a token the anchor backs (its fact), at most
// revocationsPerCheck a check: revoked rows inserted by a database writer
// made serve sign and log a marker over any id they chose, every refresh
// (an attack review, session 48).
func TestRevokedRowsNotAnchoredWithoutFact(t *testing.T) {
	ctx := context.Background()
	e := newLegacyEnv(t)
	a := e.newAnchor()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		id := fmt.Sprintf("attacker-chosen %d: %040d", i, i)
		sum := sha256.Sum256([]byte(id))
		if err := store.ExecRawForTest(ctx, e.st, `INSERT INTO api_tokens (id, name, sha256, scopes, created_at, revoked_at) VALUES (?, 'x', ?, '[]', 1, 1)`, id, sum[:]); err != nil {
			t.Fatal(err)
		}
	}
	var real []store.APIToken
	for i := range revocationsPerCheck + 6 {
		tk := testToken(fmt.Sprintf("%012x", 0xa00+i), "node", "sign:*")
		if err := a.Wrap(e.st).InTx(ctx, func(tx store.Tx) error { return tx.InsertToken(ctx, tk) }); err != nil {
			t.Fatal(err)
		}
		real = append(real, tk)
	}
	if err := store.ExecRawForTest(ctx, e.st, `UPDATE api_tokens SET revoked_at = created_at WHERE name = 'node'`); err != nil {
		t.Fatal(err) // revoked without the event key
	}
	count := func() (markers int) {
		e.logged.mu.Lock()
		defer e.logged.mu.Unlock()
		for jws := range e.logged.seen {
			for _, tk := range real {
				if m, _ := e.key.TokenRevokedMarker(tk.ID); m.JWS == jws {
					markers++
				}
			}
		}
		return markers
	}
	before := len(e.logged.seen)
	a.CheckTokens(ctx, tokenList(t, e.st))
	if got, all := count(), len(e.logged.seen)-before; got != revocationsPerCheck || all != revocationsPerCheck {
		t.Fatalf("one check anchored %d revocations of real tokens and recorded %d events, want %d and %d", got, all, revocationsPerCheck, revocationsPerCheck)
	}
	a.CheckTokens(ctx, tokenList(t, e.st))
	if got, all := count(), len(e.logged.seen)-before; got != len(real) || all != len(real) {
		t.Fatalf("two checks anchored %d revocations of real tokens and recorded %d events, want %d", got, all, len(real))
	}
}

// TestTokenIDRevokedBefore: a token registered again under an id the log
// records as revoked (serve --dev re-registered its token's secret after
// a database reset) is refused: a created token's revocation marker is
// looked up, not assumed absent (an attack review, session 48).
func TestTokenIDRevokedBefore(t *testing.T) {
	ctx := context.Background()
	e := newLegacyEnv(t)
	a := e.newAnchor()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	dev := testToken("00000000dead", "dev", "sign:*")
	for _, fn := range []func(store.Tx) error{
		func(tx store.Tx) error { return tx.InsertToken(ctx, dev) },
		func(tx store.Tx) error { return tx.RevokeToken(ctx, dev.ID, store.Now()) },
	} {
		if err := a.Wrap(e.st).InTx(ctx, fn); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		`DELETE FROM api_tokens WHERE id = '` + dev.ID + `'`,
		`DELETE FROM anchor_events WHERE kind = '` + MarkerTokenRevoked + `'`,
	} {
		if err := store.ExecRawForTest(ctx, e.st, q); err != nil {
			t.Fatal(err)
		}
	}
	b := e.newAnchor()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	again := dev
	again.CreatedAt = store.Now().Add(time.Second)
	if err := b.Wrap(e.st).InTx(ctx, func(tx store.Tx) error { return tx.InsertToken(ctx, again) }); err != nil {
		t.Fatal(err)
	}
	backed, refused := b.CheckTokens(ctx, tokenList(t, e.st))
	if accepted(backed, dev.ID) || !errors.Is(refused[dev.ID], rotation.ErrHistoryNotBacked) {
		t.Fatalf("a token id the log records as revoked, registered again: accepted %v, refused %v", accepted(backed, dev.ID), refused[dev.ID])
	}
}

// TestExpiredTokenMarkersNotProbed: the revocation marker of a token that
// expired is no longer looked up by the check loop (it was, for the life
// of the process: look-ups grew with every token ever issued).
func TestExpiredTokenMarkersNotProbed(t *testing.T) {
	ctx := context.Background()
	e := newLegacyEnv(t)
	a := e.newAnchor()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	tk := testToken("0000000000c1", "ci-runner", "sign:*")
	exp := store.Now().Add(time.Hour)
	tk.ExpiresAt = &exp
	if err := a.Wrap(e.st).InTx(ctx, func(tx store.Tx) error { return tx.InsertToken(ctx, tk) }); err != nil {
		t.Fatal(err)
	}
	m, _ := e.key.TokenRevokedMarker(tk.ID)
	var probed atomic.Int64
	inner := a.scanned
	a.scanned = func(h [32]byte) bool {
		if h == m.Hash {
			probed.Add(1)
		}
		return inner(h)
	}
	a.CheckTokens(ctx, tokenList(t, e.st))
	a.Refresh(ctx)
	if n := probed.Load(); n != 2 {
		t.Fatalf("a live token's revocation marker: %d look-ups by its first check and a check-loop tick, want 2", n)
	}
	a.now = func() time.Time { return exp.Add(time.Minute) }
	a.CheckTokens(ctx, tokenList(t, e.st))
	for range 3 {
		a.Refresh(ctx)
	}
	if n := probed.Load(); n != 2 {
		t.Fatalf("the revocation marker of an expired token: %d look-ups, want none after it expired", n-2)
	}
}

// concurrentLog answers "not found" slowly and counts the look-ups in
// flight at once.
type concurrentLog struct {
	emptyLog
	now, max atomic.Int64
}

func (l *concurrentLog) Proof(ctx context.Context, h [32]byte, n uint64) ([]byte, error) {
	cur := l.now.Add(1)
	defer l.now.Add(-1)
	for {
		m := l.max.Load()
		if cur <= m || l.max.CompareAndSwap(m, cur) {
			break
		}
	}
	time.Sleep(20 * time.Millisecond)
	return nil, tlogclient.ErrNotFound
}

// TestFirstTokenCheckConcurrent: a starting replica's first check looks up
// its tokens' revocation markers several at once (at most 16), not one
// after another (an attack review, session 48: 2,000 tokens on a log
// 50 ms away held serve's start for 100 s).
func TestFirstTokenCheckConcurrent(t *testing.T) {
	ctx := context.Background()
	e := newLegacyEnv(t)
	for i := range 40 {
		tk := testToken(fmt.Sprintf("%012x", 0xb00+i), "node", "sign:*")
		if err := e.st.InTx(ctx, func(tx store.Tx) error { return tx.InsertToken(ctx, tk) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.newAnchor().Start(ctx); err != nil { // anchors them (on trust)
		t.Fatal(err)
	}
	fresh := e.newAnchor()
	l := &concurrentLog{}
	fresh.logs, fresh.scanned = []tlogclient.Log{l}, nil
	backed, refused := fresh.CheckTokens(ctx, tokenList(t, e.st))
	if len(backed) != 40 || len(refused) != 0 {
		t.Fatalf("accepted %d, refused %v", len(backed), refused)
	}
	if m := l.max.Load(); m != 16 {
		t.Fatalf("at most %d look-ups in flight, want 16", m)
	}
}

// BenchmarkCheckTokens is what anchoring adds to a token refresh (every
// --reload-interval) of 100 live tokens on a process that has checked
// them before: every fact known, every revocation marker cached absent;
// one anchor_events query (the markers) and no log look-up.
func BenchmarkCheckTokens(b *testing.B) {
	ctx := context.Background()
	a := newTestAnchor(b, &emptyLog{})
	if err := a.Start(ctx); err != nil {
		b.Fatal(err)
	}
	for i := range 100 {
		tk := testToken(fmt.Sprintf("%012x", i), "node", "sign:*")
		if err := a.Wrap(a.st).InTx(ctx, func(tx store.Tx) error { return tx.InsertToken(ctx, tk) }); err != nil {
			b.Fatal(err)
		}
	}
	list, err := a.st.ListTokens(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if got, refused := a.CheckTokens(ctx, list); len(got) != 100 || len(refused) != 0 {
		b.Fatalf("accepted %d, refused %v", len(got), refused)
	}
	b.ResetTimer()
	for b.Loop() {
		if got, _ := a.CheckTokens(ctx, list); len(got) != 100 {
			b.Fatal(len(got))
		}
	}
}
