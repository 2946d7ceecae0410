package rollout_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/rollout"
)

// max_latency_ratio holds the shadow's mean latency to a multiple of the
// authority's; with no observation that timed both (a stage in mysql mode,
// where the relay compares reserves and times neither) it is not met,
// not a ratio of 0 that passes, and not breaking either: nothing was
// measured to be too slow.
func TestLatencyGateWantsMeasurements(t *testing.T) {
	g := rollout.Gates{MinObservations: 10, MaxLatencyRatio: 2}
	base := rollout.Evidence{Observations: 100, Classes: map[compare.Class]int64{compare.ClassMatch: 100}}
	latency := func(e rollout.Evidence) rollout.GateResult {
		t.Helper()
		for _, r := range g.Evaluate(e, time.Hour) {
			if r.Gate == "max_latency_ratio" {
				return r
			}
		}
		t.Fatal("no max_latency_ratio result")
		return rollout.GateResult{}
	}
	if r := latency(base); r.Pass || r.Breaking {
		t.Errorf("no latency measured: %+v, want not met and not breaking", r)
	}
	fast, slow := base, base
	fast.LatencySamples, fast.AuthorityMean, fast.ShadowMean = 100, 10*time.Millisecond, 15*time.Millisecond
	slow.LatencySamples, slow.AuthorityMean, slow.ShadowMean = 100, 10*time.Millisecond, 30*time.Millisecond
	if r := latency(fast); !r.Pass || r.Value != 1.5 {
		t.Errorf("ratio 1.5: %+v, want met", r)
	}
	if r := latency(slow); r.Pass || !r.Breaking {
		t.Errorf("ratio 3: %+v, want broken", r)
	}
}

// Three verdicts, decided as the automatic controller needs them: "not
// yet" when a gate cannot pass yet and nothing measured is wrong (a floor
// not reached; a ceiling before min_observations, whatever its rate so
// far; no latency measured), "breaking" when the evidence breaks a
// ceiling with enough observations (what makes `rollout auto` engage the
// kill switch), "pass" otherwise. The words are the ones the CLI prints,
// the admin API sends and the dashboard shows.
func TestGateVerdicts(t *testing.T) {
	t.Parallel()
	if got := fmt.Sprint(rollout.Verdicts); got != "[pass not yet breaking]" {
		t.Fatalf("the verdicts are %s, want [pass not yet breaking]", got)
	}
	g := rollout.Gates{MinObservations: 100, MinDuration: rollout.Duration{Duration: 30 * time.Second},
		MaxRates: map[compare.Class]float64{compare.ClassAllocationMismatch: 0.001}, MaxShadowErrorRate: 0.01, MaxLatencyRatio: 2}
	ev := func(n, mismatches int64, latency bool) rollout.Evidence {
		e := rollout.Evidence{Pods: []string{"pod-a"}, Observations: n,
			Classes: map[compare.Class]int64{compare.ClassMatch: n - mismatches, compare.ClassAllocationMismatch: mismatches}}
		if latency {
			e.LatencySamples, e.AuthorityMean, e.ShadowMean = n, time.Millisecond, 3*time.Millisecond
		}
		return e
	}
	for _, c := range []struct {
		name string
		e    rollout.Evidence
		age  time.Duration
		want map[string]rollout.Verdict
		why  map[string]string
	}{
		{name: "no data, just applied", e: ev(0, 0, false), age: 0, want: map[string]rollout.Verdict{
			"min_observations": "not yet", "min_duration": "not yet", "max_rate:allocation_mismatch": "not yet",
			"max_shadow_error_rate": "not yet", "max_latency_ratio": "not yet"}},
		// The "max_rate:allocation_mismatch FAIL ... 0 of 23": not
		// judged yet, and it says from how many it will be.
		{name: "a clean rate on too few observations", e: ev(23, 0, true), age: 27 * time.Second, want: map[string]rollout.Verdict{
			"min_observations": "not yet", "min_duration": "not yet", "max_rate:allocation_mismatch": "not yet", "max_latency_ratio": "not yet"},
			why: map[string]string{"max_rate:allocation_mismatch": "0 of 23 = 0.0000%, max 0.1000% (judged from 100 observations)",
				"min_duration": "in force for 27s, need 30s"}},
		{name: "a rate above its ceiling on too few observations", e: ev(23, 2, false), age: time.Minute, want: map[string]rollout.Verdict{
			"min_observations": "not yet", "min_duration": "pass", "max_rate:allocation_mismatch": "not yet"}},
		{name: "a rate above its ceiling on enough observations", e: ev(1000, 2, false), age: time.Second, want: map[string]rollout.Verdict{
			"min_observations": "pass", "min_duration": "not yet", "max_rate:allocation_mismatch": "breaking", "max_shadow_error_rate": "pass",
			"max_latency_ratio": "not yet"}},
		{name: "a slow shadow on enough observations", e: ev(1000, 0, true), age: time.Minute, want: map[string]rollout.Verdict{
			"max_rate:allocation_mismatch": "pass", "max_latency_ratio": "breaking"}},
	} {
		for _, r := range g.Evaluate(c.e, c.age) {
			if want, ok := c.want[r.Gate]; ok && r.Verdict() != want {
				t.Errorf("%s: %s is %q (%s), want %q", c.name, r.Gate, r.Verdict(), r.Why, want)
			}
			if r.Pass != (r.Verdict() == rollout.VerdictPass) || r.Breaking != (r.Verdict() == rollout.VerdictBreaking) {
				t.Errorf("%s: %s: Pass %v and Breaking %v disagree with the verdict %q", c.name, r.Gate, r.Pass, r.Breaking, r.Verdict())
			}
			if want, ok := c.why[r.Gate]; ok && !strings.HasSuffix(r.Why, want) {
				t.Errorf("%s: %s says %q, want it to end %q", c.name, r.Gate, r.Why, want)
			}
		}
	}
}

// A stage's time in force is never negative, whatever the clocks say (a
// release used to write the start of the comparer's next window, ahead of
// now: "in force for -24s").
func TestGatesNeverSayANegativeDuration(t *testing.T) {
	t.Parallel()
	g := rollout.Gates{MinObservations: 1, MinDuration: rollout.Duration{Duration: 30 * time.Second}}
	for _, r := range g.Evaluate(rollout.Evidence{}, -24*time.Second) {
		if r.Gate == "min_duration" && (r.Value != 0 || r.Why != "in force for 0s, need 30s") {
			t.Errorf("min_duration 24 s before the stage: value %v, %q; want 0 and %q", r.Value, r.Why, "in force for 0s, need 30s")
		}
	}
}
