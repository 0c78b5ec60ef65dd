// Package backends defines where a key version's private half lives. Every
// backend — software (sealed at rest), PKCS#11, AWS KMS — hands the signing
// layer a standard crypto.Signer, so everything above it (JWS, tests,
// benchmarks) is backend-blind. Backends know nothing of HTTP or SQL.
package backends

import (
	"context"
	"crypto"
	"errors"
	"time"
)

// CreateRequest asks a backend for a new key pair.
type CreateRequest struct {
	KeyName   string // keysvc key name, for labels and tags
	KID       string // the new key version's kid; used as label / AAD
	Algorithm string // JWS alg: "EdDSA" or "ES256"
}

// Handle is what key history must persist to find a private half again.
type Handle struct {
	// Ref is a printable URI naming the private half, e.g.
	// "software:villaakerlyckan.se-2026-05-18-01?kek=1f2e3d4c5b6a7988".
	Ref string
	// Sealed is backend-private ciphertext (software backend only); nil
	// for backends whose keys live elsewhere. Never plaintext key material.
	Sealed []byte
	// Public is the public key (ed25519.PublicKey or *ecdsa.PublicKey).
	Public crypto.PublicKey
	// KeyName is the keysvc key the version belongs to (CreateRequest.
	// KeyName when created; the version's key when loaded). The software
	// backend binds its sealed blob to it, so a version moved to another
	// key in key history does not load.
	KeyName string
}

// Backend creates key pairs and loads signers for them.
type Backend interface {
	// Kind names the backend: "software", "pkcs11", "awskms".
	Kind() string
	// CreateKey generates a key pair for req.Algorithm. Errors wrap
	// ErrUnsupportedAlgorithm or ErrUnavailable where they apply.
	CreateKey(ctx context.Context, req CreateRequest) (Handle, error)
	// Signer loads the private half named by h (kid identifies the key
	// version and must match the one it was created for). The returned
	// signer must be safe for concurrent use.
	Signer(ctx context.Context, kid string, h Handle) (crypto.Signer, error)
	Close() error
}

// HealthChecker is implemented by backends that can lose their device or
// service (an HSM token, KMS). Healthy returns nil when every key the
// backend serves can sign; /readyz reports unready otherwise.
type HealthChecker interface {
	Healthy(ctx context.Context) error
}

// DestroyOptions tunes DestroyKey. The zero value asks for the defaults.
type DestroyOptions struct {
	// PendingWindowDays is how long a backend that destroys key material
	// only after a waiting period (AWS KMS: ScheduleKeyDeletion, 7 to 30
	// days) waits; 0 means DefaultPendingWindowDays. Backends that destroy
	// at once (PKCS#11) or hold nothing outside key history (software)
	// ignore it.
	PendingWindowDays int
}

// Limits of DestroyOptions.PendingWindowDays (AWS KMS's own limits).
const (
	MinPendingWindowDays     = 7
	MaxPendingWindowDays     = 30
	DefaultPendingWindowDays = 30
)

// DestroyResult describes what DestroyKey did.
type DestroyResult struct {
	// DeletionDate is when the material is actually destroyed, for
	// backends with a waiting period (AWS KMS); nil when it is gone now.
	DeletionDate *time.Time
	// AlreadyDestroyed is true when the material was already gone (or, for
	// AWS KMS, already scheduled for deletion): DestroyKey is idempotent.
	AlreadyDestroyed bool
	// Note is a short human-readable remark for the audit trail, e.g.
	// "private key object already absent from the token"; may be empty.
	Note string
}

// Destroyer is implemented by backends that can destroy the private half
// of a key version for good. keysvc calls it only for versions that no
// longer sign (retired or revoked), inside the key-history transaction that
// records the destruction (rotation.Manager.RequestDestroy), after which
// the version's signer is never loaded again. Public keys are not affected:
// they stay in key history, so receipts the version signed stay verifiable.
//
// DestroyKey destroys the private half named by h (kid identifies the key
// version, as for Signer; h.Public is the recorded public key, which
// backends use to make sure they destroy the right object). It must be
// idempotent: material that is already gone (or already scheduled for
// deletion) is success with DestroyResult.AlreadyDestroyed set, so a retry
// after a failed key-history commit records the destruction. Errors wrap
// ErrUnavailable when the device or service cannot be reached (nothing was
// destroyed, or it is unknown whether it was: retry), ErrKeyMismatch when
// the object found does not belong to the version (nothing is destroyed).
//
//   - software: the private half is the KEK-sealed blob in key history; the
//     store drops it in the same transaction. DestroyKey does nothing.
//     Backups of the database taken earlier still hold the sealed blob
//     (and the KEK opens it): destruction is only complete once those
//     backups expire.
//   - pkcs11: C_DestroyObject on the version's private key object (and its
//     public key object); immediate and irreversible.
//   - awskms: ScheduleKeyDeletion with opt.PendingWindowDays; the key is
//     disabled at once and destroyed by KMS on DeletionDate (cancellable in
//     AWS until then).
type Destroyer interface {
	DestroyKey(ctx context.Context, kid string, h Handle, opt DestroyOptions) (DestroyResult, error)
}

// Errors shared by backends; test with errors.Is. Signers return them
// wrapped from Sign, and the HTTP API maps them to stable codes.
var (
	ErrUnsupportedAlgorithm = errors.New("backend: unsupported algorithm")
	// ErrUnavailable: the device or service cannot be reached or failed
	// (HTTP 503 backend_unavailable). Never a hang: backends time out.
	ErrUnavailable = errors.New("backend: unavailable")
	// ErrThrottled: the service refused for rate (HTTP 503 backend_throttled).
	ErrThrottled = errors.New("backend: throttled")
	// ErrKeyDisabled: the key exists but may not sign (HTTP 503 key_disabled).
	ErrKeyDisabled = errors.New("backend: key disabled")
	// ErrMessageTooLarge: the backend cannot sign a message this long
	// (AWS KMS RAW Ed25519: 4096 bytes) (HTTP 413 message_too_large).
	ErrMessageTooLarge = errors.New("backend: message too large for this backend")
	// ErrKeyMismatch: the private half does not belong to the recorded
	// key version (wrong KEK, swapped ciphertext, tampering).
	ErrKeyMismatch = errors.New("backend: key material does not match the key version")
)
