package tlog

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the operator's Prometheus metrics (names keysvc_tlog_operator_*;
// the node-side log client has its own). Registered only when
// Config.Registerer is set.
type metrics struct {
	addRequests *prometheus.CounterVec
	addDuration prometheus.Histogram
	entries     prometheus.Counter
	published   time.Time // guarded by Operator.pubMu
}

func (o *Operator) initMetrics(reg prometheus.Registerer) error {
	m := &metrics{
		addRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "keysvc_tlog_operator_add_requests_total",
			Help: "Add and add-batch calls by result: ok, invalid (400), unavailable (503: engine pushback or failure)."}, []string{"result"}),
		addDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "keysvc_tlog_operator_add_duration_seconds",
			Help:    "Time from an add or add-batch call to its SEP (sequenced, integrated, signed).",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}),
		entries: prometheus.NewCounter(prometheus.CounterOpts{Name: "keysvc_tlog_operator_entries_added_total",
			Help: "New entries sequenced into the log (duplicates not counted)."}),
	}
	size := func(f func() uint64) func() float64 { return func() float64 { return float64(f()) } }
	cs := []prometheus.Collector{m.addRequests, m.addDuration, m.entries,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "keysvc_tlog_operator_integrated_tree_size",
			Help: "Entries sequenced and integrated into the tree (Tessera's tree state)."}, size(func() uint64 {
			n, _ := o.reader.IntegratedSize(context.Background())
			return n
		})),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "keysvc_tlog_operator_published_tree_size",
			Help: "Tree size of the newest published checkpoint (GET sth)."}, size(func() uint64 {
			a, _ := o.latest()
			return a.treeSize
		})),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "keysvc_tlog_operator_cosigned_tree_size",
			Help: "Tree size of the newest published checkpoint that satisfied the witness policy (what proofs use)."}, size(func() uint64 {
			a, ok, _ := o.st.newestPublished(context.Background(), 0)
			if !ok {
				return 0
			}
			return a.treeSize
		})),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "keysvc_tlog_operator_checkpoint_changed_timestamp_seconds",
			Help: "Unix time the published checkpoint last changed; stale while witnesses fail (fail closed) or the log is idle (republished every 10 min)."}, func() float64 {
			o.pubMu.RLock()
			defer o.pubMu.RUnlock()
			if m.published.IsZero() {
				return 0
			}
			return float64(m.published.UnixNano()) / 1e9
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "keysvc_tlog_operator_inflight_entries",
			Help: "Entries accepted but not yet in the artifact-hash index."}, func() float64 {
			o.mu.Lock()
			defer o.mu.Unlock()
			return float64(len(o.pending))
		}),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	o.metrics = m
	return nil
}

// observeAdd records one Add call.
func (o *Operator) observeAdd(start time.Time, result string, added int) {
	if o.metrics == nil {
		return
	}
	o.metrics.addRequests.WithLabelValues(result).Inc()
	if result == "ok" {
		o.metrics.addDuration.Observe(time.Since(start).Seconds())
		o.metrics.entries.Add(float64(added))
	}
}
