package anchor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlogclient"
)

// downLog is a log that does not answer (an outage).
type downLog struct{ emptyLog }

func (l *downLog) Proof(context.Context, [32]byte, uint64) ([]byte, error) {
	return nil, errors.New("dial tcp: connection refused")
}

// TestRevokeApprovalDuringLogOutage: LockApproval proves that a pending
// approval was never decided by asking the log for its approval_decided
// marker (ADR 0051). With the log down, every approval was refused
// (ErrHistoryUnconfirmed), so under the two-person rule an emergency
// revocation could not be approved during an outage, though a one-person
// revocation goes through (an attack review, session 47). Now a "revoke"
// approval goes on when no log answers (revoking twice revokes what is
// revoked); a "destroy" or "policy" approval still waits for the log.
func TestRevokeApprovalDuringLogOutage(t *testing.T) {
	ctx := context.Background()
	e := newLegacyEnv(t)
	a := e.newAnchor()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	now := store.Now()
	ap := store.Approval{ID: "00000000000000aa", KeyName: e.k.Name, Action: "revoke", KID: e.v1.KID, Params: []byte(`{"reason":"compromised"}`),
		RequestedBy: "principal:alice", RequestedByName: "alice", RequestedAt: now, ExpiresAt: now.Add(time.Hour), Status: "pending"}
	if err := a.Wrap(e.st).InTx(ctx, func(tx store.Tx) error { return tx.InsertApproval(ctx, ap) }); err != nil {
		t.Fatal(err)
	}

	// serve's reloads have checked history (facts learned).
	h, err := e.st.ReadHistory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v := a.CheckAll(ctx, h); len(v.Keys)+len(v.Versions) != 0 {
		t.Fatalf("check: %+v", v)
	}
	// The log goes down.
	a.logs, a.scanned = []tlogclient.Log{&downLog{}}, nil

	// Control: a change to the (backed) retired version goes through
	// without the log, as a one-person revocation does.
	if err := a.Wrap(e.st).InTx(ctx, func(tx store.Tx) error {
		v, err := tx.GetVersion(ctx, e.v1.KID)
		if err != nil {
			return err
		}
		at := store.Now()
		v.State, v.RevokedAt, v.RevocationReason = store.StateRevoked, &at, "compromised"
		return tx.UpdateVersion(ctx, v)
	}); err != nil {
		t.Fatalf("control: revoking the backed retired version with the log down: %v", err)
	}

	lock := func(id string) error {
		return a.Wrap(e.st).InTx(ctx, func(tx store.Tx) error {
			_, err := tx.LockApproval(ctx, id)
			return err
		})
	}
	// The filed, backed, undecided revocation.
	if err := lock(ap.ID); err != nil {
		t.Fatalf("locking a backed, undecided revoke approval to decide it, with the log down: %v", err)
	}
	// A destroy waits for the log.
	ap2 := ap
	ap2.ID, ap2.Action = "00000000000000bb", "destroy"
	if err := a.Wrap(e.st).InTx(ctx, func(tx store.Tx) error { return tx.InsertApproval(ctx, ap2) }); err != nil {
		t.Fatal(err)
	}
	if err := lock(ap2.ID); !errors.Is(err, rotation.ErrHistoryUnconfirmed) {
		t.Fatalf("a destroy approval with the log down: %v, want ErrHistoryUnconfirmed", err)
	}
}
