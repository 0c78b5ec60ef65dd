package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// Errors of CreateToken and RevokeToken; test with errors.Is.
var (
	// ErrInvalidTokenName: the name is not a principal name (ValidPrincipalName).
	ErrInvalidTokenName = errors.New("token name must be lower-case letters, digits and . _ @ - (at most 64), starting with a letter or digit: it names the person or node the token belongs to")
	// ErrTokenNotFound: no token with that id.
	ErrTokenNotFound = errors.New("no such token")
)

// TokenAudit names who changes a token and why, for the audit trail.
type TokenAudit struct {
	Actor  string // e.g. "cli:root@officer-shell (uid 0)"; required
	Reason string
}

// CreateToken stores a new token for principal name with scopes (see
// NewToken; ttl <= 0: no expiry) and appends a "token.create" audit row
// naming who did it, in one transaction. It returns the secret, shown once.
// The name is the principal: every token of one name is one person or node
// to the two-person rule. Errors: ErrInvalidTokenName, store errors.
func CreateToken(ctx context.Context, st store.Store, name string, scopes []string, ttl time.Duration, who TokenAudit) (string, store.APIToken, error) {
	if !ValidPrincipalName(name) {
		return "", store.APIToken{}, fmt.Errorf("%w, got %q", ErrInvalidTokenName, name)
	}
	secret, rec, err := NewToken(name, scopes, ttl)
	if err != nil {
		return "", store.APIToken{}, err
	}
	err = st.InTx(ctx, func(tx store.Tx) error {
		if err := tx.InsertToken(ctx, rec); err != nil {
			return err
		}
		return appendTokenAudit(ctx, tx, who, "token.create", rec)
	})
	if err != nil {
		return "", store.APIToken{}, err
	}
	return secret, rec, nil
}

// RevokeToken revokes the token with id (idempotent: a revoked token keeps
// its first revocation instant) and appends a "token.revoke" audit row
// naming who did it, in one transaction. Errors: ErrTokenNotFound, store
// errors.
func RevokeToken(ctx context.Context, st store.Store, id string, who TokenAudit) (store.APIToken, error) {
	var rec store.APIToken
	err := st.InTx(ctx, func(tx store.Tx) error {
		list, err := tx.ListTokens(ctx)
		if err != nil {
			return err
		}
		found := false
		for _, t := range list {
			if t.ID == id {
				rec, found = t, true
			}
		}
		if !found {
			return fmt.Errorf("%w: %q", ErrTokenNotFound, id)
		}
		now := store.Now()
		if err := tx.RevokeToken(ctx, id, now); err != nil {
			return err
		}
		if rec.RevokedAt == nil {
			rec.RevokedAt = &now
		}
		return appendTokenAudit(ctx, tx, who, "token.revoke", rec)
	})
	return rec, err
}

// appendTokenAudit writes the audit row of a token change: the token's id,
// name (the principal), scopes and expiry — never its secret or hash.
func appendTokenAudit(ctx context.Context, tx store.Tx, who TokenAudit, action string, t store.APIToken) error {
	if strings.TrimSpace(who.Actor) == "" {
		return errors.New("api: a token change needs an actor for the audit trail")
	}
	d := map[string]any{"token_id": t.ID, "name": t.Name, "principal": rotation.PrincipalID(t.Name), "scopes": t.Scopes}
	if t.ExpiresAt != nil {
		d["expires_at"] = store.FormatTime(*t.ExpiresAt)
	}
	if action == "token.revoke" && t.RevokedAt != nil {
		d["revoked_at"] = store.FormatTime(*t.RevokedAt)
	}
	details, err := json.Marshal(d)
	if err != nil {
		return err
	}
	_, err = tx.AppendAudit(ctx, store.AuditEvent{At: store.Now(), Actor: who.Actor, Action: action, Reason: who.Reason, Details: details})
	return err
}
