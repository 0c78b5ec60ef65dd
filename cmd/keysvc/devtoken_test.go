package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/store"
)

// TestEnsureDevToken: --dev keeps its token while it is a usable row of
// key history, and otherwise (a database reset, a revocation) creates a
// new one and rewrites the file (mode 0600); it never registers an old
// secret's id again, which may be revoked in the transparency log (ADR
// 0053, an attack review, session 48).
func TestEnsureDevToken(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, devTokenFile)
	open := func(db string) store.Store {
		t.Helper()
		cfg := store.Config{SQLitePath: filepath.Join(dir, db)}
		if _, err := store.Migrate(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		st, err := store.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ensure := func(st store.Store) string {
		t.Helper()
		tok, err := ensureDevToken(ctx, st, path, log)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || strings.TrimSpace(string(b)) != tok {
			t.Fatalf("%s holds %q (%v), want the token returned", path, b, err)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s has mode %o, want 0600", path, fi.Mode().Perm())
		}
		return tok
	}
	st := open("a.db")
	first := ensure(st)
	if again := ensure(st); again != first {
		t.Fatal("a usable dev token was replaced")
	}
	reset := ensure(open("b.db")) // the database was reset
	if reset == first {
		t.Fatal("after a database reset the old secret was registered again")
	}
	h := api.TokenHash(reset)
	list, err := open("b.db").ListTokens(ctx)
	if err != nil || len(list) != 1 || string(list[0].SHA256) != string(h[:]) {
		t.Fatalf("tokens after the reset: %+v (%v), want the new one", list, err)
	}
	if _, err := api.RevokeToken(ctx, st, tokenIDOf(t, st), api.TokenAudit{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(first+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if revoked := ensure(st); revoked == first {
		t.Fatal("a revoked dev token was kept")
	}
}

// tokenIDOf is the id of the only token in st.
func tokenIDOf(t *testing.T, st store.Store) string {
	t.Helper()
	list, err := st.ListTokens(context.Background())
	if err != nil || len(list) != 1 {
		t.Fatalf("tokens: %+v (%v)", list, err)
	}
	return list[0].ID
}

// TestServeNeedsAUsableToken: serve without --dev refuses to start on key
// history with no usable API token (none, or only revoked ones), and says
// how to make one; with tokens it cannot confirm yet (ADR 0053) it warns
// and serves instead (TestTokensDuringLogOutage covers the checker).
func TestServeNeedsAUsableToken(t *testing.T) {
	dir := t.TempDir()
	kek := writeKEK(t, dir)
	if out, errOut, code := runCLI(t, nil, "migrate", "--data-dir", dir); code != 0 {
		t.Fatalf("migrate: %s%s", out, errOut)
	}
	const want = "no usable API token: create one with `keysvc tokens create --name NAME --scope sign:* --scope admin:keys`"
	serve := func(what string) {
		t.Helper()
		_, errOut, code := runCLI(t, nil, "serve", "--listen", "127.0.0.1:0", "--data-dir", dir, "--kek-file", kek)
		if code != 1 || !strings.Contains(errOut, want) {
			t.Fatalf("serve with %s: exit %d %s", what, code, errOut)
		}
	}
	serve("no token")
	if _, errOut, code := runCLI(t, nil, "tokens", "create", "--name", "node-1", "--scope", "sign:*", "--data-dir", dir); code != 0 {
		t.Fatalf("tokens create: %s", errOut)
	}
	st, err := store.Open(context.Background(), store.Config{SQLitePath: filepath.Join(dir, "keysvc.db")})
	if err != nil {
		t.Fatal(err)
	}
	id := tokenIDOf(t, st)
	st.Close()
	if _, errOut, code := runCLI(t, nil, "tokens", "revoke", id, "--data-dir", dir); code != 0 {
		t.Fatalf("tokens revoke: %s", errOut)
	}
	serve("only a revoked token")
}
