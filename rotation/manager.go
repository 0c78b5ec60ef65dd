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
}

// New returns a Manager with an empty Keyring; call Reload to load history.
func New(cfg Config) *Manager {
	m := &Manager{
		store:      cfg.Store,
		backends:   map[string]backends.Backend{},
		now:        cfg.Now,
		log:        cfg.Logger,
		defaultKey: cfg.DefaultKey,
		signers:    map[string]*signer.JWSSigner{},
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
	m.ring.Store(&Keyring{Keys: map[string]*KeyEntry{}})
	return m
}

// Keyring is an immutable snapshot of every key: what the signing path and
// the public endpoints read. A new snapshot replaces the old one atomically
// after each change.
type Keyring struct {
	Keys    map[string]*KeyEntry
	Default string // name of the default key ("" when there is none)
}

// KeyEntry is one key in a Keyring.
type KeyEntry struct {
	Key      store.Key
	Versions []store.KeyVersion // oldest first
	Active   *signer.JWSSigner  // nil when no version is active
	JWKS     jwksserve.Document // the plain JWKS (revoked versions left out)
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
	ring := &Keyring{Keys: make(map[string]*KeyEntry, len(keys))}
	oldest := ""
	var oldestAt time.Time
	for _, k := range keys {
		versions, err := m.store.ListVersions(ctx, k.Name)
		if err != nil {
			return err
		}
		e := &KeyEntry{Key: k, Versions: versions}
		for _, v := range versions {
			if v.State != store.StateActive {
				continue
			}
			s, err := m.loadSigner(ctx, k, v)
			if err != nil {
				return err
			}
			e.Active = s
		}
		if e.JWKS, err = jwksserve.BuildJWKS(versions); err != nil {
			return err
		}
		ring.Keys[k.Name] = e
		if oldest == "" || k.CreatedAt.Before(oldestAt) {
			oldest, oldestAt = k.Name, k.CreatedAt
		}
	}
	ring.Default = oldest
	if m.defaultKey != "" {
		ring.Default = m.defaultKey
	}
	m.ring.Store(ring)
	return nil
}

func (m *Manager) loadSigner(ctx context.Context, k store.Key, v store.KeyVersion) (*signer.JWSSigner, error) {
	if s, ok := m.signers[v.KID]; ok {
		return s, nil
	}
	b, ok := m.backends[k.Backend]
	if !ok {
		return nil, fmt.Errorf("%w: key %s uses backend %q", ErrUnknownBackend, k.Name, k.Backend)
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
}

// Actor is who asked for a change, and why; recorded in the audit trail.
type Actor struct {
	Name   string
	Reason string
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
	b, ok := m.backends[req.Backend]
	if !ok {
		return store.Key{}, store.KeyVersion{}, fmt.Errorf("%w: %q", ErrUnknownBackend, req.Backend)
	}
	now := m.now()
	key := store.Key{Name: req.Name, Issuer: req.Issuer, Algorithm: req.Algorithm, Backend: req.Backend, JWKSURL: req.JWKSURL, CreatedAt: now, CreatedBy: actor.Name}
	var first store.KeyVersion
	err := m.store.InTx(ctx, func(tx store.Tx) error {
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
		if _, err := m.audit(ctx, tx, actor, "key.create", key.Name, "", fmt.Sprintf(`{"issuer":%q,"algorithm":%q,"backend":%q,"jwks_url":%q}`, key.Issuer, key.Algorithm, key.Backend, key.JWKSURL)); err != nil {
			return err
		}
		v, err := m.newVersion(ctx, tx, b, key, now)
		if err != nil {
			return err
		}
		v.State, v.ActivatedAt = store.StateActive, &now
		if err := tx.InsertVersion(ctx, v); err != nil {
			return err
		}
		first = v
		_, err = m.audit(ctx, tx, actor, "version.activate", key.Name, v.KID, "")
		return err
	})
	if err != nil {
		return store.Key{}, store.KeyVersion{}, err
	}
	m.log.Info("key created", "key", key.Name, "issuer", key.Issuer, "kid", first.KID, "actor", actor.Name)
	return key, first, m.Reload(ctx)
}

// Rotate retires the key's active version and activates a new one at the
// same instant, in one transaction. It returns the new and the retired
// version. Errors: ErrKeyNotFound, ErrNoActive, backend errors.
func (m *Manager) Rotate(ctx context.Context, name string, actor Actor) (newV, oldV store.KeyVersion, err error) {
	err = m.store.InTx(ctx, func(tx store.Tx) error {
		key, err := tx.LockKey(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: %s", ErrKeyNotFound, name)
		} else if err != nil {
			return err
		}
		b, ok := m.backends[key.Backend]
		if !ok {
			return fmt.Errorf("%w: %q", ErrUnknownBackend, key.Backend)
		}
		versions, err := tx.ListVersions(ctx, name)
		if err != nil {
			return err
		}
		found := false
		for _, v := range versions {
			if v.State == store.StateActive {
				oldV, found = v, true
			}
		}
		if !found {
			return fmt.Errorf("%w: %s", ErrNoActive, name)
		}
		now := m.now()
		oldV.State, oldV.RetiredAt = store.StateRetired, &now
		if err := tx.UpdateVersion(ctx, oldV); err != nil {
			return err
		}
		if _, err := m.audit(ctx, tx, actor, "version.retire", name, oldV.KID, ""); err != nil {
			return err
		}
		newV, err = m.newVersion(ctx, tx, b, key, now)
		if err != nil {
			return err
		}
		newV.State, newV.ActivatedAt = store.StateActive, &now
		if err := tx.InsertVersion(ctx, newV); err != nil {
			return err
		}
		_, err = m.audit(ctx, tx, actor, "version.activate", name, newV.KID, "")
		return err
	})
	if err != nil {
		return store.KeyVersion{}, store.KeyVersion{}, err
	}
	m.log.Info("key rotated", "key", name, "new_kid", newV.KID, "retired_kid", oldV.KID, "actor", actor.Name)
	return newV, oldV, m.Reload(ctx)
}

// newVersion mints the next kid, creates the key pair in the backend and
// returns the version (state unset) with a version.create audit row.
func (m *Manager) newVersion(ctx context.Context, tx store.Tx, b backends.Backend, key store.Key, now time.Time) (store.KeyVersion, error) {
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
	_, err = m.audit(ctx, tx, Actor{Name: "keysvc"}, "version.create", key.Name, kid, fmt.Sprintf(`{"backend_ref":%q}`, h.Ref))
	return v, err
}

// nextKID returns "<issuer>-YYYY-MM-DD-NN" (K1) with NN one more than the
// highest ever minted for that issuer and UTC day (01 first; three digits
// after 99). kids are unique in key history, so a kid is never reused.
func nextKID(ctx context.Context, tx store.Tx, issuer string, now time.Time) (string, error) {
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
