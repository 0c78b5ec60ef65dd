// Package client is a Go client for keysvc's HTTP API, used by the admin
// CLI and by the tests, so the API is exercised the way users exercise it.
// Errors from the server are *Error values carrying the stable error code.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/keysvc/keysvc/internal/sameorigin"
)

// Client talks to one keysvc server.
type Client struct {
	BaseURL string // e.g. "http://127.0.0.1:8080"
	Token   string // bearer token
	// HTTP is the client requests go through (New: a 30 s timeout; nil:
	// no timeout). Either default follows a redirect only within the
	// origin of BaseURL (internal/sameorigin): keysvc's API never
	// redirects, and a redirect elsewhere would let another server answer
	// — a signature, a key, a rotation's outcome — for the one configured.
	// A Client given its own http.Client sets its CheckRedirect itself.
	HTTP *http.Client
	// Idempotent makes every POST and PUT carry a fresh Idempotency-Key
	// (128 random bits, hex) and retries it, with the same key, when the
	// answer is lost (connection reset, EOF, timeout, 502, 504) or the
	// server reports the first attempt still running (409
	// idempotency_in_flight): at most MaxAttempts attempts, backing off
	// 0.5 s, 1 s, 2 s, ... while ctx allows. The server performs the
	// change at most once and replays its answer (ADR 0014).
	Idempotent  bool
	MaxAttempts int // default 6
}

// noTimeout is the http.Client of a Client whose HTTP is nil.
var noTimeout = sameorigin.Client(0)

// New returns a Client for baseURL authenticating with token.
func New(baseURL, token string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Token: token, HTTP: sameorigin.Client(30 * time.Second)}
}

// Error is an API error: the HTTP status and the server's stable code.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (HTTP %d): %s", e.Code, e.Status, e.Message)
}

// Do sends method path with body (marshalled as JSON when not nil) and
// decodes a 2xx response into out (when not nil). With c.Idempotent, a
// POST or PUT carries an Idempotency-Key and is retried safely (see
// Client.Idempotent).
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var raw []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		raw = b
	}
	key := ""
	attempts := 1
	if c.Idempotent && (method == http.MethodPost || method == http.MethodPut) {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return err
		}
		key = hex.EncodeToString(b[:])
		attempts = c.MaxAttempts
		if attempts <= 0 {
			attempts = 6
		}
	}
	wait := 500 * time.Millisecond
	for i := 1; ; i++ {
		err := c.do(ctx, method, path, raw, body != nil, key, out)
		if i >= attempts || !retryable(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// retryable reports whether a request whose answer was err may be sent
// again with the same Idempotency-Key: the answer was lost, or the first
// attempt is still running.
func retryable(err error) bool {
	var ae *Error
	if errors.As(err, &ae) {
		return ae.Status == http.StatusBadGateway || ae.Status == http.StatusGatewayTimeout || ae.Code == "idempotency_in_flight"
	}
	var ne net.Error
	return err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &ne) && ne.Timeout()))
}

func (c *Client) do(ctx context.Context, method, path string, raw []byte, hasBody bool, key string, out any) error {
	var rd io.Reader
	if hasBody {
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return err
	}
	if hasBody {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = noTimeout
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var eb struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(data, &eb) != nil || eb.Error.Code == "" {
			return &Error{Status: resp.StatusCode, Code: "http_error", Message: strings.TrimSpace(string(data))}
		}
		return &Error{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = data
		return nil
	}
	return json.Unmarshal(data, out)
}

// Key is a key as listed by the admin API.
type Key struct {
	Name      string    `json:"name"`
	Issuer    string    `json:"issuer"`
	Algorithm string    `json:"algorithm"`
	Backend   string    `json:"backend"`
	JWKSURL   string    `json:"jwks_url"`
	ActiveKID string    `json:"active_kid"`
	Versions  int       `json:"versions"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by"`
	Default   bool      `json:"default"`
	Policy    Policy    `json:"policy"`
	NextKID   string    `json:"next_kid"`
	NextAt    string    `json:"next_at"`
}

// Version is a key version with its lifecycle members.
type Version struct {
	KID           string    `json:"kid"`
	Kty           string    `json:"kty"`
	Crv           string    `json:"crv"`
	X             string    `json:"x"`
	Y             string    `json:"y,omitempty"`
	Alg           string    `json:"alg"`
	Status        string    `json:"vrp_key_status"`
	NotBefore     string    `json:"vrp_not_before,omitempty"`
	NotAfter      string    `json:"vrp_not_after,omitempty"`
	CompromisedAt string    `json:"vrp_compromised_at,omitempty"`
	Reason        string    `json:"vrp_revocation_reason,omitempty"`
	BackendRef    string    `json:"backend_ref"`
	CreatedAt     time.Time `json:"created_at"`
	// Thumbprint is the RFC 7638 JWK thumbprint (SHA-256, base64url) of
	// the version's public key.
	Thumbprint string `json:"vrp_jwk_thumbprint"`
	// MaterialDestroyedAt is when the private key material was destroyed
	// (RFC 3339); empty while it exists.
	MaterialDestroyedAt string `json:"material_destroyed_at,omitempty"`
}

// CreateKeyRequest is the body of CreateKey.
type CreateKeyRequest struct {
	Name      string  `json:"name"`
	Issuer    string  `json:"issuer"`
	Algorithm string  `json:"algorithm,omitempty"`
	Backend   string  `json:"backend,omitempty"`
	JWKSURL   string  `json:"jwks_url,omitempty"`
	Policy    *Policy `json:"policy,omitempty"`
	Reason    string  `json:"reason,omitempty"`
	// ShareIssuer lets the key take an issuer other keys already have.
	ShareIssuer bool `json:"share_issuer,omitempty"`
}

// CreateKey creates a key with its first active version.
func (c *Client) CreateKey(ctx context.Context, req CreateKeyRequest) (Key, Version, error) {
	var out struct {
		Key     Key     `json:"key"`
		Version Version `json:"version"`
	}
	err := c.Do(ctx, http.MethodPost, "/v1/keys", req, &out)
	return out.Key, out.Version, err
}

// ListKeys lists every key.
func (c *Client) ListKeys(ctx context.Context) ([]Key, error) {
	var out struct {
		Keys []Key `json:"keys"`
	}
	err := c.Do(ctx, http.MethodGet, "/v1/keys", nil, &out)
	return out.Keys, err
}

// Versions lists a key's versions, oldest first.
func (c *Client) Versions(ctx context.Context, name string) ([]Version, error) {
	var out struct {
		Versions []Version `json:"versions"`
	}
	err := c.Do(ctx, http.MethodGet, "/v1/keys/"+url.PathEscape(name)+"/versions", nil, &out)
	return out.Versions, err
}

// Rotate retires the active version and activates the pending version, or
// a new one, now (emergency rotation).
func (c *Client) Rotate(ctx context.Context, name, reason string) (active, retired Version, err error) {
	var out struct {
		Active  Version `json:"active"`
		Retired Version `json:"retired"`
	}
	err = c.Do(ctx, http.MethodPost, "/v1/keys/"+url.PathEscape(name)+"/rotate", map[string]string{"mode": "now", "reason": reason}, &out)
	return out.Active, out.Retired, err
}

// ScheduleRotation publishes a pending version that activates after the
// key's prepublish period.
func (c *Client) ScheduleRotation(ctx context.Context, name, reason string) (pending Version, err error) {
	var out struct {
		Pending Version `json:"pending"`
	}
	err = c.Do(ctx, http.MethodPost, "/v1/keys/"+url.PathEscape(name)+"/rotate", map[string]string{"mode": "scheduled", "reason": reason}, &out)
	return out.Pending, err
}

// Policy is a key's rotation policy; durations as Go duration strings.
type Policy struct {
	RotationPeriod string `json:"rotation_period,omitempty"`
	Prepublish     string `json:"prepublish,omitempty"`
	Retention      string `json:"retention,omitempty"`
	TwoPersonRule  bool   `json:"two_person_rule,omitempty"`
}

// SetPolicy replaces a key's rotation policy. Switching the two-person rule
// off while it is on is filed for a second officer's approval: the error is
// then a *PendingApproval and the policy is unchanged.
func (c *Client) SetPolicy(ctx context.Context, name string, p Policy, reason string) error {
	body := map[string]any{"rotation_period": p.RotationPeriod, "prepublish": p.Prepublish, "retention": p.Retention, "two_person_rule": p.TwoPersonRule, "reason": reason}
	var out struct {
		Approval *Approval `json:"approval"`
	}
	err := c.Do(ctx, http.MethodPut, "/v1/keys/"+url.PathEscape(name)+"/policy", body, &out)
	if err == nil && out.Approval != nil {
		return &PendingApproval{Approval: *out.Approval}
	}
	return err
}

// SetBackend moves a key to another backend: its next versions are created
// there; existing versions stay where they are and keep verifying.
func (c *Client) SetBackend(ctx context.Context, name, backend, reason string) error {
	return c.Do(ctx, http.MethodPut, "/v1/keys/"+url.PathEscape(name)+"/backend", map[string]string{"backend": backend, "reason": reason}, nil)
}

// Activate promotes a pending version now, once it has been published for
// longer than the JWKS max-age (else 409 activation_too_early).
func (c *Client) Activate(ctx context.Context, kid, reason string) (Version, error) {
	var out struct {
		Active Version `json:"active"`
	}
	err := c.Do(ctx, http.MethodPost, "/v1/versions/"+url.PathEscape(kid)+"/activate", map[string]string{"reason": reason}, &out)
	return out.Active, err
}

// ActivateEmergency promotes a pending version now even if it has not been
// published longer than the JWKS max-age (verifiers with a cached JWKS
// reject its first signatures); reason is required and the activation is
// audited as an emergency.
func (c *Client) ActivateEmergency(ctx context.Context, kid, reason string) (Version, error) {
	var out struct {
		Active Version `json:"active"`
	}
	err := c.Do(ctx, http.MethodPost, "/v1/versions/"+url.PathEscape(kid)+"/activate", map[string]any{"reason": reason, "emergency": true}, &out)
	return out.Active, err
}

// Approval is a two-person approval request.
type Approval struct {
	ID          string          `json:"id"`
	Key         string          `json:"key"`
	Action      string          `json:"action"`
	KID         string          `json:"kid"`
	Params      json.RawMessage `json:"params"`
	RequestedBy string          `json:"requested_by"`
	// RequestedByName and DecidedByName are display names ("token:ID(alice)").
	RequestedByName string `json:"requested_by_name,omitempty"`
	DecidedByName   string `json:"decided_by_name,omitempty"`
	RequestedAt     string `json:"requested_at"`
	ExpiresAt       string `json:"expires_at"`
	Status          string `json:"status"`
	DecidedBy       string `json:"decided_by,omitempty"`
	DecidedAt       string `json:"decided_at,omitempty"`
}

// PendingApproval is returned by Revoke and DestroyVersion when the key's
// two-person rule turned the request into an approval that a second
// principal must grant.
type PendingApproval struct{ Approval Approval }

func (p *PendingApproval) Error() string {
	return fmt.Sprintf("approval %s requested: a second officer must run `keysvc approvals approve %s` before %s",
		p.Approval.ID, p.Approval.ID, p.Approval.ExpiresAt)
}

// Revoke marks a version compromised at compromisedAt (RFC 3339). When it
// was active, active is the version that replaced it. Under the key's
// two-person rule the error is a *PendingApproval instead.
func (c *Client) Revoke(ctx context.Context, kid, compromisedAt, reason string) (revoked Version, active *Version, err error) {
	var out struct {
		Revoked  Version   `json:"revoked"`
		Active   *Version  `json:"active"`
		Approval *Approval `json:"approval"`
	}
	err = c.Do(ctx, http.MethodPost, "/v1/versions/"+url.PathEscape(kid)+"/revoke", map[string]string{"compromised_at": compromisedAt, "reason": reason}, &out)
	if err == nil && out.Approval != nil {
		return Version{}, nil, &PendingApproval{Approval: *out.Approval}
	}
	return out.Revoked, out.Active, err
}

// Destroyed is the answer to DestroyVersion (and to approving a "destroy"
// approval).
type Destroyed struct {
	Version Version `json:"destroyed"` // with MaterialDestroyedAt set
	Backend string  `json:"backend"`
	// DeletionDate is when AWS KMS deletes the key (RFC 3339); empty when
	// the material is gone now.
	DeletionDate     string `json:"deletion_date,omitempty"`
	AlreadyDestroyed bool   `json:"already_destroyed,omitempty"`
	Note             string `json:"note,omitempty"`
}

// DestroyVersion destroys the private key material of a retired or revoked
// version (POST /v1/versions/{kid}/destroy, scope admin:revoke).
// pendingDays is the AWS KMS waiting period (7 to 30); 0 leaves it to the
// server (30 days). Under the key's two-person rule the error is a
// *PendingApproval instead.
func (c *Client) DestroyVersion(ctx context.Context, kid, reason string, pendingDays int) (Destroyed, error) {
	body := map[string]any{"reason": reason}
	if pendingDays != 0 {
		body["pending_days"] = pendingDays
	}
	var out struct {
		Destroyed
		Approval *Approval `json:"approval"`
	}
	err := c.Do(ctx, http.MethodPost, "/v1/versions/"+url.PathEscape(kid)+"/destroy", body, &out)
	if err == nil && out.Approval != nil {
		return Destroyed{}, &PendingApproval{Approval: *out.Approval}
	}
	return out.Destroyed, err
}

// Approvals lists two-person approval requests ("" status: all).
func (c *Client) Approvals(ctx context.Context, status string) ([]Approval, error) {
	var out struct {
		Approvals []Approval `json:"approvals"`
	}
	path := "/v1/approvals"
	if status != "" {
		path += "?status=" + url.QueryEscape(status)
	}
	err := c.Do(ctx, http.MethodGet, path, nil, &out)
	return out.Approvals, err
}

// Approve grants an approval as a second principal; the change happens now.
// For a "revoke" approval it returns the revoked version (and the one that
// took over when it was active); for a "destroy" approval use
// ApproveAction, which reports either.
func (c *Client) Approve(ctx context.Context, id string) (revoked Version, active *Version, err error) {
	res, err := c.ApproveAction(ctx, id)
	if err == nil && res.Revoked == nil {
		return Version{}, nil, fmt.Errorf("approval %s was not a revocation", id)
	}
	if err != nil {
		return Version{}, nil, err
	}
	return *res.Revoked, res.Active, nil
}

// Approved is what granting an approval did: Revoked (and Active, when the
// revoked version was the active one) for a "revoke" approval, Destroyed
// for a "destroy" approval.
type Approved struct {
	Revoked   *Version
	Active    *Version
	Destroyed *Destroyed
	// Policy is the key's policy now in force, for a "policy" approval
	// (switching the two-person rule off), with Key its name.
	Policy *Policy
	Key    string
}

// ApproveAction grants an approval as a second principal; the change it
// asks for (a revocation or a key-material destruction) happens now.
func (c *Client) ApproveAction(ctx context.Context, id string) (Approved, error) {
	var out struct {
		Revoked *Version `json:"revoked"`
		Active  *Version `json:"active"`
		Policy  *Policy  `json:"policy"`
		Key     string   `json:"key"`
		Destroyed
	}
	if err := c.Do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(id)+"/approve", nil, &out); err != nil {
		return Approved{}, err
	}
	if out.Revoked != nil {
		return Approved{Revoked: out.Revoked, Active: out.Active}, nil
	}
	if out.Policy != nil {
		return Approved{Policy: out.Policy, Key: out.Key}, nil
	}
	d := out.Destroyed
	return Approved{Destroyed: &d}, nil
}

// History fetches a key's key-history document ("" name: the default key's
// well-known alias).
func (c *Client) History(ctx context.Context, name string) ([]byte, error) {
	path := "/.well-known/vrp-key-history.json"
	if name != "" {
		path = "/v1/keys/" + url.PathEscape(name) + "/history.json"
	}
	var raw []byte
	err := c.Do(ctx, http.MethodGet, path, nil, &raw)
	return raw, err
}

// SignResult is the result of Sign.
type SignResult struct {
	JWS string `json:"jws"`
	KID string `json:"kid"`
	Alg string `json:"alg"`
}

// Sign signs a JSON object payload (its RFC 8785 bytes) as a compact JWS.
func (c *Client) Sign(ctx context.Context, name string, payload any, typ string) (SignResult, error) {
	var out SignResult
	body := map[string]any{"payload": payload}
	if typ != "" {
		body["typ"] = typ
	}
	err := c.Do(ctx, http.MethodPost, "/v1/keys/"+url.PathEscape(name)+"/sign", body, &out)
	return out, err
}

// DetachedResult is the answer of SignDetached (ADR 0028).
type DetachedResult struct {
	KID          string `json:"kid"`
	Alg          string `json:"alg"`
	Signed       string `json:"signed"`        // the exact bytes signed: RFC 8785 of the payload
	SignedB64    string `json:"signed_b64u"`   // the same, base64url
	Signature    string `json:"signature"`     // base64url
	SignatureHex string `json:"signature_hex"` // lower-case hex (vaara receipts' "signature")
	ArtifactHash string `json:"artifact_hash"` // "sha256:<hex>" of Signed, the transparency-log leaf's
}

// SignDetached signs the RFC 8785 bytes of payload, which must marshal to
// a JSON object, with key name's signing version and returns the raw
// signature (POST /v1/keys/{name}/sign:detached; scope
// sign:<name>:detached).
func (c *Client) SignDetached(ctx context.Context, name string, payload any) (DetachedResult, error) {
	var out DetachedResult
	err := c.Do(ctx, http.MethodPost, "/v1/keys/"+url.PathEscape(name)+"/sign:detached", map[string]any{"payload": payload}, &out)
	return out, err
}

// TransportRequest is the body of MCPTransport.
type TransportRequest struct {
	Tool      string         `json:"tool"`
	Arguments map[string]any `json:"arguments"`
	ServedAt  string         `json:"served_at,omitempty"`
	OfferRef  string         `json:"offer_ref,omitempty"`
	SessionID string         `json:"session_id,omitempty"`
	Ref       string         `json:"ref,omitempty"`
	ValidFor  string         `json:"valid_for,omitempty"`
}

// Attestation is a VRP receipt v1 attestation entry.
type Attestation struct {
	Layer      string `json:"layer"`
	Source     string `json:"source"`
	Signature  string `json:"signature"`
	Ref        string `json:"ref,omitempty"`
	ValidFrom  string `json:"valid_from"`
	ValidUntil string `json:"valid_until"`
}

// TransportResult is the result of MCPTransport.
type TransportResult struct {
	Assertion   map[string]any `json:"assertion"`
	JWS         string         `json:"jws"`
	KID         string         `json:"kid"`
	Attestation Attestation    `json:"attestation"`
}

// MCPTransport builds and signs a VRP MCP transport assertion.
func (c *Client) MCPTransport(ctx context.Context, name string, req TransportRequest) (TransportResult, error) {
	var out TransportResult
	err := c.Do(ctx, http.MethodPost, "/v1/keys/"+url.PathEscape(name)+"/mcp-transport", req, &out)
	return out, err
}

// JWKS fetches a key's JWKS document bytes ("" name: the default key's
// /.well-known/jwks.json).
func (c *Client) JWKS(ctx context.Context, name string) ([]byte, error) {
	path := "/.well-known/jwks.json"
	if name != "" {
		path = "/v1/keys/" + url.PathEscape(name) + "/jwks.json"
	}
	var raw []byte
	err := c.Do(ctx, http.MethodGet, path, nil, &raw)
	return raw, err
}
