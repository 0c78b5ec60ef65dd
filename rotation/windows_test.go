package rotation_test

import (
	"bytes"
	"context"
	"crypto"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// Regression tests of issue 14 items 5, 6 and 7 at the lifecycle engine.

// movedBackend is the software backend under another kind ("moved"): keys
// moved to it get versions this test's replica cannot load.
type movedBackend struct{ *testBackend }

func (movedBackend) Kind() string { return "moved" }

func (b movedBackend) CreateKey(ctx context.Context, req backends.CreateRequest) (backends.Handle, error) {
	h, err := b.testBackend.CreateKey(ctx, req)
	h.Ref = "moved:" + strings.TrimPrefix(h.Ref, "software:")
	return h, err
}

func (b movedBackend) Signer(ctx context.Context, kid string, h backends.Handle) (crypto.Signer, error) {
	h.Ref = "software:" + strings.TrimPrefix(h.Ref, "moved:")
	return b.testBackend.Signer(ctx, kid, h)
}

// Item 5: one key's reload failure (a key moved to a backend this replica
// lacks) aborted the whole reload, so the replica kept signing with
// versions revoked meanwhile, kept them in its JWKS and stayed ready. Now
// reload is per key: the moved key is unsigned and says why, every other
// key — and every revocation — still applies.
func TestReloadPerKey(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0)
		writer := rotation.New(rotation.Config{Store: s, Backends: []backends.Backend{e.b, movedBackend{e.b}}, Now: e.clk.Now, Logger: quietLogger()})
		if err := writer.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		_, villa1 := e.create(t, "villa")
		e.create(t, "moved")
		if err := e.m.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		if err := writer.SetBackend(ctx, "moved", "moved", bob); err != nil {
			t.Fatal(err)
		}
		if _, _, err := writer.Rotate(ctx, "moved", bob); err != nil {
			t.Fatal(err)
		}
		// Meanwhile villa's active version is revoked elsewhere.
		e.clk.Set(t0.Add(time.Minute))
		if _, _, err := writer.Revoke(ctx, villa1.KID, t0, "leaked", bob); err != nil {
			t.Fatal(err)
		}
		if err := e.m.Reload(ctx); err != nil {
			t.Errorf("Reload: %v, want nil: one key's failure must not stop the others", err)
		}
		ring := e.m.Keyring()
		if sg := ring.Keys["villa"].SignerAt(t0.Add(time.Hour)); sg == nil || sg.KID() == villa1.KID {
			t.Errorf("villa signs with %v after %s was revoked, want its replacement", sg, villa1.KID)
		}
		if bytes.Contains(ring.Keys["villa"].JWKS.Body, []byte(villa1.KID)) {
			t.Errorf("the revoked %s is still in villa's JWKS", villa1.KID)
		}
		moved := ring.Keys["moved"]
		if moved == nil || moved.SignerAt(t0.Add(time.Hour)) != nil {
			t.Errorf("moved key signs on a replica without its backend: %+v", moved)
		}
	})
}

// Item 6: a pending version whose private half cannot be loaded (a KMS
// DescribeKey failing) was activated at its instant anyway, after which
// every sign was 503. Now the activation is held: the active version keeps
// signing, the pending one stays pending, and it activates once it loads.
func TestActivationHeldWhileUnloadable(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newLCEnv(t, s, t0, -1)
		_, v1 := e.createPolicy(t, "villa", issuer, "EdDSA", rotation.Policy{RotationPeriod: rotation.Duration(time.Hour), Prepublish: rotation.Duration(time.Minute)})
		e.b.failSigner.Store(kidOn("2026-05-18", 2)) // the next version, from its creation on
		p, err := e.m.ScheduleRotation(ctx, "villa", bob)
		if err != nil {
			t.Fatal(err)
		}
		e.clk.Set(p.ActivatesAt.Add(time.Second))
		if _, err := e.m.Tick(ctx); err == nil {
			t.Error("Tick activated a version whose private half cannot be loaded (no error)")
		}
		now := p.ActivatesAt.Add(2 * time.Second)
		if sg := e.m.Keyring().Keys["villa"].SignerAt(now); sg == nil || sg.KID() != v1.KID {
			t.Fatalf("after the held activation the key signs with %v, want the active %s", sg, v1.KID)
		}
		if vs := versions(t, s, "villa"); vs[0].State != store.StateActive || vs[1].State != store.StatePending {
			t.Fatalf("states %s/%s, want active/pending (held)", vs[0].State, vs[1].State)
		}
		// The backend recovers: the activation happens.
		e.b.failSigner.Store("")
		e.clk.Set(p.ActivatesAt.Add(time.Hour))
		for i := 0; i < 100; i++ { // past the scheduler's backoff
			if _, err := e.m.Tick(ctx); err == nil && versions(t, s, "villa")[1].State == store.StateActive {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if vs := versions(t, s, "villa"); vs[1].State != store.StateActive {
			t.Fatalf("after recovery %s is %s, want active", vs[1].KID, vs[1].State)
		}
	})
}

// countingHandler counts log records at or above a level.
type countingHandler struct {
	mu    sync.Mutex
	n     int
	level slog.Level
	msgs  []string
}

func (h *countingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.n++
	h.msgs = append(h.msgs, r.Message)
	h.mu.Unlock()
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
func (h *countingHandler) count() int                         { h.mu.Lock(); defer h.mu.Unlock(); return h.n }

// Item 7: retry storms. While the store was unreachable the scheduler
// retried every ~1.3 ms (6,580 ERROR lines in 12 s); on backend failures
// it called CreateKey ~300 times a second. Now each key backs off
// exponentially with jitter (200 ms to 30 s), logging one line per failure
// episode.
func TestSchedulerBacksOff(t *testing.T) {
	forEachStoreCfg(t, func(t *testing.T, cfg store.Config, s store.Store) {
		for _, fault := range []string{"backend", "store"} {
			t.Run(fault, func(t *testing.T) {
				own, err := store.Open(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer own.Close()
				logs := &countingHandler{level: slog.LevelWarn}
				b := newTestBackend(t)
				m := rotation.New(rotation.Config{Store: own, Backends: []backends.Backend{b}, Logger: slog.New(logs), JWKSMaxAge: -1})
				name := "storm-" + fault
				if _, _, err := m.CreateKey(ctx, rotation.CreateKeyRequest{Name: name, Issuer: issuer, ShareIssuer: true,
					Policy: rotation.Policy{RotationPeriod: rotation.Duration(2 * time.Second), Prepublish: rotation.Duration(time.Second)}}, alice); err != nil {
					t.Fatal(err)
				}
				// Period 2 s, prepublish 1 s: the next prepublication is due at once.
				switch fault {
				case "backend":
					b.failCreate.Store(true)
				case "store":
					_ = own.Close()
				}
				before := b.creates.Load()
				logsBefore := logs.count()
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				m.RunScheduler(rctx, time.Second)
				cancel()
				creates, lines := b.creates.Load()-before, logs.count()-logsBefore
				t.Logf("%s failing for 2 s: %d CreateKey calls, %d log lines at WARN or above", fault, creates, lines)
				if creates > 6 {
					t.Errorf("%d CreateKey calls in 2 s, want at most 6 (backoff)", creates)
				}
				if keys := len(m.Keyring().Keys); lines > keys {
					t.Errorf("%d log lines in 2 s of one failure episode of %d due keys, want one per key: %q", lines, keys, logs.msgs)
				}
			})
		}
	})
}
