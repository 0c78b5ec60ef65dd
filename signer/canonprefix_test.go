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

// TestCanonicalObjectPrefix: the layer the scan reads from a canonical
// object's top-level members is ClaimedLayer's, by its exact rule: a
// "vrp_mcp_profile_version" member, or a "type" string starting with
// TransportTypePrefix in any case; nested members and other kinds claim
// nothing. A value that is not an object is refused.
func TestCanonicalObjectPrefix(t *testing.T) {
	for _, c := range []struct {
		in    string
		n     int
		layer string
	}{
		{`{"check_in":"2026-09-02","guests":2,"type":"offer"}`, 51, ""},
		{`{"a":1,"type":"vrp.mcp.transport_assertion"}`, 44, LayerTransport},
		{`{"type":"VRP.MCP.x"}`, 20, LayerTransport},
		{`{"type":"vrp.mcp."}`, 19, LayerTransport},
		{`{"type":"vrp.mcp"}`, 18, ""},
		{`{"type":"x.vrp.mcp.y"}`, 22, ""},
		{`{"type":["vrp.mcp.x"]}`, 22, ""},
		{`{"type":7}`, 10, ""},
		{`{"vrp_mcp_profile_version":"1.0"}`, 33, LayerTransport},
		{`{"vrp_mcp_profile_version":null}`, 32, LayerTransport},
		{`{"a":{"type":"vrp.mcp.x","vrp_mcp_profile_version":"1.0"}}`, 58, ""},
		{`{"a":[{"vrp_mcp_profile_version":1}]}`, 37, ""},
		{`{"typ":"vrp.mcp.x","typeX":"vrp.mcp.x"}`, 39, ""},
		{`{"type":"vrp.mcp.x"},"typ":"y"}`, 20, LayerTransport}, // what follows is not read
		{`{"type":"vrp.mcp.x","a":1.5}`, -1, ""},                // not canonical: no layer read
		{`["vrp_mcp_profile_version"]`, -1, ""},
		{`"type"`, -1, ""},
		{``, -1, ""},
	} {
		n, layer := CanonicalObjectPrefix([]byte(c.in), 32)
		if n != c.n || layer != c.layer {
			t.Errorf("CanonicalObjectPrefix(%s) = %d, %q; want %d, %q", c.in, n, layer, c.n, c.layer)
		}
		if n >= 0 {
			if want := ClaimedLayer([]byte(c.in[:n])); layer != want {
				t.Errorf("CanonicalObjectPrefix(%s) layer %q, ClaimedLayer %q", c.in, layer, want)
			}
			if m := CanonicalPrefix([]byte(c.in), 32); m != n {
				t.Errorf("CanonicalObjectPrefix(%s) = %d, CanonicalPrefix %d", c.in, n, m)
			}
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
		`{"a":{"type":"vrp.mcp.x"},"type":"Vrp.Mcp.y"}`, `{"vrp_mcp_profile_version":"1.0"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		// CanonicalObjectPrefix measures what CanonicalPrefix measures
		// when it is an object, and reads ClaimedLayer's layer.
		n, layer := CanonicalObjectPrefix(in, 32)
		if m := CanonicalPrefix(in, 32); (len(in) > 0 && in[0] == '{' && m != n) || (n >= 0 && m != n) {
			t.Fatalf("CanonicalObjectPrefix(%q) = %d, CanonicalPrefix %d", in, n, m)
		}
		if n >= 0 && layer != ClaimedLayer(in[:n]) {
			t.Fatalf("CanonicalObjectPrefix(%q) layer %q, ClaimedLayer %q", in, layer, ClaimedLayer(in[:n]))
		}
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
