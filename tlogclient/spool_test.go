package tlogclient_test

import (
	"context"
	"encoding/hex"
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

func openSpool(t *testing.T, dir string, segRecs int) *tlogclient.Spool {
	t.Helper()
	sp, err := tlogclient.OpenSpool(tlogclient.SpoolOptions{Dir: dir, SegmentRecords: segRecs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "spool-*.bin"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m
}

func waitBacklogEmpty(t *testing.T, c *tlogclient.Client, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		b, _, _ := c.Backlog()
		if len(b) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("spool backlog not empty: %v", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSpoolRecordLayout: one record is exactly the 64 bytes ADR 0024
// documents (magic, type code, Unix nanoseconds, hash, CRC-32C).
func TestSpoolRecordLayout(t *testing.T) {
	dir := t.TempDir()
	sp := openSpool(t, dir, 0)
	l := startLog(t)
	l.down.Store(true)
	at := time.Unix(1767225600, 123456789) // 2026-01-01T00:00:00.123456789Z; expected bytes computed independently (Python: struct, hashlib, a bitwise CRC-32C)
	c, stop := startClient(t, tlogclient.Config{Spool: sp, Logs: []tlogclient.Log{l.httpLog(t)}, Now: func() time.Time { return at }})
	if err := c.Record(context.Background(), tlogclient.ArtifactStatusEvent, "abc"); err != nil {
		t.Fatal(err)
	}
	stop()
	sp.Close()
	b, err := os.ReadFile(filepath.Join(dir, "spool-0000000000000000.bin"))
	if err != nil {
		t.Fatal(err)
	}
	const want = "56525331" + "03" + "000000" + "18867251f555cd15" +
		"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" + // SHA-256("abc")
		"000000000000000000000000" + "e6a012cd"
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("record\n got %s\nwant %s", got, want)
	}
}

// TestSpoolDeliversAndTrims: leaves recorded concurrently reach a real log
// as the exact JWS's leaf; delivered segments are deleted (only the one
// being written stays), and the cursor survives a restart (nothing is
// owed afterwards).
func TestSpoolDeliversAndTrims(t *testing.T) {
	dir := t.TempDir()
	sp := openSpool(t, dir, 64)
	l := startLog(t)
	c, stop := startClient(t, tlogclient.Config{Spool: sp, Logs: []tlogclient.Log{l.httpLog(t)}})
	jws := fakeJWS("spool", 300)
	var wg sync.WaitGroup
	for i := 0; i < 30; i++ {
		wg.Go(func() {
			if err := c.RecordJWS(context.Background(), jws[i*10:i*10+10]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := sp.End(); got != 300 {
		t.Fatalf("spool end %d, want 300", got)
	}
	l.waitAll(t, jws, 20*time.Second)
	waitBacklogEmpty(t, c, 10*time.Second)
	if err := c.Ready(); err != nil {
		t.Errorf("Ready: %v", err)
	}
	if got := metricSum(t, c, "keysvc_tlog_submitted_entries_total"); got != 300 {
		t.Errorf("submitted entries %v, want 300", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		segs := segmentFiles(t, dir)
		if len(segs) == 1 && segs[0] == "spool-0000000000000004.bin" { // records 256–299
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("segments %v, want only spool-0000000000000004.bin", segs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	sp.Close()
	sp2 := openSpool(t, dir, 64)
	defer sp2.Close()
	c2, _ := startClient(t, tlogclient.Config{Spool: sp2, Logs: []tlogclient.Log{l.httpLog(t)}})
	if b, _, _ := c2.Backlog(); len(b) != 0 {
		t.Fatalf("after a restart the spool owes %v, want nothing", b)
	}
}

// TestSpoolTrimKeepsNumbering: when the last segment is full and every
// log has it, it is still kept, so that a restart numbers the next record
// after it (not from 0, below the logs' cursors) and delivers it.
func TestSpoolTrimKeepsNumbering(t *testing.T) {
	dir := t.TempDir()
	sp := openSpool(t, dir, 64)
	l := startLog(t)
	c, stop := startClient(t, tlogclient.Config{Spool: sp, Logs: []tlogclient.Log{l.httpLog(t)}})
	jws := fakeJWS("boundary", 256) // exactly four segments
	if err := c.RecordJWS(context.Background(), jws); err != nil {
		t.Fatal(err)
	}
	l.waitAll(t, jws, 20*time.Second)
	waitBacklogEmpty(t, c, 10*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for segs := segmentFiles(t, dir); len(segs) != 1 || segs[0] != "spool-0000000000000003.bin"; segs = segmentFiles(t, dir) {
		if time.Now().After(deadline) {
			t.Fatalf("segments %v, want only spool-0000000000000003.bin", segs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	sp.Close()
	sp2 := openSpool(t, dir, 64)
	defer sp2.Close()
	if got := sp2.End(); got != 256 {
		t.Fatalf("end after restart %d, want 256", got)
	}
	c2, _ := startClient(t, tlogclient.Config{Spool: sp2, Logs: []tlogclient.Log{l.httpLog(t)}})
	if err := c2.RecordJWS(context.Background(), []string{"eyJboundary.next.sig"}); err != nil {
		t.Fatal(err)
	}
	l.waitAll(t, []string{"eyJboundary.next.sig"}, 10*time.Second)
}

// TestSpoolOutageRestartAndTornTail: with the log down, Record does not
// wait for it and Ready names the backlog; a process stopped with leaves
// undelivered (and a torn record at the tail, as a crash mid-write leaves)
// delivers them all at the next start; a second process cannot open the
// same spool.
func TestSpoolOutageRestartAndTornTail(t *testing.T) {
	dir := t.TempDir()
	sp := openSpool(t, dir, 1000)
	if _, err := tlogclient.OpenSpool(tlogclient.SpoolOptions{Dir: dir}); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("second OpenSpool: %v, want in use", err)
	}
	l := startLog(t)
	l.down.Store(true)
	c, stop := startClient(t, tlogclient.Config{Spool: sp, Logs: []tlogclient.Log{l.httpLog(t)}, MaxBacklogRows: 1000})
	jws := fakeJWS("spool-outage", 1500)
	for i := 0; i < len(jws); i += 500 {
		start := time.Now()
		if err := c.RecordJWS(context.Background(), jws[i:i+500]); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Record waited %s with the log down", d)
		}
	}
	if err := c.Ready(); err == nil || !strings.Contains(err.Error(), "1500 leaves waiting") || !strings.Contains(err.Error(), l.srv.URL) {
		t.Errorf("Ready: %v", err)
	}
	if got := metricSum(t, c, "keysvc_tlog_outbox_rows"); got != 1500 {
		t.Errorf("keysvc_tlog_outbox_rows %v, want 1500", got)
	}
	stop()
	sp.Close()
	// A torn write: half a record after the last whole one.
	f, err := os.OpenFile(filepath.Join(dir, "spool-0000000000000001.bin"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("VRS1\x01\x00\x00\x00garbage-garbage-garbage"))
	f.Close()
	l.down.Store(false)
	sp2 := openSpool(t, dir, 1000)
	defer sp2.Close()
	if got := sp2.End(); got != 1500 {
		t.Fatalf("recovered end %d, want 1500", got)
	}
	c2, stop2 := startClient(t, tlogclient.Config{Spool: sp2, Logs: []tlogclient.Log{l.httpLog(t)}})
	l.waitAll(t, jws, 30*time.Second)
	waitBacklogEmpty(t, c2, 10*time.Second)
	// The next record continues after the cut tail.
	if err := c2.RecordJWS(context.Background(), []string{"eyJafter.tail.sig"}); err != nil {
		t.Fatal(err)
	}
	l.waitAll(t, []string{"eyJafter.tail.sig"}, 10*time.Second)
	// Closed, the mapped segment is cut to the records it holds.
	stop2()
	sp2.Close()
	if st, _ := os.Stat(filepath.Join(dir, "spool-0000000000000001.bin")); st == nil || st.Size() != 501*64 {
		t.Errorf("segment 1 is %v bytes, want %d", st, 501*64)
	}
}

// TestSpoolMappedCrashTail: a process killed while its segment is mapped
// leaves the file at its reserved size, zeros after the last record (the
// state copied here from a live spool). Recovery finds the records, cuts
// the zeros without calling them torn, and delivers every record.
func TestSpoolMappedCrashTail(t *testing.T) {
	dir := t.TempDir()
	sp := openSpool(t, dir, 1000)
	l := startLog(t)
	l.down.Store(true)
	c, stop := startClient(t, tlogclient.Config{Spool: sp, Logs: []tlogclient.Log{l.httpLog(t)}})
	jws := fakeJWS("mapped-crash", 700)
	if err := c.RecordJWS(context.Background(), jws); err != nil {
		t.Fatal(err)
	}
	// The live segment: reserved to 1,000 records, 700 written.
	live, err := os.ReadFile(filepath.Join(dir, "spool-0000000000000000.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 1000*64 {
		t.Fatalf("live mapped segment is %d bytes, want %d", len(live), 1000*64)
	}
	crashed := t.TempDir()
	if err := os.WriteFile(filepath.Join(crashed, "spool-0000000000000000.bin"), live, 0o600); err != nil {
		t.Fatal(err)
	}
	cursors, _ := filepath.Glob(filepath.Join(dir, "cursor-*")) // the log's position (0)
	for _, p := range cursors {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(crashed, filepath.Base(p)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if len(cursors) != 1 {
		t.Fatalf("cursor files %v, want one", cursors)
	}
	stop()
	sp.Close()
	var logBuf strings.Builder
	sp2, err := tlogclient.OpenSpool(tlogclient.SpoolOptions{Dir: crashed, SegmentRecords: 1000, Logger: slog.New(slog.NewTextHandler(&logBuf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer sp2.Close()
	if got := sp2.End(); got != 700 {
		t.Fatalf("recovered end %d, want 700", got)
	}
	if strings.Contains(logBuf.String(), "torn") {
		t.Errorf("a reserved zero tail was reported as torn:\n%s", logBuf.String())
	}
	l.down.Store(false)
	c2, _ := startClient(t, tlogclient.Config{Spool: sp2, Logs: []tlogclient.Log{l.httpLog(t)}})
	l.waitAll(t, jws, 30*time.Second)
	waitBacklogEmpty(t, c2, 10*time.Second)
}

// TestSpoolDrain: `keysvc tlog drain`'s core: a stopped replica's spool is
// handed to the log by another process, which returns once the log has
// every leaf.
func TestSpoolDrain(t *testing.T) {
	dir := t.TempDir()
	l := startLog(t)
	l.down.Store(true)
	sp := openSpool(t, dir, 0)
	c, stop := startClient(t, tlogclient.Config{Spool: sp, Logs: []tlogclient.Log{l.httpLog(t)}})
	jws := fakeJWS("drain", 700)
	if err := c.RecordJWS(context.Background(), jws); err != nil {
		t.Fatal(err)
	}
	stop()
	sp.Close()
	l.down.Store(false)
	sp2 := openSpool(t, dir, 0)
	defer sp2.Close()
	d, err := tlogclient.New(tlogclient.Config{Spool: sp2, Logs: []tlogclient.Log{l.httpLog(t)}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := d.DrainSpool(ctx)
	if err != nil || n != 700 {
		t.Fatalf("DrainSpool = %d, %v; want 700", n, err)
	}
	l.waitAll(t, jws, 10*time.Second)
}

// TestSpoolAdoptsOutbox: rows left in key history's outbox (a replica that
// used the outbox, stopped with the log down) are moved into the spool by
// a spool-mode client on the same store and reach the log; the outbox is
// empty afterwards.
func TestSpoolAdoptsOutbox(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		l := startLog(t)
		st := openStore(t, kind)
		l.down.Store(true)
		c1, stop1 := startClient(t, tlogclient.Config{Outbox: st.(store.Outbox), Logs: []tlogclient.Log{l.httpLog(t)}, Lease: time.Second})
		jws := fakeJWS("adopt-"+kind, 1200)
		if err := c1.RecordJWS(context.Background(), jws); err != nil {
			t.Fatal(err)
		}
		stop1()
		l.down.Store(false)
		sp := openSpool(t, t.TempDir(), 0)
		defer sp.Close()
		startClient(t, tlogclient.Config{Spool: sp, Outbox: st.(store.Outbox), Logs: []tlogclient.Log{l.httpLog(t)}, Lease: time.Second,
			ClaimAllAtStart: kind == "sqlite"})
		l.waitAll(t, jws, 30*time.Second)
		waitEmpty(t, st, 10*time.Second)
		if got := sp.End(); got != 1200 {
			t.Errorf("spool end %d, want the 1200 moved rows", got)
		}
	})
}

// TestSpoolTwoLogs: one record serves every log; each log has its own
// cursor, so a log that is down holds back only itself, and segments are
// deleted once both have them.
func TestSpoolTwoLogs(t *testing.T) {
	dir := t.TempDir()
	sp := openSpool(t, dir, 64)
	defer sp.Close()
	a, b := startLog(t), startLog(t)
	b.down.Store(true)
	c, _ := startClient(t, tlogclient.Config{Spool: sp, Logs: []tlogclient.Log{a.httpLog(t), b.httpLog(t)}})
	jws := fakeJWS("two-logs", 200)
	if err := c.RecordJWS(context.Background(), jws); err != nil {
		t.Fatal(err)
	}
	if got := sp.End(); got != 200 {
		t.Fatalf("spool end %d, want 200 (one record per JWS whatever the number of logs)", got)
	}
	a.waitAll(t, jws, 20*time.Second)
	time.Sleep(600 * time.Millisecond) // cursors written, a trim attempted
	bl, _, _ := c.Backlog()
	if len(bl) != 1 || bl[b.srv.URL].Rows != 200 {
		t.Fatalf("backlog %v, want 200 leaves for %s only", bl, b.srv.URL)
	}
	if segs := segmentFiles(t, dir); len(segs) != 4 {
		t.Fatalf("segments %v, want all 4 kept for the log that is down", segs)
	}
	b.down.Store(false)
	b.waitAll(t, jws, 30*time.Second)
	waitBacklogEmpty(t, c, 10*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for segs := segmentFiles(t, dir); len(segs) != 1; segs = segmentFiles(t, dir) {
		if time.Now().After(deadline) {
			t.Fatalf("segments %v, want only the last one", segs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSpoolFlush: Flush sends a partial batch at once (FlushDelay is an
// hour here), returns ctx's error while the log refuses it (the leaves
// stay owed), and nil once the log has every leaf the spool held. A client
// on the outbox has no spool to flush.
func TestSpoolFlush(t *testing.T) {
	sp := openSpool(t, t.TempDir(), 0)
	defer sp.Close()
	l := startLog(t)
	l.down.Store(true)
	c, stop := startClient(t, tlogclient.Config{Spool: sp, Logs: []tlogclient.Log{l.httpLog(t)}, FlushDelay: time.Hour})
	defer stop()
	jws := fakeJWS("flush", 3)
	if err := c.RecordJWS(context.Background(), jws); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := c.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush with the log down = %v, want context.DeadlineExceeded", err)
	}
	if b, _, _ := c.Backlog(); b[l.httpLog(t).URL()].Rows != 3 {
		t.Fatalf("backlog %v, want 3 rows owed", b)
	}
	l.down.Store(false)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	if err := c.Flush(ctx2); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if b, _, _ := c.Backlog(); len(b) != 0 {
		t.Fatalf("after Flush the backlog is %v, want empty", b)
	}
	l.waitAll(t, jws, 10*time.Second)

	ob := openStore(t, "sqlite")
	oc, err := tlogclient.New(tlogclient.Config{Outbox: ob.(store.Outbox), Logs: []tlogclient.Log{l.httpLog(t)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := oc.Flush(context.Background()); !errors.Is(err, tlogclient.ErrNoSpool) {
		t.Fatalf("Flush on the outbox = %v, want ErrNoSpool", err)
	}
}
