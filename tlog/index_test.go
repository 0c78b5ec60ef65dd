package tlog

import (
	"context"
	"database/sql"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

func testIndexRow(seq, leaf uint64) indexRow {
	return indexRow{hash: filterHash(seq), indexed: indexed{leafIndex: leaf, artifactType: "vrp_attestation", loggedAt: "2026-12-01T23:30:00Z"}}
}

// TestHashIndexFollow: rows and the follower position are written
// together; a hash keeps the first leaf index it was followed at, whether
// the repeat is in the same range or a later one (then only when the
// caller says it may be indexed, as its filter does); the follower refuses
// a range that does not start where it stands; a reopened index holds the
// same rows.
func TestHashIndexFollow(t *testing.T) {
	dir := t.TempDir()
	x, err := openIndex(dir, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if n, err := x.nextIndex(); err != nil || n != 0 {
		t.Fatalf("new index: next %d, %v; want 0", n, err)
	}
	rows := []indexRow{testIndexRow(1, 0), testIndexRow(2, 1), testIndexRow(1, 2)}
	if err := x.follow(0, 3, rows, make([]bool, 3)); err != nil {
		t.Fatal(err)
	}
	if err := x.follow(0, 3, rows, make([]bool, 3)); err == nil || err.Error() != "tlog: index follower at 3, asked to follow from 0" {
		t.Fatalf("follow from a stale position: %v", err)
	}
	if err := x.follow(3, 4, []indexRow{testIndexRow(2, 3)}, []bool{true}); err != nil {
		t.Fatal(err)
	}
	want := map[uint64]uint64{1: 0, 2: 1}
	check := func(x *hashIndex) {
		t.Helper()
		if n, err := x.nextIndex(); err != nil || n != 4 {
			t.Fatalf("next %d, %v; want 4", n, err)
		}
		for seq, leaf := range want {
			r, ok, err := x.lookup(filterHash(seq))
			if err != nil || !ok || r.leafIndex != leaf || r.artifactType != "vrp_attestation" || r.loggedAt != "2026-12-01T23:30:00Z" {
				t.Fatalf("hash %d: %+v %v %v; want leaf %d", seq, r, ok, err, leaf)
			}
		}
		if _, ok, err := x.lookup(filterHash(3)); ok || err != nil {
			t.Fatalf("hash never followed: found %v, %v", ok, err)
		}
		got, err := x.lookupMany([][]byte{filterHash(1), filterHash(3), filterHash(2)})
		if err != nil || len(got) != 2 || got[string(filterHash(1))].leafIndex != 0 || got[string(filterHash(2))].leafIndex != 1 {
			t.Fatalf("lookupMany: %+v, %v", got, err)
		}
		var n int
		if err := x.eachHash(func(h []byte) { n++ }); err != nil || n != 2 {
			t.Fatalf("eachHash: %d hashes, %v; want 2", n, err)
		}
	}
	check(x)
	if err := x.follow(4, 5, rows[:1], []bool{false, true}); err == nil {
		t.Fatal("follow with a maybeIndexed of the wrong length succeeded")
	}
	if err := x.close(); err != nil {
		t.Fatal(err)
	}
	x, err = openIndex(dir, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer x.close()
	check(x)
}

// TestIndexRebuiltFromLog: the index is derived. An operator whose index
// directory is gone, and whose state.db still has the SQLite index of
// earlier releases (with a row that lies), drops those tables, rebuilds
// the index from the log before New returns, and answers look-ups and
// re-submissions with the log's own leaf indexes.
func TestIndexRebuiltFromLog(t *testing.T) {
	cfg := closedLog(t, 600)
	dir, ctx := cfg.Dir, context.Background()
	if err := os.RemoveAll(filepath.Join(dir, "index")); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE leaves (artifact_hash BLOB PRIMARY KEY, leaf_index INTEGER NOT NULL, artifact_type TEXT NOT NULL, logged_at TEXT NOT NULL) WITHOUT ROWID`,
		`CREATE TABLE follower (id INTEGER PRIMARY KEY CHECK (id = 1), next_index INTEGER NOT NULL)`,
		`INSERT INTO follower VALUES (1, 600)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`INSERT INTO leaves VALUES (?, 999, 'vrp_attestation', '2026-01-01T00:00:00Z')`, filterHash(5)); err != nil {
		t.Fatal(err)
	}
	db.Close()

	op, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close(ctx) //nolint:errcheck // test cleanup
	if n, err := op.idx.nextIndex(); err != nil || n != 600 {
		t.Fatalf("rebuilt index follows %d entries (%v), want 600", n, err)
	}
	var tables int
	if err := op.st.db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name IN ('leaves', 'follower')`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("the SQLite index tables of earlier releases: %d left, %v", tables, err)
	}
	for _, i := range []uint64{0, 5, 599} {
		var h [32]byte
		copy(h[:], filterHash(i))
		_, idx, ok, err := op.lookup(ctx, h)
		if err != nil || !ok || idx != i {
			t.Fatalf("hash %d: leaf %d found %v, %v; want leaf %d", i, idx, ok, err, i)
		}
	}
	_, sep, err := op.Add(ctx, filterSubs(5, 1))
	if err != nil || *sep.Entries[0].LeafIndex != 5 {
		t.Fatalf("re-submitted hash 5: %v %+v, want leaf 5", err, sep)
	}
}
