package api_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/store"
)

// TestRevokeWithMalformedTokenRow: a token row whose scopes column is not
// JSON made ListTokens fail, so every refresh kept the previous token set
// and tokens revoke failed too: a database writer froze a leaked token as
// accepted on every running replica (an attack review, session 48). The
// row now reads with no scopes, the revocation goes through and the next
// refresh refuses the token.
func TestRevokeWithMalformedTokenRow(t *testing.T) {
	ctx := context.Background()
	cfg := store.Config{SQLitePath: filepath.Join(t.TempDir(), "keysvc.db")}
	if _, err := store.Migrate(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	secret, rec, err := api.CreateToken(ctx, st, "node-1", []string{api.ScopeSignAll}, 0, api.TokenAudit{Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	auth := api.NewAuthenticator(st, nil)
	if err := auth.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _ := auth.Authenticate("Bearer "+secret, time.Now()); p.TokenID != rec.ID {
		t.Fatal("precondition: the token is accepted")
	}
	if err := store.ExecRawForTest(ctx, st, `INSERT INTO api_tokens (id, name, sha256, scopes, created_at) VALUES ('junk', 'x', zeroblob(32), 'not json', 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := api.RevokeToken(ctx, st, rec.ID, api.TokenAudit{Actor: "officer"}); err != nil {
		t.Fatalf("tokens revoke with a malformed row stored: %v", err)
	}
	if err := auth.Refresh(ctx); err != nil {
		t.Fatalf("refresh with a malformed row stored: %v", err)
	}
	if p, _ := auth.Authenticate("Bearer "+secret, time.Now()); p.TokenID == rec.ID {
		t.Fatal("the revoked token is still accepted")
	}
	list, err := st.ListTokens(ctx)
	if err != nil || len(list) != 2 || list[0].ID != "junk" || list[0].Scopes != nil {
		t.Fatalf("ListTokens: %+v (%v), want the malformed row first with no scopes", list, err)
	}
}
