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
	for name, typ := range plannedTypes {
		switch g, ok := got[name]; {
		case !ok:
			p.add(base+"/metrics", "%s (%s) is missing", name, typ)
		case g != typ:
			p.add(base+"/metrics", "%s is a %s, the alerts and dashboard expect a %s", name, g, typ)
		}
	}
}
