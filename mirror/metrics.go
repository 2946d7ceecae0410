package mirror

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	backlog        prometheus.Gauge
	lag            prometheus.Gauge
	leader         prometheus.Gauge
	applied        *prometheus.CounterVec
	failures       prometheus.Counter
	evaluated      prometheus.Counter
	cartsStale     prometheus.Counter
	applySeconds   prometheus.Histogram
	handoffs       *prometheus.CounterVec
	handoffSeconds *prometheus.HistogramVec
	copied         prometheus.Counter
	cutoverSeconds prometheus.Histogram
	sweeper        prometheus.Gauge
	swept          prometheus.Counter
	pending        prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "reservoir_mirror_backlog_changes",
			Help: "Changes in MySQL's change feed that Redis has not applied yet (measured about once a second).",
		}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "reservoir_mirror_lag_seconds",
			Help: "Age of the oldest change Redis has not applied yet (database clock); 0 when the feed is empty. " +
				"A kill switch engaged now would lose nothing once the handoff drains it.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "reservoir_mirror_relay_active",
			Help: "1 when this replica runs the pod's relay (one replica per pod at a time), else 0.",
		}),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_mirror_applied_total",
			Help: "Changes applied to Redis and removed from the feed, by kind (state, adjust, fence).",
		}, []string{"kind"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_mirror_apply_failures_total",
			Help: "Relay rounds or drains that stopped at a change Redis did not apply (retried).",
		}),
		evaluated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_mirror_carts_evaluated_total",
			Help: "Carts of reserves MySQL decided in mysql mode that the relay asked Redis about, for the comparer, as it applied them.",
		}),
		cartsStale: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_mirror_carts_stale_total",
			Help: "Carts the relay did not ask Redis about because a reservation changed again before the relay read it: Redis's state would not be the one MySQL decided from.",
		}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "reservoir_mirror_apply_seconds",
			Help:    "Time to apply one batch of changes to Redis.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_handoffs_total",
			Help: "Handoffs of a shop's decisions to a store, by target and result: done, overtaken (a newer one won), " +
				"forced (Redis took the shop without MySQL: kill switch redis_only), failed; to MySQL also joined (another replica's cut-over finished it), " +
				"busy (another replica copies the shop) and whole (the whole shop taken over: a copy lost or its copier gone).",
		}, []string{"to", "result"}),
		handoffSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "reservoir_handoff_seconds",
			Help:    "Time a handoff took, drain or copy included.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"to"}),
		copied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_handoff_copied_tokens_total",
			Help: "Reservations (holds and tombstones) copied from Redis into MySQL ahead of handoffs to MySQL, catch-up rounds included.",
		}),
		cutoverSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "reservoir_handoff_cutover_seconds",
			Help:    "The undecided window of a handoff to MySQL: from Redis's yield to MySQL's takeover of the last changes.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		sweeper: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "reservoir_handoff_sweeper_active",
			Help: "1 when this replica runs the pod's handoff sweeper (one replica per pod at a time), else 0.",
		}),
		swept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_handoff_swept_total",
			Help: "Shops the handoff sweeper handed off to the store the flags name after a flags change.",
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "reservoir_handoff_pending_shops",
			Help: "Shops whose fences do not name the store the flags name yet, as the active sweeper last counted them (0 on the other replicas).",
		}),
	}
	for _, c := range []prometheus.Collector{m.backlog, m.lag, m.leader, m.applied, m.failures, m.evaluated, m.cartsStale, m.applySeconds, m.handoffs, m.handoffSeconds, m.copied, m.cutoverSeconds, m.sweeper, m.swept, m.pending} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
