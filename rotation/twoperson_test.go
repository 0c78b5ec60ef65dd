package rotation_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// TestTwoPersonRule: with the rule on, revocation needs a second principal
// within the approval window; both principals are audited; without it,
// RequestRevoke revokes at once.
func TestTwoPersonRule(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		officerA := rotation.Actor{Name: "token:aaa(alice)", ID: "token:aaa"}
		officerB := rotation.Actor{Name: "token:bbb(bob)", ID: "token:bbb"}
		e := newLCEnv(t, s, t0, 0)
		_, v1 := e.createPolicy(t, "villa", issuer, "", rotation.Policy{TwoPersonRule: true})
		_, plain := e.createPolicy(t, "plain", "plain.example", "", rotation.Policy{})

		// The direct path refuses.
		if _, _, err := e.m.Revoke(ctx, v1.KID, t0, "leak", officerA); !errors.Is(err, rotation.ErrApprovalRequired) {
			t.Fatalf("Revoke under the two-person rule: %v, want ErrApprovalRequired", err)
		}
		// A request records an approval and changes nothing else.
		e.at(t0.Add(time.Minute))
		ap, revoked, _, err := e.m.RequestRevoke(ctx, v1.KID, t0, "HSM backup leaked", officerA)
		if err != nil || ap == nil || revoked != nil {
			t.Fatalf("RequestRevoke: approval %+v revoked %+v err %v", ap, revoked, err)
		}
		if ap.Status != "pending" || ap.RequestedBy != "token:aaa" || !ap.ExpiresAt.Equal(t0.Add(time.Minute+time.Hour)) || ap.KID != v1.KID {
			t.Fatalf("approval %+v", ap)
		}
		if v := lcFind(t, checkLifecycle(t, s, "villa"), v1.KID); v.State != store.StateActive {
			t.Fatalf("requesting revoked already: %s", v.State)
		}
		// The requester cannot approve; an unknown id is not found.
		if _, err := e.m.Approve(ctx, ap.ID, officerA); !errors.Is(err, rotation.ErrSamePrincipal) {
			t.Fatalf("self-approval: %v, want ErrSamePrincipal", err)
		}
		if _, err := e.m.Approve(ctx, "nope", officerB); !errors.Is(err, rotation.ErrApprovalNotFound) {
			t.Fatalf("unknown approval: %v", err)
		}
		// A second principal approves: the revocation happens now.
		e.at(t0.Add(30 * time.Minute))
		approved, err := e.m.Approve(ctx, ap.ID, officerB)
		if err != nil {
			t.Fatal(err)
		}
		if approved.Revoked == nil || approved.Destroyed != nil || approved.Approval.ID != ap.ID || approved.Approval.Status != "approved" {
			t.Fatalf("Approve of a revocation: %+v", approved)
		}
		got, next := *approved.Revoked, approved.Replacement
		if got.State != store.StateRevoked || !eqTime(got.CompromisedAt, tp(t0)) || got.RevocationReason != "HSM backup leaked" || next == nil {
			t.Fatalf("approved revocation: %+v replacement %+v", got, next)
		}
		if _, err := e.m.Approve(ctx, ap.ID, officerB); !errors.Is(err, rotation.ErrInvalidTransition) {
			t.Fatalf("approving twice: %v", err)
		}
		rows := auditRows(t, s)
		var actions []string
		for _, r := range rows {
			if r.KID == v1.KID {
				actions = append(actions, r.Action+" by "+r.Actor)
			}
		}
		want := []string{"version.create by alice@example.com", "version.activate by alice@example.com",
			"approval.request by token:aaa(alice)", "approval.grant by token:bbb(bob)",
			"version.retire by token:aaa(alice) approved by token:bbb(bob)", "version.revoke by token:aaa(alice) approved by token:bbb(bob)"}
		if !sameStrings(actions, want) {
			t.Errorf("audit of %s:\n got %q\nwant %q", v1.KID, actions, want)
		}
		if broken, err := store.VerifyAuditChain(rows); err != nil || broken != 0 {
			t.Fatalf("audit chain broken at %d: %v", broken, err)
		}

		// An approval past its window expires instead of acting.
		e.at(t0.Add(2 * time.Hour))
		ap2, _, _, err := e.m.RequestRevoke(ctx, next.KID, t0, "second leak", officerA)
		if err != nil || ap2 == nil {
			t.Fatal(err)
		}
		e.at(t0.Add(3*time.Hour + time.Second))
		if _, err := e.m.Approve(ctx, ap2.ID, officerB); !errors.Is(err, rotation.ErrInvalidTransition) {
			t.Fatalf("late approval: %v, want ErrInvalidTransition", err)
		}
		list, err := s.ListApprovals(ctx, "expired")
		if err != nil || len(list) != 1 || list[0].ID != ap2.ID || list[0].DecidedBy != "token:bbb" {
			t.Fatalf("expired approvals %+v %v", list, err)
		}
		if v := lcFind(t, checkLifecycle(t, s, "villa"), next.KID); v.State != store.StateActive {
			t.Fatalf("an expired approval acted: %s is %s", next.KID, v.State)
		}

		// Without the rule, RequestRevoke revokes at once.
		ap3, r3, _, err := e.m.RequestRevoke(ctx, plain.KID, t0, "leak", officerA)
		if err != nil || ap3 != nil || r3 == nil || r3.State != store.StateRevoked {
			t.Fatalf("RequestRevoke without the rule: %+v %+v %v", ap3, r3, err)
		}
	})
}

// TestTwoPersonRuleOff: switching the rule off is itself a two-person
// change — one officer with admin:keys cannot disarm revocation and
// destruction alone — while switching it on, or changing a policy that
// keeps it, applies at once.
func TestTwoPersonRuleOff(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		officerA := rotation.Actor{Name: "token:aaa(alice)", ID: "token:aaa", Reason: "rule no longer needed"}
		officerB := rotation.Actor{Name: "token:bbb(bob)", ID: "token:bbb"}
		e := newLCEnv(t, s, t0, 0)
		_, v1 := e.createPolicy(t, "villa", issuer, "", rotation.Policy{TwoPersonRule: true, Retention: rotation.Duration(48 * time.Hour)})
		// Lengthening the retention keeps the rule: applied at once.
		keep := rotation.Policy{TwoPersonRule: true, Retention: rotation.Duration(72 * time.Hour)}
		if ap, err := e.m.SetPolicy(ctx, "villa", keep, officerA); err != nil || ap != nil {
			t.Fatalf("a policy keeping the rule: %+v %v", ap, err)
		}
		off := rotation.Policy{Retention: rotation.Duration(72 * time.Hour)}
		ap, err := e.m.SetPolicy(ctx, "villa", off, officerA)
		if err != nil || ap == nil || ap.Action != "policy" || ap.KID != "" || ap.RequestedBy != "token:aaa" {
			t.Fatalf("switching the rule off: %+v %v, want a pending approval", ap, err)
		}
		if e.m.Keyring().Keys["villa"].Policy != keep {
			t.Fatalf("policy changed before approval: %+v", e.m.Keyring().Keys["villa"].Policy)
		}
		// Still in force: a revocation still needs two.
		if _, _, err := e.m.Revoke(ctx, v1.KID, t0, "leak", officerA); !errors.Is(err, rotation.ErrApprovalRequired) {
			t.Fatalf("Revoke while the rule-off request waits: %v", err)
		}
		if _, err := e.m.SetPolicy(ctx, "villa", off, officerA); !errors.Is(err, rotation.ErrApprovalPending) {
			t.Fatalf("a second identical request: %v, want ErrApprovalPending", err)
		}
		if _, err := e.m.Approve(ctx, ap.ID, officerA); !errors.Is(err, rotation.ErrSamePrincipal) {
			t.Fatalf("self-approval: %v", err)
		}
		out, err := e.m.Approve(ctx, ap.ID, officerB)
		if err != nil || out.Policy == nil || *out.Policy != off || out.Revoked != nil || out.Destroyed != nil {
			t.Fatalf("Approve: %+v %v", out, err)
		}
		if got := e.m.Keyring().Keys["villa"].Policy; got != off {
			t.Fatalf("policy after approval: %+v, want %+v", got, off)
		}
		// Switching it back on needs no second principal.
		if ap, err := e.m.SetPolicy(ctx, "villa", keep, officerA); err != nil || ap != nil {
			t.Fatalf("switching the rule on: %+v %v", ap, err)
		}
		var policyRows []string
		for _, r := range checkChain(t, s) {
			if r.KeyName == "villa" && (r.Action == "key.policy" || r.Action == "approval.request" || r.Action == "approval.grant") {
				policyRows = append(policyRows, r.Action+" by "+r.Actor)
			}
		}
		want := []string{"key.policy by token:aaa(alice)", "approval.request by token:aaa(alice)", "approval.grant by token:bbb(bob)",
			"key.policy by token:aaa(alice) approved by token:bbb(bob)", "key.policy by token:aaa(alice)"}
		if !slices.Equal(policyRows, want) {
			t.Fatalf("audit:\n got %q\nwant %q", policyRows, want)
		}
	})
}
