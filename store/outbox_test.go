package store

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/keysvc/keysvc/internal/pgtest"
)

func TestOutboxSQLite(t *testing.T) {
	testOutbox(t, opener(func(t *testing.T) Config {
		return Config{SQLitePath: filepath.Join(t.TempDir(), "keysvc.db")}
	}))
}

func TestOutboxPostgres(t *testing.T) {
	pgtest.URL(t)
	testOutbox(t, opener(func(t *testing.T) Config { return Config{PostgresURL: pgtest.URL(t)} }))
}

func outboxRow(log string, n int, enq, lease time.Time) OutboxRow {
	return OutboxRow{LogURL: log, ArtifactType: "vrp_attestation", ArtifactHash: sha256.Sum256(fmt.Appendf(nil, "jws-%d", n)),
		EnqueuedAt: enq, LeaseUntil: lease}
}

func testOutbox(t *testing.T, open func(t *testing.T) Store) {
	ctx := context.Background()
	const logA, logB = "http://127.0.0.1:1/a", "http://127.0.0.1:1/b"
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 123456789, cet)

	t.Run("enqueue claim delete backlog", func(t *testing.T) {
		s := open(t)
		ob := s.(Outbox)
		in := []OutboxRow{
			outboxRow(logA, 1, t0, t0.Add(10*time.Second)),
			outboxRow(logB, 1, t0, t0.Add(10*time.Second)),
			outboxRow(logA, 2, t0.Add(time.Second), t0.Add(11*time.Second)),
		}
		got, err := ob.EnqueueOutbox(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 {
			t.Fatalf("EnqueueOutbox returned %d rows", len(got))
		}
		seen := map[int64]bool{}
		byHash := map[[32]byte]map[string]OutboxRow{}
		for _, r := range got {
			if r.ID <= 0 || seen[r.ID] {
				t.Fatalf("row id %d: not positive or repeated", r.ID)
			}
			seen[r.ID] = true
			if byHash[r.ArtifactHash] == nil {
				byHash[r.ArtifactHash] = map[string]OutboxRow{}
			}
			byHash[r.ArtifactHash][r.LogURL] = r
		}
		for _, want := range in {
			r, ok := byHash[want.ArtifactHash][want.LogURL]
			want.ID = r.ID
			want.EnqueuedAt, want.LeaseUntil = norm(want.EnqueuedAt), norm(want.LeaseUntil)
			if !ok {
				t.Fatalf("row %x for %s not returned", want.ArtifactHash[:4], want.LogURL)
			}
			equal(t, "enqueued row", r, want)
		}

		bl, err := ob.OutboxBacklog(ctx)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "backlog", bl, map[string]OutboxStat{logA: {Rows: 2, Oldest: norm(t0)}, logB: {Rows: 1, Oldest: norm(t0)}})

		// Nothing is claimable before the leases end.
		c, err := ob.ClaimOutbox(ctx, logA, t0.Add(10*time.Second), t0.Add(time.Minute), 10)
		if err != nil || len(c) != 0 {
			t.Fatalf("claim at lease end: %v, %v; want none (strictly before)", c, err)
		}
		// At 10.5 s only the first row of log A has expired.
		c, err = ob.ClaimOutbox(ctx, logA, t0.Add(10500*time.Millisecond), t0.Add(time.Minute), 10)
		if err != nil || len(c) != 1 || c[0].ArtifactHash != in[0].ArtifactHash || !c[0].LeaseUntil.Equal(norm(t0.Add(time.Minute))) {
			t.Fatalf("claim at 10.5 s: %+v, %v", c, err)
		}
		// Claimed rows are leased again: not claimable until the new lease ends.
		c, err = ob.ClaimOutbox(ctx, logA, t0.Add(30*time.Second), t0.Add(2*time.Minute), 10)
		if err != nil || len(c) != 1 || c[0].ArtifactHash != in[2].ArtifactHash {
			t.Fatalf("claim at 30 s: %+v, %v", c, err)
		}
		// The limit holds, oldest first.
		c, err = ob.ClaimOutbox(ctx, logA, t0.Add(3*time.Minute), t0.Add(4*time.Minute), 1)
		if err != nil || len(c) != 1 || c[0].ArtifactHash != in[0].ArtifactHash {
			t.Fatalf("claim with limit 1: %+v, %v", c, err)
		}

		ids := []int64{byHash[in[0].ArtifactHash][logA].ID, byHash[in[2].ArtifactHash][logA].ID, 1 << 40}
		if err := ob.DeleteOutbox(ctx, ids); err != nil {
			t.Fatal(err)
		}
		bl, err = ob.OutboxBacklog(ctx)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "backlog after delete", bl, map[string]OutboxStat{logB: {Rows: 1, Oldest: norm(t0)}})

		// Ids are never handed out again after a delete.
		again, err := ob.EnqueueOutbox(ctx, []OutboxRow{outboxRow(logA, 3, t0, t0)})
		if err != nil {
			t.Fatal(err)
		}
		for id := range seen {
			if again[0].ID <= id {
				t.Errorf("new row id %d not above deleted id %d", again[0].ID, id)
			}
		}
	})

	t.Run("large enqueue is one transaction", func(t *testing.T) {
		s := open(t)
		ob := s.(Outbox)
		rows := make([]OutboxRow, outboxChunk+7)
		for i := range rows {
			rows[i] = outboxRow(logA, i, t0, t0)
		}
		got, err := ob.EnqueueOutbox(ctx, rows)
		if err != nil || len(got) != len(rows) {
			t.Fatalf("EnqueueOutbox(%d): %d rows, %v", len(rows), len(got), err)
		}
		// The ids EnqueueOutbox reports are the rows' ids in the table.
		byID := map[int64][32]byte{}
		for _, r := range got {
			byID[r.ID] = r.ArtifactHash
		}
		for {
			c, err := ob.ClaimOutbox(ctx, logA, t0.Add(time.Second), t0.Add(time.Hour), 1000)
			if err != nil {
				t.Fatal(err)
			}
			if len(c) == 0 {
				break
			}
			for _, r := range c {
				if h, ok := byID[r.ID]; !ok || h != r.ArtifactHash {
					t.Fatalf("row %d in the table is not the row EnqueueOutbox reported under that id", r.ID)
				}
				delete(byID, r.ID)
			}
		}
		if len(byID) != 0 {
			t.Fatalf("%d reported ids not in the table", len(byID))
		}
		// A bad row makes the whole call fail and leaves nothing behind.
		bad := append([]OutboxRow(nil), rows...)
		bad[len(bad)-1].ArtifactType = "vrp_bogus"
		if _, err := ob.EnqueueOutbox(ctx, bad); err == nil {
			t.Fatal("EnqueueOutbox with a bad artifact_type succeeded")
		}
		bl, err := ob.OutboxBacklog(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if bl[logA].Rows != int64(len(rows)) {
			t.Fatalf("backlog %d rows after a failed enqueue, want %d", bl[logA].Rows, len(rows))
		}
	})

	t.Run("concurrent claims never share a row", func(t *testing.T) {
		s := open(t)
		ob := s.(Outbox)
		const n = 400
		rows := make([]OutboxRow, n)
		for i := range rows {
			rows[i] = outboxRow(logA, i, t0, t0)
		}
		if _, err := ob.EnqueueOutbox(ctx, rows); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		claimed := map[int64]int{}
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					c, err := ob.ClaimOutbox(ctx, logA, t0.Add(time.Second), t0.Add(time.Hour), 7)
					if err != nil {
						t.Error(err)
						return
					}
					if len(c) == 0 {
						return
					}
					mu.Lock()
					for _, r := range c {
						claimed[r.ID]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(claimed) != n {
			t.Fatalf("%d rows claimed, want %d", len(claimed), n)
		}
		for id, k := range claimed {
			if k != 1 {
				t.Fatalf("row %d claimed %d times", id, k)
			}
		}
	})
}
