// Package rotation is keysvc's key lifecycle: it creates keys, rotates and
// (later) revokes key versions in key history, one explicit transaction per
// change with its audit rows, and keeps an immutable in-memory Keyring that
// the signing path reads without touching the database.
//
// Lifecycle of a key version (VRP K1–K3): a kid is minted once and never
// reused; exactly one version per key is active; rotation retires the
// active version at the same instant the next one activates, so the
// published windows [vrp_not_before, vrp_not_after] leave no gap.
package rotation

import (
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/jwksserve"
	"github.com/keysvc/keysvc/signer"
	"github.com/keysvc/keysvc/store"
)

// Errors returned by Manager; test with errors.Is.
var (
	ErrKeyNotFound    = errors.New("key not found")
	ErrKeyExists      = errors.New("key already exists")
	ErrInvalidRequest = errors.New("invalid request")
	ErrNoActive       = errors.New("key has no active version")
	ErrUnknownBackend = errors.New("backend not configured")
	// ErrVersionNotFound: no key version with that kid.
	ErrVersionNotFound = errors.New("key version not found")
	// ErrInvalidTransition: the lifecycle state machine forbids the change
	// (activating a version that is not pending, revoking twice, ...).
	ErrInvalidTransition = errors.New("invalid lifecycle transition")
	// ErrPendingExists: a scheduled rotation is already pending.
	ErrPendingExists = errors.New("a pending version already exists")
	// ErrApprovalRequired: the key's two-person rule requires RequestRevoke
	// (or RequestDestroy) + Approve.
	ErrApprovalRequired = errors.New("a second principal's approval is required")
	// ErrApprovalNotFound: no approval with that id.
	ErrApprovalNotFound = errors.New("approval not found")
	// ErrSamePrincipal: the approver is the principal who asked.
	ErrSamePrincipal = errors.New("the approver must be a different principal")
	// ErrApprovalPending: the same change already awaits approval.
	ErrApprovalPending = errors.New("the same change already awaits a second principal's approval")
	// ErrActivationTooEarly: a pending version has not been published for
	// longer than the JWKS max-age, so cached JWKS copies may lack it (K3).
	ErrActivationTooEarly = errors.New("the version has not been published longer than the JWKS max-age")
	// ErrIssuerInUse: another key has the issuer; CreateKeyRequest.
	// ShareIssuer says the new key joins it on purpose.
	ErrIssuerInUse = errors.New("another key already has this issuer")
	// ErrHistoryNotBacked: the transparency log does not back the key
	// version (or key) as stored — altered, inserted, rolled back or
	// deleted in the database (issue 12 item 5, ADR 0016).
	ErrHistoryNotBacked = errors.New("key history not backed by the transparency log")
	// ErrHistoryUnconfirmed: a change that must be confirmed against the
	// transparency log (minting a kid, ADR 0016) could not be, because no
	// log answered; nothing was changed, retry.
	ErrHistoryUnconfirmed = errors.New("cannot confirm the change with the transparency log")
)

// HistoryChecker checks key history as read against an outside record
// (package anchor: the transparency log). Check never fails as a whole:
// what it cannot confirm is reported unbacked (fail closed).
type HistoryChecker interface {
	Check(ctx context.Context, h store.History) HistoryVerdict
}

// HistoryVerdict names what a HistoryChecker found not backed, with the
// reason (which names the kid or key).
type HistoryVerdict struct {
	Versions map[string]string // kid → reason; such a version is not published and never signs
	Keys     map[string]string // key name → reason; such a key does not sign
}

// Manager owns every lifecycle change and the Keyring.
type Manager struct {
	store    store.Store
	backends map[string]backends.Backend
	now      func() time.Time
	log      *slog.Logger
	// DefaultKey names the key served at /.well-known/jwks.json; when
	// empty, the oldest key is the default.
	defaultKey string
	maxAge     time.Duration // JWKS Cache-Control max-age verifiers may cache for
	// approvalWindow is how long a two-person approval request stays open.
	approvalWindow time.Duration
	// defaultPrepublish applies to policies without their own prepublish.
	defaultPrepublish time.Duration
	// minRetention is the shortest non-zero retention a policy may set.
	minRetention time.Duration

	mu      sync.Mutex                   // serializes Reload
	signers map[string]*signer.JWSSigner // by kid; loaded private halves, reused across reloads
	// signerKey is the key each cached signer was loaded for: a version
	// found under another key is loaded again (and the backend refuses
	// a sealed blob bound to another key name).
	signerKey map[string]string
	ring      atomic.Pointer[Keyring]
	// loadFailing names the kids whose private half failed to load at the
	// last attempt (guarded by mu): one log line per failure episode.
	loadFailing map[string]bool

	// ADR 0014 (lease.go): L, δ, D; the lease end (unix ns) and the
	// lifecycle epoch of the loaded Keyring.
	lead, skew, leaseLen time.Duration
	freshUntil, epoch    atomic.Int64
	txDur                atomic.Int64 // recent transition duration (ns, EWMA), for the first commit deadline
	ringLoaded           atomic.Bool
	stale                episode // "signing refused: stale" episodes
	stats                Stats
	schedMu              sync.Mutex
	sched                map[string]*keyBackoff // scheduler backoff per key
	checker              HistoryChecker         // nil: key history is taken as read
	notBackedSeen        map[string]bool        // not-backed reasons logged (guarded by mu)
}

// Config configures a Manager.
type Config struct {
	Store      store.Store
	Backends   []backends.Backend
	DefaultKey string
	Now        func() time.Time // defaults to store.Now
	Logger     *slog.Logger
	// JWKSMaxAge is the Cache-Control max-age of the published JWKS; a
	// policy's prepublish must exceed it. 0 means the default and cap,
	// jwksserve.MaxAge seconds (VRP §3.1); a negative value means max-age=0
	// (no caching: tests, and deployments that revalidate every fetch).
	JWKSMaxAge time.Duration
	// ApprovalWindow is how long a two-person approval request stays open;
	// default one hour.
	ApprovalWindow time.Duration
	// DefaultPrepublish is the prepublish of policies that set none; it
	// must exceed the JWKS max-age. 0: twice the max-age (at least 1 s).
	DefaultPrepublish time.Duration
	// MinRetention is the shortest retention a policy may set (0, keep
	// forever, is always allowed): how long an attestation keysvc issues
	// can stay valid after its key version stopped signing — the longest
	// valid_for plus the served_at skew — so that no retired version leaves
	// the JWKS while receipts it signed are inside their window (issue 13).
	// 0 means DefaultMinRetention; negative means no minimum.
	MinRetention time.Duration
	// PropagationBound is L (ADR 0014, lease.go): every activation is
	// committed at least L before it takes effect, and the signing lease
	// is L − MaxClockSkew − min(250 ms, L/8). 0 selects in-process mode
	// (activations take effect when recorded, no lease): only for a
	// single Manager that is the only signer (tests).
	PropagationBound time.Duration
	// MaxClockSkew is δ: how far any replica's clock may be from the
	// database's. Must leave a positive lease.
	MaxClockSkew time.Duration
	// History, when set, checks every reload's key history (issue 12
	// item 5): a version it does not back is left out of every public
	// document and never signs; a key it does not back does not sign.
	History HistoryChecker
}

// DefaultMinRetention is the MinRetention of keysvc's defaults: attestations
// valid for up to 24 h (the API's MaxValidFor) with served_at up to 5 min
// ahead of the clock (its MaxServedAtSkew).
const DefaultMinRetention = 24*time.Hour + 5*time.Minute

// New returns a Manager with an empty Keyring; call Reload to load history.
func New(cfg Config) *Manager {
	m := &Manager{
		store:          cfg.Store,
		backends:       map[string]backends.Backend{},
		now:            cfg.Now,
		log:            cfg.Logger,
		defaultKey:     cfg.DefaultKey,
		signers:        map[string]*signer.JWSSigner{},
		signerKey:      map[string]string{},
		maxAge:         cfg.JWKSMaxAge,
		approvalWindow: cfg.ApprovalWindow,
		loadFailing:    map[string]bool{},
		sched:          map[string]*keyBackoff{},
		lead:           cfg.PropagationBound,
		skew:           cfg.MaxClockSkew,
		checker:        cfg.History,
	}
	if m.lead > 0 {
		m.leaseLen = m.lead - m.skew - commitMargin(m.lead)
		if m.leaseLen < m.lead/4 {
			m.leaseLen = m.lead / 4 // Validate refuses such a configuration; never a negative lease
		}
	}
	if m.approvalWindow <= 0 {
		m.approvalWindow = time.Hour
	}
	m.defaultPrepublish = cfg.DefaultPrepublish
	switch {
	case cfg.MinRetention == 0:
		m.minRetention = DefaultMinRetention
	case cfg.MinRetention > 0:
		m.minRetention = cfg.MinRetention
	}
	switch {
	case m.maxAge < 0:
		m.maxAge = 0
	case m.maxAge == 0 || m.maxAge > jwksserve.MaxAge*time.Second:
		m.maxAge = jwksserve.MaxAge * time.Second
	}
	if m.now == nil {
		m.now = store.Now
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.store != nil {
		m.store = auditLogStore{Store: m.store, log: m.log}
	}
	for _, b := range cfg.Backends {
		m.backends[b.Kind()] = b
	}
	m.ring.Store(&Keyring{Keys: map[string]*KeyEntry{}, DID: map[string]jwksserve.Document{},
		IssuerJWKS: map[string]jwksserve.Document{}, IssuerHistory: map[string]jwksserve.Document{}})
	return m
}

// effectivePrepublish is p's prepublish, else the configured default, else
// twice the JWKS max-age.
func (m *Manager) effectivePrepublish(p Policy) time.Duration {
	if p.Prepublish == 0 && m.defaultPrepublish > 0 {
		return m.defaultPrepublish
	}
	return p.EffectivePrepublish(m.maxAge)
}

// validatePolicy checks p against the JWKS max-age and the effective prepublish.
func (m *Manager) validatePolicy(p Policy) error {
	if err := p.Validate(m.maxAge); err != nil {
		return err
	}
	if pre := m.effectivePrepublish(p); p.RotationPeriod > 0 && time.Duration(p.RotationPeriod) <= pre {
		return invalid("rotation_period %s must exceed prepublish %s", time.Duration(p.RotationPeriod), pre)
	}
	if p.Retention > 0 && time.Duration(p.Retention) < m.minRetention {
		return invalid("retention %s is shorter than the %s an attestation may stay valid after its key version stopped signing (longest valid_for plus served_at skew): the retired version would leave the JWKS while receipts it signed are inside their window; use at least %s, or 0 to keep it forever",
			time.Duration(p.Retention), m.minRetention, m.minRetention)
	}
	return nil
}

// MinRetention returns the shortest retention a policy may set (0: none).
func (m *Manager) MinRetention() time.Duration { return m.minRetention }

// retentionCut reports whether going from policy old to next shortens how
// long retired versions stay in the JWKS (0 is forever).
func retentionCut(old, next Policy) bool {
	switch {
	case next.Retention == 0:
		return false
	case old.Retention == 0:
		return true
	}
	return next.Retention < old.Retention
}

// Backends returns the configured backends, sorted by kind.
func (m *Manager) Backends() []backends.Backend {
	out := make([]backends.Backend, 0, len(m.backends))
	for _, b := range m.backends {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind() < out[j].Kind() })
	return out
}

// JWKSMaxAge returns the JWKS Cache-Control max-age in force.
func (m *Manager) JWKSMaxAge() time.Duration { return m.maxAge }

// Keyring is an immutable snapshot of every key: what the signing path and
// the public endpoints read. A new snapshot replaces the old one atomically
// after each change.
type Keyring struct {
	Keys    map[string]*KeyEntry
	Default string                        // name of the default key ("" when there is none)
	DID     map[string]jwksserve.Document // did:web document by issuer
	// IssuerJWKS and IssuerHistory are, by issuer, the JWKS of every
	// published version of every key of the issuer and the key-history
	// document of all their versions: what /.well-known/jwks.json and
	// /.well-known/vrp-key-history.json serve for a request whose Host is
	// the issuer, so that an attestation's default source
	// (https://<issuer>/.well-known/jwks.json) holds the signing version
	// whichever of the issuer's keys made it (issue 15).
	IssuerJWKS    map[string]jwksserve.Document
	IssuerHistory map[string]jwksserve.Document
}

// KeyEntry is one key in a Keyring.
type KeyEntry struct {
	Key      store.Key
	Policy   Policy
	Versions []store.KeyVersion // oldest first
	Active   *signer.JWSSigner  // nil when no version is active
	// ActiveSince is the active version's activation instant
	// (vrp_not_before); zero when no version is active.
	ActiveSince time.Time
	// NextKID, NextAt: the armed pending version and its activation
	// instant (ADR 0014). Next is its private half, loaded ahead of time
	// (nil when loading failed: NextErr). From NextAt on, SignerAt returns
	// Next, so every replica switches at the recorded instant from memory
	// without waiting for the database transition (which records the same
	// instant). An unarmed pending version never signs.
	NextKID string
	Next    *signer.JWSSigner
	NextAt  time.Time
	NextErr error
	// PendingKID, PendingErr: an unarmed pending version and why its
	// private half could not be loaded on this replica (nil when it
	// loaded): reported before its activation is armed, which is held
	// while it fails here.
	PendingKID string
	PendingErr error
	// LoadErr is why the key cannot sign from this replica's key history:
	// the active version's private half could not be loaded (backend down,
	// key disabled, backend not configured here), or its policy or public
	// keys did not parse. nil when all loaded. Retried on the next reload;
	// other keys are unaffected.
	LoadErr error
	JWKS    jwksserve.Document // the plain JWKS (published versions only)
	History jwksserve.Document // every version, with lifecycle members (K2, K4)
	// published are the JWKS entries, for the did:web document.
	published []jwksserve.Entry
	// NotBacked names the versions of the key (kid → reason) and the key
	// itself (key name → reason) that the transparency log does not back
	// (Config.History): left out of Versions and of every document.
	NotBacked map[string]string
}

// SignerAt returns the version that signs at now: the scheduled next
// version once its activation instant has come, else the active one; nil
// when the key cannot sign.
func (e *KeyEntry) SignerAt(now time.Time) *signer.JWSSigner {
	if e.NextKID != "" && !now.Before(e.NextAt) {
		return e.Next
	}
	return e.Active
}

// Keyring returns the current snapshot. Never nil.
func (m *Manager) Keyring() *Keyring { return m.ring.Load() }

func (m *Manager) loadSigner(ctx context.Context, k store.Key, v store.KeyVersion) (*signer.JWSSigner, error) {
	if s, ok := m.signers[v.KID]; ok && m.signerKey[v.KID] == k.Name {
		return s, nil
	}
	if v.MaterialDestroyedAt != nil {
		// Never reached by the lifecycle (only retired and revoked versions
		// are destroyed, and only active and pending ones are loaded); a
		// guard against a hand-edited database.
		return nil, fmt.Errorf("rotation: load %s: %w at %s", v.KID, errDestroyed, v.MaterialDestroyedAt.Format(time.RFC3339Nano))
	}
	kind := v.BackendKind(k.Backend)
	b, ok := m.backends[kind]
	if !ok {
		return nil, fmt.Errorf("%w: version %s of key %s uses backend %q", ErrUnknownBackend, v.KID, k.Name, kind)
	}
	pub, err := parsePublic(v.PublicJWK)
	if err != nil {
		return nil, fmt.Errorf("rotation: %s: %w", v.KID, err)
	}
	cs, err := b.Signer(ctx, v.KID, backends.Handle{Ref: v.BackendRef, Sealed: v.SealedPrivateKey, Public: pub, KeyName: k.Name})
	if err != nil {
		return nil, fmt.Errorf("rotation: load %s: %w", v.KID, err)
	}
	s, err := signer.NewJWSSigner(v.KID, v.Algorithm, cs)
	if err != nil {
		return nil, err
	}
	m.signers[v.KID], m.signerKey[v.KID] = s, k.Name
	return s, nil
}

// CreateKeyRequest describes a new key.
type CreateKeyRequest struct {
	Name      string // [a-z0-9][a-z0-9-]{0,62}
	Issuer    string // lower-case DNS name, e.g. "villaakerlyckan.se"
	Algorithm string // "EdDSA" (default) or "ES256"
	Backend   string // "software" (default)
	JWKSURL   string // default "https://<issuer>/.well-known/jwks.json"
	Policy    Policy // rotation policy; zero: rotate by hand only
	// ShareIssuer lets the key take an issuer other keys already have
	// (VRP K5: a key per layer). Their versions are then published
	// together in the issuer's did:web document, and the creation is
	// audited with the keys it shares the issuer with. Without it such a
	// key is refused with ErrIssuerInUse.
	ShareIssuer bool
}

// Actor is who asked for a change, and why; recorded in the audit trail.
type Actor struct {
	Name string // printable, e.g. "token:1a2b3c(alice)": the credential and the person
	// ID is the stable id of the person (PrincipalID), whatever credential
	// they used; the two-person rule compares it.
	ID     string
	Reason string
}

// PrincipalIDPrefix starts every principal id.
const PrincipalIDPrefix = "principal:"

// PrincipalID is the stable id of the principal (the person, or the node)
// named name: "principal:" + name, trimmed and lower-cased. Every
// credential of one principal — any number of API tokens with that name,
// client certificates mapped to it — has the same id (issue 13: the
// two-person rule compares people, not credentials).
func PrincipalID(name string) string {
	return PrincipalIDPrefix + strings.ToLower(strings.TrimSpace(name))
}

// identity is how the two-person rule tells principals apart.
func (a Actor) identity() string {
	if a.ID != "" {
		return a.ID
	}
	return a.Name
}

var (
	nameRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	labelRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

func validIssuer(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !labelRE.MatchString(l) {
			return false
		}
	}
	return true
}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, a...))
}

// CreateKey creates a key and its first, immediately active version.
// Errors: ErrInvalidRequest, ErrKeyExists, ErrUnknownBackend, backend errors.
func (m *Manager) CreateKey(ctx context.Context, req CreateKeyRequest, actor Actor) (store.Key, store.KeyVersion, error) {
	if req.Algorithm == "" {
		req.Algorithm = signer.AlgEdDSA
	}
	if req.Backend == "" {
		req.Backend = "software"
	}
	switch {
	case !nameRE.MatchString(req.Name):
		return store.Key{}, store.KeyVersion{}, invalid("name must match %s", nameRE)
	case !validIssuer(req.Issuer):
		return store.Key{}, store.KeyVersion{}, invalid("issuer must be a lower-case DNS name such as villaakerlyckan.se")
	case req.Algorithm != signer.AlgEdDSA && req.Algorithm != signer.AlgES256:
		return store.Key{}, store.KeyVersion{}, invalid("algorithm must be %s or %s", signer.AlgEdDSA, signer.AlgES256)
	}
	if req.JWKSURL == "" {
		req.JWKSURL = "https://" + req.Issuer + "/.well-known/jwks.json"
	} else if u, err := url.Parse(req.JWKSURL); err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Fragment != "" {
		return store.Key{}, store.KeyVersion{}, invalid("jwks_url must be an absolute https URL")
	}
	if err := m.validatePolicy(req.Policy); err != nil {
		return store.Key{}, store.KeyVersion{}, err
	}
	b, ok := m.backends[req.Backend]
	if !ok {
		return store.Key{}, store.KeyVersion{}, fmt.Errorf("%w: %q", ErrUnknownBackend, req.Backend)
	}
	now := m.now()
	key := store.Key{Name: req.Name, Issuer: req.Issuer, Algorithm: req.Algorithm, Backend: req.Backend, JWKSURL: req.JWKSURL, CreatedAt: now, CreatedBy: actor.Name}
	if req.Policy != (Policy{}) {
		raw, err := json.Marshal(req.Policy)
		if err != nil {
			return store.Key{}, store.KeyVersion{}, err
		}
		key.Policy = raw
	}
	var first store.KeyVersion
	err := m.store.InTx(ctx, func(tx store.Tx) error {
		// Lock order everywhere: key row, then issuer, then audit trail.
		if err := tx.LockIssuer(ctx, key.Issuer); err != nil {
			return err
		}
		if _, err := tx.GetKey(ctx, req.Name); err == nil {
			return fmt.Errorf("%w: %s", ErrKeyExists, req.Name)
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		// Under the issuer lock: no other key can take the issuer meanwhile.
		others, err := tx.ListKeys(ctx)
		if err != nil {
			return err
		}
		var shares []string
		for _, o := range others {
			if o.Issuer == key.Issuer {
				shares = append(shares, o.Name)
			}
		}
		if len(shares) > 0 && !req.ShareIssuer {
			return fmt.Errorf("%w: %s is the issuer of key(s) %s; a second key on it joins their did:web document — say so (share_issuer) if that is meant (a key per layer, VRP K5)",
				ErrIssuerInUse, key.Issuer, strings.Join(shares, ", "))
		}
		if err := tx.InsertKey(ctx, key); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return fmt.Errorf("%w: %s", ErrKeyExists, req.Name)
			}
			return err
		}
		d := map[string]any{"issuer": key.Issuer, "algorithm": key.Algorithm, "backend": key.Backend, "jwks_url": key.JWKSURL, "policy": req.Policy}
		if len(shares) > 0 {
			d["shares_issuer_with"] = shares
		}
		details, err := json.Marshal(d)
		if err != nil {
			return err
		}
		if _, err := m.audit(ctx, tx, actor, "key.create", key.Name, "", string(details)); err != nil {
			return err
		}
		v, err := m.newVersion(ctx, tx, b, key, now, actor)
		if err != nil {
			return err
		}
		activated := now
		if m.lead > 0 {
			// A key's first version has no predecessor: its window starts
			// at the second it was created in, so that every activation
			// instant is a whole second and no verifier rounds (ADR 0014).
			activated = now.Truncate(time.Second)
		}
		v.State, v.ActivatedAt = store.StateActive, &activated
		if err := tx.InsertVersion(ctx, v); err != nil {
			return err
		}
		first = v
		if _, err = m.audit(ctx, tx, actor, "version.activate", key.Name, v.KID, ""); err != nil {
			return err
		}
		if err := claimFrom(ctx).claimIn(ctx, tx, now); err != nil {
			return err
		}
		return tx.NotifyChange(ctx, key.Name)
	})
	if err != nil {
		return store.Key{}, store.KeyVersion{}, err
	}
	claimFrom(ctx).committed()
	m.log.Info("key created", "key", key.Name, "issuer", key.Issuer, "kid", first.KID, "actor", actor.Name)
	m.reloadAfterCommit(ctx)
	return key, first, nil
}

// reloadAfterCommit refreshes the Keyring after a committed change. The
// change stands even if this fails; the periodic reload retries.
func (m *Manager) reloadAfterCommit(ctx context.Context) {
	if err := m.Reload(ctx); err != nil {
		m.log.Warn("keyring reload after a committed change failed; retrying on the next reload", "err", err)
	}
}

// newVersion mints the next kid, creates the key pair in the backend and
// returns the version (state unset) with a version.create audit row.
func (m *Manager) newVersion(ctx context.Context, tx store.Tx, b backends.Backend, key store.Key, now time.Time, actor Actor) (store.KeyVersion, error) {
	kid, err := nextKID(ctx, tx, key.Issuer, now)
	if err != nil {
		return store.KeyVersion{}, err
	}
	h, err := b.CreateKey(ctx, backends.CreateRequest{KeyName: key.Name, KID: kid, Algorithm: key.Algorithm})
	if err != nil {
		return store.KeyVersion{}, err
	}
	jwk, err := jwksserve.PublicJWK(h.Public, kid, key.Algorithm)
	if err != nil {
		return store.KeyVersion{}, err
	}
	v := store.KeyVersion{
		KID: kid, KeyName: key.Name, Algorithm: key.Algorithm, BackendRef: h.Ref,
		SealedPrivateKey: h.Sealed, PublicJWK: jwk, CreatedAt: now, PublishedAt: &now,
	}
	details, err := json.Marshal(map[string]string{"backend_ref": h.Ref})
	if err != nil {
		return store.KeyVersion{}, err
	}
	_, err = m.audit(ctx, tx, actor, "version.create", key.Name, kid, string(details))
	return v, err
}

// nextKID returns "<issuer>-YYYY-MM-DD-NN" (K1) with NN one more than the
// highest ever minted for that issuer and UTC day (01 first; three digits
// after 99). kids are unique in key history, so a kid is never reused.
func nextKID(ctx context.Context, tx store.Tx, issuer string, now time.Time) (string, error) {
	if err := tx.LockIssuer(ctx, issuer); err != nil {
		return "", err
	}
	prefix := issuer + "-" + now.UTC().Format("2006-01-02") + "-"
	existing, err := tx.KIDsWithPrefix(ctx, prefix)
	if err != nil {
		return "", err
	}
	max := 0
	for _, kid := range existing {
		if n, err := strconv.Atoi(strings.TrimPrefix(kid, prefix)); err == nil && n > max {
			max = n
		}
	}
	return fmt.Sprintf("%s%02d", prefix, max+1), nil
}

func (m *Manager) audit(ctx context.Context, tx store.Tx, actor Actor, action, key, kid, details string) (store.AuditEvent, error) {
	ev := store.AuditEvent{At: m.now(), Actor: actor.Name, Action: action, KeyName: key, KID: kid, Reason: actor.Reason}
	if details != "" {
		ev.Details = []byte(details)
	}
	return tx.AppendAudit(ctx, ev)
}

// SortedNames returns the keyring's key names in order.
func (r *Keyring) SortedNames() []string {
	names := make([]string, 0, len(r.Keys))
	for n := range r.Keys {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func parsePublic(jwkJSON []byte) (crypto.PublicKey, error) {
	return jwksserve.ParsePublicJWK(jwkJSON)
}
