// Package keysvctest runs a real keysvc in process for tests of the
// packages around it (MCP middleware, MCP endpoint, example node): a
// migrated SQLite key history in t.TempDir(), a real rotation.Manager, the
// real api.Server with the mcpserve endpoint at /mcp, on an httptest
// listener at 127.0.0.1. Its one backend is deterministic: every key
// version it creates is the RFC 8037 Appendix A Ed25519 key, so every JWS
// it makes can be recomputed byte for byte.
package keysvctest

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/internal/testvectors"
	"github.com/keysvc/keysvc/mcpserve"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/signer"
	"github.com/keysvc/keysvc/store"
)

// FixedKind is the backend kind of the deterministic backend.
const FixedKind = "software-fixed"

// Server is a running in-process keysvc.
type Server struct {
	URL     string // http://127.0.0.1:PORT
	Manager *rotation.Manager
	Store   store.Store
	Auth    *api.Authenticator
	Priv    ed25519.PrivateKey // the key every version holds
	HTTP    *httptest.Server
	Logs    *Buffer

	t    testing.TB
	once sync.Once
}

// Options configure Start.
type Options struct {
	// MCP overrides the /mcp endpoint's configuration (Keyring is always
	// the server's Manager). nil: defaults.
	MCP *mcpserve.Config
	// Now is the API's clock (served_at when a request gives none);
	// default time.Now.
	Now func() time.Time
}

// Buffer is a goroutine-safe log sink.
type Buffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// Start runs keysvc until the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	ctx := context.Background()
	cfg := store.Config{SQLitePath: filepath.Join(t.TempDir(), "keysvc.db")}
	if _, err := store.Migrate(ctx, cfg); err != nil {
		t.Fatalf("keysvctest: migrate: %v", err)
	}
	st, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("keysvctest: open store: %v", err)
	}
	priv := RFC8037Key(t)
	logs := &Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	mgr := rotation.New(rotation.Config{Store: st, Backends: []backends.Backend{&FixedBackend{Key: priv}}, Logger: log})
	if err := mgr.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	auth := api.NewAuthenticator(st, log)
	if err := auth.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	mcfg := mcpserve.Config{}
	if o.MCP != nil {
		mcfg = *o.MCP
	}
	mcfg.Keyring = mgr.Keyring
	if mcfg.Logger == nil {
		mcfg.Logger = log
	}
	mcpHandler, err := mcpserve.New(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	h := api.New(api.Config{Manager: mgr, Auth: auth, Store: st, Logger: log, MCP: mcpHandler, Now: o.Now,
		RateLimit: api.RateLimit{}}).Handler()
	srv := httptest.NewServer(h)
	s := &Server{URL: srv.URL, Manager: mgr, Store: st, Auth: auth, Priv: priv, HTTP: srv, Logs: logs, t: t}
	t.Cleanup(func() {
		s.Close()
		time.Sleep(20 * time.Millisecond) // the Authenticator's last-used updates
		if err := st.Close(); err != nil {
			t.Errorf("keysvctest: close store: %v", err)
		}
		if t.Failed() {
			t.Logf("keysvc log:\n%s", logs.String())
		}
	})
	return s
}

// Close stops the listener (keysvc becomes unreachable); safe to call
// twice.
func (s *Server) Close() {
	s.once.Do(func() {
		s.HTTP.CloseClientConnections()
		s.HTTP.Close()
	})
}

// CreateKey creates a key (EdDSA, fixed backend) with its first active
// version and returns that version's kid.
func (s *Server) CreateKey(name, issuer string) string {
	s.t.Helper()
	_, v, err := s.Manager.CreateKey(context.Background(), rotation.CreateKeyRequest{Name: name, Issuer: issuer, Backend: FixedKind},
		rotation.Actor{Name: "keysvctest", Reason: "test setup"})
	if err != nil {
		s.t.Fatalf("keysvctest: create key %s: %v", name, err)
	}
	return v.KID
}

// Token stores a new API token with the given scopes and returns its secret.
func (s *Server) Token(scopes ...string) string {
	s.t.Helper()
	ctx := context.Background()
	secret, rec, err := api.NewToken("keysvctest", scopes, time.Hour)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.Store.InTx(ctx, func(tx store.Tx) error { return tx.InsertToken(ctx, rec) }); err != nil {
		s.t.Fatal(err)
	}
	if err := s.Auth.Refresh(ctx); err != nil {
		s.t.Fatal(err)
	}
	return secret
}

// History returns a key's key-history document as keysvc serves it.
func (s *Server) History(name string) []byte {
	s.t.Helper()
	e, ok := s.Manager.Keyring().Keys[name]
	if !ok {
		s.t.Fatalf("keysvctest: no key %s", name)
	}
	return e.History.Body
}

// JWKS returns a key's JWKS document as keysvc serves it.
func (s *Server) JWKS(name string) []byte {
	s.t.Helper()
	e, ok := s.Manager.Keyring().Keys[name]
	if !ok {
		s.t.Fatalf("keysvctest: no key %s", name)
	}
	return e.JWKS.Body
}

// FixedBackend is a deterministic backends.Backend of kind FixedKind:
// every key pair it "creates" is Key (the RFC 8037 Appendix A key, from
// RFC8037Key), and its signer is that ed25519.PrivateKey. Ed25519 is
// deterministic, so every signature made through it can be recomputed
// byte for byte in a test. EdDSA only.
type FixedBackend struct{ Key ed25519.PrivateKey }

// Kind returns FixedKind.
func (b *FixedBackend) Kind() string { return FixedKind }

// CreateKey returns Key's public key under the reference "software-fixed:<kid>".
func (b *FixedBackend) CreateKey(_ context.Context, req backends.CreateRequest) (backends.Handle, error) {
	if req.Algorithm != signer.AlgEdDSA {
		return backends.Handle{}, fmt.Errorf("%w: %q", backends.ErrUnsupportedAlgorithm, req.Algorithm)
	}
	return backends.Handle{Ref: FixedKind + ":" + req.KID, Public: b.Key.Public()}, nil
}

// Signer returns Key.
func (b *FixedBackend) Signer(context.Context, string, backends.Handle) (crypto.Signer, error) {
	return b.Key, nil
}

// Close does nothing.
func (b *FixedBackend) Close() error { return nil }

// RFC8037Key returns the RFC 8037 A.1 private key from the shared vectors,
// checked against the vector's public key and its compact JWS (the key
// must reproduce the vector's signature).
func RFC8037Key(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	var v struct {
		JWK struct {
			D string `json:"d"`
			X string `json:"x"`
		} `json:"jwk_private"`
		CompactJWS string `json:"compact_jws"`
	}
	if err := json.Unmarshal(testvectors.Read(t, "rfc8037-ed25519-jws.json"), &v); err != nil {
		t.Fatal(err)
	}
	seed, err := base64.RawURLEncoding.DecodeString(v.JWK.D)
	if err != nil || len(seed) != ed25519.SeedSize {
		t.Fatalf("RFC 8037 d: %v", err)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	if got := base64.RawURLEncoding.EncodeToString(priv.Public().(ed25519.PublicKey)); got != v.JWK.X {
		t.Fatalf("RFC 8037 key: x = %s, vector says %s", got, v.JWK.X)
	}
	parts := strings.Split(v.CompactJWS, ".")
	if len(parts) != 3 || base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte(parts[0]+"."+parts[1]))) != parts[2] {
		t.Fatalf("RFC 8037 key does not reproduce the vector signature")
	}
	return priv
}

// RequireReal fails under CI=true, and skips loudly otherwise, when a real
// part a test needs is missing.
func RequireReal(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required under CI=true: %v", what, err)
	}
	t.Skipf("SKIPPING: %s is not available (%v); CI=true makes this a failure", what, err)
}
