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
)

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

	mu      sync.Mutex                   // serializes Reload
	signers map[string]*signer.JWSSigner // by kid; loaded private halves, reused across reloads
	ring    atomic.Pointer[Keyring]
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
}

// New returns a Manager with an empty Keyring; call Reload to load history.
func New(cfg Config) *Manager {
	m := &Manager{
		store:          cfg.Store,
		backends:       map[string]backends.Backend{},
		now:            cfg.Now,
		log:            cfg.Logger,
		defaultKey:     cfg.DefaultKey,
		signers:        map[string]*signer.JWSSigner{},
		maxAge:         cfg.JWKSMaxAge,
		approvalWindow: cfg.ApprovalWindow,
	}
	if m.approvalWindow <= 0 {
		m.approvalWindow = time.Hour
	}
	m.defaultPrepublish = cfg.DefaultPrepublish
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
	for _, b := range cfg.Backends {
		m.backends[b.Kind()] = b
	}
	m.ring.Store(&Keyring{Keys: map[string]*KeyEntry{}, DID: map[string]jwksserve.Document{}})
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
	return nil
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
}

// KeyEntry is one key in a Keyring.
type KeyEntry struct {
	Key      store.Key
	Policy   Policy
	Versions []store.KeyVersion // oldest first
	Active   *signer.JWSSigner  // nil when no version is active
	// Next is the pending version scheduled to activate at NextAt, loaded
	// ahead of time: from NextAt on, SignerAt returns it, so every replica
	// switches at the scheduled instant without waiting for the database
	// transition (which records the same instant).
	Next   *signer.JWSSigner
	NextAt time.Time
	// LoadErr is why a signing version's private half could not be loaded
	// (backend down, key disabled); nil when all loaded. Retried on the
	// next reload.
	LoadErr error
	JWKS    jwksserve.Document // the plain JWKS (published versions only)
	History jwksserve.Document // every version, with lifecycle members (K2, K4)
	// published are the JWKS entries, for the did:web document.
	published []jwksserve.Entry
}

// SignerAt returns the version that signs at now: the scheduled next
// version once its activation instant has come, else the active one; nil
// when the key cannot sign.
func (e *KeyEntry) SignerAt(now time.Time) *signer.JWSSigner {
	if e.Next != nil && !now.Before(e.NextAt) {
		return e.Next
	}
	return e.Active
}

// Keyring returns the current snapshot. Never nil.
func (m *Manager) Keyring() *Keyring { return m.ring.Load() }

// Reload rebuilds the Keyring from key history. Private halves already
// loaded are reused; new active versions are loaded from their backend.
// On error the previous Keyring stays in place.
func (m *Manager) Reload(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	keys, err := m.store.ListKeys(ctx)
	if err != nil {
		return err
	}
	now := m.now()
	ring := &Keyring{Keys: make(map[string]*KeyEntry, len(keys)), DID: map[string]jwksserve.Document{}}
	oldest := ""
	var oldestAt time.Time
	byIssuer := map[string][]jwksserve.Entry{}
	signing := map[string]bool{} // kids of active and pending versions
	for _, k := range keys {
		versions, err := m.store.ListVersions(ctx, k.Name)
		if err != nil {
			return err
		}
		pol, err := parsePolicy(k.Policy)
		if err != nil {
			return fmt.Errorf("key %s: %w", k.Name, err)
		}
		e := &KeyEntry{Key: k, Policy: pol, Versions: versions}
		var published []store.KeyVersion
		for _, v := range versions {
			switch {
			case v.State == store.StateActive:
				signing[v.KID] = true
				if e.Active, err = m.loadSigner(ctx, k, v); errors.Is(err, ErrUnknownBackend) {
					return err // misconfiguration: refuse loudly
				} else if err != nil {
					// One key's backend failing must not stop the others,
					// nor keep revocations from reaching this replica.
					e.LoadErr = err
					m.log.Error("cannot load the active version's signer; the key cannot sign", "key", k.Name, "kid", v.KID, "err", err)
				}
			case v.State == store.StatePending && v.ActivatesAt != nil:
				signing[v.KID] = true
				if e.Next, err = m.loadSigner(ctx, k, v); errors.Is(err, ErrUnknownBackend) {
					return err
				} else if err != nil {
					e.LoadErr = err
					m.log.Error("cannot load the pending version's signer", "key", k.Name, "kid", v.KID, "err", err)
				}
				e.NextAt = *v.ActivatesAt
			}
			if jwksserve.Published(v, time.Duration(pol.Retention), now) {
				published = append(published, v)
			}
		}
		if e.JWKS, err = jwksserve.BuildJWKS(published); err != nil {
			return err
		}
		if e.History, err = jwksserve.BuildHistory(k, versions); err != nil {
			return err
		}
		for i := len(published) - 1; i >= 0; i-- {
			entry, err := jwksserve.EntryFor(published[i])
			if err != nil {
				return err
			}
			e.published = append(e.published, entry)
		}
		byIssuer[k.Issuer] = append(byIssuer[k.Issuer], e.published...)
		ring.Keys[k.Name] = e
		if oldest == "" || k.CreatedAt.Before(oldestAt) {
			oldest, oldestAt = k.Name, k.CreatedAt
		}
	}
	for issuer, entries := range byIssuer {
		doc, err := jwksserve.BuildDID(issuer, entries)
		if err != nil {
			return err
		}
		ring.DID[issuer] = doc
	}
	ring.Default = oldest
	if m.defaultKey != "" {
		ring.Default = ""
		if _, ok := ring.Keys[m.defaultKey]; ok {
			ring.Default = m.defaultKey
		}
	}
	// Private halves of versions that can no longer sign leave memory.
	for kid := range m.signers {
		if !signing[kid] {
			delete(m.signers, kid)
		}
	}
	m.ring.Store(ring)
	return nil
}

func (m *Manager) loadSigner(ctx context.Context, k store.Key, v store.KeyVersion) (*signer.JWSSigner, error) {
	if s, ok := m.signers[v.KID]; ok {
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
	cs, err := b.Signer(ctx, v.KID, backends.Handle{Ref: v.BackendRef, Sealed: v.SealedPrivateKey, Public: pub})
	if err != nil {
		return nil, fmt.Errorf("rotation: load %s: %w", v.KID, err)
	}
	s, err := signer.NewJWSSigner(v.KID, v.Algorithm, cs)
	if err != nil {
		return nil, err
	}
	m.signers[v.KID] = s
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
}

// Actor is who asked for a change, and why; recorded in the audit trail.
type Actor struct {
	Name   string // printable, e.g. "token:1a2b3c(alice)"
	ID     string // stable principal id (API token id); used by the two-person rule
	Reason string
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
		if err := tx.InsertKey(ctx, key); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return fmt.Errorf("%w: %s", ErrKeyExists, req.Name)
			}
			return err
		}
		details, err := json.Marshal(map[string]any{"issuer": key.Issuer, "algorithm": key.Algorithm, "backend": key.Backend, "jwks_url": key.JWKSURL, "policy": req.Policy})
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
		v.State, v.ActivatedAt = store.StateActive, &now
		if err := tx.InsertVersion(ctx, v); err != nil {
			return err
		}
		first = v
		if _, err = m.audit(ctx, tx, actor, "version.activate", key.Name, v.KID, ""); err != nil {
			return err
		}
		return tx.NotifyChange(ctx, key.Name)
	})
	if err != nil {
		return store.Key{}, store.KeyVersion{}, err
	}
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
