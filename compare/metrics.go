package compare

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	observations *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	diffsWritten prometheus.Counter
	diffsDropped *prometheus.CounterVec
	statsFlushes *prometheus.CounterVec
	statsDropped prometheus.Counter
	logsDropped  prometheus.Counter
	cleanedRows  *prometheus.CounterVec
}

// Reasons a diff record was not written (the reason label of
// reservoir_compare_diffs_dropped_total).
const (
	dropRateLimited = "rate_limited"
	dropQueueFull   = "queue_full"
	dropWriteFailed = "write_failed"
	dropClosed      = "closed"
)

// Store calls take from well under a millisecond (Redis) to the shadow's
// deadline; the buckets resolve both ends.
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		observations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_compare_observations_total",
			Help: "Dual-written calls by operation, class (see compare.Classify), pod and mode. " +
				"A shop is never a label: shops live in the sampled diff records.",
		}, []string{"op", "class", "reservoir_pod", "mode"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "reservoir_compare_latency_seconds",
			Help: "Latency of each store in dual-written calls, by store, side (authority or shadow), " +
				"operation and mode. A skipped shadow is not observed.",
			Buckets: latencyBuckets,
		}, []string{"store", "side", "op", "mode"}),
		diffsWritten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_compare_diffs_written_total",
			Help: "Diff records written to compare_diffs.",
		}),
		diffsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_compare_diffs_dropped_total",
			Help: "Diff records of non-match observations not written, by reason: rate_limited (over " +
				"the per-class token bucket), queue_full (the writer is behind), write_failed (the " +
				"INSERT failed), closed (observed after Close).",
		}, []string{"reason"}),
		statsFlushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_compare_stats_flushes_total",
			Help: "Flushes of the in-memory stats to compare_stats, by result (ok, error). " +
				"A failed flush keeps its counts for the next one.",
		}, []string{"result"}),
		statsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_compare_stats_dropped_total",
			Help: "Observations not counted in compare_stats because too many keys were pending " +
				"(the database has been unreachable for long) or the comparer was closed.",
		}),
		logsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_compare_logs_suppressed_total",
			Help: "Log records suppressed by the comparer's log rate cap.",
		}),
		cleanedRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_compare_cleanup_rows_total",
			Help: "Rows deleted by retention cleanup, by table.",
		}, []string{"table"}),
	}
	for _, c := range []prometheus.Collector{m.observations, m.latency, m.diffsWritten, m.diffsDropped,
		m.statsFlushes, m.statsDropped, m.logsDropped, m.cleanedRows} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
