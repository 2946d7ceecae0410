package server_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// The mode gauge reports the pod's mode and a percentage ramp's share,
// without evaluating any one shop (which would report whichever bucket
// that shop falls into), and the MySQL authority share follows; the gauges
// come from the flags this replica applies.
func TestRolloutGaugesReportRampShares(t *testing.T) {
	t.Parallel()
	h := setup(t, options{modes: map[string]authority.Mode{"pod-a": authority.ModeShadow}})
	_, after, err := h.flags.Update(func(f *flagdoc.Flags) error { return f.SetRamp("pod-a", authority.ModeMySQL, 30) })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`reservoir_rollout_mode{mode="shadow",reservoir_pod="pod-a"} 0.7`,
		`reservoir_rollout_mode{mode="mysql",reservoir_pod="pod-a"} 0.3`,
		`reservoir_rollout_mode{mode="redis",reservoir_pod="pod-a"} 0`,
		`reservoir_rollout_mysql_authority{reservoir_pod="pod-a"} 0.3`,
		`reservoir_rollout_mode{mode="redis",reservoir_pod="pod-b"} 1`,
	}
	var raw string
	for deadline := time.Now().Add(10 * time.Second); ; {
		raw = h.do("GET", "/metrics", nil, "").raw
		missing := ""
		for _, w := range want {
			if !strings.Contains(raw, w) {
				missing = w
			}
		}
		if missing == "" && strings.Contains(raw, "reservoir_rollout_flags_applied_version "+strconv.FormatInt(after.Version, 10)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics lack %q (or the applied version %d)", missing, after.Version)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
