package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlog/tlogtest"
	"github.com/keysvc/keysvc/tlogclient"
)

// failoverCluster is a PostgreSQL 15 cluster of this test's own (Debian
// postgresql-common: pg_createcluster / pg_ctlcluster), on a port of the
// suite's range 5461–5469, dropped when the test ends. The shared cluster
// at 5432 is never touched.
type failoverCluster struct {
	name string
	port int
	dir  string
}

// needPGClusters skips (or, with CI=true, fails) when clusters cannot be
// made here: no postgresql-common tools, or not root.
func needPGClusters(t *testing.T) {
	t.Helper()
	_, err1 := exec.LookPath("pg_createcluster")
	_, err2 := exec.LookPath("runuser")
	var why string
	switch {
	case err1 != nil || err2 != nil:
		why = "pg_createcluster or runuser not found (Debian postgresql-common, util-linux)"
	case os.Geteuid() != 0:
		why = "not root: pg_createcluster needs root"
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip("SKIPPING PostgreSQL failover test: " + why)
}

func runCmd(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// freePGPort returns a port of 5461–5469 nothing listens on.
func freePGPort(t *testing.T, not ...int) int {
	t.Helper()
	for _, p := range rand.Perm(9) {
		port := 5461 + p
		taken := false
		for _, n := range not {
			taken = taken || n == port
		}
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil && !taken {
			l.Close()
			return port
		}
	}
	t.Fatal("no free PostgreSQL port in 5461–5469")
	return 0
}

// newPGCluster creates (not starts) a cluster listening on 127.0.0.1 with
// trust authentication; conf lines go to its conf.d.
func newPGCluster(t *testing.T, port int, conf ...string) *failoverCluster {
	t.Helper()
	c := &failoverCluster{name: fmt.Sprintf("tlogcl_%04x", rand.IntN(1<<16)), port: port}
	c.dir = filepath.Join("/var/lib/postgresql/15", c.name)
	runCmd(t, "pg_createcluster", "15", c.name, "--port", fmt.Sprint(port), "--start-conf=manual", "--", "--auth-local=trust", "--auth-host=trust")
	t.Cleanup(func() { c.drop() })
	lines := append([]string{"listen_addresses = '127.0.0.1'"}, conf...)
	if err := os.WriteFile(filepath.Join("/etc/postgresql/15", c.name, "conf.d", "tlogcl.conf"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return c
}

// drop stops and removes the cluster, with the configuration directory
// pg_dropcluster leaves behind when it holds a file of ours (conf.d).
func (c *failoverCluster) drop() {
	exec.Command("pg_dropcluster", "15", c.name, "--stop").Run() //nolint:errcheck // best effort
	os.RemoveAll(filepath.Join("/etc/postgresql/15", c.name))    //nolint:errcheck // best effort
}

// startPGCluster creates a cluster on a free port of 5461–5469 (none of
// not), runs prepare (nil: nothing) and starts it. A port free when chosen
// can be taken before the postmaster binds it (CI saw "Address already in
// use" on a port that was free a second before): then the cluster is
// dropped, who holds the port is logged, and another port is tried, three
// times in all.
func startPGCluster(t *testing.T, not []int, prepare func(*failoverCluster), conf ...string) *failoverCluster {
	t.Helper()
	for attempt := 1; ; attempt++ {
		c := newPGCluster(t, freePGPort(t, not...), conf...)
		if prepare != nil {
			prepare(c)
		}
		out, err := exec.Command("pg_ctlcluster", "15", c.name, "start").CombinedOutput()
		if err == nil {
			return c
		}
		if !strings.Contains(string(out), "Address already in use") || attempt == 3 {
			t.Fatalf("pg_ctlcluster 15 %s start (port %d, attempt %d): %v\n%s", c.name, c.port, attempt, err, out)
		}
		holder, _ := exec.Command("ss", "-tanp", fmt.Sprintf("sport = :%d", c.port)).CombinedOutput()
		t.Logf("port %d was taken between choosing it and starting the cluster (attempt %d); held by:\n%s", c.port, attempt, holder)
		c.drop()
		not = append(not, c.port)
	}
}

func (c *failoverCluster) ctl(t *testing.T, args ...string) {
	t.Helper()
	runCmd(t, "pg_ctlcluster", append([]string{"15", c.name}, args...)...)
}

// TestTlogPostgresFailover: three replicas on a PostgreSQL primary with a
// synchronous standby; under load the primary crashes (immediate shutdown)
// and the standby is promoted. Every JWS the signing API returned before,
// during and after the failover reaches the log: a returned JWS's outbox
// row was committed on the standby too (synchronous_commit), so the
// promoted standby holds it and a replica delivers it. The replicas find
// the new primary through a multi-host URL with
// target_session_attrs=read-write.
func TestTlogPostgresFailover(t *testing.T) {
	needPGClusters(t)
	primary := startPGCluster(t, nil, nil, "synchronous_standby_names = '*'")
	p1 := primary.port
	// The standby's data directory is a base backup of the primary
	// (standby.signal and primary_conninfo written by -R).
	standby := startPGCluster(t, []int{p1}, func(c *failoverCluster) {
		runCmd(t, "sh", "-c", fmt.Sprintf("rm -rf %s/* && runuser -u postgres -- pg_basebackup -h 127.0.0.1 -p %d -U postgres -D %s -R -X stream", c.dir, p1, c.dir))
	})
	p2 := standby.port
	ctx := context.Background()
	pgURL := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write", p1, p2)
	waitFor(t, 30*time.Second, "the standby replicates synchronously", func() bool {
		conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p1))
		if err != nil {
			return false
		}
		defer conn.Close(ctx)
		var state string
		err = conn.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication LIMIT 1`).Scan(&state)
		return err == nil && state == "sync"
	})

	logDir := t.TempDir()
	logSrv := startTlogServer(t, logDir)
	e := newLifecycleEnv(t, pgURL)
	var nodes []*server
	for i := 0; i < 3; i++ {
		d := e.dir
		if i > 0 {
			d = t.TempDir()
		}
		nodes = append(nodes, startServer(t, e.env, "--data-dir", d, "--kek-file", e.kek, "--rate-limit", "0",
			"--tlog-url", logSrv.URL, "--tlog-lease", "5s", "--reload-interval", "500ms"))
	}
	if _, _, err := client.New(nodes[0].URL, e.token).CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se"}); err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes {
		waitFor(t, 10*time.Second, "every replica has the key", func() bool {
			code, _ := httpGet(t, nd.URL+"/v1/keys/villa/jwks.json")
			return code == 200
		})
	}

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
				c := &client.Client{BaseURL: nodes[(w+i)%len(nodes)].URL, Token: e.token, HTTP: hc}
				var res transportAnswer
				if err := c.Do(ctx, http.MethodPost, "/v1/keys/villa/mcp-transport", client.TransportRequest{Tool: "t", Arguments: map[string]any{"w": w, "i": i}}, &res); err != nil {
					rec.failures.Add(1)
					time.Sleep(20 * time.Millisecond)
					continue
				}
				rec.add(res.JWS, res.Attestation)
			}
		})
	}
	time.Sleep(5 * time.Second)
	before := len(rec.all())
	failStart := time.Now()
	primary.ctl(t, "stop", "-m", "immediate") // a crash: no shutdown checkpoint
	standby.ctl(t, "promote")
	// Signing resumes once the replicas reach the new primary.
	waitFor(t, 60*time.Second, "signing resumes on the promoted standby", func() bool {
		n := len(rec.all())
		time.Sleep(500 * time.Millisecond)
		return len(rec.all()) > n+10
	})
	resumed := time.Since(failStart)
	time.Sleep(5 * time.Second)
	close(stop)
	load.Wait()
	jws := rec.all()
	t.Logf("%d JWS returned (%d before the failover), %d failed requests; signing resumed %s after the primary crashed",
		len(jws), before, rec.failures.Load(), resumed.Round(time.Millisecond))
	if before < 50 || len(jws) < before+50 {
		t.Fatalf("the load did not run across the failover: %d before, %d in all", before, len(jws))
	}

	var pending []string
	deadline := time.Now().Add(60 * time.Second)
	for {
		in := logArtifacts(t, logSrv.URL)
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
		t.Fatalf("%d of %d returned JWS are missing from the log after the failover", len(pending), len(jws))
	}
	t.Logf("0 of %d returned JWS missing from the log", len(jws))
	verifyRecorded(t, nodes[0].URL, e.token, rec)
	st, err := store.Open(ctx, store.Config{PostgresURL: pgURL})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	waitFor(t, 30*time.Second, "the outbox on the new primary is empty", func() bool {
		b, err := st.(store.Outbox).OutboxBacklog(ctx)
		return err == nil && len(b) == 0
	})
	for _, nd := range nodes {
		nd.stop(t)
	}
	logSrv.stop(t)
	tlogtest.Fsck(t, logDir, logSrv.VKey)
}
