package anchor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keysvc/keysvc/internal/pgtest"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlogclient"
)

// TestVersionRowLockedWhileChecked, on PostgreSQL (READ COMMITTED): a
// transaction checks a version row against the log before it writes it
// (ADR 0049), and finish signs the row as read back, backend_ref
// included. The check read the row unlocked: a database writer holding
// the row (SELECT … FOR UPDATE) let keysvc's check pass, set backend_ref
// once keysvc's UPDATE waited on its lock, and committed; finish then
// signed the writer's reference as a backed version_backend fact (an
// attack review, session 47; the same window took public_jwk). Now the
// check locks the row (store.Tx.LockVersion): keysvc waits at the check,
// reads the writer's row, and refuses it; nothing of it is signed.
func TestVersionRowLockedWhileChecked(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	c := store.Config{PostgresURL: url}
	st, key := storeAndKey(t, c)
	logged := &memRecorder{}
	newAnchor := func() *Anchor {
		a, err := New(Config{Key: key, Logs: []tlogclient.Log{&emptyLog{}}, Store: st, Recorder: logged,
			Scanned: logged.scanned})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := newAnchor()
	if err := a.Start(ctx); err != nil { // fresh node: bootstrap
		t.Fatal(err)
	}
	h := history(1, 2)
	k := h.Keys[0]
	v1, v2 := h.Versions[k.Name][0], h.Versions[k.Name][1]
	v1.BackendRef, v2.BackendRef = "pkcs11:token=keysvc;object="+v1.KID, "pkcs11:token=keysvc;object="+v2.KID
	if err := a.Wrap(st).InTx(ctx, func(tx store.Tx) error {
		if err := tx.InsertKey(ctx, k); err != nil {
			return err
		}
		for _, v := range []store.KeyVersion{v1, v2} {
			if err := tx.InsertVersion(ctx, v); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	read := func() store.History {
		h, err := st.ReadHistory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if v := newAnchor().CheckAll(ctx, read()); len(v.Keys)+len(v.Versions) != 0 {
		t.Fatalf("anchored history: %+v", v)
	}

	// The writer holds v1's row.
	w, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	wtx, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wtx.Exec(ctx, `SELECT 1 FROM key_versions WHERE kid = $1 FOR UPDATE`, v1.KID); err != nil {
		t.Fatal(err)
	}
	// keysvc destroys v1 (an officer's request): checked, then waits.
	done := make(chan error, 1)
	go func() {
		done <- a.Wrap(st).InTx(ctx, func(tx store.Tx) error { return tx.DestroyVersionMaterial(ctx, v1.KID, store.Now()) })
	}()
	mon, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := mon.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%key_versions%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("keysvc never waited on the writer's lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
	evil := "software:kid=" + v1.KID
	if _, err := wtx.Exec(ctx, `UPDATE key_versions SET backend_ref = $1 WHERE kid = $2`, evil, v1.KID); err != nil {
		t.Fatal(err)
	}
	if err := wtx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, rotation.ErrHistoryNotBacked) {
		t.Errorf("the destroy of a row changed while keysvc waited for it: %v, want ErrHistoryNotBacked", err)
	}
	got, err := st.GetVersion(ctx, v1.KID)
	if err != nil {
		t.Fatal(err)
	}
	if got.MaterialDestroyedAt != nil {
		t.Errorf("v1 destroyed: %+v", got)
	}
	f, _ := key.BackendFact(got)
	if logged.has(f.JWS) {
		t.Errorf("keysvc signed and logged the writer's backend_ref %q as %s's version_backend fact", evil, v1.KID)
	}
	if v := newAnchor().CheckAll(ctx, read()); v.Versions[v1.KID] == "" {
		t.Errorf("a fresh check backs %s with the backend_ref the database writer set (%q): %+v", v1.KID, got.BackendRef, v)
	}
}
