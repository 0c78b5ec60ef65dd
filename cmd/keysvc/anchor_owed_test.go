package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/anchor"
	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlogclient"
)

// absentLog answers every look-up "not found" (a log that never got the
// events: their outbox rows were deleted).
type absentLog struct{}

func (absentLog) URL() string { return "http://log.test" }
func (absentLog) AddBatch(context.Context, []tlogclient.Entry) (*tlogclient.Promise, error) {
	return nil, errors.New("not for this test")
}
func (absentLog) Proof(context.Context, [32]byte, uint64) ([]byte, error) {
	return nil, tlogclient.ErrNotFound
}
func (absentLog) Archive(context.Context, uint64, int) ([]tlogclient.ArchivedTree, error) {
	return nil, nil
}

type nopRecorder struct{}

func (nopRecorder) Record(context.Context, string, ...string) error { return nil }

// readyTlog is a log client whose own readiness is err.
type readyTlog struct {
	api.TransparencyLog
	err error
}

func (r readyTlog) Ready() error { return r.err }

// migratedSQLite is a new, migrated SQLite key history, closed after t.
func migratedSQLite(t *testing.T) store.Store {
	t.Helper()
	ctx := context.Background()
	c := store.Config{SQLitePath: filepath.Join(t.TempDir(), "keysvc.db")}
	if _, err := store.Migrate(ctx, c); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestReadyzOwedEvents: /readyz turns unready once an event this process
// made has waited longer than the bound to be proved in a log (ADR 0052),
// and the log client's own unreadiness comes first.
func TestReadyzOwedEvents(t *testing.T) {
	ctx := context.Background()
	st := migratedSQLite(t)
	key, err := anchor.GenerateKeyFile(filepath.Join(t.TempDir(), "k.json"))
	if err != nil {
		t.Fatal(err)
	}
	made := time.Now().Add(-16 * time.Minute)
	a, err := anchor.New(anchor.Config{Key: key, Logs: []tlogclient.Log{absentLog{}}, Store: st, Recorder: nopRecorder{},
		Now: func() time.Time { return made }})
	if err != nil {
		t.Fatal(err)
	}
	tl := withOwedEvents(readyTlog{}, a, 15*time.Minute)
	if err := tl.Ready(); err != nil {
		t.Fatalf("nothing owed: %v", err)
	}
	if err := a.Wrap(st).InTx(ctx, func(tx store.Tx) error {
		return tx.InsertKey(ctx, store.Key{Name: "villa", Issuer: "villa.example", Algorithm: "EdDSA", Backend: "software", CreatedAt: made})
	}); err != nil {
		t.Fatal(err)
	}
	err = tl.Ready()
	if err == nil || !strings.HasPrefix(err.Error(), "key history: 1 event(s) made here not in the transparency log after 16m") {
		t.Fatalf("a key fact owed for 16 minutes: %v", err)
	}
	if err := withOwedEvents(readyTlog{}, a, 20*time.Minute).Ready(); err != nil {
		t.Fatalf("owed for less than the bound: %v", err)
	}
	down := errors.New("transparency log http://log.test: 3 leaves waiting, oldest 11m")
	if err := withOwedEvents(readyTlog{err: down}, a, 15*time.Minute).Ready(); !errors.Is(err, down) {
		t.Fatalf("the client's own unreadiness: %v", err)
	}
}
