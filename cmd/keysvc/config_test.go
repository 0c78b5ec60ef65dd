package main

import (
	"net"
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
	kek := writeKEK(t, dir)
	good := write("good.yaml", `
kek-file: `+kek+`
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
	for _, want := range []string{`listen: "127.0.0.1:9000"  # from config file ` + good, `admin-listen: "127.0.0.1:9002"  # from config file ` + good,
		`jwks-max-age: 2m0s  # from config file ` + good, `rate-limit: 750  # from KEYSVC_RATE_LIMIT`, `rate-burst: 20000`, `migrate: true`,
		`default-prepublish: 0s  # 0s: twice jwks-max-age, 4m0s`, `tlog-url: []`,
		`postgres-url: "postgres://keysvc:REDACTED@db.internal:5432/keysvc"  # from config file ` + good, `sign-listen: ""`,
		"# OK: keysvc serve would accept " + good + " (checked: keys, values and this host's files; nothing was started)"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("effective configuration lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "s3cretpw") {
		t.Fatal("the database password was printed")
	}
	// An address in use (as by the serve this check precedes a restart of)
	// is not a problem.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	inUse := write("in-use.yaml", "kek-file: "+kek+"\nlisten: "+held.Addr().String()+"\n")
	if _, errOut, code := runCLI(t, nil, "config", "check", inUse); code != 0 {
		t.Errorf("config check with a listener address in use: exit %d\n%s", code, errOut)
	}
	loose := write("kek-644", "x")
	if err := os.Chmod(loose, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ text, want string }{
		"unknown key":                   {"listen: 127.0.0.1:9000\nlisten_adress: x\n", "unknown key(s) listen_adress"},
		"bad duration":                  {"jwks-max-age: soon\n", `key jwks-max-age: value "soon": invalid argument`},
		"over the cap":                  {"jwks-max-age: 10m\n", "VRP §3.1"},
		"not yaml":                      {"listen: [\n", "config file"},
		"tls without listener":          {"admin-tls-cert: /x.pem\n", "need --admin-listen"},
		"value rule names the YAML key": {"kek-file: " + kek + "\njwks-max-age: 10m\n", "(set by: YAML key jwks-max-age in "},
		"no KEK file":                   {"kek-file: " + filepath.Join(dir, "nokek") + "\n", "problem: kek-file: software backend: KEK file: stat " + filepath.Join(dir, "nokek") + ": no such file or directory (create it: head -c 32 /dev/urandom | base64 >"},
		"KEK file readable by others":   {"kek-file: " + loose + "\n", "has mode 0644"},
		"no PKCS#11 module":             {"kek-file: " + kek + "\npkcs11-module: /nonexistent/libsofthsm2.so\npkcs11-token-label: t\n", "problem: backend pkcs11: --pkcs11-module: stat /nonexistent/libsofthsm2.so: no such file or directory"},
		"no PIN file":                   {"kek-file: " + kek + "\npkcs11-module: " + kek + "\npkcs11-token-label: t\npkcs11-pin-file: /nonexistent/pin\n", "/nonexistent/pin"},
		"no principals file":            {"kek-file: " + kek + "\nclient-principals: /nonexistent/p.json\n", "--client-principals: open /nonexistent/p.json"},
		"port out of range":             {"kek-file: " + kek + "\nlisten: 127.0.0.1:70000\n", `--listen "127.0.0.1:70000": port "70000" is not a number from 0 to 65535 (set by: YAML key listen in `},
		"listener conflict":             {"kek-file: " + kek + "\nlisten: 127.0.0.1:9000\nsign-listen: 127.0.0.1:9000\n", "each listener needs its own address"},
		// 192.0.2.1 is TEST-NET-1 (RFC 5737): never an address of this host.
		"listener address not on this host": {"kek-file: " + kek + "\nlisten: 127.0.0.1:0\nsign-listen: 192.0.2.1:8443\n", "problem: sign-listen 192.0.2.1:8443: listen tcp 192.0.2.1:8443: bind: cannot assign requested address (not an address of this host)"},
	} {
		_, errOut, code := runCLI(t, nil, "config", "check", write(strings.ReplaceAll(name, " ", "-")+".yaml", c.text))
		if code != 1 || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, "INVALID: keysvc serve would refuse ") {
			t.Errorf("%s: exit %d, stderr %q, want it to mention %q and the verdict", name, code, errOut, c.want)
		}
	}
	// --syntax-only looks at no file: a configuration for another host passes.
	other := write("other-host.yaml", "kek-file: /run/secrets/kek\npkcs11-module: /usr/lib/vendor/pkcs11.so\npkcs11-token-label: t\n")
	out, errOut, code = runCLI(t, nil, "config", "check", "--syntax-only", other)
	if code != 0 || !strings.Contains(out, "(checked: keys and values only (--syntax-only: no file was looked at); nothing was started)") {
		t.Errorf("config check --syntax-only: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code = runCLI(t, nil, "config", "check", other); code != 1 || !strings.Contains(errOut, "kek-file") {
		t.Errorf("config check of another host's file: exit %d %s", code, errOut)
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

// TestConfigTlogURLs: --tlog-url takes a YAML list in the file and a
// comma-separated KEYSVC_TLOG_URL, and a bad URL or outbox mode is refused.
func TestConfigTlogURLs(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "tlog.yaml")
	kek := writeKEK(t, dir)
	if err := os.WriteFile(f, []byte("kek-file: "+kek+"\ntlog-url:\n  - https://log-a.example/\n  - https://log-b.example\ntlog-outbox-sync: full\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, nil, "config", "check", f)
	if code != 0 || !strings.Contains(out, `tlog-url: ["https://log-a.example/", "https://log-b.example"]  # from config file`) || !strings.Contains(out, `tlog-outbox-sync: "full"`) {
		t.Fatalf("config check with a tlog-url list: %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = runCLI(t, []string{"KEYSVC_TLOG_URL=https://log-c.example,https://log-d.example"}, "config", "check", f)
	if code != 0 || !strings.Contains(out, `tlog-url: ["https://log-c.example", "https://log-d.example"]  # from KEYSVC_TLOG_URL`) {
		t.Fatalf("KEYSVC_TLOG_URL over the file: %d\n%s%s", code, out, errOut)
	}
	for text, want := range map[string]string{
		"tlog-url: [ftp://log.example]\n":       "--tlog-url",
		"tlog-url: [https://u:p@log.example]\n": "--tlog-url",
		"tlog-outbox-sync: sometimes\n":         "--tlog-outbox-sync",
		"tlog-embedded: maybe\n":                "--tlog-embedded",
	} {
		if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := runCLI(t, nil, "config", "check", f); code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("%q: exit %d, %s", text, code, errOut)
		}
	}
}
