package main

import (
	"context"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/client"
)

// TestActivationCLI (issue 13, item 3) with the real binary and a JWKS
// max-age of 5 s: `keys rotate` without --scheduled or --now does nothing;
// `keys activate` of a version published a moment ago is refused
// (activation_too_early); `--emergency --reason` activates it and the audit
// trail says emergency.
func TestActivationCLI(t *testing.T) {
	e := newLifecycleEnv(t, "")
	srv := startServer(t, nil, "--data-dir", e.dir, "--kek-file", e.kek, "--jwks-max-age", "5s")
	ctx := context.Background()
	c := client.New(srv.URL, e.token)
	if _, _, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se"}); err != nil {
		t.Fatal(err)
	}
	env := []string{"KEYSVC_TOKEN=" + e.token}
	cli := func(args ...string) (string, string, int) {
		return runCLI(t, env, append(args, "--server", srv.URL)...)
	}
	if _, errOut, code := cli("keys", "rotate", "villa", "--reason", "quarterly"); code != 2 || !strings.Contains(errOut, "--scheduled") {
		t.Fatalf("keys rotate without a mode: exit %d %s", code, errOut)
	}
	if vs, _ := c.Versions(ctx, "villa"); len(vs) != 1 {
		t.Fatalf("keys rotate without a mode made versions: %+v", vs)
	}
	out, errOut, code := cli("keys", "rotate", "villa", "--scheduled", "--reason", "quarterly", "--json")
	if code != 0 {
		t.Fatalf("keys rotate --scheduled: %s", errOut)
	}
	kid := between(out, `"kid": "`, `"`)
	if _, errOut, code := cli("keys", "activate", kid, "--reason", "sooner"); code != 1 || !strings.Contains(errOut, "activation_too_early") {
		t.Fatalf("keys activate 0 s after publication: exit %d %s", code, errOut)
	}
	if _, errOut, code := cli("keys", "activate", kid, "--emergency"); code != 2 || !strings.Contains(errOut, "--reason") {
		t.Fatalf("keys activate --emergency without a reason: exit %d %s", code, errOut)
	}
	if out, errOut, code := cli("keys", "activate", kid, "--emergency", "--reason", "INC-9"); code != 0 || !strings.Contains(out, "active: "+kid) {
		t.Fatalf("keys activate --emergency: exit %d %s%s", code, out, errOut)
	}
	audit, _, _ := runCLI(t, nil, "audit", "list", "--json", "--data-dir", e.dir)
	if !strings.Contains(audit, `"emergency": true`) || !strings.Contains(audit, `"reason": "INC-9"`) {
		t.Errorf("the emergency activation is not audited as such:\n%s", audit)
	}
}

// between returns the text of s between the first from and the next to.
func between(s, from, to string) string {
	_, rest, _ := strings.Cut(s, from)
	v, _, _ := strings.Cut(rest, to)
	return v
}
