package api_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// scriptedChecker refuses the tokens named in refuse, with their errors.
type scriptedChecker struct{ refuse map[string]error }

func (c *scriptedChecker) CheckTokens(_ context.Context, list []store.APIToken) ([]store.APIToken, map[string]error) {
	var out []store.APIToken
	refused := map[string]error{}
	for _, tk := range list {
		if err, ok := c.refuse[tk.Name]; ok {
			refused[tk.ID] = err
			continue
		}
		out = append(out, tk)
	}
	return out, refused
}

// TestAuthenticatorTokenChecker: with a TokenChecker (ADR 0053), a token
// it refuses gets what an unknown token gets, whether its refusal is
// "not backed" or "could not be checked"; Unconfirmed counts the latter;
// each refusal is logged once per reason (an unconfirmed one once,
// whatever each failed look-up said), and a token accepted again is
// accepted at the next refresh.
func TestAuthenticatorTokenChecker(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ok := h.token("ok", tokenOK, api.ScopeSignAll)
	forged := h.token("forged", tokenOK, api.ScopeSignAll)
	unsure := h.token("unsure", tokenOK, api.ScopeSignAll)
	var logs bytes.Buffer
	a := api.NewAuthenticator(h.store, slog.New(slog.NewTextHandler(&logs, nil)))
	c := &scriptedChecker{refuse: map[string]error{
		"forged": fmt.Errorf("anchor: API token as stored is not backed: %w", rotation.ErrHistoryNotBacked),
		"unsure": fmt.Errorf("%w: look-up 1 failed", rotation.ErrHistoryUnconfirmed),
	}}
	a.SetTokenChecker(c)
	ctx := context.Background()
	now := time.Now()
	refresh := func() {
		t.Helper()
		if err := a.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	refresh()
	for secret, want := range map[string]bool{ok: true, forged: false, unsure: false} {
		if p, _ := a.Authenticate("Bearer "+secret, now); (p.Name != "") != want {
			t.Fatalf("token %s: accepted %v, want %v", p.Name, p.Name != "", want)
		}
	}
	if got, n := a.Unconfirmed(), a.Usable(now); got != 1 || n != 1 {
		t.Fatalf("Unconfirmed %d, Usable %d; want 1, 1", got, n)
	}
	c.refuse["unsure"] = fmt.Errorf("%w: look-up 2 failed differently", rotation.ErrHistoryUnconfirmed)
	refresh()
	if n := strings.Count(logs.String(), "level=ERROR msg=\"API token refused"); n != 1 {
		t.Fatalf("%d ERROR lines for the forged token over two refreshes, want 1:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "level=WARN msg=\"API token not accepted until a transparency log confirms it\""); n != 1 {
		t.Fatalf("%d WARN lines for the unconfirmed token over two refreshes, want 1:\n%s", n, logs.String())
	}
	delete(c.refuse, "unsure")
	refresh()
	if p, _ := a.Authenticate("Bearer "+unsure, now); p.Name != "unsure" {
		t.Fatal("a token confirmed at a later refresh is not accepted")
	}
	if a.Unconfirmed() != 0 || !strings.Contains(logs.String(), "level=INFO msg=\"API token no longer refused (backed now, or no longer stored as usable)\"") {
		t.Fatalf("after confirmation: Unconfirmed %d, logs:\n%s", a.Unconfirmed(), logs.String())
	}
}
