package tlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"

	_ "modernc.org/sqlite" // database/sql driver "sqlite"
)

// state is the operator's STH archive (one signed STH per tree size the
// log signed), beside the Tessera directory and the artifact-hash index
// (hashIndex). It is one SQLite file (<dir>/state.db) in WAL mode with
// synchronous=FULL: an archived STH survives a power loss, like the
// checkpoint Tessera publishes after it (O_SYNC files, fsynced directories).
type state struct {
	db *sql.DB
}

// legacyIndexTables: the artifact-hash index lived in state.db (tables
// leaves and follower) until ADR 0035 moved it to <dir>/index. It is
// derived, so openState drops them (and gives their pages back with
// VACUUM) and the follower rebuilds the index from the log.
const legacyIndexTables = `DROP TABLE IF EXISTS leaves; DROP TABLE IF EXISTS follower;`

const stateSchema = `
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
	var legacy int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name IN ('leaves', 'follower')`).Scan(&legacy); err != nil {
		db.Close()
		return nil, fmt.Errorf("tlog: state: %w", err)
	}
	if legacy > 0 {
		if _, err := db.Exec(legacyIndexTables); err != nil {
			db.Close()
			return nil, fmt.Errorf("tlog: state: dropping the SQLite index of earlier releases: %w", err)
		}
		if _, err := db.Exec(`VACUUM`); err != nil {
			db.Close()
			return nil, fmt.Errorf("tlog: state: %w", err)
		}
	}
	if _, err := db.Exec(stateSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("tlog: state schema: %w", err)
	}
	return &state{db: db}, nil
}

func (s *state) close() error { return s.db.Close() }

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

// indexRow is one followed log entry.
type indexRow struct {
	hash []byte
	indexed
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
