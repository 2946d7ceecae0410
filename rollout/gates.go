package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
)

// StatsReader is where gate numbers come from: the comparer's persisted
// stats, summed over every replica. *compare.Comparer implements it.
type StatsReader interface {
	// TotalsFrom sums pod's stats over the windows that start at or after
	// from (a window that began before it is left out whole), and says in
	// Totals.First where the first of them starts.
	TotalsFrom(ctx context.Context, pod string, from time.Time) (compare.Totals, error)
}

// Verdict is a gate's verdict in the words every surface uses: the CLI
// prints it, the admin API sends it (wire.GateResult.Verdict) and the
// dashboard shows it, each the same string.
type Verdict string

// The three verdicts.
const (
	// VerdictPass: the gate is met.
	VerdictPass Verdict = "pass"
	// VerdictNotYet: the gate cannot pass yet, and nothing measured is
	// wrong: a floor not reached (too few observations, too little time
	// in force), a ceiling not judged yet because there are fewer
	// observations than min_observations (whatever its rate so far), or
	// a latency ratio with no latency measured.
	VerdictNotYet Verdict = "not yet"
	// VerdictBreaking: the evidence already breaks a limit: a ceiling (a
	// rate or the latency ratio) above its maximum with at least
	// min_observations observations. What makes the automatic controller
	// engage the kill switch during a stage where MySQL decides.
	VerdictBreaking Verdict = "breaking"
)

// Verdicts lists the verdicts, in the order they are reported.
var Verdicts = []Verdict{VerdictPass, VerdictNotYet, VerdictBreaking}

// GateResult is one gate's verdict with its numbers.
type GateResult struct {
	// Gate names it: "min_observations", "min_duration",
	// "max_rate:<class>", "max_shadow_error_rate", "max_latency_ratio".
	Gate string
	// Pass is true when the gate is met (Verdict "pass").
	Pass bool
	// Value is what was measured, Limit what it is held to. For
	// min_duration, Value is the seconds in force, never negative.
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

// Verdict is the result's verdict: pass, not yet or breaking.
func (r GateResult) Verdict() Verdict {
	switch {
	case r.Pass:
		return VerdictPass
	case r.Breaking:
		return VerdictBreaking
	}
	return VerdictNotYet
}

// Evidence is what the stats say about a stage's pods since it started.
type Evidence struct {
	Pods []string
	// Since is when the evidence counts from: the start of the first
	// whole stats window at or after the time the stage was applied (or
	// its gates were started again by a release); Status.CountingFrom.
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

// gather sums the live (non-calibration) stats of pods over the windows
// that start at or after since, the time a stage was applied: the window
// holding since also holds calls from before the stage, so it is left out
// whole. Evidence.Since says where the count starts: the first window
// counted, or, before any is, next (where the next window is expected to
// start).
func gather(ctx context.Context, stats StatsReader, pods []string, since, next time.Time) (Evidence, error) {
	e := Evidence{Pods: slices.Clone(pods), Classes: map[compare.Class]int64{}}
	var aTotal, sTotal time.Duration
	var aN, sN int64
	for _, pod := range pods {
		t, err := stats.TotalsFrom(ctx, pod, since)
		if err != nil {
			return Evidence{}, fmt.Errorf("rollout: stats of pod %s: %w", pod, err)
		}
		if !t.First.IsZero() && (e.Since.IsZero() || t.First.Before(e.Since)) {
			e.Since = t.First
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
	if e.Since.IsZero() {
		e.Since = next
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
// for age (a negative age, from clocks that disagree, counts as 0). Every
// gate is reported, in a fixed order, with its numbers.
func (g Gates) Evaluate(e Evidence, age time.Duration) []GateResult {
	age = max(age, 0)
	enough := e.Observations >= g.MinObservations
	out := []GateResult{{
		Gate: "min_observations", Pass: enough, Value: float64(e.Observations), Limit: float64(g.MinObservations),
		Why: fmt.Sprintf("%d observations on %v, need %d (no data never passes)", e.Observations, e.Pods, g.MinObservations),
	}, {
		Gate: "min_duration", Pass: age >= g.MinDuration.Duration, Value: age.Seconds(), Limit: g.MinDuration.Seconds(),
		Why: fmt.Sprintf("in force for %s, need %s", age.Round(time.Second), g.MinDuration.Duration),
	}}
	// A ceiling is judged once there are min_observations: before, its
	// rate is reported, and the gate is "not yet" whatever it says.
	notJudged := ""
	if !enough {
		notJudged = fmt.Sprintf(" (judged from %d observations)", g.MinObservations)
	}
	ceiling := func(name string, value, limit float64, why string) {
		pass := value <= limit
		out = append(out, GateResult{Gate: name, Pass: pass && enough, Value: value, Limit: limit, Why: why + notJudged, Breaking: !pass && enough})
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

// Line says the result in one line: "min_duration not yet: in force for
// 27s, need 30s".
func (r GateResult) Line() string {
	return r.Gate + " " + string(r.Verdict()) + ": " + r.Why
}

// CountVerdicts says how many results have each verdict, the verdicts
// none has left out: "2 not yet, 1 breaking, 3 pass".
func CountVerdicts(rs []GateResult) string {
	n := map[Verdict]int{}
	for _, r := range rs {
		n[r.Verdict()]++
	}
	var parts []string
	for _, v := range []Verdict{VerdictBreaking, VerdictNotYet, VerdictPass} {
		if n[v] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[v], v))
		}
	}
	return strings.Join(parts, ", ")
}
