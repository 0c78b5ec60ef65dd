package verifier

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestLifecycle pins the lifecycle-aware outcome (VRP K2–K4, K6) of a
// signature by each version of the fixture history, at claimed signing
// times inside and outside each version's window.
func TestLifecycle(t *testing.T) {
	f := newLCFixture(t)
	sig := func(k edKey) string { return k.sign(`{"offer_id":"o1"}`) }
	cases := []struct {
		name string
		k    edKey
		from string
		want string // code, "" = verified
	}{
		{"retired inside window", f.retired, "2026-05-15T10:00:00Z", ""},
		{"retired at not_before", f.retired, retiredNotBefore, ""},
		{"retired at not_after", f.retired, retiredNotAfter, ""},
		{"retired before not_before", f.retired, "2026-03-31T23:59:59Z", CodeKeyRetiredOutOfWindow},
		{"retired after not_after", f.retired, "2026-06-01T00:00:01Z", CodeKeyRetiredOutOfWindow},
		{"retired years later", f.retired, "2029-01-01T00:00:00Z", CodeKeyRetiredOutOfWindow},
		{"active inside", f.active, "2026-06-24T11:00:00Z", ""},
		{"active at not_before", f.active, activeNotBefore, ""},
		{"active long after", f.active, "2031-06-24T11:00:00Z", ""},
		{"active before not_before", f.active, "2026-05-31T23:59:59Z", CodeKeyRetiredOutOfWindow},
		{"pending before its scheduled start", f.pending, "2026-06-24T11:00:00Z", CodeKeyRetiredOutOfWindow},
		{"pending after its scheduled start", f.pending, "2026-07-02T11:00:00Z", CodeKeyRetiredOutOfWindow},
		{"revoked without tlog", f.revoked, "2026-03-10T10:00:00Z", CodeTlogRequired},
		{"revoked without tlog after the compromise", f.revoked, "2026-03-25T10:00:00Z", CodeTlogRequired},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := verifyFresh(t, attAt(t, "offer", sig(c.k), c.from), f.opts())
			if c.want == "" {
				checkAtt(t, got, want(0, "offer", StatusVerified, "", c.k.kid))
			} else {
				checkAtt(t, got, want(0, "offer", StatusInvalid, c.want, c.k.kid))
			}
		})
	}
}

// TestLifecycleRevokedTlog pins K4: a revoked version's signature is
// acceptable only with a transparency-log proof that shows it predates the
// compromise; every defect of the proof is key_revoked.
func TestLifecycleRevokedTlog(t *testing.T) {
	f := newLCFixture(t)
	sig := f.revoked.sign(`{"offer_id":"o1"}`)
	const signedAt = "2026-03-10T10:00:00Z"
	spec := tlogSpec{logKey: f.log, logID: testLogID, signature: sig, index: 5, size: 8,
		loggedAt: "2026-03-10T10:00:01Z", sthAt: "2026-03-10T10:05:00Z"}
	build := func(mod func(*tlogSpec)) map[string]any {
		s := spec
		if mod != nil {
			mod(&s)
		}
		tl, _ := buildTlog(t, s)
		return tl
	}
	other := f.revoked.sign(`{"offer_id":"o2"}`)

	cases := []struct {
		name string
		tlog any // nil: no tlog member
		from string
		opts func(Options) Options
		want string // "" = verified
	}{
		{"valid proof, STH before compromise", build(nil), signedAt, nil, ""},
		{"STH 1 ms before compromise", build(func(s *tlogSpec) { s.sthAt = "2026-03-19T23:59:59.999Z" }), signedAt, nil, ""},
		{"STH at compromise", build(func(s *tlogSpec) { s.sthAt = compromisedAt }), signedAt, nil, CodeKeyRevoked},
		{"STH after compromise", build(func(s *tlogSpec) { s.sthAt = "2026-03-21T00:00:00Z" }), signedAt, nil, CodeKeyRevoked},
		{"claimed time before the version's window", build(nil), "2026-02-28T23:59:59Z", nil, CodeKeyRevoked},
		{"claimed time after the version's window", build(nil), "2026-04-01T00:00:01Z", nil, CodeKeyRevoked},
		{"tampered inclusion proof", func() any {
			tl := build(nil)
			p := tl["inclusion_proof"].([]any)
			b, _ := decodeSegment(p[1].(string))
			b[0] ^= 1
			p[1] = b64u(b)
			return tl
		}(), signedAt, nil, CodeKeyRevoked},
		{"proof with a hash too many", func() any {
			tl := build(nil)
			tl["inclusion_proof"] = append(tl["inclusion_proof"].([]any), b64u(make([]byte, 32)))
			return tl
		}(), signedAt, nil, CodeKeyRevoked},
		{"proof with a short hash", func() any {
			tl := build(nil)
			tl["inclusion_proof"].([]any)[0] = b64u(make([]byte, 31))
			return tl
		}(), signedAt, nil, CodeKeyRevoked},
		{"wrong leaf index", func() any { tl := build(nil); tl["leaf_index"] = 4; return tl }(), signedAt, nil, CodeKeyRevoked},
		{"leaf index beyond tree", func() any { tl := build(nil); tl["leaf_index"] = 8; return tl }(), signedAt, nil, CodeKeyRevoked},
		{"leaf index negative", func() any { tl := build(nil); tl["leaf_index"] = -1; return tl }(), signedAt, nil, CodeKeyRevoked},
		{"leaf index fractional", func() any { tl := build(nil); tl["leaf_index"] = json.Number("5.0"); return tl }(), signedAt, nil, CodeKeyRevoked},
		{"artifact_hash of a different JWS", build(func(s *tlogSpec) { s.signature = other }), signedAt, nil, CodeKeyRevoked},
		{"artifact_hash upper-case hex", func() any {
			tl := build(nil)
			leaf := tl["leaf"].(map[string]any)
			leaf["artifact_hash"] = "sha256:" + strings.ToUpper(strings.TrimPrefix(leaf["artifact_hash"].(string), "sha256:"))
			return tl
		}(), signedAt, nil, CodeKeyRevoked},
		{"leaf with an extra member", func() any {
			tl := build(nil)
			tl["leaf"].(map[string]any)["kid"] = f.revoked.kid
			return tl
		}(), signedAt, nil, CodeKeyRevoked},
		{"leaf_version other", func() any { tl := build(nil); tl["leaf"].(map[string]any)["leaf_version"] = "vrp-tlog-v0.2"; return tl }(), signedAt, nil, CodeKeyRevoked},
		{"logged_at after STH", build(func(s *tlogSpec) { s.loggedAt = "2026-03-10T10:05:01Z" }), signedAt, nil, CodeKeyRevoked},
		{"STH signed by an untrusted key", build(func(s *tlogSpec) { s.logKey = f.rogueLog }), signedAt, nil, CodeKeyRevoked},
		{"STH signed by the revoked node key", build(func(s *tlogSpec) { s.logKey = f.revoked }), signedAt, nil, CodeKeyRevoked},
		{"node key listed as a log key", build(func(s *tlogSpec) { s.logKey = f.revoked }), signedAt,
			func(o Options) Options { o.LogKeys = jwksOf(t, f.log.jwk, f.revoked.jwk); return o }, CodeKeyRevoked},
		{"no LogKeys configured", build(nil), signedAt, func(o Options) Options { o.LogKeys = nil; return o }, CodeKeyRevoked},
		{"wrong log_id", func() any { tl := build(nil); tl["log_id"] = "did:web:other-log.example"; return tl }(), signedAt, nil, CodeKeyRevoked},
		{"STH log_id differs from tlog", func() any {
			tl := build(func(s *tlogSpec) { s.logID = "did:web:other-log.example" })
			tl["log_id"] = testLogID
			return tl
		}(), signedAt, nil, CodeKeyRevoked},
		{"tree_size differs from STH", func() any { tl := build(nil); tl["tree_size"] = 9; return tl }(), signedAt, nil, CodeKeyRevoked},
		{"STH tampered", func() any {
			tl := build(nil)
			p := strings.Split(tl["sth"].(string), ".")
			tl["sth"] = p[0] + "." + b64u([]byte(`{"log_id":"did:web:log.example","root_hash":"AAAA","timestamp":"2026-03-10T10:05:00Z","tree_size":8}`)) + "." + p[2]
			return tl
		}(), signedAt, nil, CodeKeyRevoked},
		{"tlog not an object", "proof", signedAt, nil, CodeKeyRevoked},
		{"tlog empty object", map[string]any{}, signedAt, nil, CodeKeyRevoked},
		{"tlog null", json.RawMessage(`null`), signedAt, nil, CodeTlogRequired},
		{"no tlog", nil, signedAt, nil, CodeTlogRequired},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := attAt(t, "transport", sig, c.from)
			if c.tlog != nil {
				a["tlog"] = c.tlog
			}
			opts := f.opts()
			if c.opts != nil {
				opts = c.opts(opts)
			}
			got := verifyFresh(t, a, opts)
			if c.want == "" {
				checkAtt(t, got, want(0, "transport", StatusVerified, "", f.revoked.kid))
			} else {
				checkAtt(t, got, want(0, "transport", StatusInvalid, c.want, f.revoked.kid))
			}
		})
	}

	// A tlog on a signature of a usable (active) version is not needed and
	// not checked (D3), even when it is bogus.
	a := attAt(t, "offer", f.active.sign(`{}`), "2026-06-24T11:00:00Z")
	a["tlog"] = "bogus"
	checkAtt(t, verifyFresh(t, a, f.opts()), want(0, "offer", StatusVerified, "", f.active.kid))
}

// TestLifecycleMerkleTrees checks the inclusion proof of every leaf of trees
// of several sizes end to end, with roots and audit paths from the test's
// own RFC 6962 §2.1 implementation, cross-checked with VerifyTlog.
func TestLifecycleMerkleTrees(t *testing.T) {
	f := newLCFixture(t)
	sig := f.revoked.sign(`{"offer_id":"tree"}`)
	for _, size := range []int{1, 2, 3, 7, 8} {
		for index := 0; index < size; index++ {
			tl, root := buildTlog(t, tlogSpec{logKey: f.log, logID: testLogID, signature: sig, index: index, size: size,
				loggedAt: "2026-03-10T10:00:01Z", sthAt: "2026-03-10T10:05:00Z"})
			raw, err := json.Marshal(tl)
			if err != nil {
				t.Fatal(err)
			}
			anchor, err := VerifyTlog(raw, sig, f.logKeys)
			if err != nil {
				t.Fatalf("size %d index %d: %v", size, index, err)
			}
			wantAnchor := &TlogAnchor{LogID: testLogID, LeafIndex: uint64(index), TreeSize: uint64(size), RootHash: root,
				Timestamp: mustTime(t, "2026-03-10T10:05:00Z"), LoggedAt: mustTime(t, "2026-03-10T10:00:01Z"), LogKeyID: f.log.kid}
			if !reflect.DeepEqual(anchor, wantAnchor) {
				t.Errorf("size %d index %d: anchor %+v, want %+v", size, index, anchor, wantAnchor)
			}
			a := attAt(t, "offer", sig, "2026-03-10T10:00:00Z")
			a["tlog"] = tl
			checkAtt(t, verifyFresh(t, a, f.opts()), want(0, "offer", StatusVerified, "", f.revoked.kid))

			// The same proof claimed for every other index fails.
			for wrong := 0; wrong < size; wrong++ {
				if wrong == index {
					continue
				}
				tl["leaf_index"] = wrong
				raw, _ := json.Marshal(tl)
				if _, err := VerifyTlog(raw, sig, f.logKeys); !errors.Is(err, ErrTlog) {
					t.Errorf("size %d: proof of %d verified as %d", size, index, wrong)
				}
			}
		}
	}
	// Known shapes: a one-leaf tree's root is the leaf hash, with an empty
	// path; a two-leaf tree's root joins the two leaf hashes.
	l0, l1 := leafJSON("a", "2026-03-10T10:00:01Z"), leafJSON("b", "2026-03-10T10:00:01Z")
	if string(mth([][]byte{l0})) != string(leafHash(l0)) || len(auditPath(0, [][]byte{l0})) != 0 ||
		string(mth([][]byte{l0, l1})) != string(nodeHash(leafHash(l0), leafHash(l1))) {
		t.Error("test Merkle implementation disagrees with RFC 6962 §2.1 on small trees")
	}
}

// TestLifecycleOrder pins the order signature → lifecycle → freshness.
func TestLifecycleOrder(t *testing.T) {
	f := newLCFixture(t)
	a := attAt(t, "offer", f.retired.sign(`{}`), "2026-06-02T00:00:00Z") // after the retired window
	opts := f.opts()
	opts.Now = mustTime(t, "2027-01-01T00:00:00Z") // and long expired
	checkAtt(t, verifyOne(t, receiptOf(t, a), opts), want(0, "offer", StatusInvalid, CodeKeyRetiredOutOfWindow, f.retired.kid))

	in := attAt(t, "offer", f.retired.sign(`{}`), "2026-05-02T00:00:00Z")
	checkAtt(t, verifyOne(t, receiptOf(t, in), opts), want(0, "offer", StatusExpired, CodeSigExpired, f.retired.kid))
	opts.Now = mustTime(t, "2026-05-01T00:00:00Z")
	checkAtt(t, verifyOne(t, receiptOf(t, in), opts), want(0, "offer", StatusExpired, CodeNotYetValid, f.retired.kid))

	// A bad signature is sig_invalid whatever the lifecycle says.
	forged := attAt(t, "offer", newEdKey(t, f.pending.kid).sign(`{}`), "2026-06-24T11:00:00Z")
	checkAtt(t, verifyFresh(t, forged, f.opts()), want(0, "offer", StatusInvalid, CodeSigInvalid, ""))
	// A bad window is missing_validity_window before anything else.
	bad := attAt(t, "offer", f.pending.sign(`{}`), "2026-06-24T11:00:00Z")
	bad["valid_from"] = "yesterday"
	checkAtt(t, verifyOne(t, receiptOf(t, bad), f.opts()), want(0, "offer", StatusInvalid, CodeMissingValidityWindow, ""))
}

// TestLifecyclePlainJWKSFailsClosed: keysvc's /.well-known/jwks.json leaves
// revoked versions out, so a lifecycle-unaware verification of a revoked
// version's signature fails closed (sig_invalid), tlog or not.
func TestLifecyclePlainJWKSFailsClosed(t *testing.T) {
	f := newLCFixture(t)
	plain := jwksOf(t,
		entry(f.pending, KeyStatusPending, "vrp_not_before", pendingNotBefore),
		entry(f.active, KeyStatusActive, "vrp_not_before", activeNotBefore),
		entry(f.retired, KeyStatusRetired, "vrp_not_before", retiredNotBefore, "vrp_not_after", retiredNotAfter))
	sig := f.revoked.sign(`{}`)
	a := attAt(t, "offer", sig, "2026-03-10T10:00:00Z")
	tl, _ := buildTlog(t, tlogSpec{logKey: f.log, logID: testLogID, signature: sig, index: 0, size: 1,
		loggedAt: "2026-03-10T10:00:01Z", sthAt: "2026-03-10T10:05:00Z"})
	a["tlog"] = tl
	checkAtt(t, verifyFresh(t, a, Options{Resolve: StaticJWKS(plain), LogKeys: f.logKeys}), want(0, "offer", StatusInvalid, CodeSigInvalid, ""))
	// Without History the lifecycle is not applied at all (v1): a retired
	// version's signature outside its window verifies.
	late := attAt(t, "offer", f.retired.sign(`{}`), "2027-01-01T00:00:00Z")
	checkAtt(t, verifyFresh(t, late, Options{Resolve: StaticJWKS(plain)}), want(0, "offer", StatusVerified, "", f.retired.kid))
}

// TestLifecycleUnusableVersions: entries whose lifecycle members do not
// parse or do not fit their status never verify (sig_invalid); a revoked
// entry always fails as key_revoked.
func TestLifecycleUnusableVersions(t *testing.T) {
	k := seededEdKey("ex.test-2026-05-01-01", 9)
	const from = "2026-05-15T10:00:00Z"
	cases := []struct {
		name  string
		entry map[string]any
		want  string
	}{
		{"retired without not_after", entry(k, KeyStatusRetired, "vrp_not_before", retiredNotBefore), CodeSigInvalid},
		{"retired without not_before", entry(k, KeyStatusRetired, "vrp_not_after", retiredNotAfter), CodeSigInvalid},
		{"active without not_before", entry(k, KeyStatusActive), CodeSigInvalid},
		{"unknown status", entry(k, "suspended", "vrp_not_before", retiredNotBefore), CodeSigInvalid},
		{"status upper case", entry(k, "ACTIVE", "vrp_not_before", retiredNotBefore), CodeSigInvalid},
		{"status missing", func() map[string]any {
			e := entry(k, KeyStatusActive, "vrp_not_before", retiredNotBefore)
			delete(e, "vrp_key_status")
			return e
		}(), CodeSigInvalid},
		{"unparseable not_before", entry(k, KeyStatusActive, "vrp_not_before", "2026-04-01"), CodeSigInvalid},
		{"unparseable not_after", entry(k, KeyStatusRetired, "vrp_not_before", retiredNotBefore, "vrp_not_after", "soon"), CodeSigInvalid},
		{"instant not a string", func() map[string]any {
			e := entry(k, KeyStatusActive)
			e["vrp_not_before"] = 1774569600
			return e
		}(), CodeSigInvalid},
		{"pending with bad instant", entry(k, KeyStatusPending, "vrp_not_before", "next week"), CodeSigInvalid},
		{"revoked without compromised_at", entry(k, KeyStatusRevoked, "vrp_not_before", retiredNotBefore), CodeKeyRevoked},
		{"revoked with unparseable compromised_at", entry(k, KeyStatusRevoked, "vrp_compromised_at", "2026-04-20 00:00"), CodeKeyRevoked},
		{"revoked with unparseable not_after", entry(k, KeyStatusRevoked, "vrp_compromised_at", compromisedAt, "vrp_not_after", "x"), CodeKeyRevoked},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, h := historyOf(t, c.entry)
			got := verifyFresh(t, attAt(t, "offer", k.sign(`{}`), from), Options{History: h})
			if c.want == CodeSigInvalid {
				if len(h.Versions) != 0 || len(h.Skipped) != 1 || !errors.Is(h.Skipped[0], ErrKeyVersion) {
					t.Errorf("versions %d, skipped %v; want the entry skipped with ErrKeyVersion", len(h.Versions), h.Skipped)
				}
				checkAtt(t, got, want(0, "offer", StatusInvalid, CodeSigInvalid, ""))
			} else {
				checkAtt(t, got, want(0, "offer", StatusInvalid, c.want, k.kid))
			}
		})
	}
}

func TestLifecycleKeySelection(t *testing.T) {
	f := newLCFixture(t)
	const from = "2026-06-24T11:00:00Z"

	// K1: a kid on two entries makes both unusable.
	twin := seededEdKey(f.active.kid, 10)
	_, dup := historyOf(t,
		entry(f.active, KeyStatusActive, "vrp_not_before", activeNotBefore),
		entry(twin, KeyStatusRevoked, "vrp_compromised_at", compromisedAt))
	if len(dup.Versions) != 0 || len(dup.Skipped) != 2 {
		t.Errorf("duplicate kid: versions %d, skipped %v", len(dup.Versions), dup.Skipped)
	}
	checkAtt(t, verifyFresh(t, attAt(t, "offer", f.active.sign(`{}`), from), Options{History: dup}), want(0, "offer", StatusInvalid, CodeSigInvalid, ""))

	// With History every signature must name its version.
	noKid := f.active.signRaw(`{"alg":"EdDSA"}`, `{}`)
	checkAtt(t, verifyFresh(t, attAt(t, "offer", noKid, from), f.opts()), want(0, "offer", StatusInvalid, CodeSigInvalid, ""))

	// History replaces Resolve, which is never called.
	opts := f.opts()
	opts.Resolve = func(context.Context, string, map[string]any) (*JWKS, error) {
		t.Error("resolver called with History set")
		return nil, errors.New("no")
	}
	checkAtt(t, verifyFresh(t, attAt(t, "offer", f.active.sign(`{}`), from), opts), want(0, "offer", StatusVerified, "", f.active.kid))

	// A signature by a key absent from the history.
	checkAtt(t, verifyFresh(t, attAt(t, "offer", newEdKey(t, "ex.test-2026-06-02-01").sign(`{}`), from), f.opts()),
		want(0, "offer", StatusInvalid, CodeSigInvalid, ""))

	// An empty history verifies nothing.
	checkAtt(t, verifyFresh(t, attAt(t, "offer", f.active.sign(`{}`), from), Options{History: &KeyHistory{}}),
		want(0, "offer", StatusInvalid, CodeSigInvalid, ""))

	// A hand-built history is held to the same rules as a parsed one.
	nb := mustTime(t, retiredNotBefore)
	hand := &KeyHistory{Versions: []*KeyVersion{{JWK: f.history.Versions[1].JWK, Status: KeyStatusRetired, NotBefore: &nb}}}
	checkAtt(t, verifyFresh(t, attAt(t, "offer", f.retired.sign(`{}`), "2026-05-15T10:00:00Z"), Options{History: hand}),
		want(0, "offer", StatusInvalid, CodeSigInvalid, ""))
}

// TestLifecycleSubSecondBounds: lifecycle bounds are compared exactly; the
// only rounding is the one a whole-second valid_from forces on a
// sub-second not_before (rounded down). not_after is never rounded up
// (ADR 0014: the old rounding hid signatures made up to a second after
// retirement).
func TestLifecycleSubSecondBounds(t *testing.T) {
	oldK := seededEdKey("ex.test-2026-05-01-01", 11)
	newK := seededEdKey("ex.test-2026-06-01-02", 12)
	const rotation = "2026-06-01T10:00:00.500123Z"
	_, h := historyOf(t,
		entry(oldK, KeyStatusRetired, "vrp_not_before", "2026-05-01T00:00:00Z", "vrp_not_after", rotation),
		entry(newK, KeyStatusActive, "vrp_not_before", rotation))
	opts := Options{History: h}
	for _, c := range []struct {
		name string
		k    edKey
		from string
		want string
	}{
		{"new key, whole second of the rotation", newK, "2026-06-01T10:00:00Z", ""},
		{"new key, sub-second claim before the rotation", newK, "2026-06-01T10:00:00.4Z", CodeKeyRetiredOutOfWindow},
		{"new key, at the rotation", newK, "2026-06-01T10:00:00.500123Z", ""},
		{"new key, second before", newK, "2026-06-01T09:59:59.999Z", CodeKeyRetiredOutOfWindow},
		{"old key, whole second of the rotation", oldK, "2026-06-01T10:00:00Z", ""},
		{"old key, before the rotation", oldK, "2026-06-01T10:00:00.5Z", ""},
		{"old key, at the rotation", oldK, "2026-06-01T10:00:00.500123Z", ""},
		{"old key, after the rotation, same second", oldK, "2026-06-01T10:00:00.9Z", CodeKeyRetiredOutOfWindow},
		{"old key, end of that second", oldK, "2026-06-01T10:00:01Z", CodeKeyRetiredOutOfWindow},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := verifyFresh(t, attAt(t, "offer", c.k.sign(`{}`), c.from), opts)
			if c.want == "" {
				checkAtt(t, got, want(0, "offer", StatusVerified, "", c.k.kid))
			} else {
				checkAtt(t, got, want(0, "offer", StatusInvalid, c.want, c.k.kid))
			}
		})
	}
}

// TestLifecycleMixedReceipt: one receipt, one attestation per version.
func TestLifecycleMixedReceipt(t *testing.T) {
	f := newLCFixture(t)
	revSig := f.revoked.sign(`{"n":1}`)
	anchored := attAt(t, "transport", revSig, "2026-03-10T10:00:00Z")
	anchored["tlog"], _ = buildTlog(t, tlogSpec{logKey: f.log, logID: testLogID, signature: revSig, index: 2, size: 3,
		loggedAt: "2026-03-10T10:00:00Z", sthAt: "2026-03-10T10:00:00Z"})
	atts := []map[string]any{
		attAt(t, "offer", f.active.sign(`{"n":0}`), "2026-06-24T11:00:00Z"),
		anchored,
		attAt(t, "offer", f.revoked.sign(`{"n":2}`), "2026-03-10T10:00:00Z"),
		attAt(t, "offer", f.retired.sign(`{"n":3}`), "2026-05-10T10:00:00Z"),
		attAt(t, "offer", f.pending.sign(`{"n":4}`), "2026-06-24T11:00:00Z"),
		att("payment", ""),
	}
	for _, a := range atts {
		a["valid_until"] = "2026-06-24T13:00:00Z"
	}
	opts := f.opts()
	opts.Now = testNow
	res := VerifyReceipt(context.Background(), receiptOf(t, atts...), opts)
	wantRes := Result{ReceiptValid: true, Errors: []string{}, Attestations: []AttestationResult{
		want(0, "offer", StatusVerified, "", f.active.kid),
		want(1, "transport", StatusVerified, "", f.revoked.kid),
		want(2, "offer", StatusInvalid, CodeTlogRequired, f.revoked.kid),
		want(3, "offer", StatusVerified, "", f.retired.kid),
		want(4, "offer", StatusInvalid, CodeKeyRetiredOutOfWindow, f.pending.kid),
		want(5, "payment", StatusUnverifiable, CodeLayerUnverifiable, ""),
	}}
	if !reflect.DeepEqual(res, wantRes) {
		g, _ := json.Marshal(res)
		w, _ := json.Marshal(wantRes)
		t.Errorf("got  %s\nwant %s", g, w)
	}
	checkConsistent(t, nil, res, true)
}

func TestParseKeyHistory(t *testing.T) {
	f := newLCFixture(t)
	v := f.history.Versions
	if f.history.Issuer != "ex.test" || f.history.Key != "main" ||
		v[0].Status != KeyStatusRevoked || v[0].CompromisedAt == nil || !v[0].CompromisedAt.Equal(mustTime(t, compromisedAt)) ||
		v[0].RevocationReason != "key_compromise" || v[0].Backend != "software" || v[0].Defect != nil ||
		v[1].Status != KeyStatusRetired || !v[1].NotAfter.Equal(mustTime(t, retiredNotAfter)) ||
		v[2].Status != KeyStatusActive || v[2].NotAfter != nil || v[2].JWK.KeyID != f.active.kid ||
		v[3].Status != KeyStatusPending {
		t.Errorf("parsed history: %+v", f.history)
	}

	doc, _ := json.Marshal(map[string]any{"keys": []any{
		entry(f.active, KeyStatusActive, "vrp_not_before", activeNotBefore),
		map[string]any{"kty": "RSA", "kid": "rsa", "n": "AQAB", "e": "AQAB", "vrp_key_status": "active"},
		entry(f.retired, "expired"),
		"not a key",
	}})
	h, err := ParseKeyHistory(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Versions) != 1 || len(h.Skipped) != 3 || !errors.Is(h.Skipped[0], ErrUnsupportedKey) || !errors.Is(h.Skipped[1], ErrKeyVersion) {
		t.Errorf("versions %d, skipped %v", len(h.Versions), h.Skipped)
	}
	// keysvc's shape since issue 15 (ADR 0027): revoked versions under
	// vrp_revoked_keys, where an entry counts only as revoked.
	doc, _ = json.Marshal(map[string]any{"issuer": "ex.test", "keys": []any{
		entry(f.active, KeyStatusActive, "vrp_not_before", activeNotBefore),
	}, "vrp_revoked_keys": []any{
		entry(f.revoked, KeyStatusRevoked, "vrp_not_before", revokedNotBefore, "vrp_not_after", revokedNotAfter, "vrp_compromised_at", compromisedAt),
		entry(f.retired, KeyStatusRetired, "vrp_not_before", retiredNotBefore, "vrp_not_after", retiredNotAfter),
	}})
	h, err = ParseKeyHistory(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Versions) != 2 || h.Versions[0].JWK.KeyID != f.active.kid || h.Versions[1].JWK.KeyID != f.revoked.kid ||
		h.Versions[1].Status != KeyStatusRevoked || !h.Versions[1].CompromisedAt.Equal(mustTime(t, compromisedAt)) ||
		len(h.Skipped) != 1 || !errors.Is(h.Skipped[0], ErrKeyVersion) || !strings.Contains(h.Skipped[0].Error(), "vrp_revoked_keys") {
		t.Errorf("history with vrp_revoked_keys: versions %+v, skipped %v", h.Versions, h.Skipped)
	}
	for _, bad := range []string{``, `[]`, `{}`, `{"keys":{}}`, `{"keys":[],"keys":[]}`, `{"keys":[]} x`, `{"keys":[],"vrp_revoked_keys":{}}`,
		`{"issuer":5,"keys":[]}`, `{"key":["a"],"keys":[]}`, `{"keys":[` + strings.Repeat(" ", MaxJWKSBytes) + `]}`} {
		if _, err := ParseKeyHistory([]byte(bad)); err == nil {
			t.Errorf("ParseKeyHistory(%.40q) succeeded", bad)
		}
	}
}

func TestVerifyTlogErrors(t *testing.T) {
	f := newLCFixture(t)
	sig := f.revoked.sign(`{}`)
	tl, _ := buildTlog(t, tlogSpec{logKey: f.log, logID: testLogID, signature: sig, index: 1, size: 2,
		loggedAt: "2026-03-10T10:00:00Z", sthAt: "2026-03-10T10:00:00Z"})
	good, _ := json.Marshal(tl)
	if _, err := VerifyTlog(good, sig, f.logKeys); err != nil {
		t.Fatal(err)
	}
	mod := func(change func(m map[string]any)) []byte {
		m := map[string]any{}
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		change(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	longProof := mod(func(m map[string]any) {
		p := m["inclusion_proof"].([]any)
		for len(p) <= MaxInclusionProofHashes {
			p = append(p, b64u(make([]byte, 32)))
		}
		m["inclusion_proof"] = p
	})
	paddedProof := mod(func(m map[string]any) {
		p := m["inclusion_proof"].([]any)
		p[0] = p[0].(string) + "="
	})
	// An ES256 log key never verifies an STH.
	ec := newECKey(t, f.log.kid)
	for name, c := range map[string]struct {
		tlog []byte
		sig  string
		keys *JWKS
	}{
		"not JSON":             {[]byte(`{`), sig, f.logKeys},
		"duplicate member":     {[]byte(`{"log_id":"a","log_id":"b"}`), sig, f.logKeys},
		"array":                {[]byte(`[]`), sig, f.logKeys},
		"other signature":      {good, sig + "x", f.logKeys},
		"nil keys":             {good, sig, nil},
		"only an ES256 key":    {good, sig, jwksOf(t, ec.jwk)},
		"proof too long":       {longProof, sig, f.logKeys},
		"proof not an array":   {mod(func(m map[string]any) { m["inclusion_proof"] = "AAAA" }), sig, f.logKeys},
		"proof hash padded":    {paddedProof, sig, f.logKeys},
		"tree_size 0":          {mod(func(m map[string]any) { m["tree_size"], m["leaf_index"] = 0, 0 }), sig, f.logKeys},
		"tree_size over 2^64":  {mod(func(m map[string]any) { m["tree_size"] = json.Number("18446744073709551616") }), sig, f.logKeys},
		"tree_size as string":  {mod(func(m map[string]any) { m["tree_size"] = "2" }), sig, f.logKeys},
		"tree_size exponent":   {mod(func(m map[string]any) { m["tree_size"] = json.Number("2e0") }), sig, f.logKeys},
		"log_id empty":         {mod(func(m map[string]any) { m["log_id"] = "" }), sig, f.logKeys},
		"log_id missing":       {mod(func(m map[string]any) { delete(m, "log_id") }), sig, f.logKeys},
		"sth not a string":     {mod(func(m map[string]any) { m["sth"] = 5 }), sig, f.logKeys},
		"sth missing":          {mod(func(m map[string]any) { delete(m, "sth") }), sig, f.logKeys},
		"leaf missing":         {mod(func(m map[string]any) { delete(m, "leaf") }), sig, f.logKeys},
		"leaf logged_at blank": {mod(func(m map[string]any) { m["leaf"].(map[string]any)["logged_at"] = "" }), sig, f.logKeys},
		"leaf type other":      {mod(func(m map[string]any) { m["leaf"].(map[string]any)["artifact_type"] = "vrp_offer" }), sig, f.logKeys},
	} {
		if _, err := VerifyTlog(c.tlog, c.sig, c.keys); !errors.Is(err, ErrTlog) {
			t.Errorf("%s: err = %v, want ErrTlog", name, err)
		}
	}

	// STH payload checks, each with a validly signed STH.
	root := mth([][]byte{leafJSON("other.jws.0", "2026-03-10T10:00:00Z"), leafJSON(sig, "2026-03-10T10:00:00Z")})
	for name, payload := range map[string]string{
		"root_hash short":      `{"log_id":"` + testLogID + `","root_hash":"` + b64u(root[:31]) + `","timestamp":"2026-03-10T10:00:00Z","tree_size":2}`,
		"timestamp not 3339":   `{"log_id":"` + testLogID + `","root_hash":"` + b64u(root) + `","timestamp":"1773136800","tree_size":2}`,
		"tree_size missing":    `{"log_id":"` + testLogID + `","root_hash":"` + b64u(root) + `","timestamp":"2026-03-10T10:00:00Z"}`,
		"log_id missing":       `{"root_hash":"` + b64u(root) + `","timestamp":"2026-03-10T10:00:00Z","tree_size":2}`,
		"duplicate member":     `{"log_id":"` + testLogID + `","log_id":"` + testLogID + `","root_hash":"` + b64u(root) + `","timestamp":"2026-03-10T10:00:00Z","tree_size":2}`,
		"tree_size fractional": `{"log_id":"` + testLogID + `","root_hash":"` + b64u(root) + `","timestamp":"2026-03-10T10:00:00Z","tree_size":2.0}`,
	} {
		m := map[string]any{}
		_ = json.Unmarshal(good, &m)
		m["sth"] = f.log.signRaw(`{"alg":"EdDSA","kid":"`+f.log.kid+`"}`, payload)
		raw, _ := json.Marshal(m)
		if _, err := VerifyTlog(raw, sig, f.logKeys); !errors.Is(err, ErrTlog) {
			t.Errorf("%s: err = %v, want ErrTlog", name, err)
		}
	}
	// The same STH payload verifies when well formed, extra members ignored;
	// an STH header without kid does not.
	okPayload := `{"log_id":"` + testLogID + `","root_hash":"` + b64u(root) + `","timestamp":"2026-03-10T10:00:00Z","tree_size":2,"x":1}`
	for name, c := range map[string]struct {
		header string
		ok     bool
	}{
		"with kid":    {`{"alg":"EdDSA","kid":"` + f.log.kid + `"}`, true},
		"without kid": {`{"alg":"EdDSA"}`, false},
	} {
		m := map[string]any{}
		_ = json.Unmarshal(good, &m)
		m["sth"] = f.log.signRaw(c.header, okPayload)
		raw, _ := json.Marshal(m)
		if _, err := VerifyTlog(raw, sig, f.logKeys); (err == nil) != c.ok {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

// TestLifecycleZeroNow: freshness under History still defaults to now.
func TestLifecycleZeroNow(t *testing.T) {
	f := newLCFixture(t)
	now := time.Now().UTC()
	a := att("offer", f.active.sign(`{}`))
	a["valid_from"] = now.Add(-time.Hour).Format(time.RFC3339)
	a["valid_until"] = now.Add(time.Hour).Format(time.RFC3339)
	checkAtt(t, verifyOne(t, receiptOf(t, a), f.opts()), want(0, "offer", StatusVerified, "", f.active.kid))
}
