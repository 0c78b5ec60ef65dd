package verifier

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// checkConsistent fails t unless res is an internally consistent Result:
// envelope failures carry one envelope code and nothing else; valid
// receipts carry no envelope code, dense indices, status/error/kid
// combinations the rules can produce, and fully_verified exactly when
// every attestation is verified. lifecycle says whether the verification
// had a History: only then may the lifecycle codes (K6) appear, always
// with the kid of the signature that verified.
func checkConsistent(t testing.TB, input []byte, res Result, lifecycle bool) {
	t.Helper()
	fail := func(why string) {
		t.Helper()
		out, _ := json.Marshal(res)
		t.Fatalf("%s\ninput  %.300q\nresult %s", why, input, out)
	}
	if _, err := json.Marshal(res); err != nil {
		fail("result does not marshal: " + err.Error())
	}
	if !res.ReceiptValid {
		if res.FullyVerified || len(res.Attestations) != 0 || len(res.Errors) != 1 ||
			(res.Errors[0] != CodeUnsupportedVersion && res.Errors[0] != CodeMalformedReceipt) {
			fail("inconsistent envelope failure")
		}
		return
	}
	if len(res.Errors) != 0 || len(res.Attestations) == 0 {
		fail("valid receipt with errors or without attestations")
	}
	all := true
	for i, a := range res.Attestations {
		if a.Index != i || a.Layer == "" {
			fail("bad index or empty layer")
		}
		code := ""
		if a.Error != nil {
			code = *a.Error
		}
		switch a.Status {
		case StatusVerified:
			if a.Error != nil {
				fail("verified with an error")
			}
		case StatusExpired:
			if code != CodeNotYetValid && code != CodeSigExpired {
				fail("expired with code " + code)
			}
		case StatusInvalid:
			switch code {
			case CodeMissingValidityWindow, CodeSigInvalid:
				if a.KID != nil {
					fail("invalid " + code + " with a kid")
				}
			case CodeKeyRetiredOutOfWindow, CodeKeyRevoked, CodeTlogRequired:
				if !lifecycle || a.KID == nil {
					fail("lifecycle code " + code + " without History or without a kid")
				}
			default:
				fail("invalid with code " + code)
			}
		case StatusUnverifiable:
			if (code != CodeLayerUnverifiable && code != CodeKeyUnresolvable) || a.KID != nil ||
				(lifecycle && code == CodeKeyUnresolvable) {
				fail("unverifiable with code " + code + " or a kid")
			}
		default:
			fail("unknown status " + a.Status)
		}
		if a.KID != nil && *a.KID == "" || lifecycle && a.Status == StatusVerified && a.KID == nil {
			fail("empty kid, or verified by a version without one")
		}
		all = all && a.Status == StatusVerified
	}
	if res.FullyVerified != all {
		fail("fully_verified disagrees with the attestations")
	}
}

// FuzzVerifyReceipt: no input panics, and every result is consistent, in
// the plain v1 verification and in the lifecycle-aware one (History and
// LogKeys of the lifecycle fixture, plus the vectors' key as active).
func FuzzVerifyReceipt(f *testing.F) {
	vectors := loadReceiptVectors(f)
	var set *JWKS
	for _, v := range vectors {
		f.Add([]byte(v.Receipt))
		if set == nil {
			var err error
			if set, err = ParseJWKS(v.JWKS); err != nil {
				f.Fatal(err)
			}
		}
	}
	f.Add([]byte(`{"vrp_receipt_version":"1.0","subject":{},"issuer":{},"attestations":[{"layer":"x","valid_from":"2026-06-24T11:00:00Z","valid_until":"2026-06-24T13:00:00Z","signature":"a.b.c"}]}`))
	f.Add([]byte(`[]`))
	for _, r := range lifecycleSeeds(f) {
		f.Add(r)
	}
	now := time.Date(2026, 6, 24, 12, 0, 0, 0, time.UTC)
	opts := Options{Now: now, Resolve: func(_ context.Context, source string, _ map[string]any) (*JWKS, error) {
		if strings.Contains(source, "unresolvable") {
			return nil, nil
		}
		return set, nil
	}}
	lc := newLCFixture(f)
	vectorKey := map[string]any{}
	if err := json.Unmarshal(set.Keys[0].Raw, &vectorKey); err != nil {
		f.Fatal(err)
	}
	vectorKey["vrp_key_status"], vectorKey["vrp_not_before"] = KeyStatusActive, "2026-01-01T00:00:00Z"
	var hdoc map[string]any
	if err := json.Unmarshal(lc.historyJSON, &hdoc); err != nil {
		f.Fatal(err)
	}
	_, history := historyOf(f, append(toEntries(hdoc["keys"]), vectorKey)...)
	lifecycleOpts := Options{Now: now, History: history, LogKeys: lc.logKeys}
	f.Fuzz(func(t *testing.T, receipt []byte) {
		checkConsistent(t, receipt, VerifyReceipt(context.Background(), receipt, opts), false)
		checkConsistent(t, receipt, VerifyReceipt(context.Background(), receipt, lifecycleOpts), true)
	})
}

func toEntries(v any) []map[string]any {
	var out []map[string]any
	for _, e := range v.([]any) {
		out = append(out, e.(map[string]any))
	}
	return out
}

// lifecycleSeeds are receipts signed by each version of the lifecycle
// fixture (deterministic keys), one with a valid tlog.
func lifecycleSeeds(t testing.TB) [][]byte {
	lc := newLCFixture(t)
	rev := lc.revoked.sign(`{"offer_id":"o1"}`)
	anchored := attAt(t, "transport", rev, "2026-03-10T10:00:00Z")
	anchored["tlog"], _ = buildTlog(t, tlogSpec{logKey: lc.log, logID: testLogID, signature: rev, index: 2, size: 3,
		loggedAt: "2026-03-10T10:00:01Z", sthAt: "2026-03-10T10:05:00Z"})
	return [][]byte{
		receiptOf(t, anchored),
		receiptOf(t, attAt(t, "offer", lc.retired.sign(`{}`), "2026-05-15T10:00:00Z"), attAt(t, "offer", lc.pending.sign(`{}`), "2026-06-24T11:30:00Z")),
		receiptOf(t, attAt(t, "offer", lc.active.sign(`{}`), "2026-06-24T11:30:00Z"), attAt(t, "offer", rev, "2026-03-10T10:00:00Z")),
	}
}

// FuzzParseKeyHistory: no document panics; every entry ends up either
// usable or skipped, and usable versions fit their status.
func FuzzParseKeyHistory(f *testing.F) {
	f.Add(newLCFixture(f).historyJSON)
	f.Add([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"a","vrp_key_status":"revoked","vrp_compromised_at":"x"}]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		h, err := ParseKeyHistory(doc)
		if err != nil {
			return
		}
		var top struct{ Keys []json.RawMessage }
		if json.Unmarshal(doc, &top) == nil && len(top.Keys) != len(h.Versions)+len(h.Skipped) {
			t.Fatalf("%d entries, %d versions + %d skipped", len(top.Keys), len(h.Versions), len(h.Skipped))
		}
		for _, v := range h.Versions {
			if err := v.unusable(1); err != nil || (v.Defect != nil && v.Status != KeyStatusRevoked) {
				t.Fatalf("usable version %+v: %v", v, err)
			}
		}
	})
}

// FuzzVerifyTlog: no tlog member panics; one that verifies is for the
// signature it was checked with and names the trusted log key.
func FuzzVerifyTlog(f *testing.F) {
	lc := newLCFixture(f)
	sig := lc.revoked.sign(`{"offer_id":"o1"}`)
	for _, size := range []int{1, 3, 8} {
		tl, _ := buildTlog(f, tlogSpec{logKey: lc.log, logID: testLogID, signature: sig, index: size - 1, size: size,
			loggedAt: "2026-03-10T10:00:01Z", sthAt: "2026-03-10T10:05:00Z"})
		b, err := json.Marshal(tl)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, tlog []byte) {
		a, err := VerifyTlog(tlog, sig, lc.logKeys)
		if err != nil {
			if !errors.Is(err, ErrTlog) {
				t.Fatalf("error %v does not wrap ErrTlog", err)
			}
			return
		}
		if a.LogKeyID != lc.log.kid || a.LeafIndex >= a.TreeSize || len(a.RootHash) != TlogHashSize || a.LoggedAt.After(a.Timestamp) {
			t.Fatalf("anchor %+v", a)
		}
	})
}

// FuzzVerifyCompactJWS: no token panics; a token that verifies has an
// allowed alg, its header kid, a key from the set and a JSON-object payload.
func FuzzVerifyCompactJWS(f *testing.F) {
	var set *JWKS
	for _, v := range loadReceiptVectors(f) {
		var r struct {
			Attestations []struct {
				Signature string `json:"signature"`
			} `json:"attestations"`
		}
		_ = json.Unmarshal(v.Receipt, &r)
		for _, a := range r.Attestations {
			f.Add(a.Signature)
		}
		if set == nil {
			set, _ = ParseJWKS(v.JWKS)
		}
	}
	f.Add("e30.e30.")
	f.Fuzz(func(t *testing.T, jws string) {
		v, err := VerifyCompactJWS(jws, set)
		if err != nil {
			return
		}
		if v.Algorithm != AlgEdDSA && v.Algorithm != AlgES256 {
			t.Fatalf("verified with alg %q", v.Algorithm)
		}
		if kid, _ := v.Header["kid"].(string); kid != v.KID || (v.KID != "" && v.Key.KeyID != v.KID) {
			t.Fatalf("kid mismatch: header %v, result %q, key %q", v.Header["kid"], v.KID, v.Key.KeyID)
		}
		var p map[string]any
		if json.Unmarshal(v.Payload, &p) != nil {
			t.Fatalf("payload not an object: %q", v.Payload)
		}
	})
}
