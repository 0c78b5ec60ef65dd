package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keysvc/keysvc/migrations"
)

// pgDialect: pgx v5, timestamptz instants, row locks for LockKey and a
// transaction-scoped advisory lock serializing audit appenders (the advisory
// lock needs no table privilege beyond INSERT/SELECT).
var pgDialect = &dialect{
	kind:      "postgres",
	versions:  "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'goose_db_version'",
	fsys:      migrations.Postgres,
	forUpdate: " FOR UPDATE",
	lockAudit: "SELECT pg_advisory_xact_lock(" + strconv.FormatInt(auditLockKey, 10) + ")",
	timeArg:   func(t time.Time) any { return t },
	classify:  pgClassify,
}

// pgClassify recognises unique (23505) and foreign-key (23503) violations
// and the append-only trigger's exception. Only constraint names are
// reported: PgError.Detail echoes the offending values.
func pgClassify(err error) (what string, class error) {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return "", nil
	}
	switch {
	case pe.Code == "23505":
		return "unique constraint " + pe.ConstraintName, ErrConflict
	case pe.Code == "23503":
		return pe.ConstraintName, errMissingKey
	case pe.Code == "P0001" && strings.Contains(pe.Message, "append-only"):
		return pe.Message, ErrAuditAppendOnly
	}
	return "", nil
}

// pgQuerier is what *pgxpool.Pool and pgx.Tx have in common.
type pgQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// pgConn is a conn over pgx; it rewrites '?' placeholders to $1, $2, ...
type pgConn struct{ q pgQuerier }

func (c pgConn) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := c.q.Exec(ctx, rebind(q), args...)
	return tag.RowsAffected(), err
}

func (c pgConn) query(ctx context.Context, q string, args []any, row func(scan func(...any) error) error) error {
	rows, err := c.q.Query(ctx, rebind(q), args...)
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

// rebind numbers the '?' placeholders of q ($1, $2, ...). The store's own
// queries hold no '?' inside literals.
func rebind(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// pgTx is a txConn over a pgx transaction.
type pgTx struct {
	pgConn
	tx  pgx.Tx
	ctx context.Context // the InTx context, for rollback values only
}

func (t pgTx) commit(ctx context.Context) error { return t.tx.Commit(ctx) }

func (t pgTx) rollback() error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), 10*time.Second)
	defer cancel()
	return t.tx.Rollback(ctx)
}

// openPostgres connects a pool to url and checks the schema version.
func openPostgres(ctx context.Context, url string) (Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store: PostgreSQL URL: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: PostgreSQL pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: connect to PostgreSQL: %w", err)
	}
	s := &sqlStore{
		ops: ops{c: pgConn{pool}, d: pgDialect},
		begin: func(ctx context.Context) (txConn, error) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return nil, err
			}
			return pgTx{pgConn{tx}, tx, ctx}, nil
		},
		raw: func(ctx context.Context, q string, args ...any) error {
			_, err := pool.Exec(ctx, q, args...)
			return err
		},
		closeFn: func() error { pool.Close(); return nil },
	}
	if err := checkSchema(ctx, s.ops, pgDialect); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}
