package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"
)

// This file holds the implementation shared by both dialects: every query is
// written once, with '?' placeholders, against conn; a dialect supplies the
// driver, placeholder style, time encoding, locking statements and error
// classification.

// conn runs statements on a pool or inside one transaction.
type conn interface {
	// exec runs q and returns the number of rows it affected.
	exec(ctx context.Context, q string, args ...any) (int64, error)
	// query runs q and calls row once per result row with a Scan function.
	query(ctx context.Context, q string, args []any, row func(scan func(dest ...any) error) error) error
}

// txConn is a conn inside a transaction.
type txConn interface {
	conn
	commit(ctx context.Context) error
	rollback() error // uses a fresh, bounded context: the caller's may be done
}

// dialect is what differs between PostgreSQL and SQLite.
type dialect struct {
	kind      string              // "postgres" or "sqlite"
	versions  string              // query counting goose's version table (0 or 1)
	fsys      fs.FS               // embedded migrations
	forUpdate string              // suffix locking the selected key row until commit
	lockAudit string              // statement serializing AppendAudit; "" if transactions already do
	notify    string              // statement NOTIFYing a change (args: channel, key); "" if unsupported
	lockName  string              // statement taking a transaction lock on a name (arg: name); "" if transactions already serialize
	timeArg   func(time.Time) any // encodes a UTC, µs-truncated instant as a query argument
	// classify maps a driver error to ErrConflict, ErrAuditAppendOnly or
	// errMissingKey, with a secret-free description of the constraint; it
	// returns a nil class for any other error.
	classify func(err error) (what string, class error)
}

// errMissingKey classifies a foreign-key violation: the key does not exist.
var errMissingKey = errors.New("foreign key violation")

// auditLockKey is the pg_advisory_xact_lock key serializing audit appenders
// ("keysvcau").
const auditLockKey int64 = 0x6b65797376636175

// sqlStore is a Store over a dialect.
type sqlStore struct {
	ops
	begin   func(ctx context.Context) (txConn, error)
	raw     func(ctx context.Context, q string, args ...any) error // verbatim SQL (ExecRawForTest)
	closeFn func() error
	// watch implements Watch; nil where notifications are unsupported.
	watch func(ctx context.Context, fn func(keyName string)) error
	// outbox holds the SQLite outbox's own connection (outbox.go).
	outbox outboxConn
}

// Watch implements Store.Watch.
func (s *sqlStore) Watch(ctx context.Context, fn func(keyName string)) error {
	if s.watch == nil {
		return ErrWatchUnsupported
	}
	return s.watch(ctx, fn)
}

// ops implements Reader and the writes of Tx over one conn. tx is non-nil
// inside a transaction; it records the first failed statement there.
type ops struct {
	c       conn
	d       *dialect
	tx      *txState
	channel string // NOTIFY channel of this store (PostgreSQL: per schema)
}

// txState tracks one InTx transaction.
type txState struct {
	failed error // first statement error; the transaction must roll back
	done   bool  // InTx has returned; the Tx may no longer be used
	// commitBy is the earliest deadline given to Tx.CommitBy (zero: none).
	commitBy time.Time
}

var errTxDone = errors.New("store: transaction already finished (Tx used after InTx returned)")

func (s *sqlStore) Kind() string { return s.d.kind }

// Scrub implements Store.Scrub.
func (s *sqlStore) Scrub(ctx context.Context) error {
	q := `VACUUM key_versions`
	if s.d.kind == "sqlite" {
		q = `PRAGMA wal_checkpoint(TRUNCATE)`
	}
	if err := s.raw(ctx, q); err != nil {
		return fmt.Errorf("store: scrub (%s): %w", q, err)
	}
	return nil
}
func (s *sqlStore) Close() error { s.outbox.close(); return s.closeFn() }

// InTx runs fn in one transaction. It commits when fn returns nil, and rolls
// back when fn returns an error (returned unchanged), panics (re-panicked
// after the rollback) or ignored the error of a statement it ran: a failed
// statement aborts a PostgreSQL transaction, and SQLite is held to the same
// rule, so a transaction is never committed half-written.
func (s *sqlStore) InTx(ctx context.Context, fn func(Tx) error) error {
	tc, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: begin transaction: %w", err)
	}
	st := &txState{}
	t := &sqlTx{ops{c: tc, d: s.d, tx: st, channel: s.channel}}
	defer func() {
		if p := recover(); p != nil {
			st.done = true
			_ = tc.rollback()
			panic(p)
		}
	}()
	err = fn(t)
	st.done = true
	if err == nil && st.failed != nil {
		err = fmt.Errorf("store: transaction rolled back after a failed statement: %w", st.failed)
	}
	if err == nil && !st.commitBy.IsZero() && Now().After(st.commitBy) {
		// Checked here for both dialects (SQLite's only check; on
		// PostgreSQL the deferred trigger checks again at COMMIT, on the
		// database's clock).
		err = fmt.Errorf("store: commit by %s: %w", FormatTime(st.commitBy), ErrCommitDeadline)
	}
	if err != nil {
		_ = tc.rollback() // the connection is discarded if this fails; err matters more
		return err
	}
	if err := tc.commit(ctx); err != nil {
		if _, class := s.d.classify(err); class == ErrCommitDeadline {
			return fmt.Errorf("store: commit by %s: %w", FormatTime(st.commitBy), ErrCommitDeadline)
		}
		return fmt.Errorf("store: commit: %w", err)
	}
	return nil
}

// TouchToken sets the token's LastUsedAt to at. ErrNotFound if absent.
func (s *sqlStore) TouchToken(ctx context.Context, id string, at time.Time) error {
	n, err := s.exec(ctx, "touch token", `UPDATE api_tokens SET last_used_at = ? WHERE id = ?`, s.ts(at), id)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("store: touch token %q: %w", id, ErrNotFound)
	}
	return nil
}

// sqlTx is a Tx: ops bound to one transaction.
type sqlTx struct{ ops }

// LockIssuer implements Tx.LockIssuer.
func (t *sqlTx) LockIssuer(ctx context.Context, issuer string) error {
	if t.d.lockName == "" {
		return t.check()
	}
	_, err := t.exec(ctx, "lock issuer", t.d.lockName, "keysvc/issuer/"+issuer)
	return err
}

// NotifyChange implements Tx.NotifyChange: it advances the lifecycle epoch
// (both dialects) and NOTIFYs (PostgreSQL).
func (t *sqlTx) NotifyChange(ctx context.Context, keyName string) error {
	if err := t.bumpEpoch(ctx); err != nil {
		return err
	}
	if t.d.notify == "" {
		return t.check()
	}
	_, err := t.exec(ctx, "notify change", t.d.notify, t.channel, keyName)
	return err
}

// --- statement plumbing -------------------------------------------------

// check refuses use of a finished transaction.
func (o ops) check() error {
	if o.tx != nil && o.tx.done {
		return errTxDone
	}
	return nil
}

// fail turns a driver error of operation op into the store's error, and
// marks the transaction (if any) as failed. Conflicts do not wrap the driver
// error, whose details could echo values such as token hashes.
func (o ops) fail(op string, err error) error {
	what, class := o.d.classify(err)
	switch class {
	case ErrConflict, ErrAuditAppendOnly:
		err = fmt.Errorf("store: %s: %w (%s)", op, class, what)
	case errMissingKey:
		err = fmt.Errorf("store: %s: key: %w", op, ErrNotFound)
	default:
		err = fmt.Errorf("store: %s: %w", op, err)
	}
	if o.tx != nil && o.tx.failed == nil {
		o.tx.failed = err
	}
	return err
}

func (o ops) exec(ctx context.Context, op, q string, args ...any) (int64, error) {
	if err := o.check(); err != nil {
		return 0, err
	}
	n, err := o.c.exec(ctx, q, args...)
	if err != nil {
		return 0, o.fail(op, err)
	}
	return n, nil
}

func (o ops) query(ctx context.Context, op, q string, args []any, row func(scan func(dest ...any) error) error) error {
	if err := o.check(); err != nil {
		return err
	}
	if err := o.c.query(ctx, q, args, row); err != nil {
		return o.fail(op, err)
	}
	return nil
}

// ts encodes an instant, in UTC truncated to Precision.
func (o ops) ts(t time.Time) any { return o.d.timeArg(t.UTC().Truncate(Precision)) }

// tsp encodes an optional instant; nil is NULL.
func (o ops) tsp(t *time.Time) any {
	if t == nil {
		return nil
	}
	return o.ts(*t)
}

// blob encodes bytes; nil and empty are NULL (read back as nil).
func blob(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// text encodes a JSON document as text, byte for byte; nil and empty are NULL.
func text(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

// nullText decodes a nullable text column; NULL is nil.
func nullText(s sql.NullString) []byte {
	if !s.Valid {
		return nil
	}
	return []byte(s.String)
}

// nilIfEmpty makes NULL/empty byte columns read back as nil.
func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// timeCol scans a NOT NULL instant: time.Time (PostgreSQL) or unix µs (SQLite).
type timeCol struct{ t *time.Time }

func (c timeCol) Scan(src any) error {
	t, ok, err := decodeTime(src)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("store: unexpected NULL instant")
	}
	*c.t = t
	return nil
}

// nullTimeCol scans a nullable instant; NULL is nil.
type nullTimeCol struct{ t **time.Time }

func (c nullTimeCol) Scan(src any) error {
	t, ok, err := decodeTime(src)
	if err != nil {
		return err
	}
	*c.t = nil
	if ok {
		*c.t = &t
	}
	return nil
}

func decodeTime(src any) (t time.Time, ok bool, err error) {
	switch v := src.(type) {
	case nil:
		return time.Time{}, false, nil
	case time.Time:
		return v.UTC().Truncate(Precision), true, nil
	case int64:
		return time.UnixMicro(v).UTC(), true, nil
	}
	return time.Time{}, false, fmt.Errorf("store: cannot decode instant from %T", src)
}

// --- keys ---------------------------------------------------------------

const keyCols = `name, issuer, algorithm, backend, jwks_url, policy, created_at, created_by, settings_rev`

func scanKey(scan func(...any) error) (Key, error) {
	var k Key
	var policy sql.NullString
	err := scan(&k.Name, &k.Issuer, &k.Algorithm, &k.Backend, &k.JWKSURL, &policy, timeCol{&k.CreatedAt}, &k.CreatedBy, &k.SettingsRev)
	k.Policy = nullText(policy)
	return k, err
}

func (o ops) getKey(ctx context.Context, op, name, suffix string) (Key, error) {
	var k Key
	found := false
	err := o.query(ctx, op, `SELECT `+keyCols+` FROM keys WHERE name = ?`+suffix, []any{name},
		func(scan func(...any) error) (err error) {
			k, err = scanKey(scan)
			found = true
			return err
		})
	if err != nil {
		return Key{}, err
	}
	if !found {
		return Key{}, fmt.Errorf("store: %s %q: %w", op, name, ErrNotFound)
	}
	return k, nil
}

// GetKey returns the key called name; ErrNotFound if absent.
func (o ops) GetKey(ctx context.Context, name string) (Key, error) {
	return o.getKey(ctx, "get key", name, "")
}

// ListKeys returns every key, ordered by name.
func (o ops) ListKeys(ctx context.Context) ([]Key, error) {
	var out []Key
	err := o.query(ctx, "list keys", `SELECT `+keyCols+` FROM keys ORDER BY name`, nil,
		func(scan func(...any) error) error {
			k, err := scanKey(scan)
			out = append(out, k)
			return err
		})
	return out, err
}

// LockKey locks the key row until the transaction ends and returns the key;
// ErrNotFound if absent.
func (t *sqlTx) LockKey(ctx context.Context, name string) (Key, error) {
	return t.getKey(ctx, "lock key", name, t.d.forUpdate)
}

// InsertKey inserts k; CreatedAt is stored in UTC truncated to Precision.
// ErrConflict if a key with that name exists.
func (t *sqlTx) InsertKey(ctx context.Context, k Key) error {
	_, err := t.exec(ctx, fmt.Sprintf("insert key %q", k.Name),
		`INSERT INTO keys (`+keyCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		k.Name, k.Issuer, k.Algorithm, k.Backend, k.JWKSURL, text(k.Policy), t.ts(k.CreatedAt), k.CreatedBy, k.SettingsRev)
	return err
}

// UpdateKeyPolicy replaces the key's policy (nil or empty: none) and
// moves its SettingsRev on by one. ErrNotFound if absent.
func (t *sqlTx) UpdateKeyPolicy(ctx context.Context, name string, policy []byte) error {
	op := fmt.Sprintf("update policy of key %q", name)
	n, err := t.exec(ctx, op, `UPDATE keys SET policy = ?, settings_rev = settings_rev + 1 WHERE name = ?`, text(policy), name)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("store: %s: %w", op, ErrNotFound)
	}
	return nil
}

// UpdateKeyBackend implements Tx.UpdateKeyBackend (SettingsRev moves on
// by one).
func (t *sqlTx) UpdateKeyBackend(ctx context.Context, name, backend string) error {
	op := fmt.Sprintf("update backend of key %q", name)
	n, err := t.exec(ctx, op, `UPDATE keys SET backend = ?, settings_rev = settings_rev + 1 WHERE name = ?`, backend, name)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("store: %s: %w", op, ErrNotFound)
	}
	return nil
}

// --- key versions -------------------------------------------------------

const versionCols = `kid, key_name, algorithm, backend_ref, sealed_private_key, public_jwk, state, created_at,
	published_at, activates_at, activated_at, retired_at, revoked_at, compromised_at, revocation_reason,
	material_destroyed_at, activation_armed_at`

func scanVersion(scan func(...any) error) (KeyVersion, error) {
	var v KeyVersion
	var state, jwk string
	err := scan(&v.KID, &v.KeyName, &v.Algorithm, &v.BackendRef, &v.SealedPrivateKey, &jwk, &state,
		timeCol{&v.CreatedAt}, nullTimeCol{&v.PublishedAt}, nullTimeCol{&v.ActivatesAt},
		nullTimeCol{&v.ActivatedAt}, nullTimeCol{&v.RetiredAt}, nullTimeCol{&v.RevokedAt},
		nullTimeCol{&v.CompromisedAt}, &v.RevocationReason, nullTimeCol{&v.MaterialDestroyedAt}, nullTimeCol{&v.ArmedAt})
	v.SealedPrivateKey = nilIfEmpty(v.SealedPrivateKey)
	v.PublicJWK = []byte(jwk)
	v.State = KeyState(state)
	return v, err
}

func (o ops) listVersions(ctx context.Context, op, where string, arg any) ([]KeyVersion, error) {
	var out []KeyVersion
	err := o.query(ctx, op, `SELECT `+versionCols+` FROM key_versions WHERE `+where+` ORDER BY created_at, kid`,
		[]any{arg}, func(scan func(...any) error) error {
			v, err := scanVersion(scan)
			out = append(out, v)
			return err
		})
	return out, err
}

// ListVersions returns the versions of keyName ordered by CreatedAt, then
// KID; empty (not an error) when the key has none or does not exist.
func (o ops) ListVersions(ctx context.Context, keyName string) ([]KeyVersion, error) {
	return o.listVersions(ctx, fmt.Sprintf("list versions of key %q", keyName), "key_name = ?", keyName)
}

// GetVersion returns the version with kid; ErrNotFound if absent.
func (o ops) GetVersion(ctx context.Context, kid string) (KeyVersion, error) {
	op := fmt.Sprintf("get version %q", kid)
	vs, err := o.listVersions(ctx, op, "kid = ?", kid)
	if err != nil {
		return KeyVersion{}, err
	}
	if len(vs) == 0 {
		return KeyVersion{}, fmt.Errorf("store: %s: %w", op, ErrNotFound)
	}
	return vs[0], nil
}

// LockVersion implements Tx.LockVersion.
func (t *sqlTx) LockVersion(ctx context.Context, kid string) (KeyVersion, error) {
	op := fmt.Sprintf("lock version %q", kid)
	var out []KeyVersion
	err := t.query(ctx, op, `SELECT `+versionCols+` FROM key_versions WHERE kid = ?`+t.d.forUpdate, []any{kid},
		func(scan func(...any) error) error {
			v, err := scanVersion(scan)
			out = append(out, v)
			return err
		})
	if err != nil {
		return KeyVersion{}, err
	}
	if len(out) == 0 {
		return KeyVersion{}, fmt.Errorf("store: %s: %w", op, ErrNotFound)
	}
	return out[0], nil
}

// InsertVersion inserts v (instants in UTC truncated to Precision; nil or
// empty SealedPrivateKey is stored as none). ErrConflict if the kid exists
// under any key or v would be a second active version of its key;
// ErrNotFound if v.KeyName does not exist. PublicJWK must be non-empty.
func (t *sqlTx) InsertVersion(ctx context.Context, v KeyVersion) error {
	op := fmt.Sprintf("insert version %q", v.KID)
	if !v.State.Valid() {
		return fmt.Errorf("store: %s: invalid state %q", op, v.State)
	}
	if len(v.PublicJWK) == 0 {
		return fmt.Errorf("store: %s: empty public JWK", op)
	}
	_, err := t.exec(ctx, op,
		`INSERT INTO key_versions (`+versionCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		v.KID, v.KeyName, v.Algorithm, v.BackendRef, blob(v.SealedPrivateKey), string(v.PublicJWK), string(v.State),
		t.ts(v.CreatedAt), t.tsp(v.PublishedAt), t.tsp(v.ActivatesAt), t.tsp(v.ActivatedAt),
		t.tsp(v.RetiredAt), t.tsp(v.RevokedAt), t.tsp(v.CompromisedAt), v.RevocationReason, t.tsp(v.MaterialDestroyedAt), t.tsp(v.ArmedAt))
	return err
}

// UpdateVersion overwrites State, the seven instant fields (PublishedAt ...
// CompromisedAt, ArmedAt) and RevocationReason of the version v.KID; the key
// material, MaterialDestroyedAt, KeyName and CreatedAt are never changed
// (DestroyVersionMaterial changes the first two). ErrNotFound if absent;
// ErrConflict if it would be a second active version of its key.
func (t *sqlTx) UpdateVersion(ctx context.Context, v KeyVersion) error {
	op := fmt.Sprintf("update version %q", v.KID)
	if !v.State.Valid() {
		return fmt.Errorf("store: %s: invalid state %q", op, v.State)
	}
	n, err := t.exec(ctx, op,
		`UPDATE key_versions SET state = ?, published_at = ?, activates_at = ?, activated_at = ?,
			retired_at = ?, revoked_at = ?, compromised_at = ?, revocation_reason = ?, activation_armed_at = ? WHERE kid = ?`,
		string(v.State), t.tsp(v.PublishedAt), t.tsp(v.ActivatesAt), t.tsp(v.ActivatedAt),
		t.tsp(v.RetiredAt), t.tsp(v.RevokedAt), t.tsp(v.CompromisedAt), v.RevocationReason, t.tsp(v.ArmedAt), v.KID)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("store: %s: %w", op, ErrNotFound)
	}
	return nil
}

// DestroyVersionMaterial implements Tx.DestroyVersionMaterial.
func (t *sqlTx) DestroyVersionMaterial(ctx context.Context, kid string, at time.Time) error {
	op := fmt.Sprintf("destroy material of version %q", kid)
	n, err := t.exec(ctx, op,
		`UPDATE key_versions SET material_destroyed_at = COALESCE(material_destroyed_at, ?), sealed_private_key = NULL WHERE kid = ?`,
		t.ts(at), kid)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("store: %s: %w", op, ErrNotFound)
	}
	return nil
}

// KIDsWithPrefix returns every kid (of any key) starting with prefix
// (case-sensitive, no wildcards), in ascending order.
func (t *sqlTx) KIDsWithPrefix(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	err := t.query(ctx, fmt.Sprintf("list kids with prefix %q", prefix),
		`SELECT kid FROM key_versions WHERE substr(kid, 1, length(CAST(? AS TEXT))) = ? ORDER BY kid`,
		[]any{prefix, prefix}, func(scan func(...any) error) error {
			var kid string
			err := scan(&kid)
			out = append(out, kid)
			return err
		})
	return out, err
}

// --- audit --------------------------------------------------------------

const auditCols = `seq, at, actor, action, key_name, kid, reason, details, prev_hash, hash`

// ListAudit returns rows with Seq > afterSeq, ascending; at most limit rows
// when limit > 0.
func (o ops) ListAudit(ctx context.Context, afterSeq int64, limit int) ([]AuditEvent, error) {
	q := `SELECT ` + auditCols + ` FROM audit_events WHERE seq > ? ORDER BY seq`
	args := []any{afterSeq}
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, int64(limit))
	}
	var out []AuditEvent
	err := o.query(ctx, "list audit", q, args, func(scan func(...any) error) error {
		var ev AuditEvent
		var details sql.NullString
		err := scan(&ev.Seq, timeCol{&ev.At}, &ev.Actor, &ev.Action, &ev.KeyName, &ev.KID, &ev.Reason,
			&details, &ev.PrevHash, &ev.Hash)
		ev.Details = nullText(details)
		out = append(out, ev)
		return err
	})
	return out, err
}

// AppendAudit appends ev to the audit trail and returns it completed: Seq is
// the last row's + 1, PrevHash the last row's Hash ("" for the first), At
// is truncated to Precision in UTC (Now() if zero), empty Details become nil,
// and Hash is AuditHash of the result. On PostgreSQL it takes a
// transaction-scoped lock that serializes appenders until commit, so append
// late in a transaction (after LockKey) to keep lock order consistent.
// Details must be a JSON object (or nil).
func (t *sqlTx) AppendAudit(ctx context.Context, ev AuditEvent) (AuditEvent, error) {
	if t.d.lockAudit != "" {
		if _, err := t.exec(ctx, "lock audit trail", t.d.lockAudit); err != nil {
			return AuditEvent{}, err
		}
	}
	var last struct {
		seq  int64
		hash string
	}
	err := t.query(ctx, "read last audit row", `SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1`, nil,
		func(scan func(...any) error) error { return scan(&last.seq, &last.hash) })
	if err != nil {
		return AuditEvent{}, err
	}
	ev.Seq, ev.PrevHash = last.seq+1, last.hash
	if ev.At.IsZero() {
		ev.At = Now()
	}
	ev.At = ev.At.UTC().Truncate(Precision)
	ev.Details = nilIfEmpty(ev.Details)
	if len(ev.Details) > 0 && !json.Valid(ev.Details) {
		return AuditEvent{}, fmt.Errorf("store: append audit %q: details are not valid JSON", ev.Action)
	}
	if ev.Hash, err = AuditHash(ev); err != nil {
		return AuditEvent{}, err
	}
	_, err = t.exec(ctx, fmt.Sprintf("append audit row %d", ev.Seq),
		`INSERT INTO audit_events (`+auditCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		ev.Seq, t.ts(ev.At), ev.Actor, ev.Action, ev.KeyName, ev.KID, ev.Reason, text(ev.Details), ev.PrevHash, ev.Hash)
	if err != nil {
		return AuditEvent{}, err
	}
	return ev, nil
}

// --- API tokens ---------------------------------------------------------

const tokenCols = `id, name, sha256, scopes, created_at, expires_at, revoked_at, last_used_at`

// ListTokens returns every token ordered by CreatedAt, then ID. A row
// whose scopes column is not a JSON array of strings reads with nil
// Scopes (it grants no scope) instead of failing the whole list: one
// malformed row must not stop every token refresh, and so every
// revocation, nor the revocation command itself (an attack review,
// session 48).
func (o ops) ListTokens(ctx context.Context) ([]APIToken, error) {
	var out []APIToken
	err := o.query(ctx, "list tokens", `SELECT `+tokenCols+` FROM api_tokens ORDER BY created_at, id`, nil,
		func(scan func(...any) error) error {
			var tk APIToken
			var scopes string
			err := scan(&tk.ID, &tk.Name, &tk.SHA256, &scopes, timeCol{&tk.CreatedAt},
				nullTimeCol{&tk.ExpiresAt}, nullTimeCol{&tk.RevokedAt}, nullTimeCol{&tk.LastUsedAt})
			if err != nil {
				return err
			}
			if json.Unmarshal([]byte(scopes), &tk.Scopes) != nil {
				tk.Scopes = nil
			}
			out = append(out, tk)
			return nil
		})
	return out, err
}

// InsertToken inserts tk; SHA256 must be 32 bytes. Scopes are stored as a
// JSON array (nil reads back as nil, empty as empty). ErrConflict on a
// duplicate ID or hash; the error never contains the hash.
func (t *sqlTx) InsertToken(ctx context.Context, tk APIToken) error {
	op := fmt.Sprintf("insert token %q", tk.ID)
	if len(tk.SHA256) != 32 {
		return fmt.Errorf("store: %s: hash is %d bytes, want 32", op, len(tk.SHA256))
	}
	scopes, err := json.Marshal(tk.Scopes)
	if err != nil {
		return fmt.Errorf("store: %s: scopes: %w", op, err)
	}
	_, err = t.exec(ctx, op, `INSERT INTO api_tokens (`+tokenCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		tk.ID, tk.Name, tk.SHA256, string(scopes), t.ts(tk.CreatedAt),
		t.tsp(tk.ExpiresAt), t.tsp(tk.RevokedAt), t.tsp(tk.LastUsedAt))
	return err
}

// RevokeToken records the token's revocation at at; revoking an already
// revoked token keeps the first instant. ErrNotFound if absent.
func (t *sqlTx) RevokeToken(ctx context.Context, id string, at time.Time) error {
	op := fmt.Sprintf("revoke token %q", id)
	n, err := t.exec(ctx, op, `UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, t.ts(at), id)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("store: %s: %w", op, ErrNotFound)
	}
	return nil
}
