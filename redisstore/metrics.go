package redisstore

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/reservation"
)

// ClaimWindow names a failure window of the legacy two-system claim (see
// the package doc). It is the window label of
// reservoir_redis_legacy_claim_failures_total.
type ClaimWindow string

const (
	// WindowDeductError: Ledger.Deduct returned an error other than a
	// refusal. Whether the ledger was deducted is unknown (a lost commit
	// reply looks the same as a rollback); the hold stays, marked
	// claiming, and a retry of the claim goes to the ledger again.
	WindowDeductError ClaimWindow = "deduct_error"
	// WindowAfterDeduct: the ledger was deducted but the inline Redis
	// cleanup (Config.InlineClaimCleanup) failed. The claim still answered
	// success; the hold stays, marked
	// claiming, until the change feed, a retry of the claim or the reaper
	// (after the grace) settles it.
	WindowAfterDeduct ClaimWindow = "after_deduct_before_cleanup"
	// WindowHoldGone: the ledger was deducted, and by the time of the
	// cleanup the hold was gone: released or expired (after the grace, by
	// a call that asked the ledger before the deduction committed), in
	// which case the cleanup takes the deduction out of the quantities and
	// turns the tombstone into a claimed one; or removed by a Rewrite,
	// whose quantities already follow the ledger.
	WindowHoldGone ClaimWindow = "hold_gone_before_cleanup"
)

var claimWindows = []ClaimWindow{WindowDeductError, WindowAfterDeduct, WindowHoldGone}

// Label values known in advance, pre-created so a dashboard shows 0, not
// "no data".
var (
	terminalStates = []reservation.State{reservation.StateClaimed, reservation.StateReleased, reservation.StateExpired, reservation.StateRefused}
	decidingOps    = []string{"reserve", "claim", "release"}
)

type metrics struct {
	claimFailures     *prometheus.CounterVec
	adjustFailures    prometheus.Counter
	scriptSeconds     *prometheus.HistogramVec
	scriptErrors      *prometheus.CounterVec
	reapedHolds       prometheus.Counter
	reapedUnits       prometheus.Counter
	reapSettled       prometheus.Counter
	tombstonesWritten *prometheus.CounterVec
	tombstoneHits     *prometheus.CounterVec
	notDecider        *prometheus.CounterVec
	claimInProgress   prometheus.Counter
	followApplies     *prometheus.CounterVec
}

// Scripts take tens of microseconds on an idle server; the buckets still
// show a server stalled for seconds.
var scriptBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		claimFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_redis_legacy_claim_failures_total",
			Help: "Legacy claims (MySQL ledger deduction, then Redis hold cleanup) that failed inside a window " +
				"where the two systems disagree: deduct_error (ledger outcome unknown, hold kept claiming), " +
				"after_deduct_before_cleanup (ledger deducted, claim answered success, Redis cleanup left to the change feed), " +
				"hold_gone_before_cleanup (hold released or expired before the cleanup; its tombstone was turned into a claim).",
		}, []string{"window"}),
		adjustFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_redis_adjust_follow_failures_total",
			Help: "Adjusts whose ledger change succeeded but whose Redis quantity did not follow at once: the change feed delivers it.",
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
		reapSettled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_redis_reap_settled_total",
			Help: "Expired claiming holds whose claims the ledger had recorded: the reaper settled them as claimed instead of giving their units back (the claim's cleanup had been lost).",
		}),
		tombstonesWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_redis_tombstones_written_total",
			Help: "Tombstones written, by state: a reservation that reached a terminal state here (decided by Redis, or mirrored from MySQL).",
		}, []string{"state"}),
		tombstoneHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_redis_tombstone_hits_total",
			Help: "Calls answered from a token's tombstone, by operation and tombstone state: a retry, or a late or reordered call.",
		}, []string{"op", "state"}),
		notDecider: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_redis_not_decider_total",
			Help: "Deciding calls refused because the shop's fence names MySQL, by operation. Nothing changed; the facade routes by the refusal.",
		}, []string{"op"}),
		claimInProgress: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reservoir_redis_claim_in_progress_total",
			Help: "Releases refused because a legacy claim of the hold is under way (within the claim grace, or not resolvable without a Source).",
		}),
		followApplies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_redis_mirror_applies_total",
			Help: "Change-feed changes applied, by kind and result: state (created, replaced, kept, converted, tombstoned, unchanged, nothing), " +
				"adjust (applied, duplicate), fence (raised, unchanged), any (error).",
		}, []string{"kind", "result"}),
	}
	for _, w := range claimWindows {
		m.claimFailures.WithLabelValues(string(w))
	}
	for _, st := range terminalStates {
		m.tombstonesWritten.WithLabelValues(string(st))
	}
	for _, op := range decidingOps {
		m.notDecider.WithLabelValues(op)
	}
	for _, c := range []prometheus.Collector{m.claimFailures, m.adjustFailures, m.scriptSeconds, m.scriptErrors, m.reapedHolds, m.reapedUnits,
		m.reapSettled, m.tombstonesWritten, m.tombstoneHits, m.notDecider, m.claimInProgress, m.followApplies} {
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
