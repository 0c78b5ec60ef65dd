package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keysvc/keysvc/anchor"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlogclient"
)

// TestOfflineKMSCheckCostsWholeHistory (a review, session 47; fixed: only
// the version's own key is checked): the offline awskms
// commands (schedule-deletion, disable: a 60 s context) check the one
// version they act on with cliAnchorFlags.checkedVersion, which runs
// anchor.CheckAll — no look-up budget, nothing cached in a fresh CLI
// process — over the whole key history: every key's settings and ordinal
// markers and every version's later-state markers, one sequential log
// look-up each. On a node with 20 keys × 25 versions that is ~1,000
// look-ups for a command about one version of one key: at 60 ms a
// look-up (a remote log) the command runs out of its 60 s and refuses
// ("cannot check against the transparency log: context deadline
// exceeded"), whichever key the version belongs to.
func TestOfflineKMSCheckCostsWholeHistory(t *testing.T) {
	ctx := context.Background()
	st := migratedSQLite(t)
	const keys, versions = 20, 25
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := st.InTx(ctx, func(tx store.Tx) error {
		for k := 0; k < keys; k++ {
			name := fmt.Sprintf("key%02d", k)
			if err := tx.InsertKey(ctx, store.Key{Name: name, Issuer: name + ".example", Algorithm: "EdDSA", Backend: "software", CreatedAt: at}); err != nil {
				return err
			}
			for v := 0; v < versions; v++ {
				from, to := at.Add(time.Duration(v)*time.Hour), at.Add(time.Duration(v+1)*time.Hour)
				ver := store.KeyVersion{KID: fmt.Sprintf("%s.example-2026-01-01-%02d", name, v+1), KeyName: name, Algorithm: "EdDSA",
					BackendRef: fmt.Sprintf("awskms:eu-west-1:%s-%d", name, v),
					PublicJWK:  []byte(`{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}`),
					State:      store.StateRetired, CreatedAt: from, ActivatedAt: &from, RetiredAt: &to}
				if v == versions-1 {
					ver.State, ver.RetiredAt = store.StateActive, nil
				}
				if err := tx.InsertVersion(ctx, ver); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	key, err := anchor.GenerateKeyFile(filepath.Join(t.TempDir(), "k.json"))
	if err != nil {
		t.Fatal(err)
	}
	boot, err := key.BootstrapMarker()
	if err != nil {
		t.Fatal(err)
	}
	var probes atomic.Int64
	a, err := anchor.New(anchor.Config{Key: key, Logs: []tlogclient.Log{absentLog{}}, Store: st, Recorder: nopRecorder{},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Scanned: func(h [32]byte) bool { return false }})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil { // bootstrap: history anchored as it stands
		t.Fatal(err)
	}
	// A fresh offline command (its own process: nothing cached).
	a2, err := anchor.New(anchor.Config{Key: key, Logs: []tlogclient.Log{absentLog{}}, Store: st,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Scanned: func(h [32]byte) bool {
			if h == boot.Hash {
				return true
			}
			probes.Add(1)
			return false
		}})
	if err != nil {
		t.Fatal(err)
	}
	probes.Store(0)
	f := &cliAnchorFlags{anchor: a2}
	kid := "key00.example-2026-01-01-01"
	if _, _, err := f.checkedVersion(ctx, st, kid); err != nil {
		t.Fatal(err)
	}
	n := probes.Load()
	if own := int64(2*versions + 3); n > own {
		t.Errorf("checking one version (key00, %d versions) made %d log look-ups, the whole history's (%d keys); at 60 ms each that is %s of the command's 60 s",
			versions, n, keys, (time.Duration(n) * 60 * time.Millisecond).Round(time.Second))
	}
}
