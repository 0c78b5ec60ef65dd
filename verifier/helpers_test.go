package verifier

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"
)

// Fixed clock of the hand-built receipts: the window is [from, until].
var (
	testNow   = time.Date(2026, 6, 24, 12, 0, 0, 0, time.UTC)
	testFrom  = "2026-06-24T11:00:00Z"
	testUntil = "2026-06-24T13:00:00Z"
)

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// edKey is a freshly generated Ed25519 test key and its public JWK.
type edKey struct {
	kid  string
	priv ed25519.PrivateKey
	jwk  map[string]any
}

func newEdKey(t testing.TB, kid string) edKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwk := map[string]any{"kty": "OKP", "crv": "Ed25519", "x": b64u(pub), "alg": "EdDSA", "use": "sig"}
	if kid != "" {
		jwk["kid"] = kid
	}
	return edKey{kid: kid, priv: priv, jwk: jwk}
}

// signRaw builds a compact JWS from the exact header and payload JSON texts.
func (k edKey) signRaw(header, payload string) string {
	input := b64u([]byte(header)) + "." + b64u([]byte(payload))
	return input + "." + b64u(ed25519.Sign(k.priv, []byte(input)))
}

// sign builds an EdDSA compact JWS with the key's kid over payload.
func (k edKey) sign(payload string) string {
	return k.signRaw(`{"alg":"EdDSA","kid":"`+k.kid+`","typ":"JWT"}`, payload)
}

// ecKey is a freshly generated P-256 test key and its public JWK.
type ecKey struct {
	kid  string
	priv *ecdsa.PrivateKey
	jwk  map[string]any
}

func newECKey(t testing.TB, kid string) ecKey {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := priv.PublicKey.Bytes() // 0x04 || X || Y
	if err != nil {
		t.Fatal(err)
	}
	jwk := map[string]any{"kty": "EC", "crv": "P-256", "x": b64u(raw[1:33]), "y": b64u(raw[33:]), "kid": kid}
	return ecKey{kid: kid, priv: priv, jwk: jwk}
}

// sign builds an ES256 compact JWS; der selects an ASN.1 DER signature
// instead of the fixed R||S form.
func (k ecKey) sign(t testing.TB, payload string, der bool) string {
	t.Helper()
	input := b64u([]byte(`{"alg":"ES256","kid":"`+k.kid+`"}`)) + "." + b64u([]byte(payload))
	digest := sha256.Sum256([]byte(input))
	sig, err := ecdsa.SignASN1(rand.Reader, k.priv, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	if !der {
		sig = derToRS(t, sig)
	}
	return input + "." + b64u(sig)
}

// derToRS converts an ASN.1 ECDSA signature to the 64-byte R||S form of
// RFC 7518 §3.4.
func derToRS(t testing.TB, der []byte) []byte {
	t.Helper()
	// SEQUENCE { INTEGER r, INTEGER s }, short lengths for P-256.
	if len(der) < 8 || der[0] != 0x30 || der[2] != 0x02 {
		t.Fatalf("unexpected DER %x", der)
	}
	rLen := int(der[3])
	r := der[4 : 4+rLen]
	if der[4+rLen] != 0x02 {
		t.Fatalf("unexpected DER %x", der)
	}
	sLen := int(der[5+rLen])
	s := der[6+rLen : 6+rLen+sLen]
	out := make([]byte, 64)
	trim := func(b []byte) []byte {
		for len(b) > 32 && b[0] == 0 {
			b = b[1:]
		}
		return b
	}
	r, s = trim(r), trim(s)
	copy(out[32-len(r):32], r)
	copy(out[64-len(s):], s)
	return out
}

// jwksOf builds a *JWKS from JWK member maps through ParseJWKS.
func jwksOf(t testing.TB, keys ...map[string]any) *JWKS {
	t.Helper()
	b, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	set, err := ParseJWKS(b)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// att builds an attestation; an empty sig leaves signature out.
func att(layer, sig string) map[string]any {
	a := map[string]any{
		"layer":       layer,
		"source":      "https://example.test/.well-known/jwks.json",
		"valid_from":  testFrom,
		"valid_until": testUntil,
	}
	if sig != "" {
		a["signature"] = sig
	}
	return a
}

// receiptOf builds a v1 receipt with the given attestations.
func receiptOf(t testing.TB, atts ...map[string]any) []byte {
	t.Helper()
	list := make([]any, len(atts))
	for i, a := range atts {
		list[i] = a
	}
	b, err := json.Marshal(map[string]any{
		"vrp_receipt_version": "1.0",
		"subject":             map[string]any{"property": "example.test"},
		"issuer":              map[string]any{"node": "example.test"},
		"attestations":        list,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func strp(s string) *string { return &s }

// want builds an AttestationResult; empty code or kid mean null.
func want(index int, layer, status, code, kid string) AttestationResult {
	r := AttestationResult{Index: index, Layer: layer, Status: status}
	if code != "" {
		r.Error = strp(code)
	}
	if kid != "" {
		r.KID = strp(kid)
	}
	return r
}
