package verifier

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// The fixed values of a VRP Transparency Log v0.1 leaf.
const (
	// TlogLeafVersion is the leaf_version of a v0.1 leaf.
	TlogLeafVersion = "vrp-tlog-v0.1"
	// TlogArtifactType is the artifact_type of a logged attestation
	// signature.
	TlogArtifactType = "vrp_attestation"
	// TlogHashSize is the size of a leaf hash, tree node and root hash
	// (SHA-256, RFC 6962 §2.1).
	TlogHashSize = sha256.Size
	// MaxInclusionProofHashes bounds an inclusion proof: a tree of at most
	// 2^64 leaves has audit paths of at most 64 hashes.
	MaxInclusionProofHashes = 64
)

// ErrTlog reports a tlog member that does not anchor the signature: it is
// malformed, its Signed Tree Head does not verify against the log keys, or
// its inclusion proof does not lead to the signed root. VerifyTlog's errors
// wrap it.
var ErrTlog = errors.New("tlog proof does not verify")

// TlogAnchor is what a verified tlog member shows: the leaf for the
// attestation's signature is in the log's tree of TreeSize leaves whose
// Signed Tree Head the log signed with timestamp Timestamp.
type TlogAnchor struct {
	// LogID is the log's identifier (tlog.log_id, equal to the STH's).
	LogID string
	// LeafIndex and TreeSize locate the leaf in the signed tree.
	LeafIndex, TreeSize uint64
	// RootHash is the signed tree's root hash (TlogHashSize bytes).
	RootHash []byte
	// Timestamp is the STH timestamp: the signature existed at this
	// instant at the latest.
	Timestamp time.Time
	// LoggedAt is the leaf's logged_at.
	LoggedAt time.Time
	// LogKeyID is the kid of the log key that verified the STH.
	LogKeyID string
	// Checkpoint is true when the tlog member carries a checkpoint: the
	// C2SP signed note of the same tree, signed by the same log key, which
	// witnesses cosign.
	Checkpoint bool
	// Cosignatures are the checkpoint's cosignatures by trusted witnesses
	// that verified (none without a checkpoint or trusted witnesses).
	Cosignatures []Cosignature
}

// VerifyTlog verifies a tlog member (tlog, the JSON object as it appears in
// the attestation) for the attestation signature signature (the compact JWS
// string exactly as received), against logKeys, the public keys of the
// transparency logs the caller trusts. The format and every check are in
// the package documentation (VRP Transparency Log v0.1, §4.1 and §8). Only
// Ed25519 keys of logKeys (usable for EdDSA, RFC 8037) sign Signed Tree
// Heads; logKeys must never hold a node's signing keys. When the member
// carries a checkpoint, it must verify too, and the cosignatures of
// witnesses that verify are in the anchor. The error wraps ErrTlog.
func VerifyTlog(tlog []byte, signature string, logKeys *JWKS, witnesses ...*WitnessKey) (*TlogAnchor, error) {
	v, err := decodeStrict(tlog)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTlog, err)
	}
	return verifyTlog(v, signature, logKeys, witnesses)
}

// VerifyTlogArtifact is VerifyTlog for a leaf of another v0.1 artifact
// type (e.g. "vrp_status_event", a key-history event, ADR 0016): the leaf
// must carry artifactType and the SHA-256 of artifact's exact bytes.
func VerifyTlogArtifact(tlog []byte, artifactType, artifact string, logKeys *JWKS, witnesses ...*WitnessKey) (*TlogAnchor, error) {
	v, err := decodeStrict(tlog)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTlog, err)
	}
	return verifyTlogType(v, artifactType, artifact, logKeys, witnesses)
}

// verifyTlog is VerifyTlog on a decoded tlog value (decodeStrict's model).
func verifyTlog(v any, signature string, logKeys *JWKS, witnesses []*WitnessKey) (*TlogAnchor, error) {
	return verifyTlogType(v, TlogArtifactType, signature, logKeys, witnesses)
}

func verifyTlogType(v any, artifactType, signature string, logKeys *JWKS, witnesses []*WitnessKey) (*TlogAnchor, error) {
	bad := func(format string, args ...any) (*TlogAnchor, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{ErrTlog}, args...)...)
	}
	tl, ok := v.(map[string]any)
	if !ok {
		return bad("tlog is not an object")
	}
	logID, ok := tl["log_id"].(string)
	if !ok || logID == "" {
		return bad("log_id is not a non-empty string")
	}
	leafIndex, ok := jsonUint(tl["leaf_index"])
	if !ok {
		return bad("leaf_index is not a non-negative integer")
	}
	treeSize, ok := jsonUint(tl["tree_size"])
	if !ok || leafIndex >= treeSize {
		return bad("tree_size is not an integer above leaf_index")
	}
	path, err := inclusionPath(tl["inclusion_proof"])
	if err != nil {
		return bad("inclusion_proof: %v", err)
	}
	leaf, ok := tl["leaf"].(map[string]any)
	if !ok {
		return bad("leaf is not an object")
	}
	loggedAt, err := checkLeaf(leaf, artifactType, signature)
	if err != nil {
		return bad("leaf: %v", err)
	}
	sthJWS, ok := tl["sth"].(string)
	if !ok {
		return bad("sth is not a string")
	}
	sth, err := verifySTH(sthJWS, logKeys)
	if err != nil {
		return bad("sth: %v", err)
	}
	if sth.logID != logID || sth.treeSize != treeSize {
		return bad("sth is for log %q size %d, the proof for log %q size %d", sth.logID, sth.treeSize, logID, treeSize)
	}
	if loggedAt.After(sth.timestamp) {
		return bad("leaf logged_at is after the STH timestamp")
	}

	// RFC 6962 §2.1: the leaf hash is SHA-256(0x00 || leaf bytes); the leaf
	// bytes are the RFC 8785 serialization of the leaf object.
	leafJSON, err := json.Marshal(leaf)
	if err != nil {
		return bad("leaf: %v", err)
	}
	leafBytes, err := jcs.Transform(leafJSON)
	if err != nil {
		return bad("leaf: RFC 8785: %v", err)
	}
	leafHash := rfc6962.DefaultHasher.HashLeaf(leafBytes)
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, leafIndex, treeSize, leafHash, path, sth.rootHash); err != nil {
		return bad("inclusion proof: %v", err)
	}
	anchor := &TlogAnchor{
		LogID: logID, LeafIndex: leafIndex, TreeSize: treeSize, RootHash: sth.rootHash,
		Timestamp: sth.timestamp, LoggedAt: loggedAt, LogKeyID: sth.kid,
	}
	if cpv, ok := tl["checkpoint"]; ok {
		text, ok := cpv.(string)
		if !ok {
			return bad("checkpoint is not a string")
		}
		cs, err := verifyCheckpoint(text, logID, sth.pub, treeSize, sth.rootHash, witnesses)
		if err != nil {
			return bad("checkpoint: %v", err)
		}
		anchor.Checkpoint, anchor.Cosignatures = true, cs
	}
	return anchor, nil
}

// checkLeaf checks a v0.1 leaf: exactly the members leaf_version,
// logged_at, artifact_type and artifact_hash, with the fixed values, an
// RFC 3339 logged_at, and artifact_hash "sha256:" + lower-case hex of the
// SHA-256 of signature's bytes. It returns logged_at.
func checkLeaf(leaf map[string]any, artifactType, signature string) (time.Time, error) {
	if len(leaf) != 4 {
		return time.Time{}, fmt.Errorf("%d members, want leaf_version, logged_at, artifact_type, artifact_hash", len(leaf))
	}
	if leaf["leaf_version"] != TlogLeafVersion {
		return time.Time{}, fmt.Errorf("leaf_version is not %q", TlogLeafVersion)
	}
	if leaf["artifact_type"] != artifactType {
		return time.Time{}, fmt.Errorf("artifact_type is not %q", artifactType)
	}
	s, _ := leaf["logged_at"].(string)
	loggedAt, err := ParseInstant(s)
	if err != nil {
		return time.Time{}, errors.New("logged_at is not an RFC 3339 date-time")
	}
	sum := sha256.Sum256([]byte(signature))
	if leaf["artifact_hash"] != "sha256:"+hex.EncodeToString(sum[:]) {
		return time.Time{}, errors.New("artifact_hash is not the SHA-256 of the attestation's signature")
	}
	return loggedAt, nil
}

// inclusionPath decodes an inclusion proof: an array of at most
// MaxInclusionProofHashes strings, each the unpadded base64url of a
// TlogHashSize-byte hash.
func inclusionPath(v any) ([][]byte, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, errors.New("not an array")
	}
	if len(arr) > MaxInclusionProofHashes {
		return nil, fmt.Errorf("%d hashes, at most %d", len(arr), MaxInclusionProofHashes)
	}
	path := make([][]byte, len(arr))
	for i, e := range arr {
		s, _ := e.(string)
		b, err := decodeSegment(s)
		if err != nil || len(b) != TlogHashSize {
			return nil, fmt.Errorf("hash %d is not %d base64url bytes", i, TlogHashSize)
		}
		path[i] = b
	}
	return path, nil
}

// signedTreeHead is a verified STH payload.
type signedTreeHead struct {
	logID     string
	treeSize  uint64
	rootHash  []byte
	timestamp time.Time
	kid       string
	pub       ed25519.PublicKey // the log key that verified it
}

// verifySTH verifies an STH: a compact JWS with alg EdDSA and a kid naming
// an Ed25519 key of logKeys, whose payload holds log_id (string),
// tree_size (integer), root_hash (base64url, TlogHashSize bytes) and
// timestamp (RFC 3339). Other payload members are ignored.
func verifySTH(jws string, logKeys *JWKS) (*signedTreeHead, error) {
	ed := &JWKS{}
	if logKeys != nil {
		for _, k := range logKeys.Keys {
			if k != nil && k.usableFor(AlgEdDSA) {
				ed.Keys = append(ed.Keys, k)
			}
		}
	}
	v, err := VerifyCompactJWS(jws, ed)
	if err != nil {
		return nil, err
	}
	if v.Algorithm != AlgEdDSA || v.KID == "" {
		return nil, errors.New("not an EdDSA JWS with a kid")
	}
	p, err := decodeStrictObject(v.Payload)
	if err != nil {
		return nil, err
	}
	pub, ok := v.Key.Public.(ed25519.PublicKey)
	if !ok {
		return nil, errors.New("not verified by an Ed25519 key")
	}
	sth := &signedTreeHead{kid: v.KID, pub: pub}
	if sth.logID, ok = p["log_id"].(string); !ok {
		return nil, errors.New("log_id is not a string")
	}
	if sth.treeSize, ok = jsonUint(p["tree_size"]); !ok {
		return nil, errors.New("tree_size is not a non-negative integer")
	}
	root, _ := p["root_hash"].(string)
	if sth.rootHash, err = decodeSegment(root); err != nil || len(sth.rootHash) != TlogHashSize {
		return nil, fmt.Errorf("root_hash is not %d base64url bytes", TlogHashSize)
	}
	ts, _ := p["timestamp"].(string)
	if sth.timestamp, err = ParseInstant(ts); err != nil {
		return nil, errors.New("timestamp is not an RFC 3339 date-time")
	}
	return sth, nil
}

// jsonUint reads a JSON number (json.Number in decodeStrict's model) that
// is a non-negative integer literal without fraction or exponent and fits
// in 64 bits.
func jsonUint(v any) (uint64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	u, err := strconv.ParseUint(string(n), 10, 64)
	return u, err == nil
}

// trustedLogKeys returns the keys of logKeys that may sign STHs in a
// lifecycle-aware verification against h: Ed25519 keys whose public key is
// not the key of any version of h. A node key is never a log key, even if
// the caller lists it as one (VRP Transparency Log v0.1 §8: the log key is
// separate from signing keys).
func trustedLogKeys(logKeys *JWKS, h *KeyHistory) *JWKS {
	out := &JWKS{Keys: []*JWK{}}
	if logKeys == nil {
		return out
	}
	var node []ed25519.PublicKey
	if h != nil {
		keys := append([]*JWK(nil), h.loaded...)
		for _, v := range h.Versions {
			if v != nil {
				keys = append(keys, v.JWK)
			}
		}
		for _, k := range keys {
			if k == nil {
				continue
			}
			if pub, ok := k.Public.(ed25519.PublicKey); ok {
				node = append(node, pub)
			}
		}
	}
next:
	for _, k := range logKeys.Keys {
		if k == nil || !k.usableFor(AlgEdDSA) {
			continue
		}
		pub, ok := k.Public.(ed25519.PublicKey)
		if !ok {
			continue
		}
		for _, n := range node {
			if bytes.Equal(pub, n) {
				continue next
			}
		}
		out.Keys = append(out.Keys, k)
	}
	return out
}

// SignedTreeHead is a verified Signed Tree Head (VRP Transparency Log
// v0.1): an EdDSA compact JWS over {log_id, tree_size, root_hash,
// timestamp} by a log key.
type SignedTreeHead struct {
	LogID     string
	TreeSize  uint64
	RootHash  []byte // TlogHashSize bytes
	Timestamp time.Time
	KeyID     string // kid of the log key that verified it
}

// VerifySTH verifies an STH (a compact JWS, alg EdDSA, with a kid) against
// the Ed25519 keys of logKeys; the payload must hold log_id, tree_size,
// root_hash (unpadded base64url of 32 bytes) and timestamp (RFC 3339).
func VerifySTH(jws string, logKeys *JWKS) (*SignedTreeHead, error) {
	s, err := verifySTH(jws, logKeys)
	if err != nil {
		return nil, fmt.Errorf("%w: sth: %v", ErrTlog, err)
	}
	return &SignedTreeHead{LogID: s.logID, TreeSize: s.treeSize, RootHash: s.rootHash, Timestamp: s.timestamp, KeyID: s.kid}, nil
}

// ErrInconsistent reports a log that contradicts itself: a newer tree head
// that does not extend the anchor's tree (RFC 9162 §2.1.4), or is smaller.
var ErrInconsistent = errors.New("transparency log is inconsistent")

// VerifyConsistency checks that newer (a tree head of the same log,
// verified with VerifySTH) extends the tree of anchor: same root when the
// sizes are equal, else consistencyProof (the RFC 9162 §2.1.4 proof from
// anchor.TreeSize to newer.TreeSize, as the log's consistency endpoint
// returns it) verifies with transparency-dev/merkle. The error wraps
// ErrInconsistent.
func VerifyConsistency(anchor *TlogAnchor, newer *SignedTreeHead, consistencyProof [][]byte) error {
	switch {
	case newer.LogID != anchor.LogID:
		return fmt.Errorf("%w: tree heads of logs %q and %q", ErrInconsistent, anchor.LogID, newer.LogID)
	case newer.TreeSize < anchor.TreeSize:
		return fmt.Errorf("%w: newer tree of %d leaves is smaller than the proof's %d", ErrInconsistent, newer.TreeSize, anchor.TreeSize)
	case len(consistencyProof) > 2*MaxInclusionProofHashes:
		return fmt.Errorf("%w: consistency proof of %d hashes", ErrInconsistent, len(consistencyProof))
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, anchor.TreeSize, newer.TreeSize, consistencyProof, anchor.RootHash, newer.RootHash); err != nil {
		return fmt.Errorf("%w: trees of %d and %d leaves: %v", ErrInconsistent, anchor.TreeSize, newer.TreeSize, err)
	}
	return nil
}
