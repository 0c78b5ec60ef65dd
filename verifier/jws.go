package verifier

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// The JWS algorithms this package verifies (the allow-list). Every other
// alg, "none" and the HMAC family included, is refused.
const (
	AlgEdDSA = "EdDSA" // Ed25519, RFC 8037 §3.1
	AlgES256 = "ES256" // ECDSA P-256 SHA-256, RFC 7518 §3.4
)

// Sizes, in bytes.
const (
	// MaxJWSBytes bounds a compact JWS accepted by VerifyCompactJWS.
	MaxJWSBytes = 256 << 10
	// ES256SignatureSize is the fixed R||S form of an ES256 signature
	// (RFC 7518 §3.4): two 32-byte big-endian integers.
	ES256SignatureSize = 64
)

// Errors of VerifyCompactJWS; the returned error wraps exactly one.
var (
	// ErrMalformedJWS: not three base64url segments, header or payload
	// not a JSON object, bad kid or crit, or over MaxJWSBytes.
	ErrMalformedJWS = errors.New("malformed compact JWS")
	// ErrUnsupportedAlgorithm: header alg absent or not in the allow-list.
	ErrUnsupportedAlgorithm = errors.New("unsupported JWS algorithm")
	// ErrNoMatchingKey: no key of the set fits the header alg and kid.
	ErrNoMatchingKey = errors.New("no matching key")
	// ErrBadSignature: no candidate key verifies the signature.
	ErrBadSignature = errors.New("signature does not verify")
)

// VerifiedJWS is a compact JWS whose signature verified.
type VerifiedJWS struct {
	// Algorithm is the header alg: AlgEdDSA or AlgES256.
	Algorithm string
	// KID is the header kid, "" when the header has none.
	KID string
	// Header is the decoded JOSE header.
	Header map[string]any
	// Payload is the decoded payload bytes (a JSON object), as signed.
	Payload []byte
	// Key is the key that verified the signature.
	Key *JWK
}

// VerifyCompactJWS verifies a compact JWS (RFC 7515 §7.1) against a JWK Set.
//
// The token must be exactly three segments of unpadded base64url (RFC 7515
// §2); the header and payload must decode to JSON objects without
// duplicate member names. The header alg must be AlgEdDSA or AlgES256; a
// crit header is refused; kid, when present, must be a non-empty string.
// Candidate keys are the keys usable for alg (OKP/Ed25519 for EdDSA,
// EC/P-256 for ES256, with no contrary use, alg or key_ops) whose kid equals
// the header kid — or every such key when the header has no kid. The
// signature is checked over the ASCII bytes "<header>.<payload>" exactly as
// received (VRP receipt spec v1, D5); an ES256 signature must be the 64-byte
// R||S form (RFC 7518 §3.4), so DER is refused. The first candidate that
// verifies wins.
//
// keys may be nil (no candidates). The error wraps ErrMalformedJWS,
// ErrUnsupportedAlgorithm, ErrNoMatchingKey or ErrBadSignature.
func VerifyCompactJWS(jws string, keys *JWKS) (*VerifiedJWS, error) {
	if len(jws) > MaxJWSBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrMalformedJWS, MaxJWSBytes)
	}
	parts := strings.Split(jws, ".")
	if len(parts) != 3 {
		return nil, fmt.Errorf("%w: %d segments, want 3", ErrMalformedJWS, len(parts))
	}
	headerJSON, err := decodeSegment(parts[0])
	if err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrMalformedJWS, err)
	}
	header, err := decodeStrictObject(headerJSON)
	if err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrMalformedJWS, err)
	}
	alg, _ := header["alg"].(string)
	if alg != AlgEdDSA && alg != AlgES256 {
		return nil, fmt.Errorf("%w: %v", ErrUnsupportedAlgorithm, header["alg"])
	}
	if _, ok := header["crit"]; ok {
		return nil, fmt.Errorf("%w: crit header parameters are not supported", ErrMalformedJWS)
	}
	kid := ""
	if v, ok := header["kid"]; ok {
		s, ok := v.(string)
		if !ok || s == "" {
			return nil, fmt.Errorf("%w: kid is not a non-empty string", ErrMalformedJWS)
		}
		kid = s
	}
	payload, err := decodeSegment(parts[1])
	if err != nil {
		return nil, fmt.Errorf("%w: payload: %v", ErrMalformedJWS, err)
	}
	if _, err := decodeStrictObject(payload); err != nil {
		return nil, fmt.Errorf("%w: payload: %v", ErrMalformedJWS, err)
	}
	sig, err := decodeSegment(parts[2])
	if err != nil {
		return nil, fmt.Errorf("%w: signature: %v", ErrMalformedJWS, err)
	}

	var candidates []*JWK
	if keys != nil {
		for _, k := range keys.Keys {
			if k != nil && k.usableFor(alg) && (kid == "" || k.KeyID == kid) {
				candidates = append(candidates, k)
			}
		}
	}
	if len(candidates) == 0 {
		return nil, fmt.Errorf("%w: alg %s kid %q", ErrNoMatchingKey, alg, kid)
	}

	signingInput := []byte(jws[:len(parts[0])+1+len(parts[1])])
	for _, k := range candidates {
		if verifySignature(alg, k, signingInput, sig) {
			return &VerifiedJWS{Algorithm: alg, KID: kid, Header: header, Payload: payload, Key: k}, nil
		}
	}
	return nil, ErrBadSignature
}

// verifySignature checks sig over input with k under alg.
func verifySignature(alg string, k *JWK, input, sig []byte) bool {
	switch alg {
	case AlgEdDSA:
		pub, ok := k.Public.(ed25519.PublicKey)
		return ok && len(pub) == ed25519.PublicKeySize && len(sig) == ed25519.SignatureSize &&
			ed25519.Verify(pub, input, sig)
	case AlgES256:
		pub, ok := k.Public.(*ecdsa.PublicKey)
		if !ok || pub == nil || len(sig) != ES256SignatureSize {
			return false
		}
		digest := sha256.Sum256(input)
		r := new(big.Int).SetBytes(sig[:ES256SignatureSize/2])
		s := new(big.Int).SetBytes(sig[ES256SignatureSize/2:])
		return ecdsa.Verify(pub, digest[:], r, s)
	}
	return false
}

// b64 is unpadded base64url that also refuses non-zero trailing bits.
var b64 = base64.RawURLEncoding.Strict()

// decodeSegment decodes unpadded base64url (RFC 7515 §2). Unlike
// encoding/base64 alone it refuses CR and LF, so the decoded bytes have
// exactly one encoding.
func decodeSegment(s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return nil, errors.New("not base64url")
		}
	}
	return b64.DecodeString(s)
}
