package tlogfmt

import (
	"crypto"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/mod/sumdb/note"

	"github.com/keysvc/keysvc/internal/strictjson"
	"github.com/keysvc/keysvc/signer"
)

var b64 = base64.RawURLEncoding

// ErrSignature reports a JWS or signed note that does not verify against
// the given log keys; errors of the Verify functions wrap it.
var ErrSignature = errors.New("tlogfmt: signature does not verify")

// UntrustedKeyError is the error of a JWS whose protected header's kid
// (RFC 7515 §4.1.4) names none of the given log keys: signed by another
// key, or by one the caller was not given. It wraps ErrSignature.
type UntrustedKeyError struct {
	KID string // the JWS header's kid
}

func (e *UntrustedKeyError) Error() string {
	return fmt.Sprintf("%v: kid %q is not a trusted log key", ErrSignature, e.KID)
}

func (e *UntrustedKeyError) Unwrap() error { return ErrSignature }

// LogKey is a log's public Ed25519 key with the names it goes by: the JWS
// kid of its STHs and SEPs, and the C2SP signed-note verifier key of its
// checkpoints (whose key name is the checkpoint origin, the log_id).
type LogKey struct {
	// KID is the RFC 7638 JWK thumbprint (SHA-256, base64url) of Public.
	KID string
	// Public is the Ed25519 public key (RFC 8032).
	Public ed25519.PublicKey
	// Origin is the log_id and checkpoint origin line.
	Origin string
}

// NewLogKey names pub for the log origin. Errors when pub is not a
// 32-byte Ed25519 key or origin is not a valid note key name.
func NewLogKey(origin string, pub crypto.PublicKey) (LogKey, error) {
	ed, ok := pub.(ed25519.PublicKey)
	if !ok || len(ed) != ed25519.PublicKeySize {
		return LogKey{}, errors.New("tlogfmt: the log key must be Ed25519")
	}
	if err := checkEd25519Point(ed); err != nil {
		return LogKey{}, fmt.Errorf("tlogfmt: log key: %v", err)
	}
	if origin == "" || !jcsSafe(origin) || strings.ContainsAny(origin, " +") {
		return LogKey{}, fmt.Errorf("tlogfmt: log origin %q must be printable ASCII without spaces, '+', '\"' or '\\'", origin)
	}
	tp, err := (&jose.JSONWebKey{Key: ed}).Thumbprint(crypto.SHA256)
	if err != nil {
		return LogKey{}, err
	}
	return LogKey{KID: b64.EncodeToString(tp), Public: ed, Origin: origin}, nil
}

// VKey returns the C2SP signed-note verifier key "<origin>+<hash>+<key>"
// (algorithm 0x01, Ed25519).
func (k LogKey) VKey() (string, error) { return note.NewEd25519VerifierKey(k.Origin, k.Public) }

// NoteVerifier returns the signed-note verifier of k's checkpoint
// signatures.
func (k LogKey) NoteVerifier() (note.Verifier, error) {
	vk, err := k.VKey()
	if err != nil {
		return nil, err
	}
	return note.NewVerifier(vk)
}

// JWK is the log key as a public JWK (RFC 8037 §2: kty OKP, crv Ed25519).
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	KID string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
}

// JWKS is a JWK Set (RFC 7517 §5).
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// JWK returns k as a JWK (alg EdDSA, use sig).
func (k LogKey) JWK() JWK {
	return JWK{Kty: "OKP", Crv: "Ed25519", X: b64.EncodeToString(k.Public), KID: k.KID, Alg: signer.AlgEdDSA, Use: "sig"}
}

// ParseJWKS reads log keys from a JWK Set; origin names the log the keys
// belong to. Keys other than Ed25519 are refused: a log key is Ed25519.
func ParseJWKS(data []byte, origin string) ([]LogKey, error) {
	var set JWKS
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("tlogfmt: JWKS: %w", err)
	}
	var out []LogKey
	for i, j := range set.Keys {
		x, err := b64.DecodeString(j.X)
		if err != nil || j.Kty != "OKP" || j.Crv != "Ed25519" || len(x) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("tlogfmt: JWKS key %d is not an Ed25519 OKP key", i)
		}
		k, err := NewLogKey(origin, ed25519.PublicKey(x))
		if err != nil {
			return nil, err
		}
		if j.KID != "" && j.KID != k.KID {
			return nil, fmt.Errorf("tlogfmt: JWKS key %d: kid %q is not the key's RFC 7638 thumbprint %q", i, j.KID, k.KID)
		}
		out = append(out, k)
	}
	return out, nil
}

// NoteSigner signs checkpoints (C2SP signed-note, Ed25519 algorithm 0x01)
// with a crypto.Signer that holds the log key — a software key, a PKCS#11
// object or a KMS key; the private key is never visible. It implements
// note.Signer.
type NoteSigner struct {
	name string
	hash uint32
	s    crypto.Signer
}

// NewNoteSigner returns a note.Signer for key (whose private half s holds)
// under the key name key.Origin. The key hash is the one of key's verifier
// key (C2SP signed-note: the first 4 bytes of SHA-256(name || 0x0A ||
// 0x01 || public key)).
func NewNoteSigner(key LogKey, s crypto.Signer) (*NoteSigner, error) {
	pub, ok := s.Public().(ed25519.PublicKey)
	if !ok || !pub.Equal(key.Public) {
		return nil, errors.New("tlogfmt: the signer does not hold the log key")
	}
	v, err := key.NoteVerifier()
	if err != nil {
		return nil, err
	}
	return &NoteSigner{name: key.Origin, hash: v.KeyHash(), s: s}, nil
}

// Name returns the key name (the log origin).
func (n *NoteSigner) Name() string { return n.name }

// KeyHash returns the signed-note key hash.
func (n *NoteSigner) KeyHash() uint32 { return n.hash }

// Sign signs msg with pure Ed25519 (RFC 8032 §5.1.6).
func (n *NoteSigner) Sign(msg []byte) ([]byte, error) {
	sig, err := n.s.Sign(nil, msg, crypto.Hash(0))
	if err != nil {
		return nil, fmt.Errorf("tlogfmt: checkpoint signature: %w", err)
	}
	return sig, nil
}

// jwsHeader is the protected header of an STH or SEP.
type jwsHeader struct {
	Alg string `json:"alg"`
	KID string `json:"kid"`
	Typ string `json:"typ"`
}

// verifyJWS verifies a compact JWS (RFC 7515 §7.1) with alg EdDSA (RFC
// 8037), typ typ and a kid naming one of keys, and returns its payload and
// the key that verified it. The payload is returned as signed.
func verifyJWS(jws, typ string, keys []LogKey) ([]byte, LogKey, error) {
	fail := func(format string, a ...any) ([]byte, LogKey, error) {
		return nil, LogKey{}, fmt.Errorf("%w: "+format, append([]any{ErrSignature}, a...)...)
	}
	h, rest, ok := strings.Cut(jws, ".")
	if !ok {
		return fail("not a compact JWS")
	}
	p, s, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(s, ".") {
		return fail("not a compact JWS")
	}
	hb, err := b64.DecodeString(h)
	if err != nil {
		return fail("header is not base64url")
	}
	var hdr jwsHeader
	if err := decodeStrict(hb, &hdr); err != nil {
		return fail("header: %v", err)
	}
	if hdr.Alg != signer.AlgEdDSA || hdr.Typ != typ || hdr.KID == "" {
		return fail("header is not {alg EdDSA, kid, typ %s}", typ)
	}
	var key LogKey
	found := false
	for _, k := range keys {
		if k.KID == hdr.KID {
			key, found = k, true
			break
		}
	}
	if !found {
		return nil, LogKey{}, &UntrustedKeyError{KID: hdr.KID}
	}
	sig, err := b64.DecodeString(s)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fail("signature is not %d base64url bytes", ed25519.SignatureSize)
	}
	if !ed25519.Verify(key.Public, []byte(jws[:len(h)+1+len(p)]), sig) {
		return fail("Ed25519 signature is invalid")
	}
	payload, err := b64.DecodeString(p)
	if err != nil {
		return fail("payload is not base64url")
	}
	return payload, key, nil
}

// decodeStrict decodes JSON with keysvc's strict rules (no duplicate or
// unknown members, valid UTF-8, no trailing data).
func decodeStrict(data []byte, v any) error {
	return strictjson.Decode(data, v, strictjson.Limits{Numbers: strictjson.NumbersIJSON})
}

// ParseVKey reads a log key from its C2SP signed-note verifier key
// "<origin>+<hash>+<base64(0x01 || 32-byte Ed25519 key)>" (the form GET
// vkey and keysvc tlog keygen print). The key name is the origin.
func ParseVKey(vkey string) (LogKey, error) {
	vkey = strings.TrimSpace(vkey)
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return LogKey{}, fmt.Errorf("tlogfmt: verifier key: %w", err)
	}
	parts := strings.SplitN(vkey, "+", 3) // the key name has no '+'; the base64 may
	if len(parts) != 3 {
		return LogKey{}, errors.New("tlogfmt: verifier key is not <name>+<hash>+<key>")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != 1+ed25519.PublicKeySize || raw[0] != 0x01 {
		return LogKey{}, errors.New("tlogfmt: verifier key is not an Ed25519 (0x01) key")
	}
	k, err := NewLogKey(v.Name(), ed25519.PublicKey(raw[1:]))
	if err != nil {
		return LogKey{}, err
	}
	if again, err := k.VKey(); err != nil || again != vkey {
		return LogKey{}, errors.New("tlogfmt: verifier key does not round-trip")
	}
	return k, nil
}
