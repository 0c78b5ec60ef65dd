// Package store holds keysvc's key history: keys, key versions, the audit
// trail and API token hashes. It has two implementations with the same
// semantics — PostgreSQL through pgx (production, several replicas) and an
// embedded SQLite file (first run, single node) — and one test suite that
// runs against both.
//
// The store knows nothing of key material: a key version carries its public
// JWK, a backend reference (a URI naming where the private half lives) and,
// for the software backend only, an opaque sealed blob that the store never
// interprets. Lifecycle rules (which transitions are allowed, when) live in
// package rotation; the store only persists them, transactionally.
package store

import (
	"context"
	"errors"
	"strings"
	"time"
)

// KeyState is a key version's lifecycle state (VRP key lifecycle K2:
// vrp_key_status). Transitions are enforced by package rotation.
type KeyState string

// The four lifecycle states of a key version.
const (
	StatePending KeyState = "pending" // published, not yet signing (K3)
	StateActive  KeyState = "active"  // the one version that signs
	StateRetired KeyState = "retired" // no longer signs; still published for verification
	StateRevoked KeyState = "revoked" // compromised (K4); left out of the plain JWKS
)

// Valid reports whether s is one of the four states.
func (s KeyState) Valid() bool {
	switch s {
	case StatePending, StateActive, StateRetired, StateRevoked:
		return true
	}
	return false
}

// Key is a named signing key: a sequence of key versions, exactly one of
// which is active at a time (enforced by a unique index).
type Key struct {
	Name      string    // [a-z0-9][a-z0-9-]{0,62}; unique
	Issuer    string    // DNS name used in kids, e.g. "villaakerlyckan.se"
	Algorithm string    // JWS alg of every version: "EdDSA" (RFC 8037) or "ES256"
	Backend   string    // backend kind: "software", "pkcs11", "awskms"
	JWKSURL   string    // where verifiers fetch this key's JWKS; the attestation "source"
	Policy    []byte    // rotation policy as JSON (opaque to the store); may be nil
	CreatedAt time.Time // UTC, microsecond precision
	CreatedBy string    // actor that created it
	// SettingsRev counts the changes of the key's settings: 0 as created,
	// +1 with every UpdateKeyPolicy and UpdateKeyBackend (ADR 0036: the
	// transparency log holds a marker of every revision).
	SettingsRev int64
}

// KeyVersion is one key material of a Key, identified by its kid (K1). A kid
// is never reused: the store enforces uniqueness across all keys.
type KeyVersion struct {
	KID              string   // "<issuer>-YYYY-MM-DD-NN"
	KeyName          string   // owning Key.Name
	Algorithm        string   // same as the key's
	BackendRef       string   // URI of the private half, e.g. "software:kid=..."
	SealedPrivateKey []byte   // software backend only: AES-256-GCM sealed seed; nil otherwise
	PublicJWK        []byte   // public JWK as JSON (RFC 7517), without private members
	State            KeyState // current state
	CreatedAt        time.Time
	// Instants each state began (nil until reached). NotBefore/NotAfter are
	// the signing window published as vrp_not_before / vrp_not_after.
	PublishedAt      *time.Time // became pending (published before signing)
	ActivatesAt      *time.Time // scheduled activation for a pending version
	ActivatedAt      *time.Time // became active: vrp_not_before
	RetiredAt        *time.Time // stopped signing: vrp_not_after
	RevokedAt        *time.Time // revocation recorded
	CompromisedAt    *time.Time // vrp_compromised_at (may precede RevokedAt)
	RevocationReason string
	// MaterialDestroyedAt is when the private half was destroyed for good
	// (Tx.DestroyVersionMaterial; nil while it exists). A destroyed
	// version keeps its public JWK and lifecycle instants, so receipts it
	// signed stay verifiable, but it can never sign again.
	MaterialDestroyedAt *time.Time
	// ArmedAt is when a pending version's activation was armed: committed
	// with its final ActivatesAt, at least the propagation bound ahead
	// (ADR 0014). Replicas switch to a pending version at ActivatesAt only
	// when it is armed. nil for an unarmed pending version (published, its
	// ActivatesAt only planned) and for versions that never were pending.
	ArmedAt *time.Time
}

// BackendKind returns the backend kind holding the version's private half:
// the scheme of BackendRef ("software:…", "pkcs11:…", "awskms:…"), or
// fallback (the key's backend) when the reference has none. It can differ
// from the key's current backend after the key moved to another backend.
func (v KeyVersion) BackendKind(fallback string) string {
	if i := strings.IndexByte(v.BackendRef, ':'); i > 0 {
		return v.BackendRef[:i]
	}
	return fallback
}

// AuditEvent is one row of the append-only, hash-chained audit trail. Seq,
// PrevHash and Hash are assigned by AppendAudit.
type AuditEvent struct {
	Seq      int64     // 1, 2, 3, ... without gaps
	At       time.Time // UTC, microsecond precision
	Actor    string    // principal that caused the event
	Action   string    // "key.create", "version.activate", "version.retire", ...
	KeyName  string    // may be empty for events not about one key
	KID      string    // may be empty
	Reason   string    // free text given by the actor; may be empty
	Details  []byte    // JSON object with event-specific facts; may be nil
	PrevHash string    // hex SHA-256 of the previous row ("" for the first)
	Hash     string    // hex SHA-256 over this row's canonical JSON (see AuditHash)
}

// APIToken is a bearer credential. Only the SHA-256 of the secret is stored.
type APIToken struct {
	ID         string   // short public identifier, shown in listings
	Name       string   // human label
	SHA256     []byte   // SHA-256 of the secret token string, 32 bytes
	Scopes     []string // e.g. "sign:*", "admin:keys"
	CreatedAt  time.Time
	ExpiresAt  *time.Time // nil: no expiry
	RevokedAt  *time.Time
	LastUsedAt *time.Time
}

// Approval is a protected lifecycle change waiting for a second principal
// (the two-person rule). Params is the action's JSON (opaque to the store).
type Approval struct {
	ID          string
	KeyName     string
	Action      string // "revoke", "destroy" or "policy"
	KID         string // "" for "policy"
	Params      []byte
	RequestedBy string // the requester's principal id ("token:ID")
	// RequestedByName is the requester's display name ("token:ID(alice)").
	RequestedByName string
	RequestedAt     time.Time
	ExpiresAt       time.Time
	Status          string // "pending", "approved", "expired"
	DecidedBy       string // the approver's principal id
	DecidedByName   string // the approver's display name
	DecidedAt       *time.Time
}

// Errors returned by every implementation; test with errors.Is.
var (
	ErrNotFound = errors.New("store: not found")
	// ErrConflict: a unique constraint refused the write (duplicate key
	// name, duplicate kid, a second active version of one key, ...).
	ErrConflict = errors.New("store: conflict")
	// ErrWatchUnsupported: the store cannot push change notifications.
	ErrWatchUnsupported = errors.New("store: change notifications not supported; poll instead")
	// ErrAuditAppendOnly: the audit trail refuses UPDATE and DELETE.
	ErrAuditAppendOnly = errors.New("store: audit trail is append-only")
	// ErrCommitDeadline: the transaction would have committed after the
	// deadline given to Tx.CommitBy, so it was rolled back; nothing of it
	// was written. Retry with a later deadline.
	ErrCommitDeadline = errors.New("store: commit deadline passed")
)

// Reader is the read side, usable inside and outside a transaction.
type Reader interface {
	GetKey(ctx context.Context, name string) (Key, error) // ErrNotFound
	ListKeys(ctx context.Context) ([]Key, error)          // ordered by name
	// ListVersions returns a key's versions ordered by CreatedAt, then KID.
	ListVersions(ctx context.Context, keyName string) ([]KeyVersion, error)
	GetVersion(ctx context.Context, kid string) (KeyVersion, error) // ErrNotFound
	// ListAudit returns audit rows with Seq > afterSeq, ascending, at most limit (limit <= 0: all).
	ListAudit(ctx context.Context, afterSeq int64, limit int) ([]AuditEvent, error)
	ListTokens(ctx context.Context) ([]APIToken, error)
	// ListApprovals returns approvals, newest first; status "" means all.
	ListApprovals(ctx context.Context, status string) ([]Approval, error)
	// LifecycleEpoch returns the lifecycle epoch: a counter that every
	// transaction calling NotifyChange advances (ADR 0014, the freshness
	// probe).
	LifecycleEpoch(ctx context.Context) (int64, error)
	// ReadHistory returns every key with its versions (a key has at least
	// one) and the lifecycle epoch, read by one statement: one round trip
	// and one snapshot (what a replica reloads, ADR 0014).
	ReadHistory(ctx context.Context) (History, error)
	// GetIdempotencyKey returns the idempotency record of principal and
	// key; ErrNotFound if absent.
	GetIdempotencyKey(ctx context.Context, principal, key string) (IdempotencyKey, error)
}

// Tx is one explicit transaction. All writes happen through a Tx.
//
// A Tx is valid only inside the InTx callback that received it and must not
// be used from several goroutines at once. After any statement fails (a
// conflict, for instance) the transaction can only roll back, as on
// PostgreSQL: InTx returns an error even if the callback swallowed it.
type Tx interface {
	Reader
	// LockKey takes an exclusive lock on the key row until the transaction
	// ends (SELECT ... FOR UPDATE on PostgreSQL; SQLite transactions are
	// already exclusive) and returns it. ErrNotFound if absent.
	LockKey(ctx context.Context, name string) (Key, error)
	// LockVersion takes an exclusive lock on the version row until the
	// transaction ends (SELECT ... FOR UPDATE on PostgreSQL) and returns
	// it: what the transaction then checks or acts on (its backend
	// reference, its public key) cannot change under it before the commit
	// at READ COMMITTED. ErrNotFound if absent.
	LockVersion(ctx context.Context, kid string) (KeyVersion, error)
	InsertKey(ctx context.Context, k Key) error // ErrConflict on duplicate name
	UpdateKeyPolicy(ctx context.Context, name string, policy []byte) error
	// UpdateKeyBackend sets the backend kind new versions of the key use.
	UpdateKeyBackend(ctx context.Context, name, backend string) error
	InsertVersion(ctx context.Context, v KeyVersion) error // ErrConflict on duplicate kid / second active
	// UpdateVersion overwrites State and the instant fields of the version
	// with v.KID (not MaterialDestroyedAt). ErrNotFound if absent;
	// ErrConflict on a second active.
	UpdateVersion(ctx context.Context, v KeyVersion) error
	// DestroyVersionMaterial records that the private half of version kid
	// was destroyed at at: it sets MaterialDestroyedAt (keeping the first
	// instant when already set) and drops SealedPrivateKey (NULL), in this
	// transaction. Nothing else of the version changes. ErrNotFound if
	// absent.
	DestroyVersionMaterial(ctx context.Context, kid string, at time.Time) error
	// LockIssuer serializes, until the transaction ends, every transaction
	// that mints kids for issuer, across keys and processes (PostgreSQL
	// advisory lock; SQLite transactions are already exclusive).
	LockIssuer(ctx context.Context, issuer string) error
	// KIDsWithPrefix lists every kid (of any key) starting with prefix.
	KIDsWithPrefix(ctx context.Context, prefix string) ([]string, error)
	// AppendAudit assigns Seq, PrevHash and Hash (see AuditHash) and inserts.
	AppendAudit(ctx context.Context, ev AuditEvent) (AuditEvent, error)
	// NotifyChange tells other processes, once this transaction commits,
	// that key history of keyName changed: it advances the lifecycle epoch
	// (both dialects) and NOTIFYs (PostgreSQL, delivered only on commit).
	NotifyChange(ctx context.Context, keyName string) error
	// CommitBy makes the transaction fail with ErrCommitDeadline, rolled
	// back, unless it commits by deadline (the earliest of several calls
	// wins). PostgreSQL checks at COMMIT on the database's clock (deferred
	// constraint trigger keysvc_commit_deadline, migration 00005); SQLite,
	// whose one writer process owns the file, checks right before COMMIT.
	// It advances the lifecycle epoch too.
	CommitBy(ctx context.Context, deadline time.Time) error
	// ClaimIdempotencyKey records k (Status 0, no Body) in this
	// transaction: the mutation committing with it owns the key.
	// ErrConflict when the principal already used the key. Records older
	// than IdempotencyTTL are purged on the way.
	ClaimIdempotencyKey(ctx context.Context, k IdempotencyKey) error
	InsertToken(ctx context.Context, t APIToken) error    // ErrConflict on duplicate ID or hash
	InsertApproval(ctx context.Context, a Approval) error // ErrConflict on duplicate ID
	// LockApproval returns the approval with id, locked until the
	// transaction ends. ErrNotFound if absent.
	LockApproval(ctx context.Context, id string) (Approval, error)
	// DecideApproval sets Status, DecidedBy and DecidedAt of approval a.ID.
	DecideApproval(ctx context.Context, a Approval) error
	RevokeToken(ctx context.Context, id string, at time.Time) error
}

// Store is a key-history database.
type Store interface {
	Reader
	// InTx runs fn in one transaction: committed if fn returns nil, rolled
	// back otherwise (and on panic). Serializable with respect to other
	// InTx calls that lock the same key.
	InTx(ctx context.Context, fn func(Tx) error) error
	// Watch calls fn with the key name of every change committed by any
	// process (see Tx.NotifyChange) until ctx ends or the connection fails;
	// it returns the error then (nil on ctx end). ErrWatchUnsupported on
	// SQLite: callers fall back to polling.
	Watch(ctx context.Context, fn func(keyName string)) error
	// TouchToken records a token's last use; best effort, outside any tx.
	TouchToken(ctx context.Context, id string, at time.Time) error
	// Scrub makes the database drop copies of overwritten rows that it
	// still holds after a commit, so that a destroyed version's sealed key
	// is gone from the live files: SQLite checkpoints the WAL into the
	// database (secure_delete zeroes the old content there) and truncates
	// it; PostgreSQL VACUUMs key_versions (dead row versions). Outside any
	// transaction; backups taken before keep what they hold.
	Scrub(ctx context.Context) error
	// CompleteIdempotencyKey stores the response (HTTP status and body) of
	// the mutation that claimed principal's key. ErrNotFound if absent.
	CompleteIdempotencyKey(ctx context.Context, principal, key string, status int, body []byte) error
	// Kind returns "postgres" or "sqlite".
	Kind() string
	Close() error
}

// Config selects an implementation: PostgreSQL when PostgresURL is set,
// otherwise the SQLite file at SQLitePath.
type Config struct {
	PostgresURL string // e.g. "postgres://user@127.0.0.1:5432/db?search_path=x"
	// SQLitePath is e.g. "./keysvc-data/keysvc.db"; Migrate creates it
	// (0600, directory 0700) if missing, Open requires it to exist.
	SQLitePath string
}
