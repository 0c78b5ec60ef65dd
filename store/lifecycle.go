package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// This file holds the store side of ADR 0014 (windows true by
// construction): the lifecycle epoch that replicas probe to renew their
// signing lease, the commit deadline of transactions that record an
// activation instant, and idempotency keys of admin mutations.

// commitDeadlineSQLState is the SQLSTATE raised by the deferred trigger
// keysvc_commit_deadline (migration 00005) when COMMIT comes too late.
const commitDeadlineSQLState = "KS001"

// IdempotencyTTL is how long an idempotency record is kept: a retry with
// the same key within it replays the stored response.
const IdempotencyTTL = 24 * time.Hour

// IdempotencyKey is the record of one Idempotency-Key of an admin mutation
// (an IETF httpapi Idempotency-Key header value), per principal.
type IdempotencyKey struct {
	Principal   string    // the authenticated principal ("token:ID")
	Key         string    // the header value
	Fingerprint string    // hex SHA-256 of method, path and body
	CreatedAt   time.Time // when claimed
	Status      int       // HTTP status of the stored response; 0 until stored
	Body        []byte    // the stored response body; nil until stored
}

// bumpEpoch advances the lifecycle epoch in this transaction.
func (t *sqlTx) bumpEpoch(ctx context.Context) error {
	_, err := t.exec(ctx, "advance lifecycle epoch", `UPDATE lifecycle_epoch SET epoch = epoch + 1 WHERE id = 1`)
	return err
}

// CommitBy implements Tx.CommitBy.
func (t *sqlTx) CommitBy(ctx context.Context, deadline time.Time) error {
	if err := t.check(); err != nil {
		return err
	}
	deadline = deadline.UTC().Truncate(Precision)
	if t.tx.commitBy.IsZero() || deadline.Before(t.tx.commitBy) {
		t.tx.commitBy = deadline
	}
	if t.d.kind == "postgres" {
		if _, err := t.exec(ctx, "set commit deadline", `SELECT set_config('keysvc.commit_by', ?, true)`, FormatTime(t.tx.commitBy)); err != nil {
			return err
		}
	}
	return t.bumpEpoch(ctx)
}

// LifecycleEpoch implements Reader.LifecycleEpoch.
func (o ops) LifecycleEpoch(ctx context.Context) (int64, error) {
	var epoch int64
	found := false
	err := o.query(ctx, "read lifecycle epoch", `SELECT epoch FROM lifecycle_epoch WHERE id = 1`, nil,
		func(scan func(...any) error) error { found = true; return scan(&epoch) })
	if err == nil && !found {
		err = fmt.Errorf("store: read lifecycle epoch: %w", ErrNotFound)
	}
	return epoch, err
}

// ClaimIdempotencyKey implements Tx.ClaimIdempotencyKey.
func (t *sqlTx) ClaimIdempotencyKey(ctx context.Context, k IdempotencyKey) error {
	if _, err := t.exec(ctx, "purge idempotency keys", `DELETE FROM idempotency_keys WHERE created_at < ?`, t.ts(k.CreatedAt.Add(-IdempotencyTTL))); err != nil {
		return err
	}
	_, err := t.exec(ctx, "claim idempotency key",
		`INSERT INTO idempotency_keys (principal, key, fingerprint, created_at) VALUES (?, ?, ?, ?)`,
		k.Principal, k.Key, k.Fingerprint, t.ts(k.CreatedAt))
	return err
}

// GetIdempotencyKey implements Reader.GetIdempotencyKey.
func (o ops) GetIdempotencyKey(ctx context.Context, principal, key string) (IdempotencyKey, error) {
	var out IdempotencyKey
	found := false
	err := o.query(ctx, "get idempotency key",
		`SELECT principal, key, fingerprint, created_at, status, body FROM idempotency_keys WHERE principal = ? AND key = ?`,
		[]any{principal, key}, func(scan func(...any) error) error {
			var status sql.NullInt64
			var body sql.NullString
			if err := scan(&out.Principal, &out.Key, &out.Fingerprint, timeCol{&out.CreatedAt}, &status, &body); err != nil {
				return err
			}
			out.Status, out.Body, found = int(status.Int64), nullText(body), true
			return nil
		})
	if err != nil {
		return IdempotencyKey{}, err
	}
	if !found {
		return IdempotencyKey{}, fmt.Errorf("store: get idempotency key: %w", ErrNotFound)
	}
	return out, nil
}

// CompleteIdempotencyKey implements Store.CompleteIdempotencyKey.
func (s *sqlStore) CompleteIdempotencyKey(ctx context.Context, principal, key string, status int, body []byte) error {
	n, err := s.exec(ctx, "complete idempotency key",
		`UPDATE idempotency_keys SET status = ?, body = ? WHERE principal = ? AND key = ?`, int64(status), string(body), principal, key)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("store: complete idempotency key: %w", ErrNotFound)
	}
	return nil
}

// History is all of key history at one lifecycle epoch, as ReadHistory
// returns it.
type History struct {
	Epoch    int64
	Keys     []Key                   // ordered by name
	Versions map[string][]KeyVersion // by key name, ordered by CreatedAt, then KID
}

// prefixCols qualifies a comma-separated column list with a table alias.
func prefixCols(alias, cols string) string {
	var b strings.Builder
	for i, c := range strings.Split(cols, ",") {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(alias + "." + strings.TrimSpace(c))
	}
	return b.String()
}

var historyQuery = `SELECT e.epoch, ` + prefixCols("k", keyCols) + `, ` + prefixCols("v", versionCols) + `
	FROM lifecycle_epoch e CROSS JOIN keys k JOIN key_versions v ON v.key_name = k.name
	WHERE e.id = 1 ORDER BY k.name, v.created_at, v.kid`

// ReadHistory implements Reader.ReadHistory: one statement, so one round
// trip to the database, and one consistent snapshot of every key, version
// and the lifecycle epoch.
func (o ops) ReadHistory(ctx context.Context) (History, error) {
	h := History{Versions: map[string][]KeyVersion{}}
	found := false
	err := o.query(ctx, "read key history", historyQuery, nil, func(scan func(...any) error) error {
		var k Key
		var v KeyVersion
		var epoch int64
		var policy sql.NullString
		var state, jwk string
		err := scan(&epoch,
			&k.Name, &k.Issuer, &k.Algorithm, &k.Backend, &k.JWKSURL, &policy, timeCol{&k.CreatedAt}, &k.CreatedBy, &k.SettingsRev,
			&v.KID, &v.KeyName, &v.Algorithm, &v.BackendRef, &v.SealedPrivateKey, &jwk, &state,
			timeCol{&v.CreatedAt}, nullTimeCol{&v.PublishedAt}, nullTimeCol{&v.ActivatesAt},
			nullTimeCol{&v.ActivatedAt}, nullTimeCol{&v.RetiredAt}, nullTimeCol{&v.RevokedAt},
			nullTimeCol{&v.CompromisedAt}, &v.RevocationReason, nullTimeCol{&v.MaterialDestroyedAt}, nullTimeCol{&v.ArmedAt})
		if err != nil {
			return err
		}
		k.Policy = nullText(policy)
		v.SealedPrivateKey = nilIfEmpty(v.SealedPrivateKey)
		v.PublicJWK, v.State = []byte(jwk), KeyState(state)
		h.Epoch, found = epoch, true
		if n := len(h.Keys); n == 0 || h.Keys[n-1].Name != k.Name {
			h.Keys = append(h.Keys, k)
		}
		h.Versions[k.Name] = append(h.Versions[k.Name], v)
		return nil
	})
	if err != nil {
		return History{}, err
	}
	if !found { // no keys yet
		if h.Epoch, err = o.LifecycleEpoch(ctx); err != nil {
			return History{}, err
		}
	}
	return h, nil
}
