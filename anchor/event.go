// Package anchor anchors key history in the transparency log (issue 12
// item 5, ADR 0016), so that a person who can write to the key-history
// database cannot swap a public key, insert, un-revoke or delete a version,
// mint a kid twice, or rewrite or truncate the audit chain without a
// replica noticing.
//
// Every lifecycle write a keysvc process makes through Store (a version's
// state and instants as written, a key's policy and backend, each audit
// row's hash) becomes a fact: an EdDSA compact JWS (RFC 7515, RFC 8037) over
// the RFC 8785 (JCS) form of the row's public facts, signed by the node's
// own event key (EventKey; never a signing key, never the log key). With
// each fact go content-free markers (this kid was minted, this key has an
// n-th version, this version reached this state, this audit seq exists).
// The SHA-256 of each JWS is a vrp_status_event leaf submitted to the
// configured logs through the tlog client's outbox, and the JWS is kept in
// the anchor_events table.
//
// Ed25519 signatures are deterministic, so the fact of a row as read back
// has exactly one JWS: a checker holding the event key recomputes it and
// asks whether its hash is known — made by this process, stored with the
// row's change (anchor_events), or in the log (proof?hash=). Nobody without
// the event key can compute the hash of a fact that was never signed, so an
// altered or inserted row has no backing fact. Replaying an old, real fact
// (rolling a row back) is caught by the markers: the log has the marker of
// every later state, of the next version ordinal, of the next audit seq.
package anchor

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/gowebpki/jcs"

	"github.com/keysvc/keysvc/jwksserve"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/verifier"
)

// TypEvent is the JWS typ of a key-history event.
const TypEvent = "vrp-status-event+jwt"

// EventKey is the node's event key: an Ed25519 key that signs key-history
// facts and markers and nothing else.
type EventKey struct {
	priv ed25519.PrivateKey
	kid  string // RFC 7638 thumbprint of the public JWK, base64url
	sig  jose.Signer
	// public is the event key as a JWK Set, to verify events read back
	// (signed).
	public *verifier.JWKS

	// memo caches events by canonical payload: every reload recomputes
	// the facts of every version, and the same payload always signs to
	// the same JWS. Reset when it grows past memoMax.
	mu   sync.Mutex
	memo map[string]Event
}

const memoMax = 100_000

// GenerateKeyFile creates a new event key in path (mode 0600, refusing to
// overwrite an existing file) and returns it.
func GenerateKeyFile(path string) (*EventKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	k, err := NewEventKey(priv)
	if err != nil {
		return nil, err
	}
	jwk := jose.JSONWebKey{Key: priv, KeyID: k.kid, Algorithm: string(jose.EdDSA)}
	raw, err := jwk.MarshalJSON()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("anchor: event key file: %w", err)
	}
	if _, err := f.Write(append(raw, '\n')); err != nil {
		f.Close()
		return nil, fmt.Errorf("anchor: event key file: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	return k, f.Close()
}

// LoadKeyFile reads an event key file written by GenerateKeyFile. It must
// not be readable by group or others. Errors never contain key material.
func LoadKeyFile(path string) (*EventKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("anchor: event key file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("anchor: event key file %s: mode %o, want 0600", path, fi.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("anchor: event key file: %w", err)
	}
	var jwk jose.JSONWebKey
	if err := jwk.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Errorf("anchor: event key file %s: not a private Ed25519 JWK", path)
	}
	priv, ok := jwk.Key.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("anchor: event key file %s: not a private Ed25519 JWK", path)
	}
	return NewEventKey(priv)
}

// NewEventKey wraps an Ed25519 private key.
func NewEventKey(priv ed25519.PrivateKey) (*EventKey, error) {
	pub := jose.JSONWebKey{Key: priv.Public()}
	tp, err := pub.Thumbprint(crypto.SHA256)
	if err != nil {
		return nil, err
	}
	kid := b64(tp)
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: priv},
		(&jose.SignerOptions{}).WithType(TypEvent).WithHeader(jose.HeaderKey("kid"), kid))
	if err != nil {
		return nil, err
	}
	k := &EventKey{priv: priv, kid: kid, sig: s}
	pubJWK, err := k.PublicJWK()
	if err != nil {
		return nil, err
	}
	jwk, err := verifier.ParseJWK(pubJWK)
	if err != nil {
		return nil, err
	}
	k.public = &verifier.JWKS{Keys: []*verifier.JWK{jwk}}
	return k, nil
}

// KID returns the event key's RFC 7638 thumbprint (base64url), the kid of
// every event JWS.
func (k *EventKey) KID() string { return k.kid }

// PublicJWK returns the public JWK (JSON) of the event key.
func (k *EventKey) PublicJWK() ([]byte, error) {
	return jose.JSONWebKey{Key: k.priv.Public(), KeyID: k.kid, Algorithm: string(jose.EdDSA)}.MarshalJSON()
}

// signed reports whether ev is an event of this key: its Hash is the
// SHA-256 of its JWS, a compact JWS that verifies with the event key
// (verifier.VerifyCompactJWS: RFC 7515 §5.2, Ed25519 per RFC 8037 §3.1).
func (k *EventKey) signed(ev Event) bool {
	if sha256.Sum256([]byte(ev.JWS)) != ev.Hash {
		return false
	}
	_, err := verifier.VerifyCompactJWS(ev.JWS, k.public)
	return err == nil
}

// Event is one signed fact or marker.
type Event struct {
	Kind    string
	Subject string
	JWS     string
	Hash    [32]byte // SHA-256 of JWS
}

// Sign returns the event for payload: the compact JWS over its RFC 8785
// bytes. The same payload always gives the same JWS (Ed25519, RFC 8032 §5.1.6,
// is deterministic and the protected header is fixed).
func (k *EventKey) Sign(kind, subject string, payload any) (Event, error) {
	raw, err := json.Marshal(payload) // deterministic for the payload structs
	if err != nil {
		return Event{}, err
	}
	memoKey := kind + "\x00" + subject + "\x00" + string(raw)
	k.mu.Lock()
	ev, ok := k.memo[memoKey]
	k.mu.Unlock()
	if ok {
		return ev, nil
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return Event{}, err
	}
	obj, err := k.sig.Sign(canon)
	if err != nil {
		return Event{}, err
	}
	jws, err := obj.CompactSerialize()
	if err != nil {
		return Event{}, err
	}
	ev = Event{Kind: kind, Subject: subject, JWS: jws, Hash: sha256.Sum256([]byte(jws))}
	k.mu.Lock()
	if k.memo == nil || len(k.memo) >= memoMax {
		k.memo = map[string]Event{}
	}
	k.memo[memoKey] = ev
	k.mu.Unlock()
	return ev, nil
}

// Marker kinds (content-free facts whose presence in the log a checker
// probes).
const (
	MarkerKID       = "marker.kid_minted"     // {kid}: the kid was minted
	MarkerOrdinal   = "marker.version_number" // {key, n}: the key has (had) an n-th version
	MarkerState     = "marker.state"          // {kid, state}: the version reached the state
	MarkerAuditSeq  = "marker.audit_seq"      // {seq}: the audit row seq exists
	MarkerBootstrap = "marker.bootstrap"      // {}: anchoring started for this event key
	MarkerSettings  = "marker.key_settings"   // {key, n}: the key's settings reached revision n (ADR 0036)
	MarkerBackend   = "marker.backend_bound"  // {kid}: the version's backend reference is anchored (ADR 0050)
	// MarkerApprovals: {}: approval requests are anchored from here on (ADR 0051).
	MarkerApprovals       = "marker.approvals_anchored"
	MarkerApprovalDecided = "marker.approval_decided" // {id}: the approval was decided (ADR 0051)
	// MarkerTokens: {}: API tokens are anchored from here on (ADR 0053).
	MarkerTokens       = "marker.tokens_anchored"
	MarkerTokenRevoked = "marker.token_revoked" // {id}: the API token was revoked (ADR 0053)
)

// Fact kinds.
const (
	FactVersion  = "version"
	FactKey      = "key"
	FactAudit    = "audit"
	FactBackend  = "version_backend"
	FactApproval = "approval"
	FactToken    = "api_token"
)

// versionFact is the signed form of a key version as stored: everything a
// verifier relies on (K2, K4), not the private half or its reference.
type versionFact struct {
	Event               string `json:"event"`
	Key                 string `json:"key"`
	KID                 string `json:"kid"`
	Alg                 string `json:"alg"`
	JKT                 string `json:"jkt"` // RFC 7638 thumbprint of the public JWK
	State               string `json:"state"`
	CreatedAt           string `json:"created_at"`
	PublishedAt         string `json:"published_at,omitempty"`
	ActivatesAt         string `json:"activates_at,omitempty"`
	ArmedAt             string `json:"armed_at,omitempty"`
	ActivatedAt         string `json:"vrp_not_before,omitempty"`
	RetiredAt           string `json:"vrp_not_after,omitempty"`
	RevokedAt           string `json:"revoked_at,omitempty"`
	CompromisedAt       string `json:"vrp_compromised_at,omitempty"`
	RevocationReason    string `json:"revocation_reason,omitempty"`
	MaterialDestroyedAt string `json:"material_destroyed_at,omitempty"`
}

// VersionFact signs version v as stored.
func (k *EventKey) VersionFact(v store.KeyVersion) (Event, error) {
	jkt, err := jwksserve.Thumbprint(v.PublicJWK)
	if err != nil {
		return Event{}, fmt.Errorf("version %s: anchor: %w", v.KID, err)
	}
	f := versionFact{Event: "key_version", Key: v.KeyName, KID: v.KID, Alg: v.Algorithm, JKT: jkt, State: string(v.State),
		CreatedAt: store.FormatTime(v.CreatedAt), RevocationReason: v.RevocationReason}
	f.PublishedAt = fmtp(v.PublishedAt)
	f.ActivatesAt = fmtp(v.ActivatesAt)
	f.ArmedAt = fmtp(v.ArmedAt)
	f.ActivatedAt = fmtp(v.ActivatedAt)
	f.RetiredAt = fmtp(v.RetiredAt)
	f.RevokedAt = fmtp(v.RevokedAt)
	f.CompromisedAt = fmtp(v.CompromisedAt)
	f.MaterialDestroyedAt = fmtp(v.MaterialDestroyedAt)
	return k.Sign(FactVersion, v.KID, f)
}

// BackendFact signs where version v's private key is held as stored: its
// backend reference (store.KeyVersion.BackendRef: "software:…",
// "pkcs11:…", "awskms:…"), which keysvc never changes after minting. It
// is a fact of its own, not a member of the version fact, so that the
// version facts anchored before it existed keep their hashes (ADR 0050):
// a version's reference is bound once, with BackendMarker, at its first
// anchored change or at the first start of a release that binds them.
func (k *EventKey) BackendFact(v store.KeyVersion) (Event, error) {
	return k.Sign(FactBackend, v.KID, struct {
		Event      string `json:"event"`
		Key        string `json:"key"`
		KID        string `json:"kid"`
		BackendRef string `json:"backend_ref"`
	}{"version_backend", v.KeyName, v.KID, v.BackendRef})
}

// BackendMarker is the marker that version kid's backend reference is
// anchored (BackendFact): from then on a reference without a backed fact
// was altered in the database.
func (k *EventKey) BackendMarker(kid string) (Event, error) {
	return k.Sign(MarkerBackend, kid, struct {
		Marker string `json:"marker"`
		KID    string `json:"kid"`
	}{"backend_bound", kid})
}

// ApprovalFact signs a two-person approval request as stored (ADR 0051):
// what it asks for (key, action, kid, the SHA-256 of its parameters) and
// who asked, when, until when — not its decision, which the approval's
// MarkerApprovalDecided records. A row inserted or edited in the database
// has no backed fact, so a second officer's approval cannot carry it out.
func (k *EventKey) ApprovalFact(ap store.Approval) (Event, error) {
	sum := sha256.Sum256(ap.Params)
	return k.Sign(FactApproval, ap.ID, struct {
		Event           string `json:"event"`
		ID              string `json:"id"`
		Key             string `json:"key"`
		Action          string `json:"action"`
		KID             string `json:"kid,omitempty"`
		ParamsSHA256    string `json:"params_sha256"`
		RequestedBy     string `json:"requested_by"`
		RequestedByName string `json:"requested_by_name,omitempty"`
		RequestedAt     string `json:"requested_at"`
		ExpiresAt       string `json:"expires_at"`
	}{"approval_request", ap.ID, ap.KeyName, ap.Action, ap.KID, hex.EncodeToString(sum[:]), ap.RequestedBy, ap.RequestedByName,
		store.FormatTime(ap.RequestedAt), store.FormatTime(ap.ExpiresAt)})
}

// ApprovalDecidedMarker is the marker that approval id was decided
// (approved, or found expired): a row set back to pending is refused.
func (k *EventKey) ApprovalDecidedMarker(id string) (Event, error) {
	return k.Sign(MarkerApprovalDecided, id, struct {
		Marker string `json:"marker"`
		ID     string `json:"id"`
	}{"approval_decided", id})
}

// ApprovalsMarker is the marker that approval requests are anchored: from
// then on every pending approval needs a backed ApprovalFact.
func (k *EventKey) ApprovalsMarker() (Event, error) {
	return k.Sign(MarkerApprovals, "", struct {
		Marker string `json:"marker"`
	}{"approvals_anchored"})
}

// TokenFact signs an API token as stored (ADR 0053): its id, the
// principal it belongs to (name), the SHA-256 of its secret (hex; the
// secret itself is never stored), its scopes in stored order, and when it
// was created and expires — not its revocation, which
// TokenRevokedMarker records, nor its last use. A token row inserted or
// edited in the database (a new hash, more scopes, another principal, a
// later expiry) has no backed fact, and serve does not accept it.
func (k *EventKey) TokenFact(t store.APIToken) (Event, error) {
	scopes := t.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	return k.Sign(FactToken, t.ID, struct {
		Event     string   `json:"event"`
		ID        string   `json:"id"`
		Name      string   `json:"name"`
		SHA256    string   `json:"sha256"`
		Scopes    []string `json:"scopes"`
		CreatedAt string   `json:"created_at"`
		ExpiresAt string   `json:"expires_at,omitempty"`
	}{"api_token", t.ID, t.Name, hex.EncodeToString(t.SHA256), scopes, store.FormatTime(t.CreatedAt), fmtp(t.ExpiresAt)})
}

// TokenRevokedMarker is the marker that API token id was revoked: a row
// whose revocation was cleared in the database is not accepted again.
func (k *EventKey) TokenRevokedMarker(id string) (Event, error) {
	return k.Sign(MarkerTokenRevoked, id, struct {
		Marker string `json:"marker"`
		ID     string `json:"id"`
	}{"token_revoked", id})
}

// TokensMarker is the marker that API tokens are anchored: from then on
// serve accepts a token only with a backed TokenFact.
func (k *EventKey) TokensMarker() (Event, error) {
	return k.Sign(MarkerTokens, "", struct {
		Marker string `json:"marker"`
	}{"tokens_anchored"})
}

func fmtp(t *time.Time) string {
	if t == nil {
		return ""
	}
	return store.FormatTime(*t)
}

// keyFact is the signed form of a key's settings as stored.
type keyFact struct {
	Event        string `json:"event"`
	Key          string `json:"key"`
	Issuer       string `json:"issuer"`
	Alg          string `json:"alg"`
	Backend      string `json:"backend"`
	JWKSURL      string `json:"jwks_url"`
	PolicySHA256 string `json:"policy_sha256"` // hex SHA-256 of the policy JSON as stored ("" when none)
	CreatedAt    string `json:"created_at"`
	CreatedBy    string `json:"created_by"`
	// SettingsRev is store.Key.SettingsRev; omitted when 0, so the fact
	// of a key whose settings never changed is the one earlier releases
	// signed (ADR 0036).
	SettingsRev int64 `json:"settings_rev,omitempty"`
}

// KeyFact signs key k as stored (its policy by digest, its settings
// revision).
func (k *EventKey) KeyFact(key store.Key) (Event, error) {
	ph := ""
	if len(key.Policy) > 0 {
		sum := sha256.Sum256(key.Policy)
		ph = hex.EncodeToString(sum[:])
	}
	return k.Sign(FactKey, key.Name, keyFact{Event: "key", Key: key.Name, Issuer: key.Issuer, Alg: key.Algorithm, Backend: key.Backend,
		JWKSURL: key.JWKSURL, PolicySHA256: ph, CreatedAt: store.FormatTime(key.CreatedAt), CreatedBy: key.CreatedBy, SettingsRev: key.SettingsRev})
}

// SettingsMarker is the marker that key's settings (policy, backend)
// reached revision n (1 = the first change; ADR 0036).
func (k *EventKey) SettingsMarker(key string, n int64) (Event, error) {
	return k.Sign(MarkerSettings, key+"#"+strconv.FormatInt(n, 10), struct {
		Marker string `json:"marker"`
		Key    string `json:"key"`
		N      int64  `json:"n"`
	}{"key_settings", key, n})
}

// AuditFact signs an audit row's place and hash (the chain head at seq).
func (k *EventKey) AuditFact(ev store.AuditEvent) (Event, error) {
	return k.Sign(FactAudit, strconv.FormatInt(ev.Seq, 10), struct {
		Event string `json:"event"`
		Seq   int64  `json:"seq"`
		Hash  string `json:"hash"`
	}{"audit_head", ev.Seq, ev.Hash})
}

// KIDMarker is the marker that kid was minted.
func (k *EventKey) KIDMarker(kid string) (Event, error) {
	return k.Sign(MarkerKID, kid, struct {
		Marker string `json:"marker"`
		KID    string `json:"kid"`
	}{"kid_minted", kid})
}

// OrdinalMarker is the marker that key has an n-th version (1 = first).
func (k *EventKey) OrdinalMarker(key string, n int) (Event, error) {
	return k.Sign(MarkerOrdinal, key+"#"+strconv.Itoa(n), struct {
		Marker string `json:"marker"`
		Key    string `json:"key"`
		N      int    `json:"n"`
	}{"version_number", key, n})
}

// StateMarker is the marker that version kid reached state ("active",
// "retired", "revoked", or "destroyed" for its material).
func (k *EventKey) StateMarker(kid, state string) (Event, error) {
	return k.Sign(MarkerState, kid+"#"+state, struct {
		Marker string `json:"marker"`
		KID    string `json:"kid"`
		State  string `json:"state"`
	}{"state", kid, state})
}

// AuditSeqMarker is the marker that the audit row seq exists.
func (k *EventKey) AuditSeqMarker(seq int64) (Event, error) {
	return k.Sign(MarkerAuditSeq, strconv.FormatInt(seq, 10), struct {
		Marker string `json:"marker"`
		Seq    int64  `json:"seq"`
	}{"audit_seq", seq})
}

// BootstrapMarker is the marker that anchoring started with this event key
// (after it, history is never taken on trust again).
func (k *EventKey) BootstrapMarker() (Event, error) {
	return k.Sign(MarkerBootstrap, "", struct {
		Marker string `json:"marker"`
	}{"bootstrap"})
}

// laterStates are the states after s, whose markers must be absent for a
// version in state s (the order of K2's lifecycle: pending, active,
// retired, revoked; a version may skip states, never go back).
func laterStates(s store.KeyState) []string {
	switch s {
	case store.StatePending:
		return []string{"active", "retired", "revoked"}
	case store.StateActive:
		return []string{"retired", "revoked"}
	case store.StateRetired:
		return []string{"revoked"}
	}
	return nil
}

// absentStates are the state markers that must be absent for version v
// as stored: its later states, and "destroyed" while its material is not.
func absentStates(v store.KeyVersion) []string {
	later := laterStates(v.State)
	if v.MaterialDestroyedAt == nil {
		later = append(later, "destroyed")
	}
	return later
}

// reachedStates are the state markers a version in state s with material
// destroyed or not has written on its way.
func reachedStates(v store.KeyVersion) []string {
	var out []string
	switch v.State {
	case store.StateActive:
		out = []string{"active"}
	case store.StateRetired:
		out = []string{"retired"}
	case store.StateRevoked:
		out = []string{"revoked"}
	}
	if v.MaterialDestroyedAt != nil {
		out = append(out, "destroyed")
	}
	return out
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
