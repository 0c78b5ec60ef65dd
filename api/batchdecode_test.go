package api

import (
	"bytes"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/internal/strictjson"
)

// TestDecodeCommonMatchesStrict: the batch item fast path decodes exactly
// what strictjson.Decode decodes, and declines everything else (which then
// gets strictjson.Decode's own errors).
func TestDecodeCommonMatchesStrict(t *testing.T) {
	for _, c := range []struct {
		item string
		fast bool
	}{
		{`{"payload":{"a":1}}`, true},
		{`{"typ":"offer+jwt","payload":{"b":[1,2],"a":{"c":null}}}`, true},
		{` { "payload" : { "z" : "\u00e9" } , "typ" : "x" } `, true},
		{`{"payload":{"a":1},"typ":null}`, false},
		{`{"payload":null}`, false},
		{`{"payload":[1]}`, false},
		{`{"payload":{"a":1},"extra":1}`, false},
		{`{"p\u0061yload":{"a":1}}`, false},
		{`{"payload":{"a":1},"payload":{"a":2}}`, false},
		{`{"payload":{"a":1,"a":2}}`, false},
		{`{"typ":"x"}`, false},
		{`{}`, false},
		{`[]`, false},
		{`{"payload":{"a":1}} x`, false},
		{"{\"payload\":{\"a\":\"\xff\"}}", false},
		{`{"payload":{"a":"\ud800"}}`, false},
		{`{"payload":{"a":1}}{}`, false},
		{`{"payload":{"a":"]}\"{"}}`, true},
		{`{"payload":` + strings.Repeat(`{"a":`, 30) + `{}` + strings.Repeat(`}`, 30) + `}`, true},  // depth 32 with the item
		{`{"payload":` + strings.Repeat(`{"a":`, 31) + `{}` + strings.Repeat(`}`, 31) + `}`, false}, // 33: too deep
		{`{"payload":{"a":[` + strings.Repeat(`[`, 29) + strings.Repeat(`]`, 29) + `]}}`, true},
		{`{"payload":{"a":[` + strings.Repeat(`[`, 30) + strings.Repeat(`]`, 30) + `]}}`, false},
	} {
		var fast signRequest
		got := fast.decodeCommon([]byte(c.item))
		if got != c.fast {
			t.Errorf("decodeCommon(%s) = %v, want %v", c.item, got, c.fast)
			continue
		}
		if !got {
			continue
		}
		var strict signRequest
		if err := strictjson.Decode([]byte(c.item), &strict, strictjson.Limits{}); err != nil {
			t.Errorf("%s: the fast path accepted what strictjson.Decode refuses: %v", c.item, err)
			continue
		}
		if !bytes.Equal(fast.Payload, strict.Payload) || fast.Typ != strict.Typ {
			t.Errorf("%s: fast %q %q, strict %q %q", c.item, fast.Payload, fast.Typ, strict.Payload, strict.Typ)
		}
		if cap(fast.Payload) != len(fast.Payload) {
			t.Errorf("%s: payload capacity %d reaches past its %d bytes", c.item, cap(fast.Payload), len(fast.Payload))
		}
	}
}

// FuzzDecodeCommon: whatever the batch item fast path accepts,
// strictjson.Decode accepts too, with the same payload and typ.
func FuzzDecodeCommon(f *testing.F) {
	for _, s := range []string{
		`{"payload":{"a":1}}`, `{"typ":"x","payload":{"b":[1,{"c":"d"}]}}`, `{"payload":{"a":1},"typ":null}`,
		`{"payload":{"a":1,"a":2}}`, `{"payload":{}} `, `{"payload":{"a":"\ud800"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, item []byte) {
		var fast signRequest
		if !fast.decodeCommon(bytes.Clone(item)) {
			return
		}
		var strict signRequest
		if err := strictjson.Decode(item, &strict, strictjson.Limits{}); err != nil {
			t.Fatalf("%q: the fast path accepted what strictjson.Decode refuses: %v", item, err)
		}
		if !bytes.Equal(fast.Payload, strict.Payload) || fast.Typ != strict.Typ {
			t.Fatalf("%q: fast %q %q, strict %q %q", item, fast.Payload, fast.Typ, strict.Payload, strict.Typ)
		}
	})
}
