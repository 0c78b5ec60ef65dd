// Package backends defines where a key version's private half lives. Every
// backend — software (sealed at rest), PKCS#11, AWS KMS — hands the signing
// layer a standard crypto.Signer, so everything above it (JWS, tests,
// benchmarks) is backend-blind. Backends know nothing of HTTP or SQL.
package backends

import (
	"context"
	"crypto"
	"errors"
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
