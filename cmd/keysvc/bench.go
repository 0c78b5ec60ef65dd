package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

func init() { extraCommands = append(extraCommands, newBenchCmd) }

// benchResult is one scenario at one concurrency.
type benchResult struct {
	Scenario       string  `json:"scenario"`
	Concurrency    int     `json:"concurrency"`
	Requests       int64   `json:"requests"`
	Errors         int64   `json:"errors"`
	RequestsPerS   float64 `json:"requests_per_second"`
	SignaturesPerS float64 `json:"signatures_per_second"`
	P50ms          float64 `json:"p50_ms"`
	P99ms          float64 `json:"p99_ms"`
	P999ms         float64 `json:"p999_ms"`
	RatioToRaw     float64 `json:"ratio_to_raw_ed25519"`
}

type benchScenario struct {
	name, method, path, body string
	header                   map[string]string
	sigsPerRequest           int
}

func newBenchCmd() *cobra.Command {
	var sign, key string
	var duration, warmup time.Duration
	var levels []int
	var asJSON bool
	cf := &clientFlags{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load-test a running keysvc on loopback and compare with raw ed25519.Sign on this machine",
		Long: `Drives a running keysvc over HTTP with keep-alive at fixed concurrency levels,
each for a fixed duration after a warm-up: single signs, VRP MCP transport
assertions, batches of 100, and JWKS fetches with and without If-None-Match.
In the same run it measures raw ed25519.Sign on GOMAXPROCS goroutines over a
signing input of the same size and prints every rate as a ratio to it.
Only loopback addresses are accepted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			server := cf.server
			for _, u := range []string{server, sign} {
				if err := loopbackOnly(u); err != nil {
					return err
				}
			}
			tok, err := cf.token()
			if err != nil {
				return err
			}
			if sign == "" {
				sign = server
			}
			items := make([]string, 100)
			for i := range items {
				items[i] = `{"payload":{"offer_id":"offer:villaakerlyckan.se:2026-09-02/05","i":` + strconv.Itoa(i) + `}}`
			}
			jwksURL := server + "/v1/keys/" + url.PathEscape(key) + "/jwks.json"
			etag, err := fetchETag(jwksURL)
			if err != nil {
				return err
			}
			auth := map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json"}
			scenarios := []benchScenario{
				{"sign", "POST", sign + "/v1/keys/" + key + "/sign", `{"payload":{"offer_id":"offer:villaakerlyckan.se:2026-09-02/05"}}`, auth, 1},
				{"mcp-transport", "POST", sign + "/v1/keys/" + key + "/mcp-transport", `{"tool":"get_verified_stay_offer","arguments":{"checkIn":"2026-09-02","checkOut":"2026-09-05","guests":2}}`, auth, 1},
				{"sign:batch(100)", "POST", sign + "/v1/keys/" + key + "/sign:batch", `{"items":[` + strings.Join(items, ",") + `]}`, auth, 100},
				{"jwks", "GET", jwksURL, "", nil, 0},
				{"jwks(304)", "GET", jwksURL, "", map[string]string{"If-None-Match": etag}, 0},
			}
			raw := rawEd25519Rate(duration)
			var results []benchResult
			for _, sc := range scenarios {
				for _, c := range levels {
					r := runScenario(cmd.Context(), sc, c, warmup, duration)
					if sc.sigsPerRequest > 0 {
						r.RatioToRaw = r.SignaturesPerS / raw
					}
					results = append(results, r)
				}
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), map[string]any{"gomaxprocs": runtime.GOMAXPROCS(0), "raw_ed25519_per_second": raw, "results": results})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(tw, "raw ed25519.Sign on %d goroutines:\t%.0f/s\t\n", runtime.GOMAXPROCS(0), raw)
			fmt.Fprintln(tw, "scenario\tconc\treq/s\tsigs/s\tratio\tp50 ms\tp99 ms\tp99.9 ms\terrors\t")
			for _, r := range results {
				fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.3f\t%.3f\t%.3f\t%.3f\t%d\t\n", r.Scenario, r.Concurrency, r.RequestsPerS, r.SignaturesPerS, r.RatioToRaw, r.P50ms, r.P99ms, r.P999ms, r.Errors)
			}
			return tw.Flush()
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVar(&sign, "sign-server", "", "signing listener base URL when separate from --server")
	cmd.Flags().StringVar(&key, "key", "dev", "key to sign with")
	cmd.Flags().DurationVar(&duration, "duration", 5*time.Second, "measured time per scenario and concurrency (at most 60s)")
	cmd.Flags().DurationVar(&warmup, "warmup", time.Second, "warm-up before each measurement")
	cmd.Flags().IntSliceVar(&levels, "concurrency", []int{1, 4, 16, 64}, "concurrency levels")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if duration <= 0 || duration > time.Minute || warmup < 0 || warmup > 10*time.Second {
			return fmt.Errorf("--duration must be in (0, 60s] and --warmup in [0, 10s]")
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
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("bench targets loopback addresses only, not %q", host)
	}
	return nil
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

// rawEd25519Rate measures ed25519.Sign per second on GOMAXPROCS goroutines
// over a 300-byte signing input (a typical transport assertion's).
func rawEd25519Rate(d time.Duration) float64 {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	msg := bytes.Repeat([]byte{'a'}, 300)
	n := runtime.GOMAXPROCS(0)
	var total int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c int64
			for time.Now().Before(deadline) {
				for j := 0; j < 64; j++ {
					_ = ed25519.Sign(key, msg)
				}
				c += 64
			}
			mu.Lock()
			total += c
			mu.Unlock()
		}()
	}
	wg.Wait()
	return float64(total) / time.Since(start).Seconds()
}

func runScenario(ctx context.Context, sc benchScenario, conc int, warmup, d time.Duration) benchResult {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}}
	defer client.CloseIdleConnections()
	one := func() error {
		var body io.Reader
		if sc.body != "" {
			body = strings.NewReader(sc.body)
		}
		req, err := http.NewRequestWithContext(ctx, sc.method, sc.path, body)
		if err != nil {
			return err
		}
		for k, v := range sc.header {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotModified {
			return fmt.Errorf("%s", resp.Status)
		}
		return nil
	}
	run := func(until time.Time, record bool) ([]time.Duration, int64) {
		var mu sync.Mutex
		var lat []time.Duration
		var errs int64
		var wg sync.WaitGroup
		for i := 0; i < conc; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				local := make([]time.Duration, 0, 1024)
				var e int64
				for time.Now().Before(until) && ctx.Err() == nil {
					t := time.Now()
					if err := one(); err != nil {
						e++
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
			}()
		}
		wg.Wait()
		return lat, errs
	}
	run(time.Now().Add(warmup), false)
	start := time.Now()
	lat, errs := run(start.Add(d), true)
	elapsed := time.Since(start).Seconds()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	r := benchResult{Scenario: sc.name, Concurrency: conc, Requests: int64(len(lat)), Errors: errs,
		RequestsPerS: float64(len(lat)) / elapsed, P50ms: pct(0.50), P99ms: pct(0.99), P999ms: pct(0.999)}
	r.SignaturesPerS = r.RequestsPerS * float64(sc.sigsPerRequest)
	return r
}
