package anchor

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlogclient"
)

// emptyLog is a log that has nothing (every marker absent).
type emptyLog struct{ proofs int }

func (l *emptyLog) URL() string { return "http://log.test" }
func (l *emptyLog) AddBatch(context.Context, []tlogclient.Entry) (*tlogclient.Promise, error) {
	return nil, fmt.Errorf("not for this test")
}
func (l *emptyLog) Proof(context.Context, [32]byte, uint64) ([]byte, error) {
	l.proofs++
	return nil, tlogclient.ErrNotFound
}
func (l *emptyLog) Archive(context.Context, uint64, int) ([]tlogclient.ArchivedTree, error) {
	return nil, nil
}

// history is keys × versions retired versions and one active each.
func history(keys, versions int) store.History {
	h := store.History{Versions: map[string][]store.KeyVersion{}}
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for k := 0; k < keys; k++ {
		name := fmt.Sprintf("key%02d", k)
		h.Keys = append(h.Keys, store.Key{Name: name, Issuer: name + ".example", Algorithm: "EdDSA", Backend: "software", CreatedAt: at})
		for v := 0; v < versions; v++ {
			from, to := at.Add(time.Duration(v)*time.Hour), at.Add(time.Duration(v+1)*time.Hour)
			ver := store.KeyVersion{KID: fmt.Sprintf("%s.example-2026-12-01-%02d", name, v+1), KeyName: name, Algorithm: "EdDSA",
				PublicJWK: []byte(`{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}`),
				State:     store.StateRetired, CreatedAt: from, ActivatedAt: &from, RetiredAt: &to}
			if v == versions-1 {
				ver.State, ver.RetiredAt = store.StateActive, nil
			}
			h.Versions[name] = append(h.Versions[name], ver)
		}
	}
	return h
}

// storeAndKey migrates and opens the key history c and makes an event key.
func storeAndKey(t *testing.T, c store.Config) (store.Store, *EventKey) {
	t.Helper()
	ctx := context.Background()
	if _, err := store.Migrate(ctx, c); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	key, err := GenerateKeyFile(filepath.Join(t.TempDir(), "k.json"))
	if err != nil {
		t.Fatal(err)
	}
	return st, key
}

func newTestAnchor(t testing.TB, l tlogclient.Log) *Anchor {
	t.Helper()
	c := store.Config{SQLitePath: filepath.Join(t.TempDir(), "keysvc.db")}
	if _, err := store.Migrate(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	k, err := GenerateKeyFile(filepath.Join(t.TempDir(), "k.json"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Key: k, Logs: []tlogclient.Log{l}, Store: st, Recorder: &memRecorder{}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// memRecorder keeps what an Anchor records, as the log client would take it.
type memRecorder struct {
	mu   sync.Mutex
	jws  []string
	seen map[string]bool
}

func (r *memRecorder) Record(_ context.Context, typ string, artifacts ...string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	for _, a := range artifacts {
		r.jws, r.seen[a] = append(r.jws, a), true
	}
	return nil
}

// scanned answers a look-up from what r recorded: a log that has what it
// was given (Config.Scanned).
func (r *memRecorder) scanned(h [32]byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for jws := range r.seen {
		if sha256.Sum256([]byte(jws)) == h {
			return true
		}
	}
	return false
}

func (r *memRecorder) has(jws string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[jws]
}

// learnAll marks every key and version fact of h (and each version's
// backend reference) as made here.
func learnAll(t testing.TB, a *Anchor, h store.History) {
	for _, k := range h.Keys {
		f, err := a.key.KeyFact(k)
		if err != nil {
			t.Fatal(err)
		}
		a.learn(f)
		for _, v := range h.Versions[k.Name] {
			f, err := a.key.VersionFact(v)
			if err != nil {
				t.Fatal(err)
			}
			b, err := a.key.BackendFact(v)
			if err != nil {
				t.Fatal(err)
			}
			a.learn(f, b)
		}
	}
}

// TestCheckSteadyState: once history was checked, a reload of the same
// history asks the log nothing and backs everything; a version whose
// public key changed is not backed.
func TestCheckSteadyState(t *testing.T) {
	l := &emptyLog{}
	a := newTestAnchor(t, l)
	h := history(3, 4)
	learnAll(t, a, h)
	if v := a.Check(context.Background(), h); len(v.Versions)+len(v.Keys) != 0 {
		t.Fatalf("first check: %+v", v)
	}
	first := l.proofs
	// Per key: 3 retired versions × (revoked, destroyed), the active one ×
	// (retired, revoked, destroyed), version number 5 and settings
	// revision 1.
	if first != 3*(3*2+3+1+1) {
		t.Fatalf("first check asked the log %d times, want 33", first)
	}
	if v := a.Check(context.Background(), h); len(v.Versions)+len(v.Keys) != 0 || l.proofs != first {
		t.Fatalf("second check: %+v, %d more look-ups", v, l.proofs-first)
	}
	h.Keys[2].Issuer = "attacker.example"
	v := a.Check(context.Background(), h)
	if len(v.Keys) != 1 || !strings.Contains(v.Keys["key02"], "settings") || len(v.Versions) != 4 {
		t.Fatalf("changed issuer: %+v", v)
	}
	h.Keys[2].Issuer = "key02.example"
	h.Versions["key01"][0].PublicJWK = []byte(`{"kty":"OKP","crv":"Ed25519","x":"PUAXw-hDiVqStwqnTRt-vJyYLM8uxJaMwM1V8Sr0Zgw"}`)
	v = a.Check(context.Background(), h)
	if len(v.Versions) != 1 || v.Versions["key01.example-2026-12-01-01"] == "" || len(v.Keys) != 0 {
		t.Fatalf("swapped key: %+v", v)
	}
	h.Versions["key01"][0].PublicJWK = h.Versions["key00"][0].PublicJWK

	// Settings rolled back (ADR 0036): the log has revision 1 of key00's
	// settings, key history holds revision 0. Then key history at
	// revision 1, whose fact was made here, is backed again.
	m1, err := a.key.SettingsMarker("key00", 1)
	if err != nil {
		t.Fatal(err)
	}
	a.learn(m1)
	v = a.Check(context.Background(), h)
	if want := "key key00: the transparency log records settings revision 1, but key history holds revision 0"; len(v.Keys) != 1 || !strings.HasPrefix(v.Keys["key00"], want) || len(v.Versions) != 4 {
		t.Fatalf("rolled-back settings: %+v", v)
	}
	h.Keys[0].SettingsRev = 1
	if v = a.Check(context.Background(), h); len(v.Keys) != 1 || !strings.Contains(v.Keys["key00"], "are not backed") {
		t.Fatalf("revision 1 with no fact made for it: %+v", v)
	}
	learnAll(t, a, h)
	if v = a.Check(context.Background(), h); len(v.Keys)+len(v.Versions) != 0 {
		t.Fatalf("revision 1, backed: %+v", v)
	}
}

// BenchmarkCheck is what anchoring adds to a reload of known history
// (10 keys × 10 versions): no log look-up, no signature.
func BenchmarkCheck(b *testing.B) {
	a := newTestAnchor(b, &emptyLog{})
	h := history(10, 10)
	learnAll(b, a, h)
	a.Check(context.Background(), h)
	b.ResetTimer()
	for b.Loop() {
		if v := a.Check(context.Background(), h); len(v.Versions) != 0 {
			b.Fatal(v)
		}
	}
}

// TestBootstrapSettingsRev: the first start anchors a key's settings
// markers 1..n on trust, but refuses a revision larger than the number of
// audit rows (every settings change appends one): a revision written by
// hand must not make it sign markers without end (ADR 0036).
func TestBootstrapSettingsRev(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		rev     int64
		wantErr string
	}{
		{1, ""},
		{1 << 40, "anchor: key key00 is at settings revision 1099511627776, more than the 1 audit rows: refusing to anchor it"},
	} {
		a := newTestAnchor(t, &emptyLog{})
		h := history(1, 1)
		k := h.Keys[0]
		k.SettingsRev = c.rev
		err := a.st.InTx(ctx, func(tx store.Tx) error {
			if err := tx.InsertKey(ctx, k); err != nil {
				return err
			}
			if err := tx.InsertVersion(ctx, h.Versions[k.Name][0]); err != nil {
				return err
			}
			_, err := tx.AppendAudit(ctx, store.AuditEvent{Actor: "alice", Action: "key.policy", KeyName: k.Name})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		err = a.Start(ctx)
		if c.wantErr != "" {
			if err == nil || err.Error() != c.wantErr {
				t.Fatalf("revision %d: Start: %v, want %q", c.rev, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("revision %d: Start: %v", c.rev, err)
		}
		m, err := a.key.SettingsMarker(k.Name, 1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := a.as.AnchorEventsByHash(ctx, [][32]byte{m.Hash})
		if err != nil || len(got) != 1 {
			t.Fatalf("revision 1: the bootstrap stored %d settings markers (%v), want 1", len(got), err)
		}
		// Stored and recorded at once: the first start submits what it
		// bootstrapped (not only the next start).
		boot, _ := a.key.BootstrapMarker()
		if rec := a.rec.(*memRecorder); !rec.has(m.JWS) || !rec.has(boot.JWS) {
			t.Fatalf("revision 1: the bootstrap's events were stored but not recorded (%d recorded)", len(rec.jws))
		}
	}
}

// TestSettingsChangeBehindLog: a policy change whose revision's marker the
// log already holds (key history is behind the log: rolled back, or an
// older backup) is refused and leaves the key as it was; a change to a
// revision the log does not know writes its marker (ADR 0036).
func TestSettingsChangeBehindLog(t *testing.T) {
	ctx := context.Background()
	a := newTestAnchor(t, &emptyLog{})
	st := a.Wrap(a.st)
	h := history(1, 1)
	k := h.Keys[0]
	if err := st.InTx(ctx, func(tx store.Tx) error {
		if err := tx.InsertKey(ctx, k); err != nil {
			return err
		}
		return tx.InsertVersion(ctx, h.Versions[k.Name][0])
	}); err != nil {
		t.Fatal(err)
	}
	m1, _ := a.key.SettingsMarker(k.Name, 1)
	a.learn(m1)
	err := st.InTx(ctx, func(tx store.Tx) error { return tx.UpdateKeyPolicy(ctx, k.Name, []byte(`{"rotation_period":"720h"}`)) })
	if !errors.Is(err, rotation.ErrHistoryNotBacked) || !strings.Contains(err.Error(), "the log records settings revision 1, key history holds 0 (rolled back in the database)") {
		t.Fatalf("change behind the log: %v", err)
	}
	if got, err := a.st.GetKey(ctx, k.Name); err != nil || got.SettingsRev != 0 || got.Policy != nil {
		t.Fatalf("key after the refused change: %+v, %v", got, err)
	}

	b := newTestAnchor(t, &emptyLog{}) // a log that knows no revision
	st = b.Wrap(b.st)
	if err := st.InTx(ctx, func(tx store.Tx) error {
		if err := tx.InsertKey(ctx, k); err != nil {
			return err
		}
		if err := tx.InsertVersion(ctx, h.Versions[k.Name][0]); err != nil {
			return err
		}
		if err := tx.UpdateKeyPolicy(ctx, k.Name, []byte(`{"rotation_period":"720h"}`)); err != nil {
			return err
		}
		return tx.UpdateKeyBackend(ctx, k.Name, "pkcs11")
	}); err != nil {
		t.Fatal(err)
	}
	for r := int64(1); r <= 2; r++ {
		m, _ := b.key.SettingsMarker(k.Name, r)
		if got, err := b.as.AnchorEventsByHash(ctx, [][32]byte{m.Hash}); err != nil || len(got) != 1 {
			t.Fatalf("marker of revision %d after two changes in one transaction: %d stored, %v", r, len(got), err)
		}
	}
}
