package rotation_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/software"
	"github.com/keysvc/keysvc/internal/pgtest"
	"github.com/keysvc/keysvc/jwksserve"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// --- fixtures -------------------------------------------------------------

// clock is an injected Config.Now: it returns t, then advances it by step.
type clock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.t
	c.t = c.t.Add(c.step)
	return t
}

func (c *clock) SetStep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step = d
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// testBackend wraps the software backend, counting calls and injecting
// failures into CreateKey.
type testBackend struct {
	*software.Backend
	creates    atomic.Int64
	signers    atomic.Int64
	failCreate atomic.Bool
	failSigner atomic.Value // string: the kid whose Signer fails with backends.ErrUnavailable
	// createDelay (nanoseconds) widens race windows: CreateKey sleeps this long.
	createDelay atomic.Int64
	// loads counts Signer calls per kid (kid -> *atomic.Int64).
	loads sync.Map
	// failDestroy makes DestroyKey fail with backends.ErrUnavailable.
	failDestroy atomic.Bool
	destroys    atomic.Int64
}

// loadsOf returns how often Signer was called for kid.
func (b *testBackend) loadsOf(kid string) int64 {
	if n, ok := b.loads.Load(kid); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

func (b *testBackend) DestroyKey(ctx context.Context, kid string, h backends.Handle, opt backends.DestroyOptions) (backends.DestroyResult, error) {
	b.destroys.Add(1)
	if b.failDestroy.Load() {
		return backends.DestroyResult{}, fmt.Errorf("%w: test backend: %w", backends.ErrUnavailable, errInjected)
	}
	return b.Backend.DestroyKey(ctx, kid, h, opt)
}

var errInjected = errors.New("injected backend failure")

func (b *testBackend) CreateKey(ctx context.Context, req backends.CreateRequest) (backends.Handle, error) {
	b.creates.Add(1)
	if d := b.createDelay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	if b.failCreate.Load() {
		return backends.Handle{}, fmt.Errorf("test backend: %w", errInjected)
	}
	return b.Backend.CreateKey(ctx, req)
}

func (b *testBackend) Signer(ctx context.Context, kid string, h backends.Handle) (crypto.Signer, error) {
	b.signers.Add(1)
	n, _ := b.loads.LoadOrStore(kid, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	if k, _ := b.failSigner.Load().(string); k == kid {
		return nil, fmt.Errorf("%w: token unreachable", backends.ErrUnavailable)
	}
	return b.Backend.Signer(ctx, kid, h)
}

var testKEK = []byte("0123456789abcdef0123456789abcdef")

func newTestBackend(t *testing.T) *testBackend {
	t.Helper()
	sb, err := software.New(testKEK)
	if err != nil {
		t.Fatal(err)
	}
	return &testBackend{Backend: sb}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openStore migrates and opens the store cfg selects, closed at cleanup.
func openStore(t *testing.T, cfg store.Config) store.Store {
	t.Helper()
	ctx := context.Background()
	if _, err := store.Migrate(ctx, cfg); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	s, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// forEachStoreCfg runs fn against a fresh SQLite file and a fresh
// PostgreSQL schema; cfg opens the same database again (a replica).
func forEachStoreCfg(t *testing.T, fn func(t *testing.T, cfg store.Config, s store.Store)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		cfg := store.Config{SQLitePath: filepath.Join(t.TempDir(), "k.db")}
		fn(t, cfg, openStore(t, cfg))
	})
	t.Run("postgres", func(t *testing.T) {
		cfg := store.Config{PostgresURL: pgtest.URL(t)}
		fn(t, cfg, openStore(t, cfg))
	})
}

// forEachStore runs fn against SQLite and PostgreSQL.
func forEachStore(t *testing.T, fn func(t *testing.T, s store.Store)) {
	t.Helper()
	forEachStoreCfg(t, func(t *testing.T, _ store.Config, s store.Store) { fn(t, s) })
}

type env struct {
	s   store.Store
	clk *clock
	b   *testBackend
	m   *rotation.Manager
}

func newEnv(t *testing.T, s store.Store, now time.Time) *env {
	t.Helper()
	e := &env{s: s, clk: newClock(now), b: newTestBackend(t)}
	e.m = rotation.New(rotation.Config{Store: s, Backends: []backends.Backend{e.b}, Now: e.clk.Now, Logger: quietLogger()})
	if err := e.m.Reload(context.Background()); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	return e
}

var (
	ctx   = context.Background()
	alice = rotation.Actor{Name: "alice@example.com", Reason: "initial key"}
	bob   = rotation.Actor{Name: "bob@example.com", Reason: "scheduled rotation"}
	// t0 is 2026-05-18T10:00:00.123456Z (a µs fraction, as stored).
	t0 = time.Date(2026, 5, 18, 10, 0, 0, 123456000, time.UTC)
)

const issuer = "villaakerlyckan.se"

func kidOn(day string, n int) string { return fmt.Sprintf("%s-%s-%02d", issuer, day, n) }

func (e *env) create(t *testing.T, name string) (store.Key, store.KeyVersion) {
	t.Helper()
	k, v, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: name, Issuer: issuer, ShareIssuer: true}, alice)
	if err != nil {
		t.Fatalf("CreateKey %s: %v", name, err)
	}
	return k, v
}

func (e *env) rotate(t *testing.T, name string) (store.KeyVersion, store.KeyVersion) {
	t.Helper()
	n, o, err := e.m.Rotate(ctx, name, bob)
	if err != nil {
		t.Fatalf("Rotate %s: %v", name, err)
	}
	return n, o
}

func versions(t *testing.T, s store.Store, name string) []store.KeyVersion {
	t.Helper()
	vs, err := s.ListVersions(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func auditRows(t *testing.T, s store.Store) []store.AuditEvent {
	t.Helper()
	rows, err := s.ListAudit(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func checkChain(t *testing.T, s store.Store) []store.AuditEvent {
	t.Helper()
	rows := auditRows(t, s)
	broken, err := store.VerifyAuditChain(rows)
	if err != nil || broken != 0 {
		t.Fatalf("VerifyAuditChain = %d, %v; want 0, nil", broken, err)
	}
	return rows
}

func eqTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}

func fmtT(p *time.Time) string {
	if p == nil {
		return "<nil>"
	}
	return p.UTC().Format(time.RFC3339Nano)
}

// sameVersion compares two versions field by field (instants with Equal).
func sameVersion(t *testing.T, what string, got, want store.KeyVersion) {
	t.Helper()
	if got.KID != want.KID || got.KeyName != want.KeyName || got.Algorithm != want.Algorithm ||
		got.BackendRef != want.BackendRef || string(got.SealedPrivateKey) != string(want.SealedPrivateKey) ||
		string(got.PublicJWK) != string(want.PublicJWK) || got.State != want.State ||
		!got.CreatedAt.Equal(want.CreatedAt) || !eqTime(got.PublishedAt, want.PublishedAt) ||
		!eqTime(got.ActivatesAt, want.ActivatesAt) || !eqTime(got.ActivatedAt, want.ActivatedAt) ||
		!eqTime(got.RetiredAt, want.RetiredAt) || !eqTime(got.RevokedAt, want.RevokedAt) ||
		!eqTime(got.CompromisedAt, want.CompromisedAt) || got.RevocationReason != want.RevocationReason {
		t.Errorf("%s:\n got %s %s activated %s retired %s\nwant %s %s activated %s retired %s", what,
			got.KID, got.State, fmtT(got.ActivatedAt), fmtT(got.RetiredAt),
			want.KID, want.State, fmtT(want.ActivatedAt), fmtT(want.RetiredAt))
	}
}

// verifyJWS checks a compact JWS: header alg/kid and the signature against
// the public JWK recorded in key history.
func verifyJWS(t *testing.T, compact string, publicJWK []byte, wantKID, wantAlg string, payload []byte) {
	t.Helper()
	parts := strings.Split(compact, ".")
	if len(parts) != 3 {
		t.Fatalf("not a compact JWS: %q", compact)
	}
	var hdr struct{ Alg, Kid string }
	raw, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil || json.Unmarshal(raw, &hdr) != nil {
		t.Fatalf("bad protected header %q", parts[0])
	}
	if hdr.Alg != wantAlg || hdr.Kid != wantKID {
		t.Fatalf("header alg=%q kid=%q, want alg=%q kid=%q", hdr.Alg, hdr.Kid, wantAlg, wantKID)
	}
	if p, err := base64.RawURLEncoding.DecodeString(parts[1]); err != nil || string(p) != string(payload) {
		t.Fatalf("payload %q, want %q", p, payload)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		t.Fatal(err)
	}
	pub, err := jwksserve.ParsePublicJWK(publicJWK)
	if err != nil {
		t.Fatalf("ParsePublicJWK: %v", err)
	}
	input := []byte(parts[0] + "." + parts[1])
	switch k := pub.(type) {
	case ed25519.PublicKey:
		if !ed25519.Verify(k, input, sig) {
			t.Fatalf("Ed25519 signature of %s does not verify with its public JWK", wantKID)
		}
	case *ecdsa.PublicKey:
		d := sha256.Sum256(input)
		if len(sig) != 64 || !ecdsa.Verify(k, d[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
			t.Fatalf("ES256 signature of %s does not verify with its public JWK", wantKID)
		}
	default:
		t.Fatalf("unexpected public key %T", pub)
	}
}

// checkRing asserts the Keyring entry of name: versions equal to key
// history, the active signer, and the JWKS built from history.
func checkRing(t *testing.T, m *rotation.Manager, s store.Store, name, activeKID string) *rotation.KeyEntry {
	t.Helper()
	e, ok := m.Keyring().Keys[name]
	if !ok {
		t.Fatalf("Keyring has no key %q", name)
	}
	vs := versions(t, s, name)
	if len(e.Versions) != len(vs) {
		t.Fatalf("Keyring has %d versions of %s, store has %d", len(e.Versions), name, len(vs))
	}
	for i := range vs {
		sameVersion(t, "Keyring version "+vs[i].KID, e.Versions[i], vs[i])
	}
	if e.Active == nil {
		t.Fatalf("Keyring %s has no active signer, want %s", name, activeKID)
	}
	if e.Active.KID() != activeKID {
		t.Fatalf("Keyring %s active kid = %q, want %q", name, e.Active.KID(), activeKID)
	}
	var active store.KeyVersion
	for _, v := range vs {
		if v.KID == activeKID {
			active = v
		}
	}
	if active.State != store.StateActive {
		t.Fatalf("store: %s is %q, want active", activeKID, active.State)
	}
	payload := []byte(`{"offer":"villa","n":1}`)
	jws, err := e.Active.Sign(payload, "JWT")
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	verifyJWS(t, jws, active.PublicJWK, activeKID, e.Key.Algorithm, payload)
	doc, err := jwksserve.BuildJWKS(vs)
	if err != nil {
		t.Fatal(err)
	}
	if string(e.JWKS.Body) != string(doc.Body) || e.JWKS.ETag != doc.ETag {
		t.Fatalf("Keyring JWKS differs from BuildJWKS(history):\n%s\n---\n%s", e.JWKS.Body, doc.Body)
	}
	return e
}

// --- tests ------------------------------------------------------------------

func TestCreateKey(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0)
		k, v := e.create(t, "villa")

		wantKey := store.Key{Name: "villa", Issuer: issuer, Algorithm: "EdDSA", Backend: "software",
			JWKSURL: "https://villaakerlyckan.se/.well-known/jwks.json", CreatedAt: t0, CreatedBy: alice.Name}
		if !reflect.DeepEqual(k, wantKey) {
			t.Errorf("CreateKey key = %+v, want %+v", k, wantKey)
		}
		stored, err := s.GetKey(ctx, "villa")
		if err != nil {
			t.Fatal(err)
		}
		if stored.Name != wantKey.Name || stored.Issuer != wantKey.Issuer || stored.Algorithm != wantKey.Algorithm ||
			stored.Backend != wantKey.Backend || stored.JWKSURL != wantKey.JWKSURL || !stored.CreatedAt.Equal(t0) ||
			stored.CreatedBy != alice.Name {
			t.Errorf("stored key = %+v, want %+v", stored, wantKey)
		}

		wantKID := "villaakerlyckan.se-2026-05-18-01"
		if v.KID != wantKID {
			t.Fatalf("first kid = %q, want %q", v.KID, wantKID)
		}
		if v.State != store.StateActive || v.KeyName != "villa" || v.Algorithm != "EdDSA" {
			t.Errorf("first version = %s %s %s, want active villa EdDSA", v.State, v.KeyName, v.Algorithm)
		}
		if !v.CreatedAt.Equal(t0) || !eqTime(v.ActivatedAt, &t0) || !eqTime(v.PublishedAt, &t0) {
			t.Errorf("created %s published %s activated %s, want all %s", v.CreatedAt, fmtT(v.PublishedAt), fmtT(v.ActivatedAt), t0)
		}
		if v.RetiredAt != nil || v.ActivatesAt != nil || v.RevokedAt != nil || v.CompromisedAt != nil {
			t.Errorf("first version has unexpected instants: %+v", v)
		}
		wantRef := "software:" + wantKID + "?alg=EdDSA&kek=" + e.b.KEKID()
		if v.BackendRef != wantRef {
			t.Errorf("BackendRef = %q, want %q", v.BackendRef, wantRef)
		}
		if len(v.SealedPrivateKey) != 1+12+32+16 {
			t.Errorf("sealed private key is %d bytes", len(v.SealedPrivateKey))
		}
		var jwk map[string]any
		if err := json.Unmarshal(v.PublicJWK, &jwk); err != nil {
			t.Fatal(err)
		}
		if jwk["kid"] != wantKID || jwk["kty"] != "OKP" || jwk["crv"] != "Ed25519" || jwk["alg"] != "EdDSA" || jwk["d"] != nil {
			t.Errorf("public JWK = %s", v.PublicJWK)
		}
		sv, err := s.GetVersion(ctx, wantKID)
		if err != nil {
			t.Fatal(err)
		}
		sameVersion(t, "returned vs stored version", v, sv)

		entry := checkRing(t, e.m, s, "villa", wantKID)
		if len(entry.Versions) != 1 {
			t.Errorf("Keyring has %d versions, want 1", len(entry.Versions))
		}
		if got := e.m.Keyring().Default; got != "villa" {
			t.Errorf("Keyring.Default = %q, want villa", got)
		}
		if got := e.b.creates.Load(); got != 1 {
			t.Errorf("backend CreateKey called %d times, want 1", got)
		}
	})
}

func TestCreateKeyOptions(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0)
		k, v, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "vaara", Issuer: "receipts.example.org",
			Algorithm: "ES256", Backend: "software", JWKSURL: "https://keys.example.org/vaara/jwks.json"}, alice)
		if err != nil {
			t.Fatalf("CreateKey ES256: %v", err)
		}
		if k.Algorithm != "ES256" || k.JWKSURL != "https://keys.example.org/vaara/jwks.json" || k.Issuer != "receipts.example.org" {
			t.Errorf("key = %+v", k)
		}
		if v.KID != "receipts.example.org-2026-05-18-01" || v.Algorithm != "ES256" {
			t.Errorf("version kid %q alg %q", v.KID, v.Algorithm)
		}
		var jwk map[string]any
		if err := json.Unmarshal(v.PublicJWK, &jwk); err != nil {
			t.Fatal(err)
		}
		if jwk["kty"] != "EC" || jwk["crv"] != "P-256" || jwk["alg"] != "ES256" || jwk["d"] != nil {
			t.Errorf("public JWK = %s", v.PublicJWK)
		}
		checkRing(t, e.m, s, "vaara", v.KID)
		n, _ := e.rotate(t, "vaara")
		if n.KID != "receipts.example.org-2026-05-18-02" || n.Algorithm != "ES256" {
			t.Errorf("rotated ES256 version kid %q alg %q", n.KID, n.Algorithm)
		}
		checkRing(t, e.m, s, "vaara", n.KID)
	})
}

// TestCreateKeyClockZone: the kid date is the UTC date of the clock, even
// when the clock reports another zone.
func TestCreateKeyClockZone(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		ny := time.FixedZone("UTC-5", -5*3600)
		local := time.Date(2026, 5, 18, 23, 30, 0, 0, ny) // 2026-05-19T04:30:00Z
		e := newEnv(t, s, local)
		_, v := e.create(t, "villa")
		if want := kidOn("2026-05-19", 1); v.KID != want {
			t.Fatalf("kid = %q, want %q (UTC date of %s)", v.KID, want, local)
		}
		sv, err := s.GetVersion(ctx, v.KID)
		if err != nil {
			t.Fatal(err)
		}
		if !sv.ActivatedAt.Equal(local) {
			t.Fatalf("stored ActivatedAt = %s, want %s", sv.ActivatedAt, local.UTC())
		}
	})
}

func TestRotateSameDay(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0)
		_, v1 := e.create(t, "villa")
		t1 := t0.Add(time.Hour)
		t2 := t0.Add(2*time.Hour + 17*time.Microsecond)
		e.clk.Set(t1)
		n2, o1 := e.rotate(t, "villa")
		if n2.KID != kidOn("2026-05-18", 2) || o1.KID != v1.KID {
			t.Fatalf("Rotate = (%s, %s), want (%s, %s)", n2.KID, o1.KID, kidOn("2026-05-18", 2), v1.KID)
		}
		if o1.State != store.StateRetired || !eqTime(o1.RetiredAt, &t1) || !eqTime(o1.ActivatedAt, &t0) {
			t.Errorf("retired version: %s activated %s retired %s, want retired [%s, %s]", o1.State, fmtT(o1.ActivatedAt), fmtT(o1.RetiredAt), t0, t1)
		}
		if n2.State != store.StateActive || !eqTime(n2.ActivatedAt, &t1) || !eqTime(n2.PublishedAt, &t1) || !n2.CreatedAt.Equal(t1) {
			t.Errorf("new version: %s activated %s published %s, want active at %s", n2.State, fmtT(n2.ActivatedAt), fmtT(n2.PublishedAt), t1)
		}
		if !eqTime(o1.RetiredAt, n2.ActivatedAt) {
			t.Errorf("gap: old retired %s, new activated %s", fmtT(o1.RetiredAt), fmtT(n2.ActivatedAt))
		}
		checkRing(t, e.m, s, "villa", n2.KID)

		e.clk.Set(t2)
		n3, o2 := e.rotate(t, "villa")
		if n3.KID != kidOn("2026-05-18", 3) || o2.KID != n2.KID {
			t.Fatalf("second Rotate = (%s, %s), want (%s, %s)", n3.KID, o2.KID, kidOn("2026-05-18", 3), n2.KID)
		}
		entry := checkRing(t, e.m, s, "villa", n3.KID)

		vs := versions(t, s, "villa")
		want := []struct {
			kid      string
			state    store.KeyState
			from, to *time.Time
		}{
			{kidOn("2026-05-18", 1), store.StateRetired, &t0, &t1},
			{kidOn("2026-05-18", 2), store.StateRetired, &t1, &t2},
			{kidOn("2026-05-18", 3), store.StateActive, &t2, nil},
		}
		if len(vs) != len(want) {
			t.Fatalf("%d versions, want %d", len(vs), len(want))
		}
		for i, w := range want {
			v := vs[i]
			if v.KID != w.kid || v.State != w.state || !eqTime(v.ActivatedAt, w.from) || !eqTime(v.RetiredAt, w.to) {
				t.Errorf("version %d = %s %s [%s, %s], want %s %s [%s, %s]", i, v.KID, v.State, fmtT(v.ActivatedAt), fmtT(v.RetiredAt),
					w.kid, w.state, fmtT(w.from), fmtT(w.to))
			}
		}
		// The plain JWKS publishes all three, newest first, with exact windows.
		var set jwksserve.JWKS
		if err := json.Unmarshal(entry.JWKS.Body, &set); err != nil {
			t.Fatal(err)
		}
		type win struct{ KID, Status, NB, NA string }
		var got []win
		for _, k := range set.Keys {
			got = append(got, win{k.KID, k.Status, k.NotBefore, k.NotAfter})
		}
		wantWin := []win{
			{kidOn("2026-05-18", 3), "active", "2026-05-18T12:00:00.123473Z", ""},
			{kidOn("2026-05-18", 2), "retired", "2026-05-18T11:00:00.123456Z", "2026-05-18T12:00:00.123473Z"},
			{kidOn("2026-05-18", 1), "retired", "2026-05-18T10:00:00.123456Z", "2026-05-18T11:00:00.123456Z"},
		}
		if !reflect.DeepEqual(got, wantWin) {
			t.Errorf("JWKS windows = %+v, want %+v", got, wantWin)
		}
	})
}

// TestKIDUniquePerIssuerPerDay (K1): NN counts per issuer and UTC day
// across keys, and is never reused.
func TestKIDUniquePerIssuerPerDay(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0)
		_, a1 := e.create(t, "offer")
		_, b1 := e.create(t, "transport") // same issuer, same day
		a2, _ := e.rotate(t, "offer")
		b2, _ := e.rotate(t, "transport")
		a3, _ := e.rotate(t, "offer")
		_, o1, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "other", Issuer: "other.example"}, alice)
		if err != nil {
			t.Fatal(err)
		}
		got := []string{a1.KID, b1.KID, a2.KID, b2.KID, a3.KID, o1.KID}
		want := []string{kidOn("2026-05-18", 1), kidOn("2026-05-18", 2), kidOn("2026-05-18", 3), kidOn("2026-05-18", 4),
			kidOn("2026-05-18", 5), "other.example-2026-05-18-01"}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("kids = %v, want %v", got, want)
		}
		checkRing(t, e.m, s, "offer", a3.KID)
		checkRing(t, e.m, s, "transport", b2.KID)
		checkRing(t, e.m, s, "other", o1.KID)
	})
}

// TestKIDManyPerDay: past -99 the counter keeps going (three digits) and
// still never collides.
func TestKIDManyPerDay(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	cfg := store.Config{SQLitePath: filepath.Join(t.TempDir(), "k.db")}
	e := newEnv(t, openStore(t, cfg), t0)
	e.create(t, "villa")
	var last store.KeyVersion
	for i := 2; i <= 101; i++ {
		last, _ = e.rotate(t, "villa")
		if want := kidOn("2026-05-18", i); last.KID != want {
			t.Fatalf("rotation %d: kid %q, want %q", i, last.KID, want)
		}
	}
	if last.KID != issuer+"-2026-05-18-101" {
		t.Fatalf("kid %q", last.KID)
	}
	checkRing(t, e.m, e.s, "villa", last.KID)
}

func TestRotateAcrossMidnight(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		late := time.Date(2026, 5, 18, 23, 59, 59, 999999000, time.UTC)
		midnight := time.Date(2026, 5, 19, 0, 0, 0, 0, time.UTC)
		e := newEnv(t, s, late)
		_, v1 := e.create(t, "villa")
		v2, _ := e.rotate(t, "villa")
		e.clk.Set(midnight)
		v3, o2 := e.rotate(t, "villa")
		e.clk.Set(midnight.Add(time.Minute))
		v4, _ := e.rotate(t, "villa")
		got := []string{v1.KID, v2.KID, v3.KID, v4.KID}
		want := []string{kidOn("2026-05-18", 1), kidOn("2026-05-18", 2), kidOn("2026-05-19", 1), kidOn("2026-05-19", 2)}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("kids = %v, want %v", got, want)
		}
		if o2.KID != v2.KID || !eqTime(o2.RetiredAt, &midnight) || !eqTime(v3.ActivatedAt, &midnight) {
			t.Errorf("midnight rotation: retired %s at %s, activated %s at %s", o2.KID, fmtT(o2.RetiredAt), v3.KID, fmtT(v3.ActivatedAt))
		}
		checkRing(t, e.m, s, "villa", v4.KID)
	})
}

func TestAuditTrail(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0)
		_, v1 := e.create(t, "villa")
		t1 := t0.Add(90 * time.Minute)
		e.clk.Set(t1)
		v2, _ := e.rotate(t, "villa")

		rows := checkChain(t, s)
		type row struct {
			Action, Actor, Reason, Key, KID string
			At                              time.Time
		}
		var got []row
		for _, r := range rows {
			got = append(got, row{r.Action, r.Actor, r.Reason, r.KeyName, r.KID, r.At.UTC()})
		}
		// version.create's actor is checked separately (TestAuditVersionCreateActor).
		for i := range got {
			if got[i].Action == "version.create" {
				got[i].Actor, got[i].Reason = "*", "*"
			}
		}
		// One transaction per change; the order of rows inside one
		// transaction is not part of the contract, so compare each
		// change's rows as a set.
		want := []row{
			{"key.create", alice.Name, alice.Reason, "villa", "", t0},
			{"version.create", "*", "*", "villa", v1.KID, t0},
			{"version.activate", alice.Name, alice.Reason, "villa", v1.KID, t0},
			{"version.retire", bob.Name, bob.Reason, "villa", v1.KID, t1},
			{"version.create", "*", "*", "villa", v2.KID, t1},
			{"version.activate", bob.Name, bob.Reason, "villa", v2.KID, t1},
		}
		if len(got) != len(want) {
			t.Fatalf("audit rows:\n got %+v\nwant (as sets of 3) %+v", got, want)
		}
		byAction := func(rs []row) []row {
			out := append([]row(nil), rs...)
			sort.Slice(out, func(i, j int) bool { return out[i].Action+out[i].KID < out[j].Action+out[j].KID })
			return out
		}
		for _, g := range [][2]int{{0, 3}, {3, 6}} {
			if a, b := byAction(got[g[0]:g[1]]), byAction(want[g[0]:g[1]]); !reflect.DeepEqual(a, b) {
				t.Errorf("audit rows %d..%d:\n got %+v\nwant %+v", g[0]+1, g[1], a, b)
			}
		}
		if got[0].Action != "key.create" {
			t.Errorf("first audit row is %s, want key.create", got[0].Action)
		}
		var keyCreate, versionCreates []store.AuditEvent
		for _, r := range rows {
			switch r.Action {
			case "key.create":
				keyCreate = append(keyCreate, r)
			case "version.create":
				versionCreates = append(versionCreates, r)
			}
		}
		var keyDetails map[string]any
		if len(keyCreate) != 1 {
			t.Fatalf("%d key.create rows", len(keyCreate))
		}
		if err := json.Unmarshal(keyCreate[0].Details, &keyDetails); err != nil {
			t.Fatalf("key.create details %s: %v", keyCreate[0].Details, err)
		}
		wantDetails := map[string]any{"issuer": issuer, "algorithm": "EdDSA", "backend": "software",
			"jwks_url": "https://villaakerlyckan.se/.well-known/jwks.json"}
		for k, v := range wantDetails {
			if keyDetails[k] != v {
				t.Errorf("key.create details[%q] = %v, want %v (details %s)", k, keyDetails[k], v, keyCreate[0].Details)
			}
		}
		if len(versionCreates) != 2 {
			t.Fatalf("%d version.create rows, want 2", len(versionCreates))
		}
		for _, r := range versionCreates {
			var d map[string]any
			if err := json.Unmarshal(r.Details, &d); err != nil {
				t.Fatalf("version.create details %s: %v", r.Details, err)
			}
			wantRef := "software:" + r.KID + "?alg=EdDSA&kek=" + e.b.KEKID()
			if d["backend_ref"] != wantRef {
				t.Errorf("version.create details = %s, want backend_ref %q", r.Details, wantRef)
			}
		}
		for _, r := range rows {
			for _, v := range []store.KeyVersion{v1, v2} {
				if strings.Contains(string(r.Details), base64.StdEncoding.EncodeToString(v.SealedPrivateKey)) {
					t.Errorf("audit row %d carries sealed key material", r.Seq)
				}
			}
		}
	})
}

// TestAuditVersionCreateActor: every audit row of a change names the
// security officer who asked for it and why.
func TestAuditVersionCreateActor(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0)
		e.create(t, "villa")
		e.rotate(t, "villa")
		var seen []string
		for _, r := range checkChain(t, s) {
			if r.Action != "version.create" {
				continue
			}
			seen = append(seen, r.Actor+"/"+r.Reason)
		}
		want := []string{alice.Name + "/" + alice.Reason, bob.Name + "/" + bob.Reason}
		if !reflect.DeepEqual(seen, want) {
			t.Fatalf("version.create actors = %v, want %v", seen, want)
		}
	})
}

func TestCreateKeyValidation(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0)
		ok := rotation.CreateKeyRequest{Name: "villa", Issuer: issuer}
		with := func(f func(r *rotation.CreateKeyRequest)) rotation.CreateKeyRequest {
			r := ok
			f(&r)
			return r
		}
		cases := map[string]rotation.CreateKeyRequest{
			"empty name":             with(func(r *rotation.CreateKeyRequest) { r.Name = "" }),
			"upper-case name":        with(func(r *rotation.CreateKeyRequest) { r.Name = "Villa" }),
			"name with underscore":   with(func(r *rotation.CreateKeyRequest) { r.Name = "villa_1" }),
			"name with space":        with(func(r *rotation.CreateKeyRequest) { r.Name = "villa key" }),
			"name leading hyphen":    with(func(r *rotation.CreateKeyRequest) { r.Name = "-villa" }),
			"name with slash":        with(func(r *rotation.CreateKeyRequest) { r.Name = "villa/x" }),
			"name 64 chars":          with(func(r *rotation.CreateKeyRequest) { r.Name = strings.Repeat("a", 64) }),
			"non-ASCII name":         with(func(r *rotation.CreateKeyRequest) { r.Name = "villä" }),
			"empty issuer":           with(func(r *rotation.CreateKeyRequest) { r.Issuer = "" }),
			"upper-case issuer":      with(func(r *rotation.CreateKeyRequest) { r.Issuer = "VillaAkerlyckan.se" }),
			"issuer underscore":      with(func(r *rotation.CreateKeyRequest) { r.Issuer = "villa_akerlyckan.se" }),
			"issuer empty label":     with(func(r *rotation.CreateKeyRequest) { r.Issuer = "villa..se" }),
			"issuer leading dot":     with(func(r *rotation.CreateKeyRequest) { r.Issuer = ".villa.se" }),
			"issuer trailing dot":    with(func(r *rotation.CreateKeyRequest) { r.Issuer = "villa.se." }),
			"issuer label hyphen":    with(func(r *rotation.CreateKeyRequest) { r.Issuer = "villa-.se" }),
			"issuer label 64 chars":  with(func(r *rotation.CreateKeyRequest) { r.Issuer = strings.Repeat("a", 64) + ".se" }),
			"issuer over 253 chars":  with(func(r *rotation.CreateKeyRequest) { r.Issuer = strings.Repeat(strings.Repeat("a", 63)+".", 4) + "se" }),
			"issuer with port":       with(func(r *rotation.CreateKeyRequest) { r.Issuer = "villa.se:443" }),
			"issuer with slash":      with(func(r *rotation.CreateKeyRequest) { r.Issuer = "villa.se/x" }),
			"unknown algorithm":      with(func(r *rotation.CreateKeyRequest) { r.Algorithm = "RS256" }),
			"lower-case algorithm":   with(func(r *rotation.CreateKeyRequest) { r.Algorithm = "eddsa" }),
			"ES384":                  with(func(r *rotation.CreateKeyRequest) { r.Algorithm = "ES384" }),
			"http jwks_url":          with(func(r *rotation.CreateKeyRequest) { r.JWKSURL = "http://villaakerlyckan.se/.well-known/jwks.json" }),
			"ftp jwks_url":           with(func(r *rotation.CreateKeyRequest) { r.JWKSURL = "ftp://villaakerlyckan.se/jwks.json" }),
			"relative jwks_url":      with(func(r *rotation.CreateKeyRequest) { r.JWKSURL = "/.well-known/jwks.json" }),
			"schemeless jwks_url":    with(func(r *rotation.CreateKeyRequest) { r.JWKSURL = "villaakerlyckan.se/jwks.json" }),
			"hostless jwks_url":      with(func(r *rotation.CreateKeyRequest) { r.JWKSURL = "https:///jwks.json" }),
			"jwks_url with userinfo": with(func(r *rotation.CreateKeyRequest) { r.JWKSURL = "https://u:p@villaakerlyckan.se/jwks.json" }),
			"jwks_url with fragment": with(func(r *rotation.CreateKeyRequest) { r.JWKSURL = "https://villaakerlyckan.se/jwks.json#x" }),
		}
		for name, req := range cases {
			k, v, err := e.m.CreateKey(ctx, req, alice)
			if !errors.Is(err, rotation.ErrInvalidRequest) {
				t.Errorf("%s: CreateKey(%+v) = %v, want ErrInvalidRequest", name, req, err)
			}
			if k.Name != "" || v.KID != "" {
				t.Errorf("%s: CreateKey returned %q/%q with its error", name, k.Name, v.KID)
			}
		}
		keys, err := s.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) != 0 {
			t.Errorf("invalid requests wrote %d keys", len(keys))
		}
		if rows := auditRows(t, s); len(rows) != 0 {
			t.Errorf("invalid requests wrote %d audit rows", len(rows))
		}
		if n := e.b.creates.Load(); n != 0 {
			t.Errorf("invalid requests created %d backend keys", n)
		}
		if n := len(e.m.Keyring().Keys); n != 0 {
			t.Errorf("Keyring has %d keys", n)
		}

		// Boundary values that are valid.
		for i, req := range []rotation.CreateKeyRequest{
			{Name: "a", Issuer: "localhost"},
			{Name: strings.Repeat("b", 63), Issuer: strings.Repeat("c", 63) + ".example"},
			{Name: "0-x", Issuer: "a-b.c-d.example", JWKSURL: "https://keys.example:8443/x/jwks.json?k=1"},
		} {
			if _, _, err := e.m.CreateKey(ctx, req, alice); err != nil {
				t.Errorf("valid request %d (%+v): %v", i, req, err)
			}
		}
	})
}

func TestCreateKeyErrors(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0)
		_, v1 := e.create(t, "villa")
		before := auditRows(t, s)

		t.Run("duplicate name", func(t *testing.T) {
			_, _, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "villa", Issuer: "other.example", Algorithm: "ES256"}, bob)
			if !errors.Is(err, rotation.ErrKeyExists) {
				t.Fatalf("duplicate CreateKey: %v, want ErrKeyExists", err)
			}
		})
		t.Run("issuer in use", func(t *testing.T) {
			_, _, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "intruder", Issuer: issuer}, bob)
			if !errors.Is(err, rotation.ErrIssuerInUse) || !strings.Contains(err.Error(), "villa") {
				t.Fatalf("CreateKey on villa's issuer: %v, want ErrIssuerInUse naming villa", err)
			}
		})
		t.Run("unknown backend", func(t *testing.T) {
			_, _, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "hsm", Issuer: issuer, Backend: "pkcs11"}, bob)
			if !errors.Is(err, rotation.ErrUnknownBackend) {
				t.Fatalf("CreateKey with backend pkcs11: %v, want ErrUnknownBackend", err)
			}
			if _, err := s.GetKey(ctx, "hsm"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("key hsm exists after a failed create: %v", err)
			}
		})
		t.Run("rotate unknown key", func(t *testing.T) {
			_, _, err := e.m.Rotate(ctx, "nope", bob)
			if !errors.Is(err, rotation.ErrKeyNotFound) {
				t.Fatalf("Rotate(nope): %v, want ErrKeyNotFound", err)
			}
		})
		t.Run("failing backend on create", func(t *testing.T) {
			e.b.failCreate.Store(true)
			defer e.b.failCreate.Store(false)
			_, _, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "broken", Issuer: issuer, ShareIssuer: true}, bob)
			if !errors.Is(err, errInjected) {
				t.Fatalf("CreateKey: %v, want the backend's error", err)
			}
			if _, err := s.GetKey(ctx, "broken"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("key broken exists after a failed create (rolled back?): %v", err)
			}
		})
		after := auditRows(t, s)
		if len(after) != len(before) {
			t.Errorf("failed requests wrote %d audit rows", len(after)-len(before))
		}
		if vs := versions(t, s, "villa"); len(vs) != 1 || vs[0].KID != v1.KID || vs[0].State != store.StateActive {
			t.Errorf("villa changed: %+v", vs)
		}
		if keys, _ := s.ListKeys(ctx); len(keys) != 1 {
			t.Errorf("%d keys, want 1", len(keys))
		}
		checkRing(t, e.m, s, "villa", v1.KID)
		checkChain(t, s)

		// After the failures, the next kid is still -02: nothing was consumed.
		_, v, err := e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "second", Issuer: issuer, ShareIssuer: true}, alice)
		if err != nil {
			t.Fatal(err)
		}
		if v.KID != kidOn("2026-05-18", 2) {
			t.Errorf("kid after failures = %q, want %q", v.KID, kidOn("2026-05-18", 2))
		}
	})
}

func TestRotateUnknownBackend(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0)
		_, v1 := e.create(t, "villa")
		nAudit := len(auditRows(t, s))

		// A replica configured without the software backend.
		bare := rotation.New(rotation.Config{Store: s, Now: e.clk.Now, Logger: quietLogger()})
		// Per-key reload (issue 14 item 5): the key is loaded, unsigned,
		// with the reason; it never blocks other keys.
		if err := bare.Reload(ctx); err != nil {
			t.Errorf("Reload without the backend: %v, want nil (the key is unsigned, not the replica)", err)
		}
		if e := bare.Keyring().Keys["villa"]; e == nil || e.Active != nil || !errors.Is(e.LoadErr, rotation.ErrUnknownBackend) {
			t.Errorf("key villa without its backend: %+v, want no signer and LoadErr wrapping ErrUnknownBackend", e)
		}
		if _, _, err := bare.Rotate(ctx, "villa", bob); !errors.Is(err, rotation.ErrUnknownBackend) {
			t.Fatalf("Rotate without the backend: %v, want ErrUnknownBackend", err)
		}
		if got := len(auditRows(t, s)); got != nAudit {
			t.Errorf("failed Rotate wrote %d audit rows", got-nAudit)
		}
		if vs := versions(t, s, "villa"); len(vs) != 1 || vs[0].State != store.StateActive {
			t.Errorf("failed Rotate changed versions: %+v", vs)
		}
		checkRing(t, e.m, s, "villa", v1.KID)
	})
}

func TestRotateBackendFailureRollsBack(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0)
		_, v1 := e.create(t, "villa")
		beforeVersions := versions(t, s, "villa")
		beforeAudit := auditRows(t, s)
		beforeRing := e.m.Keyring()

		e.clk.Set(t0.Add(time.Hour))
		e.b.failCreate.Store(true)
		newV, oldV, err := e.m.Rotate(ctx, "villa", bob)
		if !errors.Is(err, errInjected) {
			t.Fatalf("Rotate with a failing backend: %v, want the backend's error", err)
		}
		if newV.KID != "" || oldV.KID != "" {
			t.Errorf("failed Rotate returned versions %q/%q", newV.KID, oldV.KID)
		}
		after := versions(t, s, "villa")
		if len(after) != len(beforeVersions) {
			t.Fatalf("%d versions after a failed Rotate, want %d", len(after), len(beforeVersions))
		}
		for i := range after {
			sameVersion(t, "version after failed Rotate", after[i], beforeVersions[i])
		}
		if after[0].State != store.StateActive || after[0].RetiredAt != nil {
			t.Fatalf("old version is %s (retired %s) after a failed Rotate, want still active", after[0].State, fmtT(after[0].RetiredAt))
		}
		if got := auditRows(t, s); !reflect.DeepEqual(got, beforeAudit) {
			t.Fatalf("failed Rotate changed the audit trail: %d rows, want %d", len(got), len(beforeAudit))
		}
		if e.m.Keyring() != beforeRing {
			t.Error("failed Rotate replaced the Keyring")
		}
		checkRing(t, e.m, s, "villa", v1.KID)

		e.b.failCreate.Store(false)
		v2, o, err := e.m.Rotate(ctx, "villa", bob)
		if err != nil {
			t.Fatal(err)
		}
		if v2.KID != kidOn("2026-05-18", 2) || o.KID != v1.KID {
			t.Fatalf("Rotate after recovery = (%s, %s)", v2.KID, o.KID)
		}
		rows := checkChain(t, s)
		if len(rows) != len(beforeAudit)+3 {
			t.Errorf("%d audit rows, want %d", len(rows), len(beforeAudit)+3)
		}
	})
}

// TestReplicasConverge: a second Manager on the same key history (its own
// connection) sees another replica's rotation after Reload.
func TestReplicasConverge(t *testing.T) {
	forEachStoreCfg(t, func(t *testing.T, cfg store.Config, s store.Store) {
		e1 := newEnv(t, s, t0)
		s2 := openStore(t, cfg)
		e2 := newEnv(t, s2, t0)
		if n := len(e2.m.Keyring().Keys); n != 0 {
			t.Fatalf("replica 2 starts with %d keys", n)
		}
		_, v1 := e1.create(t, "villa")
		if n := len(e2.m.Keyring().Keys); n != 0 {
			t.Fatalf("replica 2 changed without Reload")
		}
		if err := e2.m.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		checkRing(t, e2.m, s2, "villa", v1.KID)
		if e2.m.Keyring().Default != "villa" {
			t.Errorf("replica 2 Default = %q", e2.m.Keyring().Default)
		}

		e1.clk.Set(t0.Add(time.Hour))
		v2, _ := e1.rotate(t, "villa")
		if got := e2.m.Keyring().Keys["villa"].Active.KID(); got != v1.KID {
			t.Fatalf("replica 2 switched to %s before Reload", got)
		}
		if err := e2.m.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		checkRing(t, e2.m, s2, "villa", v2.KID)
		if a, b := e1.m.Keyring().Keys["villa"].JWKS, e2.m.Keyring().Keys["villa"].JWKS; a.ETag != b.ETag || string(a.Body) != string(b.Body) {
			t.Error("replicas publish different JWKS documents")
		}

		// And the other way round: replica 2 rotates, replica 1 follows.
		e2.clk.Set(t0.Add(2 * time.Hour))
		v3, o3 := e2.rotate(t, "villa")
		if v3.KID != kidOn("2026-05-18", 3) || o3.KID != v2.KID {
			t.Fatalf("replica 2 Rotate = (%s, %s)", v3.KID, o3.KID)
		}
		if err := e1.m.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		checkRing(t, e1.m, s, "villa", v3.KID)
		checkChain(t, s)
	})
}

func TestReloadReusesSigners(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0)
		if n := e.b.signers.Load(); n != 0 {
			t.Fatalf("Reload of an empty store loaded %d signers", n)
		}
		e.create(t, "villa")
		if n := e.b.signers.Load(); n != 1 {
			t.Fatalf("after CreateKey: %d Signer calls, want 1", n)
		}
		active := e.m.Keyring().Keys["villa"].Active
		for i := 0; i < 3; i++ {
			ring := e.m.Keyring()
			if err := e.m.Reload(ctx); err != nil {
				t.Fatal(err)
			}
			if e.m.Keyring() == ring {
				t.Error("Reload did not publish a new snapshot")
			}
		}
		if n := e.b.signers.Load(); n != 1 {
			t.Fatalf("after 3 Reloads: %d Signer calls, want 1 (signers must be reused)", n)
		}
		if e.m.Keyring().Keys["villa"].Active != active {
			t.Error("Reload replaced the active signer")
		}
		e.rotate(t, "villa")
		if n := e.b.signers.Load(); n != 2 {
			t.Fatalf("after Rotate: %d Signer calls, want 2", n)
		}
		e.create(t, "second")
		if n := e.b.signers.Load(); n != 3 {
			t.Fatalf("after a second key: %d Signer calls, want 3", n)
		}
		if err := e.m.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		if n := e.b.signers.Load(); n != 3 {
			t.Fatalf("after Reload: %d Signer calls, want 3", n)
		}

		// A fresh Manager loads only active versions, once.
		fresh := newEnv(t, s, t0)
		if n := fresh.b.signers.Load(); n != 2 {
			t.Fatalf("fresh Manager: %d Signer calls, want 2 (one per active version)", n)
		}
		if err := fresh.m.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		if n := fresh.b.signers.Load(); n != 2 {
			t.Fatalf("fresh Manager after Reload: %d Signer calls, want 2", n)
		}
	})
}

func TestDefaultKey(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0)
		if got := e.m.Keyring().Default; got != "" {
			t.Fatalf("empty Keyring Default = %q, want \"\"", got)
		}
		e.create(t, "zeta") // oldest, though last by name
		e.clk.Set(t0.Add(time.Minute))
		e.create(t, "alpha")
		e.clk.Set(t0.Add(2 * time.Minute))
		e.create(t, "mid")
		if got := e.m.Keyring().Default; got != "zeta" {
			t.Fatalf("Default = %q, want the oldest key zeta", got)
		}
		if got := e.m.Keyring().SortedNames(); !reflect.DeepEqual(got, []string{"alpha", "mid", "zeta"}) {
			t.Fatalf("SortedNames = %v", got)
		}
		cfgd := rotation.New(rotation.Config{Store: s, Backends: []backends.Backend{newTestBackend(t)}, DefaultKey: "alpha", Logger: quietLogger()})
		if err := cfgd.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		if got := cfgd.Keyring().Default; got != "alpha" {
			t.Fatalf("configured Default = %q, want alpha", got)
		}
		// Rotating does not move the default.
		e.rotate(t, "zeta")
		if got := e.m.Keyring().Default; got != "zeta" {
			t.Fatalf("Default after Rotate = %q, want zeta", got)
		}
	})
}

// TestDefaultKeyMissing: Keyring.Default is documented as "" when there is
// no default key.
func TestDefaultKeyMissing(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		m := rotation.New(rotation.Config{Store: s, Backends: []backends.Backend{newTestBackend(t)}, DefaultKey: "nope", Logger: quietLogger()})
		if err := m.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		if got := m.Keyring().Default; got != "" {
			t.Fatalf("Default = %q with no key named nope, want \"\"", got)
		}
	})
}

// TestConcurrentRotate: 8 goroutines rotate one key at once.
func TestConcurrentRotate(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0)
		_, v1 := e.create(t, "villa")
		e.clk.Set(t0.Add(time.Second))
		e.clk.SetStep(time.Millisecond) // every clock read is a distinct, later instant

		const n = 8
		var wg sync.WaitGroup
		type result struct{ newV, oldV store.KeyVersion }
		results := make([]result, n)
		errs := make([]error, n)
		stop := make(chan struct{})
		var readers sync.WaitGroup
		readers.Add(1)
		go func() { // a signing path reading the Keyring throughout
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if a := e.m.Keyring().Keys["villa"].Active; a != nil {
					if _, err := a.Sign([]byte("x"), ""); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				results[i].newV, results[i].oldV, errs[i] = e.m.Rotate(ctx, "villa", rotation.Actor{Name: fmt.Sprintf("worker-%d", i)})
			}(i)
		}
		wg.Wait()
		close(stop)
		readers.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("Rotate %d: %v", i, err)
			}
		}
		newKIDs, oldKIDs := map[string]bool{}, map[string]bool{}
		for _, r := range results {
			newKIDs[r.newV.KID] = true
			oldKIDs[r.oldV.KID] = true
		}
		if len(newKIDs) != n || len(oldKIDs) != n {
			t.Fatalf("%d distinct new kids and %d distinct retired kids, want %d each", len(newKIDs), len(oldKIDs), n)
		}
		for i := 2; i <= n+1; i++ {
			if !newKIDs[kidOn("2026-05-18", i)] {
				t.Errorf("kid %s was not minted; got %v", kidOn("2026-05-18", i), newKIDs)
			}
		}

		vs := versions(t, s, "villa")
		if len(vs) != n+1 {
			t.Fatalf("%d versions, want %d", len(vs), n+1)
		}
		sort.Slice(vs, func(i, j int) bool { return vs[i].ActivatedAt.Before(*vs[j].ActivatedAt) })
		if vs[0].KID != v1.KID {
			t.Errorf("first activated = %s, want %s", vs[0].KID, v1.KID)
		}
		for i, v := range vs {
			if v.ActivatedAt == nil {
				t.Fatalf("%s has no ActivatedAt", v.KID)
			}
			if want := kidOn("2026-05-18", i+1); v.KID != want {
				t.Errorf("activation order %d: %s, want %s (kids count up in activation order)", i, v.KID, want)
			}
			if i == len(vs)-1 {
				if v.State != store.StateActive || v.RetiredAt != nil {
					t.Errorf("last version %s is %s (retired %s), want active", v.KID, v.State, fmtT(v.RetiredAt))
				}
				continue
			}
			next := vs[i+1]
			if v.State != store.StateRetired {
				t.Errorf("%s is %s, want retired", v.KID, v.State)
			}
			if !eqTime(v.RetiredAt, next.ActivatedAt) {
				t.Errorf("window gap/overlap: %s retired %s, %s activated %s", v.KID, fmtT(v.RetiredAt), next.KID, fmtT(next.ActivatedAt))
			}
			if !next.ActivatedAt.After(*v.ActivatedAt) {
				t.Errorf("%s activated %s, not after %s (%s)", next.KID, fmtT(next.ActivatedAt), v.KID, fmtT(v.ActivatedAt))
			}
		}
		// Each call retired exactly the version the previous call activated.
		byOld := map[string]string{}
		for _, r := range results {
			byOld[r.oldV.KID] = r.newV.KID
			if !eqTime(r.oldV.RetiredAt, r.newV.ActivatedAt) {
				t.Errorf("Rotate returned retired %s at %s, new %s at %s", r.oldV.KID, fmtT(r.oldV.RetiredAt), r.newV.KID, fmtT(r.newV.ActivatedAt))
			}
		}
		for i := 0; i < len(vs)-1; i++ {
			if byOld[vs[i].KID] != vs[i+1].KID {
				t.Errorf("the rotation retiring %s activated %s, want %s", vs[i].KID, byOld[vs[i].KID], vs[i+1].KID)
			}
		}
		last := vs[len(vs)-1].KID
		checkRing(t, e.m, s, "villa", last)
		rows := checkChain(t, s)
		if len(rows) != 3+3*n {
			t.Errorf("%d audit rows, want %d", len(rows), 3+3*n)
		}
	})
}

// TestConcurrentRotateSameIssuer: concurrent rotations of two keys that
// share an issuer never mint the same kid (K1) and never fail.
func TestConcurrentRotateSameIssuer(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0)
		e.create(t, "offer")
		e.create(t, "transport")
		e.clk.SetStep(time.Millisecond)
		// Hold each transaction in the backend for a while, so that
		// rotations of the two keys overlap.
		e.b.createDelay.Store(int64(30 * time.Millisecond))
		const per = 4
		var wg sync.WaitGroup
		var mu sync.Mutex
		kids := map[string]bool{}
		for _, name := range []string{"offer", "transport"} {
			for i := 0; i < per; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v, _, err := e.m.Rotate(ctx, name, bob)
					if err != nil {
						t.Errorf("Rotate %s: %v", name, err)
						return
					}
					mu.Lock()
					kids[v.KID] = true
					mu.Unlock()
				}()
			}
		}
		wg.Wait()
		if len(kids) != 2*per {
			t.Fatalf("%d distinct kids, want %d: %v", len(kids), 2*per, kids)
		}
		for i := 3; i <= 2*per+2; i++ {
			if !kids[kidOn("2026-05-18", i)] {
				t.Errorf("kid %s missing from %v", kidOn("2026-05-18", i), kids)
			}
		}
		for _, name := range []string{"offer", "transport"} {
			active := 0
			for _, v := range versions(t, s, name) {
				if v.State == store.StateActive {
					active++
				}
			}
			if active != 1 {
				t.Errorf("%s has %d active versions", name, active)
			}
		}
		checkChain(t, s)
	})
}

// TestConcurrentCreateSameName: racing creations of one name give exactly
// one key; the others fail with ErrKeyExists.
func TestConcurrentCreateSameName(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0)
		const n = 6
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, _, errs[i] = e.m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "villa", Issuer: issuer}, alice)
			}(i)
		}
		wg.Wait()
		ok := 0
		for i, err := range errs {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, rotation.ErrKeyExists):
				t.Errorf("CreateKey %d: %v, want nil or ErrKeyExists", i, err)
			}
		}
		if ok != 1 {
			t.Fatalf("%d creations succeeded, want 1", ok)
		}
		vs := versions(t, s, "villa")
		if len(vs) != 1 || vs[0].KID != kidOn("2026-05-18", 1) {
			t.Fatalf("versions = %+v, want only %s", vs, kidOn("2026-05-18", 1))
		}
		if rows := checkChain(t, s); len(rows) != 3 {
			t.Errorf("%d audit rows, want 3", len(rows))
		}
		checkRing(t, e.m, s, "villa", vs[0].KID)
	})
}

// TestRotateClockBehind: a replica whose clock is behind the instant the
// active version was activated must not publish an inverted window
// (vrp_not_after before vrp_not_before) nor a successor that activates
// before its predecessor: it either refuses or keeps the windows ordered.
func TestRotateClockBehind(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0.Add(time.Hour))
		_, v1 := e.create(t, "villa")
		behind := newEnv(t, s, t0) // a replica one hour behind
		newV, oldV, err := behind.m.Rotate(ctx, "villa", bob)
		if err != nil {
			t.Logf("Rotate refused with a clock behind: %v", err) // acceptable
			if vs := versions(t, s, "villa"); len(vs) != 1 || vs[0].State != store.StateActive {
				t.Fatalf("a refused Rotate changed history: %+v", vs)
			}
			return
		}
		if oldV.KID != v1.KID {
			t.Fatalf("retired %s, want %s", oldV.KID, v1.KID)
		}
		if oldV.RetiredAt.Before(*oldV.ActivatedAt) {
			t.Errorf("inverted window: %s activated %s, retired %s", oldV.KID, fmtT(oldV.ActivatedAt), fmtT(oldV.RetiredAt))
		}
		if newV.ActivatedAt.Before(*oldV.ActivatedAt) {
			t.Errorf("%s activated %s, before its predecessor %s (%s)", newV.KID, fmtT(newV.ActivatedAt), oldV.KID, fmtT(oldV.ActivatedAt))
		}
		if vs := versions(t, s, "villa"); vs[len(vs)-1].KID != newV.KID {
			t.Errorf("key history does not list %s last: %s", newV.KID, vs[len(vs)-1].KID)
		}
	})
}

// TestKIDAfterHighest: NN is one more than the highest ever minted for the
// issuer and day, even when history has gaps or foreign kids with the prefix.
func TestKIDAfterHighest(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0)
		pub, _, err := ed25519.GenerateKey(nil)
		if err != nil {
			t.Fatal(err)
		}
		jwk, err := jwksserve.PublicJWK(pub, "imported", "EdDSA")
		if err != nil {
			t.Fatal(err)
		}
		err = s.InTx(ctx, func(tx store.Tx) error {
			if err := tx.InsertKey(ctx, store.Key{Name: "imported", Issuer: issuer, Algorithm: "EdDSA", Backend: "software",
				JWKSURL: "https://villaakerlyckan.se/.well-known/jwks.json", CreatedAt: t0, CreatedBy: "import"}); err != nil {
				return err
			}
			for _, kid := range []string{kidOn("2026-05-18", 7), kidOn("2026-05-18", 3), issuer + "-2026-05-18-x9", kidOn("2026-05-17", 40)} {
				if err := tx.InsertVersion(ctx, store.KeyVersion{KID: kid, KeyName: "imported", Algorithm: "EdDSA",
					BackendRef: "software:" + kid, PublicJWK: jwk, State: store.StateRetired, CreatedAt: t0}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("seed history: %v", err)
		}
		_, v := e.create(t, "villa")
		if want := kidOn("2026-05-18", 8); v.KID != want {
			t.Fatalf("kid = %q, want %q (one more than the highest, -07)", v.KID, want)
		}
		n, _ := e.rotate(t, "villa")
		if want := kidOn("2026-05-18", 9); n.KID != want {
			t.Fatalf("rotated kid = %q, want %q", n.KID, want)
		}
	})
}
