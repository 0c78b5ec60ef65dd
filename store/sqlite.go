package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/keysvc/keysvc/migrations"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// sqliteDialect: modernc.org/sqlite, instants as INTEGER unix microseconds
// (UTC). Every transaction begins IMMEDIATE (DSN _txlock), so writers are
// serialized by the database lock and need no row or audit locks.
var sqliteDialect = &dialect{
	kind:     "sqlite",
	versions: "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'goose_db_version'",
	fsys:     migrations.SQLite,
	timeArg:  func(t time.Time) any { return t.UnixMicro() },
	classify: sqliteClassify,
}

// sqliteClassify recognises unique/primary-key and foreign-key violations
// and the append-only triggers' RAISE(ABORT). SQLite's messages name the
// constraint's columns, never values.
func sqliteClassify(err error) (what string, class error) {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return "", nil
	}
	switch code := se.Code(); {
	case code == sqlite3.SQLITE_CONSTRAINT_UNIQUE || code == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return se.Error(), ErrConflict
	case code == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		return se.Error(), errMissingKey
	case code&0xff == sqlite3.SQLITE_CONSTRAINT && strings.Contains(se.Error(), "append-only"):
		return "trigger", ErrAuditAppendOnly
	}
	return "", nil
}

// sqlQuerier is what *sql.DB and *sql.Tx have in common.
type sqlQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// sqliteConn is a conn over database/sql.
type sqliteConn struct{ q sqlQuerier }

func (c sqliteConn) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := c.q.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (c sqliteConn) query(ctx context.Context, q string, args []any, row func(scan func(...any) error) error) error {
	rows, err := c.q.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

// sqliteTx is a txConn over a database/sql transaction.
type sqliteTx struct {
	sqliteConn
	tx *sql.Tx
}

func (t sqliteTx) commit(context.Context) error { return t.tx.Commit() }
func (t sqliteTx) rollback() error              { return t.tx.Rollback() }

// sqliteDSN is the modernc.org/sqlite data source name for path: foreign
// keys on, WAL journal, a 5 s busy timeout, BEGIN IMMEDIATE for every
// transaction so that write transactions serialize instead of failing with
// SQLITE_BUSY on lock upgrade, and secure_delete, so that content a write
// replaces (a destroyed version's sealed key) is overwritten with zeros in
// the database file instead of lingering in free space.
func sqliteDSN(path string) (string, error) {
	if path == "" {
		return "", errors.New("store: no database configured (set a PostgreSQL URL or a SQLite path)")
	}
	if strings.ContainsRune(path, '?') || strings.HasPrefix(path, "file:") {
		return "", fmt.Errorf("store: SQLite path %q: must be a plain file name", path)
	}
	return path + "?_txlock=immediate&_busy_timeout=5000&_foreign_keys=1&_journal_mode=WAL&_pragma=secure_delete(1)", nil
}

// openSQLiteDB opens the database/sql handle for path, creating the file
// (mode 0600: it holds sealed keys) and its directory (0700) when create.
func openSQLiteDB(ctx context.Context, path string, create bool) (*sql.DB, error) {
	dsn, err := sqliteDSN(path)
	if err != nil {
		return nil, err
	}
	if create {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
	} else if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: no database file at %s", ErrNotMigrated, path)
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open SQLite %s: %w", path, err)
	}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: open SQLite %s: %w", path, err)
	}
	return db, nil
}

// openSQLite opens the migrated database file at path.
func openSQLite(ctx context.Context, path string) (Store, error) {
	db, err := openSQLiteDB(ctx, path, false)
	if err != nil {
		return nil, err
	}
	s := &sqlStore{
		ops: ops{c: sqliteConn{db}, d: sqliteDialect},
		begin: func(ctx context.Context) (txConn, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return nil, err
			}
			return sqliteTx{sqliteConn{tx}, tx}, nil
		},
		raw: func(ctx context.Context, q string, args ...any) error {
			_, err := db.ExecContext(ctx, q, args...)
			return err
		},
		closeFn: db.Close,
	}
	if err := checkSchema(ctx, s.ops, sqliteDialect); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}
