package wire

import (
	"time"

	"github.com/seed31b0e981/reservoir/compare"
)

// What the comparer saw, as the admin API (and the dashboard) shows it:
// the diff records, the stats summed over every replica, and this
// replica's own recent rates.

// Diffs is the answer of GET /admin/diffs.
type Diffs struct {
	// Pod is the pod asked for ("" for every pod).
	Pod string `json:"pod"`
	// Diffs are the sampled diff records, newest first.
	Diffs []DiffRecord `json:"diffs"`
}

// DiffRecord is one sampled disagreement (or notable outcome) between the
// stores, with both sides in full.
type DiffRecord struct {
	// ID is the record's row id.
	ID int64 `json:"id"`
	// Pod is the pod of the call.
	Pod string `json:"pod"`
	// Mode is the mode the call ran in.
	Mode string `json:"mode"`
	// Op is the operation: "reserve", "claim", "release".
	Op string `json:"op"`
	// Class is the comparison's class ("outcome_mismatch", "pre_switch",
	// ...: docs/compare.md).
	Class string `json:"class"`
	// Shop is the reservation's shop.
	Shop int64 `json:"shop"`
	// Token is the reservation's token.
	Token string `json:"token"`
	// At is when the call started (millisecond precision).
	At time.Time `json:"at,omitzero"`
	// Authority is what the deciding store did.
	Authority Outcome `json:"authority"`
	// Shadow is what the other store did (or would have done).
	Shadow Outcome `json:"shadow"`
}

// Outcome is what one store did with a compared call.
type Outcome struct {
	// Store is "redis" or "mysql".
	Store string `json:"store"`
	// Result is the store's answer ("reserved", "insufficient",
	// "claimed", ...); left out when it failed or was skipped.
	Result string `json:"result,omitempty"`
	// Allocations are the units it held or moved; left out when none.
	Allocations []Allocation `json:"allocations,omitempty"`
	// Short are the lines it could not serve; left out when none.
	Short []ShortLine `json:"short,omitempty"`
	// Error is its error's text (at most 1024 bytes); left out when none.
	Error string `json:"error,omitempty"`
	// LatencyNS is how long the call took, in nanoseconds.
	LatencyNS int64 `json:"latency_ns"`
	// Skipped is true when the shadow call was not made (every shadow
	// slot busy); left out otherwise.
	Skipped bool `json:"skipped,omitempty"`
	// TimedOut is true when the call ran out of time; left out otherwise.
	TimedOut bool `json:"timed_out,omitempty"`
	// Panicked is true when the call panicked; left out otherwise.
	Panicked bool `json:"panicked,omitempty"`
}

// DiffRecordsOf is ds as the wire shows them ([] for none).
func DiffRecordsOf(ds []compare.DiffRecord) []DiffRecord {
	out := make([]DiffRecord, 0, len(ds))
	for _, d := range ds {
		out = append(out, DiffRecord{ID: d.ID, Pod: d.Pod, Mode: d.Mode, Op: string(d.Op), Class: string(d.Class), Shop: d.Shop, Token: d.Token,
			At: utc(d.At), Authority: outcomeOf(d.Authority), Shadow: outcomeOf(d.Shadow)})
	}
	return out
}

func outcomeOf(o compare.OutcomeRecord) Outcome {
	v := Outcome{Store: string(o.Store), Result: o.Result, Error: o.Error, LatencyNS: int64(o.Latency), Skipped: o.Skipped, TimedOut: o.TimedOut, Panicked: o.Panicked}
	if len(o.Allocations) > 0 {
		v.Allocations = AllocationsOf(o.Allocations)
	}
	if len(o.Short) > 0 {
		v.Short = ShortLinesOf(o.Short)
	}
	return v
}

// Stats is the answer of GET /admin/stats: the comparer's stats summed
// over every replica (each flushes every few seconds).
type Stats struct {
	// Pod is the pod asked for ("" for every pod).
	Pod string `json:"pod"`
	// Since is the start of the first stats window counted (the window
	// that holds the time asked for); left out when none was.
	Since time.Time `json:"since,omitzero"`
	// Observations counts every observation, all modes together.
	Observations int64 `json:"observations"`
	// ByMode holds a summary per mode seen; calibration modes are there
	// under their own names, never mixed in.
	ByMode map[string]Summary `json:"by_mode"`
	// Live merges every mode that is not a calibration mode: what the
	// gates judge.
	Live Summary `json:"live"`
	// Calibration merges the calibration modes: the noise floor.
	Calibration Summary `json:"calibration"`
}

// Summary is the counts, rates and latencies of a set of observations.
type Summary struct {
	// Observations is how many there were.
	Observations int64 `json:"observations"`
	// ByClass counts them per compare class.
	ByClass map[string]int64 `json:"by_class"`
	// ByOp counts them per operation, then per class.
	ByOp map[string]map[string]int64 `json:"by_op"`
	// Rates is ByClass divided by Observations (fractions).
	Rates map[string]float64 `json:"rates"`
	// MismatchRate is the rate of the classes that are disagreements about
	// state (outcome, allocation, shadow missing), without stock-out races.
	MismatchRate float64 `json:"mismatch_rate"`
	// ShadowErrorRate is the rate of shadow errors, panics and timeouts
	// over every observation (skips are not faults).
	ShadowErrorRate float64 `json:"shadow_error_rate"`
	// Latency is each side's latency ("authority", "shadow") over every
	// operation.
	Latency map[string]Latency `json:"latency"`
	// OpLatency is each side's latency per operation.
	OpLatency map[string]map[string]Latency `json:"op_latency"`
	// LatencyRatio is the shadow's mean latency over the authority's (0
	// when either is unknown): above 1 the shadow is slower.
	LatencyRatio float64 `json:"latency_ratio"`
}

// Latency sums one side's latencies.
type Latency struct {
	// Count is how many calls were timed.
	Count int64 `json:"count"`
	// TotalNS is their sum, in nanoseconds.
	TotalNS int64 `json:"total_ns"`
	// MaxNS is the longest, in nanoseconds.
	MaxNS int64 `json:"max_ns"`
	// MeanNS is TotalNS / Count, in nanoseconds (microsecond precision; 0
	// without calls).
	MeanNS int64 `json:"mean_ns"`
}

// StatsOf is t as the wire shows it, with its live and calibration
// summaries.
func StatsOf(t compare.Totals) Stats {
	v := Stats{Pod: t.Pod, Since: utc(t.Since), Observations: t.Observations, ByMode: map[string]Summary{},
		Live: summaryOf(t.Live()), Calibration: summaryOf(t.Calibration())}
	for m, s := range t.ByMode {
		v.ByMode[m] = summaryOf(s)
	}
	return v
}

func summaryOf(s compare.Summary) Summary {
	v := Summary{Observations: s.Observations, ByClass: stringKeys(s.ByClass), ByOp: map[string]map[string]int64{}, Rates: stringKeys(s.Rates),
		MismatchRate: s.MismatchRate, ShadowErrorRate: s.ShadowErrorRate, Latency: map[string]Latency{}, OpLatency: map[string]map[string]Latency{},
		LatencyRatio: s.LatencyRatio}
	for op, byClass := range s.ByOp {
		v.ByOp[string(op)] = stringKeys(byClass)
	}
	for side, l := range s.Latency {
		v.Latency[string(side)] = latencyOf(l)
	}
	for op, bySide := range s.OpLatency {
		m := map[string]Latency{}
		for side, l := range bySide {
			m[string(side)] = latencyOf(l)
		}
		v.OpLatency[string(op)] = m
	}
	return v
}

func latencyOf(l compare.Latency) Latency {
	return Latency{Count: l.Count, TotalNS: int64(l.Total), MaxNS: int64(l.Max), MeanNS: int64(l.Mean)}
}

// Series is the answer of GET /admin/series: this replica's recent rates
// and latency quantiles, per pod.
type Series struct {
	// IntervalMs is the time between samples, in milliseconds.
	IntervalMs int64 `json:"interval_ms"`
	// WindowMs is the trailing window each point's rates cover, in
	// milliseconds.
	WindowMs int64 `json:"window_ms"`
	// Source says where the numbers come from.
	Source string `json:"source"`
	// Pods holds each pod's points, oldest first ([] for a pod without
	// any yet).
	Pods map[string][]SeriesPoint `json:"pods"`
}

// SeriesPoint is one pod's rates over the window ending at At.
type SeriesPoint struct {
	// At is the end of the window.
	At time.Time `json:"at,omitzero"`
	// OpsPerSec is the pod's checkout API operations per second (every
	// operation and status).
	OpsPerSec float64 `json:"ops_per_sec"`
	// ByOp is OpsPerSec per operation.
	ByOp map[string]float64 `json:"by_op"`
	// ObservationsPerSec is the dual-written calls compared per second.
	ObservationsPerSec float64 `json:"observations_per_sec"`
	// ClassRates is, per class other than match, its share of the
	// observations in the window (a class absent is 0).
	ClassRates map[string]float64 `json:"class_rates"`
	// Latency is per store ("redis", "mysql"), per operation of the
	// checkout path ("reserve", "claim", "release"); an operation without
	// calls in the window is left out.
	Latency map[string]map[string]Quantiles `json:"latency"`
}

// Quantiles are a store's latency for one operation over a series window,
// interpolated from histogram buckets the way PromQL's histogram_quantile
// does: accurate to a bucket, not to the microsecond.
type Quantiles struct {
	// P50Ms is the median, in milliseconds.
	P50Ms float64 `json:"p50_ms"`
	// P99Ms is the 99th percentile, in milliseconds.
	P99Ms float64 `json:"p99_ms"`
	// CallsPerSec is how many calls the quantiles are over, per second.
	CallsPerSec float64 `json:"calls_per_sec"`
}
