package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlog"
	"github.com/keysvc/keysvc/tlog/tlogfmt"
	"github.com/keysvc/keysvc/tlogclient"
)

// TestEmbeddedPromiseChecksArtifactType: the log keeps one entry per
// hash, so a hash someone logged first under another artifact type is
// echoed with that type. The embedded log's AddBatch reports it as a
// *tlogclient.TypeConflictError (as tlogclient.HTTPLog does) instead of
// taking the other type's leaf as this artifact's. (From an attack
// review, session 37; a conflict rather than a plain ErrBadPromise since
// ADR 0043.)
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
	var tc *tlogclient.TypeConflictError
	want := []tlogclient.TypeConflict{{Index: 0, Entry: tlogclient.Entry{ArtifactType: tlogfmt.ArtifactAttestation, ArtifactHash: h}, LoggedType: tlogfmt.ArtifactStatusEvent}}
	if !errors.As(err, &tc) || !errors.Is(err, tlogclient.ErrBadPromise) || !reflect.DeepEqual(tc.Conflicts, want) || p != nil {
		t.Fatalf("AddBatch of a hash the log holds as %s: %+v, %v; want a TypeConflictError naming the types", tlogfmt.ArtifactStatusEvent, p, err)
	}
	// The same hash and type as logged is promised, at the leaf it has.
	p, err = l.AddBatch(ctx, []tlogclient.Entry{{ArtifactType: tlogfmt.ArtifactStatusEvent, ArtifactHash: h}})
	if err != nil || len(p.Entries) != 1 || p.Entries[0].LeafIndex != 0 || p.Entries[0].ArtifactType != tlogfmt.ArtifactStatusEvent {
		t.Fatalf("AddBatch of the hash as logged: %+v, %v; want leaf 0", p, err)
	}
}

// TestMoveEmbeddedOwedOutbox: with --tlog-durability outbox, the rows
// owed to the embedded log's previous URL are enqueued again for its new
// URL and the originals deleted; another log's rows are left alone, and
// the file then names the new URL (a second start moves nothing).
func TestMoveEmbeddedOwedOutbox(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ob := owedStore(t, dir) // a migrated SQLite key history's outbox
	const url1, url2, other = "http://127.0.0.1:40001", "http://127.0.0.1:40002", "https://log.example.test"
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	var rows []store.OutboxRow
	for i := range 3 {
		rows = append(rows, store.OutboxRow{LogURL: url1, ArtifactType: "vrp_attestation", ArtifactHash: [32]byte{byte(i + 1)}, EnqueuedAt: at, LeaseUntil: at.Add(time.Hour)})
	}
	rows = append(rows, store.OutboxRow{LogURL: other, ArtifactType: "vrp_attestation", ArtifactHash: [32]byte{9}, EnqueuedAt: at, LeaseUntil: at})
	if _, err := ob.EnqueueOutbox(ctx, rows); err != nil {
		t.Fatal(err)
	}
	tdir := filepath.Join(dir, "tlog")
	if err := os.MkdirAll(tdir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tdir, embeddedURLFile), []byte(url1+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logBuf strings.Builder
	if err := moveEmbeddedOwed(ctx, slog.New(slog.NewTextHandler(&logBuf, nil)), nil, filepath.Join(dir, spoolDirName), ob, tdir, url2, nil); err != nil {
		t.Fatal(err)
	}
	backlog, err := ob.OutboxBacklog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := backlog[url1]; ok || backlog[url2].Rows != 3 || !backlog[url2].Oldest.Equal(at) || backlog[other].Rows != 1 {
		t.Fatalf("backlog after the move: %+v, want 3 rows (enqueued %s) for %s, none for %s, 1 for %s", backlog, at, url2, url1, other)
	}
	claimed, err := ob.ClaimOutbox(ctx, url2, time.Now().Add(time.Second), time.Now().Add(time.Minute), 10)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claiming the moved rows at once: %d rows, %v", len(claimed), err)
	}
	for i, r := range claimed {
		if r.ArtifactHash != ([32]byte{byte(i + 1)}) || r.ArtifactType != "vrp_attestation" {
			t.Fatalf("moved row %d: %+v", i, r)
		}
	}
	if !strings.Contains(logBuf.String(), "rows=3") {
		t.Errorf("the move was not logged:\n%s", logBuf.String())
	}
	if got := strings.TrimSpace(mustRead(t, filepath.Join(tdir, embeddedURLFile))); got != url2 {
		t.Fatalf("%s holds %q, want %q", embeddedURLFile, got, url2)
	}
	if err := moveEmbeddedOwed(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, filepath.Join(dir, spoolDirName), ob, tdir, url2, nil); err != nil {
		t.Fatal(err)
	}
}

// TestServeStopDeliversSpool: a signature answered just before a graceful
// stop reaches the embedded log before the process exits; the spool owes
// no log anything afterwards. (Before, its leaf waited in the spool for the
// send loop's 100 ms gathering and was delivered only at the next start.)
func TestServeStopDeliversSpool(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, nil, "--dev", "--data-dir", dir)
	tok, err := os.ReadFile(filepath.Join(dir, "dev-token"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.SignURL+"/v1/keys/dev/mcp-transport",
		strings.NewReader(`{"tool":"get_verified_stay_offer","arguments":{"guests":2}}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sign: %d", resp.StatusCode)
	}
	srv.stop(t)
	if out := srv.stderr.String(); strings.Contains(out, "stopping with leaves") {
		t.Errorf("stop warned of owed leaves:\n%s", out)
	}
	sp, err := tlogclient.OpenSpool(tlogclient.SpoolOptions{Dir: filepath.Join(dir, "tlog-spool"), Existing: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if sp.End() == 0 {
		t.Fatal("the spool holds no leaf: the signature was not recorded")
	}
	if owed := sp.Unlisted(nil); len(owed) != 0 {
		t.Fatalf("after a graceful stop the spool owes %v, want nothing", owed)
	}
}
