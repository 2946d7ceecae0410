package redisstore

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ClaimWindow names a failure window of the legacy two-system claim (see
// the package doc). It is the window label of
// reservoir_redis_legacy_claim_failures_total.
type ClaimWindow string

const (
	// WindowDeductError: Ledger.Deduct returned an error other than a
	// refusal. Whether the ledger was deducted is unknown (a lost commit
	// reply looks the same as a rollback); the Redis hold is untouched.
	WindowDeductError ClaimWindow = "deduct_error"
	// WindowAfterDeduct: the ledger was deducted but the Redis cleanup
	// failed; the hold stays in Redis as a leftover.
	WindowAfterDeduct ClaimWindow = "after_deduct_before_cleanup"
	// WindowHoldGone: the ledger was deducted, and by the time of the
	// cleanup the hold was gone without a claimed marker: a Release or the
	// reaper gave its units back in between. The cleanup takes the
	// deduction out of the quantities again.
	WindowHoldGone ClaimWindow = "hold_gone_before_cleanup"
)

var claimWindows = []ClaimWindow{WindowDeductError, WindowAfterDeduct, WindowHoldGone}

type metrics struct {
	claimFailures  *prometheus.CounterVec
	adjustFailures prometheus.Counter
	scriptSeconds  *prometheus.HistogramVec
	scriptErrors   *prometheus.CounterVec
	reapedHolds    prometheus.Counter
	reapedUnits    prometheus.Counter
	reapSettled    prometheus.Counter
	followSettled  prometheus.Counter
}

// Scripts take tens of microseconds on an idle server; the buckets still
// show a server stalled for seconds.
var scriptBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		claimFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_redis_legacy_claim_failures_total",
			Help: "Legacy claims (MySQL ledger deduction, then Redis hold cleanup) that failed inside a window " +
				"where the two systems disagree: deduct_error (ledger outcome unknown, hold kept), " +
				"after_deduct_before_cleanup (ledger deducted, Redis hold left over), " +
				"hold_gone_before_cleanup (hold released or reaped after the deduction; its units were given back and taken again).",
		}, []string{"window"}),
		adjustFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_redis_adjust_follow_failures_total",
			Help: "Adjusts whose ledger change succeeded but whose Redis quantity did not follow: Drift reports the quantity, Resync fixes it.",
		}),
		scriptSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "reservoir_redis_script_seconds",
			Help:    "Time of one Lua script call, by script.",
			Buckets: scriptBuckets,
		}, []string{"script"}),
		scriptErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_redis_script_errors_total",
			Help: "Lua script calls that returned an error (network, timeout, server), by script. The script may have run.",
		}, []string{"script"}),
		reapedHolds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_redis_reaped_holds_total",
			Help: "Expired hold records (one per allocation) returned by the reaper.",
		}),
		reapedUnits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_redis_reaped_units_total",
			Help: "Units the reaper gave back.",
		}),
		followSettled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_redis_follow_settled_total",
			Help: "Recent ledger claims without a claimed marker in Redis: the claim follower settled them (their Redis half had been lost).",
		}),
		reapSettled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_redis_reap_settled_total",
			Help: "Expired holds whose tokens the ledger had deducted: the reaper settled them as claimed instead of giving their units back (a claim's Redis half had been lost).",
		}),
	}
	// Pre-create every window so a dashboard shows 0, not "no data".
	for _, w := range claimWindows {
		m.claimFailures.WithLabelValues(string(w))
	}
	for _, c := range []prometheus.Collector{m.claimFailures, m.adjustFailures, m.scriptSeconds, m.scriptErrors, m.reapedHolds, m.reapedUnits, m.reapSettled, m.followSettled} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(script string, start time.Time, err error) {
	m.scriptSeconds.WithLabelValues(script).Observe(time.Since(start).Seconds())
	if err != nil {
		m.scriptErrors.WithLabelValues(script).Inc()
	}
}
