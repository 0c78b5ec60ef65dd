// Package api is keysvc's HTTP surface, built on echo: the public
// endpoints (JWKS, health), the signing API and the admin API. Handlers
// translate HTTP to package rotation and signer calls; the signing path
// reads only the in-memory Keyring.
//
// Every error is JSON {"error":{"code":"...","message":"..."}} with a
// stable code (see the Code* constants) and the matching HTTP status.
package api

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/internal/strictjson"
	"github.com/keysvc/keysvc/jwksserve"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/signer"
	"github.com/keysvc/keysvc/store"
)

// Stable error codes of the HTTP API (besides the strictjson.Code* codes
// for malformed bodies).
const (
	CodeUnauthorized         = "unauthorized"           // 401: no or unknown/expired/revoked token
	CodeForbidden            = "forbidden"              // 403: token lacks the scope
	CodeNotFound             = "not_found"              // 404: no such route
	CodeKeyNotFound          = "key_not_found"          // 404: no such key
	CodeMethodNotAllowed     = "method_not_allowed"     // 405
	CodeUnsupportedMediaType = "unsupported_media_type" // 415: body is not application/json
	CodeBodyTooLarge         = "body_too_large"         // 413
	CodeInvalidRequest       = "invalid_request"        // 400: a field has a bad value
	CodeArgumentKeyCollision = "argument_key_collision" // 400: camelCase/snake_case keys collide
	CodeKeyExists            = "key_exists"             // 409
	CodeVersionNotFound      = "version_not_found"      // 404: no key version with that kid
	CodeInvalidTransition    = "invalid_transition"     // 409: lifecycle forbids it (e.g. revoke twice)
	CodePendingExists        = "pending_exists"         // 409: a scheduled rotation is already pending
	CodeNoActiveVersion      = "no_active_version"      // 503: key cannot sign right now
	CodeBackendUnavailable   = "backend_unavailable"    // 503
	CodeBackendThrottled     = "backend_throttled"      // 503: backend rate limit; retry with backoff
	CodeKeyDisabled          = "key_disabled"           // 503: the backend refuses to use the key
	CodeMessageTooLarge      = "message_too_large"      // 413: signing input over the backend's limit
	CodeRateLimited          = "rate_limited"           // 429: per-token rate limit; see Retry-After
	CodeBatchTooLarge        = "batch_too_large"        // 400: more items than MaxBatchItems
	CodeApprovalRequired     = "approval_required"      // 409: two-person rule; use the approval flow
	CodeApprovalNotFound     = "approval_not_found"     // 404
	CodeSamePrincipal        = "same_principal"         // 403: the approver asked for the change
	CodeApprovalPending      = "approval_pending"       // 409: the same change already awaits approval
	CodeInternal             = "internal"               // 500: details only in the server log
)

// Config configures a Server.
type Config struct {
	Manager      *rotation.Manager
	Auth         *Authenticator
	Store        store.Store
	Logger       *slog.Logger
	MaxBodyBytes int64         // default 64 KiB
	MaxValidFor  time.Duration // upper bound of valid_for; default 24h
	DefaultValid time.Duration // valid_for when absent; default 1h
	// MaxServedAtSkew bounds how far a caller-given served_at may lie from
	// the server's clock, either way (default 5m).
	MaxServedAtSkew time.Duration
	// MaxBatchItems bounds the items of one batch request (default 100).
	MaxBatchItems int
	// MaxBatchBodyBytes bounds a batch request body (default MaxBatchItems
	// times MaxBodyBytes, at most 8 MiB).
	MaxBatchBodyBytes int64
	// ClientPrincipals maps the subject common name of a verified TLS
	// client certificate (mutual TLS on the listener) to a principal, for
	// requests without a bearer token.
	ClientPrincipals map[string]Principal
	// RateLimit bounds requests per principal; zero value: unlimited.
	RateLimit RateLimit
	// Pprof serves the runtime profiles of net/http/pprof under
	// /debug/pprof/ on the admin surface, for a token with admin:keys. Off
	// by default: a CPU profile costs the signing path while it runs.
	Pprof bool
	Now   func() time.Time
}

// Server serves the API.
type Server struct {
	cfg      Config
	echo     *echo.Echo
	limits   *limiters
	surfaces map[routeKey]Surface
	metrics  *metrics
}

// New builds the echo router with every route.
func New(cfg Config) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 64 << 10
	}
	if cfg.MaxValidFor <= 0 {
		cfg.MaxValidFor = 24 * time.Hour
	}
	if cfg.DefaultValid <= 0 {
		cfg.DefaultValid = time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxBatchItems <= 0 {
		cfg.MaxBatchItems = 100
	}
	if cfg.MaxBatchBodyBytes <= 0 {
		cfg.MaxBatchBodyBytes = min(int64(cfg.MaxBatchItems)*cfg.MaxBodyBytes, 8<<20)
	}
	if cfg.MaxServedAtSkew <= 0 {
		cfg.MaxServedAtSkew = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(cfg.Logger)
	s := &Server{cfg: cfg, echo: e, limits: newLimiters(cfg.RateLimit), surfaces: map[routeKey]Surface{},
		metrics: newMetrics(cfg.Manager, cfg.Store)}
	// Every response carries X-Request-Id (the caller's, if it sent a sane
	// one); error logs name it so an operator can match a client report.
	e.Use(middleware.RequestIDWithConfig(middleware.RequestIDConfig{
		Generator: func() string { return randomID() },
		Skipper: func(c echo.Context) bool {
			id := c.Request().Header.Get(echo.HeaderXRequestID)
			return id != "" && !validRequestID(id)
		},
	}))
	e.Use(s.surfaceGuard)

	// Public: no auth, cacheable, served from memory.
	s.route(SurfaceAll, http.MethodGet, "/healthz", s.healthz)
	s.route(SurfaceAll, http.MethodGet, "/readyz", s.readyz)
	s.route(SurfacePublic, http.MethodGet, "/.well-known/jwks.json", s.defaultJWKS)
	s.route(SurfacePublic, http.MethodHead, "/.well-known/jwks.json", s.defaultJWKS)
	s.route(SurfacePublic, http.MethodGet, "/v1/keys/:name/jwks.json", s.keyJWKS)
	s.route(SurfacePublic, http.MethodHead, "/v1/keys/:name/jwks.json", s.keyJWKS)
	s.route(SurfacePublic, http.MethodGet, "/v1/keys/:name/history.json", s.keyHistory)
	s.route(SurfacePublic, http.MethodHead, "/v1/keys/:name/history.json", s.keyHistory)
	s.route(SurfacePublic, http.MethodGet, WellKnownHistory, s.defaultHistory)
	s.route(SurfacePublic, http.MethodHead, WellKnownHistory, s.defaultHistory)
	s.route(SurfacePublic, http.MethodGet, "/.well-known/did.json", s.didDocument)
	s.route(SurfacePublic, http.MethodHead, "/.well-known/did.json", s.didDocument)

	// Signing API.
	s.route(SurfaceSign, http.MethodPost, "/v1/keys/:name/sign", s.sign, s.instrumentSign("jws"), s.requireSignScope(LayerJWS))
	s.route(SurfaceSign, http.MethodPost, "/v1/keys/:name/mcp-transport", s.mcpTransport, s.instrumentSign("transport"), s.requireSignScope(LayerTransport))
	s.route(SurfaceSign, http.MethodPost, `/v1/keys/:name/sign\:batch`, s.signBatch, s.instrumentSign("jws-batch"), s.requireSignScope(LayerJWS))
	s.route(SurfaceSign, http.MethodPost, `/v1/keys/:name/mcp-transport\:batch`, s.transportBatch, s.instrumentSign("transport-batch"), s.requireSignScope(LayerTransport))
	s.route(SurfaceSign, http.MethodPost, "/v1/digests/mcp-arguments", s.digestArguments, s.requireAnyToken())
	s.route(SurfaceSign, http.MethodPost, "/v1/digests/sep2828", s.digestSEP2828, s.requireAnyToken())

	// Admin API.
	s.route(SurfaceAdmin, http.MethodGet, "/v1/keys", s.listKeys, s.requireScope(ScopeAdminKeys))
	s.route(SurfaceAdmin, http.MethodPost, "/v1/keys", s.createKey, s.requireScope(ScopeAdminKeys))
	s.route(SurfaceAdmin, http.MethodGet, "/v1/keys/:name/versions", s.listVersions, s.requireScope(ScopeAdminKeys))
	s.route(SurfaceAdmin, http.MethodPost, "/v1/keys/:name/rotate", s.rotate, s.requireScope(ScopeAdminKeys))
	s.route(SurfaceAdmin, http.MethodPut, "/v1/keys/:name/policy", s.setPolicy, s.requireScope(ScopeAdminKeys))
	s.route(SurfaceAdmin, http.MethodPut, "/v1/keys/:name/backend", s.setBackend, s.requireScope(ScopeAdminKeys))
	s.route(SurfaceAdmin, http.MethodPost, "/v1/versions/:kid/activate", s.activateVersion, s.requireScope(ScopeAdminKeys))
	s.route(SurfaceAdmin, http.MethodPost, "/v1/versions/:kid/revoke", s.revokeVersion, s.requireScope(ScopeAdminRevoke))
	s.route(SurfaceAdmin, http.MethodPost, "/v1/versions/:kid/destroy", s.destroyVersion, s.requireScope(ScopeAdminRevoke))
	s.route(SurfaceAdmin, http.MethodGet, "/v1/approvals", s.listApprovals, s.requireScope(ScopeAdminRevoke))
	s.route(SurfaceAdmin, http.MethodPost, "/v1/approvals/:id/approve", s.approve, s.requireScope(ScopeAdminRevoke))
	s.route(SurfaceAdmin, http.MethodGet, "/v1/audit", s.listAudit, s.requireScope(ScopeAuditRead))
	// Prometheus scrapes without a token: metrics carry key names and
	// counts, never secrets; they live with the admin surface.
	s.route(SurfaceAdmin, http.MethodGet, "/metrics", echo.WrapHandler(s.metrics.handler()))
	if cfg.Pprof {
		s.route(SurfaceAdmin, http.MethodGet, "/debug/pprof/*", pprofHandler, s.requireScope(ScopeAdminKeys))
	}
	return s
}

// Surface is a group of routes that a listener serves (issue 6: the public
// documents, the signing API and the admin API on separate listeners, so
// the admin API never has to be reachable where nodes or verifiers are).
type Surface int

// The surfaces; /healthz and /readyz belong to all.
const (
	SurfacePublic Surface = 1 << iota // JWKS, key history, did:web
	SurfaceSign                       // signing and digest routes
	SurfaceAdmin                      // key lifecycle, approvals, audit
	SurfaceAll    = SurfacePublic | SurfaceSign | SurfaceAdmin
)

// routeKey is a registered route: method and echo path pattern.
type routeKey struct{ method, path string }

// route registers a handler and the surface it belongs to.
func (s *Server) route(sf Surface, method, path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
	s.echo.Add(method, path, h, m...)
	s.surfaces[routeKey{method, path}] = sf
}

type surfaceKey struct{}

// Handler returns the http.Handler serving every surface.
func (s *Server) Handler() http.Handler { return s.HandlerFor(SurfaceAll) }

// HandlerFor returns an http.Handler that serves only the routes of the
// given surfaces; any other route answers 404 not_found, exactly as an
// unknown path does.
func (s *Server) HandlerFor(allowed Surface) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.echo.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), surfaceKey{}, allowed)))
	})
}

// surfaceGuard refuses routes of surfaces the listener does not serve.
// It runs after routing (echo's Use), before authentication.
func (s *Server) surfaceGuard(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		allowed, _ := c.Request().Context().Value(surfaceKey{}).(Surface)
		if sf, ok := s.surfaces[routeKey{c.Request().Method, c.Path()}]; ok && sf&allowed == 0 {
			return fail(http.StatusNotFound, CodeNotFound, "no route for %s %s", c.Request().Method, c.Request().URL.Path)
		}
		return next(c)
	}
}

// randomID returns 16 random hex digits: a request id, unique with
// overwhelming probability, not a secret (math/rand/v2's per-thread
// ChaCha8, no system call per request).
func randomID() string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], mrand.Uint64())
	return hex.EncodeToString(b[:])
}

// validRequestID accepts caller-chosen request ids of up to 64 printable
// ASCII characters without spaces (anything else is replaced, so logs
// cannot be forged through it).
func validRequestID(id string) bool {
	if len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// apiError is an error with an HTTP status and stable code.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func fail(status int, code, format string, a ...any) *apiError {
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, a...)}
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(c echo.Context, e *apiError) error {
	var b errorBody
	b.Error.Code, b.Error.Message = e.Code, e.Message
	if e.Status == http.StatusUnauthorized {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="keysvc"`)
	}
	return c.JSON(e.Status, b)
}

// errorHandler maps every error to the JSON error shape. Unexpected errors
// are logged with the request path and answered as "internal" without detail.
func errorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		var ae *apiError
		var he *echo.HTTPError
		switch {
		case errors.As(err, &ae):
		case errors.As(err, &he):
			switch he.Code {
			case http.StatusNotFound:
				ae = fail(http.StatusNotFound, CodeNotFound, "no route for %s %s", c.Request().Method, c.Request().URL.Path)
			case http.StatusMethodNotAllowed:
				ae = fail(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "method %s not allowed here", c.Request().Method)
			case http.StatusRequestEntityTooLarge:
				ae = fail(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "request body too large")
			default:
				ae = fail(he.Code, strings.ReplaceAll(strings.ToLower(http.StatusText(he.Code)), " ", "_"), "%s", http.StatusText(he.Code))
			}
		default:
			log.Error("request failed", "method", c.Request().Method, "path", c.Request().URL.Path,
				"request_id", c.Response().Header().Get(echo.HeaderXRequestID), "err", err)
			ae = fail(http.StatusInternalServerError, CodeInternal, "internal error")
		}
		if err := writeError(c, ae); err != nil {
			log.Debug("writing error response failed", "err", err)
		}
	}
}

const principalKey = "keysvc.principal"

func principal(c echo.Context) Principal {
	p, _ := c.Get(principalKey).(Principal)
	return p
}

func (s *Server) authenticate(c echo.Context) (Principal, error) {
	header := c.Request().Header.Get(echo.HeaderAuthorization)
	p, res := s.cfg.Auth.Authenticate(header, s.cfg.Now())
	if res == authMissing {
		if cp, ok := s.certPrincipal(c.Request()); ok {
			p, res = cp, authOK
		}
	}
	switch res {
	case authMissing:
		return p, fail(http.StatusUnauthorized, CodeUnauthorized, "missing bearer token")
	case authInvalid:
		return p, fail(http.StatusUnauthorized, CodeUnauthorized, "invalid, expired or revoked bearer token")
	}
	if ok, wait := s.limits.allow(p.TokenID, s.cfg.Now()); !ok {
		c.Response().Header().Set("Retry-After", retryAfter(wait))
		return p, fail(http.StatusTooManyRequests, CodeRateLimited, "rate limit of %g requests/s for this token exceeded; retry after %s", s.cfg.RateLimit.PerSecond, wait.Round(time.Millisecond))
	}
	c.Set(principalKey, p)
	return p, nil
}

// certPrincipal maps a verified client certificate to its configured
// principal. Only chains the TLS stack verified against the listener's
// client CA count.
func (s *Server) certPrincipal(r *http.Request) (Principal, bool) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return Principal{}, false
	}
	cn := r.TLS.VerifiedChains[0][0].Subject.CommonName
	p, ok := s.cfg.ClientPrincipals[cn]
	if !ok {
		return Principal{}, false
	}
	p.TokenID = "cert:" + cn
	return p, true
}

func (s *Server) requireScope(scope string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			p, err := s.authenticate(c)
			if err != nil {
				return err
			}
			if !p.Allows(scope) {
				return fail(http.StatusForbidden, CodeForbidden, "token lacks scope %s", scope)
			}
			return next(c)
		}
	}
}

// requireSignScope requires "sign:<key name>:<layer>", which "sign:*" and
// "sign:<key name>" also grant.
func (s *Server) requireSignScope(layer string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			p, err := s.authenticate(c)
			if err != nil {
				return err
			}
			if key := "sign:" + c.Param("name"); !p.Allows(key + ":" + layer) {
				return fail(http.StatusForbidden, CodeForbidden, "token lacks scope %s (or %s:%s)", key, key, layer)
			}
			return next(c)
		}
	}
}

func (s *Server) requireAnyToken() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if _, err := s.authenticate(c); err != nil {
				return err
			}
			return next(c)
		}
	}
}

// decodeBody enforces Content-Type application/json, the body size limit
// and strict JSON, then decodes into v.
func (s *Server) decodeBody(c echo.Context, v any) error {
	return s.decodeBodyLimit(c, v, s.cfg.MaxBodyBytes)
}

// decodeBodyLimit is decodeBody with its own size limit in bytes.
func (s *Server) decodeBodyLimit(c echo.Context, v any, limit int64) error {
	body, err := s.readBody(c, limit)
	if err != nil {
		return err
	}
	if err := strictjson.Decode(body, v, strictjson.Limits{}); err != nil {
		return jsonError(err)
	}
	return nil
}

// readBody enforces Content-Type application/json (charset utf-8 if any)
// and the size limit, and returns the body.
func (s *Server) readBody(c echo.Context, limit int64) ([]byte, error) {
	req := c.Request()
	mt, params, err := mime.ParseMediaType(req.Header.Get(echo.HeaderContentType))
	if err != nil || mt != "application/json" {
		return nil, fail(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "Content-Type must be application/json")
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return nil, fail(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "charset must be utf-8")
	}
	if req.ContentLength > limit {
		return nil, fail(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "request body exceeds %d bytes", limit)
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	if err != nil {
		return nil, fail(http.StatusBadRequest, strictjson.CodeInvalidJSON, "reading request body failed")
	}
	if int64(len(body)) > limit {
		return nil, fail(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "request body exceeds %d bytes", limit)
	}
	return body, nil
}

func jsonError(err error) error {
	var se *strictjson.Error
	if errors.As(err, &se) {
		return fail(http.StatusBadRequest, se.Code, "%s", se.Message)
	}
	return err
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz is ready when the store answers within 2 s and every key has an
// active version loaded.
func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if _, err := s.cfg.Store.ListKeys(ctx); err != nil {
		s.cfg.Logger.Warn("readiness: store unreachable", "err", err)
		return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "unready", "reason": "store unreachable"})
	}
	for _, b := range s.cfg.Manager.Backends() {
		if hc, ok := b.(backends.HealthChecker); ok {
			if err := hc.Healthy(ctx); err != nil {
				s.cfg.Logger.Warn("readiness: backend unhealthy", "backend", b.Kind(), "err", err)
				return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "unready", "reason": "backend " + b.Kind() + " unavailable"})
			}
		}
	}
	ring := s.cfg.Manager.Keyring()
	for _, name := range ring.SortedNames() {
		if ring.Keys[name].SignerAt(s.cfg.Now()) == nil {
			return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "unready", "reason": "key " + name + " has no active version"})
		}
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}

func (s *Server) entry(name string) (*rotation.KeyEntry, error) {
	if e, ok := s.cfg.Manager.Keyring().Keys[name]; ok {
		return e, nil
	}
	return nil, fail(http.StatusNotFound, CodeKeyNotFound, "no key named %q", name)
}

// defaultEntry is the key served under /.well-known (404 key_not_found
// before any key exists), with the Keyring it was read from.
func (s *Server) defaultEntry() (*rotation.Keyring, *rotation.KeyEntry, error) {
	ring := s.cfg.Manager.Keyring()
	e, ok := ring.Keys[ring.Default]
	if !ok {
		return nil, nil, fail(http.StatusNotFound, CodeKeyNotFound, "no default key configured yet")
	}
	return ring, e, nil
}

func (s *Server) defaultJWKS(c echo.Context) error {
	_, e, err := s.defaultEntry()
	if err != nil {
		return err
	}
	s.serveDoc(c, e.JWKS)
	return nil
}

// serveDoc serves a precomputed public document with the configured
// Cache-Control max-age and ETag revalidation.
func (s *Server) serveDoc(c echo.Context, d jwksserve.Document) {
	jwksserve.ServeMaxAge(c.Response(), c.Request(), d, int(s.cfg.Manager.JWKSMaxAge()/time.Second))
	m := s.metrics
	m.docRequestsC.get(m.docRequests.WithLabelValues, docName(c.Path()), statusLabel(c.Response().Status)).Inc()
}

// docName names a public document route for metrics.
func docName(route string) string {
	switch route {
	case "/.well-known/did.json":
		return "did"
	case WellKnownHistory, "/v1/keys/:name/history.json":
		return "history"
	}
	return "jwks"
}

// WellKnownHistory is the key-history document of the default key.
const WellKnownHistory = "/.well-known/vrp-key-history.json"

func (s *Server) keyHistory(c echo.Context) error {
	e, err := s.entry(c.Param("name"))
	if err != nil {
		return err
	}
	s.serveDoc(c, e.History)
	return nil
}

func (s *Server) defaultHistory(c echo.Context) error {
	_, e, err := s.defaultEntry()
	if err != nil {
		return err
	}
	s.serveDoc(c, e.History)
	return nil
}

// didDocument serves did:web for the default key's issuer: every published
// version of every key of that issuer.
func (s *Server) didDocument(c echo.Context) error {
	ring, e, err := s.defaultEntry()
	if err != nil {
		return err
	}
	s.serveDoc(c, ring.DID[e.Key.Issuer])
	return nil
}

func (s *Server) keyJWKS(c echo.Context) error {
	e, err := s.entry(c.Param("name"))
	if err != nil {
		return err
	}
	s.serveDoc(c, e.JWKS)
	return nil
}

// signRequest is the body of POST /v1/keys/{name}/sign.
type signRequest struct {
	Payload jsontext.Value `json:"payload"` // any JSON object; signed as its RFC 8785 bytes
	Typ     string         `json:"typ,omitempty"`
}

// SignResponse is the answer of POST /v1/keys/{name}/sign.
type SignResponse struct {
	JWS string `json:"jws"`
	KID string `json:"kid"`
	Alg string `json:"alg"`
}

func (s *Server) activeSigner(name string) (*rotation.KeyEntry, *signer.JWSSigner, error) {
	e, err := s.entry(name)
	if err != nil {
		return nil, nil, err
	}
	sg := e.SignerAt(s.cfg.Now())
	if sg == nil {
		if e.LoadErr != nil {
			if err := signError(e.LoadErr); err != e.LoadErr {
				return nil, nil, err
			}
			return nil, nil, fail(http.StatusServiceUnavailable, CodeBackendUnavailable, "key %q cannot sign: its backend could not load the key", name)
		}
		return nil, nil, fail(http.StatusServiceUnavailable, CodeNoActiveVersion, "key %q has no active version", name)
	}
	return e, sg, nil
}

// observeBackend records one backend signature's duration.
func (s *Server) observeBackend(key string, start time.Time) {
	backend := "unknown"
	if e, ok := s.cfg.Manager.Keyring().Keys[key]; ok {
		backend = e.Key.Backend
	}
	m := s.metrics
	m.backendCallC.get(m.backendCall.WithLabelValues, backend, "sign").Observe(time.Since(start).Seconds())
}

func (s *Server) sign(c echo.Context) error {
	e, sg, err := s.activeSigner(c.Param("name"))
	if err != nil {
		return err
	}
	var req signRequest
	if err := s.decodeBody(c, &req); err != nil {
		return err
	}
	out, err := s.signOne(e, sg, req)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, out)
}

// signOne signs one JSON object payload as its RFC 8785 bytes.
func (s *Server) signOne(e *rotation.KeyEntry, sg *signer.JWSSigner, req signRequest) (SignResponse, error) {
	if len(req.Payload) == 0 || req.Payload.Kind() != '{' {
		return SignResponse{}, fail(http.StatusBadRequest, CodeInvalidRequest, "payload must be a JSON object")
	}
	if !validTyp(req.Typ) {
		return SignResponse{}, fail(http.StatusBadRequest, CodeInvalidRequest, "typ must be printable ASCII, at most 64 bytes")
	}
	canon, err := signer.Canonicalize(req.Payload)
	if err != nil {
		return SignResponse{}, jsonError(err)
	}
	start := time.Now()
	jws, err := sg.Sign(canon, req.Typ)
	s.observeBackend(e.Key.Name, start)
	if err != nil {
		return SignResponse{}, signError(err)
	}
	return SignResponse{JWS: jws, KID: sg.KID(), Alg: sg.Alg()}, nil
}

// validTyp applies signer.JWSSigner.Sign's rule for typ (printable ASCII,
// at most 64 bytes) before signing, so that a bad typ is told apart from a
// signing failure without inspecting error text.
func validTyp(typ string) bool {
	if len(typ) > 64 {
		return false
	}
	for i := 0; i < len(typ); i++ {
		if typ[i] < 0x20 || typ[i] > 0x7e {
			return false
		}
	}
	return true
}

// signError maps a failed signature: an unavailable backend (HSM, KMS) is
// 503 backend_unavailable; anything else is an internal error.
func signError(err error) error {
	switch {
	case errors.Is(err, backends.ErrUnavailable):
		return fail(http.StatusServiceUnavailable, CodeBackendUnavailable, "key backend unavailable")
	case errors.Is(err, backends.ErrThrottled):
		return fail(http.StatusServiceUnavailable, CodeBackendThrottled, "key backend is throttling requests; retry with backoff")
	case errors.Is(err, backends.ErrKeyDisabled):
		return fail(http.StatusServiceUnavailable, CodeKeyDisabled, "the key version is disabled in its backend")
	case errors.Is(err, backends.ErrMessageTooLarge):
		return fail(http.StatusRequestEntityTooLarge, CodeMessageTooLarge, "the signing input is too large for this key's backend")
	}
	return err
}

// transportRequest is the body of POST /v1/keys/{name}/mcp-transport.
type transportRequest struct {
	Tool      string         `json:"tool"`
	Arguments jsontext.Value `json:"arguments"`
	ServedAt  string         `json:"served_at,omitempty"`  // RFC 3339; default: now
	OfferRef  string         `json:"offer_ref,omitempty"`  // optional assertion member
	SessionID string         `json:"session_id,omitempty"` // optional assertion member
	Ref       string         `json:"ref,omitempty"`        // attestation ref; default offer_ref
	ValidFor  string         `json:"valid_for,omitempty"`  // Go duration, e.g. "1h"; default 1h
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

// TransportResponse is the answer of POST /v1/keys/{name}/mcp-transport.
type TransportResponse struct {
	Assertion   signer.TransportAssertion `json:"assertion"`
	JWS         string                    `json:"jws"`
	KID         string                    `json:"kid"`
	Attestation Attestation               `json:"attestation"`
}

func (s *Server) mcpTransport(c echo.Context) error {
	e, sg, err := s.activeSigner(c.Param("name"))
	if err != nil {
		return err
	}
	var req transportRequest
	if err := s.decodeBody(c, &req); err != nil {
		return err
	}
	out, err := s.transportOne(e, sg, s.cfg.Now(), req)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, out)
}

// transportOne builds and signs one VRP MCP transport assertion.
func (s *Server) transportOne(e *rotation.KeyEntry, sg *signer.JWSSigner, now time.Time, req transportRequest) (TransportResponse, error) {
	if req.Tool == "" {
		return TransportResponse{}, fail(http.StatusBadRequest, CodeInvalidRequest, "tool is required")
	}
	if len(req.Arguments) == 0 {
		return TransportResponse{}, fail(http.StatusBadRequest, CodeInvalidRequest, "arguments is required (use {} for none)")
	}
	served := now.UTC().Truncate(time.Second)
	if req.ServedAt != "" {
		t, err := time.Parse(time.RFC3339Nano, req.ServedAt)
		if err != nil {
			return TransportResponse{}, fail(http.StatusBadRequest, CodeInvalidRequest, "served_at must be an RFC 3339 date-time")
		}
		// The node asserts when it served the call; it cannot backdate or
		// postdate that beyond clock skew (the key that signs is today's).
		if d := t.Sub(now); d < -s.cfg.MaxServedAtSkew || d > s.cfg.MaxServedAtSkew {
			return TransportResponse{}, fail(http.StatusBadRequest, CodeInvalidRequest, "served_at must lie within %s of the server's time", s.cfg.MaxServedAtSkew)
		}
		served = t.UTC()
	}
	validFor := s.cfg.DefaultValid
	if req.ValidFor != "" {
		d, err := time.ParseDuration(req.ValidFor)
		if err != nil || d < time.Second || d > s.cfg.MaxValidFor {
			return TransportResponse{}, fail(http.StatusBadRequest, CodeInvalidRequest, "valid_for must be a duration between 1s and %s, e.g. \"1h\"", s.cfg.MaxValidFor)
		}
		validFor = d
	}
	assertion, payload, err := signer.BuildTransportAssertion(signer.TransportCall{
		Tool: req.Tool, Arguments: []byte(req.Arguments), ServedAt: served,
		Issuer: e.Key.Issuer, OfferRef: req.OfferRef, SessionID: req.SessionID,
	})
	switch {
	case errors.Is(err, signer.ErrArgumentKeyCollision):
		return TransportResponse{}, fail(http.StatusBadRequest, CodeArgumentKeyCollision, "%s", strings.TrimPrefix(err.Error(), "signer: "))
	case errors.Is(err, signer.ErrArgumentsNotObject):
		return TransportResponse{}, fail(http.StatusBadRequest, CodeInvalidRequest, "arguments must be a JSON object")
	case err != nil:
		var se *strictjson.Error
		if errors.As(err, &se) {
			return TransportResponse{}, fail(http.StatusBadRequest, se.Code, "arguments: %s", se.Message)
		}
		return TransportResponse{}, fail(http.StatusBadRequest, CodeInvalidRequest, "%s", strings.TrimPrefix(err.Error(), "signer: "))
	}
	start := time.Now()
	jws, err := sg.Sign(payload, signer.TransportJWSTyp)
	s.observeBackend(e.Key.Name, start)
	if err != nil {
		return TransportResponse{}, signError(err)
	}
	ref := req.Ref
	if ref == "" {
		ref = req.OfferRef
	}
	return TransportResponse{
		Assertion: assertion, JWS: jws, KID: sg.KID(),
		Attestation: Attestation{
			Layer: signer.LayerTransport, Source: e.Key.JWKSURL, Signature: jws, Ref: ref,
			ValidFrom: signer.FormatInstant(served), ValidUntil: signer.FormatInstant(served.Add(validFor)),
		},
	}, nil
}

func (s *Server) digestArguments(c echo.Context) error {
	var req struct {
		Arguments jsontext.Value `json:"arguments"`
	}
	if err := s.decodeBody(c, &req); err != nil {
		return err
	}
	digest, canon, err := signer.ArgumentsSHA256(req.Arguments)
	if err != nil {
		if errors.Is(err, signer.ErrArgumentKeyCollision) {
			return fail(http.StatusBadRequest, CodeArgumentKeyCollision, "%s", strings.TrimPrefix(err.Error(), "signer: "))
		}
		var se *strictjson.Error
		if errors.As(err, &se) {
			return fail(http.StatusBadRequest, se.Code, "arguments: %s", se.Message)
		}
		return fail(http.StatusBadRequest, CodeInvalidRequest, "arguments must be a JSON object")
	}
	return c.JSON(http.StatusOK, map[string]string{"arguments_sha256": digest, "canonical": string(canon)})
}

func (s *Server) digestSEP2828(c echo.Context) error {
	var req struct {
		Params jsontext.Value `json:"params"`
	}
	if err := s.decodeBody(c, &req); err != nil {
		return err
	}
	canon, digest, err := signer.ProjectSEP2828(req.Params)
	if err != nil {
		var se *strictjson.Error
		if errors.As(err, &se) {
			return fail(http.StatusBadRequest, se.Code, "params: %s", se.Message)
		}
		return fail(http.StatusBadRequest, CodeInvalidRequest, "%s", strings.TrimPrefix(err.Error(), "signer: "))
	}
	return c.JSON(http.StatusOK, map[string]string{"digest": digest, "canonical": string(canon)})
}
