package verifier

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"strings"
	"time"

	f_log "github.com/transparency-dev/formats/log"
	f_note "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"

	"github.com/keysvc/keysvc/tlog/tlogfmt"
)

// MaxCheckpointBytes bounds the checkpoint member of a tlog proof (a C2SP
// signed note allows at most 100 signature lines; x/mod/sumdb/note refuses
// more).
const MaxCheckpointBytes = 64 << 10

// WitnessKey is a transparency-log witness the verifier trusts: its C2SP
// signed-note verifier key for timestamped cosignatures (C2SP
// tlog-cosignature, cosignature/v1).
type WitnessKey struct {
	// VKey is the verifier key as given, "<name>+<hash>+<base64 key>".
	VKey string
	// Name is the witness's key name, as it appears on cosignature lines.
	Name string
	v    note.Verifier
	// pub is the witness's public key: what makes two keys one witness,
	// whatever their names (a cosignature/v1 signature does not cover
	// the name).
	pub string
}

// ParseWitnessKey parses a witness verifier key: a cosignature/v1 key
// (algorithm 0x04) or an Ed25519 key (0x01), which is read as that
// witness's cosignature/v1 key (transparency-dev/formats
// note.NewVerifierForCosignatureV1).
func ParseWitnessKey(vkey string) (*WitnessKey, error) {
	vkey = strings.TrimSpace(vkey)
	v, err := f_note.NewVerifierForCosignatureV1(vkey)
	if err != nil {
		return nil, fmt.Errorf("witness key %q: %v", vkey, err)
	}
	pub, err := tlogfmt.WitnessPublicKey(vkey)
	if err != nil {
		return nil, err
	}
	return &WitnessKey{VKey: vkey, Name: v.Name(), v: v, pub: string(pub)}, nil
}

// ParseWitnessKeys parses a witness key file: one verifier key per line;
// blank lines and lines starting with # are ignored. One public key twice,
// under the same name or another, is an error: it is one witness, and
// would count twice toward a quorum (a cosignature/v1 line can be copied
// under any name, since the signature does not cover it).
func ParseWitnessKeys(text []byte) ([]*WitnessKey, error) {
	var out []*WitnessKey
	seen := map[string]int{} // public key -> line
	for i, line := range strings.Split(string(text), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := ParseWitnessKey(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		if first, ok := seen[k.pub]; ok {
			return nil, fmt.Errorf("line %d: witness key %s is the public key of line %d again: one witness, listed twice", i+1, k.Name, first)
		}
		seen[k.pub] = i + 1
		out = append(out, k)
	}
	return out, nil
}

// Cosignature is a verified witness cosignature on a tlog proof's
// checkpoint.
type Cosignature struct {
	// Witness is the witness key that verified it.
	Witness *WitnessKey
	// Timestamp is the cosignature's time (whole seconds, as the witness
	// wrote it): the witness saw the checkpoint's tree during the second
	// that starts here.
	Timestamp time.Time
}

// Before reports whether the cosignature was made strictly before t: the
// witness wrote its clock truncated to the second, so the cosignature was
// made before Timestamp + 1 s, and that must not be after t.
func (c Cosignature) Before(t time.Time) bool { return !c.Timestamp.Add(time.Second).After(t) }

// verifyCheckpoint verifies a tlog proof's checkpoint (C2SP signed-note
// with a tlog-checkpoint body): signed by the log key logPub under the key
// name logID (the origin line, which must be logID too), for a tree of
// treeSize leaves with root root, as the STH says. It returns the
// cosignatures of witnesses that verify (x/mod/sumdb/note; a cosignature
// of a trusted witness that does not verify fails the whole checkpoint).
func verifyCheckpoint(text, logID string, logPub ed25519.PublicKey, treeSize uint64, root []byte, witnesses []*WitnessKey) ([]Cosignature, error) {
	if len(text) > MaxCheckpointBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxCheckpointBytes)
	}
	vkey, err := note.NewEd25519VerifierKey(logID, logPub)
	if err != nil {
		return nil, fmt.Errorf("log key under the name %q: %v", logID, err)
	}
	logV, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, err
	}
	others := make([]note.Verifier, 0, len(witnesses))
	for _, w := range witnesses {
		if w.v.Name() == logV.Name() && w.v.KeyHash() == logV.KeyHash() {
			continue // a log key listed as a witness is still the log
		}
		others = append(others, w.v)
	}
	cp, _, n, err := f_log.ParseCheckpoint([]byte(text), logID, logV, others...)
	if err != nil {
		return nil, err
	}
	if cp.Size != treeSize || !bytes.Equal(cp.Hash, root) {
		return nil, fmt.Errorf("checkpoint is for a tree of %d leaves with another root than the STH's (%d)", cp.Size, treeSize)
	}
	var out []Cosignature
	for _, s := range n.Sigs {
		for _, w := range witnesses {
			if s.Name != w.v.Name() || s.Hash != w.v.KeyHash() {
				continue
			}
			ts, err := f_note.CoSigV1Timestamp(s)
			if err != nil {
				return nil, fmt.Errorf("cosignature of %s: %v", s.Name, err)
			}
			out = append(out, Cosignature{Witness: w, Timestamp: ts.UTC()})
		}
	}
	return out, nil
}

// countBefore returns how many distinct witnesses — public keys, not key
// names — cosigned strictly before t.
func countBefore(cs []Cosignature, t time.Time) int {
	seen := map[string]bool{}
	for _, c := range cs {
		if c.Before(t) {
			seen[c.Witness.pub] = true
		}
	}
	return len(seen)
}
