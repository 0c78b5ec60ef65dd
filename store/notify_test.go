package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/keysvc/keysvc/internal/pgtest"
)

// TestWatchPostgres: a change notified inside a transaction reaches a
// watcher of the same schema only after commit, never after rollback, and
// never a watcher of another schema.
func TestWatchPostgres(t *testing.T) {
	open := opener(func(t *testing.T) Config { return Config{PostgresURL: pgtest.URL(t)} })
	a, other := open(t), open(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 8)
	otherGot := make(chan string, 8)
	ready := make(chan struct{})
	go func() { _ = a.Watch(ctx, func(k string) { got <- k }) }()
	go func() { _ = other.Watch(ctx, func(k string) { otherGot <- k }) }()
	// LISTEN is asynchronous to this goroutine: notify until the first arrives.
	go func() {
		defer close(ready)
		for i := 0; i < 100; i++ {
			_ = a.InTx(ctx, func(tx Tx) error { return tx.NotifyChange(ctx, "warmup") })
			select {
			case k := <-got:
				if k == "warmup" {
					return
				}
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	<-ready
	for len(got) > 0 {
		<-got
	}
	rollback := errors.New("roll back")
	if err := a.InTx(ctx, func(tx Tx) error {
		if err := tx.NotifyChange(ctx, "rolled-back"); err != nil {
			return err
		}
		return rollback
	}); !errors.Is(err, rollback) {
		t.Fatal(err)
	}
	if err := a.InTx(ctx, func(tx Tx) error { return tx.NotifyChange(ctx, "villa") }); err != nil {
		t.Fatal(err)
	}
	select {
	case k := <-got:
		if k != "villa" {
			t.Fatalf("first notification after warm-up = %q, want villa (rolled-back changes must not notify)", k)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notification within 5 s")
	}
	select {
	case k := <-otherGot:
		t.Fatalf("a store in another schema was notified: %q", k)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
}

func TestWatchSQLiteUnsupported(t *testing.T) {
	s := opener(func(t *testing.T) Config { return Config{SQLitePath: filepath.Join(t.TempDir(), "k.db")} })(t)
	if err := s.Watch(context.Background(), func(string) {}); !errors.Is(err, ErrWatchUnsupported) {
		t.Fatalf("Watch on SQLite = %v, want ErrWatchUnsupported", err)
	}
	if err := s.InTx(context.Background(), func(tx Tx) error { return tx.NotifyChange(context.Background(), "k") }); err != nil {
		t.Fatalf("NotifyChange on SQLite must be a no-op: %v", err)
	}
}
