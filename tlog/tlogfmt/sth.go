package tlogfmt

import (
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/keysvc/keysvc/signer"
)

// STH is a Signed Tree Head's payload (VRP Transparency Log v0.1): the log
// log_id committed at Timestamp to the RFC 6962 tree of TreeSize leaves
// with root RootHash. The JWS payload is the RFC 8785 form of
// {"log_id","root_hash"(unpadded base64url),"timestamp","tree_size"}.
type STH struct {
	LogID     string
	TreeSize  uint64
	RootHash  []byte // HashSize bytes
	Timestamp time.Time
}

// Payload returns the RFC 8785 payload of sth. Errors when a value cannot
// be written exactly (a log_id that needs escaping, a root of the wrong
// size, a tree_size above 2^53 − 1).
func (sth STH) Payload() ([]byte, error) {
	if !jcsSafe(sth.LogID) || sth.LogID == "" {
		return nil, errors.New("tlogfmt: log_id must be printable ASCII without '\"' or '\\'")
	}
	if len(sth.RootHash) != HashSize {
		return nil, fmt.Errorf("tlogfmt: root_hash must be %d bytes", HashSize)
	}
	if sth.TreeSize > maxJSONInteger {
		return nil, errors.New("tlogfmt: tree_size above 2^53-1")
	}
	b := make([]byte, 0, 160)
	b = append(b, `{"log_id":`...)
	b = appendQuotedASCII(b, sth.LogID)
	b = append(b, `,"root_hash":`...)
	b = appendQuotedASCII(b, b64.EncodeToString(sth.RootHash))
	b = append(b, `,"timestamp":`...)
	b = appendQuotedASCII(b, FormatInstantCeil(sth.Timestamp))
	b = append(b, `,"tree_size":`...)
	b = appendUint(b, sth.TreeSize)
	return append(b, '}'), nil
}

// SignSTH returns sth as a compact JWS (alg EdDSA, kid, typ TypSTH) signed
// by s, the log key's JWS signer. The timestamp is written rounded up to
// the second.
func SignSTH(s *signer.JWSSigner, sth STH) (string, error) {
	p, err := sth.Payload()
	if err != nil {
		return "", err
	}
	return s.Sign(p, TypSTH)
}

// sthPayload is the decoded STH payload.
type sthPayload struct {
	LogID     string  `json:"log_id"`
	RootHash  string  `json:"root_hash"`
	Timestamp string  `json:"timestamp"`
	TreeSize  *uint64 `json:"tree_size"`
}

// VerifySTH verifies an STH JWS against keys (the trusted log keys) and
// returns its payload and the key that signed it. Errors wrap ErrSignature
// for a JWS that does not verify; a payload that is not exactly an STH's
// is an error too.
func VerifySTH(jws string, keys []LogKey) (STH, LogKey, error) {
	payload, key, err := verifyJWS(jws, TypSTH, keys)
	if err != nil {
		return STH{}, LogKey{}, err
	}
	var p sthPayload
	if err := decodeStrict(payload, &p); err != nil {
		return STH{}, LogKey{}, fmt.Errorf("tlogfmt: STH payload: %w", err)
	}
	root, err := b64.DecodeString(p.RootHash)
	if err != nil || len(root) != HashSize || p.TreeSize == nil {
		return STH{}, LogKey{}, errors.New("tlogfmt: STH payload: root_hash or tree_size malformed")
	}
	ts, err := ParseInstant(p.Timestamp)
	if err != nil {
		return STH{}, LogKey{}, fmt.Errorf("tlogfmt: STH payload: timestamp: %w", err)
	}
	if p.LogID != key.Origin {
		return STH{}, LogKey{}, fmt.Errorf("tlogfmt: STH is for log %q, the key for %q", p.LogID, key.Origin)
	}
	return STH{LogID: p.LogID, TreeSize: *p.TreeSize, RootHash: root, Timestamp: ts}, key, nil
}

// SEP is a Signed Entry Promise's payload: at Timestamp the log LogID
// promised to include Entries within MMDSeconds (its maximum merge delay).
// The JWS payload is the RFC 8785 form of
// {"entries":[{"artifact_hash","artifact_type","leaf_index"?,"logged_at"}…],
// "log_id","mmd_seconds","timestamp"}.
type SEP struct {
	LogID      string
	Timestamp  time.Time
	MMDSeconds uint64
	Entries    []SEPEntry
}

// SEPEntry is one promised entry. LeafIndex is set when the log sequenced
// the entry before promising (keysvc's operator always does).
type SEPEntry struct {
	ArtifactHash string  `json:"artifact_hash"`
	ArtifactType string  `json:"artifact_type"`
	LeafIndex    *uint64 `json:"leaf_index,omitempty"`
	LoggedAt     string  `json:"logged_at"`
}

// Leaf returns the leaf e promises.
func (e SEPEntry) Leaf() Leaf {
	return Leaf{ArtifactHash: e.ArtifactHash, ArtifactType: e.ArtifactType, LeafVersion: LeafVersion, LoggedAt: e.LoggedAt}
}

// Payload returns the RFC 8785 payload of sep.
func (sep SEP) Payload() ([]byte, error) {
	if !jcsSafe(sep.LogID) || sep.LogID == "" {
		return nil, errors.New("tlogfmt: log_id must be printable ASCII without '\"' or '\\'")
	}
	if sep.MMDSeconds > maxJSONInteger {
		return nil, errors.New("tlogfmt: mmd_seconds above 2^53-1")
	}
	b := make([]byte, 0, 64+len(sep.Entries)*160)
	b = append(b, `{"entries":[`...)
	for i, e := range sep.Entries {
		if err := e.Leaf().Check(); err != nil {
			return nil, fmt.Errorf("tlogfmt: SEP entry %d: %w", i, err)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"artifact_hash":`...)
		b = appendQuotedASCII(b, e.ArtifactHash)
		b = append(b, `,"artifact_type":`...)
		b = appendQuotedASCII(b, e.ArtifactType)
		if e.LeafIndex != nil {
			if *e.LeafIndex > maxJSONInteger {
				return nil, errors.New("tlogfmt: leaf_index above 2^53-1")
			}
			b = append(b, `,"leaf_index":`...)
			b = appendUint(b, *e.LeafIndex)
		}
		b = append(b, `,"logged_at":`...)
		b = appendQuotedASCII(b, e.LoggedAt)
		b = append(b, '}')
	}
	b = append(b, `],"log_id":`...)
	b = appendQuotedASCII(b, sep.LogID)
	b = append(b, `,"mmd_seconds":`...)
	b = appendUint(b, sep.MMDSeconds)
	b = append(b, `,"timestamp":`...)
	b = appendQuotedASCII(b, FormatInstantCeil(sep.Timestamp))
	return append(b, '}'), nil
}

// SignSEP returns sep as a compact JWS (alg EdDSA, kid, typ TypSEP).
func SignSEP(s *signer.JWSSigner, sep SEP) (string, error) {
	p, err := sep.Payload()
	if err != nil {
		return "", err
	}
	return s.Sign(p, TypSEP)
}

// SEPDigest is the payload of a digest Signed Entry Promise (ADR 0038),
// the answer to POST add-batch?promise=digest: at Timestamp the log LogID
// promised to include, within MMDSeconds, each of the Count entries of the
// add-batch request body whose SHA-256 is BodySHA256 — the body's bytes
// exactly as the log received them, which the submitter hashes as it sent
// them. It binds the same entries as the echoing SEP (collision resistance
// of SHA-256) in constant size: the submitter checks one hash of its own
// body instead of reading every entry back. It carries no leaf indexes or
// logged_at; GET proof?hash= finds each leaf. The JWS payload (typ
// TypSEPDigest) is the RFC 8785 form of
// {"body_sha256":"sha256:<64 hex>","count","log_id","mmd_seconds","timestamp"}.
type SEPDigest struct {
	LogID      string
	Timestamp  time.Time
	MMDSeconds uint64
	Count      uint64
	BodySHA256 [HashSize]byte
}

// Payload returns the RFC 8785 payload of d.
func (d SEPDigest) Payload() ([]byte, error) {
	if !jcsSafe(d.LogID) || d.LogID == "" {
		return nil, errors.New("tlogfmt: log_id must be printable ASCII without '\"' or '\\'")
	}
	if d.MMDSeconds > maxJSONInteger || d.Count == 0 || d.Count > MaxBatchEntries {
		return nil, fmt.Errorf("tlogfmt: mmd_seconds above 2^53-1 or count not in 1..%d", MaxBatchEntries)
	}
	b := make([]byte, 0, 256)
	b = append(b, `{"body_sha256":"sha256:`...)
	b = hex.AppendEncode(b, d.BodySHA256[:])
	b = append(b, `","count":`...)
	b = appendUint(b, d.Count)
	b = append(b, `,"log_id":`...)
	b = appendQuotedASCII(b, d.LogID)
	b = append(b, `,"mmd_seconds":`...)
	b = appendUint(b, d.MMDSeconds)
	b = append(b, `,"timestamp":`...)
	b = appendQuotedASCII(b, FormatInstantCeil(d.Timestamp))
	return append(b, '}'), nil
}

// SignSEPDigest returns d as a compact JWS (alg EdDSA, kid, typ
// TypSEPDigest).
func SignSEPDigest(s *signer.JWSSigner, d SEPDigest) (string, error) {
	p, err := d.Payload()
	if err != nil {
		return "", err
	}
	return s.Sign(p, TypSEPDigest)
}

type sepDigestPayload struct {
	BodySHA256 string  `json:"body_sha256"`
	Count      *uint64 `json:"count"`
	LogID      string  `json:"log_id"`
	MMDSeconds *uint64 `json:"mmd_seconds"`
	Timestamp  string  `json:"timestamp"`
}

// VerifySEPDigest verifies a digest SEP JWS against keys and returns its
// payload. Errors wrap ErrSignature for a JWS that does not verify; a
// payload that verifies but is malformed is an error of its own.
func VerifySEPDigest(jws string, keys []LogKey) (SEPDigest, LogKey, error) {
	payload, key, err := verifyJWS(jws, TypSEPDigest, keys)
	if err != nil {
		return SEPDigest{}, LogKey{}, err
	}
	d, err := ParseSEPDigestPayload(payload)
	if err != nil {
		return SEPDigest{}, LogKey{}, err
	}
	if d.LogID != key.Origin {
		return SEPDigest{}, LogKey{}, fmt.Errorf("tlogfmt: SEP is for log %q, the key for %q", d.LogID, key.Origin)
	}
	return d, key, nil
}

// ParseSEPDigestPayload reads a digest SEP's payload (strict JSON: no
// unknown or duplicate members) without checking any signature; callers
// verify the JWS first.
func ParseSEPDigestPayload(payload []byte) (SEPDigest, error) {
	var p sepDigestPayload
	if err := decodeStrict(payload, &p); err != nil {
		return SEPDigest{}, fmt.Errorf("tlogfmt: SEP payload: %w", err)
	}
	ts, err := ParseInstant(p.Timestamp)
	if err != nil || p.MMDSeconds == nil || p.Count == nil || *p.Count == 0 || *p.Count > MaxBatchEntries || p.LogID == "" {
		return SEPDigest{}, errors.New("tlogfmt: SEP payload: timestamp, count, log_id or mmd_seconds malformed")
	}
	d := SEPDigest{LogID: p.LogID, Timestamp: ts, MMDSeconds: *p.MMDSeconds, Count: *p.Count}
	if !ValidArtifactHash(p.BodySHA256) {
		return SEPDigest{}, errors.New("tlogfmt: SEP payload: body_sha256 is not sha256:<64 lower-case hex>")
	}
	hex.Decode(d.BodySHA256[:], []byte(p.BodySHA256[len("sha256:"):])) //nolint:errcheck // validated above
	return d, nil
}

type sepPayload struct {
	Entries    []SEPEntry `json:"entries"`
	LogID      string     `json:"log_id"`
	MMDSeconds *uint64    `json:"mmd_seconds"`
	Timestamp  string     `json:"timestamp"`
}

// VerifySEP verifies a SEP JWS against keys and returns its payload.
// Errors wrap ErrSignature for a JWS that does not verify.
func VerifySEP(jws string, keys []LogKey) (SEP, LogKey, error) {
	payload, key, err := verifyJWS(jws, TypSEP, keys)
	if err != nil {
		return SEP{}, LogKey{}, err
	}
	var p sepPayload
	if err := decodeStrict(payload, &p); err != nil {
		return SEP{}, LogKey{}, fmt.Errorf("tlogfmt: SEP payload: %w", err)
	}
	ts, err := ParseInstant(p.Timestamp)
	if err != nil || p.MMDSeconds == nil {
		return SEP{}, LogKey{}, errors.New("tlogfmt: SEP payload: timestamp or mmd_seconds malformed")
	}
	if p.LogID != key.Origin {
		return SEP{}, LogKey{}, fmt.Errorf("tlogfmt: SEP is for log %q, the key for %q", p.LogID, key.Origin)
	}
	for i, e := range p.Entries {
		if err := e.Leaf().Check(); err != nil {
			return SEP{}, LogKey{}, fmt.Errorf("tlogfmt: SEP entry %d: %w", i, err)
		}
	}
	return SEP{LogID: p.LogID, Timestamp: ts, MMDSeconds: *p.MMDSeconds, Entries: p.Entries}, key, nil
}
