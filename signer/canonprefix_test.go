package signer

import (
	"bytes"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/internal/strictjson"
)

// TestCanonicalPrefix: the lengths CanonicalPrefix measures, and the
// values it refuses — invalid JSON that alreadyCanonical (which trusts a
// prior check) would let through among them.
func TestCanonicalPrefix(t *testing.T) {
	deep := func(n int) string { return strings.Repeat(`{"a":`, n-1) + `{}` + strings.Repeat(`}`, n-1) }
	for _, c := range []struct {
		in    string
		depth int
		want  int
	}{
		{`{"alg":"EdDSA","i":7,"offer_id":"offer:villaakerlyckan.se:2026-09-02/05"}`, 32, 73},
		{`{"":0,"a":[true,false,null,-12,"x",{}],"b":{"c":123456789012345,"d":[]}}`, 32, 72},
		{`{"a":1},"typ":"x"}`, 32, 7}, // the value's length, whatever follows
		{`{"a":1}}`, 32, 7},
		{`"plain"`, 32, 7},
		{`0`, 32, 1},
		{`-7`, 32, 2},
		{`[]`, 32, 2},
		{`{}`, 32, 2},
		{deep(32), 32, len(deep(32))},
		{deep(33), 32, -1},
		{`[[[]]]`, 2, -1},
		{`[[]]`, 2, 4},
		// Not canonical.
		{`{"b":1,"a":2}`, 32, -1},
		{`{"a":1,"a":2}`, 32, -1},
		{`{"a": 1}`, 32, -1},
		{` {"a":1}`, 32, -1},
		{`{"a":1.5}`, 32, -1},
		{`{"a":1e3}`, 32, -1},
		{`{"a":-0}`, 32, -1},
		{`{"a":1234567890123456}`, 32, -1},
		{`{"a":"\u00e9"}`, 32, -1},
		{"{\"a\":\"\u00e9\"}", 32, -1},
		{"{\"a\":\"\x7f\"}", 32, -1},
		{`{"a":{"b":1,"a":1}}`, 32, -1},
		// Not JSON (alreadyCanonical assumes a prior check for these).
		{`{"a"}`, 32, -1},
		{`{"a":}`, 32, -1},
		{`{"a":1,}`, 32, -1},
		{`{,"a":1}`, 32, -1},
		{`{"a":1"b":2}`, 32, -1},
		{`{"a"::1}`, 32, -1},
		{`{1:1}`, 32, -1},
		{`[1,]`, 32, -1},
		{`[,1]`, 32, -1},
		{`[1 2]`, 32, -1},
		{`[1:2]`, 32, -1},
		{`{"a":[}`, 32, -1},
		{`{"a":1]`, 32, -1},
		{`[1}`, 32, -1},
		{`{"a":1`, 32, -1},
		{`{"a":"x`, 32, -1},
		{`{"a":tru}`, 32, -1},
		{`{"a":nul}`, 32, -1},
		{`{"a":01}`, 32, -1},
		{`{"a":-}`, 32, -1},
		{`{"a":--1}`, 32, -1},
		{`{"a":1.}`, 32, -1},
		{`{"a":+1}`, 32, -1},
		{``, 32, -1},
		{`}`, 32, -1},
	} {
		if got := CanonicalPrefix([]byte(c.in), c.depth); got != c.want {
			t.Errorf("CanonicalPrefix(%s, %d) = %d, want %d", c.in, c.depth, got, c.want)
		}
	}
}

// FuzzCanonicalPrefix: a value CanonicalPrefix measures passes the strict
// checks (depth, duplicate names, UTF-8, exact and I-JSON numbers) and is
// its own RFC 8785 form; and every value that passes the strict check
// and alreadyCanonical is measured whole.
func FuzzCanonicalPrefix(f *testing.F) {
	for _, s := range []string{
		`{"a":1}`, `{"":0,"a":[true,false,null,-12,"x",{}],"b":{"c":123456789012345,"d":[]}}`, `[[],{}]`,
		`{"a":1,"a":2}`, `{"b":1,"a":2}`, `{"a":1,}`, `[1 2]`, `{"a":1.5}`, `"\u00e9"`, `{"a":1}x`, `-0`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if n := CanonicalPrefix(in, 32); n >= 0 {
			v := in[:n]
			for _, num := range []strictjson.NumberRule{strictjson.NumbersExact, strictjson.NumbersIJSON} {
				if err := strictjson.Check(v, strictjson.Limits{MaxDepth: 32, Numbers: num}); err != nil {
					t.Fatalf("CanonicalPrefix measured %q (of %q), which the strict check refuses: %v", v, in, err)
				}
			}
			out, err := CanonicalizeInPlace(bytes.Clone(v))
			if err != nil || !bytes.Equal(out, v) {
				t.Fatalf("CanonicalPrefix measured %q, whose RFC 8785 form is %q (%v)", v, out, err)
			}
		}
		if strictjson.Check(in, strictjson.Limits{MaxDepth: 32}) == nil && alreadyCanonical(in) {
			if n := CanonicalPrefix(in, 32); n != len(in) {
				t.Fatalf("CanonicalPrefix(%q) = %d, want its whole length %d", in, n, len(in))
			}
		}
	})
}
