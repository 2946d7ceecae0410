package demo

import (
	"testing"

	"github.com/seed31b0e981/reservoir/internal/wire"
)

// Issue 27 (7): the progress lines' per-pod mismatch was cumulative since
// the demo started (8.50% after the recovery) while the dashboard's pods
// table shows the last 10 s. The console shows the dashboard's series
// point now, worded as the page words it, and names the window.
func TestComparedIsTheDashboardsWindow(t *testing.T) {
	ser := wire.Series{WindowMs: 10000, Pods: map[string][]wire.SeriesPoint{
		"pod-a": {
			{ObservationsPerSec: 3, ClassRates: map[string]float64{"allocation_mismatch": 0.5}}, // older: not shown
			{ObservationsPerSec: 12.04, ClassRates: map[string]float64{"allocation_mismatch": 0.02, "outcome_mismatch": 0.005, "shadow_missing": 0.0005,
				"stockout_race": 0.3, "pre_switch": 0.1, "shadow_timeout": 0.1}},
		},
		"pod-b": {{ObservationsPerSec: 4.24, ClassRates: map[string]float64{"stockout_race": 0.5}}},
		"pod-c": {{ObservationsPerSec: 0}},
		"pod-d": {{ObservationsPerSec: 150, ClassRates: map[string]float64{"outcome_mismatch": 0.00005}}},
	}}
	for pod, want := range map[string]string{
		"pod-a": "12 compared/s, mismatch 2.6%, last 10 s", // races, pre_switch and shadow faults are not mismatches
		"pod-b": "4.2 compared/s, mismatch 0%, last 10 s",
		"pod-c": "nothing compared, last 10 s",
		"pod-d": "150 compared/s, mismatch <0.01%, last 10 s",
		"pod-e": "nothing compared, last 10 s",
	} {
		if got := compared(ser, pod); got != want {
			t.Errorf("%s: %q, want %q", pod, got, want)
		}
	}
	ser.WindowMs = 1500
	if got := compared(ser, "pod-c"); got != "nothing compared, last 1.5 s" {
		t.Errorf("a 1.5 s window: %q", got)
	}
}
