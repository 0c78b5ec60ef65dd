package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlogclient"
)

// owedLog records the hashes it is given; down: every batch fails.
type owedLog struct {
	url  string
	down bool
	mu   sync.Mutex
	got  map[[32]byte]bool
}

func (l *owedLog) URL() string { return l.url }
func (l *owedLog) AddBatch(_ context.Context, es []tlogclient.Entry) (*tlogclient.Promise, error) {
	if l.down {
		return nil, io.ErrUnexpectedEOF
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range es {
		l.got[e.ArtifactHash] = true
	}
	return &tlogclient.Promise{LogID: "test"}, nil
}
func (*owedLog) Proof(context.Context, [32]byte, uint64) ([]byte, error) {
	return nil, tlogclient.ErrNotFound
}
func (*owedLog) Archive(context.Context, uint64, int) ([]tlogclient.ArchivedTree, error) {
	return nil, nil
}

var owedQuiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func owedStore(t *testing.T, dir string) store.Outbox {
	ctx := context.Background()
	cfg := store.Config{SQLitePath: filepath.Join(dir, "keysvc.db")}
	if _, err := store.Migrate(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st.(store.Outbox)
}

// owedSetup is a data directory as serve leaves it: an SQLite outbox, the
// embedded log's directory with its URL file listing urls, and (open) the
// spool; spoolDir is where it is.
func owedSetup(t *testing.T, urls ...string) (ob store.Outbox, tdir, spoolDir string, sp *tlogclient.Spool) {
	dir := t.TempDir()
	ob = owedStore(t, dir)
	tdir = filepath.Join(dir, "tlog")
	if err := os.MkdirAll(tdir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tdir, embeddedURLFile), []byte(strings.Join(urls, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	spoolDir = filepath.Join(dir, spoolDirName)
	sp, err := tlogclient.OpenSpool(tlogclient.SpoolOptions{Dir: spoolDir, Logger: owedQuiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	return ob, tdir, spoolDir, sp
}

// owedDownClient is a client over sp whose logs, at urls, are down.
func owedDownClient(t *testing.T, sp *tlogclient.Spool, urls []string) *tlogclient.Client {
	var logs []tlogclient.Log
	for _, u := range urls {
		logs = append(logs, &owedLog{url: u, down: true})
	}
	c, err := tlogclient.New(tlogclient.Config{Spool: sp, Logs: logs, Logger: owedQuiet})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// owedOwe runs a client over sp with the logs at urls down, records jws and
// stops: what a run stopped with.
func owedOwe(t *testing.T, sp *tlogclient.Spool, jws string, urls ...string) {
	c := owedDownClient(t, sp, urls)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	if err := c.RecordJWS(context.Background(), []string{jws}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	cancel()
	<-done
}

func owedBacklog(t *testing.T, sp *tlogclient.Spool, urls ...string) map[string]store.OutboxStat {
	b, _, _ := owedDownClient(t, sp, urls).Backlog()
	return b
}

type failClaim struct{ store.Outbox }

func (failClaim) ClaimOutbox(context.Context, string, time.Time, time.Time, int) ([]store.OutboxRow, error) {
	return nil, errors.New("database is locked")
}

type failEnqueue struct{ store.Outbox }

func (failEnqueue) EnqueueOutbox(context.Context, []store.OutboxRow) ([]store.OutboxRow, error) {
	return nil, errors.New("disk full")
}

// TestEmbeddedOwedAfterAFailedStart: a start that fails after the spool
// cursor moved and before the outbox rows did (here the outbox read
// fails) leaves the earlier URL listed, so the next start, at yet another
// URL, still delivers what was owed (found by a review of the first fix,
// where the record was stranded under the failed start's URL).
func TestEmbeddedOwedAfterAFailedStart(t *testing.T) {
	ctx := context.Background()
	const url1, url2, url3 = "http://127.0.0.1:40001", "http://127.0.0.1:40002", "http://127.0.0.1:40003"
	ob, tdir, spoolDir, sp := owedSetup(t, url1)
	owedOwe(t, sp, "eyJ.owed.sig", url1)
	// Start 2 (url2): the outbox read fails, serve exits with the error.
	if err := moveEmbeddedOwed(ctx, owedQuiet, sp, spoolDir, failClaim{ob}, tdir, url2, nil); err == nil {
		t.Fatal("want the start to fail")
	}
	// Start 3 (url3): works.
	if err := moveEmbeddedOwed(ctx, owedQuiet, sp, spoolDir, ob, tdir, url3, nil); err != nil {
		t.Fatal(err)
	}
	if b := owedBacklog(t, sp, url3); b[url3].Rows != 1 {
		t.Fatalf("backlog of the embedded log at %s: %+v, want the 1 owed record", url3, b)
	}
}

// TestEmbeddedOwedLeavesARemoteLogsRecords: when the embedded log's
// earlier URL is now a configured log of its own (the embedded log ran on
// a fixed port, then the log ran out of process at that address), what is
// owed to that URL stays that log's and is not handed to the embedded log.
func TestEmbeddedOwedLeavesARemoteLogsRecords(t *testing.T) {
	ctx := context.Background()
	const remote, url3 = "http://127.0.0.1:8500", "http://127.0.0.1:40003"
	// Run 1: embedded log on 127.0.0.1:8500 (file left behind).
	ob, tdir, spoolDir, sp := owedSetup(t, remote)
	// Run 2: --tlog-embedded=false --tlog-url http://127.0.0.1:8500, log down.
	owedOwe(t, sp, "eyJ.owed-remote.sig", remote)
	// Run 3: --tlog-embedded=true (port 0) --tlog-url http://127.0.0.1:8500.
	if err := moveEmbeddedOwed(ctx, owedQuiet, sp, spoolDir, ob, tdir, url3, []string{remote}); err != nil {
		t.Fatal(err)
	}
	if b := owedBacklog(t, sp, remote, url3); b[remote].Rows != 1 {
		t.Fatalf("backlog of the remote log %s: %+v, want its 1 owed record", remote, b)
	}
}

// TestEmbeddedOwedOutboxRowsAfterAFailedMove: outbox rows claimed for a
// move that then fails (the enqueue) stay claimable: after going back to
// the earlier URL the client delivers them (the first fix leased them for
// 100 years).
func TestEmbeddedOwedOutboxRowsAfterAFailedMove(t *testing.T) {
	ctx := context.Background()
	const fixed, port0 = "http://127.0.0.1:8500", "http://127.0.0.1:40002"
	ob, tdir, spoolDir, sp := owedSetup(t, fixed)
	sp.Close() // outbox mode: this run has no spool
	now := time.Now()
	h := tlogclient.HashArtifact("eyJ.owed.sig")
	if _, err := ob.EnqueueOutbox(ctx, []store.OutboxRow{{LogURL: fixed, ArtifactType: "vrp_attestation", ArtifactHash: h, EnqueuedAt: now, LeaseUntil: now}}); err != nil {
		t.Fatal(err)
	}
	// Start with port 0: the enqueue fails, serve exits.
	if err := moveEmbeddedOwed(ctx, owedQuiet, nil, spoolDir, failEnqueue{ob}, tdir, port0, nil); err == nil {
		t.Fatal("want the start to fail")
	}
	// The user goes back to the fixed port.
	if err := moveEmbeddedOwed(ctx, owedQuiet, nil, spoolDir, ob, tdir, fixed, nil); err != nil {
		t.Fatal(err)
	}
	l := &owedLog{url: fixed, got: map[[32]byte]bool{}}
	c, err := tlogclient.New(tlogclient.Config{Outbox: ob, Logs: []tlogclient.Log{l}, Logger: owedQuiet, ClaimAllAtStart: true, Lease: 30 * time.Second, SweepEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { c.Run(rctx); close(done) }()
	time.Sleep(2 * time.Second)
	cancel()
	<-done
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.got[h] {
		t.Fatal("the outbox row owed to the embedded log was never delivered")
	}
}

// TestEmbeddedOwedThroughAnOutboxRun: what the spool owes the embedded log
// survives a run with --tlog-durability outbox between two spool runs. The
// outbox run has no spool of its own; it opens the one left behind to
// hand its cursor to the new URL (without that, it rewrote the URL file
// and the spool's cursor stayed under a URL no later start knew). While
// the spool is held (`keysvc tlog drain`), the earlier URL stays listed.
func TestEmbeddedOwedThroughAnOutboxRun(t *testing.T) {
	ctx := context.Background()
	const url1, url2, url3, url4 = "http://127.0.0.1:40001", "http://127.0.0.1:40002", "http://127.0.0.1:40003", "http://127.0.0.1:40004"
	ob, tdir, spoolDir, sp := owedSetup(t, url1)
	owedOwe(t, sp, "eyJ.owed.sig", url1) // run 1, spool mode: the log is down
	// Run 2, outbox mode, while a drain holds the spool: nothing can move.
	if err := moveEmbeddedOwed(ctx, owedQuiet, nil, spoolDir, ob, tdir, url2, nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(tdir, embeddedURLFile)); string(b) != url1+"\n"+url2+"\n" {
		t.Fatalf("URL file with the spool held: %q, want both URLs listed", b)
	}
	sp.Close()
	// Run 3, outbox mode: the left spool's cursor is handed on.
	if err := moveEmbeddedOwed(ctx, owedQuiet, nil, spoolDir, ob, tdir, url3, nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(tdir, embeddedURLFile)); string(b) != url3+"\n" {
		t.Fatalf("URL file: %q, want %q", b, url3+"\n")
	}
	// Run 4, spool mode again.
	sp, err := tlogclient.OpenSpool(tlogclient.SpoolOptions{Dir: spoolDir, Logger: owedQuiet})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if err := moveEmbeddedOwed(ctx, owedQuiet, sp, spoolDir, ob, tdir, url4, nil); err != nil {
		t.Fatal(err)
	}
	if b := owedBacklog(t, sp, url4); b[url4].Rows != 1 {
		t.Fatalf("backlog of the embedded log at %s: %+v, want the 1 owed record", url4, b)
	}
}

// TestEmbeddedOwedLostCursor: a power loss can leave the spool's records
// and the URL file on disk (both fsynced) but the cursor the run created
// for its embedded log URL cut or missing. The next start then has no
// position to hand on; it rewinds the new URL's cursor to the spool's
// first record, so the record owed is delivered (from a review: a missing
// cursor started the new URL at the spool's end, skipping it, silently).
func TestEmbeddedOwedLostCursor(t *testing.T) {
	for _, lost := range []string{"cut", "missing"} {
		t.Run(lost, func(t *testing.T) {
			ctx := context.Background()
			const url1, url2 = "http://127.0.0.1:40001", "http://127.0.0.1:40002"
			ob, tdir, spoolDir, sp := owedSetup(t, url1)
			owedOwe(t, sp, "eyJ.owed.sig", url1)
			cursors, err := filepath.Glob(filepath.Join(spoolDir, "cursor-*"))
			if err != nil || len(cursors) != 1 {
				t.Fatalf("cursor files %v, %v; want 1", cursors, err)
			}
			if lost == "missing" {
				err = os.Remove(cursors[0])
			} else {
				err = os.WriteFile(cursors[0], nil, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := moveEmbeddedOwed(ctx, owedQuiet, sp, spoolDir, ob, tdir, url2, nil); err != nil {
				t.Fatal(err)
			}
			if b := owedBacklog(t, sp, url2); b[url2].Rows != 1 {
				t.Fatalf("backlog of the embedded log at %s: %+v, want the 1 record owed to %s", url2, b, url1)
			}
		})
	}
}

// TestWarnLeftSpoolNamesTheEmbeddedLog: in the outbox mode, a spool left
// by a spool-mode run is reported per kind of log: what it owes a remote
// log, with `keysvc tlog drain`; what it owes the embedded log, with a
// spool-mode start of serve, as drain cannot submit to the embedded log
// (and, delivering to the remote logs only, would trim its segments).
func TestWarnLeftSpoolNamesTheEmbeddedLog(t *testing.T) {
	const embedded, remote = "http://127.0.0.1:40001", "https://log.example.test"
	_, _, spoolDir, sp := owedSetup(t, embedded)
	owedOwe(t, sp, "eyJ.owed.sig", embedded, remote)
	sp.Close()
	var out strings.Builder
	warnLeftSpool(slog.New(slog.NewTextHandler(&out, nil)), spoolDir,
		[]tlogclient.Log{&owedLog{url: embedded, down: true}, &owedLog{url: remote, down: true}}, embedded)
	for _, want := range []string{
		"still owes the embedded log leaves, and the outbox mode does not read it: start serve once with --tlog-durability spool to deliver them",
		"leaves=1",
		"run `keysvc tlog drain --spool DIR --tlog-url …`\" spool=" + spoolDir + " backlog=\"map[" + remote + ":{1 ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("warnings lack %q:\n%s", want, out.String())
		}
	}
	if strings.Count(out.String(), "level=WARN") != 2 {
		t.Errorf("want 2 warnings:\n%s", out.String())
	}
}
