package pkcs11

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"encoding/asn1"
	"errors"
	"fmt"
)

// DER encodings of the curve identifiers used as CKA_EC_PARAMS.
var (
	// oidEd25519 is the DER OBJECT IDENTIFIER 1.3.101.112 (id-Ed25519,
	// RFC 8410 §3). SoftHSM2 and OpenSC accept it as CKA_EC_PARAMS.
	oidEd25519 = []byte{0x06, 0x03, 0x2b, 0x65, 0x70}
	// printableEd25519 is the DER PrintableString "edwards25519", the
	// curve-name form PKCS#11 v3.0 also allows (and pkcs11-tool writes);
	// tried when a token refuses the OID.
	printableEd25519 = append([]byte{0x13, byte(len(ed25519CurveName))}, ed25519CurveName...)
	// oidP256 is the DER OBJECT IDENTIFIER 1.2.840.10045.3.1.7
	// (prime256v1 / secp256r1, RFC 5480 §2.1.1.1).
	oidP256 = []byte{0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07}
)

// parseEd25519Point returns the public key held in a CKA_EC_POINT of a
// CKK_EC_EDWARDS key. Tokens disagree on the encoding: SoftHSM2 (and
// PKCS#11 v3.0 read literally) return the DER OCTET STRING 04 20 <32
// bytes>; others return the raw 32-byte RFC 8032 public key. Both are
// accepted; anything else is an error.
func parseEd25519Point(v []byte) (ed25519.PublicKey, error) {
	switch {
	case len(v) == ed25519.PublicKeySize:
		return ed25519.PublicKey(append([]byte(nil), v...)), nil
	case len(v) == 2+ed25519.PublicKeySize && v[0] == 0x04 && v[1] == ed25519.PublicKeySize:
		return ed25519.PublicKey(append([]byte(nil), v[2:]...)), nil
	}
	return nil, fmt.Errorf("CKA_EC_POINT of an Ed25519 key has %d bytes; want 32 raw bytes or a 34-byte DER OCTET STRING", len(v))
}

// parseP256Point returns the public key held in a CKA_EC_POINT of a P-256
// key: the uncompressed point (SEC 1 §2.3.3, 04 || X || Y), inside a DER
// OCTET STRING as PKCS#11 specifies, or bare as some tokens return it.
func parseP256Point(v []byte) (*ecdsa.PublicKey, error) {
	point := v
	if len(v) != p256PointSize {
		var inner []byte
		rest, err := asn1.Unmarshal(v, &inner)
		if err != nil || len(rest) != 0 {
			return nil, errors.New("CKA_EC_POINT of a P-256 key is neither a DER OCTET STRING nor a 65-byte uncompressed point")
		}
		point = inner
	}
	if len(point) != p256PointSize || point[0] != 0x04 {
		return nil, fmt.Errorf("CKA_EC_POINT of a P-256 key holds %d bytes; want a 65-byte uncompressed point", len(point))
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point)
	if err != nil {
		return nil, fmt.Errorf("CKA_EC_POINT of a P-256 key: %w", err)
	}
	return pub, nil
}

// ed25519PointDER returns the DER OCTET STRING form of an Ed25519 public
// key, as written to CKA_EC_POINT on import.
func ed25519PointDER(pub ed25519.PublicKey) []byte {
	return append([]byte{0x04, ed25519.PublicKeySize}, pub...)
}

// p256PointDER returns the DER OCTET STRING of the uncompressed point.
func p256PointDER(pub *ecdsa.PublicKey) ([]byte, error) {
	raw, err := pub.Bytes()
	if err != nil {
		return nil, err
	}
	return asn1.Marshal(raw)
}
