package rollout

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
)

// StatsReader is where gate numbers come from: the comparer's persisted
// stats, summed over every replica. *compare.Comparer implements it.
type StatsReader interface {
	Totals(ctx context.Context, pod string, since time.Time) (compare.Totals, error)
}

// GateResult is one gate's verdict with its numbers.
type GateResult struct {
	// Gate names it: "min_observations", "min_duration",
	// "max_rate:<class>", "max_shadow_error_rate", "max_latency_ratio".
	Gate string
	// Pass is the verdict.
	Pass bool
	// Value is what was measured, Limit what it is held to.
	Value float64
	Limit float64
	// Why says it in words, numbers included.
	Why string
	// Breaking is true for a ceiling (a rate or ratio) that failed with
	// enough data: what makes the automatic controller pull the kill
	// switch. A floor not reached yet (too few observations, too early) is
	// never breaking.
	Breaking bool
}

// Evidence is what the stats say about a stage's pods since it started.
type Evidence struct {
	Pods         []string
	Since        time.Time
	Observations int64
	// Classes counts observations per class, calibration excluded.
	Classes map[compare.Class]int64
	// ShadowFaults counts shadow errors, panics and timeouts.
	ShadowFaults int64
	// AuthorityMean and ShadowMean are the sides' mean latencies.
	AuthorityMean time.Duration
	ShadowMean    time.Duration
	// LatencySamples is how many observations measured both sides'
	// latencies (the relay's observations measure none).
	LatencySamples int64
}

// Rate is the share of observations in class c.
func (e Evidence) Rate(c compare.Class) float64 {
	if e.Observations == 0 {
		return 0
	}
	return float64(e.Classes[c]) / float64(e.Observations)
}

// gather sums the live (non-calibration) stats of pods since a time.
func gather(ctx context.Context, stats StatsReader, pods []string, since time.Time) (Evidence, error) {
	e := Evidence{Pods: slices.Clone(pods), Since: since, Classes: map[compare.Class]int64{}}
	var aTotal, sTotal time.Duration
	var aN, sN int64
	for _, pod := range pods {
		t, err := stats.Totals(ctx, pod, since)
		if err != nil {
			return Evidence{}, fmt.Errorf("rollout: stats of pod %s: %w", pod, err)
		}
		live := t.Live()
		e.Observations += live.Observations
		for c, n := range live.ByClass {
			e.Classes[c] += n
			if c.ShadowFault() {
				e.ShadowFaults += n
			}
		}
		a, s := live.Latency[compare.SideAuthority], live.Latency[compare.SideShadow]
		aTotal, aN = aTotal+a.Total, aN+a.Count
		sTotal, sN = sTotal+s.Total, sN+s.Count
	}
	e.LatencySamples = min(aN, sN)
	if aN > 0 {
		e.AuthorityMean = aTotal / time.Duration(aN)
	}
	if sN > 0 {
		e.ShadowMean = sTotal / time.Duration(sN)
	}
	return e, nil
}

// Evaluate judges evidence against gates, the stage having been in force
// for age. Every gate is reported, in a fixed order, with its numbers.
func (g Gates) Evaluate(e Evidence, age time.Duration) []GateResult {
	enough := e.Observations >= g.MinObservations
	out := []GateResult{{
		Gate: "min_observations", Pass: enough, Value: float64(e.Observations), Limit: float64(g.MinObservations),
		Why: fmt.Sprintf("%d observations on %v, need %d (no data never passes)", e.Observations, e.Pods, g.MinObservations),
	}, {
		Gate: "min_duration", Pass: age >= g.MinDuration.Duration, Value: age.Seconds(), Limit: g.MinDuration.Seconds(),
		Why: fmt.Sprintf("in force for %s, need %s", age.Round(time.Second), g.MinDuration.Duration),
	}}
	ceiling := func(name string, value, limit float64, why string) {
		pass := value <= limit
		out = append(out, GateResult{Gate: name, Pass: pass && enough, Value: value, Limit: limit, Why: why, Breaking: !pass && enough})
	}
	classes := make([]compare.Class, 0, len(g.MaxRates))
	for c := range g.MaxRates {
		classes = append(classes, c)
	}
	slices.Sort(classes)
	for _, c := range classes {
		ceiling("max_rate:"+string(c), e.Rate(c), g.MaxRates[c],
			fmt.Sprintf("%s: %d of %d = %.4f%%, max %.4f%%", c, e.Classes[c], e.Observations, 100*e.Rate(c), 100*g.MaxRates[c]))
	}
	faultRate := 0.0
	if e.Observations > 0 {
		faultRate = float64(e.ShadowFaults) / float64(e.Observations)
	}
	ceiling("max_shadow_error_rate", faultRate, g.MaxShadowErrorRate,
		fmt.Sprintf("shadow errors, panics and timeouts: %d of %d = %.4f%%, max %.4f%%", e.ShadowFaults, e.Observations, 100*faultRate, 100*g.MaxShadowErrorRate))
	if g.MaxLatencyRatio > 0 && e.LatencySamples == 0 {
		// Not a ratio of 0: nothing was measured (a stage in mysql mode,
		// where the relay compares reserves, measures no latency).
		out = append(out, GateResult{Gate: "max_latency_ratio", Value: 0, Limit: g.MaxLatencyRatio,
			Why: "no latency measured: no observation timed both stores (in mysql mode the relay compares reserves and times neither; docs/compare.md)"})
	} else if g.MaxLatencyRatio > 0 {
		ratio := 0.0
		if e.AuthorityMean > 0 {
			ratio = float64(e.ShadowMean) / float64(e.AuthorityMean)
		}
		ceiling("max_latency_ratio", ratio, g.MaxLatencyRatio,
			fmt.Sprintf("shadow mean %s / authority mean %s = %.2f, max %.2f", e.ShadowMean, e.AuthorityMean, ratio, g.MaxLatencyRatio))
	}
	return out
}

// allPass reports whether every gate passed.
func allPass(rs []GateResult) bool {
	for _, r := range rs {
		if !r.Pass {
			return false
		}
	}
	return true
}
