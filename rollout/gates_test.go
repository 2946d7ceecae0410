package rollout_test

import (
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
