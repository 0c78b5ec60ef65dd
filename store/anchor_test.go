package store

import (
	"context"
	"crypto/sha256"
	"path/filepath"
	"testing"
	"time"

	"github.com/keysvc/keysvc/internal/pgtest"
)

// TestAnchorEvents: anchor_events (migration 00007) keeps events by hash on
// both dialects; the same hash stored twice keeps the first row.
func TestAnchorEvents(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		testAnchorEvents(t, opener(func(t *testing.T) Config {
			return Config{SQLitePath: filepath.Join(t.TempDir(), "keysvc.db")}
		})(t))
	})
	t.Run("postgres", func(t *testing.T) {
		testAnchorEvents(t, opener(func(t *testing.T) Config { return Config{PostgresURL: pgtest.URL(t)} })(t))
	})
}

func testAnchorEvents(t *testing.T, s Store) {
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 13, 0, 0, 123456000, time.UTC)
	a := AnchorEvent{Hash: sha256.Sum256([]byte("a.b.c")), Kind: "version", Subject: "x-2026-12-01-01", JWS: "a.b.c", CreatedAt: at}
	b := AnchorEvent{Hash: sha256.Sum256([]byte("d.e.f")), Kind: "marker.audit_seq", Subject: "1", JWS: "d.e.f", CreatedAt: at.Add(time.Second)}
	err := s.InTx(ctx, func(tx Tx) error {
		return tx.(AnchorWriter).InsertAnchorEvents(ctx, []AnchorEvent{a, b, {Hash: a.Hash, Kind: "other", Subject: "other", JWS: "a.b.c", CreatedAt: at}})
	})
	if err != nil {
		t.Fatal(err)
	}
	as := s.(AnchorStore)
	missing := sha256.Sum256([]byte("nope"))
	got, err := as.AnchorEventsByHash(ctx, [][32]byte{a.Hash, missing})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[a.Hash] != a {
		t.Fatalf("by hash: %+v, want only %+v", got, a)
	}
	// More hashes than one query asks for (anchorLookupChunk), the two
	// stored ones in different chunks, one of them twice.
	many := make([][32]byte, 0, 2*anchorLookupChunk+3)
	for i := range 2*anchorLookupChunk + 1 {
		many = append(many, sha256.Sum256([]byte{byte(i), byte(i >> 8), 'x'}))
	}
	many = append([][32]byte{a.Hash}, append(many, b.Hash, a.Hash)...)
	if got, err = as.AnchorEventsByHash(ctx, many); err != nil || len(got) != 2 || got[a.Hash] != a || got[b.Hash] != b {
		t.Fatalf("by %d hashes: %d found (%v), want a and b", len(many), len(got), err)
	}
	all, err := as.ListAnchorEvents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0] != a || all[1] != b {
		t.Fatalf("list: %+v", all)
	}
	hashes, err := as.AnchorEventHashes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(hashes) != 2 || hashes[0] != a.Hash || hashes[1] != b.Hash {
		t.Fatalf("hashes: %x, want %x then %x", hashes, a.Hash, b.Hash)
	}
}
