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
	notify:    "SELECT pg_notify(?, ?)",
	lockName:  "SELECT pg_advisory_xact_lock(hashtextextended(?, 0))",
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
	case pe.Code == commitDeadlineSQLState:
		return pe.Message, ErrCommitDeadline
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
	// One NOTIFY channel per schema, so stores sharing a database in
	// different schemas (tests, tenants) do not wake each other.
	var schema string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: current schema: %w", err)
	}
	channel := "keysvc_lifecycle_" + schema
	s := &sqlStore{
		ops: ops{c: pgConn{pool}, d: pgDialect, channel: channel},
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
		watch: func(ctx context.Context, fn func(string)) error {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return fmt.Errorf("store: watch: %w", err)
			}
			// LISTEN state belongs to the session: take the connection out
			// of the pool for good and close it when done.
			pc := conn.Hijack()
			defer pc.Close(context.WithoutCancel(ctx))
			if _, err := pc.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
				return fmt.Errorf("store: listen: %w", err)
			}
			for {
				n, err := pc.WaitForNotification(ctx)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("store: watch: %w", err)
				}
				fn(n.Payload)
			}
		},
	}
	if err := checkSchema(ctx, s.ops, pgDialect); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}
