package rotation_test

import (
	"errors"
	"testing"
	"time"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// TestDefaultPrepublish: a policy without prepublish uses the configured
// default, which also bounds rotation_period.
func TestDefaultPrepublish(t *testing.T) {
	forEachStore(t, func(t *testing.T, s store.Store) {
		clk := newClock(t0)
		b := newTestBackend(t)
		m := rotation.New(rotation.Config{Store: s, Backends: []backends.Backend{b}, Now: clk.Now, Logger: quietLogger(),
			DefaultPrepublish: 20 * time.Minute})
		if _, _, err := m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "villa", Issuer: issuer}, alice); err != nil {
			t.Fatal(err)
		}
		p, err := m.ScheduleRotation(ctx, "villa", bob)
		if err != nil {
			t.Fatal(err)
		}
		if !eqTime(p.ActivatesAt, tp(t0.Add(20*time.Minute))) {
			t.Fatalf("activates %s, want %s", fmtT(p.ActivatesAt), t0.Add(20*time.Minute))
		}
		_, err = m.SetPolicy(ctx, "villa", rotation.Policy{RotationPeriod: rotation.Duration(15 * time.Minute)}, bob)
		if !errors.Is(err, rotation.ErrInvalidRequest) {
			t.Fatalf("rotation_period below the default prepublish: %v", err)
		}
	})
}
