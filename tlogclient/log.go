package tlogclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"
)

// Artifact types of VRP Transparency Log v0.1 (§4.1).
const (
	ArtifactAttestation = "vrp_attestation"  // a JWS the signing API issued
	ArtifactSignedOffer = "vrp_signed_offer" // a signed offer
	ArtifactStatusEvent = "vrp_status_event" // a key-history (lifecycle) event
	ArtifactReceipt     = "vrp_receipt"      // a receipt
	ArtifactSpec        = "vrp_spec"         // a specification document
)

// LeafVersion is the leaf_version of a v0.1 leaf.
const LeafVersion = "vrp-tlog-v0.1"

// MaxAddBatch is the most entries one add-batch request may carry (the
// operator's contract, ADR 0012).
const MaxAddBatch = 10000

// MaxPromisedBatch is the default and largest number of entries the
// client sends in one add-batch (Config.MaxBatch): the Signed Entry Promise
// lists every entry, about 210 bytes each once base64url-encoded, so a
// promise of 1,000 is about 210 KB; larger batches would gain little over
// the per-request cost.
const MaxPromisedBatch = 1000

// validArtifactType reports whether t is one of the five v0.1 types.
func validArtifactType(t string) bool {
	switch t {
	case ArtifactAttestation, ArtifactSignedOffer, ArtifactStatusEvent, ArtifactReceipt, ArtifactSpec:
		return true
	}
	return false
}

// Entry is one submission: an artifact's type and the SHA-256 of its exact
// bytes (for a JWS, the compact serialization as issued, never
// re-serialized).
type Entry struct {
	ArtifactType string
	ArtifactHash [32]byte
}

// HashArtifact returns the SHA-256 of an artifact's exact bytes.
//
// The string's bytes are hashed in place: sha256.Sum256 only reads its
// argument and keeps no reference, and []byte(artifact) copied every
// signature's JWS (~600 bytes, an allocation) on the signing path
// (docs/performance.md, session 37).
func HashArtifact(artifact string) [32]byte {
	return sha256.Sum256(unsafe.Slice(unsafe.StringData(artifact), len(artifact)))
}

// FormatHash returns "sha256:" + the lower-case hex of h, the form of
// artifact_hash.
func FormatHash(h [32]byte) string { return "sha256:" + hex.EncodeToString(h[:]) }

// ParseHash parses "sha256:" + 64 lower-case hex digits.
func ParseHash(s string) ([32]byte, error) {
	var h [32]byte
	rest, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(rest) != 64 || strings.ToLower(rest) != rest {
		return h, fmt.Errorf("artifact_hash %q: want sha256: and 64 lower-case hex digits", s)
	}
	if _, err := hex.Decode(h[:], []byte(rest)); err != nil {
		return h, fmt.Errorf("artifact_hash %q: want sha256: and 64 lower-case hex digits", s)
	}
	return h, nil
}

// Promise is a checked Signed Entry Promise: the log signed that it will
// include these entries within MMD (like an RFC 6962 SCT).
type Promise struct {
	JWS       string // the SEP as received (compact JWS, typ SEPDigestType or SEPType); empty from serve's embedded log (ADR 0038 addendum)
	KID       string // the log key that signed it
	LogID     string
	Timestamp time.Time
	MMD       time.Duration
	// Entries, in request order, for a promise of typ SEPType (each entry
	// echoed with its logged_at and leaf index); nil for a digest promise.
	Entries []PromisedEntry
	// BodySHA256 is, for a digest promise (ADR 0038), the SHA-256 of the
	// add-batch body it promises (checked against the body sent).
	BodySHA256 [32]byte
}

// TypeConflictError is returned by Log.AddBatch when a log's verified
// promise echoes some submitted hashes under another artifact type: the
// log keeps one entry per artifact hash (VRP TL v0.1 proof?hash=…), and
// already held those under the type it echoes — logged earlier by anyone
// who may submit to it (a public log), or earlier in the same request.
// Such an entry can never be logged here under the type submitted, so
// resubmitting it cannot succeed. Every other entry of the request matched
// the promise; the promise itself is not returned. It wraps ErrBadPromise.
type TypeConflictError struct {
	Conflicts []TypeConflict
	// SEP is the verified promise that shows the conflicts (compact JWS;
	// empty from serve's embedded log): the log's signed statement.
	SEP string
}

// TypeConflict is one entry of a TypeConflictError: the index of the
// submitted entry, the entry, and the artifact type the log holds its hash
// under.
type TypeConflict struct {
	Index      int
	Entry      Entry
	LoggedType string
}

func (e *TypeConflictError) Error() string {
	c := e.Conflicts[0]
	return fmt.Sprintf("%v: %d entries are held by the log under another artifact type (entry %d: artifact_hash %s, submitted as %s, logged as %s)",
		ErrBadPromise, len(e.Conflicts), c.Index, FormatHash(c.Entry.ArtifactHash), c.Entry.ArtifactType, c.LoggedType)
}

func (e *TypeConflictError) Unwrap() error { return ErrBadPromise }

// PromisedEntry is one entry of a Promise.
type PromisedEntry struct {
	Entry
	LoggedAt time.Time
	// LeafIndex is the entry's index when the log sequenced it before
	// answering; -1 when the promise carries none.
	LeafIndex int64
}

// ArchivedTree is one archived Signed Tree Head of a log
// (GET sth/archive).
type ArchivedTree struct {
	TreeSize   uint64
	STH        string // compact JWS
	Checkpoint string // C2SP signed note, with the cosignatures obtained
}

// Log is one transparency log as the client uses it. HTTPLog implements it
// over the operator's HTTP endpoints.
type Log interface {
	// URL identifies the log in the outbox (its base URL, normalized):
	// every replica must configure the same string.
	URL() string
	// AddBatch submits 1..MaxAddBatch entries and returns the log's
	// Signed Entry Promise, checked against the entries.
	AddBatch(ctx context.Context, entries []Entry) (*Promise, error)
	// Proof returns the log's tlog member (the JSON object verifier
	// checks) for the artifact hash in the tree of treeSize leaves; 0
	// lets the log choose (its newest witnessed tree). ErrNotFound when
	// the leaf is not in that tree.
	Proof(ctx context.Context, hash [32]byte, treeSize uint64) ([]byte, error)
	// Archive lists at most limit archived tree heads with tree_size >
	// after, oldest first; fewer (or none) at the end of the archive.
	Archive(ctx context.Context, after uint64, limit int) ([]ArchivedTree, error)
}

// ErrNotFound: the log does not have the leaf (yet) in the tree asked
// for.
var ErrNotFound = errors.New("tlogclient: leaf not found in the log")

// LogError is an error answer of a log: its HTTP status and the stable
// code and message of its {"error":{...}} body.
type LogError struct {
	Log     string
	Status  int
	Code    string
	Message string
}

func (e *LogError) Error() string {
	return fmt.Sprintf("tlogclient: log %s answered HTTP %d %s: %s", e.Log, e.Status, e.Code, e.Message)
}
