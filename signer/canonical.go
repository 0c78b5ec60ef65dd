// Package signer produces keysvc's signed bytes: RFC 8785 (JCS) canonical
// JSON, the VRP MCP transport assertion (composition profile 1.0), the
// SEP-2828 fallback projection digest, and compact JWS (RFC 7515 §7.1) with
// the protected header precomputed per key version.
//
// Verification never re-canonicalizes: a JWS signature covers the compact
// bytes exactly as produced (VRP receipt spec v1 §7, D5). Canonical JSON is
// used only for hash inputs such as arguments_sha256.
package signer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/keysvc/keysvc/internal/strictjson"
)

// canonLimits are the checks applied to any JSON that is canonicalized: no
// duplicate names, valid UTF-8 without lone surrogates, and only numbers
// that survive the IEEE 754 double round trip of RFC 8785 §3.2.2.3 as
// written. RFC 8785 output passes them again (a fixed point).
var canonLimits = strictjson.Limits{MaxDepth: 32, Numbers: strictjson.NumbersExact}

// argumentLimits are stricter, for tool-call arguments hashed into
// arguments_sha256 and the SEP-2828 projection that other implementations
// must reproduce: numbers stay in the I-JSON range (RFC 7493 §2.2).
var argumentLimits = strictjson.Limits{MaxDepth: 32, Numbers: strictjson.NumbersIJSON}

// Canonicalize returns the RFC 8785 (JCS) form of one JSON value. It first
// applies the strict checks of package strictjson (duplicate names, invalid
// UTF-8, lone surrogates, integer literals a double cannot hold, trailing
// data are errors of type *strictjson.Error), then serializes with the
// RFC 8785 formatter of encoding/json/v2 (jsontext.Value.Canonicalize, from
// github.com/go-json-experiment/json); ADR 0010 records why, and a
// differential fuzz test holds it to github.com/gowebpki/jcs byte for byte.
// raw is not modified; the result is a new slice.
func Canonicalize(raw []byte) ([]byte, error) {
	return canonicalize(raw, canonLimits)
}

func canonicalize(raw []byte, lim strictjson.Limits) ([]byte, error) {
	if err := strictjson.Check(raw, lim); err != nil {
		return nil, err
	}
	return jcsFormat(append(make([]byte, 0, len(raw)), raw...))
}

// CanonicalizeInPlace is Canonicalize for a caller that owns raw and does
// not need it afterwards, the signing path: the same checks and the same
// bytes, but raw that is already RFC 8785 is returned itself, and other
// input is formatted in raw's own storage. Checking that bytes are already
// canonical is one scan over them, without the formatter (issue 18: a
// batch item's payload was re-canonicalized, 7 % of its CPU).
func CanonicalizeInPlace(raw []byte) ([]byte, error) {
	if err := strictjson.Check(raw, canonLimits); err != nil {
		return nil, err
	}
	return jcsFormat(raw)
}

// CanonicalizeDecoded is CanonicalizeInPlace for a value that a strict
// decode already accepted as part of its request (strictjson.Decode with
// its default limits: no duplicate names, valid UTF-8, depth at most 32,
// one value): when raw is already RFC 8785 it is returned at once, since
// such bytes — integers of at most 15 digits, ASCII strings — also pass
// the exact-number rule of Canonicalize, and the strict check is not run a
// second time. Anything else takes the path of CanonicalizeInPlace. raw
// must not be unchecked input: the canonical-form scan does not validate
// JSON syntax.
func CanonicalizeDecoded(raw []byte) ([]byte, error) {
	if alreadyCanonical(raw) {
		return raw, nil
	}
	return CanonicalizeInPlace(raw)
}

// jcsFormat canonicalizes checked JSON in place (RFC 8785 §3.2: members
// sorted by UTF-16 code units, minimal string escapes, numbers as ES6
// doubles, no whitespace). Bytes that alreadyCanonical accepts are
// returned as they are, without the formatter.
func jcsFormat(b []byte) ([]byte, error) {
	if alreadyCanonical(b) {
		return b, nil
	}
	v := jsontext.Value(b)
	if err := v.Canonicalize(); err != nil {
		return nil, fmt.Errorf("signer: RFC 8785 canonicalization: %w", err)
	}
	return v, nil
}

// SHA256Hex returns the lowercase hex SHA-256 of b (64 characters).
func SHA256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	var h [2 * sha256.Size]byte
	hex.Encode(h[:], sum[:])
	return string(h[:])
}

// DigestSHA256 returns "sha256:" followed by SHA256Hex(b) — the digest form
// used by SEP-2828 and the VRP transparency-log leaves.
func DigestSHA256(b []byte) string { return "sha256:" + SHA256Hex(b) }

// maxCanonicalScanDepth bounds alreadyCanonical's stack of open objects
// and arrays (strictjson's limits stop at 32).
const maxCanonicalScanDepth = 64

// alreadyCanonical reports whether b, a JSON value that strictjson.Check
// accepted, is certainly its own RFC 8785 form, by one scan and without
// allocating. It is conservative: false means "run the formatter", never
// "not canonical". It accepts only
//   - no whitespace between tokens (RFC 8785 §3.2.1);
//   - strings of printable ASCII without any escape: RFC 8785 §3.2.2.2
//     escapes only '"', '\' and control characters, so such a string is
//     written as it is; non-ASCII (UTF-16 member order, U+2028) and
//     escapes are left to the formatter;
//   - member names in strictly increasing byte order, which for ASCII is
//     the UTF-16 code unit order of RFC 8785 §3.2.3;
//   - numbers that are integer literals of at most 15 digits, without a
//     leading zero and other than -0: a double holds them exactly and
//     ECMAScript prints them as the same digits (RFC 8785 §3.2.2.3);
//     fractions and exponents are left to the formatter;
//   - the literals true, false and null.
//
// FuzzCanonicalize holds it to the formatter and to gowebpki/jcs.
func alreadyCanonical(b []byte) bool {
	type level struct {
		object bool
		prev   []byte // the previous member name of an object, nil before the first
	}
	var stack [maxCanonicalScanDepth]level
	depth := 0
	for i := 0; i < len(b); {
		switch c := b[i]; {
		case c == '"':
			j := i + 1
			for j < len(b) && b[j] != '"' {
				if d := b[j]; d == '\\' || d < 0x20 || d >= 0x7f {
					return false
				}
				j++
			}
			if j == len(b) {
				return false
			}
			s := b[i+1 : j]
			i = j + 1
			if i < len(b) && b[i] == ':' { // a member name
				if depth == 0 || !stack[depth-1].object {
					return false
				}
				l := &stack[depth-1]
				if l.prev != nil && bytes.Compare(l.prev, s) >= 0 {
					return false
				}
				l.prev = s
				i++
			}
		case c == '{' || c == '[':
			if depth == len(stack) {
				return false
			}
			stack[depth] = level{object: c == '{'}
			depth++
			i++
		case c == '}' || c == ']':
			if depth == 0 {
				return false
			}
			depth--
			i++
		case c == ',':
			i++
		case c == 't' || c == 'f' || c == 'n':
			lit := literalAt(b[i:])
			if lit == 0 {
				return false
			}
			i += lit
		case c == '-' || ('0' <= c && c <= '9'):
			j := i
			if c == '-' {
				j++
			}
			start := j
			for j < len(b) && '0' <= b[j] && b[j] <= '9' {
				j++
			}
			digits := j - start
			if digits == 0 || digits > 15 || (b[start] == '0' && (digits > 1 || c == '-')) {
				return false
			}
			if j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
				return false
			}
			i = j
		default: // whitespace, or anything Check would not have let through
			return false
		}
	}
	return depth == 0
}

// literalAt returns the length of the literal true, false or null that b
// starts with, or 0.
func literalAt(b []byte) int {
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(b) >= len(lit) && string(b[:len(lit)]) == lit {
			return len(lit)
		}
	}
	return 0
}
