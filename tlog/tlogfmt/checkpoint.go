package tlogfmt

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"filippo.io/edwards25519"
	f_log "github.com/transparency-dev/formats/log"
	f_note "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"
)

// Checkpoint is a verified C2SP tlog-checkpoint body.
type Checkpoint struct {
	Origin   string
	TreeSize uint64
	RootHash []byte
}

// VerifyCheckpoint verifies a signed note checkpoint (C2SP signed-note,
// tlog-checkpoint) against the log key and returns its body. Other
// signature lines (witness cosignatures) are allowed and not checked here.
// Errors wrap ErrSignature when the log's signature does not verify.
func VerifyCheckpoint(text string, key LogKey) (Checkpoint, error) {
	v, err := key.NoteVerifier()
	if err != nil {
		return Checkpoint{}, err
	}
	cp, _, _, err := f_log.ParseCheckpoint([]byte(text), key.Origin, v)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%w: checkpoint: %v", ErrSignature, err)
	}
	return Checkpoint{Origin: cp.Origin, TreeSize: cp.Size, RootHash: cp.Hash}, nil
}

// Cosignature is a verified witness cosignature (C2SP tlog-cosignature,
// cosignature/v1) on a checkpoint.
type Cosignature struct {
	// Name is the witness's key name.
	Name string
	// VKey is the witness verifier key that verified it.
	VKey string
	// Timestamp is when the witness cosigned (whole seconds): the
	// checkpoint's tree existed at this instant at the latest.
	Timestamp time.Time
}

// ErrWitnessKey is the error (wrapped) of VerifyCosignatures for a
// witness key list that is wrong in itself: a key that does not parse, or
// one public key listed twice (under the same name or another), which
// would count one witness twice toward a quorum. It is the caller's
// configuration, not the log, that is at fault.
var ErrWitnessKey = errors.New("tlogfmt: witness keys")

// VerifyCosignatures returns the cosignatures on the checkpoint text that
// verify under witnessVKeys (C2SP signed-note verifier keys of type 0x04,
// cosignature/v1, or plain Ed25519 0x01 keys, which are read as the
// witness's cosignature/v1 key), at most one per witness. A witness is
// its public key: a cosignature/v1 signature covers the timestamp and the
// checkpoint body, not the key name, so one witness's line can be copied
// under any name, and a list naming one public key twice is refused
// (ErrWitnessKey) rather than counted twice. Each key is checked on its
// own, so a key whose cosignature is absent or does not verify is left
// out and the others still count. Errors: ErrWitnessKey (wrapped) for a
// malformed or repeated key; ErrSignature (wrapped) when the note itself
// is malformed or no key verifies.
func VerifyCosignatures(text string, witnessVKeys []string) ([]Cosignature, error) {
	type witness struct {
		vkey string
		v    note.Verifier
	}
	var ws []witness
	byKey := map[string]string{}
	for _, vk := range witnessVKeys {
		v, err := f_note.NewVerifierForCosignatureV1(vk)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", ErrWitnessKey, vk, err)
		}
		pub, err := WitnessPublicKey(vk)
		if err != nil {
			return nil, err
		}
		if other, ok := byKey[string(pub)]; ok {
			return nil, fmt.Errorf("%w: %q and %q are one public key, one witness, listed twice", ErrWitnessKey, other, vk)
		}
		byKey[string(pub)] = vk
		ws = append(ws, witness{vk, v})
	}
	var out []Cosignature
	for _, w := range ws {
		n, err := note.Open([]byte(text), note.VerifierList(w.v))
		var unverified *note.UnverifiedNoteError
		var invalid *note.InvalidSignatureError
		switch {
		case errors.As(err, &unverified), errors.As(err, &invalid):
			continue // no cosignature by this witness, or one that does not verify
		case err != nil:
			return nil, fmt.Errorf("%w: %v", ErrSignature, err)
		}
		// note.Open keeps one signature per verifier: this witness's.
		ts, err := f_note.CoSigV1Timestamp(n.Sigs[0])
		if err != nil {
			return nil, fmt.Errorf("%w: cosignature of %s: %v", ErrSignature, n.Sigs[0].Name, err)
		}
		if ts.Unix() < 0 {
			// A timestamp of 2^63 seconds or more, which the library's
			// int64 conversion reads as before 1970: no time a witness
			// can have meant. Left out like a cosignature that does not
			// verify, so that it neither makes a tree look current nor
			// moves the NOT LOGGED cutoff back to 1970.
			continue
		}
		out = append(out, Cosignature{Name: n.Sigs[0].Name, VKey: w.vkey, Timestamp: ts.UTC()})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no witness cosignature verifies", ErrSignature)
	}
	return out, nil
}

// WitnessPublicKey returns the Ed25519 public key of a witness verifier
// key ("<name>+<hash>+<base64 of the type byte 0x01 or 0x04 and the 32-byte
// key>", C2SP signed-note): what identifies the witness, whatever name a
// list gives it. Errors wrap ErrWitnessKey.
func WitnessPublicKey(vkey string) (ed25519.PublicKey, error) {
	parts := strings.SplitN(vkey, "+", 3) // the name holds no '+'; the base64 may
	if len(parts) != 3 {
		return nil, fmt.Errorf("%w: %q is not a verifier key", ErrWitnessKey, vkey)
	}
	b, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(b) != 1+ed25519.PublicKeySize || (b[0] != 0x01 && b[0] != 0x04) {
		return nil, fmt.Errorf("%w: %q is not an Ed25519 or cosignature/v1 verifier key", ErrWitnessKey, vkey)
	}
	if err := checkEd25519Point(b[1:]); err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrWitnessKey, vkey, err)
	}
	return ed25519.PublicKey(b[1:]), nil
}

// checkEd25519Point refuses an Ed25519 public key (RFC 8032 §5.1.5
// encoding) that is not a point of edwards25519, or is one of small order
// (its multiple by the cofactor 8 is the identity). Under a small-order
// key a signature can be made without any private key — with the identity
// point, R = identity and S = 0 verify for every message — so a witness
// or log configured with one would let anyone cosign or sign for it.
func checkEd25519Point(pub []byte) error {
	p, err := new(edwards25519.Point).SetBytes(pub)
	if err != nil {
		return errors.New("the key is not a point of edwards25519")
	}
	if new(edwards25519.Point).MultByCofactor(p).Equal(edwards25519.NewIdentityPoint()) == 1 {
		return errors.New("the key is a point of small order, under which anyone can sign")
	}
	return nil
}
