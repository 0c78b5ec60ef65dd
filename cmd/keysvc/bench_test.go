package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchCommand runs `keysvc bench` briefly against a dev server and
// checks every scenario ran without errors; non-loopback targets are refused.
func TestBenchCommand(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, nil, "--dev", "--data-dir", dir)
	out, errOut, code := runCLI(t, nil, "bench", "--server", srv.URL, "--data-dir", dir, "--key", "dev",
		"--duration", "300ms", "--warmup", "0s", "--concurrency", "1,4", "--json")
	if code != 0 {
		t.Fatalf("bench: exit %d\n%s", code, errOut)
	}
	var res struct {
		Raw     float64 `json:"raw_ed25519_per_second"`
		Results []struct {
			Scenario    string  `json:"scenario"`
			Concurrency int     `json:"concurrency"`
			Requests    int64   `json:"requests"`
			Errors      int64   `json:"errors"`
			Ratio       float64 `json:"ratio_to_raw_ed25519"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.Raw <= 0 || len(res.Results) != 10 {
		t.Fatalf("bench output %s", out)
	}
	for _, r := range res.Results {
		if r.Requests == 0 || r.Errors != 0 {
			t.Errorf("%s at %d: %d requests, %d errors", r.Scenario, r.Concurrency, r.Requests, r.Errors)
		}
		if strings.HasPrefix(r.Scenario, "sign") && r.Ratio <= 0 {
			t.Errorf("%s: ratio %v", r.Scenario, r.Ratio)
		}
	}
	_, errOut, code = runCLI(t, nil, "bench", "--server", "http://10.0.0.1:8080", "--data-dir", dir)
	if code != 1 || !strings.Contains(errOut, "loopback addresses only") {
		t.Fatalf("non-loopback target: exit %d %s", code, errOut)
	}
}
