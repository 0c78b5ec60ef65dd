package store

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// ErrNotMigrated is returned (wrapped) by Open when the database lacks the
// schema or some of this release's migrations.
var ErrNotMigrated = errors.New("store: schema not migrated (run `keysvc migrate`)")

// Open connects to the store cfg selects: PostgreSQL (a pgxpool pool) when
// cfg.PostgresURL is set, otherwise the SQLite file cfg.SQLitePath. It never
// changes the schema: it fails with ErrNotMigrated if the database (or the
// SQLite file) is missing any embedded migration, and with an error naming
// the versions if the database has migrations this release does not know.
// The caller must Close the store.
//
// Errors never contain a password of cfg.PostgresURL (RedactError).
func Open(ctx context.Context, cfg Config) (Store, error) {
	if cfg.PostgresURL != "" {
		s, err := openPostgres(ctx, cfg.PostgresURL)
		return s, RedactError(err, cfg.PostgresURL)
	}
	return openSQLite(ctx, cfg.SQLitePath)
}

// Migrate applies the embedded migrations (goose v3) that the database cfg
// selects has not applied yet, and returns their versions in ascending
// order; none when the schema is current. It is idempotent. On PostgreSQL
// it holds a session advisory lock (keyed by database and schema) so that
// replicas migrating at once apply each migration once; the schema is the
// first of search_path. For SQLite it creates the file (0600) and its
// directory (0700) if missing. Errors never contain a password of
// cfg.PostgresURL (RedactError).
func Migrate(ctx context.Context, cfg Config) (applied []int64, err error) {
	defer func() { err = RedactError(err, cfg.PostgresURL) }()
	var p *goose.Provider
	if cfg.PostgresURL != "" {
		cc, err := pgx.ParseConfig(cfg.PostgresURL)
		if err != nil {
			return nil, fmt.Errorf("store: PostgreSQL URL: %w", err)
		}
		db := stdlib.OpenDB(*cc)
		defer db.Close()
		var where string
		if err := db.QueryRowContext(ctx, `SELECT current_database() || '.' || coalesce(current_schema(), '')`).Scan(&where); err != nil {
			return nil, fmt.Errorf("store: migrate: connect to PostgreSQL: %w", err)
		}
		h := fnv.New64a()
		h.Write([]byte("keysvc migrate " + where))
		locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(int64(h.Sum64())), lock.WithLockTimeout(1, 300))
		if err != nil {
			return nil, fmt.Errorf("store: migrate: %w", err)
		}
		p, err = goose.NewProvider(goose.DialectPostgres, db, pgDialect.fsys, goose.WithSessionLocker(locker),
			goose.WithLogger(goose.NopLogger()), goose.WithDisableGlobalRegistry(true))
		if err != nil {
			return nil, fmt.Errorf("store: migrate: %w", err)
		}
	} else {
		db, err := openSQLiteDB(ctx, cfg.SQLitePath, true)
		if err != nil {
			return nil, err
		}
		defer db.Close()
		p, err = goose.NewProvider(goose.DialectSQLite3, db, sqliteDialect.fsys,
			goose.WithLogger(goose.NopLogger()), goose.WithDisableGlobalRegistry(true))
		if err != nil {
			return nil, fmt.Errorf("store: migrate: %w", err)
		}
	}
	res, err := p.Up(ctx)
	for _, r := range res {
		if r.Error == nil {
			applied = append(applied, r.Source.Version)
		}
	}
	if err != nil {
		return applied, fmt.Errorf("store: migrate: %w", err)
	}
	return applied, nil
}

// checkSchema compares the versions recorded in goose's version table with
// the embedded migrations of d.
func checkSchema(ctx context.Context, o ops, d *dialect) error {
	var tables int64
	err := o.query(ctx, "check schema", d.versions, nil, func(scan func(...any) error) error { return scan(&tables) })
	if err != nil {
		return err
	}
	if tables == 0 {
		return ErrNotMigrated
	}
	var have []int64
	err = o.query(ctx, "check schema", `SELECT DISTINCT version_id FROM goose_db_version WHERE is_applied AND version_id > 0`, nil,
		func(scan func(...any) error) error {
			var v int64
			err := scan(&v)
			have = append(have, v)
			return err
		})
	if err != nil {
		return err
	}
	want, err := migrationVersions(d.fsys)
	if err != nil {
		return err
	}
	var missing, unknown []int64
	for _, v := range want {
		if !slices.Contains(have, v) {
			missing = append(missing, v)
		}
	}
	for _, v := range have {
		if !slices.Contains(want, v) {
			unknown = append(unknown, v)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing migrations %v", ErrNotMigrated, missing)
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("store: database has migrations %v unknown to this keysvc release (a newer release migrated it)", unknown)
	}
	return nil
}

// migrationVersions returns the versions (the numeric file-name prefix) of
// the *.sql migrations at the root of fsys, ascending.
func migrationVersions(fsys fs.FS) ([]int64, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("store: embedded migrations: %w", err)
	}
	var out []int64
	for _, n := range names {
		prefix, _, _ := strings.Cut(n, "_")
		v, err := strconv.ParseInt(prefix, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("store: embedded migration %s: bad version: %w", n, err)
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return out, nil
}
