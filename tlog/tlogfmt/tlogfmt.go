// Package tlogfmt holds the wire formats of keysvc's transparency log
// (VRP Transparency Log v0.1, the contract in docs/adr/0012): the leaf, the
// Signed Tree Head (STH), the Signed Entry Promise (SEP), the JSON bodies of
// the operator endpoints, and the log key as a JWK and as a C2SP signed-note
// verifier key. Log operators (package tlog), log clients (the node side)
// and verifiers import it; it does not import the log engine.
//
// Every JSON object this package signs or hashes is produced in its RFC
// 8785 (JCS) form: members in code-point order, integers as decimal, and
// string values restricted (and checked) to characters JCS writes without
// escapes, so the bytes are the same as jcs.Transform's (tests hold them to
// it).
package tlogfmt

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Fixed values of the v0.1 leaf and the JWS typ values.
const (
	// LeafVersion is leaf_version of every v0.1 leaf.
	LeafVersion = "vrp-tlog-v0.1"
	// TypSTH is the JWS typ of a Signed Tree Head.
	TypSTH = "vrp-tlog-sth+jwt"
	// TypSEP is the JWS typ of a Signed Entry Promise.
	TypSEP = "vrp-tlog-sep+jwt"
	// TypSEPDigest is the JWS typ of a digest Signed Entry Promise: one
	// promise for the whole body of an add-batch?promise=digest request
	// (SEPDigest; ADR 0038).
	TypSEPDigest = "vrp-tlog-sep-digest+jwt"
	// PathPrefix is the prefix of the operator's endpoints.
	PathPrefix = "/.well-known/vrp/log/v0.1/"
	// MaxBatchEntries bounds the entries of one add-batch request.
	MaxBatchEntries = 10000
	// HashSize is the size of a leaf hash, node hash and root hash
	// (SHA-256, RFC 6962 §2.1).
	HashSize = 32
)

// Artifact types of VRP Transparency Log v0.1.
const (
	ArtifactAttestation  = "vrp_attestation"
	ArtifactSignedOffer  = "vrp_signed_offer"
	ArtifactStatusEvent  = "vrp_status_event"
	ArtifactReceipt      = "vrp_receipt"
	ArtifactSpec         = "vrp_spec"
	artifactHashPrefix   = "sha256:"
	artifactHashHexChars = 64
)

// ValidArtifactType reports whether t is one of the v0.1 artifact types.
func ValidArtifactType(t string) bool {
	switch t {
	case ArtifactAttestation, ArtifactSignedOffer, ArtifactStatusEvent, ArtifactReceipt, ArtifactSpec:
		return true
	}
	return false
}

// ValidArtifactHash reports whether h is "sha256:" followed by exactly 64
// lower-case hex digits.
func ValidArtifactHash(h string) bool {
	if len(h) != len(artifactHashPrefix)+artifactHashHexChars || h[:len(artifactHashPrefix)] != artifactHashPrefix {
		return false
	}
	for _, c := range []byte(h[len(artifactHashPrefix):]) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Instant layout: RFC 3339 UTC with whole seconds, "2026-12-01T09:12:32Z".
const instantLayout = "2006-01-02T15:04:05Z"

// FormatInstant formats t as RFC 3339 UTC with whole seconds, truncating
// sub-second digits (logged_at: when the log accepted an entry).
func FormatInstant(t time.Time) string { return t.UTC().Truncate(time.Second).Format(instantLayout) }

// FormatInstantCeil formats t as RFC 3339 UTC with whole seconds, rounding
// up: a timestamp that says "no later than" (an STH or SEP timestamp) never
// claims an instant before the signed state existed.
func FormatInstantCeil(t time.Time) string {
	u := t.UTC()
	if tr := u.Truncate(time.Second); !tr.Equal(u) {
		u = tr.Add(time.Second)
	}
	return u.Format(instantLayout)
}

// ParseInstant parses an instant written by FormatInstant (RFC 3339 UTC
// "Z", whole seconds). Other RFC 3339 forms are refused: the log writes
// exactly one form, so a reader that accepts more only widens what a forged
// object may look like.
func ParseInstant(s string) (time.Time, error) {
	t, err := time.Parse(instantLayout, s)
	if err != nil || t.Format(instantLayout) != s {
		return time.Time{}, fmt.Errorf("tlogfmt: %q is not an RFC 3339 UTC instant with whole seconds", s)
	}
	return t, nil
}

// Leaf is a v0.1 leaf. Its entry data in the log (what RFC 6962 hashes as
// SHA-256(0x00 || data)) is Bytes().
type Leaf struct {
	ArtifactHash string `json:"artifact_hash"`
	ArtifactType string `json:"artifact_type"`
	LeafVersion  string `json:"leaf_version"`
	LoggedAt     string `json:"logged_at"`
}

// Check reports whether l is a well-formed v0.1 leaf.
func (l Leaf) Check() error {
	switch {
	case !ValidArtifactHash(l.ArtifactHash):
		return errors.New("tlogfmt: artifact_hash is not sha256:<64 lower-case hex>")
	case !ValidArtifactType(l.ArtifactType):
		return errors.New("tlogfmt: artifact_type is not a v0.1 artifact type")
	case l.LeafVersion != LeafVersion:
		return fmt.Errorf("tlogfmt: leaf_version is not %q", LeafVersion)
	}
	if _, err := ParseInstant(l.LoggedAt); err != nil {
		return errors.New("tlogfmt: logged_at is not an RFC 3339 UTC instant with whole seconds")
	}
	return nil
}

// Bytes returns the RFC 8785 serialization of l, the log entry data. l
// must pass Check (every value is then JCS-safe ASCII); Bytes errors
// otherwise.
func (l Leaf) Bytes() ([]byte, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	return l.AppendBytes(make([]byte, 0, 160)), nil
}

// AppendBytes appends the RFC 8785 serialization of l, which the caller has
// checked with Check, to b.
func (l Leaf) AppendBytes(b []byte) []byte {
	b = append(b, `{"artifact_hash":"`...)
	b = append(b, l.ArtifactHash...)
	b = append(b, `","artifact_type":"`...)
	b = append(b, l.ArtifactType...)
	b = append(b, `","leaf_version":"`...)
	b = append(b, l.LeafVersion...)
	b = append(b, `","logged_at":"`...)
	b = append(b, l.LoggedAt...)
	return append(b, `"}`...)
}

// ParseLeaf parses log entry data: it must be exactly the RFC 8785 form of
// a well-formed leaf (Bytes of the result equals data).
func ParseLeaf(data []byte) (Leaf, error) {
	if l, ok := parseCanonicalLeaf(data); ok {
		return l, nil
	}
	var l Leaf
	if err := decodeStrict(data, &l); err != nil {
		return Leaf{}, fmt.Errorf("tlogfmt: leaf: %w", err)
	}
	b, err := l.Bytes()
	if err != nil {
		return Leaf{}, err
	}
	if string(b) != string(data) {
		return Leaf{}, errors.New("tlogfmt: leaf is not in its RFC 8785 form")
	}
	return l, nil
}

// parseCanonicalLeaf reads data laid out exactly as AppendBytes writes it
// (the only form ParseLeaf accepts) without a JSON decoder: it cuts the
// four values at their fixed member names and accepts them only if the
// leaf is well formed and re-serializes to data byte for byte.
func parseCanonicalLeaf(data []byte) (Leaf, bool) {
	const (
		p1 = `{"artifact_hash":"`
		p2 = `","artifact_type":"`
		p3 = `","leaf_version":"` + LeafVersion + `","logged_at":"`
		p4 = `"}`
	)
	s := string(data)
	rest, ok := strings.CutPrefix(s, p1)
	if !ok || len(rest) < len(artifactHashPrefix)+artifactHashHexChars {
		return Leaf{}, false
	}
	l := Leaf{ArtifactHash: rest[:len(artifactHashPrefix)+artifactHashHexChars], LeafVersion: LeafVersion}
	if rest, ok = strings.CutPrefix(rest[len(l.ArtifactHash):], p2); !ok {
		return Leaf{}, false
	}
	if l.ArtifactType, rest, ok = strings.Cut(rest, p3); !ok {
		return Leaf{}, false
	}
	if l.LoggedAt, ok = strings.CutSuffix(rest, p4); !ok {
		return Leaf{}, false
	}
	if l.Check() != nil || string(l.AppendBytes(make([]byte, 0, len(data)))) != s {
		return Leaf{}, false
	}
	return l, true
}

// appendQuotedASCII appends s as a JSON string; s must be JCS-safe ASCII
// (checked by the caller with jcsSafe).
func appendQuotedASCII(b []byte, s string) []byte {
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// jcsSafe reports whether s is printable ASCII without '"' or '\\': RFC
// 8785 §3.2.2.2 writes such a string verbatim.
func jcsSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// maxJSONInteger is the largest integer RFC 8785 writes as plain digits
// exactly (2^53 − 1, I-JSON, RFC 7493 §2.2).
const maxJSONInteger = 1<<53 - 1

func appendUint(b []byte, v uint64) []byte { return strconv.AppendUint(b, v, 10) }
