package pkcs11

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/asn1"
	"strings"
	"testing"
)

// TestPKCS11ParseEd25519Point accepts both CKA_EC_POINT encodings tokens use for
// an Ed25519 key — the DER OCTET STRING SoftHSM2 returns and the raw 32
// bytes other tokens return — and refuses anything else.
func TestPKCS11ParseEd25519Point(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der := append([]byte{0x04, 0x20}, pub...)
	for name, in := range map[string][]byte{"raw": pub, "DER OCTET STRING": der} {
		got, err := parseEd25519Point(in)
		if err != nil || !got.Equal(pub) {
			t.Fatalf("%s: got %x, %v; want %x", name, got, err, []byte(pub))
		}
	}
	if !bytes.Equal(ed25519PointDER(pub), der) {
		t.Fatal("ed25519PointDER does not produce 04 20 || key")
	}
	for name, in := range map[string][]byte{
		"empty":          nil,
		"31 bytes":       pub[:31],
		"wrong tag":      append([]byte{0x03, 0x20}, pub...),
		"wrong length":   append([]byte{0x04, 0x21}, pub...),
		"long DER":       append([]byte{0x04, 0x21}, append(pub, 0)...),
		"P-256 point":    append([]byte{0x04}, make([]byte, 64)...),
		"33 bytes plain": append([]byte{0x00}, pub...),
	} {
		if _, err := parseEd25519Point(in); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestPKCS11ParseP256Point accepts the uncompressed point inside a DER OCTET
// STRING (PKCS#11) and bare (some tokens), and refuses points off the
// curve, compressed points and trailing data.
func TestPKCS11ParseP256Point(t *testing.T) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := k.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	der, err := asn1.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != 65 || len(der) != 67 || der[0] != 0x04 || der[1] != 0x41 {
		t.Fatalf("unexpected test encodings: %d %d %x", len(raw), len(der), der[:2])
	}
	mine, err := p256PointDER(&k.PublicKey)
	if err != nil || !bytes.Equal(mine, der) {
		t.Fatalf("p256PointDER = %x, %v", mine, err)
	}
	for name, in := range map[string][]byte{"raw": raw, "DER OCTET STRING": der} {
		got, err := parseP256Point(in)
		if err != nil || !got.Equal(&k.PublicKey) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	offCurve := bytes.Clone(raw)
	offCurve[64] ^= 1
	compressed := append([]byte{0x02 + raw[64]&1}, raw[1:33]...)
	for name, in := range map[string][]byte{
		"empty":            nil,
		"off the curve":    offCurve,
		"compressed":       compressed,
		"trailing data":    append(bytes.Clone(der), 0),
		"DER of 64 bytes":  mustDER(t, raw[1:]),
		"Ed25519-size DER": append([]byte{0x04, 0x20}, make([]byte, 32)...),
	} {
		if _, err := parseP256Point(in); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func mustDER(t *testing.T, b []byte) []byte {
	t.Helper()
	d, err := asn1.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestPKCS11ObjectURI formats the RFC 7512 URI keysvc stores as a backend
// reference and parses it back, percent-encoding what needs it.
func TestPKCS11ObjectURI(t *testing.T) {
	u := objectURI{
		Token:      "keysvc",
		Object:     "villaakerlyckan.se-2026-05-18-01",
		ID:         []byte{0x3a, 0x9c, 0x00, 0xff},
		Type:       "private",
		ModulePath: "/usr/lib/softhsm/libsofthsm2.so",
	}
	want := "pkcs11:token=keysvc;object=villaakerlyckan.se-2026-05-18-01;id=%3a%9c%00%ff;type=private?module-path=/usr/lib/softhsm/libsofthsm2.so"
	if got := u.String(); got != want {
		t.Fatalf("String() =\n%s\nwant\n%s", got, want)
	}
	back, err := parseObjectURI(want)
	if err != nil || back.Token != u.Token || back.Object != u.Object || !bytes.Equal(back.ID, u.ID) || back.Type != u.Type || back.ModulePath != u.ModulePath {
		t.Fatalf("parse: %+v %v", back, err)
	}

	odd := objectURI{Token: "HSM; partition=1 & co", Object: "kid/with?odd=chars%;", ID: []byte("\x01"), ModulePath: "/opt/vendor lib/p11&x.so"}
	s := odd.String()
	if strings.Count(s, ";") != 2 || strings.Count(s, "?") != 1 || strings.Contains(s, " ") {
		t.Fatalf("special characters not encoded: %s", s)
	}
	back, err = parseObjectURI(s)
	if err != nil || back.Token != odd.Token || back.Object != odd.Object || !bytes.Equal(back.ID, odd.ID) || back.ModulePath != odd.ModulePath {
		t.Fatalf("round trip of %s: %+v %v", s, back, err)
	}
	// Upper-case hex, unknown attributes and another attribute order are fine.
	back, err = parseObjectURI("pkcs11:manufacturer=SoftHSM%20project;id=%3A%9C;object=k;token=t?pin-source=file:/x&module-path=/m.so")
	if err != nil || back.Token != "t" || back.Object != "k" || !bytes.Equal(back.ID, []byte{0x3a, 0x9c}) || back.ModulePath != "/m.so" {
		t.Fatalf("lenient parse: %+v %v", back, err)
	}
	for _, bad := range []string{"software:x", "pkcs11:token=a;token=b", "pkcs11:id=%zz", "pkcs11:id=%4", "pkcs11:noequals"} {
		if _, err := parseObjectURI(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestPKCS11MechanismName(t *testing.T) {
	for mech, want := range map[uint]string{ckmEdDSA: "CKM_EDDSA", ckmECEdwardsKeyPairGen: "CKM_EC_EDWARDS_KEY_PAIR_GEN", 0x1041: "CKM_ECDSA", 0x80001234: "0x80001234"} {
		if got := mechanismName(mech); got != want {
			t.Errorf("mechanismName(0x%x) = %s, want %s", mech, got, want)
		}
	}
}
