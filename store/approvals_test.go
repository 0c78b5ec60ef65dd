package store

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/keysvc/keysvc/internal/pgtest"
)

// utc returns an instant as the store returns it: UTC, microseconds.
func utc(min int) time.Time { return time.Date(2026, 1, 1, 10, min, 0, 123456000, time.UTC) }

func TestApprovals(t *testing.T) {
	for name, cfg := range map[string]func(t *testing.T) Config{
		"sqlite":   func(t *testing.T) Config { return Config{SQLitePath: filepath.Join(t.TempDir(), "k.db")} },
		"postgres": func(t *testing.T) Config { return Config{PostgresURL: pgtest.URL(t)} },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := opener(cfg)(t)
			if err := s.InTx(ctx, func(tx Tx) error { return tx.InsertKey(ctx, key("villa")) }); err != nil {
				t.Fatal(err)
			}
			a := Approval{ID: "ap1", KeyName: "villa", Action: "revoke", KID: "villaakerlyckan.se-2026-01-01-01",
				Params: []byte(`{"compromised_at":"2026-01-01T00:00:00Z","reason":"leak"}`), RequestedBy: "token:a",
				RequestedByName: "token:a(alice)", RequestedAt: utc(1), ExpiresAt: utc(2), Status: "pending"}
			if err := s.InTx(ctx, func(tx Tx) error { return tx.InsertApproval(ctx, a) }); err != nil {
				t.Fatal(err)
			}
			if err := s.InTx(ctx, func(tx Tx) error { return tx.InsertApproval(ctx, a) }); !errors.Is(err, ErrConflict) {
				t.Fatalf("duplicate id: %v", err)
			}
			bad := a
			bad.ID, bad.KeyName = "ap2", "nosuchkey"
			if err := s.InTx(ctx, func(tx Tx) error { return tx.InsertApproval(ctx, bad) }); !errors.Is(err, ErrNotFound) {
				t.Fatalf("approval for a missing key: %v", err)
			}
			var got Approval
			if err := s.InTx(ctx, func(tx Tx) (err error) { got, err = tx.LockApproval(ctx, "ap1"); return err }); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, a) {
				t.Fatalf("round trip\n got %+v\nwant %+v", got, a)
			}
			if err := s.InTx(ctx, func(tx Tx) error { _, err := tx.LockApproval(ctx, "nope"); return err }); !errors.Is(err, ErrNotFound) {
				t.Fatalf("missing approval: %v", err)
			}
			decided := a
			decided.Status, decided.DecidedBy, decided.DecidedByName, decided.DecidedAt = "approved", "token:b", "token:b(bob)", ptr(utc(3))
			if err := s.InTx(ctx, func(tx Tx) error { return tx.DecideApproval(ctx, decided) }); err != nil {
				t.Fatal(err)
			}
			pending, err := s.ListApprovals(ctx, "pending")
			if err != nil || len(pending) != 0 {
				t.Fatalf("pending after decision: %v %v", pending, err)
			}
			all, err := s.ListApprovals(ctx, "")
			if err != nil || len(all) != 1 || !reflect.DeepEqual(all[0], decided) {
				t.Fatalf("all approvals %+v %v, want %+v", all, err, decided)
			}
		})
	}
}
