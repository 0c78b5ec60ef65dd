package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/tlog"
	"github.com/keysvc/keysvc/tlog/tlogfmt"
	"github.com/keysvc/keysvc/tlogclient"
)

// TestEmbeddedPromiseChecksArtifactType: the log keeps one entry per
// hash, so a hash someone logged first under another artifact type is
// echoed with that type. The embedded log's AddBatch refuses that promise
// (ErrBadPromise, as tlogclient.HTTPLog does) instead of taking the other
// type's leaf as this artifact's. (From an attack review, session 37.)
func TestEmbeddedPromiseChecksArtifactType(t *testing.T) {
	ctx := context.Background()
	op, err := tlog.New(ctx, tlog.Config{Dir: t.TempDir(), Origin: "log.example.test/vrp",
		Signer: ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)), CheckpointInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close(ctx) //nolint:errcheck // test cleanup
	srv := httptest.NewServer(op.Handler())
	defer srv.Close()
	h := sha256.Sum256([]byte("the attestation's JWS"))
	body := `{"entries":[{"artifact_type":"` + tlogfmt.ArtifactStatusEvent + `","artifact_hash":"` + tlogclient.FormatHash(h) + `"}]}`
	resp, err := http.Post(srv.URL+tlogfmt.PathPrefix+tlogfmt.EndpointAddBatch, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the first add-batch (as %s): HTTP %d", tlogfmt.ArtifactStatusEvent, resp.StatusCode)
	}
	l := embeddedLog{op: op}
	p, err := l.AddBatch(ctx, []tlogclient.Entry{{ArtifactType: tlogfmt.ArtifactAttestation, ArtifactHash: h}})
	want := "entry 0 is not the one submitted (artifact_type vrp_status_event, submitted vrp_attestation)"
	if !errors.Is(err, tlogclient.ErrBadPromise) || !strings.Contains(err.Error(), want) || p != nil {
		t.Fatalf("AddBatch of a hash the log holds as %s: %+v, %v; want ErrBadPromise naming the types", tlogfmt.ArtifactStatusEvent, p, err)
	}
	// The same hash and type as logged is promised, at the leaf it has.
	p, err = l.AddBatch(ctx, []tlogclient.Entry{{ArtifactType: tlogfmt.ArtifactStatusEvent, ArtifactHash: h}})
	if err != nil || len(p.Entries) != 1 || p.Entries[0].LeafIndex != 0 || p.Entries[0].ArtifactType != tlogfmt.ArtifactStatusEvent {
		t.Fatalf("AddBatch of the hash as logged: %+v, %v; want leaf 0", p, err)
	}
}
