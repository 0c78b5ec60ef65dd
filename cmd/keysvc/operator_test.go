package main

import (
	"encoding/json"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestOperatorView: what issue 16 asks an operator to see — the build
// (keysvc version, --version, /healthz, keysvc_build_info), one log line
// per lifecycle change with actor, key, kid and reason, the exact change an
// approver grants, and what tokens revoke did.
func TestOperatorView(t *testing.T) {
	out, errOut, code := runCLI(t, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "keysvc ") || !strings.Contains(out, "\ngo: "+runtime.Version()+"\n") || !strings.Contains(out, "\nrevision: ") {
		t.Fatalf("keysvc version: exit %d\n%s%s", code, out, errOut)
	}
	if raceEnabled && !strings.Contains(out, "build: -race=true\n") {
		t.Errorf("keysvc version of a -race build does not say so:\n%s", out)
	}
	if v, _, code := runCLI(t, nil, "--version"); code != 0 || v != out {
		t.Errorf("keysvc --version: exit %d\n%s\nwant\n%s", code, v, out)
	}
	jsonOut, _, code := runCLI(t, nil, "version", "--json")
	var build struct {
		Version, Revision, Time string
		GoVersion               string `json:"go_version"`
		Flags                   []string
	}
	if err := json.Unmarshal([]byte(jsonOut), &build); code != 0 || err != nil || build.GoVersion != runtime.Version() {
		t.Fatalf("keysvc version --json: exit %d %v\n%s", code, err, jsonOut)
	}

	dir := t.TempDir()
	srv := startServer(t, nil, "--dev", "--data-dir", dir)
	_, body := httpGet(t, srv.URL+"/healthz")
	var health struct {
		Status string
		Build  struct {
			Version, Revision string
			GoVersion         string `json:"go_version"`
		}
	}
	if err := json.Unmarshal([]byte(body), &health); err != nil || health.Status != "ok" || health.Build.Version != build.Version ||
		health.Build.Revision != build.Revision || health.Build.GoVersion != runtime.Version() {
		t.Errorf("/healthz: %v %s", err, body)
	}
	_, metrics := httpGet(t, srv.URL+"/metrics")
	if want := `keysvc_build_info{go_version="` + runtime.Version() + `",revision="` + build.Revision + `",version="` + build.Version + `"} 1`; !strings.Contains(metrics, want+"\n") {
		t.Errorf("/metrics lacks %s", want)
	}

	env := []string{"KEYSVC_DATA_DIR=" + dir, "KEYSVC_SERVER=" + srv.URL, "KEYSVC_TOKEN="}
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, code := runCLI(t, env, args...)
		if code != 0 {
			t.Fatalf("keysvc %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	cli("keys", "create", "villa", "--issuer", "villa.example", "--two-person-rule", "--rotation-period", "2160h", "--reason", "new rental")
	out = cli("keys", "rotate", "villa", "--now", "--yes", "--reason", "INC-7: laptop lost")
	active := regexp.MustCompile(`active:  (\S+)`).FindStringSubmatch(out)
	if active == nil {
		t.Fatalf("rotate --now printed no active kid:\n%s", out)
	}
	// A lifecycle change made directly logs its line, with the reason (an
	// immediate rotation arms the new version at once; the scheduler
	// records the activation it armed, ADR 0014).
	var logged bool
	for deadline := time.Now().Add(5 * time.Second); !logged && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, line := range strings.Split(srv.stderr.String(), "\n") {
			var l struct{ Msg, Action, Actor, Key, KID, Reason string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "lifecycle change" && l.Action == "version.arm" &&
				l.Key == "villa" && l.KID == active[1] && l.Reason == "INC-7: laptop lost" && strings.HasSuffix(l.Actor, "(dev)") {
				logged = true
			}
		}
	}
	if !logged {
		t.Errorf("no lifecycle change line for arming %s with its reason:\n%s", active[1], srv.stderr.String())
	}

	// Two-person rule: switching it off is filed; the approver sees the diff.
	out = cli("keys", "policy", "villa", "--two-person-rule=false", "--reason", "pilot over")
	if !strings.Contains(out, "two-person rule: approval ") {
		t.Fatalf("keys policy under the two-person rule:\n%s", out)
	}
	out = cli("approvals", "list")
	if !regexp.MustCompile(`^approval [0-9a-f]{16} \(pending, expires [^)]+\)
  action:       change the rotation policy \(keysvc keys policy\)
  key:          villa
  version:      -
  requested by: token:[0-9a-f]+\(dev\) at \S+
  reason:       "pilot over"
  change:       two_person_rule: true -> false
$`).MatchString(out) {
		t.Errorf("approvals list:\n%s", out)
	}
	var list []struct{ Action, Key, Status string }
	if err := json.Unmarshal([]byte(cli("approvals", "list", "--json")), &list); err != nil || len(list) != 1 || list[0].Action != "policy" || list[0].Status != "pending" {
		t.Errorf("approvals list --json: %v %+v", err, list)
	}

	// tokens revoke says what it did, on standard output.
	tok := cli("tokens", "create", "--name", "node-1", "--scope", "sign:villa", "--data-dir", dir)
	var id string
	for _, line := range strings.Split(cli("tokens", "list"), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == "node-1" {
			id = f[0]
		}
	}
	if id == "" || !strings.HasPrefix(tok, "ksv_") {
		t.Fatalf("token node-1 not listed (%q)", tok)
	}
	out = cli("tokens", "revoke", id, "--reason", "node retired")
	if !regexp.MustCompile(`^revoked token ` + id + ` \(node-1, scopes sign:villa\) at \S+; requests with it now get 401`).MatchString(out) {
		t.Errorf("tokens revoke printed %q", out)
	}
}
