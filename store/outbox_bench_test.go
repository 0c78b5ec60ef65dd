package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/keysvc/keysvc/internal/pgtest"
)

// BenchmarkEnqueueOutbox is one group commit of 8 rows (one statement, one
// commit) on each store: the durability cost a signing request waits for.
func BenchmarkEnqueueOutbox(b *testing.B) {
	for _, kind := range []string{"sqlite-full", "sqlite-normal", "postgres"} {
		b.Run(kind, func(b *testing.B) {
			cfg := Config{SQLitePath: filepath.Join(b.TempDir(), "keysvc.db")}
			if kind == "postgres" {
				cfg = Config{PostgresURL: pgtest.URL(b)}
			}
			ctx := context.Background()
			if _, err := Migrate(ctx, cfg); err != nil {
				b.Fatal(err)
			}
			st, err := Open(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			ob := st.(Outbox)
			if kind == "sqlite-normal" {
				if err := ob.ConfigureOutbox(OutboxOptions{SQLiteSynchronous: "normal"}); err != nil {
					b.Fatal(err)
				}
			}
			now := time.Now()
			rows := make([]OutboxRow, 8)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := range rows {
					rows[j] = outboxRow("http://127.0.0.1:1", i*8+j, now, now)
				}
				got, err := ob.EnqueueOutbox(ctx, rows)
				if err != nil {
					b.Fatal(err)
				}
				if i%16 == 15 {
					ids := make([]int64, len(got))
					for k, r := range got {
						ids[k] = r.ID
					}
					_ = ob.DeleteOutbox(ctx, ids)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/commit")
		})
	}
}
