package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keysvc/keysvc/internal/faultproxy"
	"github.com/keysvc/keysvc/verifier"
)

// A replica set for fault tests (issue 14): several real `keysvc serve`
// processes on one PostgreSQL key history, each through its own TCP fault
// proxy (toxiproxy), signers recording every signature with the instants
// the request was sent and answered, and the checks the published windows
// must pass.

type replicaSet struct {
	mu      sync.Mutex // guards srvs (replicas restart on new ports)
	t       *testing.T
	pgURL   string // direct
	dir     string
	kek     string
	token   string
	toxi    *faultproxy.Server
	proxies []*faultproxy.Proxy
	srvs    []*server
	args    [][]string
	key     string
}

// newReplicaSet migrates pgURL, creates a token and starts n replicas,
// replica i reaching PostgreSQL through proxy i. extra are serve flags.
func newReplicaSet(t *testing.T, pgURL string, n int, extra ...string) *replicaSet {
	t.Helper()
	rs := &replicaSet{t: t, pgURL: pgURL, dir: t.TempDir(), toxi: faultproxy.Start(t)}
	rs.kek = writeKEK(t, rs.dir)
	env := []string{"KEYSVC_POSTGRES_URL=" + pgURL}
	if out, errOut, code := runCLI(t, env, "migrate", "--data-dir", rs.dir); code != 0 {
		t.Fatalf("migrate: %d\n%s%s", code, out, errOut)
	}
	out, errOut, code := runCLI(t, env, "tokens", "create", "--name", "chaos", "--data-dir", rs.dir,
		"--scope", "sign:*", "--scope", "admin:keys", "--scope", "admin:revoke", "--scope", "audit:read")
	if code != 0 {
		t.Fatalf("tokens create: %d %s%s", code, out, errOut)
	}
	rs.token = strings.TrimSpace(out)
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		p := rs.toxi.Proxy(t, fmt.Sprintf("pg-%d", i), u.Host)
		rs.proxies = append(rs.proxies, p)
		pu := *u
		pu.Host = p.Addr
		// Each replica has a data directory of its own, as in production:
		// a replica's transparency-log spool is its own (ADR 0024).
		dataDir := filepath.Join(rs.dir, fmt.Sprintf("replica-%d", i))
		if err := os.Mkdir(dataDir, 0o700); err != nil {
			t.Fatal(err)
		}
		rs.args = append(rs.args, append([]string{"--postgres-url", pu.String(), "--kek-file", rs.kek, "--data-dir", dataDir,
			"--migrate=false", "--rate-limit", "0", "--jwks-max-age", "1s", "--scheduler-interval", "200ms", "--reload-interval", "2s"}, extra...))
		rs.srvs = append(rs.srvs, startServer(t, nil, rs.args[i]...))
	}
	return rs
}

// restart starts replica i again (after a kill), on a new port.
func (rs *replicaSet) restart(i int) {
	rs.t.Helper()
	s := startServer(rs.t, nil, rs.args[i]...)
	rs.mu.Lock()
	rs.srvs[i] = s
	rs.mu.Unlock()
}

// kill9 kills replica i with SIGKILL.
func (rs *replicaSet) kill9(i int) {
	rs.mu.Lock()
	s := rs.srvs[i]
	rs.mu.Unlock()
	_ = s.cmd.Process.Kill()
	err := <-s.done
	s.done <- err
}

// url returns replica i's URL.
func (rs *replicaSet) url(i int) string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.srvs[i].URL
}

// cli runs a keys command against replica i's admin API.
func (rs *replicaSet) cli(i int, args ...string) (string, string, int) {
	rs.t.Helper()
	return runCLI(rs.t, []string{"KEYSVC_TOKEN=" + rs.token}, append(args, "--server", rs.url(i))...)
}

// createKey creates key name (with the keys create flags given).
func (rs *replicaSet) createKey(name string, flags ...string) {
	rs.t.Helper()
	rs.key = name
	if out, errOut, code := rs.cli(0, append([]string{"keys", "create", name, "--issuer", name + ".test"}, flags...)...); code != 0 {
		rs.t.Fatalf("keys create: %d\n%s%s", code, out, errOut)
	}
	// Every replica sees it (LISTEN/NOTIFY, else the lease's probe).
	for i := range rs.srvs {
		waitFor(rs.t, 10*time.Second, "every replica serves the new key", func() bool {
			code, _ := httpGetQuiet(rs.url(i) + "/v1/keys/" + name + "/jwks.json")
			return code == 200
		})
	}
}

// record is one signing request and its answer.
type record struct {
	Replica    int
	Sent, Recv time.Time
	Status     int
	Code       string
	KID        string
	ServedAt   string // requested served_at ("" when none)
	Att        map[string]any
}

// signers runs one signing loop per replica (and per served_at mode)
// until stop is closed, recording every answer.
type signers struct {
	mu      sync.Mutex
	records []record
	wg      sync.WaitGroup
	stop    chan struct{}
	ok      atomic.Int64
}

func (rs *replicaSet) startSigners(every time.Duration, servedAtBack time.Duration) *signers {
	sg := &signers{stop: make(chan struct{})}
	hc := &http.Client{Timeout: 5 * time.Second}
	modes := []time.Duration{0}
	if servedAtBack != 0 {
		modes = append(modes, servedAtBack)
	}
	for i := range rs.srvs {
		for _, back := range modes {
			sg.wg.Add(1)
			go func(i int, back time.Duration) {
				defer sg.wg.Done()
				for n := 0; ; n++ {
					select {
					case <-sg.stop:
						return
					case <-time.After(every):
					}
					body := map[string]any{"tool": "get_verified_stay_offer", "arguments": map[string]any{"n": n, "replica": i}}
					rec := record{Replica: i}
					if back != 0 {
						rec.ServedAt = time.Now().Add(-back).UTC().Format(time.RFC3339Nano)
						body["served_at"] = rec.ServedAt
					}
					raw, _ := json.Marshal(body)
					req, _ := http.NewRequest(http.MethodPost, rs.url(i)+"/v1/keys/"+rs.key+"/mcp-transport", bytes.NewReader(raw))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Authorization", "Bearer "+rs.token)
					rec.Sent = time.Now()
					resp, err := hc.Do(req)
					if err != nil {
						rec.Recv, rec.Code = time.Now(), "transport_error" // a killed replica, a dropped connection
						sg.add(rec)
						continue
					}
					data, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					rec.Recv, rec.Status = time.Now(), resp.StatusCode
					var out struct {
						KID         string         `json:"kid"`
						Attestation map[string]any `json:"attestation"`
						Error       struct{ Code string }
					}
					_ = json.Unmarshal(data, &out)
					rec.KID, rec.Att, rec.Code = out.KID, out.Attestation, out.Error.Code
					if rec.Status == 200 {
						sg.ok.Add(1)
					}
					sg.add(rec)
				}
			}(i, back)
		}
	}
	return sg
}

func (sg *signers) add(r record) {
	sg.mu.Lock()
	sg.records = append(sg.records, r)
	sg.mu.Unlock()
}

func (sg *signers) halt() []record {
	close(sg.stop)
	sg.wg.Wait()
	return sg.records
}

// history fetches the key's history document from a live replica and
// writes it to a file.
func (rs *replicaSet) history() ([]byte, string) {
	rs.t.Helper()
	for i := range rs.srvs {
		code, body := httpGetQuiet(rs.url(i) + "/v1/keys/" + rs.key + "/history.json")
		if code == 200 {
			p := filepath.Join(rs.dir, "history.json")
			if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
				rs.t.Fatal(err)
			}
			return []byte(body), p
		}
	}
	rs.t.Fatal("no replica serves the key history")
	return nil, ""
}

// windowReport is what checkWindows found.
type windowReport struct {
	Signed, Refused   int
	ClaimOutside      []string // valid_from outside the version's window (exact, no rounding)
	RealOutside       []string // the window does not meet [sent, received]
	Kids              int
	Retired           int // versions that activated and retired: completed rotations
	DuplicateKids     []string
	ActiveOverlaps    []string
	RefusedByCode     map[string]int
	ServedAtSigned    int
	ServedAtCorrected int
}

func (w windowReport) violations() int {
	return len(w.ClaimOutside) + len(w.RealOutside) + len(w.DuplicateKids) + len(w.ActiveOverlaps)
}

// checkWindows holds every signed record to the final key history: its
// claimed instant (valid_from) must lie in its version's published window
// compared exactly, and the window must meet the interval in which the
// signature was made ([sent, received], one clock: the same machine).
// It also checks that kids are unique and that, at every instant from the
// first version's activation on, exactly one version's window holds it.
func checkWindows(t *testing.T, hist []byte, recs []record) windowReport {
	t.Helper()
	h, err := verifier.ParseKeyHistory(hist)
	if err != nil {
		t.Fatal(err)
	}
	type win struct {
		nb, na *time.Time
		status string
	}
	wins := map[string]win{}
	seen := map[string]int{}
	var raw struct {
		Keys []struct {
			KID string `json:"kid"`
		} `json:"keys"`
	}
	_ = json.Unmarshal(hist, &raw)
	for _, k := range raw.Keys {
		seen[k.KID]++
	}
	rep := windowReport{RefusedByCode: map[string]int{}}
	for kid, n := range seen {
		if n > 1 {
			rep.DuplicateKids = append(rep.DuplicateKids, kid)
		}
	}
	for _, v := range h.Versions {
		wins[v.JWK.KeyID] = win{v.NotBefore, v.NotAfter, v.Status}
		if v.Status == "retired" {
			rep.Retired++
		}
	}
	rep.Kids = len(wins)
	for _, r := range recs {
		if r.Status != 200 {
			rep.Refused++
			rep.RefusedByCode[r.Code]++
			continue
		}
		rep.Signed++
		if r.ServedAt != "" {
			rep.ServedAtSigned++
		}
		w, ok := wins[r.KID]
		vf, _ := r.Att["valid_from"].(string)
		claimed, err := verifier.ParseInstant(vf)
		if !ok || err != nil || w.nb == nil {
			rep.ClaimOutside = append(rep.ClaimOutside, fmt.Sprintf("%s at %s: not a signing version (%s)", r.KID, vf, w.status))
			continue
		}
		if claimed.Before(*w.nb) || (w.na != nil && claimed.After(*w.na)) {
			rep.ClaimOutside = append(rep.ClaimOutside, fmt.Sprintf("replica %d: %s claimed %s, window [%s, %v]", r.Replica, r.KID, vf, w.nb.Format(time.RFC3339Nano), fmtp(w.na)))
		}
		if r.Recv.Before(*w.nb) || (w.na != nil && r.Sent.After(*w.na)) {
			rep.RealOutside = append(rep.RealOutside, fmt.Sprintf("replica %d: %s signed in [%s, %s], window [%s, %v] (off by %s)", r.Replica, r.KID,
				r.Sent.UTC().Format(time.RFC3339Nano), r.Recv.UTC().Format(time.RFC3339Nano), w.nb.Format(time.RFC3339Nano), fmtp(w.na), offBy(r, w.nb, w.na)))
		}
	}
	// Exactly one active version at every instant (windows of active and
	// retired versions tile the time line without overlap).
	type span struct {
		kid    string
		nb, na time.Time
	}
	var spans []span
	for kid, w := range wins {
		if (w.status == "active" || w.status == "retired") && w.nb != nil {
			na := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
			if w.na != nil {
				na = *w.na
			}
			spans = append(spans, span{kid, *w.nb, na})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].nb.Before(spans[j].nb) })
	for i := 1; i < len(spans); i++ {
		if !spans[i-1].na.Equal(spans[i].nb) {
			rep.ActiveOverlaps = append(rep.ActiveOverlaps, fmt.Sprintf("%s ends %s, %s starts %s", spans[i-1].kid, spans[i-1].na.Format(time.RFC3339Nano), spans[i].kid, spans[i].nb.Format(time.RFC3339Nano)))
		}
	}
	return rep
}

func offBy(r record, nb, na *time.Time) time.Duration {
	if r.Recv.Before(*nb) {
		return nb.Sub(r.Recv)
	}
	return r.Sent.Sub(*na)
}

func fmtp(t *time.Time) string {
	if t == nil {
		return "open"
	}
	return t.Format(time.RFC3339Nano)
}

// verifyAll runs `keysvc verify --history` on every signed record's
// attestation (receipts of up to 500 attestations, GOMAXPROCS verifiers at
// once) and returns how many did not verify, with the first few errors.
func verifyAll(t *testing.T, histFile string, recs []record) (verified, rejected int, first []string) {
	t.Helper()
	var atts []any
	for _, r := range recs {
		if r.Status == 200 {
			atts = append(atts, r.Att)
		}
	}
	dir := t.TempDir()
	var receipts []string
	for start := 0; start < len(atts); start += 500 {
		end := min(start+500, len(atts))
		receipts = append(receipts, writeJSON(t, dir, fmt.Sprintf("receipt-%d.json", start), map[string]any{
			"vrp_receipt_version": "1.0", "subject": map[string]any{"property": "chaos.test"},
			"issuer": map[string]any{"node": "chaos.test"}, "attestations": atts[start:end],
		}))
	}
	type verdict struct {
		Attestations []struct {
			Status string `json:"status"`
			Error  any    `json:"error"`
			KID    string `json:"kid"`
		} `json:"attestations"`
	}
	verdicts := make([]verdict, len(receipts))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	var unreadable atomic.Bool
	for i, receipt := range receipts {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out, errOut, _ := runCLI(t, nil, "verify", receipt, "--history", histFile, "--json")
			if err := json.Unmarshal([]byte(out), &verdicts[i]); err != nil {
				t.Errorf("keysvc verify: %v\n%s%s", err, out, errOut)
				unreadable.Store(true)
			}
		})
	}
	wg.Wait()
	if unreadable.Load() {
		t.FailNow()
	}
	for _, vr := range verdicts {
		for _, a := range vr.Attestations {
			if a.Status == "verified" {
				verified++
				continue
			}
			rejected++
			if len(first) < 5 {
				first = append(first, fmt.Sprintf("%s: %s %v", a.KID, a.Status, a.Error))
			}
		}
	}
	return verified, rejected, first
}

func httpGetQuiet(u string) (int, string) {
	hc := &http.Client{Timeout: 3 * time.Second}
	resp, err := hc.Get(u)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// assertWindows fails the test on any window violation or rejected
// signature, printing at most a few of each.
func assertWindows(t *testing.T, rs *replicaSet, recs []record) windowReport {
	t.Helper()
	hist, histFile := rs.history()
	rep := checkWindows(t, hist, recs)
	verified, rejected, first := verifyAll(t, histFile, recs)
	t.Logf("signed %d (verified %d, rejected %d), refused %d %v, versions %d", rep.Signed, verified, rejected, rep.Refused, rep.RefusedByCode, rep.Kids)
	for _, l := range [][]string{rep.ClaimOutside, rep.RealOutside, rep.DuplicateKids, rep.ActiveOverlaps, first} {
		for i, s := range l {
			if i == 5 {
				t.Errorf("... and %d more", len(l)-5)
				break
			}
			t.Errorf("%s", s)
		}
	}
	if rejected > 0 || rep.violations() > 0 {
		t.Errorf("%d signatures rejected by keysvc verify --history; %d claims and %d signing instants outside their windows; %d duplicate kids; %d window gaps/overlaps",
			rejected, len(rep.ClaimOutside), len(rep.RealOutside), len(rep.DuplicateKids), len(rep.ActiveOverlaps))
	}
	if rep.Signed == 0 {
		t.Error("nothing was signed")
	}
	_ = context.Background
	return rep
}
