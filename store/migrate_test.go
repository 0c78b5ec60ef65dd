package store

import (
	"context"
	"database/sql"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

// migrateTo applies the embedded migrations of c's dialect up to version
// only — the schema an older keysvc release left — and returns a
// database/sql handle on the database, closed at cleanup.
func migrateTo(t *testing.T, c Config, version int64) (*sql.DB, *goose.Provider) {
	t.Helper()
	ctx := context.Background()
	var db *sql.DB
	var p *goose.Provider
	var err error
	if c.PostgresURL != "" {
		cc, perr := pgx.ParseConfig(c.PostgresURL)
		if perr != nil {
			t.Fatal(perr)
		}
		db = stdlib.OpenDB(*cc)
		p, err = goose.NewProvider(goose.DialectPostgres, db, pgDialect.fsys, goose.WithLogger(goose.NopLogger()), goose.WithDisableGlobalRegistry(true))
	} else {
		if db, err = openSQLiteDB(ctx, c.SQLitePath, true); err != nil {
			t.Fatal(err)
		}
		p, err = goose.NewProvider(goose.DialectSQLite3, db, sqliteDialect.fsys, goose.WithLogger(goose.NopLogger()), goose.WithDisableGlobalRegistry(true))
	}
	t.Cleanup(func() { _ = db.Close() })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, version); err != nil {
		t.Fatalf("migrate up to %d: %v", version, err)
	}
	return db, p
}

// testMigrate00003 migrates a database that holds a 00002-era approval
// (and a software version with its sealed blob) through 00003: the rows
// survive unchanged, the index is still there, "destroy" approvals become
// possible while other actions stay refused, and the new column reads as
// nil. Migrating down to 00002 keeps revoke approvals and drops destroy
// ones.
func testMigrate00003(t *testing.T, cfg func(t *testing.T) Config, kind string) {
	ctx := context.Background()
	c := cfg(t)
	db, p := migrateTo(t, c, 2)
	ph := func(n int) string { // the driver's placeholder
		if kind == "postgres" {
			return "$" + strconv.Itoa(n)
		}
		return "?"
	}
	tsArg := func(min int) any {
		if kind == "postgres" {
			return utc(min)
		}
		return utc(min).UnixMicro()
	}
	args := func(n int) string {
		var b []string
		for i := 1; i <= n; i++ {
			b = append(b, ph(i))
		}
		return strings.Join(b, ", ")
	}
	exec := func(q string, a ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, a...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO keys (name, issuer, algorithm, backend, jwks_url, policy, created_at, created_by) VALUES (`+args(8)+`)`,
		"villa", "villaakerlyckan.se", "EdDSA", "software", "https://villaakerlyckan.se/.well-known/jwks.json", `{"two_person_rule":true}`, tsArg(0), "admin")
	exec(`INSERT INTO key_versions (kid, key_name, algorithm, backend_ref, sealed_private_key, public_jwk, state, created_at, published_at, activated_at, revocation_reason) VALUES (`+args(11)+`)`,
		"villaakerlyckan.se-2026-01-01-01", "villa", "EdDSA", "software:villaakerlyckan.se-2026-01-01-01", []byte{1, 2, 3},
		`{"kty":"OKP"}`, "active", tsArg(0), tsArg(0), tsArg(0), "")
	old := Approval{ID: "ap-2", KeyName: "villa", Action: "revoke", KID: "villaakerlyckan.se-2026-01-01-01",
		Params: []byte(`{"compromised_at":"2026-01-01T00:00:00Z","reason":"leak"}`), RequestedBy: "token:a", RequestedAt: utc(1),
		ExpiresAt: utc(61), Status: "approved", DecidedBy: "token:b", DecidedAt: ptr(utc(2))}
	// The 00002 columns (00003 adds requested_by_name, decided_by_name).
	cols00002 := `id, key_name, action, kid, params, requested_by, requested_at, expires_at, status, decided_by, decided_at`
	exec(`INSERT INTO approvals (`+cols00002+`) VALUES (`+args(11)+`)`, old.ID, old.KeyName, old.Action, old.KID, string(old.Params),
		old.RequestedBy, tsArg(1), tsArg(61), old.Status, old.DecidedBy, tsArg(2))
	if _, err := db.ExecContext(ctx, `INSERT INTO approvals (`+cols00002+`) VALUES (`+args(11)+`)`, "ap-x", "villa", "destroy", old.KID, "{}",
		"token:a", tsArg(1), tsArg(61), "pending", nil, nil); err == nil {
		t.Fatal("00002 accepted a destroy approval")
	}

	applied, err := Migrate(ctx, c)
	if err != nil || len(applied) == 0 || applied[0] != 3 {
		t.Fatalf("Migrate over 00002: applied %v, err %v; want 3 and the later migrations", applied, err)
	}
	s, err := Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	list, err := s.ListApprovals(ctx, "")
	if err != nil || len(list) != 1 || !reflect.DeepEqual(list[0], old) {
		t.Fatalf("approvals after 00003: %+v %v, want [%+v]", list, err, old)
	}
	v, err := s.GetVersion(ctx, old.KID)
	if err != nil || v.MaterialDestroyedAt != nil || !reflect.DeepEqual(v.SealedPrivateKey, []byte{1, 2, 3}) || v.State != StateActive {
		t.Fatalf("version after 00003: %+v %v", v, err)
	}
	var idx int
	q := `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'approvals_by_status' AND tbl_name = 'approvals'`
	if kind == "postgres" {
		q = `SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'approvals_by_status' AND tablename = 'approvals'`
	}
	if err := db.QueryRowContext(ctx, q).Scan(&idx); err != nil || idx != 1 {
		t.Fatalf("index approvals_by_status after 00003: %d %v", idx, err)
	}

	destroy := Approval{ID: "ap-3", KeyName: "villa", Action: "destroy", KID: old.KID, Params: []byte(`{"reason":"retired","pending_days":30}`),
		RequestedBy: "token:a", RequestedAt: utc(3), ExpiresAt: utc(63), Status: "pending"}
	if err := s.InTx(ctx, func(tx Tx) error { return tx.InsertApproval(ctx, destroy) }); err != nil {
		t.Fatalf("destroy approval after 00003: %v", err)
	}
	bogus := destroy
	bogus.ID, bogus.Action = "ap-4", "delete"
	if err := s.InTx(ctx, func(tx Tx) error { return tx.InsertApproval(ctx, bogus) }); err == nil {
		t.Fatal("an approval with action \"delete\" was accepted")
	}
	// The rebuilt table still refuses approvals of unknown keys.
	bogus.ID, bogus.Action, bogus.KeyName = "ap-5", "destroy", "nosuchkey"
	if err := s.InTx(ctx, func(tx Tx) error { return tx.InsertApproval(ctx, bogus) }); err == nil {
		t.Fatal("an approval of a missing key was accepted")
	}
	if err := s.InTx(ctx, func(tx Tx) error { return tx.DestroyVersionMaterial(ctx, old.KID, utc(4)) }); err != nil {
		t.Fatal(err)
	}
	if v, err := s.GetVersion(ctx, old.KID); err != nil || !reflect.DeepEqual(v.MaterialDestroyedAt, ptr(utc(4))) || v.SealedPrivateKey != nil {
		t.Fatalf("destroyed version %+v %v", v, err)
	}

	// Down to 00002: revoke approvals stay, destroy approvals go.
	if _, err := p.DownTo(ctx, 2); err != nil {
		t.Fatalf("migrate down to 2: %v", err)
	}
	var ids []string
	rows, err := db.QueryContext(ctx, `SELECT id FROM approvals ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if !reflect.DeepEqual(ids, []string{"ap-2"}) {
		t.Fatalf("approvals after migrating down: %v, want [ap-2]", ids)
	}
}
