package tlogclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/keysvc/keysvc/tlogclient"
	"github.com/keysvc/keysvc/verifier"
)

// TestProveEarliestAnchor: Prove answers with the earliest archived tree that
// includes the leaf, not the log's newest, and the member verifies.
func TestProveEarliestAnchor(t *testing.T) {
	l := startLog(t)
	hl := l.httpLog(t)
	ctx := context.Background()
	add := func(jws string) {
		t.Helper()
		if _, err := hl.AddBatch(ctx, []tlogclient.Entry{{ArtifactType: "vrp_attestation", ArtifactHash: tlogclient.HashArtifact(jws)}}); err != nil {
			t.Fatal(err)
		}
		l.waitAll(t, []string{jws}, 10*time.Second)
	}
	add("eyJfirst.a.b")
	target := "eyJtarget.a.b"
	add(target)
	for _, j := range fakeJWS("later", 4) {
		add(j)
		time.Sleep(150 * time.Millisecond) // a checkpoint each (interval 100 ms)
	}
	newest, err := hl.Proof(ctx, tlogclient.HashArtifact(target), 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tlogclient.Prove(ctx, []tlogclient.Log{hl}, tlogclient.HashArtifact(target))
	if err != nil {
		t.Fatal(err)
	}
	var n, e struct {
		LeafIndex uint64 `json:"leaf_index"`
		TreeSize  uint64 `json:"tree_size"`
	}
	json.Unmarshal(newest, &n)
	json.Unmarshal(got, &e)
	if n.TreeSize != 6 || e.LeafIndex != 1 || e.TreeSize != 2 {
		t.Fatalf("newest proof at size %d; Prove chose size %d for leaf %d, want the earliest tree (2)", n.TreeSize, e.TreeSize, e.LeafIndex)
	}
	keys, err := verifier.ParseJWKS(mustGet(t, l.srv.URL+tlogclient.PathPrefix+"jwks.json"))
	if err != nil {
		t.Fatal(err)
	}
	anchor, err := verifier.VerifyTlog(got, target, keys)
	if err != nil || anchor.TreeSize != 2 || !anchor.Checkpoint {
		t.Fatalf("VerifyTlog of the earliest proof: %+v %v", anchor, err)
	}
	if _, err := tlogclient.Prove(ctx, []tlogclient.Log{hl}, tlogclient.HashArtifact("eyJnever.a.b")); !errors.Is(err, tlogclient.ErrNotFound) {
		t.Fatalf("Prove of an unknown leaf: %v, want ErrNotFound", err)
	}
}
