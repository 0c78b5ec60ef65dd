package tlogfmt

import (
	"errors"
	"fmt"
	"time"

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

// VerifyCosignatures returns the cosignatures on the checkpoint text that
// verify under witnessVKeys (C2SP signed-note verifier keys of type 0x04,
// cosignature/v1, or plain Ed25519 0x01 keys, which are read as the
// witness's cosignature/v1 key). Keys whose cosignature is absent or
// invalid are left out; it errors only when no key verifies or a key is
// malformed.
func VerifyCosignatures(text string, witnessVKeys []string) ([]Cosignature, error) {
	var verifiers []note.Verifier
	byName := map[string]string{}
	for _, vk := range witnessVKeys {
		v, err := f_note.NewVerifierForCosignatureV1(vk)
		if err != nil {
			return nil, fmt.Errorf("tlogfmt: witness key %q: %v", vk, err)
		}
		verifiers = append(verifiers, v)
		byName[fmt.Sprintf("%s+%08x", v.Name(), v.KeyHash())] = vk
	}
	n, err := note.Open([]byte(text), note.VerifierList(verifiers...))
	if err != nil {
		var unverified *note.UnverifiedNoteError
		if errors.As(err, &unverified) {
			return nil, fmt.Errorf("%w: no witness cosignature verifies", ErrSignature)
		}
		return nil, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	var out []Cosignature
	for _, s := range n.Sigs {
		ts, err := f_note.CoSigV1Timestamp(s)
		if err != nil {
			return nil, fmt.Errorf("%w: cosignature of %s: %v", ErrSignature, s.Name, err)
		}
		out = append(out, Cosignature{Name: s.Name, VKey: byName[fmt.Sprintf("%s+%08x", s.Name, s.Hash)], Timestamp: ts.UTC()})
	}
	return out, nil
}
