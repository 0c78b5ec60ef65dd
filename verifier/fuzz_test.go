package verifier

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// checkConsistent fails t unless res is an internally consistent Result:
// envelope failures carry one envelope code and nothing else; valid
// receipts carry no envelope code, dense indices, status/error/kid
// combinations the rules can produce, and fully_verified exactly when
// every attestation is verified.
func checkConsistent(t testing.TB, input []byte, res Result) {
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
			if (code != CodeMissingValidityWindow && code != CodeSigInvalid) || a.KID != nil {
				fail("invalid with code " + code + " or a kid")
			}
		case StatusUnverifiable:
			if (code != CodeLayerUnverifiable && code != CodeKeyUnresolvable) || a.KID != nil {
				fail("unverifiable with code " + code + " or a kid")
			}
		default:
			fail("unknown status " + a.Status)
		}
		if a.KID != nil && *a.KID == "" {
			fail("empty kid")
		}
		all = all && a.Status == StatusVerified
	}
	if res.FullyVerified != all {
		fail("fully_verified disagrees with the attestations")
	}
}

// FuzzVerifyReceipt: no input panics, and every result is consistent.
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
	now := time.Date(2026, 6, 24, 12, 0, 0, 0, time.UTC)
	opts := Options{Now: now, Resolve: func(_ context.Context, source string, _ map[string]any) (*JWKS, error) {
		if strings.Contains(source, "unresolvable") {
			return nil, nil
		}
		return set, nil
	}}
	f.Fuzz(func(t *testing.T, receipt []byte) {
		checkConsistent(t, receipt, VerifyReceipt(context.Background(), receipt, opts))
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
