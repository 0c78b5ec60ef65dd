package api

import (
	"bytes"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/internal/strictjson"
	"github.com/keysvc/keysvc/signer"
)

// TestDecodeCommonMatchesStrict: the batch item fast path decodes exactly
// what strictjson.Decode decodes, and declines everything else (which then
// gets strictjson.Decode's own errors).
func TestDecodeCommonMatchesStrict(t *testing.T) {
	for _, c := range []struct {
		item            string
		fast, canonical bool
	}{
		{`{"payload":{"a":1}}`, true, true},
		{`{"payload":{"a":1},"typ":"offer+jwt"}`, true, true},
		{`{"payload":{"a":1},"typ":""}`, true, true},
		{`{"payload":{"a":1,"type":"VRP.MCP.transport_assertion"}}`, true, true}, // layer read by the scan
		{`{"payload":{"vrp_mcp_profile_version":"1.0"},"typ":"x"}`, true, true},
		{`{"payload":{"a":{"type":"vrp.mcp.x"}}}`, true, true},
		{`{"payload":{"a":[1,{"b":null}],"c":"d"}}`, true, true},
		{`{"payload":{"b":1,"a":1}}`, true, false},        // not RFC 8785: formatted by signOne
		{`{"payload":{"a":1.5}}`, true, false},            // numbers with a fraction: the formatter's
		{`{"payload":{"a":1} }`, true, false},             // whitespace after the payload
		{`{"payload":{"a":1},"typ":"a\"b"}`, true, false}, // an escape in typ
		{`{"payload":{"a":1},"typ":"x","typ":"y"}`, false, false},
		{`{"payload":{"a":1},"typ":"x"}x`, false, false},
		{`{"payload":{"a":1,}}`, false, false},
		{`{"payload":{"a":1}`, false, false},
		{`{"payload":{"a":1}}}`, false, false},
		{`{"payload":{"a":1},"typ":"x"`, false, false},
		{`{"typ":"offer+jwt","payload":{"b":[1,2],"a":{"c":null}}}`, true, false},
		{` { "payload" : { "z" : "\u00e9" } , "typ" : "x" } `, true, false},
		{`{"payload":{"a":1},"typ":null}`, false, false},
		{`{"payload":null}`, false, false},
		{`{"payload":[1]}`, false, false},
		{`{"payload":{"a":1},"extra":1}`, false, false},
		{`{"p\u0061yload":{"a":1}}`, false, false},
		{`{"payload":{"a":1},"payload":{"a":2}}`, false, false},
		{`{"payload":{"a":1,"a":2}}`, false, false},
		{`{"typ":"x"}`, false, false},
		{`{}`, false, false},
		{`[]`, false, false},
		{`{"payload":{"a":1}} x`, false, false},
		{"{\"payload\":{\"a\":\"\xff\"}}", false, false},
		{`{"payload":{"a":"\ud800"}}`, false, false},
		{`{"payload":{"a":1}}{}`, false, false},
		{`{"payload":{"a":"]}\"{"}}`, true, false},
		{`{"payload":` + strings.Repeat(`{"a":`, 30) + `{}` + strings.Repeat(`}`, 30) + `}`, true, true},   // depth 32 with the item
		{`{"payload":` + strings.Repeat(`{"a":`, 31) + `{}` + strings.Repeat(`}`, 31) + `}`, false, false}, // 33: too deep
		{`{"payload":{"a":[` + strings.Repeat(`[`, 29) + strings.Repeat(`]`, 29) + `]}}`, true, true},
		{`{"payload":{"a":[` + strings.Repeat(`[`, 30) + strings.Repeat(`]`, 30) + `]}}`, false, false},
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
		if fast.canonical != c.canonical {
			t.Errorf("%s: canonical = %v, want %v", c.item, fast.canonical, c.canonical)
		}
		checkCanonicalFlag(t, c.item, fast)
	}
}

// checkCanonicalFlag: a payload decodeCommon marks canonical is its own
// RFC 8785 form, so signOne may sign it without the formatter, and the
// layer the scan read is the one signer.ClaimedLayer reads, which signOne
// then does not call; a payload not marked canonical carries no layer.
func checkCanonicalFlag(t *testing.T, item string, r signRequest) {
	t.Helper()
	if !r.canonical {
		if r.layer != "" {
			t.Errorf("%s: layer %q set on a payload not marked canonical", item, r.layer)
		}
		return
	}
	out, err := signer.Canonicalize(r.Payload)
	if err != nil || !bytes.Equal(out, r.Payload) {
		t.Errorf("%s: payload marked canonical, but its RFC 8785 form is %q (%v)", item, out, err)
	}
	if want := signer.ClaimedLayer(r.Payload); r.layer != want {
		t.Errorf("%s: layer %q, ClaimedLayer %q", item, r.layer, want)
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
		checkCanonicalFlag(t, string(item), fast)
	})
}

// TestTransportDecodeCommonMatchesStrict: the transport request's fast
// path (single requests and batch items) decodes exactly what
// strictjson.Decode decodes, and declines everything else.
func TestTransportDecodeCommonMatchesStrict(t *testing.T) {
	for _, c := range []struct {
		item string
		fast bool
	}{
		{`{"tool":"get_verified_stay_offer","arguments":{"checkIn":"2026-09-02","guests":2}}`, true},
		{`{"arguments":{},"tool":"t","served_at":"2026-09-02T10:00:00Z","offer_ref":"o","session_id":"s","ref":"r","valid_for":"1h"}`, true},
		{` { "tool" : "t\u00e9" , "arguments" : { "a" : [1,{"b":null}] } } `, true},
		{`{"tool":"t","arguments":{"a":"]}\"{"}}`, true},
		{`{"arguments":{"a":1}}`, true}, // no tool: transportOne answers tool is required, as after strictjson
		{`{"tool":"t"}`, false},
		{`{"tool":"t","arguments":null}`, false},
		{`{"tool":"t","arguments":[1]}`, false},
		{`{"tool":"t","arguments":"x"}`, false},
		{`{"tool":1,"arguments":{}}`, false},
		{`{"tool":null,"arguments":{}}`, false},
		{`{"tool":"t","arguments":{},"served_at":null}`, false},
		{`{"tool":"t","arguments":{},"extra":"x"}`, false},
		{`{"t\u006fol":"t","arguments":{}}`, false},
		{`{"tool":"t","tool":"u","arguments":{}}`, false},
		{`{"tool":"t","arguments":{},"arguments":{}}`, false},
		{`{"tool":"t","arguments":{"a":1,"a":2}}`, false},
		{"{\"tool\":\"\xff\",\"arguments\":{}}", false},
		{`{"tool":"\ud800","arguments":{}}`, false},
		{`{"tool":"t","arguments":{}} x`, false},
		{`{"tool":"t","arguments":{}}{}`, false},
		{`[]`, false},
		// Cut short, and the shapes next to the decoder-free path's.
		{`{"arguments":`, false},
		{`{"tool":`, false},
		{`{"tool":"t"`, false},
		{`{"tool":"t",`, false},
		{`{"arguments":{}`, false},
		{`{"arguments":{},`, false},
		{`{"arguments":{}}`, true},
		{`{}`, false},
		{`{"tool":"t","arguments":{"b":1,"a":2}}`, true}, // arguments not RFC 8785: the decoder's
		{`{"tool":"t\"x","arguments":{}}`, true},
		{"{\"tool\":\"\x7f\",\"arguments\":{}}", true},
		{`{"tool":"t","arguments":{"a":1.5}}`, true},
		{`{"tool":"t","served_at":"x","offer_ref":"o","session_id":"s","ref":"r","valid_for":"1h","arguments":{"a":[1,{"b":"c"}]}}`, true},
		{`{"tool":"t","arguments":{},"ref":"r","ref":"r"}`, false},
		{`{"tool":"t","arguments":{}}}`, false},
		{`{"tool":"t","arguments":{}},`, false},
		{`{"tool":"t""arguments":{}}`, false},
		{`{"tool":"t","arguments":{"a":1}x}`, false},
		{`{"tool":"t","arguments":{},}`, false},
		{`{"tool":"t","arguments":` + strings.Repeat(`{"a":`, 30) + `{}` + strings.Repeat(`}`, 30) + `}`, true},  // depth 32 with the request
		{`{"tool":"t","arguments":` + strings.Repeat(`{"a":`, 31) + `{}` + strings.Repeat(`}`, 31) + `}`, false}, // 33: too deep
	} {
		var fast transportRequest
		got := fast.decodeCommon([]byte(c.item))
		if got != c.fast {
			t.Errorf("decodeCommon(%s) = %v, want %v", c.item, got, c.fast)
			continue
		}
		if !got {
			continue
		}
		var strict transportRequest
		if err := strictjson.Decode([]byte(c.item), &strict, strictjson.Limits{}); err != nil {
			t.Errorf("%s: the fast path accepted what strictjson.Decode refuses: %v", c.item, err)
			continue
		}
		if !sameTransportRequest(fast, strict) {
			t.Errorf("%s: fast %+v, strict %+v", c.item, fast, strict)
		}
		if cap(fast.Arguments) != len(fast.Arguments) {
			t.Errorf("%s: arguments capacity %d reaches past its %d bytes", c.item, cap(fast.Arguments), len(fast.Arguments))
		}
	}
}

func sameTransportRequest(a, b transportRequest) bool {
	return bytes.Equal(a.Arguments, b.Arguments) && a.Tool == b.Tool && a.ServedAt == b.ServedAt &&
		a.OfferRef == b.OfferRef && a.SessionID == b.SessionID && a.Ref == b.Ref && a.ValidFor == b.ValidFor
}

// FuzzTransportDecodeCommon: whatever the transport fast path accepts,
// strictjson.Decode accepts too, with the same members.
func FuzzTransportDecodeCommon(f *testing.F) {
	for _, s := range []string{
		`{"tool":"t","arguments":{"a":1}}`, `{"arguments":{},"tool":"t","served_at":"x","valid_for":"1h"}`,
		`{"tool":"t","arguments":{"a":1,"a":2}}`, `{"tool":"\ud800","arguments":{}}`, `{"tool":null,"arguments":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, item []byte) {
		var fast transportRequest
		if !fast.decodeCommon(bytes.Clone(item)) {
			return
		}
		var strict transportRequest
		if err := strictjson.Decode(item, &strict, strictjson.Limits{}); err != nil {
			t.Fatalf("%q: the fast path accepted what strictjson.Decode refuses: %v", item, err)
		}
		if !sameTransportRequest(fast, strict) {
			t.Fatalf("%q: fast %+v, strict %+v", item, fast, strict)
		}
	})
}

// checkCanonicalBatch: when canonicalBatch accepts body, the envelope
// decoder and decodeItem accept it too, with the same items and requests.
func checkCanonicalBatch(t *testing.T, body []byte, maxItems int) bool {
	t.Helper()
	items, reqs, ok := canonicalBatch[signRequest](bytes.Clone(body), maxItems)
	if !ok {
		return false
	}
	s := &Server{cfg: Config{MaxBatchItems: maxItems}}
	slow, err := s.decodeBatch(bytes.Clone(body))
	if err != nil {
		t.Fatalf("%q: canonicalBatch accepted what decodeBatch refuses: %v", body, err)
	}
	if len(slow) != len(items) || len(reqs) != len(items) {
		t.Fatalf("%q: canonicalBatch %d items, %d requests; decodeBatch %d items", body, len(items), len(reqs), len(slow))
	}
	for i := range items {
		if !bytes.Equal(items[i], slow[i]) || cap(items[i]) != len(items[i]) {
			t.Fatalf("%q: item %d is %q (capacity %d), decodeBatch's %q", body, i, items[i], cap(items[i]), slow[i])
		}
		var want signRequest
		if err := decodeItem(slow[i], &want); err != nil {
			t.Fatalf("%q: item %d: canonicalBatch decoded what decodeItem refuses: %v", body, i, err)
		}
		got := reqs[i]
		if !bytes.Equal(got.Payload, want.Payload) || got.Typ != want.Typ || got.canonical != want.canonical || cap(got.Payload) != len(got.Payload) {
			t.Fatalf("%q: item %d: canonicalBatch %q %q canonical=%v, decodeItem %q %q canonical=%v", body, i, got.Payload, got.Typ, got.canonical, want.Payload, want.Typ, want.canonical)
		}
		checkCanonicalFlag(t, string(items[i]), got)
	}
	return true
}

// TestCanonicalBatch: a batch of canonical sign items is decoded in one
// pass, exactly as the envelope decoder and decodeItem decode it; every
// other body is left to them.
func TestCanonicalBatch(t *testing.T) {
	for _, c := range []struct {
		body string
		max  int
		fast bool
	}{
		{`{"items":[{"payload":{"a":1}}]}`, 100, true},
		{`{"items":[{"payload":{"a":1}},{"payload":{"b":[1,{"c":null}]},"typ":"offer+jwt"},{"payload":{},"typ":""}]}`, 100, true},
		{`{"items":[{"payload":{"a":1}},{"payload":{"a":2}}]}`, 2, true},
		{`{"items":[{"payload":{"a":1}},{"payload":{"a":2}}]}`, 1, false}, // too many: decodeBatch's batch_too_large
		{`{"items":[]}`, 100, false}, // decodeBatch: at least one item
		{`{"items":[{"payload":{"a":1}}]} `, 100, false},
		{`{"items":[{"payload":{"a":1}} ]}`, 100, false},
		{`{"items":[{"payload":{"a":1}}],"x":1}`, 100, false},
		{`{"items":[{"payload":{"a":1}},]}`, 100, false},
		{`{"items":[{"payload":{"a":1}}`, 100, false},
		{`{"items":[{"payload":{"a":1}}]`, 100, false},
		{`{"items":[{"payload":{"a":1}}]}]}`, 100, false},
		{`{"items":[{"payload":{"b":1,"a":2}}]}`, 100, false}, // not RFC 8785: decodeItem formats it
		{`{"items":[{"payload":{"a":1},"typ":"x"y"}]}`, 100, false},
		{`{"items":[{"payload":{"a":1},"typ":"x"},"z"}]}`, 100, false},
		{`{"items":[{"payload":{"a":1},"typ":"a\"b"}]}`, 100, false},
		{`{"items":[{"payload":{"a":1},"typ":"x"]}`, 100, false},
		{`{"items":[{"payload":{"a":1}}{"payload":{"a":1}}]}`, 100, false},
		{`{"items":[{"payload":{"a":"]}"}},{"payload":{"a":1}}]}`, 100, true},
		{`{"items":[{"typ":"x","payload":{"a":1}}]}`, 100, false},
		{`{"items":[{"payload":{"a":1},"payload":{"a":1}}]}`, 100, false},
		{`{"items":[` + strings.TrimSuffix(strings.Repeat(`{"payload":{"a":1}},`, 100), ",") + `]}`, 100, true},
		{`{"items":[{"payload":` + strings.Repeat(`{"a":`, 30) + `{}` + strings.Repeat(`}`, 30) + `}]}`, 100, true},
		{`{"items":[{"payload":` + strings.Repeat(`{"a":`, 31) + `{}` + strings.Repeat(`}`, 31) + `}]}`, 100, false},
	} {
		if got := checkCanonicalBatch(t, []byte(c.body), c.max); got != c.fast {
			t.Errorf("canonicalBatch(%s, max %d) accepted = %v, want %v", c.body, c.max, got, c.fast)
		}
	}
	// Only request types with a canonical item decoder take the path.
	if _, _, ok := canonicalBatch[transportRequest]([]byte(`{"items":[{"payload":{"a":1}}]}`), 100); ok {
		t.Error("canonicalBatch decoded transport requests")
	}
}

// FuzzCanonicalBatch: whatever canonicalBatch accepts, the envelope
// decoder and decodeItem accept too, with the same items and requests.
func FuzzCanonicalBatch(f *testing.F) {
	for _, s := range []string{
		`{"items":[{"payload":{"a":1}}]}`, `{"items":[{"payload":{"a":1},"typ":"x"},{"payload":{"b":[1,{"c":"d"}]}}]}`,
		`{"items":[{"payload":{"a":1}} ]}`, `{"items":[{"payload":{"a":1},"typ":"x"},"z"}]}`, `{"items":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkCanonicalBatch(t, body, 8)
	})
}
