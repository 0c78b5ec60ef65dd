package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/internal/pgtest"
)

// TestOfflineKMSActsOnUncheckedCopy (PostgreSQL; an attack review, session 47): the offline
// `awskms schedule-deletion` (and `disable`) reads the version with
// GetVersion, then checks key history as ReadHistory reads it a moment
// later (checkVersion → CheckAll), and calls KMS with the backend
// reference of the first read. Nothing ties the two reads together. The
// writer commits v1.backend_ref = the ACTIVE version's KMS key, then — in
// a transaction holding an ACCESS EXCLUSIVE lock on lifecycle_epoch
// (which ReadHistory's single statement reads; GetVersion does not) —
// puts the reference back, and commits once the command waits on that
// lock. The check sees the restored, backed row; KMS schedules the
// deletion of the key that signs. Now the command acts on the copy it
// checked (cliAnchorFlags.checkedVersion), here v1's own key.
func TestOfflineKMSActsOnUncheckedCopy(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	k := newAnchoredKMS(t, url)
	lk, e, officer, anchored := k.lk, k.e, k.officer, k.anchored
	srv := k.serve(t)
	c := client.New(srv.URL, e.token)

	v1, v2 := kmsKey(t, c, "villa")
	waitReadyz(t, srv, true, "ready")
	srv.stop(t) // an officer's offline command; serve's reloads would wait on the lock too

	w, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Exec(ctx, `UPDATE key_versions SET backend_ref = $1 WHERE kid = $2`, v2.BackendRef, v1.KID); err != nil {
		t.Fatal(err)
	}
	tx, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE lifecycle_epoch IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE key_versions SET backend_ref = $1 WHERE kid = $2`, v1.BackendRef, v1.KID); err != nil {
		t.Fatal(err)
	}
	type result struct {
		out, errOut string
		code        int
	}
	done := make(chan result, 1)
	go func() {
		out, errOut, code := runCLI(t, officer, append([]string{"awskms", "schedule-deletion", v1.KID, "--pending-days", "7", "--data-dir", e.dir, "--reason", "retired; routine clean-up"}, anchored...)...)
		done <- result{out, errOut, code}
	}()
	mon, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close(ctx)
	var r result
	deadline := time.Now().Add(30 * time.Second)
wait:
	for {
		var n int
		if err := mon.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%lifecycle_epoch%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			r = <-done
			break
		}
		select {
		case r = <-done:
			tx.Rollback(ctx)
			break wait
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never waited on the writer's lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r.code != 0 {
		t.Errorf("schedule-deletion of %s as checked: exit %d\n%s%s", v1.KID, r.code, r.out, r.errOut)
	}
	if s := kmsKeyState(t, lk, v2.BackendRef); s != "Enabled" {
		t.Errorf("the ACTIVE version %s's KMS key is %s after an offline schedule-deletion of retired %s (whose row was checked as backed)", v2.KID, s, v1.KID)
	}
}
