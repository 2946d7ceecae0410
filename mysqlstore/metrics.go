package mysqlstore

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	connHold       *prometheus.HistogramVec
	connWait       *prometheus.HistogramVec
	retries        *prometheus.CounterVec
	replenish      *prometheus.CounterVec
	replenishUnits prometheus.Counter
	shortRetries   prometheus.Counter
	reapedHolds    prometheus.Counter
	tombstones     *prometheus.CounterVec
	tombstoneHits  *prometheus.CounterVec
	forgotten      prometheus.Counter
	notDecider     prometheus.Counter
	feedWritten    *prometheus.CounterVec
	handoffs       *prometheus.CounterVec
	deductGroup    prometheus.Histogram
	claimGroup     prometheus.Histogram
}

// Connection hold times are short (a reserve is a few round trips); the
// buckets resolve sub-millisecond holds and still show multi-second stalls.
var holdBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connHold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "reservoir_mysql_conn_hold_seconds",
			Help: "Time a connection is held by a caller, from acquiring it to releasing it. " +
				"By Little's law, rate(reservoir_mysql_conn_hold_seconds_sum[1m]) per caller is " +
				"the average number of connections that caller occupies.",
			Buckets: holdBuckets,
		}, []string{"caller"}),
		connWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "reservoir_mysql_conn_wait_seconds",
			Help:    "Time a caller waited for a connection from the pool.",
			Buckets: holdBuckets,
		}, []string{"caller"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_mysql_tx_retries_total",
			Help: "Transactions retried after a deadlock (1213) or lock wait timeout (1205).",
		}, []string{"caller", "reason"}),
		replenish: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_mysql_replenish_total",
			Help: "Replenish attempts by result: inserted (units added), full (pool at cap), " +
				"no_stock (ledger has no unheld stock beyond the pool), joined (another replenisher just refilled).",
		}, []string{"result"}),
		replenishUnits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_mysql_replenish_units_total",
			Help: "Units inserted into pools by the replenisher.",
		}),
		shortRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_mysql_reserve_short_retries_total",
			Help: "Reserve attempts that found a pool short and went back to it after a refill or a wait for units other reserves held locked.",
		}),
		reapedHolds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_mysql_reaped_holds_total",
			Help: "Expired hold records returned by the reaper.",
		}),
		tombstones: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_mysql_tombstones_written_total",
			Help: "Reservations that reached a terminal state in MySQL, by state (claimed, released, expired, refused).",
		}, []string{"state"}),
		tombstoneHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_mysql_tombstone_hits_total",
			Help: "Calls answered from a reservation's tombstone (a late claim, a replayed or delayed reserve), by state.",
		}, []string{"state"}),
		forgotten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_mysql_tombstones_forgotten_total",
			Help: "Tombstones deleted after their time (Config.TombstoneTTL).",
		}),
		notDecider: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_mysql_not_decider_total",
			Help: "Calls MySQL refused because its fence names Redis as the shop's decider (routed elsewhere by the facade).",
		}),
		feedWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_mysql_feed_written_total",
			Help: "Changes recorded in the change feed for Redis to follow, by kind (state, adjust, fence).",
		}, []string{"kind"}),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_mysql_handoffs_total",
			Help: "Fence changes MySQL made: yield (to Redis), take_over (from Redis), by result (changed, unchanged).",
		}, []string{"kind", "result"}),
		deductGroup: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "reservoir_mysql_deduct_group_size",
			Help:    "Legacy claims (Deduct) per shared transaction: about the number waiting while the previous group was in flight.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		claimGroup: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "reservoir_mysql_claim_group_size",
			Help:    "Claims (as authority) per shared transaction: about the number waiting while the previous group was in flight.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
	}
	for _, c := range []prometheus.Collector{m.connHold, m.connWait, m.retries, m.replenish, m.replenishUnits, m.shortRetries, m.reapedHolds,
		m.tombstones, m.tombstoneHits, m.forgotten, m.notDecider, m.feedWritten, m.handoffs, m.deductGroup, m.claimGroup} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
