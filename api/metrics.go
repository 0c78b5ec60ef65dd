package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// metrics are keysvc's Prometheus metrics. Label values are bounded: key
// names come from the Keyring (unknown names are "unknown"), outcomes are
// the API's stable error codes.
type metrics struct {
	reg          *prometheus.Registry
	signRequests *prometheus.CounterVec   // key, layer, backend, outcome
	signDuration *prometheus.HistogramVec // key, layer, backend
	backendCall  *prometheus.HistogramVec // backend, op
	docRequests  *prometheus.CounterVec   // document, code

	signRequestsC observerCache[prometheus.Counter]
	signDurationC observerCache[prometheus.Observer]
	backendCallC  observerCache[prometheus.Observer]
	docRequestsC  observerCache[prometheus.Counter]
}

var latencyBuckets = []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1}

func newMetrics(m *rotation.Manager, st store.Store, b BuildInfo) *metrics {
	reg := prometheus.NewRegistry()
	x := &metrics{
		reg: reg,
		signRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "keysvc_sign_requests_total",
			Help: "Sign requests by key, layer (jws, transport), backend and outcome (ok or the error code)."},
			[]string{"key", "layer", "backend", "outcome"}),
		signDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "keysvc_sign_duration_seconds",
			Help: "Time to answer a sign request, from routing to response, in seconds.", Buckets: latencyBuckets},
			[]string{"key", "layer", "backend"}),
		backendCall: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "keysvc_backend_call_duration_seconds",
			Help: "Time of one backend signature (crypto.Signer.Sign) in seconds; a batch's in-memory Ed25519 signatures are made together and each observes their mean (ADR 0044).", Buckets: latencyBuckets},
			[]string{"backend", "op"}),
		docRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "keysvc_jwks_requests_total",
			Help: "Public document requests (jwks, history, did) by HTTP status; 304s are revalidations."},
			[]string{"document", "code"}),
	}
	reg.MustRegister(x.signRequests, x.signDuration, x.backendCall, x.docRequests,
		&keyCollector{m: m}, &auditCollector{st: st},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if b.Version != "" {
		bi := prometheus.NewGauge(prometheus.GaugeOpts{Name: "keysvc_build_info",
			Help:        "Always 1; the labels describe the running binary (module version, VCS revision, Go version), as keysvc version prints them.",
			ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "go_version": b.GoVersion}})
		bi.Set(1)
		reg.MustRegister(bi)
	}
	return x
}

func (x *metrics) handler() http.Handler {
	return promhttp.HandlerFor(x.reg, promhttp.HandlerOpts{Registry: x.reg})
}

// instrumentSign records keysvc_sign_requests_total and
// keysvc_sign_duration_seconds for a signing route.
func (s *Server) instrumentSign(layer string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			key, backend := "unknown", "unknown"
			if e, ok := s.cfg.Manager.Keyring().Keys[c.Param("name")]; ok {
				key, backend = e.Key.Name, e.Key.Backend
			}
			outcome := "ok"
			if err != nil {
				var ae *apiError
				if errors.As(err, &ae) {
					outcome = ae.Code
				} else {
					outcome = CodeInternal
				}
			}
			m := s.metrics
			m.signRequestsC.get(m.signRequests.WithLabelValues, key, layer, backend, outcome).Inc()
			m.signDurationC.get(m.signDuration.WithLabelValues, key, layer, backend).Observe(time.Since(start).Seconds())
			return err
		}
	}
}

// keyCollector reports per-key gauges from the Keyring at scrape time.
type keyCollector struct{ m *rotation.Manager }

var (
	keyAgeDesc = prometheus.NewDesc("keysvc_key_age_seconds",
		"Seconds since the key's active version activated.", []string{"key", "kid"}, nil)
	nextRotationDesc = prometheus.NewDesc("keysvc_next_rotation_seconds",
		"Seconds until the key's next scheduled transition (prepublication or activation); negative when overdue.", []string{"key"}, nil)
	retentionDesc = prometheus.NewDesc("keysvc_version_jwks_retention_end_seconds",
		"Seconds until a retired version leaves the plain JWKS under its key's retention (it stays in the key history).", []string{"key", "kid"}, nil)
	versionsDesc = prometheus.NewDesc("keysvc_key_versions",
		"Key versions by lifecycle state.", []string{"key", "state"}, nil)
	leaseDesc = prometheus.NewDesc("keysvc_signing_lease_remaining_seconds",
		"Seconds left of this replica's signing lease (ADR 0014); at or below zero it refuses to sign (key_history_stale).", nil, nil)
	failuresDesc = prometheus.NewDesc("keysvc_background_failures_total",
		"Failed background attempts by loop: reload (key history reads), probe (freshness probes), scheduler (scheduled transitions, per key), load (private halves), held (activations held), commit_deadline (transactions retried with a later activation).", []string{"loop"}, nil)
	loadFailingDesc = prometheus.NewDesc("keysvc_version_load_failing",
		"1 for a key version whose private half this replica cannot load now (state active, armed or pending).", []string{"key", "kid", "state"}, nil)
)

func (k *keyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- keyAgeDesc
	ch <- nextRotationDesc
	ch <- versionsDesc
	ch <- retentionDesc
	ch <- leaseDesc
	ch <- failuresDesc
	ch <- loadFailingDesc
}

func (k *keyCollector) Collect(ch chan<- prometheus.Metric) {
	ring := k.m.Keyring()
	now := time.Now()
	if k.m.PropagationBound() > 0 {
		ch <- prometheus.MustNewConstMetric(leaseDesc, prometheus.GaugeValue, k.m.LeaseUntil().Sub(now).Seconds())
	}
	st := k.m.Stats()
	for _, c := range []struct {
		loop string
		n    int64
	}{{"reload", st.ReloadFailures.Load()}, {"probe", st.ProbeFailures.Load()}, {"scheduler", st.SchedulerFailures.Load()},
		{"load", st.LoadFailures.Load()}, {"held", st.HeldActivations.Load()}, {"commit_deadline", st.CommitDeadlines.Load()}} {
		ch <- prometheus.MustNewConstMetric(failuresDesc, prometheus.CounterValue, float64(c.n), c.loop)
	}
	for _, name := range ring.SortedNames() {
		e := ring.Keys[name]
		for _, f := range []struct {
			kid, state string
			err        error
		}{{activeKID(e), "active", e.LoadErr}, {e.NextKID, "armed", e.NextErr}, {e.PendingKID, "pending", e.PendingErr}} {
			if f.kid != "" && f.err != nil {
				ch <- prometheus.MustNewConstMetric(loadFailingDesc, prometheus.GaugeValue, 1, name, f.kid, f.state)
			}
		}
		counts := map[store.KeyState]int{}
		for _, v := range e.Versions {
			counts[v.State]++
			if v.State == store.StateActive && v.ActivatedAt != nil {
				ch <- prometheus.MustNewConstMetric(keyAgeDesc, prometheus.GaugeValue, now.Sub(*v.ActivatedAt).Seconds(), name, v.KID)
			}
			if r := time.Duration(e.Policy.Retention); r > 0 && v.State == store.StateRetired && v.RetiredAt != nil {
				ch <- prometheus.MustNewConstMetric(retentionDesc, prometheus.GaugeValue, v.RetiredAt.Add(r).Sub(now).Seconds(), name, v.KID)
			}
		}
		for _, st := range []store.KeyState{store.StatePending, store.StateActive, store.StateRetired, store.StateRevoked} {
			ch <- prometheus.MustNewConstMetric(versionsDesc, prometheus.GaugeValue, float64(counts[st]), name, string(st))
		}
		if at, ok := k.m.NextTransition(e); ok {
			ch <- prometheus.MustNewConstMetric(nextRotationDesc, prometheus.GaugeValue, at.Sub(now).Seconds(), name)
		}
	}
}

// auditCollector reports the audit chain length, reading only rows added
// since the previous scrape.
type auditCollector struct {
	st   store.Store
	mu   sync.Mutex
	last int64
}

var auditDesc = prometheus.NewDesc("keysvc_audit_chain_length", "Rows in the hash-chained audit trail.", nil, nil)

func (a *auditCollector) Describe(ch chan<- *prometheus.Desc) { ch <- auditDesc }

func (a *auditCollector) Collect(ch chan<- prometheus.Metric) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for {
		rows, err := a.st.ListAudit(ctx, a.last, 1000)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(auditDesc, err)
			return
		}
		if len(rows) == 0 {
			break
		}
		a.last = rows[len(rows)-1].Seq
	}
	ch <- prometheus.MustNewConstMetric(auditDesc, prometheus.GaugeValue, float64(a.last))
}

func statusLabel(code int) string {
	switch code {
	case http.StatusOK:
		return "200"
	case http.StatusNotModified:
		return "304"
	}
	return strconv.Itoa(code)
}

// activeKID is the kid of e's active version, "" when none.
func activeKID(e *rotation.KeyEntry) string {
	for _, v := range e.Versions {
		if v.State == store.StateActive {
			return v.KID
		}
	}
	return ""
}
