package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/internal/pgtest"
)

// TestPostgresPasswordNeverPrinted (issue 13, item 5): whatever form the
// PostgreSQL password takes — URL userinfo, a ?password= (or percent-encoded
// pass%77ord=) query parameter, a key/value password= with or without
// quotes, escapes and spaces, sslpassword=, PGPASSWORD, a service file —
// `config check`, `migrate`, serve's "listening" lines and the errors of a
// failed connection or an unparseable string never print it.
func TestPostgresPasswordNeverPrinted(t *testing.T) {
	base := pgtest.URL(t) // postgres://postgres@127.0.0.1:5432/test?...&search_path=<schema>
	schema := base[strings.LastIndex(base, "search_path=")+len("search_path="):]
	if i := strings.IndexByte(schema, '&'); i >= 0 {
		schema = schema[:i]
	}
	kv := "host=127.0.0.1 port=5432 dbname=test user=postgres sslmode=disable search_path=" + schema
	forms := []struct {
		name, dsn string
		secrets   []string
	}{
		{"url userinfo", strings.Replace(base, "postgres://postgres@", "postgres://postgres:S3cretUserinfo@", 1), []string{"S3cretUserinfo"}},
		{"url query", base + "&password=S3cretQuery", []string{"S3cretQuery"}},
		{"url encoded key", base + "&pass%77ord=S3cretEncoded&sslpassword=S3cretSSLq", []string{"S3cretEncoded", "S3cretSSLq"}},
		{"kv quoted", kv + ` password='S3cret kv\' quoted'`, []string{"S3cret", "kv' quoted", `kv\' quoted`}},
		{"kv spaced", kv + " password = S3cretPlain sslpassword=S3cretSSL", []string{"S3cretPlain", "S3cretSSL"}},
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "keysvc.yaml")
	if err := os.WriteFile(cfgFile, []byte("listen: 127.0.0.1:0\nkek-file: "+writeKEK(t, dir)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, what, text string, secrets []string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s printed the password %q:\n%s", what, s, text)
			}
		}
	}
	for i, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			env := []string{"KEYSVC_POSTGRES_URL=" + f.dsn}
			out, errOut, code := runCLI(t, env, "config", "check", cfgFile)
			if code != 0 {
				t.Fatalf("config check: %d %s", code, errOut)
			}
			check(t, "config check", out+errOut, f.secrets)
			if !strings.Contains(out, "postgres-url: \"") || !strings.Contains(out, "REDACTED") {
				t.Errorf("config check does not show the redacted URL:\n%s", out)
			}
			out, errOut, code = runCLI(t, nil, "migrate", "--postgres-url", f.dsn)
			if code != 0 {
				t.Fatalf("migrate: %d %s%s", code, out, errOut)
			}
			check(t, "migrate", out+errOut, f.secrets)
			if !strings.Contains(out, "REDACTED") {
				t.Errorf("migrate does not name the store (redacted): %s", out)
			}
			if i%2 == 1 { // serve twice, not five times: each start costs a second
				srv := startServer(t, env, "--dev", "--data-dir", filepath.Join(t.TempDir(), "d"))
				srv.stop(t)
				logs := srv.stderr.String()
				check(t, "serve", logs, f.secrets)
				if !strings.Contains(logs, `"msg":"listening"`) || !strings.Contains(logs, "REDACTED") {
					t.Errorf("no redacted listening line:\n%s", logs)
				}
			}
		})
	}

	// Failures: a refused connection, a string pgx cannot parse (its own
	// redaction misses an escaped quote), PGPASSWORD and a service file.
	svc := filepath.Join(dir, "pg_service.conf")
	if err := os.WriteFile(svc, []byte("[keysvc]\nhost=127.0.0.1\nport=20999\nuser=postgres\ndbname=test\nsslmode=disable\npassword=S3cretService\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name, dsn string
		env       []string
		secrets   []string
	}{
		{"refused url", "postgres://postgres:S3cretRefused@127.0.0.1:20999/test?sslmode=disable&connect_timeout=5", nil, []string{"S3cretRefused"}},
		{"refused kv", `host=127.0.0.1 port=20999 sslmode=disable connect_timeout=5 password='S3cret\' kv'`, nil, []string{"S3cret", "kv'"}},
		{"unparseable kv", `host=127.0.0.1 sslmode=bogus password='S3cret\' tail'`, nil, []string{"S3cret", "tail"}},
		{"unparseable url", "postgres://postgres:S3cretBadPort@127.0.0.1:notaport/test", nil, []string{"S3cretBadPort"}},
		{"PGPASSWORD", "host=127.0.0.1 port=20999 sslmode=disable connect_timeout=5", []string{"PGPASSWORD=S3cretEnv"}, []string{"S3cretEnv"}},
		{"service file", "service=keysvc connect_timeout=5", []string{"PGSERVICEFILE=" + svc}, []string{"S3cretService"}},
	} {
		t.Run(f.name, func(t *testing.T) {
			out, errOut, code := runCLI(t, f.env, "migrate", "--postgres-url", f.dsn)
			if code == 0 {
				t.Fatalf("migrate succeeded against %s", f.name)
			}
			check(t, "migrate error", out+errOut, f.secrets)
			out, errOut, _ = runCLI(t, append([]string{"KEYSVC_POSTGRES_URL=" + f.dsn}, f.env...), "config", "check", cfgFile)
			check(t, "config check", out+errOut, f.secrets)
		})
	}
}
