package tlogclient

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestSpoolWriteFailureFailsClosed: when a group's write fails (here: the
// segment open read-only, as a disk error would), the requests in it get
// the error, every later Record fails too (nothing is answered that is
// not durable), and Ready names the failure. (The group committer: the
// fdatasync mode.)
func TestSpoolWriteFailureFailsClosed(t *testing.T) {
	dir := t.TempDir()
	sp, err := OpenSpool(SpoolOptions{Dir: dir, Sync: SpoolSyncFdatasync, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	ro, err := os.OpenFile(sp.segPath(0), os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	sp.wfile, sp.wseg = ro, 0 // before the first append: the writer has not touched it
	c, err := New(Config{Spool: sp, Logs: []Log{stubLog{}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RecordJWS(context.Background(), []string{"eyJa.b.c"}); err == nil {
		t.Fatal("Record succeeded on a failing spool")
	}
	if err := c.RecordJWS(context.Background(), []string{"eyJd.e.f"}); err == nil || !strings.Contains(err.Error(), "spool write failed") {
		t.Fatalf("second Record: %v, want the spool's failure", err)
	}
	if err := c.Ready(); err == nil || !strings.Contains(err.Error(), "spool write failed") {
		t.Fatalf("Ready: %v, want the spool's failure", err)
	}
	if got := sp.End(); got != 0 {
		t.Fatalf("spool end %d after failed writes, want 0", got)
	}
}

// TestSpoolMappedFailureFailsClosed: the mapped mode (write) fails closed
// the same way when the next segment cannot be mapped (here: a directory
// where its file goes): the records that fit before it stay, the request
// that needed the new segment and every later one fail, Ready names it.
func TestSpoolMappedFailureFailsClosed(t *testing.T) {
	dir := t.TempDir()
	sp, err := OpenSpool(SpoolOptions{Dir: dir, SegmentRecords: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if !sp.mapped {
		t.Fatal("the write mode did not map its segment (fallocate unsupported on the test's file system?)")
	}
	if err := os.Mkdir(sp.segPath(1), 0o700); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Spool: sp, Logs: []Log{stubLog{}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RecordJWS(context.Background(), []string{"eyJa.b.c", "eyJd.e.f"}); err != nil {
		t.Fatal(err)
	}
	if err := c.RecordJWS(context.Background(), []string{"eyJg.h.i"}); err == nil || !strings.Contains(err.Error(), "spool write failed") {
		t.Fatalf("Record into an unmappable segment: %v, want the spool's failure", err)
	}
	if err := c.RecordJWS(context.Background(), []string{"eyJj.k.l"}); err == nil || !strings.Contains(err.Error(), "spool write failed") {
		t.Fatalf("later Record: %v, want the spool's failure", err)
	}
	if err := c.Ready(); err == nil || !strings.Contains(err.Error(), "spool write failed") {
		t.Fatalf("Ready: %v, want the spool's failure", err)
	}
	if got := sp.End(); got != 2 {
		t.Fatalf("spool end %d, want 2 (the records before the failure)", got)
	}
}

type stubLog struct{}

func (stubLog) URL() string { return "http://127.0.0.1:1" }
func (stubLog) AddBatch(context.Context, []Entry) (*Promise, error) {
	return nil, io.ErrUnexpectedEOF
}
func (stubLog) Proof(context.Context, [32]byte, uint64) ([]byte, error) { return nil, ErrNotFound }
func (stubLog) Archive(context.Context, uint64, int) ([]ArchivedTree, error) {
	return nil, nil
}

// chanLog promises every batch and reports its size on got.
type chanLog struct{ got chan int }

func (chanLog) URL() string { return "http://127.0.0.1:1" }
func (l chanLog) AddBatch(_ context.Context, e []Entry) (*Promise, error) {
	l.got <- len(e)
	return &Promise{LogID: "test"}, nil
}
func (chanLog) Proof(context.Context, [32]byte, uint64) ([]byte, error) { return nil, ErrNotFound }
func (chanLog) Archive(context.Context, uint64, int) ([]ArchivedTree, error) {
	return nil, nil
}

// TestSpoolWakesParkedSender: a mapped append wakes a sender only when one
// is parked (Spool.parked); a record appended while the sender waits is
// sent after FlushDelay, not at the sender's one-second safety tick, every
// time the sender parks again.
func TestSpoolWakesParkedSender(t *testing.T) {
	sp, err := OpenSpool(SpoolOptions{Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if !sp.mapped {
		t.Fatal("the write mode did not map its segment (fallocate unsupported on the test's file system?)")
	}
	log := chanLog{got: make(chan int, 8)}
	c, err := New(Config{Spool: sp, Logs: []Log{log}, FlushDelay: time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for round := range 3 {
		deadline := time.Now().Add(5 * time.Second)
		for sp.parked.Load() != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the sender never parked", round)
			}
			time.Sleep(time.Millisecond)
		}
		start := time.Now()
		if err := c.RecordJWS(context.Background(), []string{fmt.Sprintf("eyJa.b.%d", round)}); err != nil {
			t.Fatal(err)
		}
		select {
		case n := <-log.got:
			if n != 1 {
				t.Fatalf("round %d: batch of %d, want 1", round, n)
			}
			if el := time.Since(start); el > 700*time.Millisecond {
				t.Fatalf("round %d: sent after %v: the append did not wake the parked sender", round, el)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: nothing sent", round)
		}
	}
}

// TestSpoolCommitMetrics: the record-wait and group-size histograms are
// observed where records are committed in groups (fdatasync here) and not
// on the mapped path, which has no commit (ADR 0033 addendum).
func TestSpoolCommitMetrics(t *testing.T) {
	for _, tc := range []struct {
		sync string
		want uint64
	}{{SpoolSyncWrite, 0}, {SpoolSyncFdatasync, 3}} {
		t.Run(tc.sync, func(t *testing.T) {
			sp, err := OpenSpool(SpoolOptions{Dir: t.TempDir(), Sync: tc.sync, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer sp.Close()
			c, err := New(Config{Spool: sp, Logs: []Log{stubLog{}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if err := c.RecordJWS(context.Background(), []string{fmt.Sprintf("eyJa.b.%d", i)}); err != nil {
					t.Fatal(err)
				}
			}
			if got := histogramCount(t, c.m.recordSeconds); got != tc.want {
				t.Errorf("keysvc_tlog_record_duration_seconds count %d, want %d", got, tc.want)
			}
			if got := histogramCount(t, c.m.groupRows); got != tc.want {
				t.Errorf("keysvc_tlog_group_commit_rows count %d, want %d", got, tc.want)
			}
		})
	}
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestHashArtifact: SHA-256 of the artifact's exact bytes (FIPS 180-4
// test vector "abc"; the empty string), hashed in place, without a copy.
func TestHashArtifact(t *testing.T) {
	for in, want := range map[string]string{
		"":    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"abc": "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
	} {
		if got := FormatHash(HashArtifact(in)); got != want {
			t.Errorf("HashArtifact(%q) = %s, want %s", in, got, want)
		}
	}
	jws := strings.Repeat("eyJhbGciOiJFZERTQSJ9.", 30)
	if n := testing.AllocsPerRun(100, func() { _ = HashArtifact(jws) }); n != 0 {
		t.Errorf("HashArtifact of a %d-byte JWS: %v allocations, want 0", len(jws), n)
	}
}
