package rotation_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// destroyDetails decodes the details of a version.destroy_material row.
type destroyDetails struct {
	Backend          string `json:"backend"`
	BackendRef       string `json:"backend_ref"`
	State            string `json:"state"`
	Note             string `json:"note"`
	PendingDays      int    `json:"pending_days"`
	AlreadyDestroyed bool   `json:"already_destroyed"`
	Approval         string `json:"approval"`
	RequestedBy      string `json:"requested_by"`
	ApprovedBy       string `json:"approved_by"`
}

func lastRow(t *testing.T, s store.Store) store.AuditEvent {
	t.Helper()
	rows := auditRows(t, s)
	if len(rows) == 0 {
		t.Fatal("no audit rows")
	}
	return rows[len(rows)-1]
}

// TestDestroyMaterial: without the two-person rule a retired or revoked
// version's material is destroyed at once; active and pending versions,
// a second destruction, a blank reason and a bad pending window are
// refused; a failing backend records nothing; the public key stays in the
// key history and JWKS, old signatures still verify, and the Keyring never
// loads the destroyed version again.
func TestDestroyMaterial(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newLCEnv(t, s, t0, 0)
		_, v1 := e.createPolicy(t, "villa", issuer, "", rotation.Policy{})
		payload := []byte(`{"offer":"villa"}`)
		jwsV1, err := e.entry(t, "villa").Active.Sign(payload, "")
		if err != nil {
			t.Fatal(err)
		}
		e.at(t0.Add(time.Hour))
		v2, _ := e.rotate(t, "villa")
		e.at(t0.Add(2 * time.Hour))
		v3, err := e.m.ScheduleRotation(ctx, "villa", bob)
		if err != nil {
			t.Fatal(err)
		}
		before := lcFind(t, versions(t, s, "villa"), v1.KID)
		if before.State != store.StateRetired || before.SealedPrivateKey == nil || before.MaterialDestroyedAt != nil {
			t.Fatalf("v1 before: %+v", before)
		}
		loadsBefore := e.b.loadsOf(v1.KID)
		rowsBefore := len(auditRows(t, s))

		for _, c := range []struct {
			what, kid, reason string
			days              int
			want              error
			msg               string
		}{
			{"active version", v2.KID, "r", 0, rotation.ErrInvalidTransition, "is active"},
			{"pending version", v3.KID, "r", 0, rotation.ErrInvalidTransition, "is pending"},
			{"unknown version", issuer + "-2000-01-01-01", "r", 0, rotation.ErrVersionNotFound, ""},
			{"blank reason", v1.KID, "  ", 0, rotation.ErrInvalidRequest, "reason"},
			{"6 pending days", v1.KID, "r", 6, rotation.ErrInvalidRequest, "pending_days"},
			{"31 pending days", v1.KID, "r", 31, rotation.ErrInvalidRequest, "pending_days"},
		} {
			ap, d, err := e.m.RequestDestroy(ctx, c.kid, c.reason, backends.DestroyOptions{PendingWindowDays: c.days}, alice)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) || ap != nil || d != nil {
				t.Errorf("%s: approval %v destroyed %v err %v; want %v containing %q", c.what, ap, d, err, c.want, c.msg)
			}
		}
		// A backend failure records nothing.
		e.b.failDestroy.Store(true)
		if _, _, err := e.m.RequestDestroy(ctx, v1.KID, "retired long ago", backends.DestroyOptions{}, alice); !errors.Is(err, backends.ErrUnavailable) {
			t.Fatalf("destroy with the backend down: %v, want ErrUnavailable", err)
		}
		e.b.failDestroy.Store(false)
		if got := lcFind(t, versions(t, s, "villa"), v1.KID); !reflect.DeepEqual(got, before) {
			t.Fatalf("refused destructions changed v1:\n got %+v\nwant %+v", got, before)
		}
		if n := len(auditRows(t, s)); n != rowsBefore {
			t.Fatalf("refused destructions wrote %d audit rows", n-rowsBefore)
		}

		at := t0.Add(3 * time.Hour)
		e.at(at)
		ap, d, err := e.m.RequestDestroy(ctx, v1.KID, "retired long ago", backends.DestroyOptions{}, alice)
		if err != nil || ap != nil || d == nil {
			t.Fatalf("RequestDestroy: approval %+v destroyed %+v err %v", ap, d, err)
		}
		want := before
		want.MaterialDestroyedAt, want.SealedPrivateKey = tp(at), nil
		if !reflect.DeepEqual(d.Version, want) || d.Backend != "software" || d.Result.DeletionDate != nil || d.Result.AlreadyDestroyed {
			t.Fatalf("destroyed %+v\nwant version %+v", d, want)
		}
		if got := lcFind(t, versions(t, s, "villa"), v1.KID); !reflect.DeepEqual(got, want) {
			t.Fatalf("v1 in key history:\n got %+v\nwant %+v", got, want)
		}
		row := lastRow(t, s)
		var det destroyDetails
		if err := json.Unmarshal(row.Details, &det); err != nil {
			t.Fatal(err)
		}
		if row.Action != "version.destroy_material" || row.KID != v1.KID || row.KeyName != "villa" || row.Actor != alice.Name ||
			row.Reason != "retired long ago" || !row.At.Equal(at) {
			t.Fatalf("audit row %+v", row)
		}
		if det.Backend != "software" || det.BackendRef != before.BackendRef || det.State != "retired" || det.Approval != "" ||
			!strings.Contains(det.Note, "backups") || det.AlreadyDestroyed {
			t.Fatalf("audit details %s", row.Details)
		}
		if _, _, err := e.m.RequestDestroy(ctx, v1.KID, "again", backends.DestroyOptions{}, alice); !errors.Is(err, rotation.ErrInvalidTransition) ||
			!strings.Contains(err.Error(), "already destroyed") {
			t.Fatalf("second destruction: %v", err)
		}

		// Public key and windows stay published; old signatures verify.
		ke := e.entry(t, "villa")
		if !hasKID(lcJWKS(t, ke.JWKS), v1.KID) {
			t.Error("the destroyed (retired) version left the JWKS")
		}
		found := false
		for _, h := range lcHistory(t, ke.History).Keys {
			if h.KID == v1.KID {
				found = h.Status == "retired" && h.NotBefore == ts(t0) && h.NotAfter == ts(t0.Add(time.Hour))
			}
		}
		if !found {
			t.Errorf("key history lacks the destroyed %s with its window: %s", v1.KID, ke.History.Body)
		}
		verifyJWS(t, jwsV1, want.PublicJWK, v1.KID, "EdDSA", payload)

		// The Keyring never loads the destroyed version. v3's scheduled
		// activation (2h + prepublish) had come, so the destruction's
		// transition completed it first: v3 signs, v2 is retired.
		if err := e.m.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		if n := e.b.loadsOf(v1.KID); n != loadsBefore {
			t.Errorf("the backend loaded %s %d more times after it retired", v1.KID, n-loadsBefore)
		}
		if sg := e.entry(t, "villa").SignerAt(at); sg == nil || sg.KID() != v3.KID {
			t.Errorf("signer after destruction: %v, want %s", sg, v3.KID)
		}

		// A revoked version.
		e.at(t0.Add(4 * time.Hour))
		if _, _, err := e.m.Revoke(ctx, v2.KID, t0.Add(90*time.Minute), "laptop stolen", alice); err != nil {
			t.Fatal(err)
		}
		e.at(t0.Add(5 * time.Hour))
		_, d2, err := e.m.RequestDestroy(ctx, v2.KID, "INC-7: compromised", backends.DestroyOptions{PendingWindowDays: 7}, bob)
		if err != nil {
			t.Fatal(err)
		}
		if d2.Version.State != store.StateRevoked || !eqTime(d2.Version.MaterialDestroyedAt, tp(t0.Add(5*time.Hour))) ||
			d2.Version.RevocationReason != "laptop stolen" || d2.Version.SealedPrivateKey != nil {
			t.Fatalf("destroyed revoked version %+v", d2.Version)
		}
		if err := json.Unmarshal(lastRow(t, s).Details, &det); err != nil || det.State != "revoked" || det.PendingDays != 7 {
			t.Fatalf("details %s", lastRow(t, s).Details)
		}
		checkLifecycle(t, s, "villa")
		if got := e.entry(t, "villa").SignerAt(t0.Add(5 * time.Hour)); got == nil || got.KID() != v3.KID {
			t.Fatalf("after destroying %s, %s should sign, got %v", v2.KID, v3.KID, got)
		}
	})
}

// TestDestroyTwoPersonRule: under the two-person rule one principal cannot
// destroy key material alone; the requester cannot approve
// (ErrSamePrincipal); a second principal's approval destroys it, and the
// audit trail shows approval.request by A, approval.grant by B and
// version.destroy_material naming both. An approval past its window
// expires without acting; an approval whose version was destroyed
// meanwhile is refused and stays pending; active versions are refused
// before any approval is filed.
func TestDestroyTwoPersonRule(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		officerA := rotation.Actor{Name: "token:aaa(alice)", ID: "token:aaa"}
		officerB := rotation.Actor{Name: "token:bbb(bob)", ID: "token:bbb"}
		e := newLCEnv(t, s, t0, 0)
		_, v1 := e.createPolicy(t, "villa", issuer, "", rotation.Policy{TwoPersonRule: true})
		e.at(t0.Add(time.Minute))
		v2, _ := e.rotate(t, "villa")

		// The active version is refused outright: no approval is filed.
		if ap, _, err := e.m.RequestDestroy(ctx, v2.KID, "x", backends.DestroyOptions{}, officerA); !errors.Is(err, rotation.ErrInvalidTransition) || ap != nil {
			t.Fatalf("destroy request for the active version: %+v %v", ap, err)
		}
		if list, _ := s.ListApprovals(ctx, ""); len(list) != 0 {
			t.Fatalf("approvals after a refused request: %+v", list)
		}

		before := lcFind(t, versions(t, s, "villa"), v1.KID)
		e.at(t0.Add(2 * time.Minute))
		ap, d, err := e.m.RequestDestroy(ctx, v1.KID, "INC-9: retire the old HSM key", backends.DestroyOptions{PendingWindowDays: 14}, officerA)
		if err != nil || ap == nil || d != nil {
			t.Fatalf("RequestDestroy: approval %+v destroyed %+v err %v", ap, d, err)
		}
		if ap.Action != "destroy" || ap.Status != "pending" || ap.KID != v1.KID || ap.RequestedBy != "token:aaa" ||
			!ap.ExpiresAt.Equal(t0.Add(2*time.Minute+time.Hour)) {
			t.Fatalf("approval %+v", ap)
		}
		var params map[string]any
		if err := json.Unmarshal(ap.Params, &params); err != nil || params["reason"] != "INC-9: retire the old HSM key" || params["pending_days"] != float64(14) {
			t.Fatalf("params %s", ap.Params)
		}
		// One principal cannot complete it.
		if got := lcFind(t, versions(t, s, "villa"), v1.KID); !reflect.DeepEqual(got, before) {
			t.Fatalf("a request alone changed %s: %+v", v1.KID, got)
		}
		if _, err := e.m.Approve(ctx, ap.ID, officerA); !errors.Is(err, rotation.ErrSamePrincipal) {
			t.Fatalf("self-approval: %v, want ErrSamePrincipal", err)
		}
		if got := lcFind(t, versions(t, s, "villa"), v1.KID); !reflect.DeepEqual(got, before) {
			t.Fatalf("a refused self-approval changed %s: %+v", v1.KID, got)
		}
		// A second request for the same version is refused while the first waits.
		if dup, _, err := e.m.RequestDestroy(ctx, v1.KID, "duplicate", backends.DestroyOptions{}, officerB); !errors.Is(err, rotation.ErrApprovalPending) || dup != nil {
			t.Fatalf("duplicate request: %v %+v, want ErrApprovalPending", dup, err)
		}

		// A second principal completes it.
		at := t0.Add(30 * time.Minute)
		e.at(at)
		out, err := e.m.Approve(ctx, ap.ID, officerB)
		if err != nil {
			t.Fatal(err)
		}
		if out.Destroyed == nil || out.Revoked != nil || out.Approval.ID != ap.ID || out.Approval.DecidedBy != "token:bbb" {
			t.Fatalf("Approve: %+v", out)
		}
		want := before
		want.MaterialDestroyedAt, want.SealedPrivateKey = tp(at), nil
		if !reflect.DeepEqual(out.Destroyed.Version, want) {
			t.Fatalf("destroyed\n got %+v\nwant %+v", out.Destroyed.Version, want)
		}
		if got := lcFind(t, versions(t, s, "villa"), v1.KID); !reflect.DeepEqual(got, want) {
			t.Fatalf("key history after approval: %+v", got)
		}
		if _, err := e.m.Approve(ctx, ap.ID, officerB); !errors.Is(err, rotation.ErrInvalidTransition) {
			t.Fatalf("approving twice: %v", err)
		}
		if list, _ := s.ListApprovals(ctx, "pending"); len(list) != 0 {
			t.Fatalf("pending approvals %+v, want none", list)
		}
		// Destroyed material cannot be asked for again.
		if _, _, err := e.m.RequestDestroy(ctx, v1.KID, "again", backends.DestroyOptions{}, officerA); !errors.Is(err, rotation.ErrInvalidTransition) || !strings.Contains(err.Error(), "already destroyed") {
			t.Fatalf("requesting destroyed material again: %v", err)
		}

		rows := checkChain(t, s)
		var actions []string
		var destroyRow store.AuditEvent
		for _, r := range rows {
			if r.KID == v1.KID {
				actions = append(actions, r.Action+" by "+r.Actor)
			}
			if r.Action == "version.destroy_material" {
				destroyRow = r
			}
		}
		wantActions := []string{"version.create by alice@example.com", "version.activate by alice@example.com",
			"version.retire by bob@example.com",
			"approval.request by token:aaa(alice)", "approval.grant by token:bbb(bob)",
			"version.destroy_material by token:aaa(alice) approved by token:bbb(bob)"}
		if !sameStrings(actions, wantActions) {
			t.Errorf("audit of %s:\n got %q\nwant %q", v1.KID, actions, wantActions)
		}
		var det destroyDetails
		if err := json.Unmarshal(destroyRow.Details, &det); err != nil {
			t.Fatal(err)
		}
		if det.Approval != ap.ID || det.RequestedBy != "token:aaa" || det.ApprovedBy != "token:bbb" || det.PendingDays != 14 ||
			det.Backend != "software" || destroyRow.Reason != "INC-9: retire the old HSM key" || !destroyRow.At.Equal(at) {
			t.Fatalf("version.destroy_material row %+v details %s", destroyRow, destroyRow.Details)
		}

		// An approval past its window expires instead of acting.
		e.at(t0.Add(2 * time.Hour))
		if _, _, err := e.m.Rotate(ctx, "villa", bob); err != nil { // v2 retires
			t.Fatal(err)
		}
		ap2, _, err := e.m.RequestDestroy(ctx, v2.KID, "routine", backends.DestroyOptions{}, officerA)
		if err != nil || ap2 == nil {
			t.Fatal(err)
		}
		e.at(t0.Add(3*time.Hour + time.Second))
		if _, err := e.m.Approve(ctx, ap2.ID, officerB); !errors.Is(err, rotation.ErrInvalidTransition) || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("late approval: %v, want ErrInvalidTransition (expired)", err)
		}
		list, err := s.ListApprovals(ctx, "expired")
		if err != nil || len(list) != 1 || list[0].ID != ap2.ID || list[0].Action != "destroy" || list[0].DecidedBy != "token:bbb" {
			t.Fatalf("expired approvals %+v %v", list, err)
		}
		if v := lcFind(t, versions(t, s, "villa"), v2.KID); v.MaterialDestroyedAt != nil || v.SealedPrivateKey == nil {
			t.Fatalf("an expired approval destroyed %s: %+v", v2.KID, v)
		}
		if r := lastRow(t, s); r.Action != "approval.expire" || r.KID != v2.KID {
			t.Fatalf("last audit row %+v, want approval.expire", r)
		}
		checkLifecycle(t, s, "villa")
	})
}

// TestReloadRefusesDestroyedVersion: even if key history claims an active
// version's material was destroyed (a hand-edited database; the lifecycle
// never does this), a Keyring reload does not ask the backend for its
// signer: the key cannot sign and LoadErr says why.
func TestReloadRefusesDestroyedVersion(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newLCEnv(t, s, t0, 0)
		_, v1 := e.createPolicy(t, "villa", issuer, "", rotation.Policy{})
		if err := store.ExecRawForTest(ctx, s, `UPDATE key_versions SET material_destroyed_at = created_at WHERE kid = '`+v1.KID+`'`); err != nil {
			t.Fatal(err)
		}
		fresh := newLCEnv(t, s, t0, 0) // a replica without the signer cached
		ke := fresh.entry(t, "villa")
		if ke.Active != nil || ke.LoadErr == nil || !strings.Contains(ke.LoadErr.Error(), "key material destroyed") {
			t.Fatalf("entry after reload: active %v, LoadErr %v", ke.Active, ke.LoadErr)
		}
		if n := fresh.b.loadsOf(v1.KID); n != 0 {
			t.Fatalf("the backend was asked %d times for the destroyed version's signer", n)
		}
	})
}
