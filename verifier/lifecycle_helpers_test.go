package verifier

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// seededEdKey is newEdKey with a key derived from seed, so fuzz corpora
// and fixtures stay valid across runs.
func seededEdKey(kid string, seed byte) edKey {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
	jwk := map[string]any{"kty": "OKP", "crv": "Ed25519", "x": b64u(priv.Public().(ed25519.PublicKey)), "alg": "EdDSA", "use": "sig", "kid": kid}
	return edKey{kid: kid, priv: priv, jwk: jwk}
}

// entry is a key-history entry: k's public JWK plus lifecycle members
// given as name, value pairs.
func entry(k edKey, status string, members ...string) map[string]any {
	e := map[string]any{}
	for n, v := range k.jwk {
		e[n] = v
	}
	e["vrp_key_status"] = status
	e["vrp_backend"] = "software"
	for i := 0; i+1 < len(members); i += 2 {
		e[members[i]] = members[i+1]
	}
	return e
}

// historyOf builds a key-history document in keysvc's shape.
func historyOf(t testing.TB, entries ...map[string]any) ([]byte, *KeyHistory) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"issuer": "ex.test", "key": "main", "keys": entries})
	if err != nil {
		t.Fatal(err)
	}
	h, err := ParseKeyHistory(b)
	if err != nil {
		t.Fatal(err)
	}
	return b, h
}

// The lifecycle fixture: one key with four versions and one trusted log.
//
//	revoked  2026-03-01 .. 2026-04-01, compromised 2026-03-20
//	retired  2026-04-01 .. 2026-06-01
//	active   2026-06-01 ..
//	pending  (scheduled 2026-07-01)
const (
	revokedNotBefore = "2026-03-01T00:00:00Z"
	revokedNotAfter  = "2026-04-01T00:00:00Z"
	compromisedAt    = "2026-03-20T00:00:00Z"
	retiredNotBefore = "2026-04-01T00:00:00Z"
	retiredNotAfter  = "2026-06-01T00:00:00Z"
	activeNotBefore  = "2026-06-01T00:00:00Z"
	pendingNotBefore = "2026-07-01T00:00:00Z"
	testLogID        = "did:web:log.example"
)

type lcFixture struct {
	active, retired, revoked, pending edKey
	log, rogueLog                     edKey
	historyJSON                       []byte
	history                           *KeyHistory
	logKeys                           *JWKS
}

func newLCFixture(t testing.TB) *lcFixture {
	t.Helper()
	f := &lcFixture{
		revoked:  seededEdKey("ex.test-2026-03-01-01", 1),
		retired:  seededEdKey("ex.test-2026-04-01-01", 2),
		active:   seededEdKey("ex.test-2026-06-01-01", 3),
		pending:  seededEdKey("ex.test-2026-07-01-01", 4),
		log:      seededEdKey("log.example-2026-01-01-01", 5),
		rogueLog: seededEdKey("log.example-2026-01-01-01", 6), // same kid, other key
	}
	f.historyJSON, f.history = historyOf(t,
		entry(f.revoked, KeyStatusRevoked, "vrp_not_before", revokedNotBefore, "vrp_not_after", revokedNotAfter,
			"vrp_compromised_at", compromisedAt, "vrp_revocation_reason", "key_compromise"),
		entry(f.retired, KeyStatusRetired, "vrp_not_before", retiredNotBefore, "vrp_not_after", retiredNotAfter),
		entry(f.active, KeyStatusActive, "vrp_not_before", activeNotBefore),
		entry(f.pending, KeyStatusPending, "vrp_not_before", pendingNotBefore),
	)
	if len(f.history.Versions) != 4 || len(f.history.Skipped) != 0 {
		t.Fatalf("fixture history: %d versions, skipped %v", len(f.history.Versions), f.history.Skipped)
	}
	f.logKeys = jwksOf(t, f.log.jwk)
	return f
}

// opts is the lifecycle-aware verification with the fixture's log trusted.
func (f *lcFixture) opts() Options {
	return Options{History: f.history, LogKeys: f.logKeys}
}

// mustTime parses an RFC 3339 instant.
func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	tm, err := ParseInstant(s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// attAt is an attestation claiming signing time from (its valid_from),
// valid for one hour.
func attAt(t testing.TB, layer, sig, from string) map[string]any {
	a := att(layer, sig)
	a["valid_from"] = from
	a["valid_until"] = mustTime(t, from).Add(time.Hour).UTC().Format(time.RFC3339Nano)
	return a
}

// verifyFresh verifies a one-attestation receipt with opts judged 30
// minutes after the attestation's valid_from, so freshness never fails.
func verifyFresh(t *testing.T, a map[string]any, opts Options) AttestationResult {
	t.Helper()
	opts.Now = mustTime(t, a["valid_from"].(string)).Add(30 * time.Minute)
	return verifyOne(t, receiptOf(t, a), opts)
}

// RFC 6962 §2.1 Merkle tree over leaf data, written out from the RFC text
// so the verifier's use of transparency-dev/merkle is checked against an
// independent implementation.

func leafHash(data []byte) []byte {
	h := sha256.Sum256(append([]byte{0x00}, data...))
	return h[:]
}

func nodeHash(l, r []byte) []byte {
	h := sha256.Sum256(append(append([]byte{0x01}, l...), r...))
	return h[:]
}

// splitPoint is k, the largest power of two smaller than n (n > 1).
func splitPoint(n int) int {
	k := 1
	for k<<1 < n {
		k <<= 1
	}
	return k
}

// mth is MTH(D[n]) of RFC 6962 §2.1 (n >= 1).
func mth(d [][]byte) []byte {
	if len(d) == 1 {
		return leafHash(d[0])
	}
	k := splitPoint(len(d))
	return nodeHash(mth(d[:k]), mth(d[k:]))
}

// auditPath is PATH(m, D[n]) of RFC 6962 §2.1.1.
func auditPath(m int, d [][]byte) [][]byte {
	if len(d) == 1 {
		return [][]byte{}
	}
	k := splitPoint(len(d))
	if m < k {
		return append(auditPath(m, d[:k]), mth(d[k:]))
	}
	return append(auditPath(m-k, d[k:]), mth(d[:k]))
}

// leafJSON is the RFC 8785 text of a v0.1 leaf for signature (members
// sorted by name; the values need no escaping).
func leafJSON(signature, loggedAt string) []byte {
	sum := sha256.Sum256([]byte(signature))
	return fmt.Appendf(nil, `{"artifact_hash":"sha256:%s","artifact_type":"vrp_attestation","leaf_version":"vrp-tlog-v0.1","logged_at":"%s"}`,
		hex.EncodeToString(sum[:]), loggedAt)
}

// tlogSpec describes a tlog member to build: signature is logged as leaf
// index of a tree of size leaves (the others log unrelated signatures);
// logKey signs the STH for log logID at sthAt.
type tlogSpec struct {
	logKey      edKey
	logID       string
	signature   string
	index, size int
	loggedAt    string
	sthAt       string
}

// buildTlog returns the tlog member for s and the tree's root hash.
func buildTlog(t testing.TB, s tlogSpec) (map[string]any, []byte) {
	t.Helper()
	leaves := make([][]byte, s.size)
	for i := range leaves {
		if i == s.index {
			leaves[i] = leafJSON(s.signature, s.loggedAt)
		} else {
			leaves[i] = leafJSON(fmt.Sprintf("other.jws.%d", i), s.loggedAt)
		}
	}
	root := mth(leaves)
	path := []any{}
	for _, h := range auditPath(s.index, leaves) {
		path = append(path, b64u(h))
	}
	sth := s.logKey.signRaw(`{"alg":"EdDSA","kid":"`+s.logKey.kid+`","typ":"vrp-sth+jwt"}`,
		fmt.Sprintf(`{"log_id":%q,"root_hash":%q,"timestamp":%q,"tree_size":%d}`, s.logID, b64u(root), s.sthAt, s.size))
	sum := sha256.Sum256([]byte(s.signature))
	return map[string]any{
		"log_id": s.logID,
		"leaf": map[string]any{
			"leaf_version":  "vrp-tlog-v0.1",
			"logged_at":     s.loggedAt,
			"artifact_type": "vrp_attestation",
			"artifact_hash": "sha256:" + hex.EncodeToString(sum[:]),
		},
		"leaf_index":      s.index,
		"tree_size":       s.size,
		"inclusion_proof": path,
		"sth":             sth,
	}, root
}
