package rotation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keysvc/keysvc/jwksserve"
	"github.com/keysvc/keysvc/signer"
	"github.com/keysvc/keysvc/store"
)

// Reload rebuilds the Keyring from key history, one key at a time
// (loadKey): a key whose policy, public keys or private half fail to load
// is unsigned and reported (KeyEntry.LoadErr, named in /readyz), while
// every other key — and every revocation, of any key — still takes
// effect. Private halves already loaded are reused; only active and armed
// or unarmed pending versions are loaded, so a revoked, retired or
// destroyed version never signs. Reload fails, keeping the previous
// Keyring, only when the store cannot be read; on success the signing
// lease is renewed from the instant the read began (ADR 0014).
func (m *Manager) Reload(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	start := m.now()
	err := m.reloadLocked(ctx, start)
	if err != nil {
		m.stats.ReloadFailures.Add(1)
	}
	return err
}

func (m *Manager) reloadLocked(ctx context.Context, start time.Time) error {
	hist, err := m.store.ReadHistory(ctx) // one round trip: a slow store must not outlast the lease
	if err != nil {
		return err
	}
	epoch, keys := hist.Epoch, hist.Keys
	ring := &Keyring{Keys: make(map[string]*KeyEntry, len(keys)), DID: map[string]jwksserve.Document{},
		IssuerJWKS: map[string]jwksserve.Document{}, IssuerHistory: map[string]jwksserve.Document{}}
	oldest := ""
	var oldestAt time.Time
	byIssuer := map[string][]jwksserve.Entry{}
	histByIssuer := map[string][]jwksserve.KeyVersions{}
	signing := map[string]bool{} // kids of active and pending versions
	var verdict HistoryVerdict
	if m.checker != nil {
		verdict = m.checker.Check(ctx, hist)
	}
	for _, k := range keys {
		versions, notBacked := m.backed(k, hist.Versions[k.Name], verdict)
		e := m.loadKey(ctx, k, versions, start, signing)
		if notBacked != nil {
			e.NotBacked = notBacked
			if reason, ok := notBacked[k.Name]; ok {
				e.Active, e.Next, e.NextKID = nil, nil, ""
				e.LoadErr = errors.Join(e.LoadErr, fmt.Errorf("%w: %s", ErrHistoryNotBacked, reason))
			}
			for _, v := range hist.Versions[k.Name] {
				if reason, ok := notBacked[v.KID]; ok && (v.State == store.StateActive || v.State == store.StatePending && v.ActivatesAt != nil && m.armed(v)) {
					e.LoadErr = errors.Join(e.LoadErr, fmt.Errorf("%w: %s", ErrHistoryNotBacked, reason))
				}
			}
		}
		byIssuer[k.Issuer] = append(byIssuer[k.Issuer], e.published...)
		histByIssuer[k.Issuer] = append(histByIssuer[k.Issuer], jwksserve.KeyVersions{Key: k, Versions: e.Versions})
		ring.Keys[k.Name] = e
		if oldest == "" || k.CreatedAt.Before(oldestAt) {
			oldest, oldestAt = k.Name, k.CreatedAt
		}
	}
	for issuer, entries := range byIssuer {
		doc, err := jwksserve.BuildDID(issuer, entries)
		if err != nil {
			m.log.Error("cannot build the did:web document", "issuer", issuer, "err", err)
			continue
		}
		ring.DID[issuer] = doc
		if doc, err = jwksserve.BuildEntriesJWKS(entries); err != nil {
			m.log.Error("cannot build the issuer's JWKS", "issuer", issuer, "err", err)
			continue
		}
		ring.IssuerJWKS[issuer] = doc
	}
	for issuer, kvs := range histByIssuer {
		doc, err := jwksserve.BuildIssuerHistory(issuer, kvs)
		if err != nil {
			m.log.Error("cannot build the issuer's key-history document", "issuer", issuer, "err", err)
			continue
		}
		ring.IssuerHistory[issuer] = doc
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
			delete(m.signerKey, kid)
		}
	}
	for kid := range m.loadFailing {
		if !signing[kid] {
			delete(m.loadFailing, kid)
		}
	}
	m.ring.Store(ring)
	m.ringLoaded.Store(true)
	m.markFresh(start, epoch)
	return nil
}

// backed splits a key's versions into those the history checker backs and
// the reasons for the others (nil when all are backed and the key is).
// Reasons are logged once per distinct reason.
func (m *Manager) backed(k store.Key, versions []store.KeyVersion, verdict HistoryVerdict) ([]store.KeyVersion, map[string]string) {
	var notBacked map[string]string
	if reason, ok := verdict.Keys[k.Name]; ok {
		notBacked = map[string]string{k.Name: reason}
		m.reportNotBacked(k.Name, "", reason)
	}
	out := versions[:0:0]
	for _, v := range versions {
		reason, ok := verdict.Versions[v.KID]
		if !ok {
			out = append(out, v)
			continue
		}
		if notBacked == nil {
			notBacked = map[string]string{}
		}
		notBacked[v.KID] = reason
		m.reportNotBacked(k.Name, v.KID, reason)
	}
	return out, notBacked
}

// reportNotBacked logs a not-backed finding once per distinct reason (the
// caller holds m.mu).
func (m *Manager) reportNotBacked(key, kid, reason string) {
	if m.notBackedSeen == nil {
		m.notBackedSeen = map[string]bool{}
	}
	if m.notBackedSeen[reason] {
		return
	}
	m.notBackedSeen[reason] = true
	m.log.Error("key history not backed by the transparency log: not published, never signs", "key", key, "kid", kid, "reason", reason)
}

// loadKey builds key k's entry from its versions as read (oldest first).
// It never fails as a whole: what cannot be loaded is recorded in the
// entry (LoadErr for what keeps the key from signing now, NextErr and
// PendingErr for a pending version) and logged once per failure episode.
// signing collects the kids whose private halves stay in memory.
//
// Signers come only from the active version and the pending one, so a
// revocation always removes its version's signer, even when the rest of
// the key's history fails to load. Public documents are built from every
// version that parses.
func (m *Manager) loadKey(ctx context.Context, k store.Key, versions []store.KeyVersion, now time.Time, signing map[string]bool) *KeyEntry {
	e := &KeyEntry{Key: k, Versions: versions}
	pol, err := parsePolicy(k.Policy)
	if err != nil {
		e.LoadErr = fmt.Errorf("key %s: %w", k.Name, err)
		m.log.Error("cannot parse the key's rotation policy; the key does not sign", "key", k.Name, "err", err)
	}
	e.Policy = pol
	var published []store.KeyVersion
	for _, v := range versions {
		switch {
		case v.State == store.StateActive && e.LoadErr == nil:
			signing[v.KID] = true
			if v.ActivatedAt != nil {
				e.ActiveSince = *v.ActivatedAt
			}
			if e.Active, err = m.loadSignerReport(ctx, k, v); err != nil {
				e.LoadErr = err
			}
		case v.State == store.StatePending && v.ActivatesAt != nil && m.armed(v) && e.LoadErr == nil:
			signing[v.KID] = true
			next, err := m.loadSignerReport(ctx, k, v)
			if err != nil && m.lead == 0 {
				// In-process mode: the activation is held (completeDue).
				e.PendingKID, e.PendingErr = v.KID, err
				break
			}
			e.NextKID, e.NextAt, e.Next, e.NextErr = v.KID, *v.ActivatesAt, next, err
		case v.State == store.StatePending:
			// Preloaded so that a failure shows before the activation is
			// armed; the scheduler holds the activation while it fails.
			signing[v.KID] = true
			e.PendingKID = v.KID
			_, e.PendingErr = m.loadSignerReport(ctx, k, v)
		}
		if jwksserve.Published(v, time.Duration(pol.Retention), now) {
			published = append(published, v)
		}
	}
	var docErr error
	if e.JWKS, err = jwksserve.BuildJWKS(published); err != nil {
		docErr = err
	}
	if e.History, err = jwksserve.BuildHistory(k, versions); err != nil {
		docErr = err
	}
	for i := len(published) - 1; i >= 0; i-- {
		entry, err := jwksserve.EntryFor(published[i])
		if err != nil {
			docErr = err
			continue
		}
		e.published = append(e.published, entry)
	}
	if docErr != nil {
		// A public key that does not parse: keep the key from signing, so
		// that no signature is made that its documents cannot verify.
		e.Active, e.Next, e.LoadErr = nil, nil, errors.Join(e.LoadErr, docErr)
		m.log.Error("cannot build the key's public documents; the key does not sign", "key", k.Name, "err", docErr)
	}
	return e
}

// armed reports whether pending version v's activation is armed: recorded
// with its final instant at least L ahead. In in-process mode every
// pending version with an activation instant is.
func (m *Manager) armed(v store.KeyVersion) bool { return v.ArmedAt != nil || m.lead == 0 }

// loadSignerReport is loadSigner with one log line per failure episode of
// each kid and a counter per failed attempt. The caller holds m.mu.
func (m *Manager) loadSignerReport(ctx context.Context, k store.Key, v store.KeyVersion) (s *signer.JWSSigner, err error) {
	s, err = m.loadSigner(ctx, k, v)
	if err != nil {
		m.stats.LoadFailures.Add(1)
		if !m.loadFailing[v.KID] {
			m.loadFailing[v.KID] = true
			m.log.Error("cannot load a version's private half; it does not sign from this replica", "key", k.Name, "kid", v.KID, "state", string(v.State), "err", err)
		}
		return nil, err
	}
	if m.loadFailing[v.KID] {
		delete(m.loadFailing, v.KID)
		m.log.Info("version's private half loaded again", "key", k.Name, "kid", v.KID)
	}
	return s, nil
}
