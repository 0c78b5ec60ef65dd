// Package software is the software backend: Ed25519 (and P-256) keys
// generated in process, with the private half sealed at rest by AES-256-GCM
// (NIST SP 800-38D) under a 32-byte key-encryption key (KEK) read from a
// file. The sealed blob is stored in key history; the KEK never is.
//
// Sealed format: version byte || 12-byte random nonce || GCM ciphertext of
// the private key (Ed25519: the 32-byte RFC 8032 seed; P-256: the 32-byte
// big-endian scalar) with a 16-byte tag. Version 0x02 (every blob sealed
// since issue 13): the additional authenticated data is
// "keysvc/software/v2\x00" + key name + "\x00" + kid, so a blob moved to
// another key version, or its version moved to another key, fails to open.
// Version 0x01 (blobs sealed before): "keysvc/software/v1\x00" + kid, bound
// to the kid only; still opened, and replaced by 0x02 at the key's next
// rotation.
package software

import (
	"context"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/signer"
)

// Kind is this backend's name in key history and configuration.
const Kind = "software"

// KEKSize is the key-encryption key size in bytes (AES-256).
const KEKSize = 32

const (
	sealVersionKID  = 0x01 // AAD binds the kid
	sealVersionName = 0x02 // AAD binds the key name and the kid
	nonceSize       = 12
	aadPrefixKID    = "keysvc/software/v1\x00"
	aadPrefixName   = "keysvc/software/v2\x00"
)

// aad is the additional authenticated data of a blob of the given version.
func aad(version byte, keyName, kid string) []byte {
	if version == sealVersionKID {
		return []byte(aadPrefixKID + kid)
	}
	return []byte(aadPrefixName + keyName + "\x00" + kid)
}

// Backend is the software backend. Create it with New or Open.
type Backend struct {
	aead  cipher.AEAD
	kekID string // first 16 hex digits of SHA-256(KEK): names the KEK, reveals nothing
}

// New returns a backend sealing under kek (exactly KEKSize bytes).
func New(kek []byte) (*Backend, error) {
	if len(kek) != KEKSize {
		return nil, fmt.Errorf("software backend: KEK must be %d bytes, got %d", KEKSize, len(kek))
	}
	block, err := aes.NewCipher(kek)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(append([]byte("keysvc/kek-id\x00"), kek...))
	return &Backend{aead: aead, kekID: hex.EncodeToString(sum[:8])}, nil
}

// ReadKEKFile reads a KEK file: the base64 (standard or URL alphabet, padded
// or not) of 32 random bytes, surrounding whitespace ignored. The file must
// not be readable by group or others (mode 0600 or stricter), like an SSH
// private key. Errors never include the file's contents.
func ReadKEKFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("software backend: KEK file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("software backend: KEK file %s has mode %04o; it must not be accessible by group or others (chmod 600)", path, fi.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("software backend: KEK file: %w", err)
	}
	text := strings.TrimSpace(string(raw))
	text = strings.TrimRight(text, "=")
	text = strings.NewReplacer("+", "-", "/", "_").Replace(text)
	kek, err := base64.RawURLEncoding.DecodeString(text)
	if err != nil || len(kek) != KEKSize {
		return nil, fmt.Errorf("software backend: KEK file %s must hold the base64 of exactly %d random bytes", path, KEKSize)
	}
	return kek, nil
}

// CreateKEKFile writes a new random KEK to path with mode 0600, creating the
// parent directory (0700). It refuses to overwrite an existing file.
func CreateKEKFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	kek := make([]byte, KEKSize)
	if _, err := rand.Read(kek); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("software backend: KEK file %s already exists", path)
		}
		return err
	}
	_, werr := f.WriteString(base64.StdEncoding.EncodeToString(kek) + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

// Kind returns "software".
func (b *Backend) Kind() string { return Kind }

// KEKID returns the KEK identifier recorded in backend references.
func (b *Backend) KEKID() string { return b.kekID }

// CreateKey generates a key pair and seals its private half.
func (b *Backend) CreateKey(ctx context.Context, req backends.CreateRequest) (backends.Handle, error) {
	if err := ctx.Err(); err != nil {
		return backends.Handle{}, err
	}
	var secret []byte
	var pub crypto.PublicKey
	switch req.Algorithm {
	case signer.AlgEdDSA:
		p, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return backends.Handle{}, err
		}
		secret, pub = k.Seed(), p
	case signer.AlgES256:
		k, err := ecdh.P256().GenerateKey(rand.Reader)
		if err != nil {
			return backends.Handle{}, err
		}
		priv, err := ecdsaFromScalar(k.Bytes())
		if err != nil {
			return backends.Handle{}, err
		}
		secret, pub = k.Bytes(), &priv.PublicKey
	default:
		return backends.Handle{}, fmt.Errorf("%w: %q", backends.ErrUnsupportedAlgorithm, req.Algorithm)
	}
	nonce := make([]byte, nonceSize, 1+nonceSize+len(secret)+b.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return backends.Handle{}, err
	}
	sealed := append([]byte{sealVersionName}, nonce...)
	sealed = b.aead.Seal(sealed, nonce, secret, aad(sealVersionName, req.KeyName, req.KID))
	clear(secret)
	return backends.Handle{Ref: b.ref(req.KID, req.Algorithm), Sealed: sealed, Public: pub, KeyName: req.KeyName}, nil
}

func (b *Backend) ref(kid, alg string) string {
	return "software:" + url.PathEscape(kid) + "?alg=" + alg + "&kek=" + b.kekID
}

// Signer opens h.Sealed for kid (and h.KeyName, for blobs of version 0x02)
// and returns the private key as a crypto.Signer (ed25519.PrivateKey or
// *ecdsa.PrivateKey). It checks that the opened key's public half equals
// h.Public. Errors wrap backends.ErrKeyMismatch for a wrong KEK, a blob of
// another kid or key, or a public key that does not match; they never
// contain key bytes.
func (b *Backend) Signer(ctx context.Context, kid string, h backends.Handle) (crypto.Signer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(h.Sealed) < 1+nonceSize+b.aead.Overhead() || (h.Sealed[0] != sealVersionKID && h.Sealed[0] != sealVersionName) {
		return nil, fmt.Errorf("%w: %s: sealed private key is malformed", backends.ErrKeyMismatch, kid)
	}
	nonce := h.Sealed[1 : 1+nonceSize]
	secret, err := b.aead.Open(nil, nonce, h.Sealed[1+nonceSize:], aad(h.Sealed[0], h.KeyName, kid))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: cannot open the sealed private key (wrong KEK %s, or the blob belongs to another key version or key than %q)", backends.ErrKeyMismatch, kid, b.kekID, h.KeyName)
	}
	defer clear(secret)
	var s crypto.Signer
	switch len(secret) {
	case ed25519.SeedSize:
		if _, isEC := h.Public.(*ecdsa.PublicKey); isEC {
			p, err := ecdsaFromScalar(secret)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: sealed P-256 private key is not a valid scalar", backends.ErrKeyMismatch, kid)
			}
			s = p
		} else {
			s = ed25519.NewKeyFromSeed(secret)
		}
	default:
		return nil, fmt.Errorf("%w: %s: unexpected private key size", backends.ErrKeyMismatch, kid)
	}
	if !publicEqual(s.Public(), h.Public) {
		return nil, fmt.Errorf("%w: %s: private key does not match the recorded public key", backends.ErrKeyMismatch, kid)
	}
	return s, nil
}

// Close is a no-op.
func (b *Backend) Close() error { return nil }

// DestroyKey implements backends.Destroyer. The software backend keeps
// nothing outside key history: the private half is the KEK-sealed blob
// stored with the version, and the store removes it (sets it to NULL) in
// the transaction that records the destruction. DestroyKey therefore
// changes nothing; it reports AlreadyDestroyed when h carries no blob.
//
// What stays behind: every database backup (and PostgreSQL WAL archive,
// SQLite file copy) taken before the destruction still holds the sealed
// blob, and the KEK opens it. The material is only gone once those copies
// have expired, or once the KEK itself is destroyed after every key sealed
// under it has been destroyed or moved.
func (b *Backend) DestroyKey(ctx context.Context, kid string, h backends.Handle, _ backends.DestroyOptions) (backends.DestroyResult, error) {
	if err := ctx.Err(); err != nil {
		return backends.DestroyResult{}, err
	}
	if len(h.Sealed) == 0 {
		return backends.DestroyResult{AlreadyDestroyed: true, Note: "no sealed private key left in key history"}, nil
	}
	return backends.DestroyResult{Note: "sealed private key removed from key history; earlier database backups still hold it"}, nil
}

var _ backends.Destroyer = (*Backend)(nil)

func ecdsaFromScalar(d []byte) (*ecdsa.PrivateKey, error) {
	return ecdsa.ParseRawPrivateKey(elliptic.P256(), d)
}

func publicEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	ea, ok := a.(equaler)
	return ok && b != nil && ea.Equal(b)
}
