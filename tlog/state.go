package tlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // database/sql driver "sqlite"
)

// state is the operator's own data beside the Tessera directory: the
// artifact-hash index (derived from the log: rebuilt by following the
// entry bundles, never the source of truth) and the STH archive (one signed
// STH per tree size the log signed). It is one SQLite file in WAL mode with
// synchronous=FULL: an archived STH survives a power loss, like the
// checkpoint Tessera publishes after it (O_SYNC files, fsynced directories).
type state struct {
	db       *sql.DB
	lookupSt *sql.Stmt // prepared once: the add path runs it per entry
}

const stateSchema = `
CREATE TABLE IF NOT EXISTS leaves (
	artifact_hash BLOB PRIMARY KEY,  -- the 32 SHA-256 bytes of artifact_hash
	leaf_index    INTEGER NOT NULL,
	artifact_type TEXT NOT NULL,
	logged_at     TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS follower (
	id         INTEGER PRIMARY KEY CHECK (id = 1),
	next_index INTEGER NOT NULL      -- entries [0, next_index) are indexed
);
INSERT OR IGNORE INTO follower (id, next_index) VALUES (1, 0);
CREATE TABLE IF NOT EXISTS sths (
	tree_size  INTEGER PRIMARY KEY,
	root_hash  BLOB NOT NULL,
	sth        TEXT NOT NULL,        -- compact JWS
	checkpoint TEXT NOT NULL,        -- signed note (with cosignatures once published)
	published  INTEGER NOT NULL      -- 1 once published with the witness policy satisfied
);
`

func openState(dir string) (*state, error) {
	dsn := filepath.Join(dir, "state.db") + "?_txlock=immediate&_busy_timeout=5000&_journal_mode=WAL&_pragma=synchronous(FULL)&_pragma=cache_size(-65536)&_pragma=mmap_size(1073741824)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(4)
	if _, err := db.Exec(stateSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("tlog: state schema: %w", err)
	}
	st, err := db.Prepare(`SELECT leaf_index, artifact_type, logged_at FROM leaves WHERE artifact_hash = ?`)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &state{db: db, lookupSt: st}, nil
}

func (s *state) close() error {
	s.lookupSt.Close()
	return s.db.Close()
}

// checkpoint copies the WAL into the database and truncates it
// (PRAGMA wal_checkpoint(TRUNCATE), waiting up to the busy timeout for
// readers). SQLite's automatic checkpoints are PASSIVE: under a steady
// stream of look-ups some reader always holds the WAL, it is never reset,
// and it grew without bound (635 MB after ten minutes of load, every
// look-up slower), so the follower runs this every walCheckpointEvery.
// A busy result (readers did not finish in time) is not an error: the
// next round tries again.
func (s *state) checkpoint(ctx context.Context) error {
	var busy, logFrames, done int
	return s.db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logFrames, &done)
}

// indexed is a row of the artifact-hash index.
type indexed struct {
	leafIndex    uint64
	artifactType string
	loggedAt     string
}

// lookup finds an artifact hash (32 bytes) in the index.
func (s *state) lookup(ctx context.Context, h []byte) (indexed, bool, error) {
	var r indexed
	err := s.lookupSt.QueryRowContext(ctx, h).
		Scan(&r.leafIndex, &r.artifactType, &r.loggedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

// lookupChunk bounds the hashes of one look-up statement.
const lookupChunk = 500

// lookupMany finds artifact hashes (32 bytes each) in the index, a few
// hundred per statement; the result is keyed by string(hash).
func (s *state) lookupMany(ctx context.Context, hs [][]byte) (map[string]indexed, error) {
	out := map[string]indexed{}
	for len(hs) > 0 {
		n := min(len(hs), lookupChunk)
		q := "SELECT artifact_hash, leaf_index, artifact_type, logged_at FROM leaves WHERE artifact_hash IN (?" + strings.Repeat(",?", n-1) + ")"
		args := make([]any, n)
		for i := range args {
			args[i] = hs[i]
		}
		rows, err := s.db.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var h []byte
			var r indexed
			if err := rows.Scan(&h, &r.leafIndex, &r.artifactType, &r.loggedAt); err != nil {
				rows.Close()
				return nil, err
			}
			out[string(h)] = r
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		hs = hs[n:]
	}
	return out, nil
}

// eachHash calls fn with every artifact hash in the index (32 bytes; the
// slice is reused between calls), in key order.
func (s *state) eachHash(ctx context.Context, fn func(h []byte)) error {
	rows, err := s.db.QueryContext(ctx, `SELECT artifact_hash FROM leaves`)
	if err != nil {
		return err
	}
	defer rows.Close()
	var h sql.RawBytes
	for rows.Next() {
		if err := rows.Scan(&h); err != nil {
			return err
		}
		fn(h)
	}
	return rows.Err()
}

// nextIndex returns how many log entries the index has followed.
func (s *state) nextIndex(ctx context.Context) (uint64, error) {
	var n uint64
	err := s.db.QueryRowContext(ctx, `SELECT next_index FROM follower WHERE id = 1`).Scan(&n)
	return n, err
}

// indexRow is one followed log entry.
type indexRow struct {
	hash []byte
	indexed
}

// follow records rows (entries [from, to) of the log) and moves the
// follower to to, in one transaction. An artifact hash already indexed
// keeps its first index (a later duplicate entry in the log is ignored).
func (s *state) follow(ctx context.Context, from, to uint64, rows []indexRow) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	var cur uint64
	if err := tx.QueryRowContext(ctx, `SELECT next_index FROM follower WHERE id = 1`).Scan(&cur); err != nil {
		return err
	}
	if cur != from {
		return fmt.Errorf("tlog: index follower at %d, asked to follow from %d", cur, from)
	}
	// Multi-row INSERTs: per-statement cost dominates single-row inserts.
	const chunk = 200
	for len(rows) > 0 {
		n := min(len(rows), chunk)
		q := "INSERT OR IGNORE INTO leaves (artifact_hash, leaf_index, artifact_type, logged_at) VALUES (?, ?, ?, ?)" + strings.Repeat(", (?, ?, ?, ?)", n-1)
		args := make([]any, 0, 4*n)
		for _, r := range rows[:n] {
			args = append(args, r.hash, r.leafIndex, r.artifactType, r.loggedAt)
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
		rows = rows[n:]
	}
	if _, err := tx.ExecContext(ctx, `UPDATE follower SET next_index = ? WHERE id = 1`, to); err != nil {
		return err
	}
	return tx.Commit()
}

// archived is a row of the STH archive.
type archived struct {
	treeSize   uint64
	rootHash   []byte
	sth        string
	checkpoint string
	published  bool
}

// archive records a newly signed STH for a tree size; a tree size already
// archived keeps its first STH (the earliest time anchor). It fails when
// the archive holds another root for the size: the log must never sign two
// trees of one size.
func (s *state) archive(ctx context.Context, a archived) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	var root []byte
	err = tx.QueryRowContext(ctx, `SELECT root_hash FROM sths WHERE tree_size = ?`, a.treeSize).Scan(&root)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := tx.ExecContext(ctx, `INSERT INTO sths (tree_size, root_hash, sth, checkpoint, published) VALUES (?, ?, ?, ?, 0)`,
			a.treeSize, a.rootHash, a.sth, a.checkpoint); err != nil {
			return err
		}
	case err != nil:
		return err
	case string(root) != string(a.rootHash):
		return fmt.Errorf("tlog: refusing to sign a second root for tree size %d", a.treeSize)
	}
	return tx.Commit()
}

// markPublished records the published checkpoint of a tree size (with the
// cosignatures it carries) once the witness policy is satisfied; a size
// already marked keeps its first published checkpoint (the earliest
// cosignature timestamps).
func (s *state) markPublished(ctx context.Context, size uint64, root []byte, checkpoint string) (bool, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE sths SET checkpoint = ?, published = 1 WHERE tree_size = ? AND root_hash = ? AND published = 0`,
		checkpoint, size, root)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// get returns the archived STH of a tree size.
func (s *state) get(ctx context.Context, size uint64) (archived, bool, error) {
	return s.one(ctx, `SELECT tree_size, root_hash, sth, checkpoint, published FROM sths WHERE tree_size = ?`, size)
}

// newestPublished returns the newest published tree of size above min.
func (s *state) newestPublished(ctx context.Context, min uint64) (archived, bool, error) {
	return s.one(ctx, `SELECT tree_size, root_hash, sth, checkpoint, published FROM sths WHERE published = 1 AND tree_size > ? ORDER BY tree_size DESC LIMIT 1`, min)
}

func (s *state) one(ctx context.Context, q string, arg uint64) (archived, bool, error) {
	var a archived
	err := s.db.QueryRowContext(ctx, q, arg).Scan(&a.treeSize, &a.rootHash, &a.sth, &a.checkpoint, &a.published)
	if errors.Is(err, sql.ErrNoRows) {
		return a, false, nil
	}
	return a, err == nil, err
}

// list returns up to limit archived STHs of tree size above after, oldest
// first, and whether more follow.
func (s *state) list(ctx context.Context, after int64, limit int) ([]archived, bool, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT tree_size, root_hash, sth, checkpoint, published FROM sths WHERE tree_size > ? ORDER BY tree_size LIMIT ?`, after, limit+1)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	var out []archived
	for rows.Next() {
		var a archived
		if err := rows.Scan(&a.treeSize, &a.rootHash, &a.sth, &a.checkpoint, &a.published); err != nil {
			return nil, false, err
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}
