package demo

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// The demo's plan, rendered with the defaults and with a newcomer's fast
// settings, is a valid plan over the demo's pods, lowest traffic first.
func TestPlanTemplate(t *testing.T) {
	for _, cfg := range []Config{{Out: io.Discard}, {Out: io.Discard, GateDuration: 3 * time.Second, MinObservations: 30}} {
		cfg = cfg.WithDefaults()
		var b bytes.Buffer
		if err := template.Must(template.New("plan").Parse(planTemplate)).Execute(&b, cfg); err != nil {
			t.Fatal(err)
		}
		plan, err := rollout.ParsePlan(b.Bytes())
		if err != nil {
			t.Fatalf("%v\n%s", err, b.String())
		}
		if plan.Pods[0] != pods[0].name || plan.Stages[walkTo].Mode != authority.ModeMySQL || plan.Stages[0].Gates.MinDuration.Duration != cfg.GateDuration {
			t.Errorf("plan: %+v", plan)
		}
		for i := 1; i < len(pods); i++ {
			if pods[i].weight < pods[i-1].weight {
				t.Errorf("pods are not in traffic order: %+v", pods)
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Out"},
		{Config{Out: io.Discard, Name: "Bad-Name"}, "name"},
		{Config{Out: io.Discard, Rate: -1}, "rate"},
		{Config{Out: io.Discard, Duration: -time.Second}, "duration"},
		{Config{Out: io.Discard, AdminToken: "short"}, "token"},
	} {
		if err := c.cfg.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error about %s", c.cfg, err, c.want)
		}
	}
}
