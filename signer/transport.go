package signer

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/keysvc/keysvc/internal/strictjson"
)

// VRP MCP composition profile 1.0 constants.
const (
	MCPProfileVersion = "1.0"                 // vrp_mcp_profile_version
	MCPAssertionType  = "vrp.mcp.transport.1" // type
	LayerTransport    = "transport"           // receipt attestation layer
)

// ErrArgumentKeyCollision reports two top-level argument keys that collapse
// to the same snake_case name (e.g. "checkIn" and "check_in"). The profile
// forbids guessing which one was meant.
var ErrArgumentKeyCollision = errors.New("argument keys collide after snake_case normalization")

// ErrArgumentsNotObject reports tool-call arguments that are not a JSON object.
var ErrArgumentsNotObject = errors.New("tool-call arguments must be a JSON object")

// SnakeCase converts a camelCase or PascalCase name to snake_case:
// "checkIn" -> "check_in", "offerID" -> "offer_id", "HTTPServer" ->
// "http_server". Names without upper-case letters are returned unchanged,
// so snake_case input is a fixed point.
func SnakeCase(s string) string {
	hasUpper := false
	for _, r := range s {
		if unicode.IsUpper(r) {
			hasUpper = true
			break
		}
	}
	if !hasUpper {
		return s
	}
	rs := []rune(s)
	var b strings.Builder
	b.Grow(len(s) + 4)
	for i, r := range rs {
		if unicode.IsUpper(r) {
			if i > 0 && rs[i-1] != '_' {
				prev := rs[i-1]
				nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
				if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
					b.WriteByte('_')
				}
			}
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// NormalizeArguments applies the profile's normative key casing rule to a
// tool call's arguments object: every top-level key is converted with
// SnakeCase (nested values are left untouched), then the object is
// canonicalized (RFC 8785). It returns the canonical bytes.
//
// Errors: *strictjson.Error for input that is not strict I-JSON,
// ErrArgumentsNotObject, or ErrArgumentKeyCollision (wrapped, naming the
// colliding keys).
func NormalizeArguments(raw []byte) ([]byte, error) {
	if out, ok := normalizeCanonicalArguments(raw); ok {
		return out, nil
	}
	return normalizeArguments(raw)
}

// normalizeCanonicalArguments is NormalizeArguments for the arguments a
// careful client sends: an object that is already RFC 8785 within
// CanonicalPrefix's subset (so strict I-JSON, depth within
// argumentLimits), whose snake_case names keep its member order. The
// names are renamed into a copy and the values copied as they are; the
// result is RFC 8785 by construction (plain ASCII names in strictly
// increasing order, canonical values). Anything else — not canonical, or
// names that reorder or collide — returns false for normalizeArguments,
// with its exact errors (TestNormalizeArgumentsPaths, FuzzArgumentsSHA256).
func normalizeCanonicalArguments(raw []byte) ([]byte, bool) {
	var buf [16]memberSpan
	s := canonScan{b: raw, top: argumentLimits.MaxDepth, members: buf[:0]}
	if len(raw) == 0 || raw[0] != '{' || !s.value(argumentLimits.MaxDepth) || s.i != len(raw) {
		return nil, false
	}
	out := make([]byte, 0, len(raw)+16)
	out = append(out, '{')
	var prev []byte
	for i, m := range s.members {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, '"')
		start := len(out)
		out = appendSnakeCaseASCII(out, m.name)
		name := out[start:]
		if i > 0 && bytes.Compare(prev, name) >= 0 {
			return nil, false
		}
		prev = name
		out = append(out, '"', ':')
		out = append(out, m.value...)
	}
	return append(out, '}'), true
}

// appendSnakeCaseASCII appends SnakeCase(string(name)) for a name of
// printable ASCII, byte by byte (TestSnakeCaseASCII compares the two).
func appendSnakeCaseASCII(dst, name []byte) []byte {
	upper := func(c byte) bool { return 'A' <= c && c <= 'Z' }
	lower := func(c byte) bool { return 'a' <= c && c <= 'z' }
	for i, c := range name {
		if !upper(c) {
			dst = append(dst, c)
			continue
		}
		if i > 0 && name[i-1] != '_' {
			prev := name[i-1]
			nextLower := i+1 < len(name) && lower(name[i+1])
			if lower(prev) || ('0' <= prev && prev <= '9') || (upper(prev) && nextLower) {
				dst = append(dst, '_')
			}
		}
		dst = append(dst, c+('a'-'A'))
	}
	return dst
}

// normalizeArguments is NormalizeArguments for any input: the strict
// check, then a decoder renames the members and the formatter sorts them.
func normalizeArguments(raw []byte) ([]byte, error) {
	if err := strictjson.Check(raw, argumentLimits); err != nil {
		return nil, err
	}
	// Rename the top-level members into a new object; RFC 8785 then sorts
	// the new names and canonicalizes every value in one pass.
	type member struct{ snake, name string }
	var buf [16]member // tool-call arguments rarely have more top-level members
	members := buf[:0]
	out := make([]byte, 0, len(raw)+16)
	err := strictjson.WithDecoder(raw, func(dec *jsontext.Decoder) error {
		if tok, err := dec.ReadToken(); err != nil {
			return fmt.Errorf("signer: arguments: %w", err)
		} else if tok.Kind() != '{' {
			return ErrArgumentsNotObject
		}
		out = append(out, '{')
		for dec.PeekKind() != '}' {
			tok, err := dec.ReadToken()
			if err != nil {
				return fmt.Errorf("signer: arguments: %w", err)
			}
			name := tok.String()
			val, err := dec.ReadValue()
			if err != nil {
				return fmt.Errorf("signer: arguments: %w", err)
			}
			snake := SnakeCase(name)
			members = append(members, member{snake, name})
			if len(out) > 1 {
				out = append(out, ',')
			}
			if out, err = jsontext.AppendQuote(out, snake); err != nil {
				return fmt.Errorf("signer: arguments: %w", err)
			}
			out = append(out, ':')
			out = append(out, val...)
		}
		out = append(out, '}')
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(members, func(a, b member) int {
		return cmp.Or(strings.Compare(a.snake, b.snake), strings.Compare(a.name, b.name))
	})
	for i := 1; i < len(members); i++ {
		if members[i].snake == members[i-1].snake {
			return nil, fmt.Errorf("%w: %q and %q both become %q", ErrArgumentKeyCollision, members[i-1].name, members[i].name, members[i].snake)
		}
	}
	return jcsFormat(out)
}

// ArgumentsSHA256 returns arguments_sha256 for a tool call: the hex SHA-256
// of NormalizeArguments(raw), and those canonical bytes.
func ArgumentsSHA256(raw []byte) (hexDigest string, canonical []byte, err error) {
	canonical, err = NormalizeArguments(raw)
	if err != nil {
		return "", nil, err
	}
	return SHA256Hex(canonical), canonical, nil
}

// TransportAssertion is the signed payload of a VRP MCP transport
// attestation (profile 1.0, "Assertion object"). Optional members are
// omitted when empty, never null.
type TransportAssertion struct {
	ProfileVersion  string `json:"vrp_mcp_profile_version"`
	Type            string `json:"type"`
	Tool            string `json:"tool"`
	ArgumentsSHA256 string `json:"arguments_sha256"`
	ServedAt        string `json:"served_at"`
	Issuer          string `json:"issuer"`
	OfferRef        string `json:"offer_ref,omitempty"`
	SessionID       string `json:"session_id,omitempty"`
}

// TransportCall is the input of BuildTransportAssertion.
type TransportCall struct {
	Tool      string          // MCP tool name, e.g. "get_verified_stay_offer"
	Arguments json.RawMessage // the tools/call arguments object, as received
	ServedAt  time.Time       // when the node served the call
	Issuer    string          // the node's domain
	OfferRef  string          // optional: binds to the offer attestation's ref
	SessionID string          // optional: MCP session id
}

// FormatInstant formats t as RFC 3339 in UTC, with fractional seconds only
// when non-zero ("2026-06-24T11:40:00Z").
func FormatInstant(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// BuildTransportAssertion builds the assertion for a call and returns it with
// its canonical (RFC 8785) bytes — the exact JWS payload keysvc signs.
// Errors: empty tool or issuer, a zero ServedAt, invalid strings (not UTF-8,
// control characters), and every error of ArgumentsSHA256.
func BuildTransportAssertion(c TransportCall) (TransportAssertion, []byte, error) {
	for _, m := range [...]struct{ name, v string }{{"tool", c.Tool}, {"issuer", c.Issuer}} {
		if m.v == "" {
			return TransportAssertion{}, nil, fmt.Errorf("signer: %s is required", m.name)
		}
	}
	for _, m := range [...]struct{ name, v string }{{"tool", c.Tool}, {"issuer", c.Issuer}, {"offer_ref", c.OfferRef}, {"session_id", c.SessionID}} {
		if !printable(m.v) {
			return TransportAssertion{}, nil, fmt.Errorf("signer: %s must be printable UTF-8 without control characters", m.name)
		}
	}
	if c.ServedAt.IsZero() {
		return TransportAssertion{}, nil, errors.New("signer: served_at is required")
	}
	digest, _, err := ArgumentsSHA256(c.Arguments)
	if err != nil {
		return TransportAssertion{}, nil, err
	}
	a := TransportAssertion{
		ProfileVersion:  MCPProfileVersion,
		Type:            MCPAssertionType,
		Tool:            c.Tool,
		ArgumentsSHA256: digest,
		ServedAt:        FormatInstant(c.ServedAt),
		Issuer:          c.Issuer,
		OfferRef:        c.OfferRef,
		SessionID:       c.SessionID,
	}
	canon, err := a.Canonical()
	return a, canon, err
}

// Canonical returns the RFC 8785 bytes of the assertion: its members are
// strings, written once with JSON string escapes and put in RFC 8785 order
// by the same formatter as every other canonical form. Errors: a member
// that is not valid UTF-8.
//
// When every value is printable ASCII without '"' or '\\' (the common
// case: a tool name, a digest, an instant, a domain), the bytes are
// written as they are and are RFC 8785 by construction: the names are
// written in RFC 8785 order, and such strings need no escape (§3.2.2.2).
// Anything else is quoted and then put through the formatter
// (TestTransportAssertionCanonicalPlain holds the two paths to each other).
func (a TransportAssertion) Canonical() ([]byte, error) {
	members := [...]struct{ name, value string }{
		{"arguments_sha256", a.ArgumentsSHA256}, {"issuer", a.Issuer}, {"offer_ref", a.OfferRef},
		{"served_at", a.ServedAt}, {"session_id", a.SessionID}, {"tool", a.Tool},
		{"type", a.Type}, {"vrp_mcp_profile_version", a.ProfileVersion},
	}
	plain := true
	for _, m := range members {
		plain = plain && plainString(m.value)
	}
	b := make([]byte, 0, 320)
	b = append(b, '{')
	for i, m := range members {
		if m.value == "" && (m.name == "offer_ref" || m.name == "session_id") {
			continue // optional members are omitted, never null or ""
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, m.name...)
		b = append(b, '"', ':')
		if plain {
			b = append(b, '"')
			b = append(b, m.value...)
			b = append(b, '"')
			continue
		}
		var err error
		if b, err = jsontext.AppendQuote(b, m.value); err != nil {
			return nil, fmt.Errorf("signer: assertion member %s: %w", m.name, err)
		}
	}
	b = append(b, '}')
	if plain {
		return b, nil
	}
	return jcsFormat(b)
}

// plainString reports whether every byte of s is printable ASCII other
// than '"' and '\\' (plainByte): a JSON string RFC 8785 writes unescaped.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if !plainByte[s[i]] {
			return false
		}
	}
	return true
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}
