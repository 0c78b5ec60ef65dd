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

// jcsFormat canonicalizes checked JSON in place (RFC 8785 §3.2: members
// sorted by UTF-16 code units, minimal string escapes, numbers as ES6
// doubles, no whitespace).
func jcsFormat(b []byte) ([]byte, error) {
	v := jsontext.Value(b)
	if err := v.Canonicalize(); err != nil {
		return nil, fmt.Errorf("signer: RFC 8785 canonicalization: %w", err)
	}
	return v, nil
}

// SHA256Hex returns the lowercase hex SHA-256 of b (64 characters).
func SHA256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// DigestSHA256 returns "sha256:" followed by SHA256Hex(b) — the digest form
// used by SEP-2828 and the VRP transparency-log leaves.
func DigestSHA256(b []byte) string { return "sha256:" + SHA256Hex(b) }
