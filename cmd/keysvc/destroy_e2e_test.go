package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/backends/pkcs11/softhsmtest"
	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/internal/pgtest"
	"github.com/keysvc/keysvc/store"
)

// TestDestroyTwoPersonE2E drives key-material destruction through the real
// binary on both stores: under the key's two-person rule `keysvc keys
// destroy` by one officer only files an approval, which that officer cannot
// grant (same_principal) and which does not destroy anything; a second
// officer's `keysvc approvals approve` destroys it. The audit trail names
// both; `keysvc verify` still fully verifies a receipt signed by the
// destroyed version, lifecycle-aware (--history) and plain (--jwks).
func TestDestroyTwoPersonE2E(t *testing.T) {
	for _, st := range []string{"sqlite", "postgres"} {
		t.Run(st, func(t *testing.T) {
			pgURL := ""
			if st == "postgres" {
				pgURL = pgtest.URL(t)
			}
			destroyTwoPerson(t, newLifecycleEnv(t, pgURL))
		})
	}
}

func destroyTwoPerson(t *testing.T, e *lifecycleEnv) {
	ctx := context.Background()
	srv := e.serve(t)
	out, errOut, code := runCLI(t, e.env, "tokens", "create", "--name", "bob", "--scope", "admin:revoke", "--data-dir", e.dir)
	if code != 0 {
		t.Fatalf("tokens create: %s%s", out, errOut)
	}
	alice := append(append([]string{}, e.env...), "KEYSVC_TOKEN="+e.token, "KEYSVC_SERVER="+srv.URL)
	bob := append(append([]string{}, e.env...), "KEYSVC_TOKEN="+strings.TrimSpace(out), "KEYSVC_SERVER="+srv.URL)

	c := client.New(srv.URL, e.token)
	if _, _, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se",
		Policy: &client.Policy{TwoPersonRule: true}}); err != nil {
		t.Fatal(err)
	}
	res, err := c.MCPTransport(ctx, "villa", client.TransportRequest{Tool: "get_verified_stay_offer", Arguments: map[string]any{"guests": 2},
		OfferRef: "offer:villaakerlyckan.se:2026-09-02/05"})
	if err != nil {
		t.Fatal(err)
	}
	v1 := res.KID
	time.Sleep(1100 * time.Millisecond) // whole-second served_at: the signature lies inside v1's window
	active, _, err := c.Rotate(ctx, "villa", "retire v1")
	if err != nil {
		t.Fatal(err)
	}

	// The active version is refused outright.
	out, errOut, code = runCLI(t, alice, "keys", "destroy", active.KID, "--reason", "x", "--yes")
	if code == 0 || !strings.Contains(errOut, "invalid_transition") {
		t.Fatalf("keys destroy of the active version: exit %d\n%s%s", code, out, errOut)
	}

	// One officer: an approval request, nothing destroyed.
	out, errOut, code = runCLI(t, alice, "keys", "destroy", v1, "--reason", "INC-11: retire old material", "--pending-days", "14", "--yes")
	m := regexp.MustCompile(`two-person rule: approval ([0-9a-f]{16}) requested`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("keys destroy under the two-person rule: exit %d\n%s%s", code, out, errOut)
	}
	id := m[1]
	destroyedAt := func() string {
		t.Helper()
		out, errOut, code := runCLI(t, alice, "keys", "versions", "villa", "--json")
		var vs []client.Version
		if code != 0 || json.Unmarshal([]byte(out), &vs) != nil {
			t.Fatalf("keys versions: exit %d\n%s%s", code, out, errOut)
		}
		for _, v := range vs {
			if v.KID == v1 {
				return v.MaterialDestroyedAt
			}
		}
		t.Fatalf("no %s in %s", v1, out)
		return ""
	}
	if at := destroyedAt(); at != "" {
		t.Fatalf("a request alone destroyed %s at %s", v1, at)
	}
	out, errOut, code = runCLI(t, alice, "approvals", "approve", id)
	if code == 0 || !strings.Contains(errOut, "same_principal") {
		t.Fatalf("self-approval: exit %d\n%s%s", code, out, errOut)
	}
	if at := destroyedAt(); at != "" {
		t.Fatalf("a self-approval destroyed %s at %s", v1, at)
	}
	out, errOut, code = runCLI(t, bob, "approvals", "list")
	if code != 0 || !regexp.MustCompile(`approval `+id+` \(pending, expires [^)]+\)\n  action:       destroy key material \(keysvc keys destroy\)\n  key:          villa\n  version:      `+regexp.QuoteMeta(v1)+`\n  requested by: token:[0-9a-f]+\(officer\) at [^\n]+\n  reason:       "INC-11: retire old material"\n  change:       private key material destroyed; --pending-days 14 \(the AWS KMS deletion window\)\n`).MatchString(out) {
		t.Fatalf("approvals list: exit %d\n%s%s", code, out, errOut)
	}

	// SQLite: remember the sealed key, to look for it in the files afterwards.
	var sealed []byte
	sqlitePath := filepath.Join(e.dir, "keysvc.db")
	if len(e.env) == 0 {
		st, err := store.Open(ctx, store.Config{SQLitePath: sqlitePath})
		if err != nil {
			t.Fatal(err)
		}
		v, err := st.GetVersion(ctx, v1)
		st.Close()
		if err != nil || len(v.SealedPrivateKey) < 32 {
			t.Fatalf("sealed key of %s: %v (%d bytes)", v1, err, len(v.SealedPrivateKey))
		}
		sealed = v.SealedPrivateKey
	}

	// A second officer: destroyed.
	out, errOut, code = runCLI(t, bob, "approvals", "approve", id)
	if code != 0 || !strings.Contains(out, "destroyed: key material of "+v1+" (retired, backend software)") {
		t.Fatalf("approve: exit %d\n%s%s", code, out, errOut)
	}
	if at := destroyedAt(); at == "" {
		t.Fatalf("%s not destroyed after the second officer's approval", v1)
	}
	// With the server still running, no file of the data directory holds
	// the sealed key any more: not the database (secure_delete), not its
	// WAL (checkpointed and truncated by the store's Scrub).
	if sealed != nil {
		files, _ := filepath.Glob(sqlitePath + "*")
		if len(files) == 0 {
			t.Fatalf("no database files at %s", sqlitePath)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, sealed) {
				t.Errorf("%s still holds the sealed key of destroyed %s", f, v1)
			}
		}
	}
	out, errOut, code = runCLI(t, bob, "approvals", "list", "--status", "")
	if code != 0 || !regexp.MustCompile(`approval `+id+` \(approved, expires [^)]+\)\n  action:       destroy key material \(keysvc keys destroy\)\n  key:          villa\n  version:      `+regexp.QuoteMeta(v1)+`\n(?s:.*)  decided by:   token:[0-9a-f]+\(bob\) at `).MatchString(out) {
		t.Fatalf("approvals list after approval: exit %d\n%s%s", code, out, errOut)
	}

	// The audit trail names both principals.
	out, errOut, code = runCLI(t, e.env, "audit", "list", "--key", "villa", "--json", "--data-dir", e.dir)
	var events []struct {
		Action, Actor, KID, Reason string
		Details                    map[string]any
	}
	if code != 0 || json.Unmarshal([]byte(out), &events) != nil {
		t.Fatalf("audit list: exit %d\n%s%s", code, out, errOut)
	}
	var trail []string
	for _, ev := range events {
		if ev.KID != v1 || (!strings.HasPrefix(ev.Action, "approval.") && ev.Action != "version.destroy_material") {
			continue
		}
		trail = append(trail, ev.Action)
		switch ev.Action {
		case "approval.request":
			if !strings.HasSuffix(ev.Actor, "(officer)") || ev.Reason != "INC-11: retire old material" {
				t.Errorf("approval.request %+v", ev)
			}
		case "approval.grant":
			if !strings.HasSuffix(ev.Actor, "(bob)") {
				t.Errorf("approval.grant %+v", ev)
			}
		case "version.destroy_material":
			rb, _ := ev.Details["requested_by"].(string)
			ab, _ := ev.Details["approved_by"].(string)
			if !strings.HasSuffix(ev.Actor, "(bob)") || !strings.Contains(ev.Actor, " approved by ") || rb == "" || ab == "" || rb == ab ||
				ev.Details["approval"] != id || ev.Details["pending_days"] != float64(14) || ev.Details["backend"] != "software" {
				t.Errorf("version.destroy_material %+v", ev)
			}
		}
	}
	if strings.Join(trail, ",") != "approval.request,approval.grant,version.destroy_material" {
		t.Fatalf("audit trail of %s: %v", v1, trail)
	}
	if out, errOut, code := runCLI(t, e.env, "audit", "verify", "--data-dir", e.dir); code != 0 || !strings.Contains(out, "audit chain intact") {
		t.Fatalf("audit verify: %d %s%s", code, out, errOut)
	}

	// The destroyed version's receipt still verifies.
	history, err := c.History(ctx, "villa")
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := c.JWKS(ctx, "villa")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	historyFile, jwksFile := filepath.Join(dir, "history.json"), filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(historyFile, history, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jwksFile, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	receipt := writeJSON(t, dir, "receipt.json", map[string]any{
		"vrp_receipt_version": "1.0", "subject": map[string]any{"property": "villaakerlyckan.se"},
		"issuer": map[string]any{"node": "villaakerlyckan.se"}, "attestations": []any{res.Attestation},
	})
	for _, src := range [][]string{{"--history", historyFile}, {"--history", srv.URL + "/v1/keys/villa/history.json"}, {"--jwks", jwksFile}} {
		out, errOut, code := runCLI(t, nil, append([]string{"verify", receipt, "--json"}, src...)...)
		var vr struct {
			Attestations []struct {
				Status string `json:"status"`
				Error  any    `json:"error"`
			} `json:"attestations"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &vr) != nil || len(vr.Attestations) != 1 || vr.Attestations[0].Status != "verified" {
			t.Fatalf("keysvc verify %v of a receipt signed by the destroyed %s: exit %d\n%s%s", src, v1, code, out, errOut)
		}
	}
}

// TestDestroyCrashBeforeCommit shows the ordering of ADR 0010 on a real
// SoftHSM2 token: serve is killed (SIGKILL, fault-injection point
// destroy.before-commit) after the token destroyed a version's private key
// but before key history recorded it. Key history then still says the
// material exists; the same request on the restarted service finds the
// object gone, succeeds (already_destroyed) and records the destruction.
func TestDestroyCrashBeforeCommit(t *testing.T) {
	tk := softhsmtest.New(t)
	e := newLifecycleEnv(t, "")
	args := append([]string{"--data-dir", e.dir, "--kek-file", e.kek, "--jwks-max-age", "0s"}, pkcs11Args(tk, writePIN(t, e.dir, tk.PIN))...)
	ctx := context.Background()

	first := startServer(t, []string{tk.Env(), "KEYSVC_TEST_CRASH_AT=destroy.before-commit"}, args...)
	c := client.New(first.URL, e.token)
	_, v1, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se", Backend: "pkcs11"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Rotate(ctx, "villa", "retire v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DestroyVersion(ctx, v1.KID, "crash drill", 0); err == nil {
		t.Fatal("destroy answered although serve was to die before the commit")
	}
	select {
	case err := <-first.done:
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("serve exited with %v, want SIGKILL at the crash point", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not die at the crash point")
	}

	srv := startServer(t, []string{tk.Env()}, args...)
	c = client.New(srv.URL, e.token)
	vs, err := c.Versions(ctx, "villa")
	if err != nil || vs[0].KID != v1.KID || vs[0].MaterialDestroyedAt != "" {
		t.Fatalf("after the crash key history must not record the destruction yet: %+v %v", vs, err)
	}
	d, err := c.DestroyVersion(ctx, v1.KID, "crash drill, again", 0)
	if err != nil || !d.AlreadyDestroyed || !strings.Contains(d.Note, "already absent") || d.Version.MaterialDestroyedAt == "" {
		t.Fatalf("destroy after the crash: %+v %v", d, err)
	}
	if _, err := c.Sign(ctx, "villa", map[string]any{"n": 1}, ""); err != nil {
		t.Fatalf("sign with the active version: %v", err)
	}
	out, errOut, code := runCLI(t, e.env, "audit", "list", "--key", "villa", "--json", "--data-dir", e.dir)
	if code != 0 || strings.Count(out, `"version.destroy_material"`) != 1 || !strings.Contains(out, `"already_destroyed": true`) {
		t.Fatalf("audit after the retried destruction: exit %d\n%s%s", code, out, errOut)
	}
}
