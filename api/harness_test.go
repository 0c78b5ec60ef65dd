package api_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/software"
	"github.com/keysvc/keysvc/internal/keysvctest"
	"github.com/keysvc/keysvc/internal/pgtest"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// fixedKind is the Kind of the deterministic test backend.
const fixedKind = keysvctest.FixedKind

// fixedBackend is keysvctest's deterministic backend (the RFC 8037
// Appendix A key for every version; every signature recomputable byte for
// byte) with key destruction.
type fixedBackend struct{ keysvctest.FixedBackend }

// DestroyKey implements backends.Destroyer: the fixed key is shared, so
// nothing is destroyed; the call is only recorded by its result.
func (b *fixedBackend) DestroyKey(context.Context, string, backends.Handle, backends.DestroyOptions) (backends.DestroyResult, error) {
	return backends.DestroyResult{Note: "fixed test backend: nothing to destroy"}, nil
}

// brokenKind is a backend whose keys can be created but whose signer fails
// with a configurable error on every Sign call (an HSM that went away).
const brokenKind = "broken"

type brokenBackend struct {
	fixedBackend
	mu  sync.Mutex
	err error
}

func (b *brokenBackend) Kind() string { return brokenKind }

// CreateKey names the version with this backend's own reference scheme: a
// version's signer is loaded from the backend its reference names.
func (b *brokenBackend) CreateKey(ctx context.Context, req backends.CreateRequest) (backends.Handle, error) {
	h, err := b.fixedBackend.CreateKey(ctx, req)
	h.Ref = brokenKind + ":" + req.KID
	return h, err
}

func (b *brokenBackend) setErr(err error) { b.mu.Lock(); b.err = err; b.mu.Unlock() }

func (b *brokenBackend) Signer(context.Context, string, backends.Handle) (crypto.Signer, error) {
	return brokenSigner{b}, nil
}

type brokenSigner struct{ b *brokenBackend }

func (s brokenSigner) Public() crypto.PublicKey { return s.b.Key.Public() }

func (s brokenSigner) Sign(rnd io.Reader, msg []byte, opts crypto.SignerOpts) ([]byte, error) {
	s.b.mu.Lock()
	err := s.b.err
	s.b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return s.b.Key.Sign(rnd, msg, opts)
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("base64url %q: %v", s, err)
	}
	return b
}

func splitJWS(t *testing.T, jws string) [3]string {
	t.Helper()
	var p [3]string
	n := 0
	start := 0
	for i := 0; i <= len(jws); i++ {
		if i == len(jws) || jws[i] == '.' {
			if n == 3 {
				t.Fatalf("JWS %q has more than three segments", jws)
			}
			p[n] = jws[start:i]
			n++
			start = i + 1
		}
	}
	if n != 3 {
		t.Fatalf("JWS %q does not have three segments", jws)
	}
	return p
}

// clock is a strictly increasing store.Now: no two lifecycle events get the
// same instant, so "oldest key" and similar orderings are deterministic.
type clock struct {
	mu     sync.Mutex
	last   time.Time
	offset time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := store.Now().Add(c.offset)
	if !n.After(c.last) {
		n = c.last.Add(time.Microsecond)
	}
	c.last = n
	return n
}

// harness is the real API in-process: a migrated SQLite store in
// t.TempDir(), a real rotation.Manager with the software, fixed and broken
// backends, a real Authenticator, and an httptest.Server.
type harness struct {
	t       *testing.T
	store   store.Store
	mgr     *rotation.Manager
	auth    *api.Authenticator
	handler http.Handler
	srv     *httptest.Server
	priv    ed25519.PrivateKey // the fixed backend's key
	broken  *brokenBackend
	logs    *syncBuffer
	dbPath  string // the SQLite key history
}

type harnessOpts struct {
	MaxBodyBytes int64
	// MaxServedAtSkew: the vectors' served_at lies months in the past.
	MaxServedAtSkew time.Duration
	RateLimit       api.RateLimit
	PublicRateLimit api.RateLimit
	Pprof           bool
	// JWKSMaxAge is the manager's JWKS max-age (0: the default, 5 min).
	JWKSMaxAge time.Duration
	// ClockOffset shifts the Manager's clock (key history instants): a
	// negative offset makes keys exist since before fixed served_at values.
	ClockOffset time.Duration
	Tlog        api.TransparencyLog
	// Postgres keeps key history in a fresh PostgreSQL schema (pgtest)
	// instead of SQLite.
	Postgres bool
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newHarness(t *testing.T, o harnessOpts) *harness {
	t.Helper()
	ctx := context.Background()
	cfg := store.Config{SQLitePath: filepath.Join(t.TempDir(), "keysvc.db")}
	if o.Postgres {
		cfg = store.Config{PostgresURL: pgtest.URL(t)}
	}
	if _, err := store.Migrate(ctx, cfg); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	st, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	kek := make([]byte, software.KEKSize)
	if _, err := rand.Read(kek); err != nil {
		t.Fatal(err)
	}
	sw, err := software.New(kek)
	if err != nil {
		t.Fatal(err)
	}
	priv := keysvctest.RFC8037Key(t)
	broken := &brokenBackend{fixedBackend: fixedBackend{keysvctest.FixedBackend{Key: priv}}}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	clk := &clock{offset: o.ClockOffset}
	mgr := rotation.New(rotation.Config{
		Store:      st,
		Backends:   []backends.Backend{sw, &fixedBackend{keysvctest.FixedBackend{Key: priv}}, broken},
		Now:        clk.Now,
		Logger:     log,
		JWKSMaxAge: o.JWKSMaxAge,
	})
	if err := mgr.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	auth := api.NewAuthenticator(st, log)
	if err := auth.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	h := api.New(api.Config{Manager: mgr, Auth: auth, Store: st, Logger: log, MaxBodyBytes: o.MaxBodyBytes, MaxServedAtSkew: o.MaxServedAtSkew, RateLimit: o.RateLimit, PublicRateLimit: o.PublicRateLimit, Tlog: o.Tlog, Pprof: o.Pprof}).Handler()
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		// Let the Authenticator's best-effort last-used updates finish
		// before the store goes away.
		time.Sleep(20 * time.Millisecond)
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	return &harness{t: t, store: st, mgr: mgr, auth: auth, handler: h, srv: srv, priv: priv, broken: broken, logs: logs, dbPath: cfg.SQLitePath}
}

// createKey creates a key through the Manager (not the API).
func (h *harness) createKey(name, issuer, backend string) {
	h.t.Helper()
	_, _, err := h.mgr.CreateKey(context.Background(), rotation.CreateKeyRequest{Name: name, Issuer: issuer, Backend: backend, ShareIssuer: true},
		rotation.Actor{Name: "test", Reason: "setup"})
	if err != nil {
		h.t.Fatalf("create key %s: %v", name, err)
	}
}

type tokenOpt int

const (
	tokenOK tokenOpt = iota
	tokenExpired
	tokenRevoked
)

// token stores a new API token (via InTx/InsertToken), refreshes the
// Authenticator and returns the secret.
func (h *harness) token(name string, opt tokenOpt, scopes ...string) string {
	h.t.Helper()
	ctx := context.Background()
	secret, rec, err := api.NewToken(name, scopes, time.Hour)
	if err != nil {
		h.t.Fatal(err)
	}
	if opt == tokenExpired {
		past := store.Now().Add(-time.Minute)
		rec.ExpiresAt = &past
	}
	err = h.store.InTx(ctx, func(tx store.Tx) error {
		if err := tx.InsertToken(ctx, rec); err != nil {
			return err
		}
		if opt == tokenRevoked {
			return tx.RevokeToken(ctx, rec.ID, store.Now())
		}
		return nil
	})
	if err != nil {
		h.t.Fatalf("insert token: %v", err)
	}
	if err := h.auth.Refresh(ctx); err != nil {
		h.t.Fatal(err)
	}
	return secret
}

// request is one HTTP request to the harness.
type request struct {
	method string
	path   string
	auth   string // the whole Authorization header value; "" for none
	ctype  string // Content-Type; "" for none
	body   []byte
	header map[string]string
	host   string // the Host header; "" for the server's address
	// chunked sends the body with an unknown length (Transfer-Encoding: chunked).
	chunked bool
}

func bearer(tok string) string { return "Bearer " + tok }

// do sends r over the network to the httptest server.
func (h *harness) do(r request) (*http.Response, []byte) {
	h.t.Helper()
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
		if r.chunked {
			body = io.MultiReader(bytes.NewReader(r.body)) // hides the length
		}
	}
	req, err := http.NewRequest(r.method, h.srv.URL+r.path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	if r.chunked {
		req.ContentLength = -1
	}
	if r.host != "" {
		req.Host = r.host
	}
	if r.auth != "" {
		req.Header.Set("Authorization", r.auth)
	}
	if r.ctype != "" {
		req.Header.Set("Content-Type", r.ctype)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("%s %s: read body: %v", r.method, r.path, err)
	}
	return resp, b
}

// postJSON is a POST with Content-Type application/json.
func (h *harness) postJSON(path, tok string, body string) (*http.Response, []byte) {
	h.t.Helper()
	auth := ""
	if tok != "" {
		auth = bearer(tok)
	}
	return h.do(request{method: http.MethodPost, path: path, auth: auth, ctype: "application/json", body: []byte(body)})
}

func (h *harness) get(path, tok string) (*http.Response, []byte) {
	h.t.Helper()
	auth := ""
	if tok != "" {
		auth = bearer(tok)
	}
	return h.do(request{method: http.MethodGet, path: path, auth: auth})
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// wantError asserts status, Content-Type and the exact error code.
func wantError(t *testing.T, what string, resp *http.Response, body []byte, status int, code string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("%s: status %d, want %d (body %s)", what, resp.StatusCode, status, body)
		return
	}
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Errorf("%s: error body %q is not JSON: %v", what, body, err)
		return
	}
	if e.Error.Code != code {
		t.Errorf("%s: error.code %q, want %q (message %q)", what, e.Error.Code, code, e.Error.Message)
	}
	if e.Error.Message == "" {
		t.Errorf("%s: error.message is empty", what)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" && ct != "application/json; charset=UTF-8" {
		t.Errorf("%s: error Content-Type %q", what, ct)
	}
	if status == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("%s: 401 without WWW-Authenticate", what)
	}
}

func wantStatus(t *testing.T, what string, resp *http.Response, body []byte, status int) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("%s: status %d, want %d (body %s)", what, resp.StatusCode, status, body)
	}
}

func decode(t *testing.T, body []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
}

// snapshot is everything key history holds, to prove a rejected request
// wrote nothing.
type snapshot struct {
	Keys     []store.Key
	Versions map[string][]store.KeyVersion
	Audit    []store.AuditEvent
}

func (h *harness) snapshot() snapshot {
	h.t.Helper()
	ctx := context.Background()
	keys, err := h.store.ListKeys(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	s := snapshot{Keys: keys, Versions: map[string][]store.KeyVersion{}}
	for _, k := range keys {
		if s.Versions[k.Name], err = h.store.ListVersions(ctx, k.Name); err != nil {
			h.t.Fatal(err)
		}
	}
	if s.Audit, err = h.store.ListAudit(ctx, 0, 0); err != nil {
		h.t.Fatal(err)
	}
	return s
}

func (h *harness) assertUnchanged(what string, before snapshot) {
	h.t.Helper()
	after := h.snapshot()
	if !reflect.DeepEqual(before, after) {
		h.t.Errorf("%s: key history changed by a rejected request:\nbefore %d keys, %d audit rows\nafter  %d keys, %d audit rows",
			what, len(before.Keys), len(before.Audit), len(after.Keys), len(after.Audit))
	}
}

// decodeBatch decodes a batch answer, {"results": [...]}, into its items.
func decodeBatch[T any](t *testing.T, body []byte) []api.BatchResult[T] {
	t.Helper()
	var out struct {
		Results []api.BatchResult[T] `json:"results"`
	}
	decode(t, body, &out)
	return out.Results
}
