package rotation_test

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/jwksserve"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// Tests of the key lifecycle engine (lifecycle.go, policy.go): rotation
// policy, scheduled prepublication and activation, Activate, Revoke,
// retention and the did:web document. Every instant comes from the
// injected clock, so expectations are exact.

// --- fixtures -------------------------------------------------------------

// newLCEnv is newEnv with a JWKS max-age (rotation.Config.JWKSMaxAge).
func newLCEnv(t *testing.T, s store.Store, now time.Time, maxAge time.Duration) *env {
	t.Helper()
	e := &env{s: s, clk: newClock(now), b: newTestBackend(t)}
	e.m = rotation.New(rotation.Config{Store: s, Backends: []backends.Backend{e.b}, Now: e.clk.Now,
		Logger: quietLogger(), JWKSMaxAge: maxAge})
	if err := e.m.Reload(ctx); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	return e
}

// createPolicy creates a key of issuer with a rotation policy and algorithm.
func (e *env) createPolicy(t *testing.T, name, iss, alg string, p rotation.Policy) (store.Key, store.KeyVersion) {
	t.Helper()
	k, v, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: name, Issuer: iss, Algorithm: alg, Policy: p, ShareIssuer: true}, alice)
	if err != nil {
		t.Fatalf("CreateKey %s: %v", name, err)
	}
	return k, v
}

func (e *env) at(t time.Time) { e.clk.Set(t) }

func (e *env) entry(t *testing.T, name string) *rotation.KeyEntry {
	t.Helper()
	ke, ok := e.m.Keyring().Keys[name]
	if !ok {
		t.Fatalf("Keyring has no key %q", name)
	}
	return ke
}

func (e *env) tick(t *testing.T) int {
	t.Helper()
	n, err := e.m.Tick(ctx)
	if err != nil {
		t.Fatalf("Tick at %s: %v", e.clk.Now().Format(time.RFC3339Nano), err)
	}
	return n
}

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func tp(t time.Time) *time.Time { return &t }

func lcFind(t *testing.T, vs []store.KeyVersion, kid string) store.KeyVersion {
	t.Helper()
	for _, v := range vs {
		if v.KID == kid {
			return v
		}
	}
	t.Fatalf("no version %s in %d versions", kid, len(vs))
	return store.KeyVersion{}
}

func lcJWKS(t *testing.T, d jwksserve.Document) []jwksserve.Entry {
	t.Helper()
	var set jwksserve.JWKS
	if err := json.Unmarshal(d.Body, &set); err != nil {
		t.Fatalf("JWKS %s: %v", d.Body, err)
	}
	return set.Keys
}

func lcHistory(t *testing.T, d jwksserve.Document) jwksserve.History {
	t.Helper()
	var h jwksserve.History
	if err := json.Unmarshal(d.Body, &h); err != nil {
		t.Fatalf("history %s: %v", d.Body, err)
	}
	// Revoked versions are only under vrp_revoked_keys (ADR 0027), out of
	// reach of a plain JOSE library; merged back here in kid order (the
	// creation order of one issuer's kids).
	for _, e := range h.Keys {
		if e.Status == string(store.StateRevoked) {
			t.Errorf("history lists revoked %s under keys", e.KID)
		}
	}
	for _, e := range h.Revoked {
		if e.Status != string(store.StateRevoked) {
			t.Errorf("history lists %s %s under vrp_revoked_keys", e.Status, e.KID)
		}
	}
	h.Keys = append(h.Keys, h.Revoked...)
	h.Revoked = nil
	sort.SliceStable(h.Keys, func(i, j int) bool { return h.Keys[i].KID < h.Keys[j].KID })
	return h
}

func entryKIDs(es []jwksserve.Entry) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.KID)
	}
	return out
}

func hasKID(es []jwksserve.Entry, kid string) bool {
	for _, e := range es {
		if e.KID == kid {
			return true
		}
	}
	return false
}

// auditSince returns the audit rows with Seq > after.
func auditSince(t *testing.T, s store.Store, after int64) []store.AuditEvent {
	t.Helper()
	rows, err := s.ListAudit(ctx, after, 0)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func lastSeq(t *testing.T, s store.Store) int64 {
	t.Helper()
	rows := auditRows(t, s)
	if len(rows) == 0 {
		return 0
	}
	return rows[len(rows)-1].Seq
}

// countAudit counts rows with action (and kid, when not "").
func countAudit(rows []store.AuditEvent, action, kid string) int {
	n := 0
	for _, r := range rows {
		if r.Action == action && (kid == "" || r.KID == kid) {
			n++
		}
	}
	return n
}

// actionsOf returns "action kid" of each row, sorted (the order of rows
// inside one transaction is not part of the contract).
func actionsOf(rows []store.AuditEvent) []string {
	out := []string{}
	for _, r := range rows {
		out = append(out, r.Action+" "+r.KID)
	}
	sort.Strings(out)
	return out
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkLifecycle asserts the invariants of one key's history: exactly one
// active version, at most one pending, every window ordered and the
// signing windows contiguous (each version retires at the instant the
// next one activates), and the audit chain intact.
func checkLifecycle(t *testing.T, s store.Store, name string) []store.KeyVersion {
	t.Helper()
	vs := versions(t, s, name)
	active, pending := 0, 0
	var activated []store.KeyVersion
	for _, v := range vs {
		switch v.State {
		case store.StateActive:
			active++
			if v.RetiredAt != nil || v.RevokedAt != nil {
				t.Errorf("active %s has retired %s revoked %s", v.KID, fmtT(v.RetiredAt), fmtT(v.RevokedAt))
			}
		case store.StatePending:
			pending++
			if v.ActivatedAt != nil || v.ActivatesAt == nil || v.PublishedAt == nil {
				t.Errorf("pending %s: activated %s activates %s published %s", v.KID, fmtT(v.ActivatedAt), fmtT(v.ActivatesAt), fmtT(v.PublishedAt))
			}
		case store.StateRetired:
			if v.RetiredAt == nil || v.ActivatedAt == nil {
				t.Errorf("retired %s: activated %s retired %s", v.KID, fmtT(v.ActivatedAt), fmtT(v.RetiredAt))
			}
		case store.StateRevoked:
			if v.RevokedAt == nil || v.CompromisedAt == nil || v.RevocationReason == "" {
				t.Errorf("revoked %s: revoked %s compromised %s reason %q", v.KID, fmtT(v.RevokedAt), fmtT(v.CompromisedAt), v.RevocationReason)
			}
		}
		if v.ActivatedAt != nil {
			activated = append(activated, v)
			if v.PublishedAt != nil && v.ActivatedAt.Before(*v.PublishedAt) {
				t.Errorf("%s activated %s before it was published %s", v.KID, fmtT(v.ActivatedAt), fmtT(v.PublishedAt))
			}
			if v.RetiredAt != nil && v.RetiredAt.Before(*v.ActivatedAt) {
				t.Errorf("inverted window: %s [%s, %s]", v.KID, fmtT(v.ActivatedAt), fmtT(v.RetiredAt))
			}
			if v.RevokedAt != nil && v.RevokedAt.Before(*v.ActivatedAt) {
				t.Errorf("%s revoked %s before it activated %s", v.KID, fmtT(v.RevokedAt), fmtT(v.ActivatedAt))
			}
		}
	}
	if active != 1 || pending > 1 {
		t.Errorf("%s: %d active and %d pending versions, want 1 and at most 1", name, active, pending)
	}
	// Versions are listed in creation order, which is activation order.
	for i := 1; i < len(activated); i++ {
		prev, cur := activated[i-1], activated[i]
		if cur.ActivatedAt.Before(*prev.ActivatedAt) {
			t.Errorf("%s activated %s, before its predecessor %s (%s)", cur.KID, fmtT(cur.ActivatedAt), prev.KID, fmtT(prev.ActivatedAt))
		}
		if !eqTime(prev.RetiredAt, cur.ActivatedAt) {
			t.Errorf("gap or overlap: %s retired %s, %s activated %s", prev.KID, fmtT(prev.RetiredAt), cur.KID, fmtT(cur.ActivatedAt))
		}
	}
	checkChain(t, s)
	return vs
}

// checkDocuments asserts the Keyring's documents of name against key
// history: the plain JWKS lists every non-revoked version (retention 0)
// and no revoked one; the History lists every version with its lifecycle
// members, revocation facts and backend.
func checkDocuments(t *testing.T, e *env, name string) {
	t.Helper()
	vs := versions(t, e.s, name)
	ke := e.entry(t, name)
	jwks := lcJWKS(t, ke.JWKS)
	var wantJWKS []string
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i].State != store.StateRevoked {
			wantJWKS = append(wantJWKS, vs[i].KID)
		}
	}
	if got := entryKIDs(jwks); !sameStrings(got, wantJWKS) {
		t.Errorf("JWKS of %s lists %v, want %v (revoked versions left out)", name, got, wantJWKS)
	}
	for _, j := range jwks {
		if j.Status == string(store.StateRevoked) || j.CompromisedAt != "" || j.RevocationReason != "" {
			t.Errorf("JWKS of %s carries revocation data: %+v", name, j)
		}
	}
	h := lcHistory(t, ke.History)
	if h.Issuer != ke.Key.Issuer || h.Key != name {
		t.Errorf("history issuer %q key %q", h.Issuer, h.Key)
	}
	if len(h.Keys) != len(vs) {
		t.Fatalf("history of %s has %d entries, key history %d", name, len(h.Keys), len(vs))
	}
	for i, v := range vs {
		got := h.Keys[i]
		want, err := jwksserve.EntryFor(v)
		if err != nil {
			t.Fatal(err)
		}
		want.RevocationReason, want.Backend = v.RevocationReason, ke.Key.Backend
		if want.Thumbprint, err = jwksserve.Thumbprint(v.PublicJWK); err != nil || len(want.Thumbprint) != 43 {
			t.Fatalf("thumbprint %q: %v", want.Thumbprint, err)
		}
		if got != want {
			t.Errorf("history entry %d:\n got %+v\nwant %+v", i, got, want)
		}
		if got.Backend != "software" || got.Status != string(v.State) {
			t.Errorf("history entry %s: backend %q status %q", v.KID, got.Backend, got.Status)
		}
		if v.State == store.StateRevoked {
			if got.CompromisedAt != ts(*v.CompromisedAt) || got.RevocationReason != v.RevocationReason || got.RevocationReason == "" {
				t.Errorf("history entry of revoked %s: compromised_at %q reason %q, want %q %q",
					v.KID, got.CompromisedAt, got.RevocationReason, ts(*v.CompromisedAt), v.RevocationReason)
			}
		} else if got.CompromisedAt != "" || got.RevocationReason != "" {
			t.Errorf("history entry of %s %s carries revocation data", v.State, v.KID)
		}
	}
}

// --- 1. policy -------------------------------------------------------------

func TestPolicyValidate(t *testing.T) {
	d := func(x time.Duration) rotation.Duration { return rotation.Duration(x) }
	const maxAge = 300 * time.Second
	cases := []struct {
		name   string
		p      rotation.Policy
		maxAge time.Duration
		ok     bool
		msg    []string // substrings of the error
	}{
		{"zero policy", rotation.Policy{}, maxAge, true, nil},
		{"prepublish = max-age", rotation.Policy{Prepublish: d(300 * time.Second)}, maxAge, false,
			[]string{"prepublish 5m0s", "max-age 5m0s", "verifiers may cache"}},
		{"prepublish < max-age", rotation.Policy{Prepublish: d(time.Minute)}, maxAge, false, []string{"max-age"}},
		{"prepublish just over max-age", rotation.Policy{Prepublish: d(301 * time.Second)}, maxAge, true, nil},
		{"prepublish 1ns over max-age", rotation.Policy{Prepublish: d(300*time.Second + 1)}, maxAge, true, nil},
		{"rotation_period = prepublish", rotation.Policy{RotationPeriod: d(10 * time.Minute), Prepublish: d(10 * time.Minute)}, maxAge, false,
			[]string{"rotation_period 10m0s", "prepublish 10m0s"}},
		{"rotation_period < prepublish", rotation.Policy{RotationPeriod: d(9 * time.Minute), Prepublish: d(10 * time.Minute)}, maxAge, false, nil},
		{"rotation_period just over prepublish", rotation.Policy{RotationPeriod: d(10*time.Minute + 1), Prepublish: d(10 * time.Minute)}, maxAge, true, nil},
		{"rotation_period = default prepublish", rotation.Policy{RotationPeriod: d(600 * time.Second)}, maxAge, false, []string{"prepublish 10m0s"}},
		{"rotation_period over default prepublish", rotation.Policy{RotationPeriod: d(601 * time.Second)}, maxAge, true, nil},
		{"negative rotation_period", rotation.Policy{RotationPeriod: d(-time.Hour)}, maxAge, false, []string{"negative"}},
		{"negative prepublish", rotation.Policy{Prepublish: d(-time.Hour)}, maxAge, false, []string{"negative"}},
		{"negative retention", rotation.Policy{Retention: d(-1)}, maxAge, false, []string{"negative"}},
		{"retention only", rotation.Policy{Retention: d(time.Hour)}, maxAge, true, nil},
		{"max-age 0: any positive prepublish", rotation.Policy{RotationPeriod: d(time.Second), Prepublish: d(time.Nanosecond)}, 0, true, nil},
		{"max-age 0: period = default prepublish 1s", rotation.Policy{RotationPeriod: d(time.Second)}, 0, false, nil},
		{"max-age 0: period over 1s", rotation.Policy{RotationPeriod: d(time.Second + 1)}, 0, true, nil},
	}
	for _, c := range cases {
		err := c.p.Validate(c.maxAge)
		if c.ok {
			if err != nil {
				t.Errorf("%s: Validate = %v, want nil", c.name, err)
			}
			continue
		}
		if !errors.Is(err, rotation.ErrInvalidRequest) {
			t.Errorf("%s: Validate = %v, want ErrInvalidRequest", c.name, err)
			continue
		}
		for _, m := range c.msg {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: error %q does not mention %q", c.name, err, m)
			}
		}
	}

	for _, c := range []struct {
		p      rotation.Policy
		maxAge time.Duration
		want   time.Duration
	}{
		{rotation.Policy{}, 300 * time.Second, 600 * time.Second},
		{rotation.Policy{}, 60 * time.Second, 120 * time.Second},
		{rotation.Policy{}, 600 * time.Millisecond, 1200 * time.Millisecond},
		{rotation.Policy{}, 0, time.Second},
		{rotation.Policy{}, 100 * time.Millisecond, time.Second},
		{rotation.Policy{Prepublish: d(7 * time.Minute)}, 300 * time.Second, 7 * time.Minute},
		{rotation.Policy{Prepublish: d(400 * time.Millisecond)}, 0, 400 * time.Millisecond},
	} {
		if got := c.p.EffectivePrepublish(c.maxAge); got != c.want {
			t.Errorf("EffectivePrepublish(%v) of %+v = %v, want %v", c.maxAge, c.p, got, c.want)
		}
	}
}

func TestPolicyJSON(t *testing.T) {
	p := rotation.Policy{RotationPeriod: rotation.Duration(720 * time.Hour), Prepublish: rotation.Duration(10 * time.Minute)}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"rotation_period":"720h0m0s","prepublish":"10m0s"}`; string(b) != want {
		t.Errorf("policy JSON %s, want %s", b, want)
	}
	var back rotation.Policy
	if err := json.Unmarshal([]byte(`{"rotation_period":"720h","prepublish":"10m","retention":"1.5s"}`), &back); err != nil {
		t.Fatal(err)
	}
	if back.RotationPeriod != rotation.Duration(720*time.Hour) || back.Prepublish != rotation.Duration(10*time.Minute) ||
		back.Retention != rotation.Duration(1500*time.Millisecond) {
		t.Errorf("decoded %+v", back)
	}
	for _, bad := range []string{`{"rotation_period":3600}`, `{"prepublish":"10 minutes"}`, `{"retention":"5"}`} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("Unmarshal(%s) accepted", bad)
		}
	}
}

func TestJWKSMaxAge(t *testing.T) {
	for _, c := range []struct{ in, want time.Duration }{
		{0, 300 * time.Second},
		{-1, 0},
		{-time.Hour, 0},
		{time.Nanosecond, time.Nanosecond},
		{60 * time.Second, 60 * time.Second},
		{300 * time.Second, 300 * time.Second},
		{301 * time.Second, 300 * time.Second},
		{time.Hour, 300 * time.Second},
	} {
		m := rotation.New(rotation.Config{JWKSMaxAge: c.in, Logger: quietLogger()})
		if got := m.JWKSMaxAge(); got != c.want {
			t.Errorf("JWKSMaxAge %v: JWKSMaxAge() = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestInvalidPolicyWritesNothing: CreateKey and SetPolicy validate against
// the max-age in force and write nothing (no key, no audit row) on refusal.
func TestInvalidPolicyWritesNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		d := func(x time.Duration) rotation.Duration { return rotation.Duration(x) }
		bad := []rotation.Policy{
			{Prepublish: d(300 * time.Second)},
			{Prepublish: d(time.Second)},
			{RotationPeriod: d(10 * time.Minute), Prepublish: d(10 * time.Minute)},
			{RotationPeriod: d(10 * time.Minute)}, // default prepublish is 10m
			{RotationPeriod: d(-time.Hour)},
			{Prepublish: d(-time.Hour)},
			{Retention: d(-time.Hour)},
			{Retention: d(time.Hour)}, // shorter than an attestation may stay valid (issue 13)
			{Retention: d(rotation.DefaultMinRetention - time.Second)},
		}
		e := newLCEnv(t, s, t0, 0)
		for _, p := range bad {
			_, _, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "villa", Issuer: issuer, Policy: p}, alice)
			if !errors.Is(err, rotation.ErrInvalidRequest) {
				t.Errorf("CreateKey with policy %+v: %v, want ErrInvalidRequest", p, err)
			}
		}
		if rows := auditRows(t, s); len(rows) != 0 {
			t.Fatalf("refused CreateKey wrote %d audit rows", len(rows))
		}
		if keys, err := s.ListKeys(ctx); err != nil || len(keys) != 0 {
			t.Fatalf("refused CreateKey left keys %+v (%v)", keys, err)
		}
		if n := e.b.creates.Load(); n != 0 {
			t.Fatalf("refused CreateKey created %d key pairs", n)
		}

		good := rotation.Policy{RotationPeriod: d(24 * time.Hour), Prepublish: d(301 * time.Second), Retention: d(rotation.DefaultMinRetention)}
		_, v1 := e.createPolicy(t, "villa", issuer, "", good)
		if got := e.entry(t, "villa").Policy; got != good {
			t.Fatalf("Keyring policy %+v, want %+v", got, good)
		}
		before := auditRows(t, s)
		keyBefore, err := s.GetKey(ctx, "villa")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range bad {
			if _, err := e.m.SetPolicy(ctx, "villa", p, bob); !errors.Is(err, rotation.ErrInvalidRequest) {
				t.Errorf("SetPolicy %+v: %v, want ErrInvalidRequest", p, err)
			}
		}
		if _, err := e.m.SetPolicy(ctx, "nosuchkey", good, bob); !errors.Is(err, rotation.ErrKeyNotFound) {
			t.Errorf("SetPolicy on a missing key: %v, want ErrKeyNotFound", err)
		}
		if got := auditRows(t, s); len(got) != len(before) {
			t.Fatalf("refused SetPolicy wrote %d audit rows", len(got)-len(before))
		}
		keyAfter, err := s.GetKey(ctx, "villa")
		if err != nil {
			t.Fatal(err)
		}
		if string(keyAfter.Policy) != string(keyBefore.Policy) {
			t.Fatalf("refused SetPolicy changed the stored policy: %s -> %s", keyBefore.Policy, keyAfter.Policy)
		}
		if got := e.entry(t, "villa").Policy; got != good {
			t.Fatalf("refused SetPolicy changed the Keyring policy: %+v", got)
		}

		// A valid change is stored, audited and reloaded.
		next := rotation.Policy{RotationPeriod: d(48 * time.Hour)}
		e.at(t0.Add(time.Minute))
		if _, err := e.m.SetPolicy(ctx, "villa", next, bob); err != nil {
			t.Fatalf("SetPolicy: %v", err)
		}
		if got := e.entry(t, "villa").Policy; got != next {
			t.Errorf("Keyring policy after SetPolicy %+v, want %+v", got, next)
		}
		rows := auditSince(t, s, before[len(before)-1].Seq)
		if len(rows) != 1 || rows[0].Action != "key.policy" || rows[0].KeyName != "villa" || rows[0].Actor != bob.Name ||
			rows[0].Reason != bob.Reason || !rows[0].At.Equal(t0.Add(time.Minute)) {
			t.Fatalf("SetPolicy audit rows %+v", rows)
		}
		var pd struct{ Old, New rotation.Policy }
		if err := json.Unmarshal(rows[0].Details, &pd); err != nil || pd.New != next || pd.Old != good {
			t.Errorf("key.policy details %s (%v), want old %+v new %+v", rows[0].Details, err, good, next)
		}
		if vs := versions(t, s, "villa"); len(vs) != 1 || vs[0].KID != v1.KID || vs[0].State != store.StateActive {
			t.Errorf("SetPolicy touched versions: %+v", vs)
		}
		checkChain(t, s)
	})
}

// TestCreateKeyMaxAgeCap: a configured max-age above 300 s is capped, so a
// prepublish of 301 s is valid even with JWKSMaxAge = 1h.
func TestCreateKeyMaxAgeCap(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newLCEnv(t, s, t0, time.Hour)
		_, _, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "villa", Issuer: issuer,
			Policy: rotation.Policy{Prepublish: rotation.Duration(301 * time.Second)}}, alice)
		if err != nil {
			t.Fatalf("CreateKey with prepublish 301s and max-age capped at 300s: %v", err)
		}
		// Without caching (negative max-age) any positive prepublish is fine.
		e0 := newLCEnv(t, s, t0, -1)
		_, _, err = e0.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "fast", Issuer: issuer, ShareIssuer: true,
			Policy: rotation.Policy{RotationPeriod: rotation.Duration(time.Second), Prepublish: rotation.Duration(400 * time.Millisecond)}}, alice)
		if err != nil {
			t.Fatalf("CreateKey with max-age 0: %v", err)
		}
	})
}

// --- 2. ScheduleRotation ------------------------------------------------------

func TestScheduleRotation(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newLCEnv(t, s, t0, 0)
		_, v1 := e.createPolicy(t, "villa", issuer, "", rotation.Policy{Prepublish: rotation.Duration(7 * time.Minute)})
		t1 := t0.Add(time.Hour)
		e.at(t1)
		seq := lastSeq(t, s)
		p, err := e.m.ScheduleRotation(ctx, "villa", bob)
		if err != nil {
			t.Fatalf("ScheduleRotation: %v", err)
		}
		wantAt := t1.Add(7 * time.Minute)
		if p.KID != kidOn("2026-05-18", 2) || p.State != store.StatePending || !eqTime(p.ActivatesAt, &wantAt) ||
			!eqTime(p.PublishedAt, &t1) || !p.CreatedAt.Equal(t1) || p.ActivatedAt != nil || p.RetiredAt != nil {
			t.Fatalf("pending version %s %s published %s activates %s activated %s, want %s pending published %s activates %s",
				p.KID, p.State, fmtT(p.PublishedAt), fmtT(p.ActivatesAt), fmtT(p.ActivatedAt), kidOn("2026-05-18", 2), t1, wantAt)
		}
		sp, err := s.GetVersion(ctx, p.KID)
		if err != nil {
			t.Fatal(err)
		}
		sameVersion(t, "stored pending version", sp, p)
		if old, _ := s.GetVersion(ctx, v1.KID); old.State != store.StateActive || old.RetiredAt != nil {
			t.Errorf("scheduling changed the active version: %s retired %s", old.State, fmtT(old.RetiredAt))
		}

		rows := auditSince(t, s, seq)
		if got, want := actionsOf(rows), []string{"version.create " + p.KID, "version.prepublish " + p.KID}; !sameStrings(got, want) {
			t.Errorf("audit rows %v, want %v", got, want)
		}
		for _, r := range rows {
			if r.Actor != bob.Name || r.Reason != bob.Reason || !r.At.Equal(t1) {
				t.Errorf("audit row %s: actor %q reason %q at %s", r.Action, r.Actor, r.Reason, r.At)
			}
			if r.Action == "version.prepublish" {
				var det map[string]string
				if err := json.Unmarshal(r.Details, &det); err != nil || det["activates_at"] != ts(wantAt) {
					t.Errorf("version.prepublish details %s, want activates_at %s", r.Details, ts(wantAt))
				}
			}
		}

		// The plain JWKS publishes it as pending, newest first.
		ke := e.entry(t, "villa")
		jwks := lcJWKS(t, ke.JWKS)
		if len(jwks) != 2 || jwks[0].KID != p.KID || jwks[1].KID != v1.KID {
			t.Fatalf("JWKS lists %v, want [%s %s]", entryKIDs(jwks), p.KID, v1.KID)
		}
		if jwks[0].Status != "pending" || jwks[0].NotBefore != ts(wantAt) || jwks[0].NotAfter != "" {
			t.Errorf("pending JWKS entry %+v, want vrp_key_status pending, vrp_not_before %s", jwks[0], ts(wantAt))
		}
		if jwks[1].Status != "active" || jwks[1].NotBefore != ts(t0) || jwks[1].NotAfter != "" {
			t.Errorf("active JWKS entry %+v", jwks[1])
		}
		if !strings.Contains(string(ke.JWKS.Body), `"vrp_not_before": "`+ts(wantAt)+`"`) {
			t.Errorf("JWKS body lacks vrp_not_before %s:\n%s", ts(wantAt), ke.JWKS.Body)
		}

		// The Keyring has the next signer loaded, switching at ActivatesAt.
		if ke.Next == nil || ke.Next.KID() != p.KID || !ke.NextAt.Equal(wantAt) {
			t.Fatalf("Keyring Next %v at %s, want %s at %s", ke.Next, ke.NextAt, p.KID, wantAt)
		}
		for _, c := range []struct {
			at  time.Time
			kid string
		}{
			{t1, v1.KID},
			{wantAt.Add(-time.Microsecond), v1.KID},
			{wantAt.Add(-time.Nanosecond), v1.KID},
			{wantAt, p.KID},
			{wantAt.Add(time.Nanosecond), p.KID},
			{wantAt.Add(24 * time.Hour), p.KID},
		} {
			sg := ke.SignerAt(c.at)
			if sg == nil || sg.KID() != c.kid {
				t.Errorf("SignerAt(%s) = %v, want %s", ts(c.at), sg, c.kid)
			}
		}
		payload := []byte(`{"n":2}`)
		jws, err := ke.Next.Sign(payload, "")
		if err != nil {
			t.Fatal(err)
		}
		verifyJWS(t, jws, p.PublicJWK, p.KID, "EdDSA", payload)

		// A second schedule is refused and writes nothing.
		creates := e.b.creates.Load()
		seq = lastSeq(t, s)
		e.at(t1.Add(time.Minute))
		if _, err := e.m.ScheduleRotation(ctx, "villa", bob); !errors.Is(err, rotation.ErrPendingExists) {
			t.Fatalf("second ScheduleRotation: %v, want ErrPendingExists", err)
		} else if !strings.Contains(err.Error(), p.KID) {
			t.Errorf("ErrPendingExists does not name the pending kid: %v", err)
		}
		if got := auditSince(t, s, seq); len(got) != 0 || e.b.creates.Load() != creates {
			t.Errorf("refused ScheduleRotation wrote %d audit rows, %d key pairs", len(got), e.b.creates.Load()-creates)
		}
		if _, err := e.m.ScheduleRotation(ctx, "nosuchkey", bob); !errors.Is(err, rotation.ErrKeyNotFound) {
			t.Errorf("ScheduleRotation of a missing key: %v, want ErrKeyNotFound", err)
		}
		if vs := versions(t, s, "villa"); len(vs) != 2 {
			t.Errorf("%d versions, want 2", len(vs))
		}
		checkLifecycle(t, s, "villa")

		// The default prepublish is twice the max-age.
		_, w1 := e.createPolicy(t, "plain", issuer, "", rotation.Policy{})
		e.at(t1.Add(2 * time.Minute))
		q, err := e.m.ScheduleRotation(ctx, "plain", bob)
		if err != nil {
			t.Fatal(err)
		}
		if want := t1.Add(2*time.Minute + 600*time.Second); !eqTime(q.ActivatesAt, &want) {
			t.Errorf("default prepublish: activates %s, want %s (2 x max-age)", fmtT(q.ActivatesAt), want)
		}
		if sg := e.entry(t, "plain").SignerAt(t1.Add(2 * time.Minute)); sg == nil || sg.KID() != w1.KID {
			t.Errorf("plain signs with %v before activation, want %s", sg, w1.KID)
		}
	})
}

// TestRotateActivatesPending: an immediate rotation while a version is
// pending activates that version now (it is already published) and mints
// no new kid.
func TestRotateActivatesPending(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newLCEnv(t, s, t0, 0)
		_, v1 := e.createPolicy(t, "villa", issuer, "", rotation.Policy{})
		e.at(t0.Add(time.Hour))
		p, err := e.m.ScheduleRotation(ctx, "villa", bob)
		if err != nil {
			t.Fatal(err)
		}
		creates := e.b.creates.Load()
		t2 := t0.Add(time.Hour + 2*time.Minute)
		e.at(t2)
		newV, oldV := e.rotate(t, "villa")
		if newV.KID != p.KID || oldV.KID != v1.KID {
			t.Fatalf("Rotate = (%s, %s), want (%s, %s)", newV.KID, oldV.KID, p.KID, v1.KID)
		}
		if e.b.creates.Load() != creates {
			t.Errorf("Rotate minted a new key pair although a version was pending")
		}
		if newV.State != store.StateActive || !eqTime(newV.ActivatedAt, &t2) || oldV.State != store.StateRetired || !eqTime(oldV.RetiredAt, &t2) {
			t.Errorf("Rotate: new %s activated %s, old %s retired %s; want both at %s", newV.State, fmtT(newV.ActivatedAt), oldV.State, fmtT(oldV.RetiredAt), t2)
		}
		ke := e.entry(t, "villa")
		if ke.Next != nil || ke.Active.KID() != p.KID {
			t.Errorf("Keyring after Rotate: active %s next %v", ke.Active.KID(), ke.Next)
		}
		checkLifecycle(t, s, "villa")
		checkDocuments(t, e, "villa")
	})
}

// --- 3. Tick -------------------------------------------------------------------

func TestTickSchedule(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		const pre = 10 * time.Minute
		pol := rotation.Policy{RotationPeriod: rotation.Duration(time.Hour), Prepublish: rotation.Duration(pre)}
		c := t0 // created
		e := newLCEnv(t, s, c, 300*time.Second)
		_, v1 := e.createPolicy(t, "villa", issuer, "", pol)

		// checkStep runs after every Tick: the invariants, and no
		// prepublished version may sign before it was published for pre.
		checkStep := func() []store.KeyVersion {
			t.Helper()
			vs := checkLifecycle(t, s, "villa")
			for _, v := range vs[1:] {
				if v.ActivatesAt == nil || v.PublishedAt == nil {
					t.Errorf("%s: activates %s published %s", v.KID, fmtT(v.ActivatesAt), fmtT(v.PublishedAt))
				} else if v.ActivatesAt.Before(v.PublishedAt.Add(pre)) {
					t.Errorf("%s published %s activates %s: less than prepublish %s", v.KID, fmtT(v.PublishedAt), fmtT(v.ActivatesAt), pre)
				}
			}
			return vs
		}
		tickAt := func(at time.Time, want int) {
			t.Helper()
			e.at(at)
			if n := e.tick(t); n != want {
				t.Fatalf("Tick at created+%s did %d transitions, want %d", at.Sub(c), n, want)
			}
			checkStep()
		}
		scheduler := func(rows []store.AuditEvent) {
			t.Helper()
			for _, r := range rows {
				if r.Actor != "keysvc-scheduler" {
					t.Errorf("audit %s %s by %q, want keysvc-scheduler", r.Action, r.KID, r.Actor)
				}
			}
		}

		// The scheduler publishes the next version 2 x prepublish before
		// its activation (ADR 0005): at created+40m for created+1h.
		tickAt(c.Add(39*time.Minute+59*time.Second), 0)
		if vs := versions(t, s, "villa"); len(vs) != 1 {
			t.Fatalf("Tick before due created versions: %d", len(vs))
		}

		seq := lastSeq(t, s)
		tickAt(c.Add(40*time.Minute), 1)
		vs := versions(t, s, "villa")
		if len(vs) != 2 {
			t.Fatalf("%d versions after the prepublish Tick, want 2", len(vs))
		}
		p2 := vs[1]
		if p2.State != store.StatePending || !eqTime(p2.ActivatesAt, tp(c.Add(time.Hour))) || !eqTime(p2.PublishedAt, tp(c.Add(40*time.Minute))) {
			t.Fatalf("prepublished %s %s published %s activates %s, want pending published created+40m activates created+1h",
				p2.KID, p2.State, fmtT(p2.PublishedAt), fmtT(p2.ActivatesAt))
		}
		rows := auditSince(t, s, seq)
		if got, want := actionsOf(rows), []string{"version.create " + p2.KID, "version.prepublish " + p2.KID}; !sameStrings(got, want) {
			t.Errorf("prepublish audit %v, want %v", got, want)
		}
		scheduler(rows)
		if ke := e.entry(t, "villa"); ke.Next == nil || ke.Next.KID() != p2.KID || !ke.NextAt.Equal(c.Add(time.Hour)) {
			t.Errorf("Keyring Next after prepublish: %v at %s", ke.Next, ke.NextAt)
		}

		tickAt(c.Add(50*time.Minute), 0)
		tickAt(c.Add(55*time.Minute), 0)
		tickAt(c.Add(time.Hour-time.Microsecond), 0)

		// At the scheduled instant every replica signs with the new
		// version already (SignerAt), before any Tick.
		e.at(c.Add(time.Hour))
		if sg := e.entry(t, "villa").SignerAt(c.Add(time.Hour)); sg == nil || sg.KID() != p2.KID {
			t.Errorf("SignerAt(created+1h) = %v before Tick, want %s", sg, p2.KID)
		}
		seq = lastSeq(t, s)
		tickAt(c.Add(time.Hour), 1)
		vs = versions(t, s, "villa")
		if o, n := vs[0], vs[1]; o.KID != v1.KID || o.State != store.StateRetired || !eqTime(o.RetiredAt, tp(c.Add(time.Hour))) ||
			n.State != store.StateActive || !eqTime(n.ActivatedAt, tp(c.Add(time.Hour))) {
			t.Fatalf("after activation: %s %s retired %s, %s %s activated %s; want retired/active at created+1h",
				o.KID, o.State, fmtT(o.RetiredAt), n.KID, n.State, fmtT(n.ActivatedAt))
		}
		rows = auditSince(t, s, seq)
		if got, want := actionsOf(rows), []string{"version.activate " + p2.KID, "version.retire " + v1.KID}; !sameStrings(got, want) {
			t.Errorf("activation audit %v, want %v", got, want)
		}
		scheduler(rows)
		if ke := e.entry(t, "villa"); ke.Active.KID() != p2.KID || ke.Next != nil {
			t.Errorf("Keyring after activation: active %s next %v", ke.Active.KID(), ke.Next)
		}

		// Second period; the activating Tick runs 3 minutes late: the
		// instants recorded are still the scheduled one.
		tickAt(c.Add(time.Hour+39*time.Minute+59*time.Second), 0)
		tickAt(c.Add(time.Hour+40*time.Minute), 1)
		p3 := versions(t, s, "villa")[2]
		if !eqTime(p3.ActivatesAt, tp(c.Add(2*time.Hour))) {
			t.Fatalf("%s activates %s, want created+2h", p3.KID, fmtT(p3.ActivatesAt))
		}
		seq = lastSeq(t, s)
		tickAt(c.Add(2*time.Hour+3*time.Minute), 1)
		vs = versions(t, s, "villa")
		if !eqTime(vs[1].RetiredAt, tp(c.Add(2*time.Hour))) || !eqTime(vs[2].ActivatedAt, tp(c.Add(2*time.Hour))) {
			t.Fatalf("late Tick: %s retired %s, %s activated %s; want both created+2h (the scheduled instant, not the tick time)",
				vs[1].KID, fmtT(vs[1].RetiredAt), vs[2].KID, fmtT(vs[2].ActivatedAt))
		}
		rows = auditSince(t, s, seq)
		scheduler(rows)
		if countAudit(rows, "version.activate", p3.KID) != 1 || countAudit(rows, "version.retire", vs[1].KID) != 1 || len(rows) != 2 {
			t.Errorf("late activation audit %v", actionsOf(rows))
		}

		// Third period: the prepublishing Tick runs 5 minutes late, within
		// the lead, so the activation keeps its place at created+3h.
		tickAt(c.Add(2*time.Hour+45*time.Minute), 1)
		p4 := versions(t, s, "villa")[3]
		if !eqTime(p4.ActivatesAt, tp(c.Add(3*time.Hour))) || !eqTime(p4.PublishedAt, tp(c.Add(2*time.Hour+45*time.Minute))) {
			t.Fatalf("late prepublish: %s published %s activates %s, want created+2h45m and created+3h", p4.KID, fmtT(p4.PublishedAt), fmtT(p4.ActivatesAt))
		}

		// Then a downtime of 5 hours without any Tick. Consecutive Ticks
		// converge, one due transition each.
		down := c.Add(7*time.Hour + 45*time.Minute)
		e.at(down)
		var counts []int
		for i := 0; ; i++ {
			if i == 10 {
				t.Fatalf("Ticks after the downtime do not converge: %v", counts)
			}
			counts = append(counts, e.tick(t))
			checkStep()
			if counts[len(counts)-1] == 0 {
				break
			}
		}
		// One Tick completes the overdue activation and prepublishes the
		// next version (one transaction); the next finds nothing due.
		if want := []int{2, 0}; len(counts) != len(want) || counts[0] != 2 || counts[1] != 0 {
			t.Errorf("Tick results after the downtime %v, want %v", counts, want)
		}
		vs = versions(t, s, "villa")
		if len(vs) != 5 {
			t.Fatalf("%d versions after the downtime, want 5", len(vs))
		}
		if a := vs[3]; a.KID != p4.KID || a.State != store.StateActive || !eqTime(a.ActivatedAt, tp(c.Add(3*time.Hour))) {
			t.Errorf("overdue %s: %s activated %s, want active at its scheduled created+3h", a.KID, a.State, fmtT(a.ActivatedAt))
		}
		if p5 := vs[4]; p5.State != store.StatePending || !eqTime(p5.PublishedAt, &down) || !eqTime(p5.ActivatesAt, tp(down.Add(pre))) {
			t.Errorf("after the downtime %s %s published %s activates %s, want pending published %s activates %s",
				p5.KID, p5.State, fmtT(p5.PublishedAt), fmtT(p5.ActivatesAt), down, down.Add(pre))
		}

		// Minute by minute until created+12h: back on the hourly schedule.
		for at := down.Add(time.Minute); !at.After(c.Add(12 * time.Hour)); at = at.Add(time.Minute) {
			e.at(at)
			for i := 0; e.tick(t) > 0; i++ {
				if i == 3 {
					t.Fatalf("Tick at created+%s does not converge", at.Sub(c))
				}
			}
		}
		vs = checkStep()
		var got []string
		for _, v := range vs {
			if v.ActivatedAt != nil {
				got = append(got, v.ActivatedAt.Sub(c).String())
			}
		}
		want := []string{"0s", "1h0m0s", "2h0m0s", "3h0m0s", "7h55m0s", "8h55m0s", "9h55m0s", "10h55m0s", "11h55m0s"}
		if !sameStrings(got, want) {
			t.Errorf("activations at created+%v, want %v", got, want)
		}
		if last := vs[len(vs)-1]; last.State != store.StateActive {
			t.Errorf("last version %s is %s at created+12h", last.KID, last.State)
		}
		all := auditRows(t, s)
		if n := countAudit(all, "version.activate", ""); n != len(want) {
			t.Errorf("%d version.activate rows, want %d", n, len(want))
		}
		if n := countAudit(all, "version.prepublish", ""); n != len(want)-1 {
			t.Errorf("%d version.prepublish rows, want %d", n, len(want)-1)
		}
		checkDocuments(t, e, "villa")
	})
}

// TestTickNoPolicy: keys without a rotation period are never rotated by
// the scheduler; a pending version made by hand still activates on time.
func TestTickNoPolicy(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newLCEnv(t, s, t0, 0)
		_, v1 := e.createPolicy(t, "villa", issuer, "", rotation.Policy{Prepublish: rotation.Duration(10 * time.Minute)})
		e.at(t0.Add(1000 * time.Hour))
		if n := e.tick(t); n != 0 {
			t.Fatalf("Tick rotated a key without a rotation period: %d", n)
		}
		p, err := e.m.ScheduleRotation(ctx, "villa", bob)
		if err != nil {
			t.Fatal(err)
		}
		e.at(p.ActivatesAt.Add(-time.Microsecond))
		if n := e.tick(t); n != 0 {
			t.Fatalf("Tick before ActivatesAt did %d", n)
		}
		e.at(p.ActivatesAt.Add(time.Second))
		if n := e.tick(t); n != 1 {
			t.Fatalf("Tick after ActivatesAt did %d, want 1", n)
		}
		vs := checkLifecycle(t, s, "villa")
		if vs[0].KID != v1.KID || !eqTime(vs[0].RetiredAt, p.ActivatesAt) || !eqTime(vs[1].ActivatedAt, p.ActivatesAt) {
			t.Errorf("manual schedule: %s retired %s, %s activated %s, want both %s", vs[0].KID, fmtT(vs[0].RetiredAt), vs[1].KID, fmtT(vs[1].ActivatedAt), fmtT(p.ActivatesAt))
		}
		if n := e.tick(t); n != 0 {
			t.Errorf("Tick after activation did %d", n)
		}
	})
}

// --- 4. replicas -----------------------------------------------------------------

// TestTickReplicas: two Managers on one key history (replicas, each with
// its own connection) Tick at the same due instant at once: exactly one
// performs each transition, with one set of audit rows.
func TestTickReplicas(t *testing.T) {
	forEachStoreCfg(t, func(t *testing.T, cfg store.Config, s store.Store) {
		pol := rotation.Policy{RotationPeriod: rotation.Duration(time.Hour), Prepublish: rotation.Duration(10 * time.Minute)}
		e1 := newLCEnv(t, s, t0, 0)
		_, v1 := e1.createPolicy(t, "villa", issuer, "", pol)
		s2 := openStore(t, cfg)
		e2 := newLCEnv(t, s2, t0, 0)
		reps := []*env{e1, e2}

		both := func(at time.Time) int {
			t.Helper()
			for _, e := range reps {
				if err := e.m.Reload(ctx); err != nil {
					t.Fatal(err)
				}
				e.at(at)
			}
			start := make(chan struct{})
			var wg sync.WaitGroup
			ns := make([]int, len(reps))
			errs := make([]error, len(reps))
			for i, e := range reps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					ns[i], errs[i] = e.m.Tick(ctx)
				}()
			}
			close(start)
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("replica %d Tick: %v", i+1, err)
				}
			}
			for _, e := range reps {
				if err := e.m.Reload(ctx); err != nil {
					t.Fatal(err)
				}
			}
			return ns[0] + ns[1]
		}

		prev := v1.KID
		for round := 0; round < 3; round++ {
			base := t0.Add(time.Duration(round) * time.Hour)
			seq := lastSeq(t, s)
			if n := both(base.Add(40 * time.Minute)); n != 1 {
				t.Fatalf("round %d: replicas prepublished %d times, want 1", round, n)
			}
			rows := auditSince(t, s, seq)
			if countAudit(rows, "version.prepublish", "") != 1 || countAudit(rows, "version.create", "") != 1 || len(rows) != 2 {
				t.Fatalf("round %d: prepublish audit %v", round, actionsOf(rows))
			}
			kid := rows[0].KID

			seq = lastSeq(t, s)
			if n := both(base.Add(time.Hour)); n != 1 {
				t.Fatalf("round %d: replicas activated %d times, want 1", round, n)
			}
			rows = auditSince(t, s, seq)
			if n := countAudit(auditRows(t, s), "version.activate", kid); n != 1 {
				t.Errorf("round %d: %d version.activate rows for %s, want 1", round, n, kid)
			}
			if n := countAudit(auditRows(t, s), "version.retire", prev); n != 1 {
				t.Errorf("round %d: %d version.retire rows for %s, want 1", round, n, prev)
			}
			if len(rows) != 2 {
				t.Errorf("round %d: activation wrote %v", round, actionsOf(rows))
			}
			vs := checkLifecycle(t, s, "villa")
			if a := vs[len(vs)-1]; a.KID != kid || a.State != store.StateActive || !eqTime(a.ActivatedAt, tp(base.Add(time.Hour))) {
				t.Errorf("round %d: newest %s %s activated %s", round, a.KID, a.State, fmtT(a.ActivatedAt))
			}
			k1, k2 := e1.entry(t, "villa"), e2.entry(t, "villa")
			if k1.Active.KID() != kid || k2.Active.KID() != kid {
				t.Errorf("round %d: replicas sign with %s and %s, want %s", round, k1.Active.KID(), k2.Active.KID(), kid)
			}
			if k1.JWKS.ETag != k2.JWKS.ETag || k1.History.ETag != k2.History.ETag ||
				e1.m.Keyring().DID[issuer].ETag != e2.m.Keyring().DID[issuer].ETag {
				t.Errorf("round %d: replicas publish different documents", round)
			}
			prev = kid
		}
		if vs := versions(t, s, "villa"); len(vs) != 4 {
			t.Errorf("%d versions after 3 rounds, want 4", len(vs))
		}
	})
}

// TestTickPartialFailure: a failing transition of one key neither stops
// the others nor leaves anything behind; the next Tick retries it.
func TestTickPartialFailure(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		pol := rotation.Policy{RotationPeriod: rotation.Duration(time.Hour), Prepublish: rotation.Duration(10 * time.Minute)}
		e := newLCEnv(t, s, t0, 0)
		e.createPolicy(t, "a", issuer, "", pol)
		e.at(t0.Add(20 * time.Minute))
		_, b1 := e.createPolicy(t, "b", issuer, "", pol)
		e.at(t0.Add(40 * time.Minute))
		if n := e.tick(t); n != 1 {
			t.Fatalf("Tick at +40m did %d, want 1 (a prepublishes)", n)
		}
		// At +1h: a's pending version activates (no key pair needed) and b
		// must prepublish (its key pair creation fails).
		e.at(t0.Add(time.Hour))
		e.b.failCreate.Store(true)
		seq := lastSeq(t, s)
		n, err := e.m.Tick(ctx)
		if n != 1 || !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "key b") {
			t.Fatalf("Tick with b failing = %d, %v; want 1 and b's injected error", n, err)
		}
		rows := auditSince(t, s, seq)
		if countAudit(rows, "version.activate", "") != 1 || len(rows) != 2 {
			t.Errorf("audit after a partial Tick: %v", actionsOf(rows))
		}
		for _, r := range rows {
			if r.KeyName != "a" {
				t.Errorf("failed transition of b left audit row %s %s", r.Action, r.KID)
			}
		}
		if vs := versions(t, s, "b"); len(vs) != 1 || vs[0].KID != b1.KID {
			t.Errorf("failed transition of b left versions %d", len(vs))
		}
		checkLifecycle(t, s, "a")
		e.b.failCreate.Store(false)
		e.at(t0.Add(time.Hour + time.Minute))
		if n := e.tick(t); n != 1 {
			t.Fatalf("retry Tick did %d, want 1", n)
		}
		vs := checkLifecycle(t, s, "b")
		if len(vs) != 2 || !eqTime(vs[1].ActivatesAt, tp(t0.Add(20*time.Minute+time.Hour))) {
			t.Errorf("b after retry: %d versions, activates %s", len(vs), fmtT(vs[len(vs)-1].ActivatesAt))
		}
	})
}

// TestRevokeDuringTick: one replica revokes the active version while
// another activates the pending version at its due instant. Whatever the
// order, the pending version ends active, the revoked one revoked, no
// extra kid is minted and the pending version is activated exactly once.
func TestRevokeDuringTick(t *testing.T) {
	forEachStoreCfg(t, func(t *testing.T, cfg store.Config, s store.Store) {
		pol := rotation.Policy{RotationPeriod: rotation.Duration(time.Hour), Prepublish: rotation.Duration(10 * time.Minute)}
		e1 := newLCEnv(t, s, t0, 0)
		e2 := newLCEnv(t, openStore(t, cfg), t0, 0)
		for i := 0; i < 4; i++ {
			name := "k" + string(rune('a'+i))
			e1.at(t0)
			_, v1 := e1.createPolicy(t, name, issuer, "", pol)
			e1.at(t0.Add(40 * time.Minute))
			e1.tick(t)
			p := versions(t, s, name)[1]
			A := *p.ActivatesAt
			if err := e2.m.Reload(ctx); err != nil {
				t.Fatal(err)
			}
			e1.at(A)
			e2.at(A)
			creates := e1.b.creates.Load() + e2.b.creates.Load()
			start := make(chan struct{})
			var wg sync.WaitGroup
			var tickErr, revErr error
			wg.Add(2)
			go func() { defer wg.Done(); <-start; _, tickErr = e1.m.Tick(ctx) }()
			go func() { defer wg.Done(); <-start; _, _, revErr = e2.m.Revoke(ctx, v1.KID, t0, "race", alice) }()
			close(start)
			wg.Wait()
			if tickErr != nil || revErr != nil {
				t.Fatalf("%s: Tick %v, Revoke %v", name, tickErr, revErr)
			}
			vs := checkLifecycle(t, s, name)
			if len(vs) != 2 || vs[0].State != store.StateRevoked || vs[1].KID != p.KID || vs[1].State != store.StateActive ||
				!eqTime(vs[1].ActivatedAt, &A) || !eqTime(vs[0].RetiredAt, &A) {
				t.Errorf("%s: %s %s retired %s, %s %s activated %s; want revoked/active at %s", name,
					vs[0].KID, vs[0].State, fmtT(vs[0].RetiredAt), vs[len(vs)-1].KID, vs[len(vs)-1].State, fmtT(vs[len(vs)-1].ActivatedAt), A)
			}
			if got := e1.b.creates.Load() + e2.b.creates.Load(); got != creates {
				t.Errorf("%s: %d key pairs minted during the race", name, got-creates)
			}
			if n := countAudit(auditRows(t, s), "version.activate", p.KID); n != 1 {
				t.Errorf("%s: %d version.activate rows for %s", name, n, p.KID)
			}
		}
	})
}

// --- 5. Activate ------------------------------------------------------------------

func TestActivate(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newLCEnv(t, s, t0, 0)
		_, v1 := e.createPolicy(t, "villa", issuer, "", rotation.Policy{Prepublish: rotation.Duration(time.Hour)})
		t1 := t0.Add(time.Hour)
		e.at(t1)
		p, err := e.m.ScheduleRotation(ctx, "villa", bob)
		if err != nil {
			t.Fatal(err)
		}
		// 3 minutes after publication a verifier may still hold a JWKS
		// without it (max-age 5 min): refused, nothing written.
		e.at(t1.Add(3 * time.Minute))
		seq := lastSeq(t, s)
		if _, err := e.m.Activate(ctx, p.KID, alice); !errors.Is(err, rotation.ErrActivationTooEarly) {
			t.Fatalf("Activate 3 min after publication: %v, want ErrActivationTooEarly", err)
		}
		if lastSeq(t, s) != seq {
			t.Fatal("a refused activation wrote audit rows")
		}
		t2 := t1.Add(6 * time.Minute)
		e.at(t2)
		a, err := e.m.Activate(ctx, p.KID, alice)
		if err != nil {
			t.Fatalf("Activate: %v", err)
		}
		if a.KID != p.KID || a.State != store.StateActive || !eqTime(a.ActivatedAt, &t2) {
			t.Errorf("Activate returned %s %s activated %s, want active at %s", a.KID, a.State, fmtT(a.ActivatedAt), t2)
		}
		sa, _ := s.GetVersion(ctx, p.KID)
		sameVersion(t, "stored activated version", sa, a)
		old, _ := s.GetVersion(ctx, v1.KID)
		if old.State != store.StateRetired || !eqTime(old.RetiredAt, &t2) {
			t.Errorf("old %s %s retired %s, want retired at %s", old.KID, old.State, fmtT(old.RetiredAt), t2)
		}
		rows := auditSince(t, s, seq)
		if got, want := actionsOf(rows), []string{"version.activate " + p.KID, "version.retire " + v1.KID}; !sameStrings(got, want) {
			t.Errorf("Activate audit %v, want %v", got, want)
		}
		for _, r := range rows {
			if r.Actor != alice.Name || r.Reason != alice.Reason {
				t.Errorf("audit %s by %q (%q)", r.Action, r.Actor, r.Reason)
			}
		}
		ke := e.entry(t, "villa")
		if ke.Active.KID() != p.KID || ke.Next != nil {
			t.Errorf("Keyring after Activate: active %s next %v", ke.Active.KID(), ke.Next)
		}
		if sg := ke.SignerAt(t2); sg == nil || sg.KID() != p.KID {
			t.Errorf("SignerAt(now) after Activate = %v", sg)
		}
		checkLifecycle(t, s, "villa")
		checkDocuments(t, e, "villa")

		// Only a pending version can be activated.
		seq = lastSeq(t, s)
		for _, c := range []struct {
			kid  string
			want error
		}{
			{p.KID, rotation.ErrInvalidTransition},  // active
			{v1.KID, rotation.ErrInvalidTransition}, // retired
			{issuer + "-2026-05-18-99", rotation.ErrVersionNotFound},
			{"", rotation.ErrVersionNotFound},
		} {
			if _, err := e.m.Activate(ctx, c.kid, alice); !errors.Is(err, c.want) {
				t.Errorf("Activate(%q) = %v, want %v", c.kid, err, c.want)
			}
		}
		if got := lastSeq(t, s); got != seq {
			t.Errorf("refused Activate calls wrote audit rows: seq %d -> %d", seq, got)
		}
		// A revoked (formerly pending) version cannot be activated.
		e.at(t2.Add(time.Minute))
		q, err := e.m.ScheduleRotation(ctx, "villa", bob)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.m.Revoke(ctx, q.KID, t2, "leaked before use", alice); err != nil {
			t.Fatal(err)
		}
		seq = lastSeq(t, s)
		if _, err := e.m.Activate(ctx, q.KID, alice); !errors.Is(err, rotation.ErrInvalidTransition) {
			t.Errorf("Activate(revoked) = %v, want ErrInvalidTransition", err)
		}
		if rows := auditSince(t, s, seq); len(rows) != 0 {
			t.Errorf("refused Activate wrote %v", actionsOf(rows))
		}
		checkLifecycle(t, s, "villa")
	})
}

// --- 6. Revoke --------------------------------------------------------------------

func TestRevoke(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newLCEnv(t, s, t0, 0)
		pol := rotation.Policy{Prepublish: rotation.Duration(10 * time.Minute)}
		t1 := t0.Add(time.Hour)
		after := func(name string) {
			t.Helper()
			checkLifecycle(t, s, name)
			checkDocuments(t, e, name)
		}

		t.Run("active without pending", func(t *testing.T) {
			e.at(t0)
			_, v1 := e.createPolicy(t, "alpha", issuer, "", pol)
			e.at(t1)
			cest := time.FixedZone("CEST", 2*3600)
			comp := time.Date(2026, 5, 18, 12, 30, 0, 123456789, cest) // 10:30:00.123456789Z
			wantComp := time.Date(2026, 5, 18, 10, 30, 0, 123456000, time.UTC)
			creates := e.b.creates.Load()
			seq := lastSeq(t, s)
			rv, repl, err := e.m.Revoke(ctx, v1.KID, comp, "signing laptop stolen", alice)
			if err != nil {
				t.Fatalf("Revoke: %v", err)
			}
			if rv.KID != v1.KID || rv.State != store.StateRevoked || !eqTime(rv.RetiredAt, &t1) || !eqTime(rv.RevokedAt, &t1) ||
				!eqTime(rv.ActivatedAt, &t0) || !eqTime(rv.CompromisedAt, &wantComp) || rv.RevocationReason != "signing laptop stolen" {
				t.Errorf("revoked %s %s activated %s retired %s revoked %s compromised %s reason %q", rv.KID, rv.State,
					fmtT(rv.ActivatedAt), fmtT(rv.RetiredAt), fmtT(rv.RevokedAt), fmtT(rv.CompromisedAt), rv.RevocationReason)
			}
			if rv.CompromisedAt != nil && rv.CompromisedAt.Location() != time.UTC {
				t.Errorf("CompromisedAt in %s, want UTC", rv.CompromisedAt.Location())
			}
			if e.b.creates.Load() != creates+1 {
				t.Errorf("revoking the active version minted %d key pairs, want 1", e.b.creates.Load()-creates)
			}
			if repl == nil {
				t.Fatal("no replacement returned")
			}
			if repl.KID == v1.KID || repl.State != store.StateActive || !eqTime(repl.ActivatedAt, &t1) {
				t.Errorf("replacement %s %s activated %s, want a new active version at %s", repl.KID, repl.State, fmtT(repl.ActivatedAt), t1)
			}
			sv, _ := s.GetVersion(ctx, v1.KID)
			sameVersion(t, "stored revoked version", sv, rv)
			sr, _ := s.GetVersion(ctx, repl.KID)
			sameVersion(t, "stored replacement", sr, *repl)
			if ke := e.entry(t, "alpha"); ke.Active == nil || ke.Active.KID() != repl.KID {
				t.Errorf("Keyring signs with %v, want %s", ke.Active, repl.KID)
			}
			rows := auditSince(t, s, seq)
			want := []string{"version.activate " + repl.KID, "version.create " + repl.KID, "version.retire " + v1.KID, "version.revoke " + v1.KID}
			if got := actionsOf(rows); !sameStrings(got, want) {
				t.Errorf("Revoke audit %v, want %v", got, want)
			}
			for _, r := range rows {
				if r.Action != "version.revoke" {
					continue
				}
				if r.Actor != alice.Name || r.Reason != "signing laptop stolen" || !r.At.Equal(t1) {
					t.Errorf("version.revoke row actor %q reason %q at %s", r.Actor, r.Reason, r.At)
				}
				var det map[string]string
				if err := json.Unmarshal(r.Details, &det); err != nil || det["compromised_at"] != ts(wantComp) {
					t.Errorf("version.revoke details %s", r.Details)
				}
				// previous_state: see TestRevokeAuditPreviousState.
			}
			h := lcHistory(t, e.entry(t, "alpha").History)
			if got := h.Keys[0]; got.Status != "revoked" || got.CompromisedAt != ts(wantComp) || got.NotBefore != ts(t0) || got.NotAfter != ts(t1) ||
				got.RevocationReason != "signing laptop stolen" || got.Backend != "software" {
				t.Errorf("history entry of the revoked version %+v", got)
			}
			after("alpha")
		})

		t.Run("active with pending", func(t *testing.T) {
			e.at(t0)
			_, v1 := e.createPolicy(t, "bravo", issuer, "", pol)
			e.at(t1)
			p, err := e.m.ScheduleRotation(ctx, "bravo", bob)
			if err != nil {
				t.Fatal(err)
			}
			t2 := t1.Add(2 * time.Minute)
			e.at(t2)
			creates := e.b.creates.Load()
			rv, repl, err := e.m.Revoke(ctx, v1.KID, t1, "key file copied", alice)
			if err != nil {
				t.Fatalf("Revoke: %v", err)
			}
			if repl == nil || repl.KID != p.KID || repl.State != store.StateActive || !eqTime(repl.ActivatedAt, &t2) {
				t.Fatalf("replacement %+v, want the pending %s active at %s", repl, p.KID, t2)
			}
			if e.b.creates.Load() != creates {
				t.Errorf("Revoke minted a new kid although %s was pending", p.KID)
			}
			if rv.State != store.StateRevoked || !eqTime(rv.RetiredAt, &t2) || !eqTime(rv.RevokedAt, &t2) || !eqTime(rv.CompromisedAt, &t1) {
				t.Errorf("revoked %s %s retired %s revoked %s compromised %s", rv.KID, rv.State, fmtT(rv.RetiredAt), fmtT(rv.RevokedAt), fmtT(rv.CompromisedAt))
			}
			if vs := versions(t, s, "bravo"); len(vs) != 2 {
				t.Errorf("%d versions, want 2", len(vs))
			}
			ke := e.entry(t, "bravo")
			if ke.Active.KID() != p.KID || ke.Next != nil {
				t.Errorf("Keyring: active %s next %v", ke.Active.KID(), ke.Next)
			}
			after("bravo")
		})

		t.Run("retired", func(t *testing.T) {
			e.at(t0)
			_, v1 := e.createPolicy(t, "charlie", issuer, "", pol)
			e.at(t1)
			v2, _ := e.rotate(t, "charlie")
			t2 := t1.Add(time.Minute)
			e.at(t2)
			rv, repl, err := e.m.Revoke(ctx, v1.KID, t2, "backup tape lost", alice) // compromised_at = now is allowed
			if err != nil {
				t.Fatalf("Revoke: %v", err)
			}
			if repl != nil {
				t.Errorf("revoking a retired version returned a replacement %s", repl.KID)
			}
			if rv.State != store.StateRevoked || !eqTime(rv.ActivatedAt, &t0) || !eqTime(rv.RetiredAt, &t1) || !eqTime(rv.RevokedAt, &t2) || !eqTime(rv.CompromisedAt, &t2) {
				t.Errorf("revoked %s %s window [%s, %s] revoked %s compromised %s; want window [%s, %s] kept",
					rv.KID, rv.State, fmtT(rv.ActivatedAt), fmtT(rv.RetiredAt), fmtT(rv.RevokedAt), fmtT(rv.CompromisedAt), t0, t1)
			}
			if ke := e.entry(t, "charlie"); ke.Active.KID() != v2.KID {
				t.Errorf("active changed to %s", ke.Active.KID())
			}
			rows := auditRows(t, s)
			last := rows[len(rows)-1]
			var det map[string]string
			if last.Action != "version.revoke" || json.Unmarshal(last.Details, &det) != nil || det["previous_state"] != "retired" {
				t.Errorf("last audit row %s %s", last.Action, last.Details)
			}
			h := lcHistory(t, e.entry(t, "charlie").History)
			if got := h.Keys[0]; got.NotBefore != ts(t0) || got.NotAfter != ts(t1) || got.CompromisedAt != ts(t2) {
				t.Errorf("history entry %+v", got)
			}
			after("charlie")
		})

		var pendingKID string
		t.Run("pending", func(t *testing.T) {
			e.at(t0)
			_, v1 := e.createPolicy(t, "delta", issuer, "", pol)
			e.at(t1)
			p, err := e.m.ScheduleRotation(ctx, "delta", bob)
			if err != nil {
				t.Fatal(err)
			}
			pendingKID = p.KID
			t2 := t1.Add(time.Minute)
			e.at(t2)
			rv, repl, err := e.m.Revoke(ctx, p.KID, t1, "generated on a compromised host", alice)
			if err != nil {
				t.Fatalf("Revoke: %v", err)
			}
			if repl != nil {
				t.Errorf("revoking a pending version returned a replacement %s", repl.KID)
			}
			if rv.State != store.StateRevoked || rv.ActivatedAt != nil || rv.RetiredAt != nil || !eqTime(rv.RevokedAt, &t2) {
				t.Errorf("revoked pending %s %s activated %s retired %s revoked %s", rv.KID, rv.State, fmtT(rv.ActivatedAt), fmtT(rv.RetiredAt), fmtT(rv.RevokedAt))
			}
			for _, v := range versions(t, s, "delta") {
				if v.State == store.StatePending {
					t.Errorf("%s still pending", v.KID)
				}
			}
			ke := e.entry(t, "delta")
			if ke.Next != nil {
				t.Errorf("Keyring Next = %s after its revocation, want nil", ke.Next.KID())
			}
			if sg := ke.SignerAt(p.ActivatesAt.Add(time.Hour)); sg == nil || sg.KID() != v1.KID {
				t.Errorf("SignerAt(after the cancelled activation) = %v, want %s", sg, v1.KID)
			}
			if hasKID(lcJWKS(t, ke.JWKS), p.KID) {
				t.Errorf("revoked pending version still in the JWKS")
			}
			after("delta")
			// The key can be scheduled again.
			e.at(t2.Add(time.Second))
			if _, err := e.m.ScheduleRotation(ctx, "delta", bob); err != nil {
				t.Errorf("ScheduleRotation after revoking the pending version: %v", err)
			}
			after("delta")
		})

		t.Run("errors", func(t *testing.T) {
			e.at(t0)
			_, v1 := e.createPolicy(t, "echo", issuer, "", pol)
			now := t1.Add(time.Hour)
			e.at(now)
			seq := lastSeq(t, s)
			for _, c := range []struct {
				what   string
				kid    string
				comp   time.Time
				reason string
				want   error
			}{
				{"future compromised_at", v1.KID, now.Add(time.Microsecond), "x", rotation.ErrInvalidRequest},
				{"far future compromised_at", v1.KID, now.Add(24 * time.Hour), "x", rotation.ErrInvalidRequest},
				{"zero compromised_at", v1.KID, time.Time{}, "x", rotation.ErrInvalidRequest},
				{"empty reason", v1.KID, now, "", rotation.ErrInvalidRequest},
				{"blank reason", v1.KID, now, " \t\n", rotation.ErrInvalidRequest},
				{"unknown kid", issuer + "-2026-05-18-99", now, "x", rotation.ErrVersionNotFound},
				{"empty kid", "", now, "x", rotation.ErrVersionNotFound},
			} {
				if _, _, err := e.m.Revoke(ctx, c.kid, c.comp, c.reason, alice); !errors.Is(err, c.want) {
					t.Errorf("%s: Revoke = %v, want %v", c.what, err, c.want)
				}
			}
			if rows := auditSince(t, s, seq); len(rows) != 0 {
				t.Fatalf("refused Revoke wrote %v", actionsOf(rows))
			}
			if _, _, err := e.m.Revoke(ctx, v1.KID, now, "first", alice); err != nil {
				t.Fatal(err)
			}
			seq = lastSeq(t, s)
			for _, kid := range []string{v1.KID, pendingKID} {
				if kid == "" {
					continue
				}
				if _, _, err := e.m.Revoke(ctx, kid, now, "again", alice); !errors.Is(err, rotation.ErrInvalidTransition) {
					t.Errorf("revoking %s twice: %v, want ErrInvalidTransition", kid, err)
				}
			}
			if rows := auditSince(t, s, seq); len(rows) != 0 {
				t.Fatalf("refused second Revoke wrote %v", actionsOf(rows))
			}
			if v, _ := s.GetVersion(ctx, v1.KID); v.RevocationReason != "first" {
				t.Errorf("second Revoke changed the reason to %q", v.RevocationReason)
			}
			after("echo")
		})

		// One audit chain over everything.
		if broken, err := store.VerifyAuditChain(auditRows(t, s)); err != nil || broken != 0 {
			t.Fatalf("VerifyAuditChain = %d, %v", broken, err)
		}
	})
}

// TestRevokeAuditPreviousState: the version.revoke audit row records the
// state the version was in when it was revoked.
func TestRevokeAuditPreviousState(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newLCEnv(t, s, t0, 0)
		pol := rotation.Policy{Prepublish: rotation.Duration(10 * time.Minute)}
		_, a1 := e.createPolicy(t, "alpha", issuer, "", pol) // revoked while active
		_, b1 := e.createPolicy(t, "bravo", issuer, "", pol) // revoked while active, with a pending version
		e.createPolicy(t, "charlie", issuer, "", pol)
		e.at(t0.Add(time.Hour))
		if _, err := e.m.ScheduleRotation(ctx, "bravo", bob); err != nil {
			t.Fatal(err)
		}
		if _, err := e.m.ScheduleRotation(ctx, "charlie", bob); err != nil {
			t.Fatal(err)
		}
		_, c1 := e.rotate(t, "charlie")                      // activates the pending version; c1 retired
		c3, err := e.m.ScheduleRotation(ctx, "charlie", bob) // revoked while pending
		if err != nil {
			t.Fatal(err)
		}
		e.at(t0.Add(time.Hour + 5*time.Minute)) // before the pending versions' activation (+1h10m)
		for _, c := range []struct{ kid, want string }{
			{a1.KID, "active"}, {b1.KID, "active"}, {c3.KID, "pending"}, {c1.KID, "retired"},
		} {
			if _, _, err := e.m.Revoke(ctx, c.kid, t0, "test", alice); err != nil {
				t.Fatal(err)
			}
			rows := auditRows(t, s)
			last := rows[len(rows)-1]
			var det map[string]string
			if last.Action != "version.revoke" || last.KID != c.kid || json.Unmarshal(last.Details, &det) != nil || det["previous_state"] != c.want {
				t.Errorf("revoking %s (%s): audit %s %s %s, want previous_state %q", c.kid, c.want, last.Action, last.KID, last.Details, c.want)
			}
		}
	})
}

// TestRevokeDuePending: a pending version whose activation instant has
// passed is already signing on every replica (KeyEntry.SignerAt). Revoking
// it first completes that activation at its scheduled instant, then rotates
// away from it like any active version: its window is closed, never left
// open-ended.
func TestRevokeDuePending(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newLCEnv(t, s, t0, 0)
		_, v1 := e.createPolicy(t, "villa", issuer, "", rotation.Policy{Prepublish: rotation.Duration(10 * time.Minute)})
		p, err := e.m.ScheduleRotation(ctx, "villa", bob)
		if err != nil {
			t.Fatal(err)
		}
		due := t0.Add(10 * time.Minute)
		e.at(t0.Add(15 * time.Minute))
		revoked, next, err := e.m.Revoke(ctx, p.KID, t0, "leaked", alice)
		if err != nil {
			t.Fatal(err)
		}
		if next == nil || next.KID == p.KID || next.KID == v1.KID {
			t.Fatalf("revoking a due pending version must rotate to a new version, got %+v", next)
		}
		if !eqTime(revoked.ActivatedAt, tp(due)) || !eqTime(revoked.RetiredAt, tp(t0.Add(15*time.Minute))) {
			t.Errorf("revoked %s window [%s, %s], want [%s, %s]", p.KID, fmtT(revoked.ActivatedAt), fmtT(revoked.RetiredAt), due, t0.Add(15*time.Minute))
		}
		vs := checkLifecycle(t, s, "villa")
		if got := lcFind(t, vs, v1.KID); got.State != store.StateRetired || !eqTime(got.RetiredAt, tp(due)) {
			t.Errorf("%s: state %s retired %s, want retired at %s", v1.KID, got.State, fmtT(got.RetiredAt), due)
		}
		rows := auditRows(t, s)
		var det map[string]string
		last := rows[len(rows)-1]
		if last.Action != "version.revoke" || json.Unmarshal(last.Details, &det) != nil || det["previous_state"] != "active" {
			t.Errorf("audit %s %s, want version.revoke with previous_state active", last.Action, last.Details)
		}
	})
}

// --- 7. retention ----------------------------------------------------------------

func TestRetention(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newLCEnv(t, s, t0, 0)
		const R = rotation.DefaultMinRetention // the shortest retention allowed
		_, v1 := e.createPolicy(t, "villa", issuer, "", rotation.Policy{Retention: rotation.Duration(R)})
		T := t0.Add(2 * time.Hour)
		e.at(T)
		v2, _ := e.rotate(t, "villa")
		for _, c := range []struct {
			at    time.Time
			inSet bool
		}{
			{T, true},
			{T.Add(R - time.Minute), true},
			{T.Add(R - time.Microsecond), true},
			{T.Add(R), false},
			{T.Add(R + time.Microsecond), false},
			{T.Add(1000 * time.Hour), false},
		} {
			e.at(c.at)
			if err := e.m.Reload(ctx); err != nil {
				t.Fatal(err)
			}
			ke := e.entry(t, "villa")
			jwks := lcJWKS(t, ke.JWKS)
			if hasKID(jwks, v1.KID) != c.inSet {
				t.Errorf("at retired+%s: %s in JWKS = %v, want %v", c.at.Sub(T), v1.KID, !c.inSet, c.inSet)
			}
			if !hasKID(jwks, v2.KID) {
				t.Errorf("at retired+%s: active %s missing from the JWKS", c.at.Sub(T), v2.KID)
			}
			if h := lcHistory(t, ke.History); len(h.Keys) != 2 || h.Keys[0].KID != v1.KID || h.Keys[0].Status != "retired" {
				t.Errorf("at retired+%s: history %v, want both versions", c.at.Sub(T), entryKIDs(h.Keys))
			}
			var did jwksserve.DIDDocument
			if err := json.Unmarshal(e.m.Keyring().DID[issuer].Body, &did); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(strings.Join(did.AssertionMethod, " "), "#"+v1.KID); got != c.inSet {
				t.Errorf("at retired+%s: %s in did.json = %v, want %v", c.at.Sub(T), v1.KID, got, c.inSet)
			}
		}
	})
}

// --- 8. did:web -----------------------------------------------------------------------

func TestDIDDocument(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newLCEnv(t, s, t0, 0)
		_, o1 := e.createPolicy(t, "offer", issuer, "EdDSA", rotation.Policy{})
		e.createPolicy(t, "transport", issuer, "ES256", rotation.Policy{})
		_, x1 := e.createPolicy(t, "other", "example.com", "", rotation.Policy{})
		e.at(t0.Add(time.Hour))
		e.rotate(t, "offer")
		if _, err := e.m.ScheduleRotation(ctx, "transport", bob); err != nil {
			t.Fatal(err)
		}
		e.at(t0.Add(2 * time.Hour))
		if _, _, err := e.m.Revoke(ctx, o1.KID, t0.Add(30*time.Minute), "leaked", alice); err != nil {
			t.Fatal(err)
		}

		ring := e.m.Keyring()
		if len(ring.DID) != 2 {
			t.Errorf("Keyring has %d DID documents, want 2 (one per issuer)", len(ring.DID))
		}
		did := "did:web:" + issuer
		var doc jwksserve.DIDDocument
		if err := json.Unmarshal(ring.DID[issuer].Body, &doc); err != nil {
			t.Fatal(err)
		}
		if doc.ID != did {
			t.Errorf("id %q, want %q", doc.ID, did)
		}
		if len(doc.Context) == 0 || doc.Context[0] != "https://www.w3.org/ns/did/v1" {
			t.Errorf("@context %v", doc.Context)
		}
		// Expected: every published (non-revoked) version of both keys.
		want := map[string]store.KeyVersion{}
		for _, name := range []string{"offer", "transport"} {
			for _, v := range versions(t, s, name) {
				if v.State != store.StateRevoked {
					want[did+"#"+v.KID] = v
				}
			}
		}
		if len(want) != 3 {
			t.Fatalf("setup: %d published versions, want 3", len(want))
		}
		if len(doc.VerificationMethod) != len(want) {
			t.Errorf("%d verification methods, want %d", len(doc.VerificationMethod), len(want))
		}
		var ids []string
		seen := map[string]bool{}
		for _, vm := range doc.VerificationMethod {
			ids = append(ids, vm.ID)
			v, ok := want[vm.ID]
			if !ok || seen[vm.ID] {
				t.Errorf("unexpected or duplicate verification method %s", vm.ID)
				continue
			}
			seen[vm.ID] = true
			if vm.Type != "JsonWebKey2020" || vm.Controller != did {
				t.Errorf("%s: type %q controller %q", vm.ID, vm.Type, vm.Controller)
			}
			var jwk struct{ Kty, Crv, X, Y, Kid, Alg string }
			if err := json.Unmarshal(v.PublicJWK, &jwk); err != nil {
				t.Fatal(err)
			}
			pk := vm.PublicKeyJwk
			if pk.Kty != jwk.Kty || pk.Crv != jwk.Crv || pk.X != jwk.X || pk.Y != jwk.Y || pk.KID != v.KID || pk.Alg != v.Algorithm {
				t.Errorf("%s: publicKeyJwk %+v, want %s", vm.ID, pk, v.PublicJWK)
			}
			if v.Algorithm == "ES256" && pk.Y == "" {
				t.Errorf("%s: ES256 key without y", vm.ID)
			}
		}
		if !sameStrings(doc.AssertionMethod, ids) {
			t.Errorf("assertionMethod %v, want exactly the verification methods %v", doc.AssertionMethod, ids)
		}
		if strings.Contains(string(ring.DID[issuer].Body), o1.KID) {
			t.Errorf("revoked %s appears in the DID document", o1.KID)
		}
		var other jwksserve.DIDDocument
		if err := json.Unmarshal(ring.DID["example.com"].Body, &other); err != nil {
			t.Fatal(err)
		}
		if other.ID != "did:web:example.com" || len(other.AssertionMethod) != 1 || other.AssertionMethod[0] != "did:web:example.com#"+x1.KID {
			t.Errorf("example.com DID %s", ring.DID["example.com"].Body)
		}
	})
}

// --- 9. clock behind -----------------------------------------------------------

// TestLifecycleClockBehind: a replica whose clock is behind the latest
// instant recorded for a key keeps every window ordered.
func TestLifecycleClockBehind(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		ahead := newLCEnv(t, s, t0.Add(2*time.Hour), 0)
		_, v1 := ahead.createPolicy(t, "villa", issuer, "", rotation.Policy{Prepublish: rotation.Duration(10 * time.Minute)})
		p, err := ahead.m.ScheduleRotation(ctx, "villa", bob)
		if err != nil {
			t.Fatal(err)
		}
		behind := newLCEnv(t, s, t0, 0) // two hours behind

		// Activate (an emergency: the clamped clock says it was published
		// just now).
		a, err := behind.m.ActivateEmergency(ctx, p.KID, alice)
		if err != nil {
			t.Fatalf("Activate with a clock behind: %v", err)
		}
		if a.ActivatedAt.Before(*v1.ActivatedAt) {
			t.Errorf("%s activated %s, before its predecessor (%s)", a.KID, fmtT(a.ActivatedAt), fmtT(v1.ActivatedAt))
		}
		checkLifecycle(t, s, "villa")

		// ScheduleRotation.
		q, err := behind.m.ScheduleRotation(ctx, "villa", bob)
		if err != nil {
			t.Fatal(err)
		}
		if q.PublishedAt.Before(*a.ActivatedAt) || q.ActivatesAt.Before(q.PublishedAt.Add(10*time.Minute)) {
			t.Errorf("scheduled with a clock behind: published %s activates %s, active since %s", fmtT(q.PublishedAt), fmtT(q.ActivatesAt), fmtT(a.ActivatedAt))
		}
		checkLifecycle(t, s, "villa")

		// Revoke the active version (activates the pending one) and a
		// retired one; compromised_at before the behind clock's now.
		if _, repl, err := behind.m.Revoke(ctx, a.KID, t0.Add(-time.Hour), "stolen", alice); err != nil {
			t.Fatalf("Revoke with a clock behind: %v", err)
		} else if repl == nil || repl.KID != q.KID {
			t.Fatalf("replacement %v, want %s", repl, q.KID)
		}
		checkLifecycle(t, s, "villa")
		if _, repl, err := behind.m.Revoke(ctx, q.KID, t0.Add(-time.Hour), "stolen too", alice); err != nil {
			t.Fatalf("Revoke (mint) with a clock behind: %v", err)
		} else if repl == nil {
			t.Fatal("no replacement")
		}
		if _, _, err := behind.m.Revoke(ctx, v1.KID, t0, "old backup", alice); err != nil {
			t.Fatalf("Revoke retired with a clock behind: %v", err)
		}
		vs := checkLifecycle(t, s, "villa")
		checkDocuments(t, behind, "villa")
		for _, en := range lcHistory(t, behind.entry(t, "villa").History).Keys {
			if en.NotBefore != "" && en.NotAfter != "" && en.NotAfter < en.NotBefore {
				t.Errorf("history entry %s: vrp_not_after %s < vrp_not_before %s", en.KID, en.NotAfter, en.NotBefore)
			}
		}
		for _, v := range vs {
			if v.RevokedAt != nil && v.CreatedAt.After(*v.RevokedAt) {
				t.Errorf("%s revoked %s before it was created %s", v.KID, fmtT(v.RevokedAt), v.CreatedAt)
			}
		}

		// Tick: one replica prepublishes on schedule, another far ahead
		// records a later instant, then a replica behind that instant
		// performs the due activation.
		d := func(x time.Duration) rotation.Duration { return rotation.Duration(x) }
		pol := rotation.Policy{RotationPeriod: d(time.Hour), Prepublish: d(10 * time.Minute)}
		r1 := newLCEnv(t, s, t0, 0)
		_, k1 := r1.createPolicy(t, "tick", "tick.example", "", pol)
		r1.at(t0.Add(10 * time.Minute))
		k2, _ := r1.rotate(t, "tick")
		r1.at(t0.Add(time.Hour))
		if n := r1.tick(t); n != 1 {
			t.Fatalf("prepublish Tick did %d", n)
		}
		far := newLCEnv(t, s, t0.Add(5*time.Hour), 0)
		if _, _, err := far.m.Revoke(ctx, k1.KID, t0, "old", alice); err != nil {
			t.Fatal(err)
		}
		// far's Revoke already completed the due activation (at its
		// scheduled instant); a replica behind far's instant finds nothing.
		slow := newLCEnv(t, s, t0.Add(time.Hour+20*time.Minute), 0) // after ActivatesAt, before far's instant
		if n := slow.tick(t); n != 0 {
			t.Fatalf("Tick with a clock behind did %d, want 0 (the activation was completed by the revoke)", n)
		}
		tv := checkLifecycle(t, s, "tick")
		if got := lcFind(t, tv, k2.KID); !eqTime(got.RetiredAt, tp(t0.Add(time.Hour+10*time.Minute))) {
			t.Errorf("%s retired %s, want its successor's scheduled activation %s", k2.KID, fmtT(got.RetiredAt), t0.Add(time.Hour+10*time.Minute))
		}
		// And a replica behind prepublishing: never before the last instant.
		slow.at(t0.Add(2*time.Hour + 5*time.Minute))
		if n := slow.tick(t); n != 1 {
			t.Fatalf("prepublish Tick with a clock behind did %d, want 1", n)
		}
		tv = checkLifecycle(t, s, "tick")
		last := tv[len(tv)-1]
		if last.State != store.StatePending || last.PublishedAt.Before(t0.Add(5*time.Hour)) || last.ActivatesAt.Before(last.PublishedAt.Add(10*time.Minute)) {
			t.Errorf("prepublished behind: %s %s published %s activates %s", last.KID, last.State, fmtT(last.PublishedAt), fmtT(last.ActivatesAt))
		}
	})
}

// --- 10. RunScheduler on a real clock -----------------------------------------------

func TestRunScheduler(t *testing.T) {
	if testing.Short() {
		t.Skip("real-clock scheduler test")
	}
	forEachStore(t, func(t *testing.T, s store.Store) {
		const pre = 400 * time.Millisecond
		b := newTestBackend(t)
		m := rotation.New(rotation.Config{Store: s, Backends: []backends.Backend{b}, Logger: quietLogger(), JWKSMaxAge: -1})
		if err := m.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		if m.JWKSMaxAge() != 0 {
			t.Fatalf("JWKSMaxAge() = %v, want 0", m.JWKSMaxAge())
		}
		_, v1, err := m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "villa", Issuer: issuer,
			Policy: rotation.Policy{RotationPeriod: rotation.Duration(time.Second), Prepublish: rotation.Duration(pre)}}, alice)
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			m.RunScheduler(runCtx, 50*time.Millisecond)
		}()
		// The signing path reads the Keyring throughout: it always has a signer.
		var nilSigner atomic.Int64
		readerDone := make(chan struct{})
		go func() {
			defer close(readerDone)
			for runCtx.Err() == nil {
				if m.Keyring().Keys["villa"].SignerAt(store.Now()) == nil {
					nilSigner.Add(1)
				}
				time.Sleep(time.Millisecond)
			}
		}()
		time.Sleep(3500 * time.Millisecond)
		cancel()
		<-done
		<-readerDone
		if n := nilSigner.Load(); n != 0 {
			t.Errorf("the Keyring had no signer %d times", n)
		}

		vs := checkLifecycle(t, s, "villa")
		var activated []store.KeyVersion
		for _, v := range vs {
			if v.ActivatedAt != nil {
				activated = append(activated, v)
			}
		}
		if activated[0].KID != v1.KID {
			t.Fatalf("first activated %s, want %s", activated[0].KID, v1.KID)
		}
		if n := len(activated) - 1; n < 3 {
			t.Fatalf("%d scheduled activations in 3.5 s, want at least 3", n)
		}
		for i, v := range activated {
			if i == 0 {
				continue
			}
			if v.ActivatesAt == nil || !v.ActivatedAt.Equal(*v.ActivatesAt) {
				t.Errorf("%s activated %s, scheduled for %s", v.KID, fmtT(v.ActivatedAt), fmtT(v.ActivatesAt))
			}
			if got := v.ActivatedAt.Sub(*v.PublishedAt); got < pre {
				t.Errorf("%s published only %s before it activated, want at least %s", v.KID, got, pre)
			}
			prev := activated[i-1]
			if !eqTime(prev.RetiredAt, v.ActivatedAt) {
				t.Errorf("gap: %s retired %s, %s activated %s", prev.KID, fmtT(prev.RetiredAt), v.KID, fmtT(v.ActivatedAt))
			}
			if got := v.ActivatedAt.Sub(*prev.ActivatedAt); got < time.Second {
				t.Errorf("%s was active %s, less than the rotation period", prev.KID, got)
			}
		}
		rows := auditRows(t, s)
		if n := countAudit(rows, "version.activate", ""); n != len(activated) {
			t.Errorf("%d version.activate rows for %d activations", n, len(activated))
		}
		for _, r := range rows {
			if r.Action == "version.prepublish" && r.Actor != "keysvc-scheduler" {
				t.Errorf("prepublish by %q", r.Actor)
			}
		}
		t.Logf("%s: %d scheduled activations", s.Kind(), len(activated)-1)
	})
}
