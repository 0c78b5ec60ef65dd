// Package api is keysvc's HTTP surface, built on echo: the public
// endpoints (JWKS, health), the signing API and the admin API. Handlers
// translate HTTP to package rotation and signer calls; the signing path
// reads only the in-memory Keyring, and with a transparency log waits for
// its signatures' outbox commit before answering (TransparencyLog, ADR
// 0015).
//
// Every error is JSON {"error":{"code":"...","message":"..."}} with a
// stable code (see the Code* constants) and the matching HTTP status.
package api

import (
	"context"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"mime"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"

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
	CodeUnauthorized         = "unauthorized"                   // 401: no or unknown/expired/revoked token
	CodeForbidden            = "forbidden"                      // 403: token lacks the scope
	CodeNotFound             = "not_found"                      // 404: no such route
	CodeKeyNotFound          = "key_not_found"                  // 404: no such key
	CodeMethodNotAllowed     = "method_not_allowed"             // 405
	CodeUnsupportedMediaType = "unsupported_media_type"         // 415: body is not application/json
	CodeBodyTooLarge         = "body_too_large"                 // 413
	CodeInvalidRequest       = "invalid_request"                // 400: a field has a bad value
	CodeArgumentKeyCollision = "argument_key_collision"         // 400: camelCase/snake_case keys collide
	CodeKeyExists            = "key_exists"                     // 409
	CodeVersionNotFound      = "version_not_found"              // 404: no key version with that kid
	CodeInvalidTransition    = "invalid_transition"             // 409: lifecycle forbids it (e.g. revoke twice)
	CodePendingExists        = "pending_exists"                 // 409: a scheduled rotation is already pending
	CodeNoActiveVersion      = "no_active_version"              // 503: key cannot sign right now
	CodeBackendUnavailable   = "backend_unavailable"            // 503
	CodeBackendThrottled     = "backend_throttled"              // 503: backend rate limit; retry with backoff
	CodeKeyDisabled          = "key_disabled"                   // 503: the backend refuses to use the key
	CodeMessageTooLarge      = "message_too_large"              // 413: signing input over the backend's limit
	CodeRateLimited          = "rate_limited"                   // 429: per-token rate limit; see Retry-After
	CodeBatchTooLarge        = "batch_too_large"                // 400: more items than MaxBatchItems
	CodeApprovalRequired     = "approval_required"              // 409: two-person rule; use the approval flow
	CodeApprovalNotFound     = "approval_not_found"             // 404
	CodeSamePrincipal        = "same_principal"                 // 403: the approver asked for the change
	CodeApprovalPending      = "approval_pending"               // 409: the same change already awaits approval
	CodeLayerMismatch        = "layer_mismatch"                 // 400: /sign asked to sign another layer's payload or typ (ADR 0013)
	CodeActivationTooEarly   = "activation_too_early"           // 409: a pending version not yet published longer than the JWKS max-age
	CodeIssuerInUse          = "issuer_in_use"                  // 409: another key has the issuer; share_issuer to join it
	CodeKeyHistoryStale      = "key_history_stale"              // 503: this replica cannot confirm its key history is current (ADR 0014); retry on another replica
	CodeKeyHistoryNotBacked  = "key_history_not_backed"         // 409: the transparency log does not back the key's signing version as stored (ADR 0016)
	CodeServedAtNotSignable  = "served_at_not_signable"         // 409: the key version keysvc may sign with now is not the one whose window holds served_at
	CodeActivationHeld       = "activation_held"                // 503: the new version's private half cannot be loaded here; nothing switched
	CodeIdempotencyKeyReused = "idempotency_key_reused"         // 422: the Idempotency-Key was used with another request
	CodeIdempotencyInFlight  = "idempotency_in_flight"          // 409: a request with this Idempotency-Key is still running; retry later
	CodeIdempotencyLost      = "idempotency_outcome_unrecorded" // 409: the request with this key committed but its response was not recorded
	CodeInternal             = "internal"                       // 500: details only in the server log
	// SEP-2828 projection tools_call_params_plus_meta_authorization_binding_v1
	// fails closed (POST /v1/digests/sep2828, issue 15):
	CodeAuthorizationBindingMissing = "authorization_binding_missing" // 400: no _meta.authorization_binding
	CodeAuthorizationBindingInvalid = "authorization_binding_invalid" // 400: binding not an object, or nonce not a non-empty string
)

// SEP-2828 projections POST /v1/digests/sep2828 computes, by the name its
// projection member gives.
const (
	SEP2828FallbackV0 = "fallback_v0"              // {arguments, authBinding?, toolName}; the default
	SEP2828V1         = signer.SEP2828V1Projection // {projection, name, arguments, authorizationBinding}; fails closed
)

// DefaultMaxValidFor is the default upper bound of an attestation's
// valid_for. The rotation manager's MinRetention must cover it plus the
// served_at skew (serve wires both).
const DefaultMaxValidFor = 24 * time.Hour

// Config configures a Server.
type Config struct {
	Manager      *rotation.Manager
	Auth         *Authenticator
	Store        store.Store
	Logger       *slog.Logger
	MaxBodyBytes int64         // default 64 KiB
	MaxValidFor  time.Duration // upper bound of valid_for; default DefaultMaxValidFor
	DefaultValid time.Duration // valid_for when absent; default 1h
	// MaxServedAtSkew bounds how far a caller-given served_at may lie from
	// the server's clock, either way (default 5m).
	MaxServedAtSkew time.Duration
	// MaxBatchItems bounds the items of one batch request (default 100).
	MaxBatchItems int
	// MaxBatchBodyBytes bounds a batch request body (default MaxBatchItems
	// times MaxBodyBytes, at most 8 MiB).
	MaxBatchBodyBytes int64
	// ClientPrincipals map verified TLS client certificates (mutual TLS on
	// a listener) to principals, for requests without a bearer token. A
	// certificate maps only on the listener and through the CA its entry
	// names (see ClientPrincipal).
	ClientPrincipals []ClientPrincipal
	// RateLimit bounds requests per principal, a batch counting one per
	// item; zero value: unlimited.
	RateLimit RateLimit
	// PublicRateLimit bounds unauthenticated work, in one bucket shared by
	// every client: requests for the public documents (JWKS, key history,
	// did:web) and requests whose authentication fails (they answer 429
	// rate_limited instead of 401 once it is spent), so that floods of
	// either cannot take the signing path's CPU. /healthz and /readyz are
	// not limited. Zero value: unlimited.
	PublicRateLimit RateLimit
	// Tlog, when set, records every JWS the signing API issues for the
	// transparency log before the response is written, and answers
	// GET /v1/tlog/proof (issue 12, ADR 0015).
	Tlog TransparencyLog
	// Pprof serves the runtime profiles of net/http/pprof under
	// /debug/pprof/ on the admin surface, for a token with admin:keys. Off
	// by default: a CPU profile costs the signing path while it runs.
	Pprof bool
	// AdminWriteTimeout is the write deadline of admin mutations (default
	// 2 minutes), longer than the listener's, so that a slow change still
	// answers (see mutation).
	AdminWriteTimeout time.Duration
	// MCP, when set, is served at /mcp on the public surface, every HTTP
	// method (package mcpserve: the anonymous, read-only MCP endpoint).
	MCP http.Handler
	// Build describes the running binary: /healthz answers it and the
	// keysvc_build_info gauge carries it as labels (issue 16).
	Build BuildInfo
	Now   func() time.Time
}

// BuildInfo is what a binary knows about its build (runtime/debug
// ReadBuildInfo): the main module version ("(devel)" for a build in a
// checkout), the VCS revision ("+dirty" when the tree had local changes)
// and commit time (RFC 3339), the Go version and the build flags that
// change the binary ("-race=true", "CGO_ENABLED=1", ...).
type BuildInfo struct {
	Version   string   `json:"version"`
	Revision  string   `json:"revision"`
	Time      string   `json:"time"`
	GoVersion string   `json:"go_version"`
	Flags     []string `json:"flags,omitempty"`
}

// ClientPrincipal maps client certificates to a principal. A certificate
// maps when the request came through the listener named Listener (see
// HandlerForListener), its chain, as the TLS stack verified it against that
// listener's client CA, ends at the CA certificate whose DER has SHA-256
// CASHA256, and its subject has exactly one common name, CommonName
// (issue 13: a certificate from another listener's CA, or with a second CN,
// cannot take an officer's name).
type ClientPrincipal struct {
	Listener   string // "sign" or "admin"
	CASHA256   string // lower-case hex SHA-256 of the CA certificate's DER
	CommonName string
	Principal  Principal // Name and Scopes; TokenID is set per request ("cert:<CommonName>")
}

// certKey indexes ClientPrincipals.
type certKey struct{ listener, ca, cn string }

// Server serves the API.
type Server struct {
	cfg      Config
	echo     *echo.Echo
	limits   *limiters
	public   *limiters // PublicRateLimit, one bucket (id "")
	surfaces map[routeKey]Surface
	metrics  *metrics
	certs    map[certKey]Principal
	direct   map[string]directRoute // signing routes by operation ("sign", "sign:batch", ...): serveSignDirect
	contexts sync.Pool              // *directContext: serveSignDirect's
}

// New builds the echo router with every route.
func New(cfg Config) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 64 << 10
	}
	if cfg.MaxValidFor <= 0 {
		cfg.MaxValidFor = DefaultMaxValidFor
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
	if mr := cfg.Manager.MinRetention(); mr > 0 && cfg.MaxValidFor+cfg.MaxServedAtSkew > mr {
		cfg.Logger.Warn("attestations may outlive the minimum retention: a retired key version could leave the JWKS while receipts it signed are valid",
			"max_valid_for", cfg.MaxValidFor, "max_served_at_skew", cfg.MaxServedAtSkew, "min_retention", mr)
	}
	if cfg.AdminWriteTimeout <= 0 {
		cfg.AdminWriteTimeout = 2 * time.Minute
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(cfg.Logger)
	s := &Server{cfg: cfg, echo: e, limits: newLimiters(cfg.RateLimit), public: newLimiters(cfg.PublicRateLimit), surfaces: map[routeKey]Surface{},
		metrics: newMetrics(cfg.Manager, cfg.Store, cfg.Build), certs: map[certKey]Principal{}}
	for _, cp := range cfg.ClientPrincipals {
		s.certs[certKey{cp.Listener, strings.ToLower(cp.CASHA256), cp.CommonName}] = cp.Principal
	}
	if col, ok := cfg.Tlog.(prometheus.Collector); ok {
		s.metrics.reg.MustRegister(col)
	}
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
	pub := s.publicLimit
	s.route(SurfacePublic, http.MethodGet, "/.well-known/jwks.json", s.defaultJWKS, pub)
	s.route(SurfacePublic, http.MethodHead, "/.well-known/jwks.json", s.defaultJWKS, pub)
	s.route(SurfacePublic, http.MethodGet, "/v1/keys/:name/jwks.json", s.keyJWKS, pub)
	s.route(SurfacePublic, http.MethodHead, "/v1/keys/:name/jwks.json", s.keyJWKS, pub)
	s.route(SurfacePublic, http.MethodGet, "/v1/keys/:name/history.json", s.keyHistory, pub)
	s.route(SurfacePublic, http.MethodHead, "/v1/keys/:name/history.json", s.keyHistory, pub)
	s.route(SurfacePublic, http.MethodGet, WellKnownHistory, s.defaultHistory, pub)
	s.route(SurfacePublic, http.MethodHead, WellKnownHistory, s.defaultHistory, pub)
	s.route(SurfacePublic, http.MethodGet, "/.well-known/did.json", s.didDocument, pub)
	s.route(SurfacePublic, http.MethodHead, "/.well-known/did.json", s.didDocument, pub)
	if cfg.MCP != nil {
		mcpHandler := echo.WrapHandler(cfg.MCP)
		for _, m := range []string{http.MethodPost, http.MethodGet, http.MethodHead, http.MethodDelete, http.MethodPut, http.MethodPatch, http.MethodOptions} {
			s.route(SurfacePublic, m, "/mcp", mcpHandler)
		}
	}

	// Signing API.
	s.signRoute("sign", s.sign, "jws", LayerJWS)
	s.signRoute("mcp-transport", s.mcpTransport, "transport", LayerTransport)
	s.signRoute("sign:batch", s.signBatch, "jws-batch", LayerJWS)
	s.signRoute("sign:detached", s.signDetached, "detached", LayerDetached)
	s.signRoute("mcp-transport:batch", s.transportBatch, "transport-batch", LayerTransport)
	s.route(SurfaceSign, http.MethodPost, "/v1/digests/mcp-arguments", s.digestArguments, s.requireAnyToken())
	s.route(SurfaceSign, http.MethodPost, "/v1/digests/sep2828", s.digestSEP2828, s.requireAnyToken())
	s.route(SurfaceSign, http.MethodGet, "/v1/tlog/proof", s.tlogProof, s.requireAnyToken())

	// Admin API.
	s.route(SurfaceAdmin, http.MethodGet, "/v1/keys", s.listKeys, s.requireScope(ScopeAdminKeys))
	s.route(SurfaceAdmin, http.MethodPost, "/v1/keys", s.createKey, s.requireScope(ScopeAdminKeys), s.mutation)
	s.route(SurfaceAdmin, http.MethodGet, "/v1/keys/:name/versions", s.listVersions, s.requireScope(ScopeAdminKeys))
	s.route(SurfaceAdmin, http.MethodPost, "/v1/keys/:name/rotate", s.rotate, s.requireScope(ScopeAdminKeys), s.mutation)
	s.route(SurfaceAdmin, http.MethodPut, "/v1/keys/:name/policy", s.setPolicy, s.requireScope(ScopeAdminKeys), s.mutation)
	s.route(SurfaceAdmin, http.MethodPut, "/v1/keys/:name/backend", s.setBackend, s.requireScope(ScopeAdminKeys), s.mutation)
	s.route(SurfaceAdmin, http.MethodPost, "/v1/versions/:kid/activate", s.activateVersion, s.requireScope(ScopeAdminKeys), s.mutation)
	s.route(SurfaceAdmin, http.MethodPost, "/v1/versions/:kid/revoke", s.revokeVersion, s.requireScope(ScopeAdminRevoke), s.mutation)
	s.route(SurfaceAdmin, http.MethodPost, "/v1/versions/:kid/destroy", s.destroyVersion, s.requireScope(ScopeAdminRevoke), s.mutation)
	s.route(SurfaceAdmin, http.MethodGet, "/v1/approvals", s.listApprovals, s.requireScope(ScopeAdminRevoke))
	s.route(SurfaceAdmin, http.MethodPost, "/v1/approvals/:id/approve", s.approve, s.requireScope(ScopeAdminRevoke), s.mutation)
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

// signRoute registers POST /v1/keys/:name/<op> on the signing surface,
// instrumented under metric layer metricLayer and guarded by the sign
// scope of layer, and keeps the composed chain for serveSignDirect.
func (s *Server) signRoute(op string, h echo.HandlerFunc, metricLayer, layer string) {
	path := "/v1/keys/:name/" + strings.ReplaceAll(op, ":", `\:`) // echo's escape of a literal colon
	instrument, scope := s.instrumentSign(metricLayer), s.requireSignScope(layer)
	s.route(SurfaceSign, http.MethodPost, path, h, instrument, scope)
	if s.direct == nil {
		s.direct = map[string]directRoute{}
	}
	s.direct[op] = directRoute{path: path, h: instrument(scope(h))}
}

// directRoute is a signing route as serveSignDirect runs it: echo's path
// pattern (c.Path()) and the handler with its route middleware applied.
type directRoute struct {
	path string
	h    echo.HandlerFunc
}

// routeKey is a registered route: method and echo path pattern.
type routeKey struct{ method, path string }

// route registers a handler and the surface it belongs to.
func (s *Server) route(sf Surface, method, path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
	s.echo.Add(method, path, h, m...)
	s.surfaces[routeKey{method, path}] = sf
}

type surfaceKey struct{}

// listenerKey carries the name of the listener a request came through.
type listenerKey struct{}

// Handler returns the http.Handler serving every surface.
func (s *Server) Handler() http.Handler { return s.HandlerFor(SurfaceAll) }

// HandlerFor returns an http.Handler that serves only the routes of the
// given surfaces; any other route answers 404 not_found, as an unknown
// path does, the message naming the listener that serves it (servedBy).
// Client certificates map to no principal through it
// (use HandlerForListener).
func (s *Server) HandlerFor(allowed Surface) http.Handler { return s.HandlerForListener("", allowed) }

// HandlerForListener is HandlerFor for the listener named listener ("sign",
// "admin", ...): client certificates verified there map to the
// ClientPrincipals bound to that listener.
func (s *Server) HandlerForListener(listener string, allowed Surface) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if allowed&SurfacePublic != 0 && s.serveJWKSDirect(w, r) {
			return
		}
		if allowed&SurfaceSign != 0 && s.serveSignDirect(w, r, listener) {
			return
		}
		ctx := context.WithValue(r.Context(), surfaceKey{}, allowed)
		if listener != "" {
			ctx = context.WithValue(ctx, listenerKey{}, listener)
		}
		s.echo.ServeHTTP(w, r.WithContext(ctx))
	})
}

// serveJWKSDirect answers GET and HEAD of /.well-known/jwks.json and
// /v1/keys/{name}/jwks.json — the documents verifiers poll most — without
// echo's routing and request context (issue 18: a JWKS at the cost of a
// bare net/http handler). The answer is the routed one's, header for
// header (TestJWKSDirectSameAnswer): the public rate limit, X-Request-Id
// (the caller's when sane, else a new one), CORS, Cache-Control, ETag and
// 304, and the document metric. It reports false, leaving the request to
// echo, for any other request and for every answer that is not the
// document (unknown key, no default key yet, rate limited, an escaped
// path), so errors keep one code path.
func (s *Server) serveJWKSDirect(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	p := r.URL.Path
	if r.URL.RawPath != "" || !strings.HasSuffix(p, "/jwks.json") {
		return false
	}
	var d jwksserve.Document
	switch {
	case p == "/.well-known/jwks.json":
		ring, issuer, err := s.issuerOf(r)
		if err != nil {
			return false
		}
		d = ring.IssuerJWKS[issuer]
	case strings.HasPrefix(p, "/v1/keys/") && len(p) > len("/v1/keys/")+len("/jwks.json"):
		name := p[len("/v1/keys/") : len(p)-len("/jwks.json")]
		e, err := s.entry(name)
		if err != nil || strings.IndexByte(name, '/') >= 0 {
			return false
		}
		d = e.JWKS
	default:
		return false
	}
	if d.Body == nil {
		return false
	}
	if ok, _ := s.public.allow("", s.cfg.Now()); !ok {
		return false // echo answers the 429 (a refused take costs no token)
	}
	h := w.Header()
	setRequestID(h, r)
	h["Access-Control-Allow-Origin"] = corsAnyOrigin
	h["Access-Control-Expose-Headers"] = corsExposed
	status := jwksserve.ServeMaxAge(w, r, d, int(s.cfg.Manager.JWKSMaxAge()/time.Second))
	m := s.metrics
	m.docRequestsC.get(m.docRequests.WithLabelValues, "jwks", statusLabel(status)).Inc()
	return true
}

// setRequestID sets X-Request-Id as the RequestID middleware of New does:
// the caller's when sane, a new one when absent, none when the caller's is
// not sane (validRequestID).
func setRequestID(h http.Header, r *http.Request) {
	switch id := r.Header.Get(echo.HeaderXRequestID); {
	case id == "":
		h[echo.HeaderXRequestID] = []string{randomID()}
	case validRequestID(id):
		h[echo.HeaderXRequestID] = []string{id}
	}
}

// serveSignDirect runs POST /v1/keys/{name}/{sign, mcp-transport,
// sign:batch, sign:detached, mcp-transport:batch} without echo's router
// (issue 18: the router, the per-request middleware closures and the
// request copy carrying the surface were ~10 % of a single sign's own
// work). The handler is the routed one with its route middleware
// (metrics, authentication, scope), on a pooled echo context holding the
// route's path pattern and the key name; errors go through the same
// error handler, so every answer is the routed one
// (TestSignDirectSameAnswer). It reports false, leaving the request to
// echo, for any other method or path, an escaped path (echo matches the
// raw path) and an empty or nested name. The caller has checked that the
// listener serves the signing surface, which is all surfaceGuard checks.
func (s *Server) serveSignDirect(w http.ResponseWriter, r *http.Request, listener string) bool {
	if r.Method != http.MethodPost || r.URL.RawPath != "" {
		return false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/keys/")
	if !ok {
		return false
	}
	i := strings.IndexByte(rest, '/')
	if i <= 0 {
		return false
	}
	name, op := rest[:i], rest[i+1:]
	rt, ok := s.direct[op] // op holds no '/': no route name does
	if !ok {
		return false
	}
	if listener != "" && r.TLS != nil {
		// Client certificates map to principals per listener (certPrincipal).
		r = r.WithContext(context.WithValue(r.Context(), listenerKey{}, listener))
	}
	setRequestID(w.Header(), r)
	c := s.acquireDirect(r, w, rt.path, name)
	defer s.releaseDirect(c)
	if err := rt.h(c); err != nil {
		s.echo.HTTPErrorHandler(err, c)
	}
	return true
}

// acquireDirect returns a pooled directContext for request r of the route
// with echo path pattern path and key name name, holding no principal.
func (s *Server) acquireDirect(r *http.Request, w http.ResponseWriter, path, name string) *directContext {
	c, _ := s.contexts.Get().(*directContext)
	if c == nil {
		c = &directContext{Context: s.echo.NewContext(nil, nil)}
	}
	c.Reset(r, w)
	c.principal = Principal{} // released clear already; cleared again, in case
	c.SetPath(path)
	c.SetParamNames(nameParam...)
	c.name[0] = name
	c.SetParamValues(c.name[:]...)
	return c
}

// releaseDirect clears c — request, response, key name and principal —
// and returns it to the pool (deferred: after a handler's panic too).
func (s *Server) releaseDirect(c *directContext) {
	c.Reset(nil, nil)
	c.name[0], c.principal = "", Principal{}
	s.contexts.Put(c)
}

// directContext is serveSignDirect's pooled echo context. It holds the
// key name's parameter slice and the authenticated principal itself, so
// that neither is a heap allocation per request (echo's context store is
// a map made anew for each request, and a Principal stored in it is
// boxed); principal and authenticate read and write the field through
// it, and every other use goes to the embedded context. A middleware that
// wrapped the context would hide the field: principal would answer the
// zero Principal, and TestBatchItemsAreBoundedAndCounted, whose batches
// are charged to the principal's token, fails then.
type directContext struct {
	echo.Context
	name      [1]string
	principal Principal
}

// nameParam is the parameter list of the signing routes' patterns.
var nameParam = []string{"name"}

// surfaceGuard refuses routes of surfaces the listener does not serve.
// It runs after routing (echo's Use), before authentication.
func (s *Server) surfaceGuard(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		allowed, _ := c.Request().Context().Value(surfaceKey{}).(Surface)
		if sf, ok := s.surfaces[routeKey{c.Request().Method, c.Path()}]; ok && sf&allowed == 0 {
			return fail(http.StatusNotFound, CodeNotFound, "no route for %s %s on this listener: %s", c.Request().Method, c.Request().URL.Path, servedBy(sf))
		}
		return next(c)
	}
}

// servedBy names the listener that serves a surface's routes, for the
// 404 of a listener that does not (issue 16: say where to go).
func servedBy(sf Surface) string {
	switch {
	case sf&SurfaceAdmin != 0:
		return "the admin API is served by the admin listener (serve --admin-listen; keysvc keys/approvals --server URL of that listener)"
	case sf&SurfaceSign != 0:
		return "the signing API is served by the signing listener (serve --sign-listen)"
	default:
		return "public documents are served by the public listener (serve --listen)"
	}
}

// randomID returns 16 random hex digits: a request id, unique with
// overwhelming probability, not a secret (math/rand/v2's per-thread
// ChaCha8, no system call per request).
func randomID() string {
	var b [8]byte
	var h [16]byte
	binary.LittleEndian.PutUint64(b[:], mrand.Uint64())
	hex.Encode(h[:], b[:])
	return string(h[:]) // the one allocation
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
	if d, ok := c.(*directContext); ok {
		return d.principal
	}
	p, _ := c.Get(principalKey).(Principal)
	return p
}

func (s *Server) authenticate(c echo.Context) (Principal, error) {
	header := c.Request().Header.Get(echo.HeaderAuthorization)
	p, res := s.cfg.Auth.Authenticate(header, s.cfg.Now())
	if res == authMissing {
		switch cp, cr := s.certPrincipal(c.Request()); cr {
		case authOK:
			p, res = cp, authOK
		case authInvalid:
			return p, fail(http.StatusUnauthorized, CodeUnauthorized, "client certificate subject must have exactly one common name")
		}
	}
	if res != authOK {
		// Failed authentications are unauthenticated work: they spend the
		// public bucket, so a flood of bad tokens is bounded too.
		if err := s.takePublic(c); err != nil {
			return p, err
		}
	}
	switch res {
	case authMissing:
		return p, fail(http.StatusUnauthorized, CodeUnauthorized, "missing bearer token")
	case authInvalid:
		if scheme, _, _ := strings.Cut(header, " "); header != "" && !strings.EqualFold(scheme, "Bearer") {
			return p, fail(http.StatusUnauthorized, CodeUnauthorized, "the Authorization header must be \"Bearer <token>\" (the word Bearer, a space, the token)")
		}
		return p, fail(http.StatusUnauthorized, CodeUnauthorized, "invalid, expired or revoked bearer token")
	}
	if ok, wait := s.limits.allow(p.TokenID, s.cfg.Now()); !ok {
		c.Response().Header().Set("Retry-After", retryAfter(wait))
		return p, fail(http.StatusTooManyRequests, CodeRateLimited, "rate limit of %g requests/s for this token exceeded; retry after %s", s.cfg.RateLimit.PerSecond, wait.Round(time.Millisecond))
	}
	if d, ok := c.(*directContext); ok {
		d.principal = p
	} else {
		c.Set(principalKey, p)
	}
	return p, nil
}

// publicLimit is the middleware of the public documents: one token of the
// PublicRateLimit bucket per request.
func (s *Server) publicLimit(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := s.takePublic(c); err != nil {
			return err
		}
		return next(c)
	}
}

// takePublic takes one token from the public bucket, or answers 429.
func (s *Server) takePublic(c echo.Context) error {
	if ok, wait := s.public.allow("", s.cfg.Now()); !ok {
		c.Response().Header().Set("Retry-After", retryAfter(wait))
		return fail(http.StatusTooManyRequests, CodeRateLimited, "unauthenticated request rate limit of %g/s exceeded; retry after %s", s.cfg.PublicRateLimit.PerSecond, wait.Round(time.Millisecond))
	}
	return nil
}

// chargeBatch takes the further n-1 tokens of a batch of n signatures from
// the principal's bucket (authentication took one): a batch counts as
// many signatures as it has items. A batch larger than the burst can never
// fit: 400 batch_too_large.
func (s *Server) chargeBatch(c echo.Context, n int) error {
	p := principal(c)
	if s.limits.exceeds(n) {
		return fail(http.StatusBadRequest, CodeBatchTooLarge, "a batch of %d signatures exceeds this token's rate-limit burst of %d", n, s.cfg.RateLimit.Burst)
	}
	if ok, wait := s.limits.allowN(p.TokenID, s.cfg.Now(), n-1); !ok {
		c.Response().Header().Set("Retry-After", retryAfter(wait))
		return fail(http.StatusTooManyRequests, CodeRateLimited, "rate limit of %g signatures/s for this token exceeded by a batch of %d; retry after %s", s.cfg.RateLimit.PerSecond, n, wait.Round(time.Millisecond))
	}
	return nil
}

// certPrincipal maps a verified client certificate to its configured
// principal: authOK with it; authMissing when there is no verified
// certificate or no entry fits; authInvalid when the subject has more
// than one common name, or none (it could be read as either). Only chains
// the TLS stack verified against the listener's client CA count, and only
// entries bound to this listener and to the CA a verified chain ends at.
func (s *Server) certPrincipal(r *http.Request) (Principal, authResult) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 || len(s.certs) == 0 {
		return Principal{}, authMissing
	}
	listener, _ := r.Context().Value(listenerKey{}).(string)
	if listener == "" {
		return Principal{}, authMissing
	}
	leaf := r.TLS.VerifiedChains[0][0]
	cns := 0
	for _, n := range leaf.Subject.Names {
		if n.Type.Equal(oidCommonName) {
			cns++
		}
	}
	if cns != 1 {
		return Principal{}, authInvalid
	}
	cn := leaf.Subject.CommonName
	for _, chain := range r.TLS.VerifiedChains {
		root := chain[len(chain)-1]
		sum := sha256.Sum256(root.Raw)
		if p, ok := s.certs[certKey{listener, hex.EncodeToString(sum[:]), cn}]; ok {
			p.TokenID = "cert:" + cn
			return p, authOK
		}
	}
	return Principal{}, authMissing
}

// oidCommonName is the X.520 commonName attribute type (2.5.4.3).
var oidCommonName = asn1.ObjectIdentifier{2, 5, 4, 3}

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
			// The scope is built where it does not escape (no heap
			// allocation for a short key name); the message's copy only
			// when it is refused.
			if name := c.Param("name"); !p.Allows("sign:" + name + ":" + layer) {
				key := "sign:" + name
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
	if ct := req.Header[echo.HeaderContentType]; len(ct) != 1 || ct[0] != echo.MIMEApplicationJSON {
		// Anything but exactly "application/json" (the common case, which
		// needs no parsing) is parsed: parameters, case, a charset.
		mt, params, err := mime.ParseMediaType(req.Header.Get(echo.HeaderContentType))
		if err != nil || mt != "application/json" {
			return nil, fail(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "Content-Type must be application/json")
		}
		if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
			return nil, fail(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "charset must be utf-8")
		}
	}
	if req.ContentLength > limit {
		return nil, fail(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "request body exceeds %d bytes", limit)
	}
	var body []byte
	var err error
	if n := req.ContentLength; n >= 0 && n <= maxPresized {
		// Declared length: one buffer of that size (net/http stops the
		// body there), then a read that must find its end.
		body = make([]byte, n, n+1)
		if _, err = io.ReadFull(req.Body, body); err == nil {
			if m, _ := req.Body.Read(body[n : n+1]); m > 0 {
				// More than declared (net/http stops at the length; a
				// handler in process may not): read on, under the limit.
				var rest []byte
				rest, err = io.ReadAll(io.LimitReader(req.Body, limit-n))
				body = append(body[:n+1], rest...)
			}
		}
	} else {
		body, err = io.ReadAll(io.LimitReader(req.Body, limit+1))
	}
	if err != nil {
		return nil, fail(http.StatusBadRequest, strictjson.CodeInvalidJSON, "reading request body failed")
	}
	if int64(len(body)) > limit {
		return nil, fail(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "request body exceeds %d bytes", limit)
	}
	return body, nil
}

// maxPresized bounds the buffer readBody allocates from a declared
// Content-Length before the bytes arrive (larger bodies grow as they are
// read), so that a declared length alone cannot reserve a batch's 8 MiB.
const maxPresized = 64 << 10

func jsonError(err error) error {
	var se *strictjson.Error
	if errors.As(err, &se) {
		return fail(http.StatusBadRequest, se.Code, "%s", se.Message)
	}
	return err
}

// healthz answers {"status":"ok"}, with the build of the binary when
// Config.Build names a version.
func (s *Server) healthz(c echo.Context) error {
	if s.cfg.Build.Version == "" {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	}
	return c.JSON(http.StatusOK, struct {
		Status string    `json:"status"`
		Build  BuildInfo `json:"build"`
	}{"ok", s.cfg.Build})
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
	now := s.cfg.Now()
	mgr := s.cfg.Manager
	if !mgr.LeaseValid(now) {
		return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "unready",
			"reason": "key history stale: not confirmed current since " + mgr.LeaseUntil().Add(-mgr.Lease()).UTC().Format(time.RFC3339Nano)})
	}
	ring := mgr.Keyring()
	var warnings []string
	for _, name := range ring.SortedNames() {
		e := ring.Keys[name]
		if len(e.NotBacked) > 0 {
			reasons := make([]string, 0, len(e.NotBacked))
			for _, r := range e.NotBacked {
				reasons = append(reasons, r)
			}
			sort.Strings(reasons)
			return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "unready",
				"reason": "key history not backed by the transparency log: " + strings.Join(reasons, "; ")})
		}
		if _, err := mgr.SignerFor(name, now); err != nil {
			reason := "key " + name + " has no active version"
			if cause := errors.Join(e.LoadErr, e.NextErr); cause != nil {
				reason = "key " + name + " cannot sign: " + cause.Error()
			}
			return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "unready", "reason": reason})
		}
		if e.NextKID != "" && e.NextErr != nil {
			return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "unready",
				"reason": "key " + name + ": armed version " + e.NextKID + " cannot be loaded here: " + e.NextErr.Error()})
		}
		if e.PendingKID != "" && e.PendingErr != nil {
			warnings = append(warnings, "key "+name+": pending version "+e.PendingKID+" cannot be loaded here (its activation is held): "+e.PendingErr.Error())
		}
	}
	if len(warnings) > 0 {
		return c.JSON(http.StatusOK, map[string]any{"status": "ready", "warnings": warnings})
	}
	if s.cfg.Tlog != nil {
		if err := s.cfg.Tlog.Ready(); err != nil {
			return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "unready", "reason": err.Error()})
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

// issuerDocs returns the issuer whose /.well-known documents a request
// asks for: the request's Host (port and letter case ignored) when it is
// the issuer of a key, else the default key's issuer (404 key_not_found
// before any key exists).
func (s *Server) issuerDocs(c echo.Context) (*rotation.Keyring, string, error) {
	return s.issuerOf(c.Request())
}

// issuerOf is issuerDocs for a request outside echo.
func (s *Server) issuerOf(r *http.Request) (*rotation.Keyring, string, error) {
	ring := s.cfg.Manager.Keyring()
	if host := requestHost(r); host != "" {
		if _, ok := ring.IssuerJWKS[host]; ok {
			return ring, host, nil
		}
	}
	e, ok := ring.Keys[ring.Default]
	if !ok {
		return nil, "", fail(http.StatusNotFound, CodeKeyNotFound, "no default key configured yet")
	}
	return ring, e.Key.Issuer, nil
}

// requestHost is the request's Host without a port, lower-cased; "" when
// it is not a DNS name (an IP literal, empty).
func requestHost(r *http.Request) string {
	h := r.Host
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	if h == "" || strings.ContainsAny(h, "[]") {
		return ""
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// defaultJWKS serves /.well-known/jwks.json: the JWKS of every published
// version of every key of the request's issuer (issuerDocs).
func (s *Server) defaultJWKS(c echo.Context) error {
	ring, issuer, err := s.issuerDocs(c)
	if err != nil {
		return err
	}
	s.serveDoc(c, ring.IssuerJWKS[issuer])
	return nil
}

// serveDoc serves a precomputed public document with the configured
// Cache-Control max-age and ETag revalidation.
func (s *Server) serveDoc(c echo.Context, d jwksserve.Document) {
	// Public documents may be read from any origin (a browser-based agent
	// fetching the JWKS, did.json or key history): CORS for GET and HEAD
	// only, no credentials (issue 15).
	h := c.Response().Header()
	h["Access-Control-Allow-Origin"] = corsAnyOrigin
	h["Access-Control-Expose-Headers"] = corsExposed
	jwksserve.ServeMaxAge(c.Response(), c.Request(), d, int(s.cfg.Manager.JWKSMaxAge()/time.Second))
	m := s.metrics
	m.docRequestsC.get(m.docRequests.WithLabelValues, docName(c.Path()), statusLabel(c.Response().Status)).Inc()
}

var (
	corsAnyOrigin = []string{"*"}
	corsExposed   = []string{"ETag, Cache-Control"}
)

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

// defaultHistory serves /.well-known/vrp-key-history.json: the key-history
// document of every key of the request's issuer (issuerDocs).
func (s *Server) defaultHistory(c echo.Context) error {
	ring, issuer, err := s.issuerDocs(c)
	if err != nil {
		return err
	}
	s.serveDoc(c, ring.IssuerHistory[issuer])
	return nil
}

// didDocument serves did:web for the request's issuer (issuerDocs): every
// published version of every key of that issuer.
func (s *Server) didDocument(c echo.Context) error {
	ring, issuer, err := s.issuerDocs(c)
	if err != nil {
		return err
	}
	s.serveDoc(c, ring.DID[issuer])
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
	// canonical: decodeCommon found Payload valid and already RFC 8785
	// (signer.CanonicalObjectPrefix), so signOne signs it as it is; layer
	// is then the layer Payload claims, read by the same scan
	// (signer.ClaimedLayer's rule).
	canonical bool
	layer     string
}

// SignResponse is the answer of POST /v1/keys/{name}/sign.
type SignResponse struct {
	JWS string `json:"jws"`
	KID string `json:"kid"`
	Alg string `json:"alg"`
}

// signerFor returns the version of key e that signs now (ADR 0014: chosen
// by the signing instant, under this replica's lease). Call it right
// before signing, after the request body is read.
func (s *Server) signerFor(e *rotation.KeyEntry, now time.Time) (rotation.Signing, error) {
	name := e.Key.Name
	sig, err := s.cfg.Manager.SignerFor(name, now)
	switch {
	case err == nil:
		return sig, nil
	case errors.Is(err, rotation.ErrHistoryStale):
		return sig, fail(http.StatusServiceUnavailable, CodeKeyHistoryStale, "this replica cannot confirm that key history is current, so it does not sign; retry on another replica")
	case errors.Is(err, rotation.ErrKeyNotFound):
		return sig, fail(http.StatusNotFound, CodeKeyNotFound, "no key named %q", name)
	}
	if sig.Entry != nil {
		if cause := errors.Join(sig.Entry.LoadErr, sig.Entry.NextErr); cause != nil {
			if mapped := signError(cause); mapped != cause {
				return sig, mapped
			}
			return sig, fail(http.StatusServiceUnavailable, CodeBackendUnavailable, "key %q cannot sign: its backend could not load the key", name)
		}
	}
	return sig, fail(http.StatusServiceUnavailable, CodeNoActiveVersion, "key %q has no active version", name)
}

// observeBackend records the duration of one backend signature made by
// sig (keysvc_backend_call_duration_seconds, labelled by the backend of
// the key entry that signed: the Keyring's at the signing instant).
func (s *Server) observeBackend(sig rotation.Signing, start time.Time) {
	s.observeBackendIn(nil, sig, start)
}

// observeBackendIn is observeBackend, held in run when run is not nil:
// the signatures of one run of batch items are observed together when
// the run ends (backendRun.flush).
func (s *Server) observeBackendIn(run *backendRun, sig rotation.Signing, start time.Time) {
	s.observeBackendSecs(run, sig, time.Since(start).Seconds())
}

// observeBackendSecs is observeBackendIn for a duration already measured.
func (s *Server) observeBackendSecs(run *backendRun, sig rotation.Signing, secs float64) {
	backend := "unknown"
	if sig.Entry != nil {
		backend = sig.Entry.Key.Backend
	}
	if run == nil {
		m := s.metrics
		m.backendCallC.get(m.backendCall.WithLabelValues, backend, "sign").Observe(secs)
		return
	}
	if run.n == len(run.secs) || (run.n > 0 && run.backend != backend) {
		run.flush(s)
	}
	run.backend = backend
	run.secs[run.n] = secs
	run.n++
}

// backendRun holds the backend signature durations of one run of batch
// items until the run ends. Each signature is still one observation of
// keysvc_backend_call_duration_seconds with its own duration; observed
// together, the histogram's counters move between cores once per run
// rather than once per signature, which two batch workers made cost
// about 1 % of a batch signature's CPU (issue 18).
type backendRun struct {
	backend string
	n       int
	secs    [64]float64

	// item is the index of the batch item being signed, and pending the
	// run's JWS left for its end (signJWS, ADR 0044).
	item    int
	pending []pendingJWS
}

// pendingJWS is a JWS of a batch item whose signature signJWS left for the
// end of its run.
type pendingJWS struct {
	item    int
	sig     rotation.Signing
	payload []byte
	typ     string
}

// signJWS signs payload under typ with sig's version. In a run of batch
// items (run not nil) whose version is an Ed25519 key held in memory
// (signer.JWSSigner.Batches), it leaves the signature for the end of the
// run instead, returning "": signPending then signs the
// run's JWS together (one field inversion for all of them, ADR 0044) and
// runBatch puts each in its item's response. The version stays the one
// chosen at the item's own signing instant (sig).
func (s *Server) signJWS(run *backendRun, sig rotation.Signing, payload []byte, typ string) (string, error) {
	if run != nil && sig.Signer.Batches() {
		run.pending = append(run.pending, pendingJWS{item: run.item, sig: sig, payload: payload, typ: typ})
		return "", nil
	}
	start := time.Now()
	jws, err := sig.Signer.Sign(payload, typ)
	s.observeBackendIn(run, sig, start)
	return jws, err
}

// signPending signs the JWS signJWS left in run, each run of consecutive
// items of one version with one signer.JWSSigner.SignBatch, and hands each
// JWS to set with its item's index. Each signature is one observation of
// keysvc_backend_call_duration_seconds, of its batch's mean duration. An
// error (signError's) fails the whole batch, as a backend failure does.
func (s *Server) signPending(run *backendRun, set func(item int, jws string)) error {
	for len(run.pending) > 0 {
		n := 1
		for n < len(run.pending) && run.pending[n].sig.Signer == run.pending[0].sig.Signer {
			n++
		}
		group := run.pending[:n]
		payloads, typs := make([][]byte, n), make([]string, n)
		for i, p := range group {
			payloads[i], typs[i] = p.payload, p.typ
		}
		start := time.Now()
		out, err := group[0].sig.Signer.SignBatch(payloads, typs)
		if err != nil {
			run.pending = nil
			return signError(err)
		}
		per := time.Since(start).Seconds() / float64(n)
		for i, p := range group {
			s.observeBackendSecs(run, p.sig, per)
			set(p.item, out[i])
		}
		run.pending = run.pending[n:]
	}
	return nil
}

// flush observes the held durations and empties the run.
func (r *backendRun) flush(s *Server) {
	if r.n == 0 {
		return
	}
	m := s.metrics
	h := m.backendCallC.get(m.backendCall.WithLabelValues, r.backend, "sign")
	for _, v := range r.secs[:r.n] {
		h.Observe(v)
	}
	r.n = 0
}

func (s *Server) sign(c echo.Context) error {
	e, err := s.entry(c.Param("name"))
	if err != nil {
		return err
	}
	body, err := s.readBody(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	// The common shape in one pass (as a batch item is); anything else
	// through strictjson and its exact errors. body is this request's own.
	var req signRequest
	if err := decodeItem(body, &req); err != nil {
		return err
	}
	out, err := s.signOne(e, req, nil)
	if err != nil {
		return err
	}
	if err := s.recordIssuedOne(c, out.JWS); err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, out)
}

// signOne signs one JSON object payload as its RFC 8785 bytes with the
// version that signs at this instant.
//
// run, when not nil, is the run of batch items this one belongs to: the
// backend observation is held for its end (observeBackendIn), and with an
// in-memory Ed25519 key so is the signature (signJWS: the JWS is "" until
// runBatch fills it in).
func (s *Server) signOne(e *rotation.KeyEntry, req signRequest, run *backendRun) (SignResponse, error) {
	if len(req.Payload) == 0 || req.Payload.Kind() != '{' {
		return SignResponse{}, fail(http.StatusBadRequest, CodeInvalidRequest, "payload must be a JSON object")
	}
	if !validTyp(req.Typ) {
		return SignResponse{}, fail(http.StatusBadRequest, CodeInvalidRequest, "typ must be printable ASCII, at most 64 bytes")
	}
	if l := signer.ReservedTypLayer(req.Typ); l != "" {
		return SignResponse{}, fail(http.StatusBadRequest, CodeLayerMismatch, "typ %q is the %s layer's; only its own endpoint signs under it (ADR 0013)", req.Typ, l)
	}
	// req.Payload is this request's own (the body, or its batch item's
	// slice of it), checked by decodeItem: canonical already, or strictly
	// decoded and formatted here.
	canon, claimed := []byte(req.Payload), req.layer
	if !req.canonical {
		var err error
		if canon, err = signer.CanonicalizeDecoded(req.Payload); err != nil {
			return SignResponse{}, jsonError(err)
		}
		claimed = signer.ClaimedLayer(canon)
	}
	if l := claimed; l != "" {
		return SignResponse{}, fail(http.StatusBadRequest, CodeLayerMismatch,
			"the payload claims the %s layer (its type or vrp_mcp_profile_version member); sign it with POST /v1/keys/{name}/mcp-transport (ADR 0013)", l)
	}
	sig, err := s.signerFor(e, s.cfg.Now())
	if err != nil {
		return SignResponse{}, err
	}
	sg := sig.Signer
	jws, err := s.signJWS(run, sig, canon, req.Typ)
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
	case errors.Is(err, rotation.ErrHistoryNotBacked):
		return fail(http.StatusConflict, CodeKeyHistoryNotBacked, "the key's signing version, as key history holds it, is not backed by the transparency log; it does not sign (the operator is alerted in /readyz and the log)")
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
	e, err := s.entry(c.Param("name"))
	if err != nil {
		return err
	}
	body, err := s.readBody(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	var req transportRequest
	if err := decodeItem(body, &req); err != nil { // as sign decodes
		return err
	}
	out, err := s.transportOne(e, req, nil)
	if err != nil {
		return err
	}
	if err := s.recordIssuedOne(c, out.JWS); err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, out)
}

// transportOne builds and signs one VRP MCP transport assertion with the
// version that signs at this instant. The claimed signing instant
// (served_at, and the attestation's valid_from) must lie inside that
// version's window as this replica knows it (rotation.Signing.Allows):
// keysvc never signs a claim that its own lifecycle-aware verifier would
// reject. Without served_at it is now, truncated to the second.
//
// run is as for signOne.
func (s *Server) transportOne(e *rotation.KeyEntry, req transportRequest, run *backendRun) (TransportResponse, error) {
	now := s.cfg.Now()
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
	sig, err := s.signerFor(e, now)
	if err != nil {
		return TransportResponse{}, err
	}
	sg := sig.Signer
	if !sig.Allows(served) {
		return TransportResponse{}, fail(http.StatusConflict, CodeServedAtNotSignable,
			"served_at %s lies outside the window of key version %s, the one keysvc signs with now (%s); send the current time or omit served_at",
			signer.FormatInstant(served), sg.KID(), windowText(sig))
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
	jws, err := s.signJWS(run, sig, payload, signer.TransportJWSTyp)
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
			ValidFrom: assertion.ServedAt, ValidUntil: signer.FormatInstant(served.Add(validFor)), // ServedAt is FormatInstant(served)
		},
	}, nil
}

// windowText describes a Signing's claim window for error messages.
func windowText(sig rotation.Signing) string {
	from := "-"
	if !sig.NotBefore.IsZero() {
		from = signer.FormatInstant(sig.NotBefore)
	}
	until := "open"
	if !sig.Until.IsZero() {
		until = signer.FormatInstant(sig.Until)
	}
	return "from " + from + ", until " + until
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

// digestSEP2828 answers POST /v1/digests/sep2828: the RFC 8785 bytes and
// digest of a tools/call params document under the SEP-2828 projection its
// projection member names (SEP2828FallbackV0 when absent). The v1
// projection fails closed: a call without a usable authorization binding
// is answered 400 authorization_binding_missing or
// authorization_binding_invalid, never with a digest.
func (s *Server) digestSEP2828(c echo.Context) error {
	var req struct {
		Params     jsontext.Value `json:"params"`
		Projection string         `json:"projection,omitempty"`
	}
	if err := s.decodeBody(c, &req); err != nil {
		return err
	}
	var (
		canon  []byte
		digest string
		err    error
	)
	switch req.Projection {
	case "", SEP2828FallbackV0:
		req.Projection = SEP2828FallbackV0
		canon, digest, err = signer.ProjectSEP2828(req.Params)
	case SEP2828V1:
		canon, digest, err = signer.ProjectSEP2828V1(req.Params)
	default:
		return fail(http.StatusBadRequest, CodeInvalidRequest, "projection must be %q or %q", SEP2828FallbackV0, SEP2828V1)
	}
	if err != nil {
		var se *strictjson.Error
		var ve *signer.SEP2828Error
		switch {
		case errors.As(err, &se):
			return fail(http.StatusBadRequest, se.Code, "params: %s", se.Message)
		case errors.As(err, &ve) && ve.Code == signer.CodeSEP2828BindingMissing:
			return fail(http.StatusBadRequest, CodeAuthorizationBindingMissing, "%s: %s (the v1 projection fails closed)", SEP2828V1, ve.Message)
		case errors.As(err, &ve) && ve.Code == signer.CodeSEP2828BindingInvalid:
			return fail(http.StatusBadRequest, CodeAuthorizationBindingInvalid, "%s: %s (the v1 projection fails closed)", SEP2828V1, ve.Message)
		case errors.As(err, &ve):
			return fail(http.StatusBadRequest, CodeInvalidRequest, "%s: %s", SEP2828V1, ve.Message)
		}
		return fail(http.StatusBadRequest, CodeInvalidRequest, "%s", strings.TrimPrefix(err.Error(), "signer: "))
	}
	return c.JSON(http.StatusOK, map[string]string{"projection": req.Projection, "digest": digest, "canonical": string(canon)})
}
