package signer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// VRP MCP composition profile 1.0 constants.
const (
	MCPProfileVersion = "1.0"                 // vrp_mcp_profile_version
	MCPAssertionType  = "vrp.mcp.transport.1" // type
	LayerTransport    = "transport"           // receipt attestation layer
	TransportJWSTyp   = "JWT"                 // typ of the transport JWS header, as in the VRP vectors
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
	canon, err := canonicalize(raw, argumentLimits)
	if err != nil {
		return nil, err
	}
	if len(canon) == 0 || canon[0] != '{' {
		return nil, ErrArgumentsNotObject
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(canon, &members); err != nil {
		return nil, fmt.Errorf("signer: arguments: %w", err)
	}
	renamed := make(map[string]json.RawMessage, len(members))
	from := make(map[string]string, len(members))
	changed := false
	for k, v := range members {
		nk := SnakeCase(k)
		if prev, dup := from[nk]; dup {
			a, b := prev, k
			if a > b {
				a, b = b, a
			}
			return nil, fmt.Errorf("%w: %q and %q both become %q", ErrArgumentKeyCollision, a, b, nk)
		}
		from[nk] = k
		renamed[nk] = v
		changed = changed || nk != k
	}
	if !changed {
		return canon, nil
	}
	// Re-serialize the renamed object; members are already canonical, so
	// only the member order needs RFC 8785 treatment again.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(renamed); err != nil {
		return nil, fmt.Errorf("signer: arguments: %w", err)
	}
	return canonicalize(bytes.TrimSpace(buf.Bytes()), argumentLimits)
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
	for name, v := range map[string]string{"tool": c.Tool, "issuer": c.Issuer} {
		if v == "" {
			return TransportAssertion{}, nil, fmt.Errorf("signer: %s is required", name)
		}
	}
	for name, v := range map[string]string{"tool": c.Tool, "issuer": c.Issuer, "offer_ref": c.OfferRef, "session_id": c.SessionID} {
		if !printable(v) {
			return TransportAssertion{}, nil, fmt.Errorf("signer: %s must be printable UTF-8 without control characters", name)
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

// Canonical returns the RFC 8785 bytes of the assertion.
func (a TransportAssertion) Canonical() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(a); err != nil {
		return nil, fmt.Errorf("signer: assertion: %w", err)
	}
	return Canonicalize(bytes.TrimSpace(buf.Bytes()))
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
