package main

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"time"
)

// plannedTypes are the metric families of issue 7 with their types; every
// name that alerts.yaml, the dashboard and the docs use is one of them.
var plannedTypes = map[string]string{
	"keysvc_sign_requests_total":           "counter",
	"keysvc_sign_duration_seconds":         "histogram",
	"keysvc_backend_call_duration_seconds": "histogram",
	"keysvc_key_age_seconds":               "gauge",
	"keysvc_next_rotation_seconds":         "gauge",
	"keysvc_key_versions":                  "gauge",
	"keysvc_jwks_requests_total":           "counter",
	"keysvc_audit_chain_length":            "gauge",
}

// tlogOperatorTypes are the metric families of `keysvc tlog serve` (its own
// process and listener, so not on the dev instance lintMetrics reads); the
// docs may name them. TestTlogAuditDetectsTampering (cmd/keysvc) checks a
// live operator exports each with this type.
var tlogOperatorTypes = map[string]string{
	"keysvc_tlog_operator_add_requests_total":                   "counter",
	"keysvc_tlog_operator_add_duration_seconds":                 "histogram",
	"keysvc_tlog_operator_entries_added_total":                  "counter",
	"keysvc_tlog_operator_integrated_tree_size":                 "gauge",
	"keysvc_tlog_operator_published_tree_size":                  "gauge",
	"keysvc_tlog_operator_cosigned_tree_size":                   "gauge",
	"keysvc_tlog_operator_checkpoint_changed_timestamp_seconds": "gauge",
	"keysvc_tlog_operator_inflight_entries":                     "gauge",
}

// tlogClientTypes are the metric families of serve's transparency-log
// client (ADR 0015), exported when a log is configured — always by the dev
// instance lintMetrics reads, whose embedded log is on.
var tlogClientTypes = map[string]string{
	"keysvc_tlog_record_duration_seconds":   "histogram",
	"keysvc_tlog_record_errors_total":       "counter",
	"keysvc_tlog_group_commit_rows":         "histogram",
	"keysvc_tlog_submitted_entries_total":   "counter",
	"keysvc_tlog_submit_errors_total":       "counter",
	"keysvc_tlog_submit_duration_seconds":   "histogram",
	"keysvc_tlog_promise_latency_seconds":   "histogram",
	"keysvc_tlog_claimed_entries_total":     "counter",
	"keysvc_tlog_type_conflicts_total":      "counter",
	"keysvc_tlog_outbox_rows":               "gauge",
	"keysvc_tlog_outbox_oldest_age_seconds": "gauge",
	"keysvc_tlog_queued_entries":            "gauge",
	"keysvc_tlog_log_up":                    "gauge",
}

// lintMetrics checks a running keysvc (a dev instance started by lint.sh,
// which has signed once and has a key with a rotation period): after one
// JWKS request, GET /metrics must expose every planned family with its type.
func lintMetrics(p *problems, base string) {
	c := &http.Client{Timeout: 5 * time.Second}
	if resp, err := c.Get(base + "/.well-known/jwks.json"); err != nil {
		p.add(base, "GET /.well-known/jwks.json: %v", err)
		return
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		p.add(base, "GET /metrics: %v", err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		p.add(base, "GET /metrics: HTTP %d", resp.StatusCode)
		return
	}
	got := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			got[f[2]] = f[3]
		}
	}
	want := map[string]string{}
	for name, typ := range plannedTypes {
		want[name] = typ
	}
	for name, typ := range tlogClientTypes {
		want[name] = typ
	}
	for name, typ := range want {
		switch g, ok := got[name]; {
		case !ok:
			p.add(base+"/metrics", "%s (%s) is missing", name, typ)
		case g != typ:
			p.add(base+"/metrics", "%s is a %s, the alerts and dashboard expect a %s", name, g, typ)
		}
	}
}
