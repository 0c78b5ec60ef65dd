package main

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/internal/pgtest"
)

// TestBackupRestore exercises the backup-and-restore runbook on both
// stores: sign receipts, back up key history (pg_dump of the schema, or a
// copy of the stopped SQLite file) and the KEK, destroy the database,
// restore, and show that old receipts still verify and signing resumes
// with the same key versions.
func TestBackupRestore(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { backupRestore(t, "") })
	t.Run("postgres", func(t *testing.T) { backupRestore(t, pgtest.URL(t)) })
}

func backupRestore(t *testing.T, pgURL string) {
	e := newLifecycleEnv(t, pgURL)
	srv := e.serve(t)
	ctx := context.Background()
	c := client.New(srv.URL, e.token)
	if _, _, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se"}); err != nil {
		t.Fatal(err)
	}
	first, err := c.MCPTransport(ctx, "villa", client.TransportRequest{Tool: "get_verified_stay_offer", Arguments: map[string]any{"guests": 2}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Rotate(ctx, "villa", "before backup"); err != nil {
		t.Fatal(err)
	}
	second, err := c.MCPTransport(ctx, "villa", client.TransportRequest{Tool: "get_verified_stay_offer", Arguments: map[string]any{"guests": 3}})
	if err != nil {
		t.Fatal(err)
	}
	srv.stop(t)

	backup := t.TempDir()
	kekCopy := filepath.Join(backup, "kek")
	copyFile(t, e.kek, kekCopy, 0o600)
	var base, schema string
	if pgURL == "" {
		// As docs/runbooks/backup-and-restore.md says: keysvc.db, with
		// keysvc.db-wal and keysvc.db-shm if they exist (keysvc.db alone
		// can miss what is still in the WAL: CI saw the restored key
		// history without the key once).
		var files []string
		for _, f := range []string{"keysvc.db", "keysvc.db-wal", "keysvc.db-shm"} {
			if _, err := os.Stat(filepath.Join(e.dir, f)); err == nil {
				files = append(files, f)
				copyFile(t, filepath.Join(e.dir, f), filepath.Join(backup, f), 0o600)
			}
		}
		if err := os.RemoveAll(e.dir); err != nil { // disaster
			t.Fatal(err)
		}
		if err := os.MkdirAll(e.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			copyFile(t, filepath.Join(backup, f), filepath.Join(e.dir, f), 0o600)
		}
	} else {
		base, schema = libpqURL(t, pgURL)
		dump := filepath.Join(backup, "keysvc.sql")
		run(t, "pg_dump", "--schema="+schema, "--no-owner", "--file="+dump, base)
		run(t, "psql", "--quiet", "--set=ON_ERROR_STOP=1", "--command=DROP SCHEMA "+schema+" CASCADE", base) // disaster
		run(t, "psql", "--quiet", "--set=ON_ERROR_STOP=1", "--file="+dump, base)
	}
	copyFile(t, kekCopy, e.kek, 0o600)

	srv2 := e.serve(t)
	c2 := client.New(srv2.URL, e.token)
	jwks, err := c2.JWKS(ctx, "villa")
	if err != nil {
		t.Fatal(err)
	}
	jwksFile := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(jwksFile, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	receipt := writeJSON(t, t.TempDir(), "receipt.json", map[string]any{
		"vrp_receipt_version": "1.0", "subject": map[string]any{}, "issuer": map[string]any{"node": "villaakerlyckan.se"},
		"attestations": []any{first.Attestation, second.Attestation},
	})
	verifyFully(t, receipt, jwksFile, first.KID, second.KID)
	third, err := c2.Sign(ctx, "villa", map[string]any{"after": "restore"}, "")
	if err != nil || third.KID != second.KID || !verifyJWS(t, jwksByKID(t, jwks)[third.KID]["x"], third.JWS) {
		t.Fatalf("signing after restore: %+v %v", third, err)
	}
	if out, errOut, code := runCLI(t, e.env, "audit", "verify", "--data-dir", e.dir); code != 0 {
		t.Fatalf("audit chain after restore: %s%s", out, errOut)
	}
}

// libpqURL turns a pgtest URL (search_path as a query parameter, which
// libpq does not know) into a libpq URL and the schema name.
func libpqURL(t *testing.T, raw string) (string, string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	schema := q.Get("search_path")
	q.Del("search_path")
	u.RawQuery = q.Encode()
	if schema == "" || strings.ContainsAny(schema, `"; `) {
		t.Fatalf("unexpected schema %q", schema)
	}
	return u.String(), schema
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}
