package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigCheck: a YAML file sets serve's options, KEYSVC_* variables
// override it, unknown keys and bad values are errors, and the printed
// effective configuration redacts the database password.
func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", `
listen: 127.0.0.1:9000
admin-listen: 127.0.0.1:9002
jwks-max-age: 2m
rate-limit: 500
postgres-url: postgres://keysvc:s3cretpw@db.internal:5432/keysvc
`)
	out, errOut, code := runCLI(t, []string{"KEYSVC_RATE_LIMIT=750"}, "config", "check", good)
	if code != 0 {
		t.Fatalf("config check: %d %s", code, errOut)
	}
	for _, want := range []string{`listen: "127.0.0.1:9000"`, `admin-listen: "127.0.0.1:9002"`, `jwks-max-age: "2m0s"`,
		`rate-limit: "750"`, `postgres-url: "postgres://keysvc:REDACTED@db.internal:5432/keysvc"`, `sign-listen: ""`} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("effective configuration lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "s3cretpw") {
		t.Fatal("the database password was printed")
	}
	for name, c := range map[string]struct{ text, want string }{
		"unknown key":          {"listen: 127.0.0.1:9000\nlisten_adress: x\n", "unknown key(s) listen_adress"},
		"bad duration":         {"jwks-max-age: soon\n", "configuration jwks-max-age"},
		"over the cap":         {"jwks-max-age: 10m\n", "VRP §3.1"},
		"not yaml":             {"listen: [\n", "config file"},
		"tls without listener": {"admin-tls-cert: /x.pem\n", "need --admin-listen"},
	} {
		_, errOut, code := runCLI(t, nil, "config", "check", write(strings.ReplaceAll(name, " ", "-")+".yaml", c.text))
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, stderr %q, want it to mention %q", name, code, errOut, c.want)
		}
	}
}

// TestServeConfigFile: serve takes its options from --config, and a
// command-line flag wins over the file.
func TestServeConfigFile(t *testing.T) {
	e := newLifecycleEnv(t, "")
	cfg := filepath.Join(t.TempDir(), "keysvc.yaml")
	if err := os.WriteFile(cfg, []byte("data-dir: "+e.dir+"\nkek-file: "+e.kek+"\nlisten: 127.0.0.1:1\njwks-max-age: 1m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, nil, "--config", cfg) // startServer's --listen 127.0.0.1:0 wins over the file's port 1
	resp, body := httpGet(t, srv.URL+"/healthz")
	if resp != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("healthz %d %s", resp, body)
	}
	if !strings.Contains(srv.stderr.String(), `"store":"sqlite `+filepath.Join(e.dir, "keysvc.db")) {
		t.Fatalf("serve did not use the file's data-dir:\n%s", srv.stderr.String())
	}
}
