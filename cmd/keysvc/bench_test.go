package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestBenchCommand runs `keysvc bench` briefly against a dev server and
// checks every scenario ran without errors; non-loopback targets are refused.
func TestBenchCommand(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, nil, "--dev", "--data-dir", dir, "--rate-limit", "0", "--public-rate-limit", "0")
	out, errOut, code := runCLI(t, nil, "bench", "--server", srv.URL, "--data-dir", dir, "--key", "dev",
		"--duration", "300ms", "--warmup", "0s", "--concurrency", "1,4", "--json")
	if code != 0 {
		t.Fatalf("bench: exit %d\n%s", code, errOut)
	}
	var res struct {
		Raw     float64 `json:"raw_ed25519_per_second"`
		Floor   float64 `json:"http_floor_requests_per_second"`
		RSS     float64 `json:"server_rss_mib_before"`
		Results []struct {
			Scenario    string  `json:"scenario"`
			Concurrency int     `json:"concurrency"`
			Requests    int64   `json:"requests"`
			Errors      int64   `json:"errors"`
			FirstError  string  `json:"first_error"`
			Ratio       float64 `json:"ratio_to_raw_ed25519"`
			FloorRatio  float64 `json:"ratio_to_http_floor"`
			CPU         float64 `json:"server_cpu_us_per_request"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.Raw <= 0 || res.Floor <= 0 || res.RSS <= 0 || len(res.Results) != 12 {
		t.Fatalf("bench output %s", out)
	}
	want := []string{"sign", "mcp-transport", "sign:batch(100)", "mcp-transport:batch(100)", "jwks", "jwks(304)"}
	for i, r := range res.Results {
		if r.Scenario != want[i/2] || r.Concurrency != []int{1, 4}[i%2] {
			t.Errorf("result %d: %s at %d, want %s at %d", i, r.Scenario, r.Concurrency, want[i/2], []int{1, 4}[i%2])
		}
		if r.Requests == 0 || r.Errors != 0 {
			t.Errorf("%s at %d: %d requests, %d errors (%s)", r.Scenario, r.Concurrency, r.Requests, r.Errors, r.FirstError)
		}
		if strings.HasPrefix(r.Scenario, "sign") || strings.HasPrefix(r.Scenario, "mcp") {
			if r.Ratio <= 0 {
				t.Errorf("%s: ratio %v", r.Scenario, r.Ratio)
			}
		} else if r.Ratio != 0 {
			t.Errorf("%s: a ratio to raw Ed25519 (%v) for a scenario that signs nothing", r.Scenario, r.Ratio)
		}
		if r.FloorRatio <= 0 || r.CPU <= 0 {
			t.Errorf("%s at %d: floor ratio %v, server CPU %v µs", r.Scenario, r.Concurrency, r.FloorRatio, r.CPU)
		}
	}
	// A scenario filter and a refused level.
	out, errOut, code = runCLI(t, nil, "bench", "--server", srv.URL, "--data-dir", dir, "--duration", "100ms", "--warmup", "0s",
		"--concurrency", "2", "--scenarios", "jwks(304)", "--json")
	if code != 0 || strings.Count(out, `"scenario"`) != 1 || !strings.Contains(out, `"jwks(304)"`) {
		t.Fatalf("--scenarios jwks(304): exit %d %s %s", code, out, errOut)
	}
	if _, errOut, code = runCLI(t, nil, "bench", "--server", srv.URL, "--data-dir", dir, "--concurrency", "0"); code != 1 || !strings.Contains(errOut, "1..256") {
		t.Fatalf("--concurrency 0: exit %d %s", code, errOut)
	}
	_, errOut, code = runCLI(t, nil, "bench", "--server", "http://10.0.0.1:8080", "--data-dir", dir)
	if code != 1 || !strings.Contains(errOut, "loopback addresses only") {
		t.Fatalf("non-loopback target: exit %d %s", code, errOut)
	}
}

// TestBenchFloorModes: bench-floor's raw Ed25519 mode (bench/sidebyside)
// prints a CPU time per signature, and its listener is loopback only.
func TestBenchFloorModes(t *testing.T) {
	msg := t.TempDir() + "/input"
	if err := os.WriteFile(msg, []byte("eyJhbGciOiJFZERTQSJ9.e30"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, nil, "bench-floor", "--raw-ed25519", msg)
	if code != 0 {
		t.Fatalf("bench-floor --raw-ed25519: exit %d\n%s", code, errOut)
	}
	var us float64
	if _, err := fmt.Sscanf(out, "raw_ed25519_cpu_us %g", &us); err != nil || us <= 0 {
		t.Fatalf("bench-floor --raw-ed25519 printed %q (%v)", out, err)
	}
	if _, errOut, code := runCLI(t, nil, "bench-floor", "--listen", "192.0.2.1:29999"); code == 0 || !strings.Contains(errOut, "loopback") {
		t.Fatalf("bench-floor on a non-loopback address: exit %d, %s", code, errOut)
	}
}
