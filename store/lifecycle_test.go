package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/keysvc/keysvc/internal/pgtest"
)

// ADR 0014 store surface: the lifecycle epoch, commit deadlines, one-read
// key history and idempotency keys, on both dialects.
func TestWindowsStore(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		runWindowsSuite(t, opener(func(t *testing.T) Config { return Config{SQLitePath: filepath.Join(t.TempDir(), "k.db")} }))
	})
	t.Run("postgres", func(t *testing.T) {
		runWindowsSuite(t, opener(func(t *testing.T) Config { return Config{PostgresURL: pgtest.URL(t)} }))
	})
}

func runWindowsSuite(t *testing.T, open func(t *testing.T) Store) {
	ctx := context.Background()
	t.Run("epoch advances with every change, not on rollback", func(t *testing.T) {
		s := open(t)
		e0, err := s.LifecycleEpoch(ctx)
		if err != nil || e0 != 1 {
			t.Fatalf("epoch %d, %v; want 1", e0, err)
		}
		tx(t, s, func(tx Tx) error { return tx.NotifyChange(ctx, "villa") })
		_ = s.InTx(ctx, func(tx Tx) error { _ = tx.NotifyChange(ctx, "villa"); return errors.New("abort") })
		if e, _ := s.LifecycleEpoch(ctx); e != 2 {
			t.Fatalf("epoch %d after one commit and one rollback, want 2", e)
		}
	})
	t.Run("commit deadline", func(t *testing.T) {
		s := open(t)
		tx(t, s, func(tx Tx) error { return tx.InsertKey(ctx, key("villa")) })
		// In time: committed.
		tx(t, s, func(tx Tx) error {
			if err := tx.CommitBy(ctx, Now().Add(time.Minute)); err != nil {
				return err
			}
			return tx.InsertVersion(ctx, version("villa", "v-1", StateActive, at(1, 0)))
		})
		// Too late: rolled back, nothing written.
		err := s.InTx(ctx, func(tx Tx) error {
			if err := tx.CommitBy(ctx, Now().Add(50*time.Millisecond)); err != nil {
				return err
			}
			if err := tx.InsertVersion(ctx, version("villa", "v-2", StatePending, at(2, 0))); err != nil {
				return err
			}
			time.Sleep(100 * time.Millisecond)
			return nil
		})
		isErr(t, "late commit", err, ErrCommitDeadline)
		if _, err := s.GetVersion(ctx, "v-2"); !errors.Is(err, ErrNotFound) {
			t.Errorf("a transaction past its commit deadline wrote v-2: %v", err)
		}
		h, err := s.ReadHistory(ctx)
		if err != nil || len(h.Keys) != 1 || len(h.Versions["villa"]) != 1 || h.Versions["villa"][0].KID != "v-1" {
			t.Fatalf("ReadHistory: %+v, %v", h, err)
		}
		if e, _ := s.LifecycleEpoch(ctx); h.Epoch != e {
			t.Errorf("ReadHistory epoch %d, LifecycleEpoch %d", h.Epoch, e)
		}
	})
	t.Run("armed_at round trip", func(t *testing.T) {
		s := open(t)
		v := version("villa", "v-1", StatePending, at(1, 0))
		v.ActivatesAt, v.ArmedAt = ptr(at(3, 0)), ptr(at(2, 123456000))
		tx(t, s, func(tx Tx) error {
			if err := tx.InsertKey(ctx, key("villa")); err != nil {
				return err
			}
			return tx.InsertVersion(ctx, v)
		})
		got, err := s.GetVersion(ctx, "v-1")
		if err != nil || got.ArmedAt == nil || !got.ArmedAt.Equal(at(2, 123456000)) {
			t.Fatalf("ArmedAt read back %v, %v", got.ArmedAt, err)
		}
	})
	t.Run("idempotency keys", func(t *testing.T) {
		s := open(t)
		k := IdempotencyKey{Principal: "token:a", Key: "k1", Fingerprint: "f1", CreatedAt: Now()}
		tx(t, s, func(tx Tx) error { return tx.ClaimIdempotencyKey(ctx, k) })
		err := s.InTx(ctx, func(tx Tx) error { return tx.ClaimIdempotencyKey(ctx, k) })
		isErr(t, "second claim", err, ErrConflict)
		got, err := s.GetIdempotencyKey(ctx, "token:a", "k1")
		if err != nil || got.Status != 0 || got.Body != nil || got.Fingerprint != "f1" {
			t.Fatalf("claimed record %+v, %v", got, err)
		}
		if err := s.CompleteIdempotencyKey(ctx, "token:a", "k1", 200, []byte(`{"ok":true}`)); err != nil {
			t.Fatal(err)
		}
		got, _ = s.GetIdempotencyKey(ctx, "token:a", "k1")
		if got.Status != 200 || string(got.Body) != `{"ok":true}` {
			t.Fatalf("completed record %+v", got)
		}
		_, err = s.GetIdempotencyKey(ctx, "token:b", "k1")
		isErr(t, "other principal", err, ErrNotFound)
		// Claims purge records older than the TTL.
		old := IdempotencyKey{Principal: "token:a", Key: "k2", Fingerprint: "f", CreatedAt: Now().Add(-IdempotencyTTL - time.Hour)}
		tx(t, s, func(tx Tx) error { return tx.ClaimIdempotencyKey(ctx, old) })
		tx(t, s, func(tx Tx) error {
			return tx.ClaimIdempotencyKey(ctx, IdempotencyKey{Principal: "token:a", Key: "k3", Fingerprint: "f", CreatedAt: Now()})
		})
		_, err = s.GetIdempotencyKey(ctx, "token:a", "k2")
		isErr(t, "expired record", err, ErrNotFound)
	})
}

// TestCommitDeadlineTrigger: on PostgreSQL the deadline is checked at
// COMMIT by the database itself (deferred trigger keysvc_commit_deadline,
// on its clock), not only by the store before it sends COMMIT.
func TestCommitDeadlineTrigger(t *testing.T) {
	u := pgtest.URL(t)
	if _, err := Migrate(context.Background(), Config{PostgresURL: u}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	run := func(deadline time.Time) error {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT set_config('keysvc.commit_by', $1, true)`, FormatTime(deadline)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE lifecycle_epoch SET epoch = epoch + 1`); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	if err := run(time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("commit before the deadline: %v", err)
	}
	err = run(time.Now().Add(-time.Millisecond))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != commitDeadlineSQLState {
		t.Fatalf("commit after the deadline: %v, want SQLSTATE %s", err, commitDeadlineSQLState)
	}
	if _, class := pgDialect.classify(err); class != ErrCommitDeadline {
		t.Errorf("classified as %v, want ErrCommitDeadline", class)
	}
}
