package anchor

import (
	"context"
	"fmt"

	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// tokensAnchored reports whether API tokens are anchored (TokensMarker
// backed: in memory, anchor_events (r) or a log; ADR 0053).
func (a *Anchor) tokensAnchored(ctx context.Context, r store.AnchorStore) (bool, error) {
	m, err := a.key.TokensMarker()
	if err != nil {
		return false, err
	}
	return a.factBacked(ctx, r, m)
}

// anchorTokens starts anchoring API tokens (ADR 0053): the first start of
// a release that anchors them signs the fact of every token stored now,
// as stored, on trust (logged with their ids), the revocation marker of
// every revoked one, and the TokensMarker, after which a token without a
// backed fact is never accepted. Later starts do nothing.
func (a *Anchor) anchorTokens(ctx context.Context) error {
	ids, err := a.anchorOnTrust(ctx, a.key.TokensMarker, "API tokens", "ADR 0053",
		func(tx store.Tx) ([]Event, []string, error) {
			tokens, err := tx.ListTokens(ctx)
			if err != nil {
				return nil, nil, err
			}
			var evs []Event
			var ids []string
			for _, tk := range tokens {
				f, err := a.key.TokenFact(tk)
				if err != nil {
					return nil, nil, err
				}
				evs, ids = append(evs, f), append(ids, tk.ID)
				if tk.RevokedAt != nil {
					m, err := a.key.TokenRevokedMarker(tk.ID)
					if err != nil {
						return nil, nil, err
					}
					evs = append(evs, m)
				}
			}
			return evs, ids, nil
		})
	for _, id := range ids {
		a.noteTokenBacked(id)
	}
	return err
}

// CheckTokens implements api.TokenChecker (ADR 0053): of the tokens as
// stored (list), it returns those the transparency log backs, and why
// each other one is refused:
//   - rotation.ErrHistoryNotBacked: its fact as stored is not backed (a
//     row inserted, or its hash, name, scopes, creation or expiry edited
//     in the database), or the row says not revoked while the
//     revocation marker is in anchor_events or a log (cleared in the
//     database);
//   - rotation.ErrHistoryUnconfirmed: no log answered a look-up it needs
//     (a process started during a log outage: it accepts the token once
//     a log answers).
//
// Revoked and expired tokens are never returned, and need no look-up in
// the logs. The revocation of a real token (its fact backed here before,
// or backed now) with no marker yet — tokens revoke without the event key
// — is anchored here (anchorRevocations).
// Before tokens are anchored (the TokensMarker not backed yet) every
// token is returned as stored. Facts are looked up in memory, then in
// anchor_events (one query for all), then in the logs; revocation markers
// likewise, the logs' answers cached while absent as reloads cache
// version markers (Run probes them again), at most 16 look-ups in flight.
// A revocation marker first found in anchor_events is owed to the logs
// from memory until one proves it (ADR 0052): the process that wrote it
// (a tokens revoke command) may have exited before a log took it.
func (a *Anchor) CheckTokens(ctx context.Context, list []store.APIToken) ([]store.APIToken, map[string]error) {
	refused := map[string]error{}
	anchored, err := a.tokensAnchored(ctx, a.as)
	if err != nil {
		for _, tk := range list {
			refused[tk.ID] = fmt.Errorf("%w: whether API tokens are anchored: %w", rotation.ErrHistoryUnconfirmed, err)
		}
		return nil, refused
	}
	if !anchored {
		return list, refused
	}
	now := a.now()
	// live: tokens that would be accepted as stored, with their facts
	// and revocation markers; gone: revoked ones, with theirs.
	type checked struct {
		tk     store.APIToken
		fact   Event
		marker Event
	}
	var live, gone []checked
	var expired []Event
	for _, tk := range list {
		c := checked{tk: tk}
		if c.fact, err = a.key.TokenFact(tk); err == nil {
			c.marker, err = a.key.TokenRevokedMarker(tk.ID)
		}
		switch {
		case err != nil:
			refused[tk.ID] = err
		case tk.RevokedAt != nil:
			gone = append(gone, c)
		case tk.ExpiresAt != nil && !now.Before(*tk.ExpiresAt):
			expired = append(expired, c.marker)
		default:
			live = append(live, c)
		}
	}
	// An expired token is never accepted again: its marker is not probed
	// any more.
	a.forgetAbsent(expired...)

	// One anchor_events query for every hash not known here yet.
	var hashes [][32]byte
	for _, cs := range [][]checked{live, gone} {
		for _, c := range cs {
			for _, ev := range []Event{c.fact, c.marker} {
				if !a.isKnown(ev.Hash) {
					hashes = append(hashes, ev.Hash)
				}
			}
		}
	}
	inStore := map[[32]byte]store.AnchorEvent{}
	if len(hashes) > 0 {
		if inStore, err = a.as.AnchorEventsByHash(ctx, hashes); err != nil {
			for _, c := range live {
				refused[c.tk.ID] = fmt.Errorf("%w: reading anchor_events: %w", rotation.ErrHistoryUnconfirmed, err)
			}
			return nil, refused
		}
	}
	// backed: known here, or stored (then learned; a marker also owed).
	backed := func(ev Event) bool {
		if a.isKnown(ev.Hash) {
			return true
		}
		if s, ok := inStore[ev.Hash]; ok && s.JWS == ev.JWS {
			a.learn(ev)
			if ev.Kind == MarkerTokenRevoked {
				a.owe([]Event{ev})
			}
			return true
		}
		return false
	}
	// A revocation with no marker is anchored for a real token only: one
	// whose fact this process backed before (as it stood then: the row
	// may have been edited since), or whose fact as stored is backed now
	// (in anchor_events, or — at most revocationsPerCheck look-ups — a
	// log).
	var unanchored []Event
	lookups := 0
	for _, c := range gone {
		if len(unanchored) == revocationsPerCheck || backed(c.marker) {
			continue
		}
		real := a.tokenBacked(c.tk.ID) || backed(c.fact)
		if !real && lookups < revocationsPerCheck {
			lookups++
			if ok, err := a.logHas(ctx, c.fact); err == nil && ok {
				a.learn(c.fact)
				real = true
			}
		}
		if real {
			unanchored = append(unanchored, c.marker)
		}
	}
	a.anchorRevocations(ctx, unanchored)

	var probe []Event // revocation markers to look up in the logs
	var probed []checked
	for _, c := range live {
		if !backed(c.fact) {
			ok, err := a.logHas(ctx, c.fact)
			switch {
			case err != nil:
				refused[c.tk.ID] = fmt.Errorf("%w: API token %s as stored: %w", rotation.ErrHistoryUnconfirmed, c.tk.ID, err)
				continue
			case !ok:
				refused[c.tk.ID] = fmt.Errorf("anchor: API token %s (%s) as stored is not backed by the transparency log (inserted, or its hash, principal, scopes or expiry altered in the database): %w", c.tk.ID, c.tk.Name, rotation.ErrHistoryNotBacked)
				continue
			}
			a.learn(c.fact)
		}
		a.noteTokenBacked(c.tk.ID)
		if backed(c.marker) {
			refused[c.tk.ID] = revokedInLog(c.tk)
			continue
		}
		probe, probed = append(probe, c.marker), append(probed, c)
	}
	present, perr := a.markersPresentEach(ctx, probe)
	for i, c := range probed {
		switch {
		case perr[i] != nil:
			refused[c.tk.ID] = fmt.Errorf("%w: whether API token %s was revoked: %w", rotation.ErrHistoryUnconfirmed, c.tk.ID, perr[i])
		case present[i]:
			refused[c.tk.ID] = revokedInLog(c.tk)
		}
	}
	// Only the live tokens checked: a revoked or expired row is never
	// accepted, whatever the clock reads when it is used.
	out := make([]store.APIToken, 0, len(live))
	for _, c := range live {
		if _, ok := refused[c.tk.ID]; !ok {
			out = append(out, c.tk)
		}
	}
	return out, refused
}

// noteTokenBacked records that API token id's fact was backed here: its
// revocation is anchored on sight even if its row was edited since.
func (a *Anchor) noteTokenBacked(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tokenIDs[id] = true
}

// tokenBacked reports whether API token id's fact was backed here.
func (a *Anchor) tokenBacked(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tokenIDs[id]
}

// revocationsPerCheck bounds how many revocations one CheckTokens
// anchors (anchorRevocations); the rest wait for the next refresh.
const revocationsPerCheck = 64

// revokedInLog is why a token whose row says not revoked is refused.
func revokedInLog(tk store.APIToken) error {
	return fmt.Errorf("anchor: API token %s (%s) is revoked in the transparency log, key history says it is not (its revocation cleared in the database): %w", tk.ID, tk.Name, rotation.ErrHistoryNotBacked)
}

// anchorRevocations anchors the revocation markers of real tokens (their
// facts backed) revoked with none — tokens revoke run without the event
// key, or by an older release — so that the revocation cannot be cleared
// in the database later. Taking access away is safe to anchor on sight;
// a row the anchor never saw as a token (no backed fact) gets nothing
// signed. Failures are logged; the next check tries again.
func (a *Anchor) anchorRevocations(ctx context.Context, markers []Event) {
	if a.rec == nil || len(markers) == 0 {
		return
	}
	err := a.st.InTx(ctx, func(tx store.Tx) error {
		return tx.(store.AnchorWriter).InsertAnchorEvents(ctx, toStore(markers, store.Now()))
	})
	if err != nil {
		a.log.Warn("anchor: anchoring the revocation of API tokens revoked without the event key failed; retrying at the next check", "tokens", len(markers), "err", err)
		return
	}
	a.log.Info("key-history anchoring: anchored the revocation of API tokens revoked without the event key", "tokens", len(markers))
	a.committed(ctx, markers)
}
