package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	tclient "github.com/transparency-dev/tessera/client"

	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/internal/pgtest"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlog/tlogtest"
	"github.com/keysvc/keysvc/tlogclient"
)

// testPort returns a free TCP port of this suite's range for the
// transparency-log client tests (23000–23999): for processes that must
// come back on the same address after a kill.
func testPort(t *testing.T) int {
	t.Helper()
	for i := 0; i < 200; i++ {
		p := 23000 + rand.IntN(1000)
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no free port in 23000–23999")
	return 0
}

// kill9 kills a serve process with SIGKILL: no shutdown code runs, nothing
// is flushed.
func (s *server) kill9() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	err := <-s.done
	s.done <- err
}

// chaosSeconds is how long each fault phase lasts: 10 s by default (CI),
// KEYSVC_TLOG_CHAOS_SECONDS for the full run (60).
func chaosSeconds() time.Duration {
	if v, err := strconv.Atoi(os.Getenv("KEYSVC_TLOG_CHAOS_SECONDS")); err == nil && v > 0 {
		return time.Duration(v) * time.Second
	}
	return 10 * time.Second
}

// recorder keeps every JWS a 200 answer carried, with its receipt
// attestation.
type recorder struct {
	mu       sync.Mutex
	jws      []string
	atts     []map[string]any
	failures atomic.Int64
}

func (r *recorder) add(jws string, att map[string]any) {
	r.mu.Lock()
	r.jws = append(r.jws, jws)
	r.atts = append(r.atts, att)
	r.mu.Unlock()
}

// transportAnswer is what a transport-assertion answer carries: the JWS and its
// receipt attestation.
type transportAnswer struct {
	JWS         string         `json:"jws"`
	Attestation map[string]any `json:"attestation"`
}

// verifyRecorded runs `keysvc verify --history` on every recorded
// attestation against the key history the service publishes now (from
// baseURL) and fails unless every one verifies: the faults the test
// injected must not have let a replica issue a signature its published
// history does not back.
func verifyRecorded(t *testing.T, baseURL, token string, rec *recorder) {
	t.Helper()
	history, err := client.New(baseURL, token).History(context.Background(), "villa")
	if err != nil {
		t.Fatal(err)
	}
	histFile := filepath.Join(t.TempDir(), "history.json")
	if err := os.WriteFile(histFile, history, 0o600); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	recs := make([]record, len(rec.atts))
	for i, a := range rec.atts {
		recs[i] = record{Status: 200, Att: a}
	}
	rec.mu.Unlock()
	verified, rejected, first := verifyAll(t, histFile, recs)
	if rejected > 0 || verified != len(recs) {
		t.Fatalf("keysvc verify --history: %d of %d returned signatures verified, %d rejected, e.g. %v", verified, len(recs), rejected, first)
	}
	t.Logf("%d of %d returned signatures verify with keysvc verify --history", verified, len(recs))
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.jws...)
}

// TestTlogNoLostSignatures: under load, every JWS the signing API returned
// reaches the log — zero lost — through (1) kill -9 of a replica every 3 s
// and (2) the log process killed and kept down, then restarted; counted
// from every 200 answer the load clients received. On PostgreSQL with
// three replicas (rows of a killed replica are taken over by the others
// after --tlog-lease) and on SQLite (one process, killed and restarted).
// Each phase lasts 10 s, KEYSVC_TLOG_CHAOS_SECONDS=60 for the full run.
// Tessera's fsck passes on the log afterwards.
func TestTlogNoLostSignatures(t *testing.T) {
	t.Run("postgres", func(t *testing.T) { tlogNoLost(t, pgtest.URL(t), 3) })
	t.Run("sqlite", func(t *testing.T) { tlogNoLost(t, "", 1) })
}

func tlogNoLost(t *testing.T, pgURL string, replicas int) {
	phase := chaosSeconds()
	logPort := testPort(t)
	logURL := fmt.Sprintf("http://127.0.0.1:%d", logPort)
	dir := t.TempDir()
	logSrv := startTlogServer(t, dir, "--listen", fmt.Sprintf("127.0.0.1:%d", logPort))
	vkey := logSrv.VKey
	e := newLifecycleEnv(t, pgURL)

	type replica struct {
		args []string
		dir  string
		url  string
		srv  *server
	}
	rs := make([]*replica, replicas)
	for i := range rs {
		port := testPort(t)
		d := e.dir
		if i > 0 {
			d = t.TempDir()
		}
		rs[i] = &replica{dir: d, url: fmt.Sprintf("http://127.0.0.1:%d", port), args: []string{"--listen", fmt.Sprintf("127.0.0.1:%d", port),
			"--data-dir", d, "--kek-file", e.kek, "--rate-limit", "0", "--tlog-url", logURL, "--tlog-lease", "5s", "--reload-interval", "500ms"}}
		rs[i].srv = startServer(t, e.env, rs[i].args...)
	}
	ctx := context.Background()
	if _, _, err := client.New(rs[0].url, e.token).CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se"}); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		waitFor(t, 10*time.Second, "every replica has the key", func() bool {
			code, _ := httpGet(t, r.url+"/v1/keys/villa/jwks.json")
			return code == 200
		})
	}

	// Load: 6 clients, single transport assertions and batches of 10,
	// round robin over the replicas; only 200 answers are recorded.
	rec := &recorder{}
	stop := make(chan struct{})
	var load sync.WaitGroup
	hc := &http.Client{Timeout: 10 * time.Second}
	for w := 0; w < 6; w++ {
		load.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c := &client.Client{BaseURL: rs[(w+i)%len(rs)].url, Token: e.token, HTTP: hc}
				args := map[string]any{"w": w, "i": i}
				if i%2 == 0 {
					var res transportAnswer
					if err := c.Do(ctx, http.MethodPost, "/v1/keys/villa/mcp-transport", client.TransportRequest{Tool: "t", Arguments: args}, &res); err != nil {
						rec.failures.Add(1)
						time.Sleep(20 * time.Millisecond)
						continue
					}
					rec.add(res.JWS, res.Attestation)
					continue
				}
				items := make([]client.TransportRequest, 10)
				for j := range items {
					items[j] = client.TransportRequest{Tool: "t", Arguments: map[string]any{"w": w, "i": i, "j": j}}
				}
				var out struct {
					Results []struct {
						Result *transportAnswer `json:"result"`
					} `json:"results"`
				}
				if err := c.Do(ctx, http.MethodPost, "/v1/keys/villa/mcp-transport:batch", map[string]any{"items": items}, &out); err != nil {
					rec.failures.Add(1)
					time.Sleep(20 * time.Millisecond)
					continue
				}
				for _, r := range out.Results {
					if r.Result != nil {
						rec.add(r.Result.JWS, r.Result.Attestation)
					}
				}
			}
		})
	}

	// Phase 1: kill -9 a replica every 3 s (it comes back at once on the
	// same address; SQLite's one process too).
	kills := 0
	for end := time.Now().Add(phase); time.Now().Before(end); {
		time.Sleep(3 * time.Second)
		r := rs[rand.IntN(len(rs))]
		r.srv.kill9()
		kills++
		r.srv = startServer(t, e.env, r.args...)
	}
	afterKills := len(rec.all())
	// Phase 2: the log process is killed and stays down for a phase; the
	// signing API goes on answering.
	logSrv.kill9(t)
	time.Sleep(phase)
	duringOutage := len(rec.all()) - afterKills
	logSrv = startTlogServer(t, dir, "--listen", fmt.Sprintf("127.0.0.1:%d", logPort))
	time.Sleep(2 * time.Second)
	close(stop)
	load.Wait()

	jws := rec.all()
	t.Logf("%d JWS returned (%d during the %s log outage), %d failed requests, %d replica kills",
		len(jws), duringOutage, phase, rec.failures.Load(), kills)
	if duringOutage == 0 {
		t.Fatal("no signature was returned while the log was down: the signing path waits for the log")
	}
	if len(jws) < 200 {
		t.Fatalf("only %d JWS returned: the load did not run", len(jws))
	}

	// Every returned JWS reaches the log (leases of killed replicas end
	// after 5 s, then a sweep takes their rows over). The log's entries are
	// read with Tessera's own client from the C2SP tiles.
	hl := mustHTTPLog(t, logURL)
	checkStart := time.Now()
	var pending []string
	deadline := time.Now().Add(90 * time.Second)
	for {
		in := logArtifacts(t, logURL)
		pending = pending[:0]
		for _, j := range jws {
			if !in[tlogclient.HashArtifact(j)] {
				pending = append(pending, j)
			}
		}
		if len(pending) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if len(pending) > 0 {
		t.Fatalf("%d of %d returned JWS are missing from the log, e.g. %.40s…", len(pending), len(jws), pending[0])
	}
	t.Logf("0 of %d returned JWS missing from the log (checked in %s)", len(jws), time.Since(checkStart).Round(time.Millisecond))
	verifyRecorded(t, rs[0].url, e.token, rec)
	// Every outbox is empty: delivered rows are deleted.
	st, err := store.Open(ctx, store.Config{PostgresURL: pgURL, SQLitePath: filepath.Join(e.dir, "keysvc.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	deadline = time.Now().Add(30 * time.Second)
	for {
		b, err := st.(store.Outbox).OutboxBacklog(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			break
		}
		if time.Now().After(deadline) {
			rows, _ := st.(store.Outbox).ClaimOutbox(ctx, hl.URL(), time.Now().Add(time.Hour), time.Now(), 5)
			for _, r := range rows {
				_, perr := hl.Proof(ctx, r.ArtifactHash, 0)
				t.Logf("left in the outbox: row %d enqueued %s lease %s, in the log: %v", r.ID, r.EnqueuedAt, r.LeaseUntil, perr == nil)
			}
			for _, r := range rs {
				var lines []string
				for _, l := range strings.Split(r.srv.stderr.String(), "\n") {
					if strings.Contains(l, "transparency log") && !strings.Contains(l, `"level":"INFO"`) {
						lines = append(lines, l)
					}
				}
				if len(lines) > 20 {
					lines = lines[len(lines)-20:]
				}
				t.Logf("replica %s transparency-log warnings:\n%s", r.url, strings.Join(lines, "\n"))
			}
			t.Fatalf("outbox not empty 30 s after every JWS reached the log: %v", b)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, r := range rs {
		r.srv.stop(t)
	}
	// Every replica's spool (the default durability) owes the log nothing:
	// its cursor is at its end after a clean stop.
	for _, r := range rs {
		sp, err := tlogclient.OpenSpool(tlogclient.SpoolOptions{Dir: filepath.Join(r.dir, "tlog-spool")})
		if err != nil {
			t.Fatal(err)
		}
		c, err := tlogclient.New(tlogclient.Config{Spool: sp, Logs: []tlogclient.Log{hl}})
		if err != nil {
			t.Fatal(err)
		}
		if b, _, _ := c.Backlog(); len(b) != 0 || sp.End() == 0 {
			t.Errorf("replica %s: spool of %d records owes %v after a clean stop, want a used spool owing nothing", r.url, sp.End(), b)
		}
		sp.Close()
	}
	logSrv.stop(t)
	tlogtest.Fsck(t, dir, vkey)
}

// logArtifacts reads every entry of the log at base with Tessera's client
// (entry bundles of the C2SP tlog-tiles layout, up to the size of the
// published checkpoint) and returns the artifact hashes of its leaves.
func logArtifacts(t *testing.T, base string) map[[32]byte]bool {
	t.Helper()
	ctx := context.Background()
	u, _ := url.Parse(base + "/")
	f, err := tclient.NewHTTPFetcher(u, http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := f.ReadCheckpoint(ctx)
	if err != nil {
		t.Fatalf("read checkpoint: %v", err)
	}
	lines := strings.SplitN(string(cp), "\n", 3)
	size, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil {
		t.Fatalf("checkpoint %q", cp)
	}
	out := make(map[[32]byte]bool, size)
	for i := uint64(0); i*256 < size; i++ {
		b, err := tclient.GetEntryBundle(ctx, f.ReadEntryBundle, i, size)
		if err != nil {
			t.Fatalf("entry bundle %d: %v", i, err)
		}
		for _, e := range b.Entries {
			var leaf struct {
				ArtifactHash string `json:"artifact_hash"`
			}
			if err := json.Unmarshal(e, &leaf); err != nil {
				t.Fatalf("leaf %s: %v", e, err)
			}
			h, err := tlogclient.ParseHash(leaf.ArtifactHash)
			if err != nil {
				t.Fatal(err)
			}
			out[h] = true
		}
	}
	return out
}
