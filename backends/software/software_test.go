package software_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/software"
	"github.com/keysvc/keysvc/signer"
)

// Compile-time check: the software backend is a backends.Backend.
var _ backends.Backend = (*software.Backend)(nil)

// Documented sealed format: version || nonce(12) || ciphertext(32) ||
// tag(16); new blobs are version 0x02 (AAD binds key name and kid), 0x01
// blobs (kid only) still open.
const (
	sealedLen   = 1 + 12 + 32 + 16
	sealVersion = 0x02
)

func fixedKEK(b byte) []byte { return bytes.Repeat([]byte{b}, software.KEKSize) }

func newBackend(t *testing.T, kek []byte) *software.Backend {
	t.Helper()
	b, err := software.New(kek)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

// wantKEKID is the documented KEK identifier: the first 16 hex digits of
// SHA-256("keysvc/kek-id\x00" || KEK).
func wantKEKID(kek []byte) string {
	sum := sha256.Sum256(append([]byte("keysvc/kek-id\x00"), kek...))
	return hex.EncodeToString(sum[:8])
}

// secretOf returns the raw private key bytes the backend seals: the Ed25519
// seed or the P-256 32-byte big-endian scalar.
func secretOf(t *testing.T, s crypto.Signer) []byte {
	t.Helper()
	switch k := s.(type) {
	case ed25519.PrivateKey:
		return k.Seed()
	case *ecdsa.PrivateKey:
		b, err := k.Bytes()
		if err != nil {
			t.Fatalf("ecdsa Bytes: %v", err)
		}
		return b
	}
	t.Fatalf("unexpected signer type %T", s)
	return nil
}

// leaks reports whether msg contains any common encoding of secret.
func leaks(msg string, secret []byte) string {
	for name, enc := range map[string]string{
		"hex":         hex.EncodeToString(secret),
		"HEX":         strings.ToUpper(hex.EncodeToString(secret)),
		"base64":      base64.StdEncoding.EncodeToString(secret),
		"base64raw":   base64.RawStdEncoding.EncodeToString(secret),
		"base64url":   base64.URLEncoding.EncodeToString(secret),
		"base64rawur": base64.RawURLEncoding.EncodeToString(secret),
		"raw":         string(secret),
	} {
		if strings.Contains(msg, enc) {
			return name
		}
	}
	return ""
}

func TestNewKEKSize(t *testing.T) {
	for _, n := range []int{0, 16, 31, 33, 64} {
		if _, err := software.New(make([]byte, n)); err == nil {
			t.Errorf("New(%d-byte KEK) succeeded, want an error", n)
		}
	}
	b, err := software.New(fixedKEK(7))
	if err != nil {
		t.Fatalf("New(32-byte KEK): %v", err)
	}
	if got := b.Kind(); got != "software" {
		t.Errorf("Kind() = %q, want %q", got, "software")
	}
	if got, want := b.KEKID(), wantKEKID(fixedKEK(7)); got != want {
		t.Errorf("KEKID() = %q, want %q", got, want)
	}
	if b2 := newBackend(t, fixedKEK(8)); b2.KEKID() == b.KEKID() {
		t.Errorf("two different KEKs share the KEK id %q", b.KEKID())
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestCreateKeyAndSign(t *testing.T) {
	ctx := context.Background()
	kek := fixedKEK(0x42)
	b := newBackend(t, kek)
	for _, alg := range []string{signer.AlgEdDSA, signer.AlgES256} {
		t.Run(alg, func(t *testing.T) {
			kid := "villa akerlyckan.se/x-2026-05-18-01" // needs path escaping
			h, err := b.CreateKey(ctx, backends.CreateRequest{KeyName: "villa", KID: kid, Algorithm: alg})
			if err != nil {
				t.Fatalf("CreateKey: %v", err)
			}
			wantRef := "software:" + url.PathEscape(kid) + "?alg=" + alg + "&kek=" + wantKEKID(kek)
			if h.Ref != wantRef {
				t.Errorf("Ref = %q, want %q", h.Ref, wantRef)
			}
			if !strings.HasPrefix(h.Ref, "software:") || !strings.Contains(h.Ref, url.PathEscape(kid)) ||
				!strings.Contains(h.Ref, "kek="+b.KEKID()) {
				t.Errorf("Ref %q lacks the prefix, escaped kid or kek id", h.Ref)
			}
			if strings.Contains(h.Ref, " ") {
				t.Errorf("Ref %q contains an unescaped space", h.Ref)
			}
			if len(h.Sealed) != sealedLen {
				t.Fatalf("len(Sealed) = %d, want %d", len(h.Sealed), sealedLen)
			}
			if h.Sealed[0] != sealVersion {
				t.Errorf("Sealed[0] = %#x, want %#x", h.Sealed[0], sealVersion)
			}

			s, err := b.Signer(ctx, kid, h)
			if err != nil {
				t.Fatalf("Signer: %v", err)
			}
			secret := secretOf(t, s)
			if len(secret) != 32 {
				t.Fatalf("secret is %d bytes, want 32", len(secret))
			}
			if bytes.Contains(h.Sealed, secret) {
				t.Errorf("Sealed blob contains the plaintext private key")
			}
			if bytes.Contains([]byte(h.Ref), secret) || leaks(h.Ref, secret) != "" {
				t.Errorf("Ref contains the private key")
			}

			msg := []byte("eyJhbGciOiJFZERTQSJ9.cGF5bG9hZA")
			switch alg {
			case signer.AlgEdDSA:
				pub, ok := h.Public.(ed25519.PublicKey)
				if !ok || len(pub) != ed25519.PublicKeySize {
					t.Fatalf("Public is %T, want ed25519.PublicKey", h.Public)
				}
				if _, ok := s.(ed25519.PrivateKey); !ok {
					t.Fatalf("Signer is %T, want ed25519.PrivateKey", s)
				}
				sig, err := s.Sign(rand.Reader, msg, crypto.Hash(0))
				if err != nil {
					t.Fatalf("Sign: %v", err)
				}
				if !ed25519.Verify(pub, msg, sig) {
					t.Fatal("Ed25519 signature does not verify against Handle.Public")
				}
				if ed25519.Verify(pub, append(msg, 'x'), sig) {
					t.Fatal("Ed25519 signature verifies a different message")
				}
			case signer.AlgES256:
				pub, ok := h.Public.(*ecdsa.PublicKey)
				if !ok || pub.Curve != elliptic.P256() {
					t.Fatalf("Public is %T, want P-256 *ecdsa.PublicKey", h.Public)
				}
				sp, ok := s.Public().(*ecdsa.PublicKey)
				if !ok || !sp.Equal(pub) {
					t.Fatal("ES256 signer's public key differs from Handle.Public")
				}
				digest := sha256.Sum256(msg)
				der, err := s.Sign(rand.Reader, digest[:], crypto.SHA256)
				if err != nil {
					t.Fatalf("Sign: %v", err)
				}
				if !ecdsa.VerifyASN1(pub, digest[:], der) {
					t.Fatal("ES256 signature does not verify against Handle.Public")
				}
				// The JWS path works end to end too.
				js, err := signer.NewJWSSigner(kid, alg, s)
				if err != nil {
					t.Fatalf("NewJWSSigner: %v", err)
				}
				compact, err := js.Sign([]byte(`{"a":1}`), "")
				if err != nil {
					t.Fatal(err)
				}
				parts := strings.Split(compact, ".")
				raw, err := base64.RawURLEncoding.DecodeString(parts[2])
				if err != nil || len(raw) != 64 {
					t.Fatalf("ES256 JWS signature: %d bytes, %v", len(raw), err)
				}
				d := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
				r, ss := new(big.Int).SetBytes(raw[:32]), new(big.Int).SetBytes(raw[32:])
				if !ecdsa.Verify(pub, d[:], r, ss) {
					t.Fatal("ES256 JWS does not verify")
				}
			}

			// Two keys never share a nonce or a blob.
			h2, err := b.CreateKey(ctx, backends.CreateRequest{KeyName: "villa", KID: kid, Algorithm: alg})
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(h.Sealed[1:13], h2.Sealed[1:13]) {
				t.Error("two CreateKey calls used the same nonce")
			}
		})
	}
}

func TestSignerMismatch(t *testing.T) {
	ctx := context.Background()
	kek := fixedKEK(0x11)
	otherKEK := fixedKEK(0x22)
	b := newBackend(t, kek)
	other := newBackend(t, otherKEK)
	for _, alg := range []string{signer.AlgEdDSA, signer.AlgES256} {
		t.Run(alg, func(t *testing.T) {
			const kid = "example.com-2026-05-18-01"
			h, err := b.CreateKey(ctx, backends.CreateRequest{KeyName: "k", KID: kid, Algorithm: alg})
			if err != nil {
				t.Fatal(err)
			}
			s, err := b.Signer(ctx, kid, h)
			if err != nil {
				t.Fatalf("Signer (control): %v", err)
			}
			secret := secretOf(t, s)

			// A second key of the same algorithm, for a public-key swap.
			hOther, err := b.CreateKey(ctx, backends.CreateRequest{KeyName: "k", KID: kid, Algorithm: alg})
			if err != nil {
				t.Fatal(err)
			}
			// A key of the other algorithm, for a cross-type swap.
			otherAlg := signer.AlgES256
			if alg == signer.AlgES256 {
				otherAlg = signer.AlgEdDSA
			}
			hCross, err := b.CreateKey(ctx, backends.CreateRequest{KeyName: "k", KID: kid, Algorithm: otherAlg})
			if err != nil {
				t.Fatal(err)
			}

			flipped := func(i int) backends.Handle {
				c := h
				c.Sealed = bytes.Clone(h.Sealed)
				c.Sealed[i] ^= 0x01
				return c
			}
			cases := []struct {
				name string
				b    *software.Backend
				kid  string
				h    backends.Handle
			}{
				{"wrong KEK", other, kid, h},
				{"blob of another kid (AAD)", b, "example.com-2026-05-18-02", h},
				{"blob of another key (AAD)", b, kid, backends.Handle{Ref: h.Ref, Sealed: h.Sealed, Public: h.Public, KeyName: "other"}},
				{"blob without its key name", b, kid, backends.Handle{Ref: h.Ref, Sealed: h.Sealed, Public: h.Public}},
				{"key-bound blob passed off as kid-only (version 0x01)", b, kid, func() backends.Handle { c := flipped(0); c.Sealed[0] = 0x01; return c }()},
				{"wrong version byte", b, kid, func() backends.Handle { c := flipped(0); c.Sealed[0] = 0x07; return c }()},
				{"flipped ciphertext byte", b, kid, flipped(1 + 12 + 5)},
				{"flipped tag byte", b, kid, flipped(len(h.Sealed) - 1)},
				{"flipped nonce byte", b, kid, flipped(3)},
				{"truncated blob", b, kid, backends.Handle{Ref: h.Ref, Sealed: h.Sealed[:20], Public: h.Public}},
				{"empty blob", b, kid, backends.Handle{Ref: h.Ref, Public: h.Public}},
				{"different public key", b, kid, backends.Handle{Ref: h.Ref, Sealed: h.Sealed, Public: hOther.Public}},
				{"public key of the other algorithm", b, kid, backends.Handle{Ref: h.Ref, Sealed: h.Sealed, Public: hCross.Public}},
				{"nil public key", b, kid, backends.Handle{Ref: h.Ref, Sealed: h.Sealed}},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					got, err := c.b.Signer(ctx, c.kid, c.h)
					if !errors.Is(err, backends.ErrKeyMismatch) {
						t.Fatalf("Signer: (%v, %v), want ErrKeyMismatch", got, err)
					}
					if got != nil {
						t.Errorf("Signer returned a signer with its error")
					}
					msg := err.Error()
					if enc := leaks(msg, secret); enc != "" {
						t.Errorf("error %q contains the private key (%s)", msg, enc)
					}
					for _, k := range [][]byte{kek, otherKEK} {
						if enc := leaks(msg, k); enc != "" {
							t.Errorf("error %q contains a KEK (%s)", msg, enc)
						}
					}
					if !strings.Contains(msg, c.kid) {
						t.Errorf("error %q does not name the kid %q", msg, c.kid)
					}
				})
			}
		})
	}
}

func TestUnsupportedAlgorithm(t *testing.T) {
	b := newBackend(t, fixedKEK(1))
	for _, alg := range []string{"", "RS256", "ES384", "eddsa", "HS256"} {
		h, err := b.CreateKey(context.Background(), backends.CreateRequest{KeyName: "k", KID: "x-2026-01-01-01", Algorithm: alg})
		if !errors.Is(err, backends.ErrUnsupportedAlgorithm) {
			t.Errorf("CreateKey(%q) = (%v, %v), want ErrUnsupportedAlgorithm", alg, h, err)
		}
		if h.Sealed != nil || h.Public != nil || h.Ref != "" {
			t.Errorf("CreateKey(%q) returned a non-empty handle with its error", alg)
		}
	}
}

func TestCanceledContext(t *testing.T) {
	b := newBackend(t, fixedKEK(1))
	h, err := b.CreateKey(context.Background(), backends.CreateRequest{KID: "x-2026-01-01-01", Algorithm: signer.AlgEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.CreateKey(ctx, backends.CreateRequest{KID: "x-2026-01-01-02", Algorithm: signer.AlgEdDSA}); !errors.Is(err, context.Canceled) {
		t.Errorf("CreateKey with a canceled context: %v, want context.Canceled", err)
	}
	if _, err := b.Signer(ctx, "x-2026-01-01-01", h); !errors.Is(err, context.Canceled) {
		t.Errorf("Signer with a canceled context: %v, want context.Canceled", err)
	}
}

// TestSealedFormatInterop opens a blob sealed independently per the
// documented format, proving the format (not just a round trip).
func TestSealedFormatInterop(t *testing.T) {
	kek := fixedKEK(0x5a)
	b := newBackend(t, kek)
	seed := bytes.Repeat([]byte{0x9d}, ed25519.SeedSize)
	priv := ed25519.NewKeyFromSeed(seed)
	const kid = "example.com-2026-05-18-07"
	for _, c := range []struct {
		name    string
		sealed  []byte
		keyName string
	}{
		{"version 0x02 (key name and kid)", sealForTestV2(t, kek, seed, "villa", kid), "villa"},
		// Blobs sealed before issue 13 keep opening, whatever key holds them.
		{"version 0x01 (kid only)", sealForTest(t, kek, seed, kid), "villa"},
		{"version 0x01 without a key name", sealForTest(t, kek, seed, kid), ""},
	} {
		s, err := b.Signer(context.Background(), kid, backends.Handle{Sealed: c.sealed, Public: priv.Public(), KeyName: c.keyName})
		if err != nil {
			t.Fatalf("%s: Signer on an independently sealed blob: %v", c.name, err)
		}
		if got, ok := s.(ed25519.PrivateKey); !ok || !bytes.Equal(got.Seed(), seed) {
			t.Fatalf("%s: Signer opened a different key", c.name)
		}
	}
	if _, err := b.Signer(context.Background(), kid, backends.Handle{Sealed: sealForTestV2(t, kek, seed, "villa", kid), Public: priv.Public(), KeyName: "other"}); !errors.Is(err, backends.ErrKeyMismatch) {
		t.Fatalf("a version 0x02 blob under another key name: %v, want ErrKeyMismatch", err)
	}
}

// sealForTestV2 seals secret for key keyName and kid per the documented
// version 0x02 format, independently of the backend.
func sealForTestV2(t *testing.T, kek, secret []byte, keyName, kid string) []byte {
	t.Helper()
	block, err := aes.NewCipher(kek)
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	nonce := bytes.Repeat([]byte{0x44}, 12)
	out := append([]byte{0x02}, nonce...)
	return gcm.Seal(out, nonce, secret, []byte("keysvc/software/v2\x00"+keyName+"\x00"+kid))
}

func TestReadKEKFile(t *testing.T) {
	kek := make([]byte, software.KEKSize)
	for i := range kek {
		kek[i] = byte(0xf0 + i) // has bytes that differ between std and url alphabets
	}
	if !strings.ContainsAny(base64.StdEncoding.EncodeToString(kek), "+/") {
		t.Fatal("test KEK does not exercise the +/ alphabet")
	}
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // umask-proof
			t.Fatal(err)
		}
		return p
	}
	good := map[string]string{
		"std padded":           base64.StdEncoding.EncodeToString(kek),
		"std padded newline":   base64.StdEncoding.EncodeToString(kek) + "\n",
		"std raw":              base64.RawStdEncoding.EncodeToString(kek),
		"std raw newline":      base64.RawStdEncoding.EncodeToString(kek) + "\n",
		"url padded":           base64.URLEncoding.EncodeToString(kek),
		"url raw newline":      base64.RawURLEncoding.EncodeToString(kek) + "\n",
		"url padded crlf":      base64.URLEncoding.EncodeToString(kek) + "\r\n",
		"surrounding spaces":   "  " + base64.StdEncoding.EncodeToString(kek) + " \n",
		"std padded mode 0400": base64.StdEncoding.EncodeToString(kek),
	}
	i := 0
	for name, content := range good {
		t.Run(name, func(t *testing.T) {
			mode := os.FileMode(0o600)
			if strings.HasSuffix(name, "0400") {
				mode = 0o400
			}
			i++
			p := write("good"+string(rune('a'+i)), content, mode)
			got, err := software.ReadKEKFile(p)
			if err != nil {
				t.Fatalf("ReadKEKFile: %v", err)
			}
			if !bytes.Equal(got, kek) {
				t.Fatalf("ReadKEKFile = %x, want %x", got, kek)
			}
		})
	}

	t.Run("group or world readable", func(t *testing.T) {
		for _, mode := range []os.FileMode{0o640, 0o644, 0o604, 0o660} {
			p := write("loose", base64.StdEncoding.EncodeToString(kek)+"\n", mode)
			_, err := software.ReadKEKFile(p)
			if err == nil {
				t.Fatalf("ReadKEKFile accepted mode %04o", mode)
			}
			if !strings.Contains(err.Error(), "chmod 600") {
				t.Errorf("mode %04o: error %q does not mention chmod 600", mode, err)
			}
			if leaks(err.Error(), kek) != "" {
				t.Errorf("error %q contains the KEK", err)
			}
		}
	})
	t.Run("wrong length", func(t *testing.T) {
		for _, n := range []int{31, 33, 16, 0} {
			k := bytes.Repeat([]byte{0xab}, n)
			p := write("short", base64.StdEncoding.EncodeToString(k)+"\n", 0o600)
			_, err := software.ReadKEKFile(p)
			if err == nil {
				t.Fatalf("ReadKEKFile accepted a %d-byte KEK", n)
			}
			if n > 0 && leaks(err.Error(), k) != "" {
				t.Errorf("error %q contains the file's key bytes", err)
			}
		}
	})
	t.Run("not base64", func(t *testing.T) {
		content := "this is not base64 at all, but a secret!"
		p := write("junk", content, 0o600)
		_, err := software.ReadKEKFile(p)
		if err == nil {
			t.Fatal("ReadKEKFile accepted junk")
		}
		if strings.Contains(err.Error(), content) {
			t.Errorf("error %q echoes the file's contents", err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		_, err := software.ReadKEKFile(filepath.Join(dir, "nope"))
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("ReadKEKFile on a missing file: %v, want os.ErrNotExist", err)
		}
	})
}

func TestCreateKEKFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "kek")
	if err := software.CreateKEKFile(p); err != nil {
		t.Fatalf("CreateKEKFile: %v", err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("KEK file mode %04o, want 0600", got)
	}
	di, err := os.Stat(filepath.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	if got := di.Mode().Perm(); got != 0o700 {
		t.Errorf("KEK directory mode %04o, want 0700", got)
	}
	kek, err := software.ReadKEKFile(p)
	if err != nil {
		t.Fatalf("ReadKEKFile of a created file: %v", err)
	}
	if len(kek) != software.KEKSize || bytes.Equal(kek, make([]byte, software.KEKSize)) {
		t.Fatalf("created KEK %x is not 32 random bytes", kek)
	}
	before, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := software.CreateKEKFile(p); err == nil {
		t.Fatal("CreateKEKFile overwrote an existing file")
	}
	after, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("CreateKEKFile changed an existing file")
	}
	// A second file gets a different KEK.
	p2 := filepath.Join(filepath.Dir(p), "kek2")
	if err := software.CreateKEKFile(p2); err != nil {
		t.Fatal(err)
	}
	kek2, err := software.ReadKEKFile(p2)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(kek, kek2) {
		t.Fatal("two created KEK files hold the same KEK")
	}
	// The created KEK drives a working backend.
	b := newBackend(t, kek)
	if b.KEKID() != wantKEKID(kek) {
		t.Fatalf("KEKID %q, want %q", b.KEKID(), wantKEKID(kek))
	}
}

// sealForTest seals secret for kid under kek per the documented version
// 0x01 format (kid only), independently of the backend.
func sealForTest(t *testing.T, kek, secret []byte, kid string) []byte {
	t.Helper()
	block, err := aes.NewCipher(kek)
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	nonce := bytes.Repeat([]byte{0x33}, 12)
	out := append([]byte{0x01}, nonce...)
	return gcm.Seal(out, nonce, secret, []byte("keysvc/software/v1\x00"+kid))
}

// TestSignerOutOfRangeScalar: a blob that opens to 32 bytes which are not a
// valid P-256 scalar (here >= the group order), presented with a P-256
// public key, does not belong to the key version: ErrKeyMismatch.
func TestSignerOutOfRangeScalar(t *testing.T) {
	kek := fixedKEK(0x5b)
	b := newBackend(t, kek)
	const kid = "example.com-2026-05-18-09"
	h, err := b.CreateKey(context.Background(), backends.CreateRequest{KID: kid, Algorithm: signer.AlgES256})
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Repeat([]byte{0xff}, 32) // > N of P-256
	sealed := sealForTest(t, kek, bad, kid)
	_, err = b.Signer(context.Background(), kid, backends.Handle{Ref: h.Ref, Sealed: sealed, Public: h.Public})
	if err == nil {
		t.Fatal("Signer accepted an out-of-range P-256 scalar")
	}
	if leaks(err.Error(), bad) != "" {
		t.Errorf("error %q contains the opened bytes", err)
	}
	if !errors.Is(err, backends.ErrKeyMismatch) {
		t.Fatalf("Signer: %v, want ErrKeyMismatch", err)
	}
}

// TestDestroyKey: the software backend holds nothing outside key history,
// so DestroyKey changes nothing (the store drops the sealed blob); it says
// so, reports a handle without a blob as already destroyed, and honours a
// canceled context.
func TestDestroyKey(t *testing.T) {
	ctx := context.Background()
	b := newBackend(t, fixedKEK(0x42))
	var _ backends.Destroyer = b
	kid := "villaakerlyckan.se-2026-05-18-01"
	h, err := b.CreateKey(ctx, backends.CreateRequest{KeyName: "villa", KID: kid, Algorithm: signer.AlgEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	sealed := bytes.Clone(h.Sealed)
	res, err := b.DestroyKey(ctx, kid, h, backends.DestroyOptions{PendingWindowDays: 7})
	if err != nil || res.AlreadyDestroyed || res.DeletionDate != nil || !strings.Contains(res.Note, "backups") {
		t.Fatalf("DestroyKey: %+v %v", res, err)
	}
	if !bytes.Equal(h.Sealed, sealed) {
		t.Fatal("DestroyKey modified the handle's sealed blob")
	}
	res, err = b.DestroyKey(ctx, kid, backends.Handle{Ref: h.Ref, Public: h.Public}, backends.DestroyOptions{})
	if err != nil || !res.AlreadyDestroyed {
		t.Fatalf("DestroyKey without a sealed blob: %+v %v", res, err)
	}
	// Without its blob the version cannot sign: the sealed key is all there is.
	if _, err := b.Signer(ctx, kid, backends.Handle{Ref: h.Ref, Public: h.Public}); !errors.Is(err, backends.ErrKeyMismatch) {
		t.Fatalf("Signer without a sealed blob: %v", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.DestroyKey(canceled, kid, h, backends.DestroyOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("DestroyKey with a canceled context: %v", err)
	}
}
