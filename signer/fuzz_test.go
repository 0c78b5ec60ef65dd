package signer

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/gowebpki/jcs"
)

// FuzzCanonicalize: RFC 8785 output is valid JSON, a fixed point of
// Canonicalize, means the same as the input, and is byte for byte what a
// second, independent RFC 8785 implementation (github.com/gowebpki/jcs)
// produces; refusals never panic.
func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{
		`{"b":2,"a":1}`, `[1E30,4.50,2e-3,0.000000000000000000000000001]`, `"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/"`,
		`{"\ud83d\ude00":1,"\u00e9":2,"e\u0301":3}`, `{"a":{"a":{"a":[]}}}`, `9007199254740991`, `-0`, `1e400`, `{"a":1,"a":2}`,
		`{"":0,"a":[true,false,null,-12,"x"],"b":{"c":123456789012345}}`, `{"b":1,"a":1}`, `[01]`, `{"a":"\/"}`, `{"a":"\u007f"}`,
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
		if alreadyCanonical(in) {
			// The fast path must agree with the formatter it skips.
			v := jsontext.Value(bytes.Clone(in))
			if err := v.Canonicalize(); err != nil || !bytes.Equal(v, in) {
				t.Fatalf("alreadyCanonical accepted %q, whose RFC 8785 form is %q (%v)", in, v, err)
			}
		}
		if other, err := jcs.Transform(in); err != nil || !bytes.Equal(other, out) {
			t.Fatalf("RFC 8785 implementations disagree on %q:\n jsontext: %q\n jcs:      %q (%v)", in, out, other, err)
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
	f.Add([]byte(`{"a_b":1,"aB":2}`))
	f.Add([]byte(`{"b":1,"cA":{"dE":[1,"x"]},"zz":null}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		// The decoder-free path gives the general path's bytes.
		if fast, ok := normalizeCanonicalArguments(in); ok {
			if slow, err := normalizeArguments(in); err != nil || !bytes.Equal(fast, slow) {
				t.Fatalf("%q: normalizeCanonicalArguments %q, normalizeArguments %q (%v)", in, fast, slow, err)
			}
		}
		d1, canon, err := ArgumentsSHA256(in)
		if err != nil {
			return
		}
		d2, _, err := ArgumentsSHA256(canon)
		if err != nil || d1 != d2 {
			t.Fatalf("normalized arguments are not a fixed point: %q (%v)", canon, err)
		}
		if other, err := jcs.Transform(canon); err != nil || !bytes.Equal(other, canon) {
			t.Fatalf("normalized arguments are not RFC 8785 to github.com/gowebpki/jcs: %q -> %q (%v)", canon, other, err)
		}
	})
}

// TestCanonicalizeAgreesWithJCS pins the places where RFC 8785
// implementations are known to differ — UTF-16 member order, string
// escapes, U+2028/U+2029, number formatting at the ES6 thresholds — to
// github.com/gowebpki/jcs's bytes and to the expected literal.
func TestCanonicalizeAgreesWithJCS(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"\ue000":1,"\ud83d\ude00":2,"a":3,"\u00e9":4}`, "{\"a\":3,\"é\":4,\"😀\":2,\"\ue000\":1}"},
		{`"\u2028\u2029\u007f\u001f\b\f\n\r\t/<>&"`, "\"\u2028\u2029\u007f\\u001f\\b\\f\\n\\r\\t/<>&\""},
		{`[1e21,1e20,123456789012345680000,0.000001,1e-7,5e-324,-0,1.0,100E-2,333333333.33333329]`, `[1e+21,100000000000000000000,123456789012345680000,0.000001,1e-7,5e-324,0,1,1,333333333.3333333]`},
		{`{ "b" : [ true , false , null ] , "a" : { } }`, `{"a":{},"b":[true,false,null]}`},
	} {
		got, err := Canonicalize([]byte(c.in))
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		other, err := jcs.Transform([]byte(c.in))
		if err != nil {
			t.Fatalf("jcs %s: %v", c.in, err)
		}
		if string(got) != c.want || !bytes.Equal(got, other) {
			t.Errorf("%s:\n got  %s\n want %s\n jcs  %s", c.in, got, c.want, other)
		}
	}
}
