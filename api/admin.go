package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/jwksserve"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// KeyInfo describes a key in admin responses.
type KeyInfo struct {
	Name      string          `json:"name"`
	Issuer    string          `json:"issuer"`
	Algorithm string          `json:"algorithm"`
	Backend   string          `json:"backend"`
	JWKSURL   string          `json:"jwks_url"`
	ActiveKID string          `json:"active_kid,omitempty"`
	Versions  int             `json:"versions"`
	CreatedAt time.Time       `json:"created_at"`
	CreatedBy string          `json:"created_by"`
	Default   bool            `json:"default"`
	Policy    rotation.Policy `json:"policy"`
	// NextKID / NextAt: the pending version and when it activates.
	NextKID string `json:"next_kid,omitempty"`
	NextAt  string `json:"next_at,omitempty"`
}

// VersionInfo describes a key version in admin responses: its published
// JWKS entry (with lifecycle members) and its backend reference.
type VersionInfo struct {
	jwksserve.Entry
	BackendRef string    `json:"backend_ref"`
	CreatedAt  time.Time `json:"created_at"`
	// MaterialDestroyedAt is when the version's private key material was
	// destroyed (RFC 3339 UTC); absent while it exists.
	MaterialDestroyedAt string `json:"material_destroyed_at,omitempty"`
}

func keyInfo(e *rotation.KeyEntry, isDefault bool) KeyInfo {
	k := KeyInfo{Name: e.Key.Name, Issuer: e.Key.Issuer, Algorithm: e.Key.Algorithm, Backend: e.Key.Backend,
		JWKSURL: e.Key.JWKSURL, Versions: len(e.Versions), CreatedAt: e.Key.CreatedAt, CreatedBy: e.Key.CreatedBy, Default: isDefault}
	if e.Active != nil {
		k.ActiveKID = e.Active.KID()
	}
	k.Policy = e.Policy
	for _, v := range e.Versions {
		if v.State == store.StatePending && v.ActivatesAt != nil {
			// Armed or planned (ADR 0014): the pending version and when it
			// activates, or is planned to.
			k.NextKID, k.NextAt = v.KID, v.ActivatesAt.UTC().Format(time.RFC3339Nano)
		}
	}
	return k
}

func versionInfo(v store.KeyVersion) (VersionInfo, error) {
	entry, err := jwksserve.EntryFor(v)
	if err != nil {
		return VersionInfo{}, err
	}
	if entry.Thumbprint, err = jwksserve.Thumbprint(v.PublicJWK); err != nil {
		return VersionInfo{}, err
	}
	vi := VersionInfo{Entry: entry, BackendRef: v.BackendRef, CreatedAt: v.CreatedAt}
	if v.MaterialDestroyedAt != nil {
		vi.MaterialDestroyedAt = v.MaterialDestroyedAt.UTC().Format(time.RFC3339Nano)
	}
	return vi, nil
}

func (s *Server) listKeys(c echo.Context) error {
	ring := s.cfg.Manager.Keyring()
	out := struct {
		Keys []KeyInfo `json:"keys"`
	}{Keys: []KeyInfo{}}
	for _, n := range ring.SortedNames() {
		out.Keys = append(out.Keys, keyInfo(ring.Keys[n], n == ring.Default))
	}
	return c.JSON(http.StatusOK, out)
}

// createKeyRequest is the body of POST /v1/keys.
type createKeyRequest struct {
	Name      string         `json:"name"`
	Issuer    string         `json:"issuer"`
	Algorithm string         `json:"algorithm,omitempty"`
	Backend   string         `json:"backend,omitempty"`
	JWKSURL   string         `json:"jwks_url,omitempty"`
	Policy    *policyRequest `json:"policy,omitempty"` // reason inside is ignored
	Reason    string         `json:"reason,omitempty"`
	// ShareIssuer: the key may take an issuer other keys have (409
	// issuer_in_use otherwise).
	ShareIssuer bool `json:"share_issuer,omitempty"`
}

// CreateKeyResponse is the answer of POST /v1/keys.
type CreateKeyResponse struct {
	Key     KeyInfo     `json:"key"`
	Version VersionInfo `json:"version"`
}

func (s *Server) createKey(c echo.Context) error {
	var req createKeyRequest
	if err := s.decodeBody(c, &req); err != nil {
		return err
	}
	p := principal(c)
	var pol rotation.Policy
	if req.Policy != nil {
		var err error
		if pol, err = req.Policy.policy(); err != nil {
			return err
		}
	}
	_, v, err := s.cfg.Manager.CreateKey(c.Request().Context(), rotation.CreateKeyRequest{
		Name: req.Name, Issuer: req.Issuer, Algorithm: req.Algorithm, Backend: req.Backend, JWKSURL: req.JWKSURL, Policy: pol,
		ShareIssuer: req.ShareIssuer,
	}, actorOf(p, req.Reason))
	if err != nil {
		return lifecycleError(err)
	}
	ring := s.cfg.Manager.Keyring()
	vi, err := versionInfo(v)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, CreateKeyResponse{Key: keyInfo(ring.Keys[req.Name], ring.Default == req.Name), Version: vi})
}

func (s *Server) listVersions(c echo.Context) error {
	e, err := s.entry(c.Param("name"))
	if err != nil {
		return err
	}
	out := struct {
		Key      string        `json:"key"`
		Versions []VersionInfo `json:"versions"`
	}{Key: e.Key.Name, Versions: []VersionInfo{}}
	for _, v := range e.Versions {
		vi, err := versionInfo(v)
		if err != nil {
			return err
		}
		out.Versions = append(out.Versions, vi)
	}
	return c.JSON(http.StatusOK, out)
}

// RotateResponse is the answer of POST /v1/keys/{name}/rotate. For mode
// "now", Active is the new active version and Retired the one it replaced;
// for mode "scheduled", Pending is the new pending version.
type RotateResponse struct {
	Mode    string       `json:"mode"`
	Active  *VersionInfo `json:"active,omitempty"`
	Retired *VersionInfo `json:"retired,omitempty"`
	Pending *VersionInfo `json:"pending,omitempty"`
}

// Rotation modes of POST /v1/keys/{name}/rotate.
const (
	RotateNow       = "now"       // emergency: a new version signs immediately
	RotateScheduled = "scheduled" // publish a pending version; it signs after prepublish
)

func (s *Server) rotate(c echo.Context) error {
	var req struct {
		Mode   string `json:"mode,omitempty"`
		Reason string `json:"reason,omitempty"`
	}
	if c.Request().ContentLength != 0 {
		if err := s.decodeBody(c, &req); err != nil {
			return err
		}
	}
	actor := actorOf(principal(c), req.Reason)
	ctx := c.Request().Context()
	switch req.Mode {
	case "":
		// No mode is never an emergency (issue 13): say which.
		return fail(http.StatusBadRequest, CodeInvalidRequest, "mode is required: %q publishes a pending version that signs after prepublish; %q (emergency) makes a new version sign at once, before verifiers' cached JWKS hold it", RotateScheduled, RotateNow)
	case RotateNow:
		newV, oldV, err := s.cfg.Manager.Rotate(ctx, c.Param("name"), actor)
		if err != nil {
			return lifecycleError(err)
		}
		a, r, err := versionPair(newV, oldV)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, RotateResponse{Mode: RotateNow, Active: a, Retired: r})
	case RotateScheduled:
		v, err := s.cfg.Manager.ScheduleRotation(ctx, c.Param("name"), actor)
		if err != nil {
			return lifecycleError(err)
		}
		p, err := versionInfo(v)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, RotateResponse{Mode: RotateScheduled, Pending: &p})
	}
	return fail(http.StatusBadRequest, CodeInvalidRequest, "mode must be %q or %q", RotateNow, RotateScheduled)
}

func versionPair(a, b store.KeyVersion) (*VersionInfo, *VersionInfo, error) {
	ai, err := versionInfo(a)
	if err != nil {
		return nil, nil, err
	}
	bi, err := versionInfo(b)
	if err != nil {
		return nil, nil, err
	}
	return &ai, &bi, nil
}

// policyRequest is the body of PUT /v1/keys/{name}/policy.
type policyRequest struct {
	RotationPeriod string `json:"rotation_period"`
	Prepublish     string `json:"prepublish,omitempty"`
	Retention      string `json:"retention,omitempty"`
	TwoPersonRule  bool   `json:"two_person_rule,omitempty"`
	Reason         string `json:"reason,omitempty"`
}

func parseDurationField(name, v string) (rotation.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fail(http.StatusBadRequest, CodeInvalidRequest, "%s must be a duration such as \"720h\"", name)
	}
	return rotation.Duration(d), nil
}

func (req policyRequest) policy() (rotation.Policy, error) {
	var p rotation.Policy
	var err error
	if p.RotationPeriod, err = parseDurationField("rotation_period", req.RotationPeriod); err != nil {
		return p, err
	}
	if p.Prepublish, err = parseDurationField("prepublish", req.Prepublish); err != nil {
		return p, err
	}
	p.Retention, err = parseDurationField("retention", req.Retention)
	p.TwoPersonRule = req.TwoPersonRule
	return p, err
}

func (s *Server) setPolicy(c echo.Context) error {
	var req policyRequest
	if err := s.decodeBody(c, &req); err != nil {
		return err
	}
	p, err := req.policy()
	if err != nil {
		return err
	}
	approval, err := s.cfg.Manager.SetPolicy(c.Request().Context(), c.Param("name"), p, actorOf(principal(c), req.Reason))
	if err != nil {
		return lifecycleError(err)
	}
	if approval != nil {
		// Switching the two-person rule off needs a second principal.
		return c.JSON(http.StatusAccepted, map[string]any{"approval": approvalInfo(*approval)})
	}
	return s.policyResponse(c, c.Param("name"))
}

// policyResponse answers {"key", "policy"} with the key's policy in force.
func (s *Server) policyResponse(c echo.Context, name string) error {
	e, err := s.entry(name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"key": e.Key.Name, "policy": e.Policy})
}

func (s *Server) setBackend(c echo.Context) error {
	var req struct {
		Backend string `json:"backend"`
		Reason  string `json:"reason,omitempty"`
	}
	if err := s.decodeBody(c, &req); err != nil {
		return err
	}
	if err := s.cfg.Manager.SetBackend(c.Request().Context(), c.Param("name"), req.Backend, actorOf(principal(c), req.Reason)); err != nil {
		return lifecycleError(err)
	}
	e, err := s.entry(c.Param("name"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"key": keyInfo(e, s.cfg.Manager.Keyring().Default == e.Key.Name)})
}

// activateRequest is the body of POST /v1/versions/{kid}/activate (optional).
type activateRequest struct {
	Reason string `json:"reason,omitempty"`
	// Emergency activates before the version has been published longer
	// than the JWKS max-age (verifiers with a cached JWKS reject its first
	// signatures); it needs a reason and is audited as an emergency.
	Emergency bool `json:"emergency,omitempty"`
}

func (s *Server) activateVersion(c echo.Context) error {
	var req activateRequest
	if c.Request().ContentLength != 0 {
		if err := s.decodeBody(c, &req); err != nil {
			return err
		}
	}
	activate := s.cfg.Manager.Activate
	if req.Emergency {
		activate = s.cfg.Manager.ActivateEmergency
	}
	v, err := activate(c.Request().Context(), c.Param("kid"), actorOf(principal(c), req.Reason))
	if err != nil {
		return lifecycleError(err)
	}
	vi, err := versionInfo(v)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"active": vi})
}

// revokeRequest is the body of POST /v1/versions/{kid}/revoke.
type revokeRequest struct {
	CompromisedAt string `json:"compromised_at"` // RFC 3339
	Reason        string `json:"reason"`
}

// RevokeResponse is the answer of POST /v1/versions/{kid}/revoke.
type RevokeResponse struct {
	Revoked VersionInfo  `json:"revoked"`
	Active  *VersionInfo `json:"active,omitempty"` // set when the revoked version was active
}

func (s *Server) revokeVersion(c echo.Context) error {
	var req revokeRequest
	if err := s.decodeBody(c, &req); err != nil {
		return err
	}
	at, err := time.Parse(time.RFC3339Nano, req.CompromisedAt)
	if err != nil {
		return fail(http.StatusBadRequest, CodeInvalidRequest, "compromised_at must be an RFC 3339 date-time")
	}
	approval, revoked, next, err := s.cfg.Manager.RequestRevoke(c.Request().Context(), c.Param("kid"), at, req.Reason, actorOf(principal(c), ""))
	if err != nil {
		return lifecycleError(err)
	}
	if approval != nil {
		return c.JSON(http.StatusAccepted, map[string]any{"approval": approvalInfo(*approval)})
	}
	return s.revokeResponse(c, *revoked, next)
}

func (s *Server) revokeResponse(c echo.Context, revoked store.KeyVersion, next *store.KeyVersion) error {
	out := RevokeResponse{}
	var err error
	if out.Revoked, err = versionInfo(revoked); err != nil {
		return err
	}
	if next != nil {
		a, err := versionInfo(*next)
		if err != nil {
			return err
		}
		out.Active = &a
	}
	return c.JSON(http.StatusOK, out)
}

// destroyRequest is the body of POST /v1/versions/{kid}/destroy.
type destroyRequest struct {
	Reason string `json:"reason"`
	// PendingDays is the AWS KMS waiting period (7 to 30; default 30);
	// other backends destroy at once and ignore it.
	PendingDays *int `json:"pending_days,omitempty"`
}

// DestroyResponse is the answer of POST /v1/versions/{kid}/destroy (and of
// approving a "destroy" approval): the version with material_destroyed_at
// set, and what its backend did.
type DestroyResponse struct {
	Destroyed VersionInfo `json:"destroyed"`
	Backend   string      `json:"backend"`
	// DeletionDate is when AWS KMS deletes the key (RFC 3339 UTC); absent
	// for backends that destroyed it at once.
	DeletionDate     string `json:"deletion_date,omitempty"`
	AlreadyDestroyed bool   `json:"already_destroyed,omitempty"`
	Note             string `json:"note,omitempty"`
}

// destroyVersion destroys a retired or revoked version's key material, or
// files a two-person approval for it. It needs admin:revoke, not
// admin:keys: destruction is as irreversible and as dangerous as
// revocation (a wrongly destroyed active key would stop signing; a
// destroyed key can never be recovered), so it belongs to the officers
// who may revoke, under the same two-person rule.
func (s *Server) destroyVersion(c echo.Context) error {
	var req destroyRequest
	if err := s.decodeBody(c, &req); err != nil {
		return err
	}
	var opt backends.DestroyOptions
	if req.PendingDays != nil {
		d := *req.PendingDays
		if d < backends.MinPendingWindowDays || d > backends.MaxPendingWindowDays {
			return fail(http.StatusBadRequest, CodeInvalidRequest, "pending_days must be %d to %d", backends.MinPendingWindowDays, backends.MaxPendingWindowDays)
		}
		opt.PendingWindowDays = d
	}
	approval, destroyed, err := s.cfg.Manager.RequestDestroy(c.Request().Context(), c.Param("kid"), req.Reason, opt, actorOf(principal(c), ""))
	if err != nil {
		return lifecycleError(err)
	}
	if approval != nil {
		return c.JSON(http.StatusAccepted, map[string]any{"approval": approvalInfo(*approval)})
	}
	return s.destroyResponse(c, *destroyed)
}

func (s *Server) destroyResponse(c echo.Context, d rotation.Destroyed) error {
	vi, err := versionInfo(d.Version)
	if err != nil {
		return err
	}
	out := DestroyResponse{Destroyed: vi, Backend: d.Backend, AlreadyDestroyed: d.Result.AlreadyDestroyed, Note: d.Result.Note}
	if d.Result.DeletionDate != nil {
		out.DeletionDate = d.Result.DeletionDate.UTC().Format(time.RFC3339Nano)
	}
	return c.JSON(http.StatusOK, out)
}

// ApprovalInfo is a two-person approval request as served by the API.
type ApprovalInfo struct {
	ID          string          `json:"id"`
	Key         string          `json:"key"`
	Action      string          `json:"action"`
	KID         string          `json:"kid"`
	Params      json.RawMessage `json:"params"`
	RequestedBy string          `json:"requested_by"`
	// RequestedByName and DecidedByName are display names ("token:ID(alice)").
	RequestedByName string `json:"requested_by_name,omitempty"`
	RequestedAt     string `json:"requested_at"`
	ExpiresAt       string `json:"expires_at"`
	Status          string `json:"status"`
	DecidedBy       string `json:"decided_by,omitempty"`
	DecidedByName   string `json:"decided_by_name,omitempty"`
	DecidedAt       string `json:"decided_at,omitempty"`
}

func approvalInfo(a store.Approval) ApprovalInfo {
	out := ApprovalInfo{ID: a.ID, Key: a.KeyName, Action: a.Action, KID: a.KID, Params: json.RawMessage(a.Params),
		RequestedBy: a.RequestedBy, RequestedByName: a.RequestedByName, RequestedAt: store.FormatTime(a.RequestedAt),
		ExpiresAt: store.FormatTime(a.ExpiresAt), Status: a.Status, DecidedBy: a.DecidedBy, DecidedByName: a.DecidedByName}
	if a.DecidedAt != nil {
		out.DecidedAt = store.FormatTime(*a.DecidedAt)
	}
	return out
}

func (s *Server) listApprovals(c echo.Context) error {
	status := c.QueryParam("status")
	switch status {
	case "", "pending", "approved", "expired":
	default:
		return fail(http.StatusBadRequest, CodeInvalidRequest, "status must be pending, approved or expired")
	}
	list, err := s.cfg.Store.ListApprovals(c.Request().Context(), status)
	if err != nil {
		return err
	}
	out := struct {
		Approvals []ApprovalInfo `json:"approvals"`
	}{Approvals: []ApprovalInfo{}}
	for _, a := range list {
		out.Approvals = append(out.Approvals, approvalInfo(a))
	}
	return c.JSON(http.StatusOK, out)
}

// approve grants an approval; the answer is that of the change it asked
// for: a RevokeResponse for "revoke", a DestroyResponse for "destroy".
func (s *Server) approve(c echo.Context) error {
	out, err := s.cfg.Manager.Approve(c.Request().Context(), c.Param("id"), actorOf(principal(c), ""))
	if err != nil {
		return lifecycleError(err)
	}
	switch {
	case out.Destroyed != nil:
		return s.destroyResponse(c, *out.Destroyed)
	case out.Policy != nil:
		return s.policyResponse(c, out.Approval.KeyName)
	}
	return s.revokeResponse(c, *out.Revoked, out.Replacement)
}

// AuditEvent is an audit row as served by GET /v1/audit.
type AuditEvent struct {
	Seq      int64           `json:"seq"`
	At       string          `json:"at"`
	Actor    string          `json:"actor"`
	Action   string          `json:"action"`
	Key      string          `json:"key,omitempty"`
	KID      string          `json:"kid,omitempty"`
	Reason   string          `json:"reason,omitempty"`
	Details  json.RawMessage `json:"details,omitempty"`
	PrevHash string          `json:"prev_hash"`
	Hash     string          `json:"hash"`
}

// AuditEventFrom converts a store row.
func AuditEventFrom(ev store.AuditEvent) AuditEvent {
	return AuditEvent{Seq: ev.Seq, At: store.FormatTime(ev.At), Actor: ev.Actor, Action: ev.Action, Key: ev.KeyName,
		KID: ev.KID, Reason: ev.Reason, Details: json.RawMessage(ev.Details), PrevHash: ev.PrevHash, Hash: ev.Hash}
}

func (s *Server) listAudit(c echo.Context) error {
	after, limit := int64(0), 1000
	if v := c.QueryParam("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return fail(http.StatusBadRequest, CodeInvalidRequest, "after must be a non-negative integer")
		}
		after = n
	}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			return fail(http.StatusBadRequest, CodeInvalidRequest, "limit must be between 1 and 10000")
		}
		limit = n
	}
	rows, err := s.cfg.Store.ListAudit(c.Request().Context(), after, limit)
	if err != nil {
		return err
	}
	out := struct {
		Events []AuditEvent `json:"events"`
	}{Events: make([]AuditEvent, 0, len(rows))}
	for _, r := range rows {
		out.Events = append(out.Events, AuditEventFrom(r))
	}
	return c.JSON(http.StatusOK, out)
}

// actorName names the credential and the principal of a request:
// "token:<id>(<name>)" or "cert:<common name>(<name>)".
func actorName(p Principal) string {
	if strings.HasPrefix(p.TokenID, "cert:") {
		return p.TokenID + "(" + p.Name + ")"
	}
	return "token:" + p.TokenID + "(" + p.Name + ")"
}

// actorOf is the audited actor of a request by p; its ID is the person's
// (Principal.ID), so the two-person rule compares people.
func actorOf(p Principal, reason string) rotation.Actor {
	return rotation.Actor{Name: actorName(p), ID: p.ID(), Reason: reason}
}

func lifecycleError(err error) error {
	msg := err.Error()
	switch {
	case errors.Is(err, rotation.ErrInvalidRequest):
		return fail(http.StatusBadRequest, CodeInvalidRequest, "%s", strings.TrimPrefix(msg, rotation.ErrInvalidRequest.Error()+": "))
	case errors.Is(err, rotation.ErrKeyExists):
		return fail(http.StatusConflict, CodeKeyExists, "%s", msg)
	case errors.Is(err, rotation.ErrKeyNotFound):
		return fail(http.StatusNotFound, CodeKeyNotFound, "%s", msg)
	case errors.Is(err, rotation.ErrNoActive):
		return fail(http.StatusConflict, CodeNoActiveVersion, "%s", msg)
	case errors.Is(err, rotation.ErrVersionNotFound):
		return fail(http.StatusNotFound, CodeVersionNotFound, "%s", msg)
	case errors.Is(err, rotation.ErrInvalidTransition):
		return fail(http.StatusConflict, CodeInvalidTransition, "%s", msg)
	case errors.Is(err, rotation.ErrPendingExists):
		return fail(http.StatusConflict, CodePendingExists, "%s", msg)
	case errors.Is(err, rotation.ErrApprovalRequired):
		return fail(http.StatusConflict, CodeApprovalRequired, "%s", msg)
	case errors.Is(err, rotation.ErrApprovalNotFound):
		return fail(http.StatusNotFound, CodeApprovalNotFound, "%s", msg)
	case errors.Is(err, rotation.ErrSamePrincipal):
		return fail(http.StatusForbidden, CodeSamePrincipal, "%s", msg)
	case errors.Is(err, rotation.ErrApprovalPending):
		return fail(http.StatusConflict, CodeApprovalPending, "%s", msg)
	case errors.Is(err, rotation.ErrActivationTooEarly):
		return fail(http.StatusConflict, CodeActivationTooEarly, "%s", msg)
	case errors.Is(err, rotation.ErrIssuerInUse):
		return fail(http.StatusConflict, CodeIssuerInUse, "%s", msg)
	case errors.Is(err, rotation.ErrActivationHeld):
		return fail(http.StatusServiceUnavailable, CodeActivationHeld, "%s", msg)
	case errors.Is(err, rotation.ErrHistoryNotBacked):
		return fail(http.StatusConflict, CodeKeyHistoryNotBacked, "%s", msg)
	case errors.Is(err, rotation.ErrHistoryUnconfirmed):
		return fail(http.StatusServiceUnavailable, CodeTlogUnavailable, "%s; nothing was changed, retry", msg)
	case errors.Is(err, rotation.ErrIdempotencyConflict):
		return err // the mutation middleware replays the first request's answer
	case errors.Is(err, store.ErrCommitDeadline):
		return fail(http.StatusServiceUnavailable, CodeBackendUnavailable, "the key history store is too slow to commit the change in time; nothing was changed, retry")
	case errors.Is(err, rotation.ErrUnknownBackend):
		return fail(http.StatusBadRequest, CodeInvalidRequest, "%s", msg)
	case errors.Is(err, backends.ErrUnsupportedAlgorithm):
		return fail(http.StatusBadRequest, CodeInvalidRequest, "%s", msg)
	case errors.Is(err, backends.ErrUnavailable):
		return fail(http.StatusServiceUnavailable, CodeBackendUnavailable, "key backend unavailable")
	case errors.Is(err, backends.ErrThrottled):
		return fail(http.StatusServiceUnavailable, CodeBackendThrottled, "key backend throttled; retry with backoff")
	case errors.Is(err, backends.ErrKeyDisabled):
		return fail(http.StatusServiceUnavailable, CodeKeyDisabled, "the backend refuses to use the key")
	}
	return err
}
