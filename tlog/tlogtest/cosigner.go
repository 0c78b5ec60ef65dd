package tlogtest

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"time"
)

// Cosigner is a witness that cosigns checkpoints (C2SP tlog-cosignature,
// cosignature/v1), written out from the specification rather than taken
// from a library, so that the code under test is checked against the text:
// the signed message is "cosignature/v1\ntime <T>\n" followed by the
// checkpoint body, and the signature is the 8-byte big-endian T followed
// by the Ed25519 signature. The key name is not signed, so one key can be
// made to sign under any name (a test of how witnesses are counted).
type Cosigner struct {
	name string
	priv ed25519.PrivateKey
	at   time.Time
}

// NewCosigner returns the cosigner of name with the Ed25519 key whose seed
// is seed repeated 32 times, cosigning at the zero time until At.
func NewCosigner(name string, seed byte) Cosigner {
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = seed
	}
	return Cosigner{name: name, priv: ed25519.NewKeyFromSeed(s)}
}

// As returns c's key under another name.
func (c Cosigner) As(name string) Cosigner { c.name = name; return c }

// At returns c cosigning at t (whole seconds).
func (c Cosigner) At(t time.Time) Cosigner { c.at = t; return c }

// Public returns c's Ed25519 public key.
func (c Cosigner) Public() ed25519.PublicKey { return c.priv.Public().(ed25519.PublicKey) }

// Name is the key name (note.Signer).
func (c Cosigner) Name() string { return c.name }

// KeyHash is the first four bytes of SHA-256(name, "\n", 0x04, public
// key), big-endian (C2SP signed-note, tlog-cosignature).
func (c Cosigner) KeyHash() uint32 {
	h := sha256.Sum256(append([]byte(c.name+"\n\x04"), c.Public()...))
	return binary.BigEndian.Uint32(h[:4])
}

// Sign cosigns the checkpoint body msg at c's time (note.Signer).
func (c Cosigner) Sign(msg []byte) ([]byte, error) {
	ts := uint64(c.at.Unix()) // a time before 1970 signs as the uint64 it wraps to (≥ 2^63)
	sig := binary.BigEndian.AppendUint64(nil, ts)
	return append(sig, ed25519.Sign(c.priv, fmt.Appendf(nil, "cosignature/v1\ntime %d\n%s", ts, msg))...), nil
}

// VKey is c's verifier key: "<name>+<hash>+<base64 of 0x04 and the key>".
func (c Cosigner) VKey() string {
	return fmt.Sprintf("%s+%08x+%s", c.name, c.KeyHash(), base64.StdEncoding.EncodeToString(append([]byte{4}, c.Public()...)))
}

// Line returns the signed-note signature line of c's cosignature of body
// at t: "— <name> <base64 of key hash and signature>\n".
func (c Cosigner) Line(body string, t time.Time) string {
	sig, _ := c.At(t).Sign([]byte(body))
	b := binary.BigEndian.AppendUint32(nil, c.KeyHash())
	return "— " + c.name + " " + base64.StdEncoding.EncodeToString(append(b, sig...)) + "\n"
}
