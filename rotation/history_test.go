package rotation_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// fakeChecker backs everything except the kids and keys it names.
type fakeChecker struct {
	mu       sync.Mutex
	versions map[string]string
	keys     map[string]string
}

func (f *fakeChecker) Check(context.Context, store.History) rotation.HistoryVerdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := rotation.HistoryVerdict{Versions: map[string]string{}, Keys: map[string]string{}}
	for k, r := range f.versions {
		v.Versions[k] = r
	}
	for k, r := range f.keys {
		v.Keys[k] = r
	}
	return v
}

func (f *fakeChecker) set(versions, keys map[string]string) {
	f.mu.Lock()
	f.versions, f.keys = versions, keys
	f.mu.Unlock()
}

// TestHistoryChecker: a version the checker does not back is left out of
// the keyring's versions and documents and never signs (the error wraps
// ErrHistoryNotBacked), a key it does not back does not sign, and both are
// named in NotBacked; backed again, they are restored by the next reload.
func TestHistoryChecker(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		chk := &fakeChecker{}
		clk := newClock(t0)
		b := newTestBackend(t)
		m := rotation.New(rotation.Config{Store: s, Backends: []backends.Backend{b}, Now: clk.Now, Logger: quietLogger(), History: chk})
		if _, _, err := m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "villa", Issuer: issuer}, alice); err != nil {
			t.Fatal(err)
		}
		newV, oldV, err := m.Rotate(ctx, "villa", bob)
		if err != nil {
			t.Fatal(err)
		}
		reload := func() *rotation.KeyEntry {
			t.Helper()
			if err := m.Reload(ctx); err != nil {
				t.Fatal(err)
			}
			return m.Keyring().Keys["villa"]
		}

		chk.set(map[string]string{oldV.KID: "version " + oldV.KID + ": swapped"}, nil)
		e := reload()
		if len(e.Versions) != 1 || e.Versions[0].KID != newV.KID || e.NotBacked[oldV.KID] == "" {
			t.Fatalf("retired version not backed: versions %v, not backed %v", e.Versions, e.NotBacked)
		}
		for _, doc := range [][]byte{e.JWKS.Body, e.History.Body} {
			if strings.Contains(string(doc), oldV.KID) {
				t.Fatalf("%s is published: %s", oldV.KID, doc)
			}
		}
		if _, err := m.SignerFor("villa", clk.Now()); err != nil {
			t.Fatalf("the backed active version stops signing: %v", err)
		}

		chk.set(map[string]string{newV.KID: "version " + newV.KID + ": inserted"}, nil)
		e = reload()
		if _, err := m.SignerFor("villa", clk.Now()); err == nil || !errors.Is(e.LoadErr, rotation.ErrHistoryNotBacked) || !strings.Contains(e.LoadErr.Error(), newV.KID) {
			t.Fatalf("active version not backed: SignerFor %v, LoadErr %v", err, e.LoadErr)
		}

		chk.set(nil, map[string]string{"villa": "key villa: version 3 missing"})
		e = reload()
		if _, err := m.SignerFor("villa", clk.Now()); err == nil || !errors.Is(e.LoadErr, rotation.ErrHistoryNotBacked) || e.NotBacked["villa"] == "" {
			t.Fatalf("key not backed: SignerFor %v, LoadErr %v, not backed %v", err, e.LoadErr, e.NotBacked)
		}

		chk.set(nil, nil)
		e = reload()
		if len(e.Versions) != 2 || e.NotBacked != nil || e.LoadErr != nil {
			t.Fatalf("backed again: versions %d, not backed %v, load %v", len(e.Versions), e.NotBacked, e.LoadErr)
		}
		if sig, err := m.SignerFor("villa", clk.Now()); err != nil || sig.Signer == nil {
			t.Fatalf("backed again, SignerFor: %v", err)
		}
	})
}
