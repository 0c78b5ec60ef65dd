package signer

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzCanonicalize: RFC 8785 output is valid JSON, a fixed point of
// Canonicalize, and means the same as the input; refusals never panic.
func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{
		`{"b":2,"a":1}`, `[1E30,4.50,2e-3,0.000000000000000000000000001]`, `"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/"`,
		`{"\ud83d\ude00":1,"\u00e9":2,"e\u0301":3}`, `{"a":{"a":{"a":[]}}}`, `9007199254740991`, `-0`, `1e400`, `{"a":1,"a":2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Canonicalize(in)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("canonical form is not JSON: %q", out)
		}
		again, err := Canonicalize(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not a fixed point: %q -> %q (%v)", out, again, err)
		}
		var a, b any
		if json.Unmarshal(in, &a) != nil || json.Unmarshal(out, &b) != nil {
			t.Fatalf("input or output does not decode")
		}
		// Numbers compare as float64 (RFC 8785 §3.2.2.3), so -0 equals 0.
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("canonicalization changed the value: %q -> %q", in, out)
		}
	})
}

// FuzzArgumentsSHA256: normalization never panics, and snake_case input
// is a fixed point (normalizing twice changes nothing).
func FuzzArgumentsSHA256(f *testing.F) {
	f.Add([]byte(`{"checkIn":"2026-09-02","checkOut":"2026-09-05","guests":2}`))
	f.Add([]byte(`{"checkIn":1,"check_in":2}`))
	f.Add([]byte(`{"HTTPServer":{"xY":1}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		d1, canon, err := ArgumentsSHA256(in)
		if err != nil {
			return
		}
		d2, _, err := ArgumentsSHA256(canon)
		if err != nil || d1 != d2 {
			t.Fatalf("normalized arguments are not a fixed point: %q (%v)", canon, err)
		}
	})
}
