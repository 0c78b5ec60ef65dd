package rotation_test

import (
	"errors"
	"testing"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// TestReloadIsolatesBackendFailures: when one key's backend cannot load its
// signer, Reload still succeeds, the other keys sign, the failing key
// reports why, and a revocation still reaches the Keyring.
func TestReloadIsolatesBackendFailures(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		e := newEnv(t, s, t0)
		_, bad := e.create(t, "villa")
		_, good := e.createPolicy(t, "other", "other.example", "", rotation.Policy{})
		_, old := e.rotate(t, "other")

		replica := rotation.New(rotation.Config{Store: s, Backends: []backends.Backend{e.b}, Now: e.clk.Now, Logger: quietLogger()})
		e.b.failSigner.Store(bad.KID)
		if err := replica.Reload(ctx); err != nil {
			t.Fatalf("Reload with one failing key: %v", err)
		}
		ring := replica.Keyring()
		if v := ring.Keys["villa"]; v.Active != nil || !errors.Is(v.LoadErr, backends.ErrUnavailable) {
			t.Fatalf("failing key: active %v, LoadErr %v", v.Active, v.LoadErr)
		}
		if o := ring.Keys["other"]; o.Active == nil || o.LoadErr != nil || o.Active.KID() == good.KID {
			t.Fatalf("healthy key: active %v, LoadErr %v", o.Active, o.LoadErr)
		}
		if _, _, err := e.m.Revoke(ctx, old.KID, t0, "leak", alice); err != nil {
			t.Fatal(err)
		}
		if err := replica.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		if st := lcFind(t, replica.Keyring().Keys["other"].Versions, old.KID).State; st != store.StateRevoked {
			t.Fatalf("the revocation did not reach the replica: %s", st)
		}
		e.b.failSigner.Store("")
		if err := replica.Reload(ctx); err != nil || replica.Keyring().Keys["villa"].Active == nil {
			t.Fatalf("recovery: %v", err)
		}
	})
}
