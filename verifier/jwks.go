package verifier

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// MaxJWKSBytes bounds the JWK Set documents ParseJWKS accepts.
const MaxJWKSBytes = 1 << 20

// Key sizes of the supported JWK types, in bytes.
const (
	ed25519XSize  = ed25519.PublicKeySize // RFC 8037 §2: x is the 32-byte public key
	p256CoordSize = 32                    // RFC 7518 §6.2.1.2: full-length coordinate
)

// ErrUnsupportedKey reports a JWK this package cannot use for verification.
var ErrUnsupportedKey = errors.New("unsupported JWK")

// ErrPrivateKeyMaterial reports a JWK carrying a private member ("d",
// RFC 7518 §6.2.2.1 and RFC 8037 §2). A document holding one is a leaked
// private key, under which anyone could sign: it is refused, never used
// for verification.
var ErrPrivateKeyMaterial = errors.New(`JWK holds private key material ("d"): a verifier takes public keys only`)

// JWK is one public key of a JWK Set (RFC 7517 §4) that this package can
// verify with: kty OKP / crv Ed25519 (RFC 8037 §2) or kty EC / crv P-256
// (RFC 7518 §6.2).
type JWK struct {
	// KeyID is the kid member, "" when absent.
	KeyID string
	// KeyType is "OKP" or "EC".
	KeyType string
	// Curve is "Ed25519" or "P-256".
	Curve string
	// Algorithm is the alg member, "" when absent.
	Algorithm string
	// Use is the use member, "" when absent.
	Use string
	// KeyOps is the key_ops member, nil when absent.
	KeyOps []string
	// Public is an ed25519.PublicKey (OKP) or a *ecdsa.PublicKey (EC).
	Public crypto.PublicKey
	// Raw is the JWK object as received, members such as vrp_key_status or
	// vrp_not_before (VRP key lifecycle K2) included.
	Raw json.RawMessage
}

// KeyError is why the key at Index of a JWK Set's keys array did not
// load (JWKS.Skipped); Err is ParseJWK's error.
type KeyError struct {
	Index int
	Err   error
}

func (e *KeyError) Error() string { return fmt.Sprintf("key %d: %v", e.Index, e.Err) }
func (e *KeyError) Unwrap() error { return e.Err }

// JWKS is a JWK Set: the keys of a document that loaded, in document order.
type JWKS struct {
	Keys []*JWK
	// Skipped holds one *KeyError per key of the document that did not
	// load (unsupported type or curve, bad coordinates, malformed members,
	// private key material).
	Skipped []error
}

// JWKSResolver returns the JWK Set that verifies an attestation. source is
// the attestation's source member ("" when absent or not a string) and
// attestation the whole attestation object, which the resolver must not
// modify. A nil set or a non-nil error makes the attestation unverifiable /
// key_unresolvable. The resolver is called once per signed attestation with
// a parseable validity window, from the goroutine calling VerifyReceipt.
type JWKSResolver func(ctx context.Context, source string, attestation map[string]any) (*JWKS, error)

// StaticJWKS returns a resolver that answers set for every source. With a
// nil set every signed attestation is key_unresolvable.
func StaticJWKS(set *JWKS) JWKSResolver {
	return func(context.Context, string, map[string]any) (*JWKS, error) {
		if set == nil {
			return nil, errors.New("no JWKS")
		}
		return set, nil
	}
}

// ParseJWKS parses a JWK Set document (RFC 7517 §5): a JSON object whose
// keys member is an array. Parsing is lenient per key: extra members (such
// as vrp_key_status) are kept in JWK.Raw, and a key that does not load is
// recorded in JWKS.Skipped instead of failing the set. It returns an error
// only when data is over MaxJWKSBytes, is not a JSON object, has a
// duplicate member at the top level, or has no keys array.
func ParseJWKS(data []byte) (*JWKS, error) {
	if len(data) > MaxJWKSBytes {
		return nil, fmt.Errorf("verifier: JWKS larger than %d bytes", MaxJWKSBytes)
	}
	top, err := shallowObject(data)
	if err != nil {
		return nil, fmt.Errorf("verifier: JWKS: %w", err)
	}
	rawKeys, ok := top["keys"]
	if !ok {
		return nil, errors.New("verifier: JWKS has no keys member")
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(rawKeys, &entries); err != nil {
		return nil, errors.New("verifier: JWKS keys is not an array")
	}
	set := &JWKS{Keys: []*JWK{}}
	for i, e := range entries {
		k, err := ParseJWK(e)
		if err != nil {
			set.Skipped = append(set.Skipped, &KeyError{Index: i, Err: err})
			continue
		}
		set.Keys = append(set.Keys, k)
	}
	return set, nil
}

// shallowObject splits a JSON object into its members without decoding
// them, refusing duplicate member names.
func shallowObject(data []byte) (map[string]json.RawMessage, error) {
	if !json.Valid(data) {
		return nil, errors.New("not JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	m := map[string]json.RawMessage{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := kt.(string)
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("duplicate member %q", k)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		m[k] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data")
	}
	return m, nil
}

// ParseJWK parses one public JWK: kty OKP with crv Ed25519 and a 32-byte x
// (RFC 8037 §2), or kty EC with crv P-256 and 32-byte x and y on the curve
// (RFC 7518 §6.2.1). kid, alg and use must be strings and key_ops an array
// of strings when present. A key with a private member (d) returns
// ErrPrivateKeyMaterial. Any other key type or curve returns an error
// wrapping ErrUnsupportedKey.
func ParseJWK(data []byte) (*JWK, error) {
	m, err := decodeStrictObject(data)
	if err != nil {
		return nil, err
	}
	if _, private := m["d"]; private {
		return nil, ErrPrivateKeyMaterial
	}
	str := func(name string) (string, error) {
		v, ok := m[name]
		if !ok {
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("JWK member %s is not a string", name)
		}
		return s, nil
	}
	k := &JWK{Raw: append(json.RawMessage(nil), data...)}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"kid", &k.KeyID}, {"kty", &k.KeyType}, {"crv", &k.Curve}, {"alg", &k.Algorithm}, {"use", &k.Use}} {
		if *f.dst, err = str(f.name); err != nil {
			return nil, err
		}
	}
	if ops, ok := m["key_ops"]; ok {
		arr, ok := ops.([]any)
		if !ok {
			return nil, errors.New("JWK member key_ops is not an array")
		}
		k.KeyOps = []string{}
		for _, o := range arr {
			s, ok := o.(string)
			if !ok {
				return nil, errors.New("JWK member key_ops holds a non-string")
			}
			k.KeyOps = append(k.KeyOps, s)
		}
	}
	coord := func(name string, size int) ([]byte, error) {
		s, err := str(name)
		if err != nil {
			return nil, err
		}
		b, err := decodeSegment(s)
		if err != nil || len(b) != size {
			return nil, fmt.Errorf("JWK member %s is not %d base64url bytes", name, size)
		}
		return b, nil
	}
	switch {
	case k.KeyType == "OKP" && k.Curve == "Ed25519":
		x, err := coord("x", ed25519XSize)
		if err != nil {
			return nil, err
		}
		k.Public = ed25519.PublicKey(x)
	case k.KeyType == "EC" && k.Curve == "P-256":
		x, err := coord("x", p256CoordSize)
		if err != nil {
			return nil, err
		}
		y, err := coord("y", p256CoordSize)
		if err != nil {
			return nil, err
		}
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			return nil, errors.New("JWK point is not on P-256")
		}
		k.Public = pub
	default:
		return nil, fmt.Errorf("%w: kty %q crv %q", ErrUnsupportedKey, k.KeyType, k.Curve)
	}
	return k, nil
}

// usableFor reports whether k may verify a JWS with header alg: the right
// key type and curve, and no use, alg or key_ops member that says otherwise
// (RFC 7517 §4.2–§4.4).
func (k *JWK) usableFor(alg string) bool {
	switch alg {
	case AlgEdDSA:
		if k.KeyType != "OKP" || k.Curve != "Ed25519" {
			return false
		}
		// "Ed25519" is the fully-specified name of the same algorithm (RFC 9864).
		if k.Algorithm != "" && k.Algorithm != AlgEdDSA && k.Algorithm != "Ed25519" {
			return false
		}
	case AlgES256:
		if k.KeyType != "EC" || k.Curve != "P-256" || (k.Algorithm != "" && k.Algorithm != AlgES256) {
			return false
		}
	default:
		return false
	}
	if k.Use != "" && k.Use != "sig" {
		return false
	}
	if k.KeyOps != nil {
		for _, op := range k.KeyOps {
			if op == "verify" {
				return true
			}
		}
		return false
	}
	return true
}
