package rollout_test

import (
	"strings"
	"testing"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/rollout"
)

func TestExamplePlanParses(t *testing.T) {
	p, err := rollout.LoadPlan("../deploy/plan.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Stages) != 6 || p.Stages[2].Percent != 10 || p.Stages[0].Gates.MaxRates[compare.ClassOutcomeMismatch] != 0.0005 {
		t.Errorf("example plan: %+v", p.Stages)
	}
	// Defaults fill gates a stage leaves out.
	if g := p.Stages[3].Gates; g.MinObservations != 1000 || g.MaxShadowErrorRate != 0.01 {
		t.Errorf("defaults: %+v", g)
	}
}

func TestPlanErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{`pods = ["a"]`, "at least one [[stages]]"},
		{"pods = [\"a\"]\n[[stages]]\nname = \"s\"\nmode = \"mysqll\"\npods = [\"a\"]", `stages[0].mode "mysqll"`},
		{"pods = [\"a\"]\n[[stages]]\nname = \"s\"\nmode = \"mysql\"\npods = [\"b\"]", `stages[0].pods: "b" is not in the plan's pods`},
		{"pods = [\"a\"]\n[[stages]]\nname = \"s\"\nmode = \"mysql\"\npods = [\"a\"]\n[stages.gates]\nmax_rates = { nope = 0.1 }", `unknown class "nope"`},
		{"pods = [\"a\"]\n[[stages]]\nname = \"s\"\nmode = \"mysql\"\npods = [\"a\"]\npercnt = 5", "rollout: plan: line 6: unknown key stages[0].percnt; did you mean percent?"},
	} {
		_, err := rollout.ParsePlan([]byte(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want error containing %q, got %v", tc.want, err)
		}
	}
}
