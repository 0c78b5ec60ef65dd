package tlogclient

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
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
