package anchor

import (
	"context"
	"fmt"
	"strings"

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
	if a.rec == nil {
		return nil // check only
	}
	if ok, err := a.tokensAnchored(ctx, a.as); err != nil || ok {
		return err
	}
	var evs []Event
	var ids []string
	err := a.st.InTx(ctx, func(tx store.Tx) error {
		evs, ids = evs[:0], ids[:0]
		tokens, err := tx.ListTokens(ctx)
		if err != nil {
			return err
		}
		for _, tk := range tokens {
			f, err := a.key.TokenFact(tk)
			if err != nil {
				return err
			}
			evs, ids = append(evs, f), append(ids, tk.ID)
			if tk.RevokedAt != nil {
				m, err := a.key.TokenRevokedMarker(tk.ID)
				if err != nil {
					return err
				}
				evs = append(evs, m)
			}
		}
		m, err := a.key.TokensMarker()
		if err != nil {
			return err
		}
		evs = append(evs, m)
		return tx.(store.AnchorWriter).InsertAnchorEvents(ctx, toStore(evs, store.Now()))
	})
	if err != nil {
		return err
	}
	if len(ids) > 0 {
		a.log.Warn("key-history anchoring: API tokens are anchored from now on; the tokens stored now are anchored as stored, on trust (ADR 0053)",
			"tokens", len(ids), "ids", strings.Join(ids, ","))
	} else {
		a.log.Info("key-history anchoring: API tokens are anchored from now on (ADR 0053)")
	}
	a.committed(ctx, evs)
	return nil
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
// Revoked and expired tokens are returned as they are (the Authenticator
// refuses them anyway) and need no look-up; a revocation with no marker
// yet (tokens revoke without the event key) is anchored here. Before
// tokens are anchored (the TokensMarker not backed yet) every token is
// returned as stored. Facts are looked up in memory, then in
// anchor_events (one query), then in the logs; revocation markers in
// memory, anchor_events, then the logs (cached while absent, as reloads
// cache version markers; Run probes them again).
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
	var live []store.APIToken
	var facts, markers []Event
	var revoked []Event // revocations to look for in anchor_events
	for _, tk := range list {
		if tk.RevokedAt != nil {
			m, err := a.key.TokenRevokedMarker(tk.ID)
			if err != nil {
				refused[tk.ID] = err
				continue
			}
			revoked = append(revoked, m)
			continue
		}
		if tk.ExpiresAt != nil && !now.Before(*tk.ExpiresAt) {
			continue
		}
		f, err := a.key.TokenFact(tk)
		if err == nil {
			var m Event
			if m, err = a.key.TokenRevokedMarker(tk.ID); err == nil {
				live, facts, markers = append(live, tk), append(facts, f), append(markers, m)
			}
		}
		if err != nil {
			refused[tk.ID] = err
		}
	}
	// One anchor_events query for every hash not known here yet.
	var hashes [][32]byte
	for _, evs := range [][]Event{facts, markers, revoked} {
		for _, ev := range evs {
			if !a.isKnown(ev.Hash) {
				hashes = append(hashes, ev.Hash)
			}
		}
	}
	inStore := map[[32]byte]store.AnchorEvent{}
	if len(hashes) > 0 {
		if inStore, err = a.as.AnchorEventsByHash(ctx, hashes); err != nil {
			for _, tk := range live {
				refused[tk.ID] = fmt.Errorf("%w: reading anchor_events: %w", rotation.ErrHistoryUnconfirmed, err)
			}
			return tokensNotRefused(list, refused), refused
		}
	}
	isStored := func(ev Event) bool {
		s, ok := inStore[ev.Hash]
		if ok && s.JWS == ev.JWS {
			a.learn(ev)
			return true
		}
		return a.isKnown(ev.Hash)
	}
	var unanchored []Event
	for _, m := range revoked {
		if !isStored(m) {
			unanchored = append(unanchored, m)
		}
	}
	a.anchorRevocations(ctx, unanchored)
	for i, tk := range live {
		f, m := facts[i], markers[i]
		if !isStored(f) {
			ok, err := a.logHas(ctx, f)
			switch {
			case err != nil:
				refused[tk.ID] = fmt.Errorf("%w: API token %s as stored: %w", rotation.ErrHistoryUnconfirmed, tk.ID, err)
				continue
			case !ok:
				refused[tk.ID] = fmt.Errorf("anchor: API token %s (%s) as stored is not backed by the transparency log (inserted, or its hash, principal, scopes or expiry altered in the database): %w", tk.ID, tk.Name, rotation.ErrHistoryNotBacked)
				continue
			}
			a.learn(f)
		}
		present := isStored(m)
		if !present {
			var err error
			if present, err = a.markerPresent(ctx, m, true); err != nil {
				refused[tk.ID] = fmt.Errorf("%w: whether API token %s was revoked: %w", rotation.ErrHistoryUnconfirmed, tk.ID, err)
				continue
			}
		}
		if present {
			refused[tk.ID] = fmt.Errorf("anchor: API token %s (%s) is revoked in the transparency log, key history says it is not (its revocation cleared in the database): %w", tk.ID, tk.Name, rotation.ErrHistoryNotBacked)
		}
	}
	return tokensNotRefused(list, refused), refused
}

// tokensNotRefused is list without the tokens refused names.
func tokensNotRefused(list []store.APIToken, refused map[string]error) []store.APIToken {
	out := make([]store.APIToken, 0, len(list))
	for _, tk := range list {
		if _, ok := refused[tk.ID]; !ok {
			out = append(out, tk)
		}
	}
	return out
}

// anchorRevocations anchors the revocation markers of tokens revoked with
// none (tokens revoke run without the event key, or by an older
// release): taking access away is safe to anchor on sight, and a marker
// keeps the revocation from being cleared in the database. Failures are
// logged; the next check tries again.
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
	ids := make([]string, len(markers))
	for i, m := range markers {
		ids[i] = m.Subject
	}
	a.log.Info("key-history anchoring: anchored the revocation of API tokens revoked without the event key", "ids", strings.Join(ids, ","))
	a.committed(ctx, markers)
}
