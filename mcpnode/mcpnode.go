// Package mcpnode signs every tool call of an MCP server (a VRP node) with
// keysvc: a middleware for the official Go SDK
// (github.com/modelcontextprotocol/go-sdk/mcp) that
//
//   - attaches to each tools/call result, in its _meta under MetaKey, the
//     VRP MCP transport attestation keysvc signed for that call (VRP MCP
//     composition profile 1.0: "sign the assertion, not the transport"),
//     ready to drop into a VRP receipt v1 attestations[] — and, with
//     Config.SEP2828, the SEP-2828 digests of the call;
//   - adds the MCPF session identity ({"id": did:web, "keys": {"jwks_uri"}})
//     to the initialize result's _meta, from keysvc's own key documents;
//   - leaves the tool's own result (content, structuredContent, isError)
//     exactly as the tool produced it: only a _meta member is added;
//   - fails the call closed with a JSON-RPC error (CodeNotSigned) when
//     keysvc cannot sign, or, with Config.OnFailure = MarkUnsigned, returns
//     the result marked {"status": "unsigned", "error": {...}} — never an
//     unmarked unsigned result.
//
// Signing goes through keysvc's signing API (POST
// /v1/keys/NAME/mcp-transport, and its :batch form when calls queue up)
// with package client, over a pool of kept-alive connections that a
// background ping keeps warm. Usage:
//
//	srv := mcp.NewServer(&mcp.Implementation{Name: "villa", Version: "1.0"}, nil)
//	mcp.AddTool(srv, &mcp.Tool{Name: "get_verified_stay_offer"}, getOffer)
//	s, err := mcpnode.New(ctx, mcpnode.Config{URL: "http://127.0.0.1:8080", Token: token, Key: "villa"})
//	if err != nil { ... }
//	defer s.Close()
//	s.Install(srv)
package mcpnode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/internal/sameorigin"
	"github.com/keysvc/keysvc/internal/strictjson"
	"github.com/keysvc/keysvc/signer"
)

// MetaKey is the tools/call result _meta member this package writes: a
// prefixed name in the MCP _meta key format (MCP 2025-11-25
// basic/index §_meta: reverse-DNS labels, a slash, a name), in the
// project's own namespace (github.com/keysvc → io.github.keysvc).
const MetaKey = "io.github.keysvc/vrp-transport"

// IdentityKey is the initialize result _meta member of the MCPF session
// identity (MCPF Layer 1: {"id", "service"?, "keys": {"jwks_uri"}}).
const IdentityKey = "identity"

// Status values of Transport.Status.
const (
	StatusSigned   = "signed"   // Attestation is set
	StatusUnsigned = "unsigned" // Error says why; the result carries no signature
)

// JSON-RPC error codes of a failed-closed tool call (implementation-defined
// range, JSON-RPC 2.0 §5.1).
const (
	// CodeNotSigned: keysvc did not sign the call (unreachable, refused,
	// or answered an assertion that does not match the call). The tool's
	// result is withheld.
	CodeNotSigned = -32010
	// CodeArgumentsRejected is JSON-RPC invalid params (-32602): the call's
	// arguments cannot be hashed under the VRP MCP profile (not strict
	// I-JSON, or two keys collapse to one snake_case name), so the tool is
	// not run at all.
	CodeArgumentsRejected = jsonrpc.CodeInvalidParams
)

// Stable error names, in data.error of the JSON-RPC errors and in
// Transport.Error.Code.
const (
	ErrSigningFailed     = "transport_signing_failed" // keysvc answered an error or could not be reached
	ErrKeysvcUnreachable = "keysvc_unreachable"       // (keysvc_code) no HTTP answer within SignTimeout
	ErrAssertionMismatch = "assertion_mismatch"       // keysvc's assertion does not describe this call
	ErrArgumentsRejected = "arguments_rejected"       // the profile cannot hash these arguments
	ErrToolError         = "tool_error"               // (unsigned) the tool answered isError; not signed unless SignErrors
)

// FailureMode says what a tool call becomes when keysvc cannot sign it.
type FailureMode int

const (
	// FailClosed answers the call with a JSON-RPC error (CodeNotSigned);
	// the tool's result is not returned. The default.
	FailClosed FailureMode = iota
	// MarkUnsigned returns the tool's result with
	// _meta[MetaKey] = {"status": "unsigned", "error": {...}}.
	MarkUnsigned
)

// Config configures a Signer.
type Config struct {
	// URL is keysvc's signing API base URL, e.g. "http://127.0.0.1:8080".
	URL string
	// Token is a keysvc API token with scope sign:KEY:transport (or
	// sign:KEY, sign:*). Never logged.
	Token string
	// Key is the keysvc key that signs (its issuer is the node's domain).
	Key string
	// HTTPClient overrides the pooled client (default: keep-alive
	// connections, SignTimeout per request).
	HTTPClient *http.Client

	// Tools lists the tools whose calls are signed; nil signs every tool.
	Tools []string
	// OnFailure is FailClosed (default) or MarkUnsigned.
	OnFailure FailureMode
	// OfferRef, when set, returns the offer_ref that binds a call's
	// transport assertion to the offer attestation the tool returned
	// (also the attestation's ref); "" for none.
	OfferRef func(ctx context.Context, req *mcp.CallToolRequest, res *mcp.CallToolResult) string
	// SessionID puts the MCP session id (when there is one) in the
	// assertion's session_id.
	SessionID bool
	// ValidFor is the attestation's validity (valid_until - valid_from);
	// 0 leaves it to keysvc (1h by default).
	ValidFor time.Duration
	// SEP2828 adds the SEP-2828 digests of each call to the _meta member:
	// the fallback projection's, and the v1 authorization-binding
	// projection's when the call carries _meta.authorization_binding.
	SEP2828 bool
	// SignErrors also signs results with isError set (default: such
	// results are marked unsigned with ErrToolError, never failed).
	SignErrors bool

	// DID, JWKSURI and ServiceURL override the identity advertised in the
	// initialize result: default id "did:web:<issuer>" and jwks_uri
	// "https://<issuer>/.well-known/jwks.json", the issuer taken from the
	// key's key-history document; ServiceURL (the node's public MCP URL)
	// is advertised as service.mcp when set.
	DID, JWKSURI, ServiceURL string

	// SignTimeout bounds one signature, queueing included (default 5s).
	SignTimeout time.Duration
	// Workers is the number of concurrent requests to keysvc (default 4);
	// MaxBatch bounds the items of one batch request (default 100,
	// keysvc's default limit).
	Workers, MaxBatch int
	// KeepWarm is how often idle connections are pinged (GET /healthz)
	// so the next call finds them open (default 45s, below keysvc's 120s
	// idle timeout; negative disables).
	KeepWarm time.Duration
	Logger   *slog.Logger
}

// Transport is the _meta[MetaKey] value of a tools/call result.
type Transport struct {
	Status string `json:"status"`
	// Attestation is the VRP receipt v1 attestation keysvc signed
	// (layer "transport"), when Status is "signed".
	Attestation *client.Attestation `json:"attestation,omitempty"`
	// KID is the signing key version.
	KID string `json:"kid,omitempty"`
	// ArgumentsSHA256 is the profile digest of the call's arguments, as
	// signed (camelCase keys normalized to snake_case).
	ArgumentsSHA256 string `json:"arguments_sha256,omitempty"`
	// SEP2828Digest is the SEP-2828 fallback_projection_v0 digest
	// ("sha256:<hex>"); SEP2828V1Digest the
	// tools_call_params_plus_meta_authorization_binding_v1 digest, when
	// the call has an authorization binding (Config.SEP2828).
	SEP2828Digest   string `json:"sep2828_digest,omitempty"`
	SEP2828V1Digest string `json:"sep2828_v1_digest,omitempty"`
	// Error says why the result is unsigned.
	Error *TransportError `json:"error,omitempty"`
}

// TransportError is why a call was not signed.
type TransportError struct {
	Code string `json:"code"` // an Err* name, or keysvc's own error code
	// KeysvcStatus is keysvc's HTTP status, when it answered.
	KeysvcStatus int    `json:"keysvc_status,omitempty"`
	Message      string `json:"message"`
}

// Identity is the MCPF session identity of the initialize result.
type Identity struct {
	ID      string           `json:"id"`
	Service *IdentityService `json:"service,omitempty"`
	Keys    IdentityKeys     `json:"keys"`
}

// IdentityService names the node's MCP endpoint.
type IdentityService struct {
	MCP string `json:"mcp"`
}

// IdentityKeys says where the node's keys are published.
type IdentityKeys struct {
	JWKSURI string `json:"jwks_uri"`
}

// Stats counts what a Signer did.
type Stats struct {
	Signed, Unsigned, Refused int64 // calls: signed, returned unsigned, failed closed
	Requests                  int64 // HTTP requests to keysvc's signing API
	Batches, BatchedItems     int64 // of them, :batch requests and their items
}

// Signer is the middleware. It is safe for concurrent use.
type Signer struct {
	cfg      Config
	log      *slog.Logger
	b        *batcher
	c        *client.Client
	identity Identity
	tools    map[string]bool
	stop     chan struct{}
	done     chan struct{}
	closing  sync.Once

	nSigned, nUnsigned, nRefused atomic.Int64
	sourceWarned                 atomic.Bool
}

// New checks that keysvc serves cfg.Key (reading its public key-history
// document, GET /v1/keys/KEY/history.json, which also names the issuer of
// the identity), opens the connection pool and starts the keep-warm ping.
// Errors: a missing URL, Token or Key; keysvc unreachable; no such key.
func New(ctx context.Context, cfg Config) (*Signer, error) {
	if cfg.URL == "" || cfg.Token == "" || cfg.Key == "" {
		return nil, errors.New("mcpnode: Config.URL, Token and Key are required")
	}
	if cfg.SignTimeout <= 0 {
		cfg.SignTimeout = 5 * time.Second
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 100
	}
	if cfg.KeepWarm == 0 {
		cfg.KeepWarm = 45 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := client.New(cfg.URL, cfg.Token)
	c.HTTP = cfg.HTTPClient
	if c.HTTP == nil {
		c.HTTP = pooledClient(cfg.Workers, cfg.SignTimeout)
	}
	raw, err := c.History(ctx, cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("mcpnode: keysvc key %q: %w", cfg.Key, err)
	}
	var h struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal(raw, &h); err != nil || h.Issuer == "" {
		return nil, fmt.Errorf("mcpnode: keysvc key %q: key history without an issuer", cfg.Key)
	}
	id := Identity{ID: cfg.DID, Keys: IdentityKeys{JWKSURI: cfg.JWKSURI}}
	if id.ID == "" {
		id.ID = "did:web:" + strings.ReplaceAll(h.Issuer, ":", "%3A") // did:web §3.1
	}
	if id.Keys.JWKSURI == "" {
		id.Keys.JWKSURI = "https://" + h.Issuer + "/.well-known/jwks.json"
	}
	if cfg.ServiceURL != "" {
		id.Service = &IdentityService{MCP: cfg.ServiceURL}
	}
	s := &Signer{cfg: cfg, log: log, c: c, identity: id, stop: make(chan struct{}), done: make(chan struct{}),
		b: newBatcher(c, cfg.Key, cfg.Workers, cfg.MaxBatch, cfg.SignTimeout)}
	if cfg.Tools != nil {
		s.tools = map[string]bool{}
		for _, t := range cfg.Tools {
			s.tools[t] = true
		}
	}
	go s.keepWarm()
	return s, nil
}

// pooledClient keeps up to 2×workers idle connections to keysvc, each for
// up to 110 s (keysvc closes idle connections after 120 s). Like
// client.New's, it follows a redirect only within keysvc's origin
// (internal/sameorigin): another server must not hand the node a
// signature in keysvc's name.
func pooledClient(workers int, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, CheckRedirect: sameorigin.CheckRedirect, Transport: &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        2 * workers,
		MaxIdleConnsPerHost: 2 * workers,
		IdleConnTimeout:     110 * time.Second,
		TLSHandshakeTimeout: timeout,
		ForceAttemptHTTP2:   true,
	}}
}

// keepWarm pings keysvc from every worker's connection when no signature
// went out for a KeepWarm interval.
func (s *Signer) keepWarm() {
	defer close(s.done)
	if s.cfg.KeepWarm < 0 {
		<-s.stop
		return
	}
	t := time.NewTicker(s.cfg.KeepWarm)
	defer t.Stop()
	s.ping() // open the pool now, not on the first call
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if time.Since(time.Unix(0, s.b.lastUse.Load())) >= s.cfg.KeepWarm {
				s.ping()
			}
		}
	}
}

func (s *Signer) ping() {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.SignTimeout)
	defer cancel()
	done := make(chan struct{}, s.cfg.Workers)
	for range s.cfg.Workers {
		go func() {
			defer func() { done <- struct{}{} }()
			if err := s.c.Do(ctx, http.MethodGet, "/healthz", nil, nil); err != nil {
				s.log.Warn("keysvc keep-warm ping failed", "err", err)
			}
		}()
	}
	for range s.cfg.Workers {
		<-done
	}
	s.b.lastUse.Store(time.Now().UnixNano())
}

// Close stops the workers and the keep-warm ping. Calls still waiting for
// a signature fail (closed or unsigned, per OnFailure).
func (s *Signer) Close() error {
	s.closing.Do(func() {
		close(s.stop)
		<-s.done
		s.b.close()
	})
	return nil
}

// Identity returns the MCPF identity advertised in initialize results.
func (s *Signer) Identity() Identity { return s.identity }

// Stats returns the Signer's counters.
func (s *Signer) Stats() Stats {
	return Stats{Signed: s.nSigned.Load(), Unsigned: s.nUnsigned.Load(), Refused: s.nRefused.Load(),
		Requests: s.b.requests.Load(), Batches: s.b.batches.Load(), BatchedItems: s.b.batchedItems.Load()}
}

// Install adds the middleware to srv (Server.AddReceivingMiddleware).
func (s *Signer) Install(srv *mcp.Server) { srv.AddReceivingMiddleware(s.Middleware()) }

// Middleware returns the receiving middleware: identity on initialize (and
// on the 2026-07-28 server/discover), attestation on tools/call.
func (s *Signer) Middleware() mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "initialize", "server/discover":
				res, err := next(ctx, method, req)
				if err == nil && res != nil {
					res.SetMeta(withMeta(res.GetMeta(), IdentityKey, s.identity))
				}
				return res, err
			case "tools/call":
				if creq, ok := req.(*mcp.CallToolRequest); ok && creq.Params != nil && s.signs(creq.Params.Name) {
					return s.toolCall(ctx, next, method, creq)
				}
			}
			return next(ctx, method, req)
		}
	}
}

func (s *Signer) signs(tool string) bool { return s.tools == nil || s.tools[tool] }

// withMeta returns a copy of meta with key set (the tool's own map is
// never modified).
func withMeta(meta map[string]any, key string, v any) map[string]any {
	out := make(map[string]any, len(meta)+1)
	maps.Copy(out, meta)
	out[key] = v
	return out
}

func (s *Signer) toolCall(ctx context.Context, next mcp.MethodHandler, method string, req *mcp.CallToolRequest) (mcp.Result, error) {
	p := req.Params
	args := []byte(p.Arguments)
	if len(bytes.TrimSpace(args)) == 0 || string(bytes.TrimSpace(args)) == "null" {
		args = []byte("{}")
	}
	// Validated before the tool runs: arguments the profile cannot hash
	// would be refused by keysvc after the tool's work was done.
	digest, _, argErr := signer.ArgumentsSHA256(args)
	if argErr != nil && s.cfg.OnFailure == FailClosed {
		s.nRefused.Add(1)
		code, msg := argumentsError(argErr)
		return nil, rpcError(CodeArgumentsRejected, ErrArgumentsRejected, "tool call refused: its arguments cannot be signed: "+msg,
			map[string]any{"code": code})
	}
	res, err := next(ctx, method, req)
	if err != nil || res == nil {
		return res, err
	}
	tres, ok := res.(*mcp.CallToolResult)
	if !ok || tres.NeedsInput() {
		return res, nil
	}
	t := Transport{}
	if s.cfg.SEP2828 {
		t.SEP2828Digest, t.SEP2828V1Digest = sep2828Digests(p, args)
	}
	switch {
	case argErr != nil:
		code, msg := argumentsError(argErr)
		return s.unsigned(tres, t, &TransportError{Code: code, Message: msg})
	case tres.IsError && !s.cfg.SignErrors:
		return s.unsigned(tres, t, &TransportError{Code: ErrToolError, Message: "the tool reported an error; its result is not signed"})
	}
	call := client.TransportCall{Tool: p.Name, Arguments: args}
	if s.cfg.OfferRef != nil {
		call.OfferRef = s.cfg.OfferRef(ctx, req, tres)
	}
	if s.cfg.SessionID && req.Session != nil {
		call.SessionID = req.Session.ID()
	}
	if s.cfg.ValidFor > 0 {
		call.ValidFor = s.cfg.ValidFor.String()
	}
	sctx, cancel := context.WithTimeout(ctx, s.cfg.SignTimeout)
	signed, err := s.b.sign(sctx, call)
	cancel()
	if err == nil {
		err = matches(signed, call, digest)
	}
	if err != nil {
		te := s.transportError(p.Name, err)
		if s.cfg.OnFailure == MarkUnsigned {
			return s.unsigned(tres, t, te)
		}
		s.nRefused.Add(1)
		data := map[string]any{"keysvc_code": te.Code}
		if te.KeysvcStatus != 0 {
			data["keysvc_status"] = te.KeysvcStatus
		}
		return nil, rpcError(CodeNotSigned, ErrSigningFailed, "tool call not signed: "+te.Message, data)
	}
	s.nSigned.Add(1)
	if src := signed.Attestation.Source; src != s.identity.Keys.JWKSURI && s.sourceWarned.CompareAndSwap(false, true) {
		s.log.Warn("the key's attestations name a JWKS other than the jwks_uri advertised in initialize; set Config.JWKSURI to it",
			"attestation_source", src, "jwks_uri", s.identity.Keys.JWKSURI)
	}
	t.Status, t.Attestation, t.KID, t.ArgumentsSHA256 = StatusSigned, &signed.Attestation, signed.KID, digest
	return withTransport(tres, t), nil
}

// matches checks that keysvc's signed assertion describes this call: the
// tool, the arguments digest computed here, the offer_ref asked for.
func matches(res client.TransportResult, call client.TransportCall, digest string) error {
	a := res.Assertion
	if a["tool"] != call.Tool || a["arguments_sha256"] != digest || res.Attestation.Signature == "" || res.Attestation.Signature != res.JWS ||
		(call.OfferRef != "" && a["offer_ref"] != call.OfferRef) {
		return errMismatch
	}
	return nil
}

var errMismatch = errors.New("keysvc's assertion does not describe this call")

func (s *Signer) unsigned(res *mcp.CallToolResult, t Transport, e *TransportError) (mcp.Result, error) {
	s.nUnsigned.Add(1)
	t.Status, t.Error = StatusUnsigned, e
	return withTransport(res, t), nil
}

// withTransport returns a copy of res whose _meta also holds t; content,
// structuredContent and isError are the tool's, untouched.
func withTransport(res *mcp.CallToolResult, t Transport) *mcp.CallToolResult {
	out := *res
	out.Meta = withMeta(res.Meta, MetaKey, t)
	return &out
}

// transportError describes a failed signature without keysvc's address or
// any credential (those go to the log only).
func (s *Signer) transportError(tool string, err error) *TransportError {
	var ce *client.Error
	var ie *client.ItemError
	switch {
	case errors.As(err, &ce):
		s.log.Warn("keysvc refused to sign a tool call", "tool", tool, "status", ce.Status, "code", ce.Code, "message", ce.Message)
		return &TransportError{Code: ce.Code, KeysvcStatus: ce.Status, Message: fmt.Sprintf("keysvc: %s (HTTP %d)", ce.Code, ce.Status)}
	case errors.As(err, &ie):
		s.log.Warn("keysvc refused to sign a tool call", "tool", tool, "code", ie.Code, "message", ie.Message)
		return &TransportError{Code: ie.Code, KeysvcStatus: http.StatusBadRequest, Message: fmt.Sprintf("keysvc: %s", ie.Code)}
	case errors.Is(err, errMismatch):
		s.log.Error("keysvc signed an assertion that does not match the tool call", "tool", tool)
		return &TransportError{Code: ErrAssertionMismatch, Message: err.Error()}
	}
	s.log.Warn("keysvc unreachable", "tool", tool, "err", err)
	return &TransportError{Code: ErrKeysvcUnreachable, Message: "keysvc could not be reached"}
}

// argumentsError names a profile refusal of the arguments.
func argumentsError(err error) (code, msg string) {
	var se *strictjson.Error
	switch {
	case errors.Is(err, signer.ErrArgumentKeyCollision):
		return "argument_key_collision", strings.TrimPrefix(err.Error(), "signer: ")
	case errors.Is(err, signer.ErrArgumentsNotObject):
		return "invalid_arguments", "arguments must be a JSON object"
	case errors.As(err, &se):
		return se.Code, se.Message
	}
	return "invalid_arguments", strings.TrimPrefix(err.Error(), "signer: ")
}

// sep2828Digests computes the SEP-2828 digests of a call: the fallback
// projection's, and the v1 projection's when it has a binding ("" when a
// projection refuses the call).
func sep2828Digests(p *mcp.CallToolParamsRaw, args []byte) (fallback, v1 string) {
	params := map[string]any{"name": p.Name, "arguments": json.RawMessage(args)}
	if ab, ok := p.Meta["authorization_binding"]; ok {
		params["_meta"] = map[string]any{"authorization_binding": ab}
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return "", ""
	}
	if _, d, err := signer.ProjectSEP2828(raw); err == nil {
		fallback = d
	}
	if _, d, err := signer.ProjectSEP2828V1(raw); err == nil {
		v1 = d
	}
	return fallback, v1
}

// rpcError is a JSON-RPC error with data {"error": name, ...}.
func rpcError(code int64, name, msg string, extra map[string]any) error {
	data := map[string]any{"error": name}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		data[k] = extra[k]
	}
	b, _ := json.Marshal(data)
	return &jsonrpc.Error{Code: code, Message: msg, Data: b}
}
