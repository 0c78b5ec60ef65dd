package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestTokenChangesAudited (issue 13, item 1): creating and revoking API
// tokens writes audit rows naming who did it (the operating-system user on
// the host running the CLI; "keysvc serve --dev" for the dev token), the
// token id and principal, never the secret; token names are principal
// names (lower case, no spaces), so one person cannot be two names.
func TestTokenChangesAudited(t *testing.T) {
	dir := t.TempDir()
	if _, errOut, code := runCLI(t, nil, "migrate", "--data-dir", dir); code != 0 {
		t.Fatal(errOut)
	}
	out, errOut, code := runCLI(t, nil, "tokens", "create", "--name", "alice", "--scope", "admin:revoke", "--reason", "new officer", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("tokens create: %s", errOut)
	}
	secret := strings.TrimSpace(out)
	list, _, _ := runCLI(t, nil, "tokens", "list", "--data-dir", dir)
	id := strings.Fields(strings.Split(strings.TrimSpace(list), "\n")[1])[0]
	if _, errOut, code := runCLI(t, nil, "tokens", "revoke", id, "--reason", "left the team", "--data-dir", dir); code != 0 {
		t.Fatalf("tokens revoke: %s", errOut)
	}
	for _, bad := range []string{"Alice", "alice smith", "", "-x", "al\u0456ce"} {
		if _, errOut, code := runCLI(t, nil, "tokens", "create", "--name", bad, "--scope", "admin:revoke", "--data-dir", dir); code == 0 {
			t.Errorf("tokens create --name %q succeeded", bad)
		} else if bad != "" && !strings.Contains(errOut, "token name must be") {
			t.Errorf("tokens create --name %q: %s", bad, errOut)
		}
	}
	if _, _, code := runCLI(t, nil, "tokens", "revoke", "nosuchtoken", "--data-dir", dir); code == 0 {
		t.Error("revoking an unknown token succeeded")
	}
	srv := startServer(t, nil, "--dev", "--data-dir", dir)
	time.Sleep(200 * time.Millisecond)
	srv.stop(t)

	out, errOut, code = runCLI(t, nil, "audit", "list", "--json", "--data-dir", dir)
	if code != 0 {
		t.Fatal(errOut)
	}
	if strings.Contains(out, secret) {
		t.Fatal("the audit trail holds a token secret")
	}
	var rows []struct {
		Actor, Action, Reason string
		Details               map[string]any
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		if !strings.HasPrefix(r.Action, "token.") {
			continue
		}
		got = append(got, r.Action+" "+r.Reason+" "+r.Details["name"].(string)+" "+r.Details["principal"].(string))
		switch r.Details["name"] {
		case "alice":
			if r.Details["token_id"] != id || !strings.HasPrefix(r.Actor, "cli:") || !strings.Contains(r.Actor, "@") {
				t.Errorf("row %+v", r)
			}
		case "dev":
			if r.Actor != "keysvc serve --dev" {
				t.Errorf("dev token row %+v", r)
			}
		}
	}
	want := []string{"token.create new officer alice principal:alice", "token.revoke left the team alice principal:alice", "token.create dev mode token dev principal:dev"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("token audit rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if out, _, code := runCLI(t, nil, "audit", "verify", "--data-dir", dir); code != 0 || !strings.Contains(out, "intact") {
		t.Errorf("audit verify: %d %s", code, out)
	}
}
