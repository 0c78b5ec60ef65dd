package signer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sync"
)

// JWS algorithms keysvc signs with (RFC 7518 §3.1, RFC 8037 §3.1).
const (
	AlgEdDSA = "EdDSA" // Ed25519, RFC 8037
	AlgES256 = "ES256" // ECDSA P-256 SHA-256, RFC 7518 §3.4, fixed 64-byte r||s
)

// ES256SignatureSize is the size of an ES256 JWS signature: r||s, 32 bytes each.
const ES256SignatureSize = 64

var b64 = base64.RawURLEncoding

// ProtectedHeader is the JOSE header keysvc puts on every JWS. Members are
// serialized in this (lexicographic) order: {"alg","kid","typ"}; typ is
// omitted when empty and kid is omitted only when empty (keysvc always sets
// it; RFC 8037 test vectors do not).
type ProtectedHeader struct {
	Alg string `json:"alg"`
	KID string `json:"kid,omitempty"`
	Typ string `json:"typ,omitempty"`
}

// JWSSigner signs compact JWS (RFC 7515 §7.1) with one key version. The
// base64url protected header is computed once per typ and cached, so the
// hot path is: base64url(payload), one signature, three concatenations.
// Safe for concurrent use; the private key stays inside the crypto.Signer.
type JWSSigner struct {
	kid    string
	alg    string
	signer crypto.Signer
	// headers caches base64url(protected header) by typ.
	headers sync.Map // string -> string
}

// NewJWSSigner returns a JWSSigner for key version kid. alg must match the
// signer's public key: AlgEdDSA for ed25519.PublicKey, AlgES256 for a P-256
// *ecdsa.PublicKey. Errors on a mismatch or an unsupported key.
func NewJWSSigner(kid, alg string, s crypto.Signer) (*JWSSigner, error) {
	if err := checkAlg(alg, s.Public()); err != nil {
		return nil, err
	}
	return &JWSSigner{kid: kid, alg: alg, signer: s}, nil
}

// KID returns the key version's kid.
func (j *JWSSigner) KID() string { return j.kid }

// Alg returns the JWS alg.
func (j *JWSSigner) Alg() string { return j.alg }

// Public returns the public key.
func (j *JWSSigner) Public() crypto.PublicKey { return j.signer.Public() }

// Sign returns the compact JWS of payload under the header
// {"alg":<alg>,"kid":<kid>[,"typ":<typ>]}. payload is signed byte for byte as
// given. typ must be printable ASCII of at most 64 bytes.
func (j *JWSSigner) Sign(payload []byte, typ string) (string, error) {
	h, ok := j.headers.Load(typ)
	if !ok {
		if len(typ) > 64 || !printableASCII(typ) {
			return "", errors.New("signer: typ must be printable ASCII, at most 64 bytes")
		}
		enc, err := EncodeHeader(ProtectedHeader{Alg: j.alg, KID: j.kid, Typ: typ})
		if err != nil {
			return "", err
		}
		h, _ = j.headers.LoadOrStore(typ, enc)
	}
	return SignCompact(h.(string), payload, j.alg, j.signer)
}

// EncodeHeader returns base64url(JSON(h)) with members in the order alg, kid, typ.
func EncodeHeader(h ProtectedHeader) (string, error) {
	raw, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("signer: header: %w", err)
	}
	return b64.EncodeToString(raw), nil
}

// SignCompact signs and assembles "<headerB64>.<base64url(payload)>.<sig>".
// The signing input is the ASCII of the first two segments (RFC 7515 §5.1).
// For ES256 the signer's ASN.1 DER output is converted to the fixed 64-byte
// r||s form (RFC 7518 §3.4).
func SignCompact(headerB64 string, payload []byte, alg string, s crypto.Signer) (string, error) {
	n := len(headerB64) + 1 + b64.EncodedLen(len(payload))
	buf := make([]byte, n, n+1+b64.EncodedLen(ES256SignatureSize+1))
	copy(buf, headerB64)
	buf[len(headerB64)] = '.'
	b64.Encode(buf[len(headerB64)+1:], payload)
	sig, err := signInput(buf, alg, s)
	if err != nil {
		return "", err
	}
	buf = append(buf, '.')
	buf = b64.AppendEncode(buf, sig)
	return string(buf), nil
}

func signInput(input []byte, alg string, s crypto.Signer) ([]byte, error) {
	switch alg {
	case AlgEdDSA:
		// Pure Ed25519 (RFC 8032 §5.1.6): no pre-hash, crypto.Hash(0).
		sig, err := s.Sign(rand.Reader, input, crypto.Hash(0))
		if err != nil {
			return nil, fmt.Errorf("signer: Ed25519 sign: %w", err)
		}
		if len(sig) != ed25519.SignatureSize {
			return nil, fmt.Errorf("signer: Ed25519 signature has %d bytes, want %d", len(sig), ed25519.SignatureSize)
		}
		return sig, nil
	case AlgES256:
		digest := sha256.Sum256(input)
		der, err := s.Sign(rand.Reader, digest[:], crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("signer: ES256 sign: %w", err)
		}
		return ES256RawFromDER(der)
	}
	return nil, fmt.Errorf("signer: unsupported alg %q", alg)
}

// ES256RawFromDER converts an ASN.1 DER ECDSA-Sig-Value (RFC 3279 §2.2.3) to
// the 64-byte big-endian r||s of RFC 7518 §3.4. A signer that already returns
// 64 raw bytes is passed through.
func ES256RawFromDER(sig []byte) ([]byte, error) {
	if len(sig) == ES256SignatureSize {
		return sig, nil
	}
	var v struct{ R, S *big.Int }
	rest, err := asn1.Unmarshal(sig, &v)
	if err != nil || len(rest) != 0 || v.R == nil || v.S == nil || v.R.Sign() <= 0 || v.S.Sign() <= 0 {
		return nil, errors.New("signer: ES256 signature is not a valid DER ECDSA-Sig-Value")
	}
	if v.R.BitLen() > 256 || v.S.BitLen() > 256 {
		return nil, errors.New("signer: ES256 signature component exceeds 32 bytes")
	}
	out := make([]byte, ES256SignatureSize)
	v.R.FillBytes(out[:32])
	v.S.FillBytes(out[32:])
	return out, nil
}

func checkAlg(alg string, pub crypto.PublicKey) error {
	switch alg {
	case AlgEdDSA:
		if k, ok := pub.(ed25519.PublicKey); ok && len(k) == ed25519.PublicKeySize {
			return nil
		}
	case AlgES256:
		if k, ok := pub.(*ecdsa.PublicKey); ok && k.Curve == elliptic.P256() {
			return nil
		}
	default:
		return fmt.Errorf("signer: unsupported alg %q (want %s or %s)", alg, AlgEdDSA, AlgES256)
	}
	return fmt.Errorf("signer: public key %T does not match alg %s", pub, alg)
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
