package anchor

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// TestRolledBackPendingSteersCompleteDue (an attack review, session 47;
// fixed: the anchored ListVersions also requires the later states'
// markers absent): the anchored
// ListVersions refuses a key's versions while one is not backed, but
// "backed" is only "this fact was signed once": a row rolled back to an
// older, once-anchored fact of the same version passes (its later state
// markers are not looked at). A database writer puts a retired version
// back to its "pending, armed, activates_at T" fact. The next transition
// of the key — any officer's change, or the scheduler — runs completeDue,
// which re-activates it at T (in the past) and retires the key's real
// active version at T; finish signs both. The log now backs a
// vrp_not_after for the signing version that precedes its own
// vrp_not_before, chosen from the writer's row.
func TestRolledBackPendingSteersCompleteDue(t *testing.T) {
	ctx := context.Background()
	e := newLifecycleEnv(t, store.Config{SQLitePath: filepath.Join(t.TempDir(), "keysvc.db")})
	_, v1, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "villa", Issuer: "villa.example"}, alice)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := e.m.ScheduleRotation(ctx, "villa", alice)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(*v2.ActivatesAt) + 100*time.Millisecond)
	v3, _, err := e.m.Rotate(ctx, "villa", alice) // v2 activates at T (completeDue), then v3 now
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := e.st.GetVersion(ctx, v2.KID); got.State != store.StateRetired {
		t.Fatalf("set-up: %s is %s", v2.KID, got.State)
	}
	// The writer: v2 back to its anchored pending fact.
	if err := store.ExecRawForTest(ctx, e.st, `UPDATE key_versions SET state = 'pending', activated_at = NULL, retired_at = NULL WHERE kid = ?`, v2.KID); err != nil {
		t.Fatal(err)
	}
	rolled, _ := e.st.GetVersion(ctx, v2.KID)
	if f, _ := e.key.VersionFact(rolled); !e.a.isKnown(f.Hash) {
		t.Fatalf("set-up: the rolled-back row is not an anchored fact")
	}
	// Any transition of the key: here a lone officer revokes retired v1.
	_, _, err = e.m.Revoke(ctx, v1.KID, store.Now(), "routine", alice)
	got, _ := e.st.GetVersion(ctx, v3.KID)
	if got.State != store.StateActive {
		f, _ := e.key.VersionFact(got)
		t.Errorf("after a version rolled back to an older anchored fact, a transition (err=%v) left the real active %s %s, retired at %v (activated %v), signed and logged=%v; want the key to take no change (ErrHistoryNotBacked)",
			err, v3.KID, got.State, got.RetiredAt, got.ActivatedAt, e.logged.has(f.JWS))
	}
	if err == nil || !errors.Is(err, rotation.ErrHistoryNotBacked) {
		t.Errorf("transition: %v; want ErrHistoryNotBacked", err)
	}
}

// TestRolledBackKeyDuringOutage: for a while keyBackedBefore went on
// when no log answered whether the next settings revision exists; the
// policy of such a key still decided: a writer rolled the key row back to
// the revision before the two-person rule was switched on, a replica
// (re)started during a log outage, and one officer alone revoked a
// version with compromised_at 1970 (an attack review, session 47). Now a
// replica that never probed the marker takes no change until a log
// answers.
func TestRolledBackKeyDuringOutage(t *testing.T) {
	ctx := context.Background()
	e, retired := newVilla(t)
	before, err := e.st.GetKey(ctx, "villa")
	if err != nil {
		t.Fatal(err)
	}
	if ap, err := e.m.SetPolicy(ctx, "villa", rotation.Policy{TwoPersonRule: true}, alice); err != nil || ap != nil {
		t.Fatalf("two-person rule on: %v %v", ap, err)
	}
	if err := store.ExecRawForTest(ctx, e.st, `UPDATE keys SET policy = ?, settings_rev = ? WHERE name = ?`,
		string(before.Policy), before.SettingsRev, "villa"); err != nil {
		t.Fatal(err)
	}
	// A replica (re)started during a log outage.
	_, m := e.restart(t, &downLog{}, nil)
	_, _, err = m.Revoke(ctx, retired.KID, time.Unix(0, 0), "one officer, compromised since 1970", alice)
	if !errors.Is(err, rotation.ErrHistoryUnconfirmed) {
		t.Errorf("err %v: one officer revoked %s (compromised_at 1970) under a two-person rule the log records on, from a key row rolled back in the database, during a log outage", err, retired.KID)
	}
}

// TestCreateKeyIssuerCheckReadsUnanchoredKeys (an attack review, session
// 47; fixed: the anchored ListKeys checks every key it hands out): CreateKey
// decides whether the issuer is taken (ErrIssuerInUse unless
// share_issuer, VRP K5: a key per layer) from tx.ListKeys, key rows the
// anchored store hands out unchecked. A writer moves key villa's issuer
// away while an operator creates a second key on villa's issuer, then
// puts it back: the log backs two keys on one issuer that no one said
// should share it.
func TestCreateKeyIssuerCheckReadsUnanchoredKeys(t *testing.T) {
	ctx := context.Background()
	e := newLifecycleEnv(t, store.Config{SQLitePath: filepath.Join(t.TempDir(), "keysvc.db")})
	if _, _, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "villa", Issuer: "villa.example"}, alice); err != nil {
		t.Fatal(err)
	}
	if err := store.ExecRawForTest(ctx, e.st, `UPDATE keys SET issuer = 'elsewhere.example' WHERE name = 'villa'`); err != nil {
		t.Fatal(err)
	}
	_, _, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "intruder", Issuer: "villa.example"}, alice)
	if err := store.ExecRawForTest(ctx, e.st, `UPDATE keys SET issuer = 'villa.example' WHERE name = 'villa'`); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, rotation.ErrIssuerInUse) && !errors.Is(err, rotation.ErrHistoryNotBacked) {
		t.Errorf("creating a second key on villa's issuer while villa's row was edited: %v; want ErrIssuerInUse or ErrHistoryNotBacked", err)
	}
}
