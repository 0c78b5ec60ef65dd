package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIMistakes is issue 16's table of operator mistakes: typos,
// missing and stray arguments, missing reasons and confirmations, a server
// that is not there, the wrong token, the wrong kind of token, the wrong
// listener. Each must exit with its status (2: the command line is wrong
// and nothing was done; 1: the command ran and failed) and say what to do.
func TestCLIMistakes(t *testing.T) {
	dir := t.TempDir()
	if out, errOut, code := runCLI(t, nil, "migrate", "--data-dir", dir); code != 0 {
		t.Fatalf("migrate: %s%s", out, errOut)
	}
	signOnly, errOut, code := runCLI(t, nil, "tokens", "create", "--name", "node-1", "--scope", "sign:dev", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("tokens create: %s", errOut)
	}
	signOnly = strings.TrimSpace(signOnly)
	srv := startServer(t, nil, "--dev", "--data-dir", dir, "--admin-listen", "127.0.0.1:0")
	env := []string{"KEYSVC_DATA_DIR=" + dir, "KEYSVC_SERVER=" + srv.AdminURL, "KEYSVC_TOKEN=", "KEYSVC_TOKEN_FILE="}
	missing := filepath.Join(t.TempDir(), "nonexistent")
	yaml := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(yaml, []byte("listen: 127.0.0.1:8080\nlisten-adress: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name string
		env  []string
		args []string
		code int
		want []string // every one in stderr
	}{
		// Typos in command names: exit 2 with the command meant.
		{"audit verfy", nil, []string{"audit", "verfy"}, 2, []string{`unknown command "verfy"`, `did you mean "keysvc audit verify"`}},
		{"keys lst", nil, []string{"keys", "lst"}, 2, []string{`did you mean "keysvc keys list"`}},
		{"srve", nil, []string{"srve"}, 2, []string{`did you mean "keysvc serve"`}},
		{"tokens craete", nil, []string{"tokens", "craete"}, 2, []string{`did you mean "keysvc tokens create"`}},
		{"approvals aprove", nil, []string{"approvals", "aprove"}, 2, []string{`did you mean "keysvc approvals approve"`}},
		{"config chek", nil, []string{"config", "chek"}, 2, []string{`did you mean "keysvc config check"`}},
		{"keys frobnicate", nil, []string{"keys", "frobnicate"}, 2, []string{`unknown command "frobnicate"`, "commands: activate, backend, create"}},
		{"versoin", nil, []string{"versoin"}, 2, []string{`did you mean "keysvc version"`}},
		{"group without command", nil, []string{"audit"}, 2, []string{`"keysvc audit" needs a command: list, verify`}},
		{"keys without command", nil, []string{"keys"}, 2, []string{`"keysvc keys" needs a command`, "rotate"}},
		{"help on no command", nil, []string{"help", "keys", "rotat"}, 2, []string{`no help topic "keys rotat"`}},

		// Typos in flags.
		{"--jsn", nil, []string{"keys", "list", "--jsn"}, 2, []string{"unknown flag: --jsn", "did you mean --json?"}},
		{"--dat-dir", nil, []string{"audit", "verify", "--dat-dir", dir}, 2, []string{"did you mean --data-dir?"}},
		{"--nwo", nil, []string{"keys", "rotate", "dev", "--nwo"}, 2, []string{"did you mean --now?"}},
		{"--compromised", nil, []string{"keys", "revoke", "k", "--compromised", "x"}, 2, []string{"did you mean --compromised-at?"}},
		{"mistyped command before a flag of it", nil, []string{"audit", "verfy", "--data-dir", "/nonexistent"}, 2, []string{`unknown command "verfy" for "keysvc audit" (did you mean "keysvc audit verify"?)`}},
		{"bad flag value", nil, []string{"keys", "destroy", "k", "--pending-days", "ten"}, 2, []string{`invalid argument "ten"`, "keysvc keys destroy --help"}},

		// Missing and stray arguments.
		{"versions without NAME", nil, []string{"keys", "versions"}, 2, []string{`"keysvc keys versions" needs NAME`}},
		{"create without NAME", nil, []string{"keys", "create", "--issuer", "example.com"}, 2, []string{"needs NAME"}},
		{"revoke without KID", nil, []string{"keys", "revoke"}, 2, []string{"needs KID"}},
		{"approve without ID", nil, []string{"approvals", "approve"}, 2, []string{"needs ID"}},
		{"config check without FILE", nil, []string{"config", "check"}, 2, []string{"needs FILE"}},
		{"tokens revoke without ID", nil, []string{"tokens", "revoke"}, 2, []string{"needs ID"}},
		{"stray argument", nil, []string{"keys", "list", "extra"}, 2, []string{`takes no arguments, got "extra"`}},
		{"second argument", nil, []string{"keys", "versions", "a", "b"}, 2, []string{`unexpected "b"`}},
		{"version with argument", nil, []string{"version", "now"}, 2, []string{"takes no arguments"}},
		{"verify without receipt (exit 1, as documented)", nil, []string{"verify"}, 1, []string{"needs RECEIPT.json"}},

		// Missing required flags and bad values.
		{"create without --issuer", nil, []string{"keys", "create", "villa"}, 2, []string{"needs --issuer"}},
		{"revoke without --compromised-at", nil, []string{"keys", "revoke", "k", "--reason", "x"}, 2, []string{"needs --compromised-at"}},
		{"backend without --to", nil, []string{"keys", "backend", "dev"}, 2, []string{"needs --to"}},
		{"tokens create without --scope", nil, []string{"tokens", "create", "--name", "alice"}, 2, []string{"at least one --scope", "--scope admin:keys"}},
		{"unknown scope", nil, []string{"tokens", "create", "--name", "alice", "--scope", "admin:all"}, 2, []string{`unknown scope "admin:all"`, "admin:revoke"}},
		{"token name", nil, []string{"tokens", "create", "--name", "Alice Smith", "--scope", "admin:keys"}, 2, []string{"lower-case letters"}},
		{"approvals --status", nil, []string{"approvals", "list", "--status", "open"}, 2, []string{"give pending, approved, expired"}},
		{"compromised-at not RFC 3339", nil, []string{"keys", "revoke", "k", "--compromised-at", "yesterday", "--reason", "x", "--yes"}, 2, []string{"not RFC 3339: give e.g. 20"}},
		{"pending-days", nil, []string{"keys", "destroy", "k", "--reason", "x", "--yes", "--pending-days", "3"}, 2, []string{"--pending-days must be 7 to 30"}},

		// Irreversible and emergency actions: a reason, then a confirmation.
		{"destroy without --reason", nil, []string{"keys", "destroy", "k"}, 2, []string{"needs --reason TEXT"}},
		{"destroy without --yes", nil, []string{"keys", "destroy", "k", "--reason", "past retention"}, 2, []string{"cannot be undone: add --yes"}},
		{"revoke without --reason", nil, []string{"keys", "revoke", "k", "--compromised-at", "2026-11-29T10:00:00Z"}, 2, []string{"needs --reason TEXT"}},
		{"revoke without --yes", nil, []string{"keys", "revoke", "k", "--compromised-at", "2026-11-29T10:00:00Z", "--reason", "leak"}, 2, []string{"add --yes"}},
		{"rotate without a mode", nil, []string{"keys", "rotate", "dev"}, 2, []string{"exactly one of --scheduled", "--now"}},
		{"rotate --now without --reason", nil, []string{"keys", "rotate", "dev", "--now"}, 2, []string{"needs --reason TEXT", "emergency rotation"}},
		{"rotate --now without --yes", nil, []string{"keys", "rotate", "dev", "--now", "--reason", "INC-1"}, 2, []string{"add --yes"}},
		{"activate --emergency without --reason", nil, []string{"keys", "activate", "k", "--emergency"}, 2, []string{"--emergency needs --reason"}},
		{"audit verify --tlog-url without the event key", nil, []string{"audit", "verify", "--data-dir", missing, "--tlog-url", "https://log.example.com"}, 2, []string{"only with --anchor-key-file"}},
		{"audit verify --tlog-log-keys without the event key", nil, []string{"audit", "verify", "--data-dir", missing, "--tlog-log-keys", "keys.json"}, 2, []string{"only with --anchor-key-file"}},
		{"audit verify --scan without the event key", nil, []string{"audit", "verify", "--data-dir", missing, "--scan"}, 2, []string{"only with --anchor-key-file"}},
		{"audit verify --scan without log keys", nil, []string{"audit", "verify", "--data-dir", missing, "--anchor-key-file", "k.json", "--tlog-url", "https://log.example.com", "--scan"}, 2, []string{"--scan needs --tlog-log-keys"}},
		{"anchor check --witness-keys without --scan", nil, []string{"anchor", "check", "--data-dir", missing, "--anchor-key-file", "k.json", "--tlog-url", "https://log.example.com", "--tlog-log-keys", "keys.json", "--witness-keys", "w.txt"}, 2, []string{"apply to the trees --scan reads"}},
		{"anchor check --witnesses-required 0", nil, []string{"anchor", "check", "--data-dir", missing, "--anchor-key-file", "k.json", "--tlog-url", "https://log.example.com", "--tlog-log-keys", "keys.json", "--scan", "--witness-keys", "w.txt", "--witnesses-required", "0"}, 2, []string{"--witnesses-required must be at least 1"}},
		{"anchor check --max-tree-age without --scan", nil, []string{"anchor", "check", "--data-dir", missing, "--anchor-key-file", "k.json", "--tlog-url", "https://log.example.com", "--tlog-log-keys", "keys.json", "--max-tree-age", "2h"}, 2, []string{"apply to the trees --scan reads"}},
		{"anchor check --max-tree-age negative", nil, []string{"anchor", "check", "--data-dir", missing, "--anchor-key-file", "k.json", "--tlog-url", "https://log.example.com", "--tlog-log-keys", "keys.json", "--scan", "--max-tree-age", "-1h"}, 2, []string{"--max-tree-age must not be negative"}},
		{"tlog audit --max-tree-age negative", nil, []string{"tlog", "audit", "https://log.example.com", "--log-key", "log.example.com+12345678+AQ", "--max-tree-age", "-1s"}, 2, []string{"--max-tree-age must not be negative"}},
		{"tlog audit --witnesses-required negative", nil, []string{"tlog", "audit", "https://log.example.com", "--log-key", "log.example.com+12345678+AQ", "--witnesses-required", "-1"}, 2, []string{"--witnesses-required must not be negative"}},
		{"tlog audit --witnesses-required over the witness keys", nil, []string{"tlog", "audit", "https://log.example.com", "--log-key", "log.example.com+12345678+AQ", "--witnesses-required", "1"}, 2, []string{"--witnesses-required 1 needs at least 1 --witness-key"}},
		{"tlog audit without --log-key (exit 2: could not run; 1 is INCONSISTENT alone)", nil, []string{"tlog", "audit", "https://log.example.com"}, 2, []string{"--log-key is required", "keysvc tlog audit --help"}},
		{"tlog audit with a --log-key that is not a verifier key", nil, []string{"tlog", "audit", "https://log.example.com", "--log-key", "not-a-key"}, 2, []string{`--log-key "not-a-key"`}},
		{"tlog audit without URL", nil, []string{"tlog", "audit", "--log-key", "log.example.com+12345678+AQ"}, 2, []string{"needs URL"}},
		{"anchor check without a log", nil, []string{"anchor", "check", "--data-dir", missing, "--anchor-key-file", "k.json"}, 2, []string{"--anchor-key-file and --tlog-url are required"}},
		{"audit verify --scan without a log", nil, []string{"audit", "verify", "--data-dir", missing, "--anchor-key-file", "k.json", "--tlog-log-keys", "keys.json", "--scan"}, 2, []string{"--anchor-key-file needs --tlog-url"}},
		{"anchor check --scan without log keys", nil, []string{"anchor", "check", "--data-dir", missing, "--anchor-key-file", "k.json", "--tlog-url", "https://log.example.com", "--scan"}, 2, []string{"--scan needs --tlog-log-keys", "keys it does not serve itself"}},

		// Key history that is not there: nothing is created.
		{"audit verify on a missing data dir", nil, []string{"audit", "verify", "--data-dir", missing}, 1, []string{"no key history at " + missing, "--data-dir"}},
		{"tokens list on a missing data dir", nil, []string{"tokens", "list", "--data-dir", missing}, 1, []string{"no key history", "keysvc serve --dev"}},
		{"unknown token id", nil, []string{"tokens", "revoke", "nosuchtoken"}, 1, []string{`no token with id "nosuchtoken"`, "keysvc tokens list"}},

		// serve refuses before it creates anything.
		{"serve on port 99999", nil, []string{"serve", "--dev", "--listen", "127.0.0.1:99999", "--data-dir", missing}, 1, []string{"--listen", "not a number from 0 to 65535"}},
		{"serve without a port", nil, []string{"serve", "--listen", "localhost", "--data-dir", missing}, 1, []string{"want HOST:PORT"}},
		{"serve listeners on one address", nil, []string{"serve", "--listen", "127.0.0.1:26011", "--admin-listen", "127.0.0.1:26011", "--data-dir", missing}, 1, []string{"each listener needs its own address"}},
		{"serve on a locked data dir", nil, []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dir}, 1, []string{"in use by another keysvc serve", "--postgres-url"}},
		{"config file with an unknown key", nil, []string{"config", "check", yaml}, 1, []string{"listen-adress"}},

		// Tokens and servers.
		{"token with Bearer prefix", []string{"KEYSVC_TOKEN=Bearer ksv_x"}, []string{"keys", "list"}, 1, []string{`starts with "Bearer "`, "give the token alone"}},
		{"no token", []string{"KEYSVC_DATA_DIR=" + missing}, []string{"keys", "list"}, 1, []string{"no token", "keysvc serve --dev"}},
		{"server not running", []string{"KEYSVC_SERVER=http://127.0.0.1:1"}, []string{"keys", "list"}, 1, []string{"cannot reach keysvc at http://127.0.0.1:1", "keysvc serve --dev", "--server"}},
		{"unknown token", []string{"KEYSVC_TOKEN=ksv_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}, []string{"keys", "list"}, 1, []string{"unauthorized", "refused the token from KEYSVC_TOKEN"}},
		{"signing token on the admin API", []string{"KEYSVC_TOKEN=" + signOnly}, []string{"keys", "list"}, 1, []string{"token lacks scope admin:keys", "keysvc tokens create"}},
		{"admin command on the public listener", []string{"KEYSVC_SERVER=" + srv.URL}, []string{"keys", "list"}, 1, []string{"no route for GET /v1/keys on this listener", "admin listener", "--server " + srv.URL}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runCLI(t, append(append([]string{}, env...), c.env...), c.args...)
			if code != c.code {
				t.Errorf("keysvc %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(c.args, " "), code, c.code, out, errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("keysvc %s: stderr lacks %q:\n%s", strings.Join(c.args, " "), w, errOut)
				}
			}
			if c.code == 2 && !strings.Contains(errOut, "--help' for usage.") {
				t.Errorf("keysvc %s: usage error without the help hint:\n%s", strings.Join(c.args, " "), errOut)
			}
		})
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("%s was created by a failing command (stat: %v)", missing, err)
	}

	// curl without "Bearer ": the API says how the header looks.
	tok, err := os.ReadFile(filepath.Join(dir, devTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.AdminURL+"/v1/keys", nil)
	req.Header.Set("Authorization", strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if want := `{"error":{"code":"unauthorized","message":"the Authorization header must be \"Bearer \u003ctoken\u003e\" (the word Bearer, a space, the token)"}}`; resp.StatusCode != 401 || strings.TrimSpace(string(body)) != want {
		t.Errorf("no Bearer prefix: %d %s, want 401 %s", resp.StatusCode, body, want)
	}
}
