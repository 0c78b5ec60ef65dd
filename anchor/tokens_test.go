package anchor

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
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
// probed stay cached as absent) and accepts a token created meanwhile
// whose fact is in anchor_events; a process started during the outage
// accepts no token whose revocation it cannot rule out until a log
// answers (ErrHistoryUnconfirmed), as it withholds versions.
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
	if got, refused := running.CheckTokens(ctx, list()); len(got) != 1 || len(refused) != 0 {
		t.Fatalf("before the outage: %d accepted, refused %v", len(got), refused)
	}

	a.logs, a.scanned = []tlogclient.Log{&downLog{}}, nil
	running.logs, running.scanned = []tlogclient.Log{&downLog{}}, nil
	if err := a.Wrap(e.st).InTx(ctx, func(tx store.Tx) error { return tx.InsertToken(ctx, during) }); err != nil {
		t.Fatal(err)
	}
	if got, refused := a.CheckTokens(ctx, list()); len(got) != 2 || len(refused) != 0 {
		t.Fatalf("the creating process during the outage: %d accepted, refused %v; want both", len(got), refused)
	}
	got, refused := running.CheckTokens(ctx, list())
	if len(got) != 1 || got[0].ID != first.ID {
		t.Fatalf("a replica running before the outage: accepted %v, want %s", got, first.ID)
	}
	if !errors.Is(refused[during.ID], rotation.ErrHistoryUnconfirmed) {
		t.Fatalf("a token created during the outage, on another replica: %v, want ErrHistoryUnconfirmed", refused[during.ID])
	}

	fresh := e.newAnchor() // started during the outage
	fresh.logs, fresh.scanned = []tlogclient.Log{&downLog{}}, nil
	got, refused = fresh.CheckTokens(ctx, list())
	if len(got) != 0 || !errors.Is(refused[first.ID], rotation.ErrHistoryUnconfirmed) {
		t.Fatalf("a process started during the outage: accepted %v, refused %v; want none, unconfirmed", got, refused)
	}
	fresh.logs, fresh.scanned = []tlogclient.Log{&emptyLog{}}, e.logged.scanned // the log is back
	if got, refused = fresh.CheckTokens(ctx, list()); len(got) != 2 || len(refused) != 0 {
		t.Fatalf("once the log answers: %d accepted, refused %v", len(got), refused)
	}
}
