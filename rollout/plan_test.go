package rollout_test

import (
	"os"
	"path/filepath"
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

// A plan's mistakes say where they are: the file, the line, the key.
func TestLoadPlanSaysWhere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.toml")
	for _, tc := range []struct{ text, want string }{
		{"pods = [\"a\"]\n\n[[stages]]\nname = \"s\"\nmode = \"mysqll\"\npods = [\"a\"]\n", path + `:5: stages[0].mode "mysqll" is not one of`},
		{"pods = [\"a\"]\n[[stages]]\nname = \"s\"\nmode = \"mysql\"\npods = [\"a\"]\n[stages.gates]\nmin_duraton = \"1h\"\n", path + ":7: unknown key stages[0].gates.min_duraton; did you mean min_duration?"},
		{"pods = [\"a\"]\n[[stages]]\nmode = \"mysql\"\npods = [\"a\"]\n", path + ":2: stages[0].name is required"},
	} {
		if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := rollout.LoadPlan(path)
		if err == nil || !strings.Contains(err.Error(), "rollout: plan "+tc.want) {
			t.Errorf("want an error containing %q, got %v", "rollout: plan "+tc.want, err)
		}
	}
}
