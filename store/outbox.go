package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// OutboxRow is one transparency-log leaf waiting for one log (migration
// 00006, ADR 0015): the artifact it commits to and the log it must reach.
type OutboxRow struct {
	ID           int64    // assigned by EnqueueOutbox; never reused
	LogURL       string   // the log's base URL, as configured (--tlog-url)
	ArtifactType string   // VRP TL v0.1 artifact_type, e.g. "vrp_attestation"
	ArtifactHash [32]byte // SHA-256 of the artifact (the exact compact JWS)
	EnqueuedAt   time.Time
	// LeaseUntil is when another replica may claim the row: until then the
	// process that wrote or last claimed it is delivering it.
	LeaseUntil time.Time
}

// OutboxStat is the backlog of one log in the outbox.
type OutboxStat struct {
	Rows   int64
	Oldest time.Time // EnqueuedAt of the oldest row
}

// Outbox is the transparency-log outbox. Both implementations of Store
// implement it (test with a type assertion); it is not part of Store so
// that test doubles of Store need not.
type Outbox interface {
	// EnqueueOutbox inserts rows (their ID is ignored) and returns them
	// with their IDs, in no particular order. When it returns nil the rows
	// are committed (on SQLite with the database's synchronous setting, on
	// PostgreSQL with the session's synchronous_commit): all of them or,
	// on error, none. Instants are stored in UTC truncated to Precision.
	EnqueueOutbox(ctx context.Context, rows []OutboxRow) ([]OutboxRow, error)
	// ClaimOutbox leases to the caller at most limit rows of logURL whose
	// lease ended before now (oldest first): their LeaseUntil becomes until.
	// On PostgreSQL rows another transaction is claiming are skipped
	// (FOR UPDATE SKIP LOCKED), so replicas never claim the same row at
	// once.
	ClaimOutbox(ctx context.Context, logURL string, now, until time.Time, limit int) ([]OutboxRow, error)
	// DeleteOutbox deletes the rows with these IDs; IDs already gone are
	// ignored.
	DeleteOutbox(ctx context.Context, ids []int64) error
	// OutboxBacklog returns the rows waiting per log URL (a full scan of
	// the outbox; call it every few seconds, not per request).
	OutboxBacklog(ctx context.Context) (map[string]OutboxStat, error)
	// ConfigureOutbox sets how outbox writes reach the disk; call it before
	// the first write.
	ConfigureOutbox(o OutboxOptions) error
}

// OutboxOptions tune the outbox's writes.
type OutboxOptions struct {
	// SQLiteSynchronous is the SQLite synchronous setting of the outbox's
	// own connection (https://sqlite.org/pragma.html#pragma_synchronous,
	// WAL mode): "full" (the default: every group commit is fsynced, so it
	// survives a power loss) or "normal" (the commit is written to the WAL
	// without an fsync: it survives the process being killed — kill -9 —
	// but not a power loss or kernel crash; the database stays consistent
	// either way). Ignored on PostgreSQL, whose commits follow the
	// server's synchronous_commit.
	SQLiteSynchronous string
}

// outboxChunk bounds the rows of one INSERT or DELETE statement: 6
// parameters a row stay below PostgreSQL's 65,535 and SQLite's 32,766
// bound parameters.
const outboxChunk = 5000

const outboxCols = `id, log_url, artifact_type, artifact_hash, enqueued_at, lease_until`

var _ Outbox = (*sqlStore)(nil)

func scanOutbox(scan func(...any) error) (OutboxRow, error) {
	var r OutboxRow
	var h []byte
	if err := scan(&r.ID, &r.LogURL, &r.ArtifactType, &h, timeCol{&r.EnqueuedAt}, timeCol{&r.LeaseUntil}); err != nil {
		return r, err
	}
	if len(h) != len(r.ArtifactHash) {
		return r, fmt.Errorf("store: outbox row %d: artifact_hash is %d bytes", r.ID, len(h))
	}
	copy(r.ArtifactHash[:], h)
	return r, nil
}

// insertOutbox inserts one chunk of rows with one statement on o.
func (o ops) insertOutbox(ctx context.Context, rows []OutboxRow) ([]OutboxRow, error) {
	var q strings.Builder
	q.WriteString(`INSERT INTO tlog_outbox (log_url, artifact_type, artifact_hash, enqueued_at, lease_until) VALUES `)
	args := make([]any, 0, 5*len(rows))
	for i, r := range rows {
		if i > 0 {
			q.WriteByte(',')
		}
		q.WriteString(`(?, ?, ?, ?, ?)`)
		args = append(args, r.LogURL, r.ArtifactType, r.ArtifactHash[:], o.ts(r.EnqueuedAt), o.ts(r.LeaseUntil))
	}
	q.WriteString(` RETURNING ` + outboxCols)
	out := make([]OutboxRow, 0, len(rows))
	err := o.query(ctx, fmt.Sprintf("enqueue %d outbox rows", len(rows)), q.String(), args, func(scan func(...any) error) error {
		r, err := scanOutbox(scan)
		out = append(out, r)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(out) != len(rows) {
		return nil, fmt.Errorf("store: enqueue outbox rows: %d rows returned for %d inserted", len(out), len(rows))
	}
	return out, nil
}

// EnqueueOutbox implements Outbox.EnqueueOutbox: one autocommit statement
// for up to 5,000 rows (one commit, one WAL flush), one transaction beyond.
// On SQLite the outbox has a connection of its own with its prepared
// statements (see outboxConn).
func (s *sqlStore) EnqueueOutbox(ctx context.Context, rows []OutboxRow) ([]OutboxRow, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	if s.d.kind == "sqlite" {
		return s.sqliteEnqueue(ctx, rows)
	}
	if len(rows) <= outboxChunk {
		return s.insertOutbox(ctx, rows)
	}
	var out []OutboxRow
	err := s.InTx(ctx, func(tx Tx) error {
		t := tx.(*sqlTx)
		for chunk := range slices.Chunk(rows, outboxChunk) {
			got, err := t.insertOutbox(ctx, chunk)
			if err != nil {
				return err
			}
			out = append(out, got...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ClaimOutbox implements Outbox.ClaimOutbox.
func (s *sqlStore) ClaimOutbox(ctx context.Context, logURL string, now, until time.Time, limit int) ([]OutboxRow, error) {
	if limit <= 0 {
		return nil, nil
	}
	lock := ""
	if s.d.kind == "postgres" {
		lock = " FOR UPDATE SKIP LOCKED"
	}
	q := `UPDATE tlog_outbox SET lease_until = ? WHERE id IN (SELECT id FROM tlog_outbox
		WHERE log_url = ? AND lease_until < ? ORDER BY id LIMIT ?` + lock + `) RETURNING ` + outboxCols
	var out []OutboxRow
	err := s.query(ctx, "claim outbox rows", q, []any{s.ts(until), logURL, s.ts(now), int64(limit)},
		func(scan func(...any) error) error {
			r, err := scanOutbox(scan)
			out = append(out, r)
			return err
		})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b OutboxRow) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// DeleteOutbox implements Outbox.DeleteOutbox.
func (s *sqlStore) DeleteOutbox(ctx context.Context, ids []int64) error {
	if s.d.kind == "sqlite" {
		return s.sqliteDelete(ctx, ids)
	}
	for chunk := range slices.Chunk(ids, outboxChunk) {
		q := `DELETE FROM tlog_outbox WHERE id IN (?` + strings.Repeat(`, ?`, len(chunk)-1) + `)`
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		if _, err := s.exec(ctx, fmt.Sprintf("delete %d outbox rows", len(chunk)), q, args...); err != nil {
			return err
		}
	}
	return nil
}

// OutboxBacklog implements Outbox.OutboxBacklog.
func (s *sqlStore) OutboxBacklog(ctx context.Context) (map[string]OutboxStat, error) {
	out := map[string]OutboxStat{}
	err := s.query(ctx, "outbox backlog", `SELECT log_url, count(*), min(enqueued_at) FROM tlog_outbox GROUP BY log_url`, nil,
		func(scan func(...any) error) error {
			var url string
			var st OutboxStat
			if err := scan(&url, &st.Rows, timeCol{&st.Oldest}); err != nil {
				return err
			}
			out[url] = st
			return nil
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ConfigureOutbox implements Outbox.ConfigureOutbox.
func (s *sqlStore) ConfigureOutbox(o OutboxOptions) error {
	switch o.SQLiteSynchronous {
	case "", "full", "normal":
	default:
		return fmt.Errorf("store: outbox synchronous %q: want full or normal", o.SQLiteSynchronous)
	}
	s.outbox.mu.Lock()
	defer s.outbox.mu.Unlock()
	if s.outbox.conn != nil {
		return errors.New("store: the outbox is configured before its first write")
	}
	s.outbox.synchronous = o.SQLiteSynchronous
	return nil
}

// sqliteOutboxChunk bounds the rows of one prepared SQLite INSERT; a larger
// group is several statements in one transaction.
const sqliteOutboxChunk = 128

// outboxConn is the SQLite outbox's own connection, opened at the first
// write: its synchronous setting is the outbox's (the store's other
// connections keep the database default, FULL), and its INSERT statements
// are prepared once per row count, since modernc.org/sqlite would otherwise
// parse the SQL again at every group commit. Writes through it are
// serialized by mu; SQLite has one writer anyway.
type outboxConn struct {
	mu          sync.Mutex
	synchronous string
	conn        *sql.Conn
	inserts     map[int]*sql.Stmt
}

func (o *outboxConn) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, st := range o.inserts {
		st.Close()
	}
	o.inserts = nil
	if o.conn != nil {
		o.conn.Close()
		o.conn = nil
	}
}

// sqliteOutboxConn returns the outbox connection, opening it when needed;
// the caller holds s.outbox.mu.
func (s *sqlStore) sqliteOutboxConn(ctx context.Context) (*sql.Conn, error) {
	o := &s.outbox
	if o.conn != nil {
		return o.conn, nil
	}
	db, ok := s.c.(sqliteConn).q.(*sql.DB)
	if !ok {
		return nil, errors.New("store: SQLite outbox: no database handle")
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: SQLite outbox connection: %w", err)
	}
	if o.synchronous == "normal" {
		if _, err := conn.ExecContext(ctx, `PRAGMA synchronous = NORMAL`); err != nil {
			conn.Close()
			return nil, fmt.Errorf("store: SQLite outbox synchronous: %w", err)
		}
	}
	o.conn, o.inserts = conn, map[int]*sql.Stmt{}
	return conn, nil
}

// sqliteInsert returns the prepared INSERT of n rows.
func (s *sqlStore) sqliteInsert(ctx context.Context, conn *sql.Conn, n int) (*sql.Stmt, error) {
	if st, ok := s.outbox.inserts[n]; ok {
		return st, nil
	}
	q := `INSERT INTO tlog_outbox (log_url, artifact_type, artifact_hash, enqueued_at, lease_until) VALUES (?, ?, ?, ?, ?)` +
		strings.Repeat(`, (?, ?, ?, ?, ?)`, n-1)
	st, err := conn.PrepareContext(ctx, q)
	if err != nil {
		return nil, s.fail("prepare outbox insert", err)
	}
	s.outbox.inserts[n] = st
	return st, nil
}

// sqliteEnqueue is EnqueueOutbox on SQLite: one prepared statement for up
// to sqliteOutboxChunk rows, else a transaction of several.
func (s *sqlStore) sqliteEnqueue(ctx context.Context, rows []OutboxRow) ([]OutboxRow, error) {
	s.outbox.mu.Lock()
	defer s.outbox.mu.Unlock()
	conn, err := s.sqliteOutboxConn(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]OutboxRow, 0, len(rows))
	insert := func(tx *sql.Tx, chunk []OutboxRow) error {
		st, err := s.sqliteInsert(ctx, conn, len(chunk))
		if err != nil {
			return err
		}
		if tx != nil {
			st = tx.StmtContext(ctx, st)
		}
		args := make([]any, 0, 5*len(chunk))
		for _, r := range chunk {
			args = append(args, r.LogURL, r.ArtifactType, r.ArtifactHash[:], s.ts(r.EnqueuedAt), s.ts(r.LeaseUntil))
		}
		res, err := st.ExecContext(ctx, args...)
		if err != nil {
			return s.fail(fmt.Sprintf("enqueue %d outbox rows", len(chunk)), err)
		}
		// One INSERT under SQLite's write lock numbers its rows one after
		// the other (AUTOINCREMENT: above every id the table ever had), so
		// the ids are the last one's and the ones just before it.
		last, err := res.LastInsertId()
		if err != nil {
			return fmt.Errorf("store: enqueue outbox rows: %w", err)
		}
		first := last - int64(len(chunk)) + 1
		for i, r := range chunk {
			r.ID = first + int64(i)
			r.EnqueuedAt, r.LeaseUntil = r.EnqueuedAt.UTC().Truncate(Precision), r.LeaseUntil.UTC().Truncate(Precision)
			out = append(out, r)
		}
		return nil
	}
	if len(rows) <= sqliteOutboxChunk {
		if err := insert(nil, rows); err != nil {
			return nil, err
		}
		return out, nil
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("store: begin outbox transaction: %w", err)
	}
	for chunk := range slices.Chunk(rows, sqliteOutboxChunk) {
		if err := insert(tx, chunk); err != nil {
			_ = tx.Rollback()
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("store: commit outbox rows: %w", err)
	}
	return out, nil
}

// sqliteDelete is DeleteOutbox on SQLite, on the outbox connection: all
// chunks in one transaction (one commit).
func (s *sqlStore) sqliteDelete(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	s.outbox.mu.Lock()
	defer s.outbox.mu.Unlock()
	conn, err := s.sqliteOutboxConn(ctx)
	if err != nil {
		return err
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: begin outbox delete: %w", err)
	}
	for chunk := range slices.Chunk(ids, outboxChunk) {
		q := `DELETE FROM tlog_outbox WHERE id IN (?` + strings.Repeat(`, ?`, len(chunk)-1) + `)`
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			_ = tx.Rollback()
			return s.fail(fmt.Sprintf("delete %d outbox rows", len(chunk)), err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit outbox delete: %w", err)
	}
	return nil
}
