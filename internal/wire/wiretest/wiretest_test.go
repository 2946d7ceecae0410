package wiretest_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/seed31b0e981/reservoir/internal/wire/wiretest"
	"github.com/seed31b0e981/reservoir/rollout"
)

// The checker, shown failing on a broken subject: the rollout controller's
// Status encoded as it is, as GET /admin/rollout/status's plan and
// `reservoir rollout status --json` were before package wire (a stage
// never applied, a pod's kill switch never set).
func TestFaultsCatchesGoNamesAndZeroTimes(t *testing.T) {
	t.Parallel()
	raw, err := json.Marshal(rollout.Status{Stage: -1, Next: &rollout.Stage{Name: "shadow"}, Pods: []rollout.PodStatus{{Pod: "pod-a"}}})
	if err != nil {
		t.Fatal(err)
	}
	got := wiretest.Faults(raw)
	for _, want := range []string{
		".Next.Name: a key with a capital letter",
		".Next.Gates.MinObservations: a key with a capital letter",
		".Pods[0].Kill.State: a key with a capital letter",
		".Pods[0].Effective.Mode: a key with a capital letter",
		".Pods[0].Kill.Since: a zero time (0001-01-01T00:00:00Z)",
		".Since: a zero time (0001-01-01T00:00:00Z)",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("the checker missed %q in %s; it said %v", want, raw, got)
		}
	}
	for _, doc := range []string{
		`{"stage": -1, "next": {"name": "x", "min_duration_ns": 1, "max_rates": {"shadow_missing": 0.1}}, "pods": [{"kill": {"state": "off"}}]}`,
		`{"pods": {"pod-a": [{"at": "2026-03-01T12:00:00Z"}]}}`,
	} {
		if got := wiretest.Faults([]byte(doc)); len(got) > 0 {
			t.Errorf("a wire document reported: %v in %s", got, doc)
		}
	}
	if got := wiretest.Faults([]byte(`{"a": `)); len(got) != 1 {
		t.Errorf("not JSON: %v", got)
	}
}
