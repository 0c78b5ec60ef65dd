// Package pgtest gives tests an isolated PostgreSQL schema.
//
// The server is $KEYSVC_TEST_POSTGRES_URL, default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable (a URL, not a
// key=value DSN). When it is unreachable the test is skipped with a loud
// message, or fails when $CI is true.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultURL is the server used when $KEYSVC_TEST_POSTGRES_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// URL creates a fresh, empty schema keysvc_test_<16 hex digits>, drops it
// (CASCADE) when the test ends, and returns the server URL with
// search_path set to it: everything created through the URL lands there.
// Close connections opened with it before the test ends (t.Cleanup runs
// last-registered first, so a Cleanup registered after URL is fine).
func URL(t testing.TB) string {
	t.Helper()
	base := os.Getenv("KEYSVC_TEST_POSTGRES_URL")
	if base == "" {
		base = DefaultURL
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("pgtest: KEYSVC_TEST_POSTGRES_URL is not a URL: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("pgtest: PostgreSQL unreachable and CI=true, failing: %v", err)
		}
		t.Skipf("SKIPPING PostgreSQL tests: cannot connect to %s: %v (set KEYSVC_TEST_POSTGRES_URL; with CI=true this fails)", u.Redacted(), err)
	}
	defer conn.Close(ctx)

	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	schema := "keysvc_test_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("pgtest: drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", schema, err)
		}
	})

	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
