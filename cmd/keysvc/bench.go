package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/valyala/fasthttp"
)

func init() { extraCommands = append(extraCommands, newBenchCmd, newBenchFloorCmd) }

// benchResult is one scenario at one concurrency.
type benchResult struct {
	Scenario       string  `json:"scenario"`
	Concurrency    int     `json:"concurrency"`
	Requests       int64   `json:"requests"`
	Errors         int64   `json:"errors"`
	FirstError     string  `json:"first_error,omitempty"`
	RequestsPerS   float64 `json:"requests_per_second"`
	SignaturesPerS float64 `json:"signatures_per_second"`
	P50ms          float64 `json:"p50_ms"`
	P99ms          float64 `json:"p99_ms"`
	P999ms         float64 `json:"p999_ms"`
	// RawEd25519PerS is raw ed25519.Sign on GOMAXPROCS goroutines,
	// measured right before this scenario's levels; RatioToRaw is
	// SignaturesPerS over it (signing scenarios only).
	RawEd25519PerS float64 `json:"raw_ed25519_per_second"`
	RatioToRaw     float64 `json:"ratio_to_raw_ed25519"`
	// RatioToFloor is RequestsPerS / the same client's rate against a
	// trivial net/http handler in this process (the machine's HTTP floor).
	RatioToFloor float64 `json:"ratio_to_http_floor"`
	// ServerCPUPerRequestUS is the server's process CPU time (user+system,
	// from process_cpu_seconds_total on /metrics) over the measured window,
	// per request, in microseconds; 0 when /metrics was not reachable.
	ServerCPUPerRequestUS float64 `json:"server_cpu_us_per_request"`
	// ClientCPUPerRequestUS is this process's CPU time (the load client's,
	// getrusage) over the measured window, per request, in microseconds.
	ClientCPUPerRequestUS float64 `json:"client_cpu_us_per_request"`
}

// benchReport is the whole run, as printed by --json.
type benchReport struct {
	GOMAXPROCS int `json:"gomaxprocs"`
	// RawEd25519PerS is the best of the per-scenario raw measurements.
	RawEd25519PerS float64 `json:"raw_ed25519_per_second"`
	HTTPFloorPerS  float64 `json:"http_floor_requests_per_second"`
	HTTPFloorConc  int     `json:"http_floor_concurrency"`
	// HTTPFloorServerCPUUS and HTTPFloorClientCPUUS are the floor server's
	// and the client's CPU per request, in microseconds.
	HTTPFloorServerCPUUS float64       `json:"http_floor_server_cpu_us_per_request"`
	HTTPFloorClientCPUUS float64       `json:"http_floor_client_cpu_us_per_request"`
	ServerIdleRSSMiB     float64       `json:"server_rss_mib_before"`
	ServerAfterRSSMiB    float64       `json:"server_rss_mib_after"`
	Results              []benchResult `json:"results"`
	Soak                 *soakReport   `json:"soak,omitempty"`
}

// soakReport samples the server's resident set during --soak.
type soakReport struct {
	Duration string    `json:"duration"`
	Requests int64     `json:"requests"`
	Errors   int64     `json:"errors"`
	RSSMiB   []float64 `json:"rss_mib_every_10s"`
}

type benchScenario struct {
	name, method, url, body string
	header                  map[string]string
	sigsPerRequest          int
}

func newBenchCmd() *cobra.Command {
	var sign, metricsURL, key string
	var duration, warmup, soak time.Duration
	var levels []int
	var only []string
	var asJSON bool
	cf := &clientFlags{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load-test a running keysvc on loopback and compare with raw ed25519.Sign on this machine",
		Long: `Drives a running keysvc over HTTP/1.1 with keep-alive at fixed concurrency
levels, each for a fixed duration after a warm-up: single signs, VRP MCP
transport assertions, batches of 100 of each, and JWKS fetches with and
without If-None-Match. In the same run it measures

  - raw ed25519.Sign on GOMAXPROCS goroutines over a signing input of the
    size of a typical assertion; every signature rate is printed as a ratio
    to it;
  - the HTTP floor: the same client against a trivial net/http handler in
    this process, so that every request rate can be read against what this
    machine's loopback and net/http allow at all;
  - the server's CPU time per request (process_cpu_seconds_total from
    /metrics, before and after each measured window) and its resident set.

--soak D then keeps a mixed load running for D and samples the server's
resident set every 10 s (growth check).

The server should run with --rate-limit 0 --public-rate-limit 0, or the
per-token and public limits show up as errors. Only loopback addresses are accepted; every phase is bounded in
time.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sign == "" {
				sign = cf.server
			}
			if metricsURL == "" {
				metricsURL = cf.server
			}
			for _, u := range []string{cf.server, sign, metricsURL} {
				if err := loopbackOnly(u); err != nil {
					return err
				}
			}
			tok, err := cf.token()
			if err != nil {
				return err
			}
			scenarios, err := benchScenarios(cf.server, sign, key, tok)
			if err != nil {
				return err
			}
			if len(only) > 0 {
				scenarios = slices.DeleteFunc(scenarios, func(s benchScenario) bool { return !slices.Contains(only, s.name) })
				if len(scenarios) == 0 {
					return fmt.Errorf("--scenarios %v matches none of sign, mcp-transport, sign:batch(100), mcp-transport:batch(100), jwks, jwks(304)", only)
				}
			}
			ctx := cmd.Context()
			metrics := metricsURL + "/metrics"
			rep := benchReport{GOMAXPROCS: runtime.GOMAXPROCS(0)}
			if m, err := scrapeProcess(metrics); err == nil {
				rep.ServerIdleRSSMiB = m.rssMiB
			}
			floorRes, err := httpFloor(ctx, levels, warmup, duration)
			if err != nil {
				return err
			}
			floor := floorRes.RequestsPerS
			rep.HTTPFloorPerS, rep.HTTPFloorConc = floor, floorRes.Concurrency
			rep.HTTPFloorServerCPUUS, rep.HTTPFloorClientCPUUS = floorRes.ServerCPUPerRequestUS, floorRes.ClientCPUPerRequestUS
			for _, sc := range scenarios {
				// Raw Ed25519 again next to each scenario: on a shared
				// machine the speed drifts within a run.
				raw := rawEd25519Rate(max(duration/2, 200*time.Millisecond))
				rep.RawEd25519PerS = max(rep.RawEd25519PerS, raw)
				for _, c := range levels {
					var before processSample
					var cpuErr error
					r := runScenario(ctx, sc, c, warmup, duration, func() {
						before, cpuErr = scrapeProcess(metrics)
					})
					if after, err := scrapeProcess(metrics); err == nil && cpuErr == nil && r.Requests > 0 {
						r.ServerCPUPerRequestUS = (after.cpuSeconds - before.cpuSeconds) * 1e6 / float64(r.Requests)
					}
					r.RawEd25519PerS = raw
					if sc.sigsPerRequest > 0 {
						r.RatioToRaw = r.SignaturesPerS / raw
					}
					r.RatioToFloor = r.RequestsPerS / floor
					rep.Results = append(rep.Results, r)
				}
			}
			if soak > 0 {
				rep.Soak = runSoak(ctx, scenarios, metrics, soak)
			}
			if m, err := scrapeProcess(metrics); err == nil {
				rep.ServerAfterRSSMiB = m.rssMiB
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), rep)
			}
			printBench(cmd.OutOrStdout(), rep)
			return nil
		},
	}
	cf.register(cmd)
	if f := cmd.PersistentFlags().Lookup("server"); f != nil {
		f.Usage = "keysvc base URL of the public listener (JWKS), which also serves the signing API and /metrics unless --sign-server / --metrics-server say otherwise (env KEYSVC_SERVER)"
	}
	cmd.Flags().StringVar(&sign, "sign-server", "", "signing listener base URL when separate from --server")
	cmd.Flags().StringVar(&metricsURL, "metrics-server", "", "listener that serves /metrics (the admin listener) when separate from --server; for server CPU and RSS")
	cmd.Flags().StringVar(&key, "key", "dev", "key to sign with")
	cmd.Flags().DurationVar(&duration, "duration", 5*time.Second, "measured time per scenario and concurrency (at most 60s)")
	cmd.Flags().DurationVar(&warmup, "warmup", time.Second, "warm-up before each measurement (at most 10s)")
	cmd.Flags().DurationVar(&soak, "soak", 0, "after the table, keep a mixed load running this long (at most 30m) and sample the server's RSS every 10s")
	cmd.Flags().IntSliceVar(&levels, "concurrency", []int{1, 4, 16, 64}, "concurrency levels (connections = goroutines), 1..256")
	cmd.Flags().StringSliceVar(&only, "scenarios", nil, "run only these scenarios (default: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	registerTlogBench(cmd, &levels, &duration, &warmup, &asJSON)
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if duration <= 0 || duration > time.Minute || warmup < 0 || warmup > 10*time.Second || soak < 0 || soak > 30*time.Minute {
			return fmt.Errorf("--duration must be in (0, 60s], --warmup in [0, 10s] and --soak in [0, 30m]")
		}
		if len(levels) == 0 {
			return fmt.Errorf("--concurrency needs at least one level")
		}
		for _, c := range levels {
			if c < 1 || c > 256 {
				return fmt.Errorf("--concurrency levels must be 1..256")
			}
		}
		return nil
	}
	return cmd
}

// benchScenarios builds the request of every scenario; the JWKS ETag is
// fetched once for the If-None-Match case.
func benchScenarios(server, sign, key, tok string) ([]benchScenario, error) {
	jwksURL := server + "/v1/keys/" + url.PathEscape(key) + "/jwks.json"
	etag, err := fetchETag(jwksURL)
	if err != nil {
		return nil, err
	}
	signItems, transportItems := make([]string, 100), make([]string, 100)
	for i := range signItems {
		signItems[i] = `{"payload":{"offer_id":"offer:villaakerlyckan.se:2026-09-02/05","i":` + strconv.Itoa(i) + `}}`
		transportItems[i] = `{"tool":"get_verified_stay_offer","arguments":{"checkIn":"2026-09-02","checkOut":"2026-09-05","guests":` + strconv.Itoa(i%8+1) + `}}`
	}
	auth := map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json"}
	base := sign + "/v1/keys/" + url.PathEscape(key)
	return []benchScenario{
		{"sign", "POST", base + "/sign", `{"payload":{"offer_id":"offer:villaakerlyckan.se:2026-09-02/05"}}`, auth, 1},
		{"mcp-transport", "POST", base + "/mcp-transport", `{"tool":"get_verified_stay_offer","arguments":{"checkIn":"2026-09-02","checkOut":"2026-09-05","guests":2}}`, auth, 1},
		{"sign:batch(100)", "POST", base + "/sign:batch", `{"items":[` + strings.Join(signItems, ",") + `]}`, auth, 100},
		{"mcp-transport:batch(100)", "POST", base + "/mcp-transport:batch", `{"items":[` + strings.Join(transportItems, ",") + `]}`, auth, 100},
		{"jwks", "GET", jwksURL, "", nil, 0},
		{"jwks(304)", "GET", jwksURL, "", map[string]string{"If-None-Match": etag}, 0},
	}, nil
}

func printBench(w io.Writer, rep benchReport) {
	fmt.Fprintf(w, "GOMAXPROCS %d; raw ed25519.Sign measured before each scenario, best %.0f/s\n", rep.GOMAXPROCS, rep.RawEd25519PerS)
	fmt.Fprintf(w, "HTTP floor (trivial handler, serve's http.Server settings, own process; same client; %d conns): %.0f req/s; CPU per request: server %.1f µs, client %.1f µs\n",
		rep.HTTPFloorConc, rep.HTTPFloorPerS, rep.HTTPFloorServerCPUUS, rep.HTTPFloorClientCPUUS)
	fmt.Fprintf(w, "server RSS before / after: %.1f / %.1f MiB\n", rep.ServerIdleRSSMiB, rep.ServerAfterRSSMiB)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tconc\treq/s\tsigs/s\traw/s\t/raw\t/floor\tp50 ms\tp99 ms\tp99.9 ms\tsrv µs/req\tclient µs/req\terrors\t")
	for _, r := range rep.Results {
		sigs, raw, ratio := "–", "–", "–"
		if r.SignaturesPerS > 0 {
			sigs, raw, ratio = fmt.Sprintf("%.0f", r.SignaturesPerS), fmt.Sprintf("%.0f", r.RawEd25519PerS), fmt.Sprintf("%.3f", r.RatioToRaw)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.1f\t%.1f\t%d\t\n", r.Scenario, r.Concurrency, r.RequestsPerS,
			sigs, raw, ratio, r.RatioToFloor, r.P50ms, r.P99ms, r.P999ms, r.ServerCPUPerRequestUS, r.ClientCPUPerRequestUS, r.Errors)
	}
	_ = tw.Flush()
	for _, r := range rep.Results {
		if r.FirstError != "" {
			fmt.Fprintf(w, "%s at %d: first error: %s\n", r.Scenario, r.Concurrency, r.FirstError)
		}
	}
	if s := rep.Soak; s != nil {
		fmt.Fprintf(w, "soak %s: %d requests, %d errors; server RSS every 10s (MiB): %v\n", s.Duration, s.Requests, s.Errors, s.RSSMiB)
	}
}

// loopbackOnly refuses any target that is not a loopback address: load
// runs never leave this machine.
func loopbackOnly(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if host := u.Hostname(); !isLoopbackHost(host) {
		return fmt.Errorf("bench targets loopback addresses only, not %q", host)
	}
	return nil
}

// isLoopbackHost reports whether a URL's host (url.URL.Hostname) is
// "localhost" or a loopback IP address (127.0.0.0/8, ::1).
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func fetchETag(u string) (string, error) {
	resp, err := http.Get(u)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return resp.Header.Get("ETag"), nil
}

// processSample is what /metrics says of the server process.
type processSample struct{ cpuSeconds, rssMiB float64 }

// scrapeProcess reads process_cpu_seconds_total and
// process_resident_memory_bytes (the Prometheus process collector, from
// /proc/self/stat) from a /metrics URL.
func scrapeProcess(u string) (processSample, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return processSample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return processSample{}, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	var s processSample
	var found int
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "process_cpu_seconds_total":
			s.cpuSeconds, err = strconv.ParseFloat(val, 64)
			found++
		case "process_resident_memory_bytes":
			var b float64
			b, err = strconv.ParseFloat(val, 64)
			s.rssMiB = b / (1 << 20)
			found++
		}
		if err != nil {
			return processSample{}, err
		}
	}
	if found != 2 {
		return processSample{}, errors.New("no process metrics at " + u)
	}
	return s, sc.Err()
}

// benchInput is the signing input of the raw baseline: the size of a
// typical transport assertion's (header.payload in base64url).
var benchInput = bytes.Repeat([]byte{'a'}, 300)

// rawEd25519Rate measures ed25519.Sign per second on GOMAXPROCS goroutines.
func rawEd25519Rate(d time.Duration) float64 {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	n := runtime.GOMAXPROCS(0)
	var total atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	start := time.Now()
	for range n {
		wg.Go(func() {
			var c int64
			for time.Now().Before(deadline) {
				for range 64 {
					_ = ed25519.Sign(key, benchInput)
				}
				c += 64
			}
			total.Add(c)
		})
	}
	wg.Wait()
	return float64(total.Load()) / time.Since(start).Seconds()
}

// httpFloor starts `keysvc bench-floor` — a separate process serving a
// fixed 200 from a trivial handler behind the same http.Server settings as
// serve — and drives it with the bench client at each level. It returns
// the result at the best rate, with the floor server's CPU per request.
func httpFloor(ctx context.Context, levels []int, warmup, d time.Duration) (benchResult, error) {
	self, err := os.Executable()
	if err != nil {
		return benchResult{}, err
	}
	cmd := exec.CommandContext(ctx, self, "bench-floor")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return benchResult{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return benchResult{}, err
	}
	if err := cmd.Start(); err != nil {
		return benchResult{}, err
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		return benchResult{}, fmt.Errorf("bench: the HTTP floor server did not start: %q %v", line, err)
	}
	var best benchResult
	for _, c := range levels {
		var cpu0 time.Duration
		r := runScenario(ctx, benchScenario{name: "floor", method: "GET", url: "http://" + addr + "/"}, c, warmup, d, func() {
			cpu0 = processCPU(cmd.Process.Pid)
		})
		if cpu := processCPU(cmd.Process.Pid) - cpu0; cpu0 > 0 && r.Requests > 0 {
			r.ServerCPUPerRequestUS = cpu.Seconds() * 1e6 / float64(r.Requests)
		}
		if r.RequestsPerS > best.RequestsPerS {
			best = r
		}
	}
	if best.RequestsPerS == 0 {
		return best, errors.New("bench: the HTTP floor server answered nothing")
	}
	return best, nil
}

// processCPU is the user plus system CPU time of process pid from
// /proc/PID/stat (fields 14 and 15, in clock ticks of 1/100 s), or 0.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// newBenchFloorCmd is the hidden server of the HTTP floor: a trivial
// handler on a loopback port behind serve's http.Server settings. It
// prints "listening ADDR" and serves until its standard input closes.
// --sign makes it the signing floor (issue 18): it Ed25519-signs the
// request body with a fixed key and answers {"signature":"<base64url>"};
// --body-file serves that file's bytes (a JWKS) with a strong ETag and
// answers a matching If-None-Match with 304.
func newBenchFloorCmd() *cobra.Command {
	var listen, bodyFile, rawFile string
	var sign bool
	cmd := &cobra.Command{
		Use: "bench-floor", Hidden: true, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rawFile != "" {
				// Raw ed25519.Sign over the file's bytes for one second on
				// one goroutine: this process's CPU per signature.
				msg, err := os.ReadFile(rawFile)
				if err != nil {
					return err
				}
				key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
				n, cpu0, end := 0, selfCPU(), time.Now().Add(time.Second)
				for ; time.Now().Before(end); n++ {
					_ = ed25519.Sign(key, msg)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "raw_ed25519_cpu_us %.2f\n", (selfCPU()-cpu0).Seconds()*1e6/float64(n))
				return nil
			}
			if err := loopbackOnly("http://" + listen); err != nil {
				return err
			}
			body := []byte(`{"keys":[]}`)
			if bodyFile != "" {
				b, err := os.ReadFile(bodyFile)
				if err != nil {
					return err
				}
				body = b
			}
			sum := sha256.Sum256(body)
			etag := `"` + hex.EncodeToString(sum[:16]) + `"`
			key := ed25519.NewKeyFromSeed(sum[:])
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header()["Content-Type"] = []string{"application/json"}
				if sign {
					in, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
					if err != nil {
						w.WriteHeader(http.StatusBadRequest)
						return
					}
					out := append(make([]byte, 0, 110), `{"signature":"`...)
					out = base64.RawURLEncoding.AppendEncode(out, ed25519.Sign(key, in))
					_, _ = w.Write(append(out, '"', '}'))
					return
				}
				w.Header()["Etag"] = []string{etag}
				if r.Header.Get("If-None-Match") == etag {
					w.WriteHeader(http.StatusNotModified)
					return
				}
				_, _ = w.Write(body)
			})
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			srv := newHTTPServer(h)
			go func() { _ = srv.Serve(ln) }()
			fmt.Fprintf(cmd.OutOrStdout(), "listening %s\n", ln.Addr())
			_, _ = io.Copy(io.Discard, cmd.InOrStdin())
			return srv.Close()
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "loopback address to listen on")
	cmd.Flags().BoolVar(&sign, "sign", false, "Ed25519-sign each request body and answer the signature (the signing floor)")
	cmd.Flags().StringVar(&rawFile, "raw-ed25519", "", "instead of serving, sign this file's bytes with ed25519.Sign for 1 s and print the CPU per signature in µs")
	cmd.Flags().StringVar(&bodyFile, "body-file", "", "serve this file's bytes, with an ETag and 304 for a matching If-None-Match (the JWKS floor)")
	return cmd
}

// newBenchClient returns a keep-alive HTTP/1.1 client for u's host with
// conc connections. It is fasthttp's HostClient: the load client shares the
// two cores with the server, and net/http's client costs about as much CPU
// per request as the server does, which would hide the server's own rate.
func newBenchClient(u *url.URL, conc int) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr: u.Host, MaxConns: conc, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
		MaxIdleConnDuration: time.Minute, NoDefaultUserAgentHeader: true, DisableHeaderNamesNormalizing: true,
		MaxResponseBodySize: 16 << 20,
	}
}

// runScenario runs sc at conc connections: warm-up, then onStart, then the
// measured window.
func runScenario(ctx context.Context, sc benchScenario, conc int, warmup, d time.Duration, onStart func()) benchResult {
	u, err := url.Parse(sc.url)
	if err != nil || u.Scheme != "http" {
		return benchResult{Scenario: sc.name, Concurrency: conc, Errors: 1, FirstError: "bench drives plain-HTTP loopback listeners: " + sc.url}
	}
	client := newBenchClient(u, conc)
	defer client.CloseIdleConnections()
	one := func(req *fasthttp.Request, resp *fasthttp.Response) error {
		if err := client.Do(req, resp); err != nil {
			return err
		}
		if c := resp.StatusCode(); c != http.StatusOK && c != http.StatusNotModified {
			b := resp.Body()
			return fmt.Errorf("HTTP %d: %s", c, b[:min(len(b), 200)])
		}
		return nil
	}
	var firstErr atomic.Value
	run := func(until time.Time, record bool) ([]time.Duration, int64) {
		var mu sync.Mutex
		var lat []time.Duration
		var errs int64
		var wg sync.WaitGroup
		for range conc {
			wg.Go(func() {
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				req.SetRequestURI(sc.url)
				req.Header.SetMethod(sc.method)
				for k, v := range sc.header {
					req.Header.Set(k, v)
				}
				if sc.body != "" {
					req.SetBodyString(sc.body)
				}
				local := make([]time.Duration, 0, 4096)
				var e int64
				for time.Now().Before(until) && ctx.Err() == nil {
					t := time.Now()
					if err := one(req, resp); err != nil {
						e++
						firstErr.CompareAndSwap(nil, err.Error())
						continue
					}
					local = append(local, time.Since(t))
				}
				if record {
					mu.Lock()
					lat = append(lat, local...)
					errs += e
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return lat, errs
	}
	run(time.Now().Add(warmup), false)
	if onStart != nil {
		onStart()
	}
	cpu0 := selfCPU()
	start := time.Now()
	lat, errs := run(start.Add(d), true)
	return summarizeWindow(sc.name, conc, sc.sigsPerRequest, lat, errs, time.Since(start), selfCPU()-cpu0, &firstErr)
}

// summarizeWindow is the result of one measured window: the latencies of
// its answered requests (sorted here), its errors and the first one's
// text, its wall time and this process's CPU time (the load client's).
func summarizeWindow(name string, conc, sigsPerRequest int, lat []time.Duration, errs int64, elapsed, clientCPU time.Duration, firstErr *atomic.Value) benchResult {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	r := benchResult{Scenario: name, Concurrency: conc, Requests: int64(len(lat)), Errors: errs,
		RequestsPerS: float64(len(lat)) / elapsed.Seconds(), P50ms: pct(0.50), P99ms: pct(0.99), P999ms: pct(0.999)}
	if v, ok := firstErr.Load().(string); ok && errs > 0 {
		r.FirstError = v
	}
	r.SignaturesPerS = r.RequestsPerS * float64(sigsPerRequest)
	if len(lat) > 0 {
		r.ClientCPUPerRequestUS = clientCPU.Seconds() * 1e6 / float64(len(lat))
	}
	return r
}

// selfCPU is this process's user plus system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runSoak cycles through the scenarios at 4 connections for d and samples
// the server's RSS every 10 s.
func runSoak(ctx context.Context, scenarios []benchScenario, metrics string, d time.Duration) *soakReport {
	rep := &soakReport{Duration: d.String()}
	sample := func() {
		if m, err := scrapeProcess(metrics); err == nil {
			rep.RSSMiB = append(rep.RSSMiB, float64(int(m.rssMiB*10))/10)
		}
	}
	sample()
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
		step := min(10*time.Second, time.Until(end))
		r := runScenario(ctx, scenarios[i%len(scenarios)], 4, 0, step, nil)
		rep.Requests += r.Requests
		rep.Errors += r.Errors
		sample()
	}
	return rep
}
