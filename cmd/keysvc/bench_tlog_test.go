package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// TestScrapeFamily: every label set of a family is summed; other families
// sharing its name as a prefix are not.
func TestScrapeFamily(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `# HELP keysvc_tlog_outbox_rows x
# TYPE keysvc_tlog_outbox_rows gauge
keysvc_tlog_outbox_rows{log="http://a"} 1500
keysvc_tlog_outbox_rows{log="http://b"} 25
keysvc_tlog_outbox_rows_other 7
keysvc_tlog_submitted_entries_total 3
`)
	}))
	defer srv.Close()
	if got := scrapeFamily(srv.URL, "keysvc_tlog_outbox_rows"); got != 1525 {
		t.Errorf("outbox rows %v, want 1525", got)
	}
	if got := scrapeFamily(srv.URL, "keysvc_tlog_submitted_entries_total"); got != 3 {
		t.Errorf("submitted %v, want 3", got)
	}
	if got := scrapeFamily(srv.URL, "keysvc_missing"); got != 0 {
		t.Errorf("missing %v, want 0", got)
	}
}

// TestTlogVerdicts: one line per target, met or not, from the report.
func TestTlogVerdicts(t *testing.T) {
	rep := &tlogBenchReport{
		Results: []tlogBenchRow{
			{Scenario: "sign", Concurrency: 16, Ratio: 0.912, SustainedRatio: 0.85},
			{Scenario: "sign", Concurrency: 1, Ratio: 0.5},
			{Scenario: "sign:batch(100)", Concurrency: 16, Ratio: 0.8994, SustainedRatio: 0.91},
		},
		Inclusion:  inclusionReport{Samples: 10, P99ms: 1995},
		AppendPerS: 21000,
	}
	want := []string{
		"sign at 16 clients: on/off 0.912 (≥ 0.9: met); sustained with the backlog drained 0.850 (NOT met)",
		"sign:batch(100) at 16 clients: on/off 0.899 (≥ 0.9: NOT met); sustained with the backlog drained 0.910 (met)",
		"sign to inclusion p99 1995 ms (≤ 2000 ms: met)",
		"log append rate seen 21000 leaves/s (≥ 20000: met; a lower bound when the log kept up with the signing)",
	}
	if got := tlogVerdicts(rep); !slices.Equal(got, want) {
		t.Errorf("verdicts\n got %q\nwant %q", got, want)
	}
	// Rounds pool: (0.9·1000 + 0.95·1000) / 2000 = 0.925 on, sustained
	// weighted by the off rate.
	pooled := &tlogBenchReport{Results: []tlogBenchRow{
		{Scenario: "sign", Concurrency: 16, Round: 1, Off: benchResult{SignaturesPerS: 1000}, On: benchResult{SignaturesPerS: 900}, Ratio: 0.9, SustainedRatio: 0.8},
		{Scenario: "sign", Concurrency: 16, Round: 2, Off: benchResult{SignaturesPerS: 3000}, On: benchResult{SignaturesPerS: 2850}, Ratio: 0.95, SustainedRatio: 0.9},
	}, Inclusion: inclusionReport{Samples: 1, P99ms: 1}}
	if got := tlogVerdicts(pooled)[0]; got != "sign at 16 clients: on/off 0.938 over 2 rounds (0.900, 0.950) (≥ 0.9: met); sustained with the backlog drained 0.875 (NOT met)" {
		t.Errorf("pooled rounds: %q", got)
	}
	rep.Inclusion.TimedOut = 1
	if got := tlogVerdicts(rep)[2]; got != "sign to inclusion p99 1995 ms (≤ 2000 ms: NOT met)" {
		t.Errorf("with a sample never included: %q", got)
	}
}
