package tlogclient_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keysvc/keysvc/internal/pgtest"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlog"
	"github.com/keysvc/keysvc/tlog/tlogtest"
	"github.com/keysvc/keysvc/tlogclient"
	"github.com/keysvc/keysvc/verifier"
)

const origin = "log.example.test/vrp"

// testLog is a real log operator (package tlog, Tessera POSIX) behind an
// httptest server whose handler can be switched off (connections cut), to
// play an outage without changing the log's URL.
type testLog struct {
	op   *tlog.Operator
	srv  *httptest.Server
	dir  string
	down atomic.Bool
	adds atomic.Int64 // add-batch requests answered
	// echoOnly drops add-batch's query, as a log from before ADR 0038
	// (which ignores ?promise=digest and echoes every entry) would.
	echoOnly atomic.Bool
}

func startLog(t *testing.T, mods ...func(*tlog.Config)) *testLog {
	t.Helper()
	l := &testLog{dir: t.TempDir()}
	_, priv, _ := ed25519.GenerateKey(nil)
	cfg := tlog.Config{Dir: l.dir, Origin: origin, Signer: priv,
		CheckpointInterval: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, m := range mods {
		m(&cfg)
	}
	op, err := tlog.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	l.op = op
	h := op.Handler()
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l.down.Load() {
			panic(http.ErrAbortHandler) // the connection is cut: unreachable
		}
		if strings.HasSuffix(r.URL.Path, "/add-batch") {
			defer l.adds.Add(1)
			if l.echoOnly.Load() {
				r.URL.RawQuery = ""
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		l.srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := op.Close(ctx); err != nil {
			t.Errorf("log Close: %v", err)
		}
		tlogtest.Fsck(t, l.dir, op.VKey())
	})
	return l
}

// httpLog is the client's view of l.
func (l *testLog) httpLog(t *testing.T, opts ...tlogclient.HTTPLogOption) *tlogclient.HTTPLog {
	t.Helper()
	hl, err := tlogclient.NewHTTPLog(l.srv.URL+"/", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return hl
}

// has reports whether the log serves a proof for jws.
func (l *testLog) has(t *testing.T, jws string) bool {
	t.Helper()
	_, err := l.httpLog(t).Proof(context.Background(), tlogclient.HashArtifact(jws), 0)
	if err != nil && !errors.Is(err, tlogclient.ErrNotFound) {
		t.Fatalf("proof: %v", err)
	}
	return err == nil
}

// waitAll waits until the log serves a proof for every JWS.
func (l *testLog) waitAll(t *testing.T, jws []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, j := range jws {
		for !l.has(t, j) {
			if time.Now().After(deadline) {
				t.Fatalf("%.30s… not in the log after %s", j, within)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func openStore(t *testing.T, kind string) store.Store {
	t.Helper()
	cfg := store.Config{SQLitePath: filepath.Join(t.TempDir(), "keysvc.db")}
	if kind == "postgres" {
		cfg = store.Config{PostgresURL: pgtest.URL(t)}
	}
	if _, err := store.Migrate(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func startClient(t *testing.T, cfg tlogclient.Config) (*tlogclient.Client, func()) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c, err := tlogclient.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return c, stop
}

func backlog(t *testing.T, st store.Store) map[string]store.OutboxStat {
	t.Helper()
	b, err := st.(store.Outbox).OutboxBacklog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fakeJWS returns n distinct strings standing in for issued JWS.
func fakeJWS(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("eyJ%s.%d.sig", prefix, i)
	}
	return out
}

func forEachStore(t *testing.T, f func(t *testing.T, kind string)) {
	t.Run("sqlite", func(t *testing.T) { f(t, "sqlite") })
	t.Run("postgres", func(t *testing.T) { f(t, "postgres") })
}

// TestRecordDeliversAndEmptiesOutbox: recorded leaves reach the log (a real
// operator), in its tree as the exact JWS's SHA-256, and the outbox is empty
// afterwards; metrics count them.
func TestRecordDeliversAndEmptiesOutbox(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		l := startLog(t)
		st := openStore(t, kind)
		c, _ := startClient(t, tlogclient.Config{Outbox: st.(store.Outbox), Logs: []tlogclient.Log{l.httpLog(t)}, StatsEvery: 50 * time.Millisecond})
		jws := fakeJWS(kind, 300)
		var wg sync.WaitGroup
		for i := 0; i < 30; i++ {
			wg.Go(func() {
				if err := c.RecordJWS(context.Background(), jws[i*10:i*10+10]); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		l.waitAll(t, jws, 20*time.Second)
		deadline := time.Now().Add(10 * time.Second)
		for len(backlog(t, st)) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("outbox not empty: %v", backlog(t, st))
			}
			time.Sleep(50 * time.Millisecond)
		}
		// The leaf is the v0.1 leaf of the exact JWS.
		raw, err := l.httpLog(t).Proof(context.Background(), tlogclient.HashArtifact(jws[7]), 0)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Leaf map[string]string `json:"leaf"`
		}
		json.Unmarshal(raw, &p)
		sum := sha256.Sum256([]byte(jws[7]))
		if p.Leaf["artifact_hash"] != fmt.Sprintf("sha256:%x", sum) || p.Leaf["artifact_type"] != "vrp_attestation" || p.Leaf["leaf_version"] != "vrp-tlog-v0.1" {
			t.Fatalf("leaf %v", p.Leaf)
		}
		if got := metricSum(t, c, "keysvc_tlog_submitted_entries_total"); got < 300 {
			t.Errorf("submitted entries %v, want ≥ 300", got)
		}
		if err := c.Ready(); err != nil {
			t.Errorf("Ready: %v", err)
		}
	})
}

// metricSum sums the samples of one metric family (counters and gauges;
// for a histogram, its observation count) of the client's collector.
func metricSum(t testing.TB, c prometheus.Collector, name string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// slowOutbox delays every enqueue, so that Record calls pile up behind one
// commit.
type slowOutbox struct {
	store.Outbox
	delay   time.Duration
	commits atomic.Int64
}

func (s *slowOutbox) EnqueueOutbox(ctx context.Context, rows []store.OutboxRow) ([]store.OutboxRow, error) {
	s.commits.Add(1)
	time.Sleep(s.delay)
	return s.Outbox.EnqueueOutbox(ctx, rows)
}

// TestGroupCommit: concurrent Record calls share commits — 64 requests
// arriving during a 30 ms commit take at most a few commits, not 64.
func TestGroupCommit(t *testing.T) {
	l := startLog(t)
	st := openStore(t, "sqlite")
	slow := &slowOutbox{Outbox: st.(store.Outbox), delay: 30 * time.Millisecond}
	c, _ := startClient(t, tlogclient.Config{Outbox: slow, Logs: []tlogclient.Log{l.httpLog(t)}})
	jws := fakeJWS("group", 64)
	var wg sync.WaitGroup
	for _, j := range jws {
		wg.Go(func() {
			if err := c.RecordJWS(context.Background(), []string{j}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := slow.commits.Load(); n > 8 {
		t.Fatalf("64 concurrent records took %d commits; group commit should need a handful", n)
	}
	l.waitAll(t, jws, 20*time.Second)
}

// TestLogOutage: while the log is unreachable, Record still succeeds (the
// leaves are durable in the outbox), the backlog shows in the metrics and,
// past the threshold, in Ready; once the log is back everything arrives in
// full batches (whose promises must verify) and the outbox empties.
func TestLogOutage(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		l := startLog(t)
		st := openStore(t, kind)
		l.down.Store(true)
		c, _ := startClient(t, tlogclient.Config{Outbox: st.(store.Outbox), Logs: []tlogclient.Log{l.httpLog(t)},
			StatsEvery: 50 * time.Millisecond, MaxBacklogRows: 1000})
		jws := fakeJWS("outage-"+kind, 1500)
		for i := 0; i < len(jws); i += 500 {
			start := time.Now()
			if err := c.RecordJWS(context.Background(), jws[i:i+500]); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("Record waited %s with the log down: it must not wait for the log", d)
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for c.Ready() == nil {
			if time.Now().After(deadline) {
				t.Fatal("Ready stayed nil with 1500 leaves waiting (threshold 1000)")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := c.Ready(); !strings.Contains(err.Error(), "1500 leaves waiting") || !strings.Contains(err.Error(), l.srv.URL) {
			t.Errorf("Ready: %v", err)
		}
		if got := metricSum(t, c, "keysvc_tlog_outbox_rows"); got != 1500 {
			t.Errorf("keysvc_tlog_outbox_rows %v, want 1500", got)
		}
		// The first add-batch fails once its batch gathered (FlushDelay).
		for deadline := time.Now().Add(5 * time.Second); metricSum(t, c, "keysvc_tlog_log_up") != 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("keysvc_tlog_log_up %v 5 s into the outage, want 0", metricSum(t, c, "keysvc_tlog_log_up"))
			}
		}
		time.Sleep(300 * time.Millisecond)
		l.down.Store(false)
		l.waitAll(t, jws, 30*time.Second)
		deadline = time.Now().Add(10 * time.Second)
		for c.Ready() != nil || len(backlog(t, st)) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("after recovery: Ready %v, outbox %v", c.Ready(), backlog(t, st))
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// TestRestartDeliversLeftovers: a client stopped before it could deliver
// (the log was down) leaves its rows in the outbox; the next client on the
// same store delivers them — at once on SQLite (ClaimAllAtStart), after
// the lease on PostgreSQL, where another replica might still hold them.
func TestRestartDeliversLeftovers(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		l := startLog(t)
		st := openStore(t, kind)
		l.down.Store(true)
		// On SQLite the lease is longer than the test may take: the rows
		// must be claimed at start, not after it.
		lease := 2 * time.Second
		if kind == "sqlite" {
			lease = time.Minute
		}
		c1, stop1 := startClient(t, tlogclient.Config{Outbox: st.(store.Outbox), Logs: []tlogclient.Log{l.httpLog(t)}, Lease: lease})
		jws := fakeJWS("restart-"+kind, 1500) // claimed in full batches: their promises must verify
		if err := c1.RecordJWS(context.Background(), jws); err != nil {
			t.Fatal(err)
		}
		stop1()
		l.down.Store(false)
		start := time.Now()
		startClient(t, tlogclient.Config{Outbox: st.(store.Outbox), Logs: []tlogclient.Log{l.httpLog(t)}, Lease: lease,
			SweepEvery: 100 * time.Millisecond, ClaimAllAtStart: kind == "sqlite"})
		l.waitAll(t, jws, 30*time.Second)
		took := time.Since(start)
		waitEmpty(t, st, 10*time.Second)
		if kind == "sqlite" && took > lease {
			t.Errorf("SQLite: leftovers took %s, want them claimed at start", took)
		}
		if kind == "postgres" && took < lease/2 {
			t.Errorf("PostgreSQL: leftovers claimed after %s, before their lease (%s) ended", took, lease)
		}
	})
}

// TestPromiseChecked: a promise signed by a key other than the pinned one
// is refused, and the rows stay in the outbox (nothing is forgotten on a
// promise that does not hold).
func TestPromiseChecked(t *testing.T) {
	l := startLog(t)
	st := openStore(t, "sqlite")
	other, _, _ := ed25519.GenerateKey(nil)
	keys, err := verifier.ParseJWKS(fmt.Appendf(nil, `{"keys":[{"kty":"OKP","crv":"Ed25519","x":%q,"kid":%q}]}`,
		b64(other), l.op.Key().KID))
	if err != nil {
		t.Fatal(err)
	}
	hl := l.httpLog(t, tlogclient.WithLogKeys(keys))
	_, err = hl.AddBatch(context.Background(), []tlogclient.Entry{{ArtifactType: "vrp_attestation", ArtifactHash: tlogclient.HashArtifact("x")}})
	if !errors.Is(err, tlogclient.ErrBadPromise) || !strings.Contains(err.Error(), "the Ed25519 signature is invalid") {
		t.Fatalf("AddBatch with a promise under another key: %v, want ErrBadPromise: the Ed25519 signature is invalid", err)
	}
	c, _ := startClient(t, tlogclient.Config{Outbox: st.(store.Outbox), Logs: []tlogclient.Log{hl}})
	if err := c.RecordJWS(context.Background(), []string{"eyJpinned.x.y"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for l.adds.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if b := backlog(t, st); b[hl.URL()].Rows != 1 {
		t.Fatalf("outbox after refused promises: %v, want the row kept", b)
	}
	// With the right key pinned, the promise verifies.
	right, err := verifier.ParseJWKS(fmt.Appendf(nil, `{"keys":[{"kty":"OKP","crv":"Ed25519","x":%q,"kid":%q}]}`,
		b64(l.op.Key().Public), l.op.Key().KID))
	if err != nil {
		t.Fatal(err)
	}
	entries := []tlogclient.Entry{{ArtifactType: "vrp_attestation", ArtifactHash: tlogclient.HashArtifact("y")}}
	p, err := l.httpLog(t, tlogclient.WithLogKeys(right)).AddBatch(context.Background(), entries)
	// A digest promise (ADR 0038): of the body's SHA-256, no entries echoed.
	wantBody := `{"entries":[{"artifact_type":"vrp_attestation","artifact_hash":"` + tlogclient.FormatHash(entries[0].ArtifactHash) + `"}]}`
	if err != nil || p.LogID != origin || p.Entries != nil || p.BodySHA256 != sha256.Sum256([]byte(wantBody)) || p.MMD != time.Minute ||
		!strings.HasPrefix(p.JWS, "eyJhbGciOiJFZERTQSIsImtpZCI6") {
		t.Fatalf("AddBatch with the right key: %+v, %v", p, err)
	}
}

// TestAddBatchTypeConflict: a hash the log holds under another artifact
// type gets no digest promise (ADR 0038); the echo it gets instead is
// verified and reported as a *TypeConflictError naming that entry and the
// type logged (not as a promise for it: the verifier would not accept
// that leaf for an attestation). The other entries of the request are
// logged (ADR 0043).
func TestAddBatchTypeConflict(t *testing.T) {
	l := startLog(t)
	h := tlogclient.HashArtifact("logged-first-as-a-receipt")
	if _, err := l.httpLog(t).AddBatch(context.Background(), []tlogclient.Entry{{ArtifactType: "vrp_receipt", ArtifactHash: h}}); err != nil {
		t.Fatal(err)
	}
	fresh := tlogclient.Entry{ArtifactType: "vrp_attestation", ArtifactHash: tlogclient.HashArtifact("fresh")}
	conflicting := tlogclient.Entry{ArtifactType: "vrp_attestation", ArtifactHash: h}
	_, err := l.httpLog(t).AddBatch(context.Background(), []tlogclient.Entry{fresh, conflicting})
	var tc *tlogclient.TypeConflictError
	if !errors.As(err, &tc) || !errors.Is(err, tlogclient.ErrBadPromise) {
		t.Fatalf("AddBatch of a hash logged under another type: %v, want a TypeConflictError", err)
	}
	if want := []tlogclient.TypeConflict{{Index: 1, Entry: conflicting, LoggedType: "vrp_receipt"}}; !reflect.DeepEqual(tc.Conflicts, want) || !strings.HasPrefix(tc.SEP, "eyJ") {
		t.Fatalf("conflicts %+v, SEP %.20q; want %+v and the log's SEP", tc.Conflicts, tc.SEP, want)
	}
	want := "signed entry promise does not match the submission: 1 entries are held by the log under another artifact type (entry 1: artifact_hash " +
		tlogclient.FormatHash(h) + ", submitted as vrp_attestation, logged as vrp_receipt)"
	if want = "tlogclient: log " + l.srv.URL + ": " + want; err.Error() != want {
		t.Errorf("error:\n%s\nwant\n%s", err, want)
	}
	l.waitAll(t, []string{"fresh"}, 5*time.Second) // the other entry of the request is logged
}

// TestTypeConflictDoesNotStallTheLog: someone who may submit to a public
// log logs the hash of one of this node's JWS first, under another type
// (a receiving agent can, in the moments before the node's spool delivers
// it). The client leaves that leaf out for this log, counts it in
// keysvc_tlog_type_conflicts_total and delivers everything else, before
// and after it; before ADR 0043 it retried the batch forever and no later
// leaf reached the log. Spool and outbox alike.
func TestTypeConflictDoesNotStallTheLog(t *testing.T) {
	for _, mode := range []string{"spool", "outbox"} {
		t.Run(mode, func(t *testing.T) {
			l := startLog(t)
			jws := fakeJWS("conflict-"+mode, 5)
			if _, err := l.httpLog(t).AddBatch(context.Background(), []tlogclient.Entry{{ArtifactType: "vrp_status_event", ArtifactHash: tlogclient.HashArtifact(jws[2])}}); err != nil {
				t.Fatal(err)
			}
			cfg := tlogclient.Config{Logs: []tlogclient.Log{l.httpLog(t)}}
			var st store.Store
			if mode == "spool" {
				sp, err := tlogclient.OpenSpool(tlogclient.SpoolOptions{Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { sp.Close() })
				cfg.Spool = sp
			} else {
				st = openStore(t, "sqlite")
				cfg.Outbox, cfg.ClaimAllAtStart = st.(store.Outbox), true
			}
			var logBuf tlogtest.SyncBuffer
			cfg.Logger = slog.New(slog.NewTextHandler(&logBuf, nil))
			c, _ := startClient(t, cfg)
			if err := c.RecordJWS(context.Background(), jws[:3]); err != nil {
				t.Fatal(err)
			}
			if err := c.RecordJWS(context.Background(), jws[3:]); err != nil {
				t.Fatal(err)
			}
			l.waitAll(t, []string{jws[0], jws[1], jws[3], jws[4]}, 10*time.Second)
			deadline := time.Now().Add(10 * time.Second)
			for {
				b, _, _ := c.Backlog()
				if st != nil {
					b = backlog(t, st)
				}
				if b[l.srv.URL].Rows == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("backlog %+v: the conflicting leaf is still owed", b)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if n := metricSum(t, c, "keysvc_tlog_type_conflicts_total"); n != 1 {
				t.Errorf("keysvc_tlog_type_conflicts_total = %v, want 1", n)
			}
			for _, want := range []string{
				"artifact_hash=" + tlogclient.FormatHash(tlogclient.HashArtifact(jws[2])) + " artifact_type=vrp_attestation logged_type=vrp_status_event sep_sha256=sha256:",
				"conflicts=1 sep_sha256=sha256:",
				" sep=eyJ",
			} {
				if !strings.Contains(logBuf.String(), want) {
					t.Errorf("log lacks %q:\n%s", want, logBuf.String())
				}
			}
		})
	}
}

// TestAddBatchEchoingLog: a log that ignores ?promise=digest (one from
// before ADR 0038) answers with a promise echoing every entry; AddBatch
// checks it entry by entry, and a client delivers through it.
func TestAddBatchEchoingLog(t *testing.T) {
	l := startLog(t)
	l.echoOnly.Store(true)
	entries := []tlogclient.Entry{
		{ArtifactType: "vrp_attestation", ArtifactHash: tlogclient.HashArtifact("echo-a")},
		{ArtifactType: "vrp_status_event", ArtifactHash: tlogclient.HashArtifact("echo-b")},
	}
	p, err := l.httpLog(t).AddBatch(context.Background(), entries)
	if err != nil {
		t.Fatal(err)
	}
	if p.BodySHA256 != ([32]byte{}) || len(p.Entries) != 2 || p.Entries[0].LeafIndex != 0 || p.Entries[1].LeafIndex != 1 ||
		p.Entries[1].ArtifactType != "vrp_status_event" || p.Entries[1].LoggedAt.IsZero() {
		t.Fatalf("promise from an echoing log: %+v", p)
	}
	st := openStore(t, "sqlite")
	c, _ := startClient(t, tlogclient.Config{Outbox: st.(store.Outbox), Logs: []tlogclient.Log{l.httpLog(t)}})
	jws := fakeJWS("echoing", 30)
	if err := c.RecordJWS(context.Background(), jws); err != nil {
		t.Fatal(err)
	}
	l.waitAll(t, jws, 20*time.Second)
	waitEmpty(t, st, 10*time.Second)
}

func b64(k ed25519.PublicKey) string { return base64.RawURLEncoding.EncodeToString(k) }

func mustGet(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return b
}

// waitEmpty waits until the outbox holds no row.
func waitEmpty(t *testing.T, st store.Store, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for len(backlog(t, st)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("outbox not empty after %s: %v", within, backlog(t, st))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSubmitToken: against an operator that authenticates submitters, a
// client without the token is refused (the rows stay in the outbox) and
// one with it delivers.
func TestSubmitToken(t *testing.T) {
	const token = "tlog-submitter-secret"
	l := startLog(t, func(c *tlog.Config) { c.SubmitTokenHashes = [][32]byte{sha256.Sum256([]byte(token))} })
	_, err := l.httpLog(t).AddBatch(context.Background(), []tlogclient.Entry{{ArtifactType: "vrp_attestation", ArtifactHash: tlogclient.HashArtifact("a")}})
	var le *tlogclient.LogError
	if !errors.As(err, &le) || le.Status != http.StatusUnauthorized {
		t.Fatalf("add-batch without the token: %v, want 401", err)
	}
	st := openStore(t, "sqlite")
	c, _ := startClient(t, tlogclient.Config{Outbox: st.(store.Outbox), Logs: []tlogclient.Log{l.httpLog(t, tlogclient.WithSubmitToken(token))}})
	jws := fakeJWS("token", 20)
	if err := c.RecordJWS(context.Background(), jws); err != nil {
		t.Fatal(err)
	}
	l.waitAll(t, jws, 20*time.Second)
	waitEmpty(t, st, 10*time.Second)
}

// TestRedirectToAnotherOriginRefused: a log URL that redirects its look-ups
// to another origin (an https log sent to plain HTTP, or another host) is
// not followed there: that origin's 404 would read as "not in the log" —
// an absence nobody signs (ADR 0016) — so the look-up fails instead, and
// nothing is submitted there either. A redirect within the log's origin is
// followed.
func TestRedirectToAnotherOriginRefused(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		elsewhere.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":{"code":"not_found","message":"the hash is not in a signed tree"}}`)
	}))
	defer other.Close()
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/moved/") {
			http.Redirect(w, r, "/"+strings.TrimPrefix(r.URL.Path, "/moved/")+"?"+r.URL.RawQuery, http.StatusFound)
			return
		}
		http.Redirect(w, r, other.URL+r.URL.Path+"?"+r.URL.RawQuery, http.StatusTemporaryRedirect)
	}))
	defer redirecting.Close()
	l, err := tlogclient.NewHTTPLog(redirecting.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h := tlogclient.HashArtifact("eyJhidden.a.b")
	_, err = l.Proof(ctx, h, 0)
	if err == nil || errors.Is(err, tlogclient.ErrNotFound) || !strings.Contains(err.Error(), "redirect to another origin ("+other.URL+tlogclient.PathPrefix+"proof) refused") {
		t.Fatalf("Proof through a redirect to another origin: %v; want a refused redirect, not ErrNotFound", err)
	}
	if _, err := l.AddBatch(ctx, []tlogclient.Entry{{ArtifactType: tlogclient.ArtifactStatusEvent, ArtifactHash: h}}); err == nil || !strings.Contains(err.Error(), "redirect to another origin") {
		t.Fatalf("AddBatch through a redirect to another origin: %v", err)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the other origin got %d requests", n)
	}
	// Within the origin: followed to the log's own answer.
	same, err := tlogclient.NewHTTPLog(redirecting.URL + "/moved")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := same.Proof(ctx, h, 0); err == nil || !strings.Contains(err.Error(), "redirect to another origin ("+other.URL+tlogclient.PathPrefix+"proof) refused") {
		t.Fatalf("a same-origin redirect should be followed (and then meet the cross-origin one): %v", err)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the other origin got %d requests", n)
	}
}

// conflictLog fails its first add-batch (unreachable), then answers every
// entry with a type conflict.
type conflictLog struct{ calls atomic.Int32 }

func (*conflictLog) URL() string { return "http://log.example.test" }
func (l *conflictLog) AddBatch(_ context.Context, es []tlogclient.Entry) (*tlogclient.Promise, error) {
	if l.calls.Add(1) == 1 {
		return nil, errors.New("connection refused")
	}
	tc := &tlogclient.TypeConflictError{}
	for i, e := range es {
		tc.Conflicts = append(tc.Conflicts, tlogclient.TypeConflict{Index: i, Entry: e, LoggedType: "vrp_receipt"})
	}
	return nil, tc
}
func (*conflictLog) Proof(context.Context, [32]byte, uint64) ([]byte, error) {
	return nil, tlogclient.ErrNotFound
}
func (*conflictLog) Archive(context.Context, uint64, int) ([]tlogclient.ArchivedTree, error) {
	return nil, nil
}

// TestTypeConflictLogIsUp: a log that answers with conflicts for a whole
// batch answered (its promise verified), so keysvc_tlog_log_up is 1 once
// the batch is settled, though no entry was promised (from a review: it
// stayed 0 after an earlier failure, and KeysvcTlogLogDown fired on a
// quiet node).
func TestTypeConflictLogIsUp(t *testing.T) {
	sp, err := tlogclient.OpenSpool(tlogclient.SpoolOptions{Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	l := &conflictLog{}
	c, _ := startClient(t, tlogclient.Config{Spool: sp, Logs: []tlogclient.Log{l}})
	if err := c.RecordJWS(context.Background(), fakeJWS("up", 1)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _, _ := c.Backlog()
		if b[l.URL()].Rows == 0 && l.calls.Load() >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backlog %+v after %d add-batch calls", b, l.calls.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if up := metricSum(t, c, "keysvc_tlog_log_up"); up != 1 {
		t.Fatalf("keysvc_tlog_log_up = %v after the log answered and nothing is owed, want 1", up)
	}
	if n := metricSum(t, c, "keysvc_tlog_type_conflicts_total"); n != 1 {
		t.Errorf("keysvc_tlog_type_conflicts_total = %v, want 1", n)
	}
}
