package tlogclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

// TestSpoolWriteAtMatchesMappedCopy: an append of spoolWriteAtRecords or
// more records (a batch's) goes to the segment files with pwrite(2)
// (writeAtMapped) and leaves exactly the bytes the mapped copy leaves
// for the same records: here a batch of 100 that starts mid-segment and
// spans three 40-record segments, against the same records copied one at
// a time. Both spools then reopen to the same end and read back the same
// entries in order; and a batch whose next segment cannot be mapped keeps
// the records before it and fails closed, as the copy does.
func TestSpoolWriteAtMatchesMappedCopy(t *testing.T) {
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	at := time.Unix(1767225600, 123456789)
	hashes := make([][32]byte, 107)
	for i := range hashes {
		hashes[i] = HashArtifact(fmt.Sprintf("eyJ.artifact-%d.sig", i))
	}
	// runs: the appends each spool makes, as lengths over hashes in order.
	write := func(runs []int) string {
		dir := t.TempDir()
		sp, err := OpenSpool(SpoolOptions{Dir: dir, SegmentRecords: 40, Logger: discard})
		if err != nil {
			t.Fatal(err)
		}
		if !sp.mapped {
			t.Fatal("the write mode did not map its segment (fallocate unsupported on the test's file system?)")
		}
		next := 0
		for _, n := range runs {
			if err := sp.append(context.Background(), artifactCode(ArtifactAttestation), at, hashes[next:next+n]); err != nil {
				t.Fatal(err)
			}
			next += n
		}
		if got := sp.End(); got != uint64(len(hashes)) {
			t.Fatalf("runs %v: end %d, want %d", runs, got, len(hashes))
		}
		if err := sp.Close(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	singles := make([]int, len(hashes))
	for i := range singles {
		singles[i] = 1
	}
	copied := write(singles)
	batched := write([]int{3, 100, 4}) // 100 ≥ spoolWriteAtRecords: records 3..102 in segments 0, 1 and 2
	for k := range 3 {
		name := fmt.Sprintf("spool-%016x.bin", k)
		a, err := os.ReadFile(copied + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(batched + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		wantLen := min(40, len(hashes)-40*k) * SpoolRecordSize
		if len(a) != wantLen || string(a) != string(b) {
			t.Fatalf("%s: copied %d bytes, batched %d, want %d identical bytes", name, len(a), len(b), wantLen)
		}
	}
	sp, err := OpenSpool(SpoolOptions{Dir: batched, SegmentRecords: 40, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if got := sp.End(); got != uint64(len(hashes)) {
		t.Fatalf("reopened end %d, want %d", got, len(hashes))
	}
	var got []spoolEntry
	for start := uint64(0); start < sp.End(); {
		e, next, err := sp.read(start, 1000)
		if err != nil {
			t.Fatal(err)
		}
		got, start = append(got, e...), next
	}
	if len(got) != len(hashes) {
		t.Fatalf("read back %d records, want %d", len(got), len(hashes))
	}
	for i, e := range got {
		if e.seq != uint64(i) || e.entry.ArtifactHash != hashes[i] || e.entry.ArtifactType != ArtifactAttestation || !e.at.Equal(at) {
			t.Fatalf("record %d read back as %+v", i, e)
		}
	}

	// Fails closed: segment 1 cannot be mapped (a directory where its file
	// goes); a batch of 50 from record 30 writes 10 and fails.
	dir := t.TempDir()
	sp2, err := OpenSpool(SpoolOptions{Dir: dir, SegmentRecords: 40, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer sp2.Close()
	if err := os.Mkdir(sp2.segPath(1), 0o700); err != nil {
		t.Fatal(err)
	}
	code := artifactCode(ArtifactAttestation)
	if err := sp2.append(context.Background(), code, at, hashes[:30]); err != nil {
		t.Fatal(err)
	}
	if err := sp2.append(context.Background(), code, at, hashes[30:80]); err == nil || !strings.Contains(err.Error(), "spool write failed") {
		t.Fatalf("batch into an unmappable segment: %v, want the spool's failure", err)
	}
	if err := sp2.append(context.Background(), code, at, hashes[80:81]); err == nil || !strings.Contains(err.Error(), "spool write failed") {
		t.Fatalf("later append: %v, want the spool's failure", err)
	}
	if got := sp2.End(); got != 40 {
		t.Fatalf("spool end %d, want 40 (the records before the failure)", got)
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

// downLog fails every batch (a log that is down).
type downLog struct{ url string }

func (l downLog) URL() string { return l.url }
func (downLog) AddBatch(context.Context, []Entry) (*Promise, error) {
	return nil, io.ErrUnexpectedEOF
}
func (downLog) Proof(context.Context, [32]byte, uint64) ([]byte, error) { return nil, ErrNotFound }
func (downLog) Archive(context.Context, uint64, int) ([]ArchivedTree, error) {
	return nil, nil
}

// hashLog records the hashes it is given.
type hashLog struct {
	url string
	mu  sync.Mutex
	got map[[32]byte]bool
}

func (l *hashLog) URL() string { return l.url }
func (l *hashLog) AddBatch(_ context.Context, es []Entry) (*Promise, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range es {
		l.got[e.ArtifactHash] = true
	}
	return &Promise{LogID: "test"}, nil
}
func (*hashLog) Proof(context.Context, [32]byte, uint64) ([]byte, error) { return nil, ErrNotFound }
func (*hashLog) Archive(context.Context, uint64, int) ([]ArchivedTree, error) {
	return nil, nil
}

// TestSpoolMoveCursor: records owed to a log whose URL changed between
// runs (serve's embedded log on a new port; found by an attack review)
// reach it at its new URL once MoveCursor hands the old URL's position
// over, and only then: without it they stay owed to the old URL. When the
// new URL has a position too, the earlier one is kept.
func TestSpoolMoveCursor(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	run := func(sp *Spool, l Log, d time.Duration) {
		c, err := New(Config{Spool: sp, Logs: []Log{l}, FlushDelay: time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { c.Run(ctx); close(done) }()
		time.Sleep(d)
		cancel()
		<-done
	}
	owed := func(move bool) int {
		dir := t.TempDir()
		sp, err := OpenSpool(SpoolOptions{Dir: dir, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		// The first run: the log at the old URL is down while 3 records
		// are signed, and the run stops with them owed.
		c, err := New(Config{Spool: sp, Logs: []Log{downLog{"http://127.0.0.1:40001"}}, FlushDelay: time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { c.Run(ctx); close(done) }()
		for i := range 3 {
			if err := c.RecordJWS(context.Background(), []string{fmt.Sprintf("eyJ.owed-%d.sig", i)}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond)
		cancel()
		<-done
		sp.Close()
		sp, err = OpenSpool(SpoolOptions{Dir: dir, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer sp.Close()
		if move {
			if moved, err := sp.MoveCursor("http://127.0.0.1:40001", "http://127.0.0.1:40002"); err != nil || !moved {
				t.Fatalf("MoveCursor: %v %v", moved, err)
			}
			if moved, err := sp.MoveCursor("http://127.0.0.1:40001", "http://127.0.0.1:40002"); err != nil || moved {
				t.Fatalf("MoveCursor again: %v %v, want nothing to move", moved, err)
			}
		}
		l := &hashLog{url: "http://127.0.0.1:40002", got: map[[32]byte]bool{}}
		run(sp, l, time.Second)
		l.mu.Lock()
		defer l.mu.Unlock()
		for i := range 3 {
			if move && !l.got[HashArtifact(fmt.Sprintf("eyJ.owed-%d.sig", i))] {
				t.Fatalf("record %d did not reach the log at its new URL", i)
			}
		}
		return len(l.got)
	}
	if n := owed(true); n != 3 {
		t.Fatalf("with MoveCursor the log at its new URL got %d records, want the 3 owed", n)
	}
	if n := owed(false); n != 0 {
		t.Fatalf("without MoveCursor the log at its new URL got %d records: the test no longer shows what MoveCursor is for", n)
	}

	// Both URLs have positions: the earlier is kept.
	sp, err := OpenSpool(SpoolOptions{Dir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if err := sp.saveCursor("http://a", 7); err != nil {
		t.Fatal(err)
	}
	if err := sp.saveCursor("http://b", 9); err != nil {
		t.Fatal(err)
	}
	if moved, err := sp.MoveCursor("http://a", "http://b"); err != nil || !moved {
		t.Fatalf("MoveCursor: %v %v", moved, err)
	}
	if pos, ok := sp.loadCursor("http://b"); !ok || pos != 7 {
		t.Fatalf("cursor of the new URL: %d %v, want 7 (the earlier)", pos, ok)
	}
	if _, ok := sp.loadCursor("http://a"); ok {
		t.Fatal("the old URL's cursor is still there")
	}
}

// TestSpoolTornCursor: a cursor file cut by a power loss (saveCursor does
// not fsync) is read as position 0, so the log is delivered everything
// still on disk again; read as "never seen", it would start at the spool's
// end and skip what it was owed.
func TestSpoolTornCursor(t *testing.T) {
	sp, err := OpenSpool(SpoolOptions{Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	const u = "http://127.0.0.1:40001"
	for _, torn := range []string{"", "http://127.0", u, u + "\n", u + "\n1x"} {
		if err := os.WriteFile(sp.cursorPath(u), []byte(torn), 0o600); err != nil {
			t.Fatal(err)
		}
		if pos, ok := sp.loadCursor(u); !ok || pos != 0 {
			t.Errorf("cursor file %q: position %d, seen %v; want 0, true", torn, pos, ok)
		}
	}
	// A whole cursor of another URL under the same file name is not this
	// log's.
	if err := os.WriteFile(sp.cursorPath(u), []byte("http://other\n5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := sp.loadCursor(u); ok {
		t.Error("another URL's cursor read as this log's")
	}
	if err := sp.saveCursor(u, 12); err != nil {
		t.Fatal(err)
	}
	if pos, ok := sp.loadCursor(u); !ok || pos != 12 {
		t.Errorf("saved cursor: %d %v, want 12, true", pos, ok)
	}
}

// TestSpoolSendersUnsubscribe: a sender's wake channel leaves the spool
// when its Run returns, so a spool used by Run after Run (serve's tests,
// `tlog drain` after a Run) does not keep, and signal on every append,
// the channels of senders long gone.
func TestSpoolSendersUnsubscribe(t *testing.T) {
	sp, err := OpenSpool(SpoolOptions{Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	wakes := func() int {
		sp.wakeMu.Lock()
		defer sp.wakeMu.Unlock()
		return len(sp.wakes)
	}
	for run := range 3 {
		c, err := New(Config{Spool: sp, Logs: []Log{stubLog{}, downLog{url: "http://127.0.0.1:2"}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { c.Run(ctx); close(done) }()
		deadline := time.Now().Add(5 * time.Second)
		for wakes() != 2 {
			if time.Now().After(deadline) {
				t.Fatalf("run %d: %d wake channels, want the 2 senders'", run, wakes())
			}
			time.Sleep(time.Millisecond)
		}
		cancel()
		<-done
		if n := wakes(); n != 0 {
			t.Fatalf("after run %d: %d wake channels left, want 0", run, n)
		}
	}
}

// tenRecordSpool opens a spool of 4-record segments holding records 0..9
// (closed at the end of the test).
func tenRecordSpool(t *testing.T) *Spool {
	t.Helper()
	sp, err := OpenSpool(SpoolOptions{Dir: t.TempDir(), SegmentRecords: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	hashes := make([][32]byte, 10)
	for i := range hashes {
		hashes[i][0] = byte(i + 1)
	}
	if err := sp.append(context.Background(), artifactCode(ArtifactAttestation), time.Now(), hashes); err != nil {
		t.Fatal(err)
	}
	return sp
}

// TestSpoolUnlisted: the leaves still on disk that logs with a cursor, but
// not among the configured ones, have not been delivered — what a client
// configured without them would let go (keysvc tlog drain refuses then).
// A cursor file cut by a power loss is its log's by its file name: a
// listed log's is not counted, an unlisted one's is owed everything.
func TestSpoolUnlisted(t *testing.T) {
	sp := tenRecordSpool(t)
	for u, pos := range map[string]uint64{
		"http://listed":      0,  // configured: never counted
		"http://listed-torn": 0,  // configured, its file cut below
		"http://owed":        4,  // owed records 4..9
		"http://done":        10, // has everything
		"http://past":        99, // past the end: owed the whole spool, as startSpool reads it
		"http://torn":        10, // not configured, its file cut below
	} {
		if err := sp.saveCursor(u, pos); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range []string{"http://listed-torn", "http://torn"} {
		if err := os.WriteFile(sp.cursorPath(u), []byte("http://to"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	torn := "(cursor file " + filepath.Base(sp.cursorPath("http://torn")) + ", its URL cut)"
	listed := []string{"http://listed", "http://listed-torn"}
	if got, want := sp.Unlisted(listed), map[string]uint64{"http://owed": 6, "http://past": 10, torn: 10}; !maps.Equal(got, want) {
		t.Fatalf("Unlisted = %v, want %v", got, want)
	}
	if got := sp.Unlisted(append(listed, "http://owed", "http://past", "http://torn")); len(got) != 0 {
		t.Fatalf("Unlisted with every owed log listed = %v, want none", got)
	}
	// Segments 0 and 1 (records 0..7) deleted: only records 8 and 9 are
	// still there to be owed.
	sp.trim(8)
	if got, want := sp.Unlisted(listed), map[string]uint64{"http://owed": 2, "http://past": 2, torn: 2}; !maps.Equal(got, want) {
		t.Fatalf("Unlisted after a trim = %v, want %v", got, want)
	}
}

// TestOpenExistingSpool: SpoolOptions.Existing refuses a directory that is
// missing or holds no spool, and creates nothing there; a spool opened
// once before (its LOCK file) opens.
func TestOpenExistingSpool(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	empty := t.TempDir()
	for _, dir := range []string{filepath.Join(empty, "missing"), empty} {
		if _, err := OpenSpool(SpoolOptions{Dir: dir, Existing: true, Logger: quiet}); !errors.Is(err, ErrNotASpool) {
			t.Fatalf("OpenSpool(%s, Existing) = %v, want ErrNotASpool", dir, err)
		}
	}
	if ents, err := os.ReadDir(empty); err != nil || len(ents) != 0 {
		t.Fatalf("a refused OpenSpool left %v (%v)", ents, err)
	}
	sp, err := OpenSpool(SpoolOptions{Dir: empty, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	sp.Close()
	sp, err = OpenSpool(SpoolOptions{Dir: empty, Existing: true, Logger: quiet})
	if err != nil {
		t.Fatalf("OpenSpool of a spool, Existing: %v", err)
	}
	sp.Close()
}

// TestSpoolMarkUnlisted: a client that starts without a log marks that
// log's cursor with the spool's end (once), so the leaves appended later
// are not counted as owed to it, and the count reaches 0 once the
// configured logs' trimming deleted what it was owed. The mark does not
// move the log's position: configured again, it is delivered everything
// after it, and its next cursor write drops the mark.
func TestSpoolMarkUnlisted(t *testing.T) {
	sp, err := OpenSpool(SpoolOptions{Dir: t.TempDir(), SegmentRecords: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	appendN := func(n int) {
		t.Helper()
		hashes := make([][32]byte, n)
		for i := range hashes {
			hashes[i][0] = byte(sp.End()) + byte(i) + 1
		}
		if err := sp.append(context.Background(), artifactCode(ArtifactAttestation), time.Now(), hashes); err != nil {
			t.Fatal(err)
		}
	}
	file := func(u string) string {
		t.Helper()
		b, err := os.ReadFile(sp.cursorPath(u))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	appendN(10)
	for u, pos := range map[string]uint64{"http://listed": 0, "http://owed": 4, "http://done": 10} {
		if err := sp.saveCursor(u, pos); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(sp.cursorPath("http://torn"), []byte("http://to"), 0o600); err != nil {
		t.Fatal(err)
	}
	listed := []string{"http://listed"}
	torn := "(cursor file " + filepath.Base(sp.cursorPath("http://torn")) + ", its URL cut)"

	sp.markUnlisted(listed)
	for u, want := range map[string]string{
		"http://listed": "http://listed\n0\n",
		"http://owed":   "http://owed\n4\nunlisted-at 10\n",
		"http://done":   "http://done\n10\nunlisted-at 10\n",
		"http://torn":   "http://to", // its log is unknown: left as it is
	} {
		if got := file(u); got != want {
			t.Errorf("cursor of %s = %q, want %q", u, got, want)
		}
	}
	appendN(6) // records 10..15, signed without those logs
	sp.markUnlisted(listed)
	if got, want := file("http://owed"), "http://owed\n4\nunlisted-at 10\n"; got != want {
		t.Errorf("a second start moved the mark: %q, want %q", got, want)
	}
	// Before the mark, owed counted 12 and done 6: the leaves signed after
	// they were dropped.
	if got, want := sp.Unlisted(listed), map[string]uint64{"http://owed": 6, torn: 16}; !maps.Equal(got, want) {
		t.Fatalf("Unlisted = %v, want %v", got, want)
	}
	if pos, ok := sp.loadCursor("http://owed"); pos != 4 || !ok {
		t.Fatalf("loadCursor of a marked cursor = %d, %v; want 4, true", pos, ok)
	}
	sp.trim(12) // segments 0..2 (records 0..11) deleted: what owed was owed is gone
	if got, want := sp.Unlisted(listed), map[string]uint64{torn: 4}; !maps.Equal(got, want) {
		t.Fatalf("Unlisted after the trim = %v, want %v", got, want)
	}
	if err := sp.saveCursor("http://owed", 16); err != nil { // configured again
		t.Fatal(err)
	}
	if got, want := file("http://owed"), "http://owed\n16\n"; got != want {
		t.Errorf("cursor of a log configured again = %q, want %q", got, want)
	}
}

// runOnSpool is one run of a replica on sp with logs: a client starts
// (startSpool: cursors, marks), records n leaves, waits (up to 5 s) until
// every log that takes leaves (*hashLog) has the whole spool, and stops.
func runOnSpool(t *testing.T, sp *Spool, lg *slog.Logger, logs []Log, n int) {
	t.Helper()
	c, err := New(Config{Spool: sp, Logs: logs, Logger: lg, FlushDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for range n {
		if err := c.Record(context.Background(), ArtifactAttestation, fmt.Sprint("leaf-", sp.End())); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, l := range c.logs {
		if _, up := l.log.(*hashLog); !up {
			continue
		}
		for {
			l.mu.Lock()
			a := l.spool.acked
			l.mu.Unlock()
			if a == sp.End() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not take the spool: acked %d of %d", l.url, a, sp.End())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestSpoolMarkStaleAfterRelisting: a log dropped (marked unlisted-at 4),
// then configured again while it takes nothing (down, bad token…) and 6
// more leaves are signed, then dropped again, is owed all 10, and 2 once
// the configured log's trimming leaves only 8 and 9 on disk. (From a
// review: the first version dropped the mark only at the log's next
// cursor write, which never came, so the old mark stayed and the count
// said 4, then 0.)
func TestSpoolMarkStaleAfterRelisting(t *testing.T) {
	lg := slog.New(slog.NewTextHandler(io.Discard, nil))
	sp, err := OpenSpool(SpoolOptions{Dir: t.TempDir(), SegmentRecords: 4, Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	L := &hashLog{url: "http://listed", got: map[[32]byte]bool{}}
	X := downLog{url: "http://x"}
	runOnSpool(t, sp, lg, []Log{L, X}, 4) // X owed 0..3
	runOnSpool(t, sp, lg, []Log{L}, 0)    // X dropped: marked unlisted-at 4
	runOnSpool(t, sp, lg, []Log{L, X}, 6) // X configured again, takes nothing: owed 0..9
	if b, _ := os.ReadFile(sp.cursorPath(X.url)); string(b) != "http://x\n0\n" {
		t.Errorf("X's cursor file after the run it was configured in: %q, want the mark dropped", b)
	}
	// X dropped again: at this start leaves 0..9 are on disk and X took none of them.
	if got, want := sp.Unlisted([]string{L.url}), map[string]uint64{X.url: 10}; !maps.Equal(got, want) {
		t.Errorf("before the start without X: Unlisted = %v, want %v (first=%d end=%d)", got, want, sp.first.Load(), sp.End())
	}
	runOnSpool(t, sp, lg, []Log{L}, 0) // serve's start warning and drain's refusal read this
	if got, want := sp.Unlisted([]string{L.url}), map[string]uint64{X.url: 2}; !maps.Equal(got, want) {
		t.Errorf("after it trimmed: Unlisted = %v, want %v (leaves 8, 9 are on disk, X never took them; first=%d end=%d)", got, want, sp.first.Load(), sp.End())
	}
}

// TestSpoolMarkRelistedWhileDown: X took everything (cursor 4), was
// dropped (unlisted-at 4), configured again while down (6 leaves signed,
// none taken), and dropped again: it is owed those 6. (The first version
// said nothing at all: no warning, no refusal, and the 6 leaves went with
// their segments.)
func TestSpoolMarkRelistedWhileDown(t *testing.T) {
	lg := slog.New(slog.NewTextHandler(io.Discard, nil))
	sp, err := OpenSpool(SpoolOptions{Dir: t.TempDir(), Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	L := &hashLog{url: "http://listed", got: map[[32]byte]bool{}}
	runOnSpool(t, sp, lg, []Log{L, &hashLog{url: "http://x", got: map[[32]byte]bool{}}}, 4) // X takes 0..3
	runOnSpool(t, sp, lg, []Log{L}, 0)                                                      // X dropped: "unlisted-at 4"
	runOnSpool(t, sp, lg, []Log{L, downLog{url: "http://x"}}, 6)                            // X again, down: owed 4..9
	if got := sp.Unlisted([]string{L.url}); got["http://x"] != 6 {
		t.Errorf("X dropped again, owed leaves 4..9 on disk: Unlisted = %v, want http://x:6", got)
	}
}

// TestSpoolMarkCut: a mark cut inside its number by a power loss
// ("unlisted-at 1" of "unlisted-at 10", no final newline) is ignored, as a
// cut position is: the log is counted as owed everything after its
// cursor, not less.
func TestSpoolMarkCut(t *testing.T) {
	sp := tenRecordSpool(t)
	if err := os.WriteFile(sp.cursorPath("http://x"), []byte("http://x\n4\nunlisted-at 1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := sp.Unlisted([]string{"http://l"}); got["http://x"] != 6 {
		t.Errorf("cut mark: Unlisted = %v, want http://x:6 (the cut mark ignored, as a cut position is)", got)
	}
}
