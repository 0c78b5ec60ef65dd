package signer

import (
	"bytes"
	"strings"
)

// CanonicalPrefix returns the length of the JSON value that b starts with
// when that value is valid JSON (RFC 8259) and already its own RFC 8785
// form within the subset alreadyCanonical accepts, nested at most
// maxDepth objects and arrays deep; otherwise -1. The subset:
//   - no whitespace;
//   - strings of printable ASCII (0x20–0x7e) other than '"' and '\\', so
//     valid UTF-8 that RFC 8785 §3.2.2.2 writes without escapes;
//   - member names in strictly increasing byte order: for ASCII the
//     UTF-16 code unit order of RFC 8785 §3.2.3, and no name twice;
//   - integer literals of at most 15 digits, without a leading zero and
//     other than -0 (a double holds them, and ECMAScript prints the same
//     digits: RFC 8785 §3.2.2.3);
//   - true, false and null.
//
// Unlike alreadyCanonical it checks the grammar too, so b needs no prior
// strict decode: a value it measures passes strictjson.Decode's checks
// (depth within maxDepth; no duplicate names; valid UTF-8; numbers any
// strictjson.NumberRule accepts) and CanonicalizeInPlace returns it
// unchanged (TestCanonicalPrefix, FuzzCanonicalPrefix). It is one pass
// over the bytes, for the signing path's common case: a careful client's
// payload, already canonical (issue 18).
func CanonicalPrefix(b []byte, maxDepth int) int {
	s := canonScan{b: b, top: -1}
	if !s.value(maxDepth) {
		return -1
	}
	return s.i
}

// CanonicalObjectPrefix is CanonicalPrefix for a value that must be an
// object, and it also returns the layer that object claims, as
// ClaimedLayer(b[:n]) would: the same pass reads the top-level member
// names and the "type" value, so the signing path does not search the
// payload again (issue 18). It returns -1 and "" when b does not start
// with such an object (TestCanonicalObjectPrefix, FuzzCanonicalPrefix).
func CanonicalObjectPrefix(b []byte, maxDepth int) (n int, layer string) {
	if len(b) == 0 || b[0] != '{' {
		return -1, ""
	}
	s := canonScan{b: b, top: maxDepth}
	if !s.value(maxDepth) {
		return -1, ""
	}
	return s.i, s.layer
}

type canonScan struct {
	b     []byte
	i     int
	top   int    // the depth argument of the object whose members claim a layer; -1 for none
	layer string // the layer the top object's members claim (ClaimedLayer's rule)
	// members, when not nil, receives the top object's members.
	members []memberSpan
}

// memberSpan is one member of a scanned object: its name (unquoted) and
// its value's bytes, both slices of the scanned input.
type memberSpan struct{ name, value []byte }

// claim applies ClaimedLayer's rule to one top-level member: its name
// (unquoted; canonical names hold no escapes) and its value's bytes.
func (s *canonScan) claim(name, v []byte) {
	switch string(name) {
	case "vrp_mcp_profile_version":
		s.layer = LayerTransport
	case "type":
		if len(v) > len(TransportTypePrefix) && v[0] == '"' && strings.EqualFold(string(v[1:1+len(TransportTypePrefix)]), TransportTypePrefix) {
			s.layer = LayerTransport
		}
	}
}

// value scans one value at s.i with depth levels of nesting left.
func (s *canonScan) value(depth int) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		if depth == 0 {
			return false
		}
		s.i++
		if s.next('}') {
			return true
		}
		var prev []byte
		for {
			start := s.i
			if !s.str() {
				return false
			}
			name := s.b[start+1 : s.i-1]
			if prev != nil && bytes.Compare(prev, name) >= 0 {
				return false
			}
			prev = name
			if !s.next(':') {
				return false
			}
			v := s.i
			if !s.value(depth - 1) {
				return false
			}
			if depth == s.top {
				s.claim(name, s.b[v:s.i])
				if s.members != nil {
					s.members = append(s.members, memberSpan{name, s.b[v:s.i]})
				}
			}
			if s.next('}') {
				return true
			}
			if !s.next(',') {
				return false
			}
		}
	case c == '[':
		if depth == 0 {
			return false
		}
		s.i++
		if s.next(']') {
			return true
		}
		for {
			if !s.value(depth - 1) {
				return false
			}
			if s.next(']') {
				return true
			}
			if !s.next(',') {
				return false
			}
		}
	case c == '"':
		return s.str()
	case c == 't' || c == 'f' || c == 'n':
		n := literalAt(s.b[s.i:])
		s.i += n
		return n > 0
	case c == '-' || ('0' <= c && c <= '9'):
		return s.integer()
	}
	return false
}

// next consumes c if it is the next byte.
func (s *canonScan) next(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str scans a string of printable ASCII other than '"' and '\\'.
func (s *canonScan) str() bool {
	if !s.next('"') {
		return false
	}
	b, i := s.b, s.i
	for i < len(b) && plainByte[b[i]] {
		i++
	}
	s.i = i
	return s.next('"')
}

// plainByte holds the bytes a canonical string holds unescaped in this
// subset: printable ASCII (0x20–0x7e) other than '"' and '\\': one lookup
// per byte instead of four comparisons (an offer's scan: 13 % fewer
// instructions under callgrind; an eight-byte-at-a-time test saved
// nothing on its short strings; issue 18).
var plainByte = func() (t [256]bool) {
	for c := 0x20; c <= 0x7e; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// integer scans an integer literal of 1–15 digits, no leading zero, not -0.
func (s *canonScan) integer() bool {
	neg := s.next('-')
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	digits := s.i - start
	if digits == 0 || digits > 15 || (s.b[start] == '0' && (digits > 1 || neg)) {
		return false
	}
	// A fraction or exponent is left to the formatter.
	return s.i == len(s.b) || (s.b[s.i] != '.' && s.b[s.i] != 'e' && s.b[s.i] != 'E')
}
