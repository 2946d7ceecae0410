package rollout

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/internal/tomlstrict"
)

// Plan is the order of the migration: pods from the lowest traffic to the
// highest, and the stages that move them, each with the gates it must pass
// before the next stage may start.
type Plan struct {
	// Pods lists every pod, lowest traffic first.
	Pods []string `toml:"pods"`
	// Stages run in order.
	Stages []Stage `toml:"stages"`
}

// Stage sets a mode for some pods (optionally for a sticky percentage of
// their shops).
type Stage struct {
	// Name is what status and history call it.
	Name string `toml:"name"`
	// Mode is applied to Pods.
	Mode authority.Mode `toml:"mode"`
	// Pods are the pods this stage changes.
	Pods []string `toml:"pods"`
	// Percent, when 1..99, applies Mode to that share of each pod's shops
	// only (the rest keep the pod's previous mode). 0 means all of them.
	Percent int `toml:"percent"`
	// Gates must pass, on what was observed while this stage was in force,
	// before the next stage starts.
	Gates Gates `toml:"gates"`
}

// Gates are a stage's exit criteria. No data never passes: MinObservations
// is at least 1.
type Gates struct {
	// MinObservations is the fewest dual-written calls to judge on.
	// Default: 1000.
	MinObservations int64 `toml:"min_observations"`
	// MinDuration is the least time the stage must have been in force.
	// Default: 10m.
	MinDuration Duration `toml:"min_duration"`
	// MaxRates caps the rate of each named class (see compare.Classes).
	// Default: outcome_mismatch and allocation_mismatch 0.001,
	// shadow_missing 0.005.
	MaxRates map[compare.Class]float64 `toml:"max_rates"`
	// MaxShadowErrorRate caps shadow errors, panics and timeouts together.
	// Default: 0.01.
	MaxShadowErrorRate float64 `toml:"max_shadow_error_rate"`
	// MaxLatencyRatio caps the shadow's mean latency over the
	// authority's. 0 turns the gate off. Default: 0 (off).
	MaxLatencyRatio float64 `toml:"max_latency_ratio"`
}

// Duration is a time.Duration written as "10m" in TOML.
type Duration struct{ time.Duration }

// UnmarshalText parses "90s", "10m", ...
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalText writes the duration as text.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// LoadPlan reads and validates a plan file (TOML). Its errors name the
// file, and the line of an unknown key.
func LoadPlan(path string) (*Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rollout: plan: %w", err)
	}
	return parsePlan(b, path)
}

// ParsePlan decodes and validates a plan. Unknown keys are errors.
func ParsePlan(b []byte) (*Plan, error) {
	return parsePlan(b, "")
}

// parsePlan is ParsePlan; path, when not "", names the plan's file in its
// errors.
func parsePlan(b []byte, path string) (*Plan, error) {
	where := "rollout: plan"
	if path != "" {
		where += " " + path
	}
	var p Plan
	lines, err := tomlstrict.DecodeLines(b, &p)
	var unknown *tomlstrict.UnknownKeysError
	switch {
	case errors.As(err, &unknown):
		errs := make([]error, len(unknown.Keys))
		for i, k := range unknown.Keys {
			msg := "unknown key " + k.Key
			if k.Hint != "" {
				msg += "; " + k.Hint
			}
			switch {
			case path != "" && k.Line > 0:
				errs[i] = fmt.Errorf("%s:%d: %s", where, k.Line, msg)
			case k.Line > 0:
				errs[i] = fmt.Errorf("%s: line %d: %s", where, k.Line, msg)
			default:
				errs[i] = fmt.Errorf("%s: %s", where, msg)
			}
		}
		return nil, errors.Join(errs...)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	p.applyDefaults()
	if err := p.Validate(); err != nil {
		// Validate names the key first ("stages[1].mode ..."): say its line.
		rest, ok := strings.CutPrefix(err.Error(), "rollout: plan: ")
		if !ok {
			return nil, err
		}
		at := where
		if n := lines.Line(planKey.FindString(rest)); n > 0 && path != "" {
			at = fmt.Sprintf("%s:%d", where, n)
		} else if n > 0 {
			at = fmt.Sprintf("%s: line %d", where, n)
		}
		return nil, fmt.Errorf("%s: %s", at, rest)
	}
	return &p, nil
}

// planKey is the key a Validate error starts with: "stages[1].gates.min_duration".
var planKey = regexp.MustCompile(`^[a-z_]+(\[\d+\])?(\.[a-z_]+(\[\d+\])?)*`)

// CheckPods refuses a plan that names a pod the deployment (the
// topology's pods) does not have: its stages could never be applied.
func (p *Plan) CheckPods(pods []string) error {
	for _, pod := range p.Pods {
		if !slices.Contains(pods, pod) {
			return fmt.Errorf("rollout: the plan names pod %q, which the topology does not define (its pods: %s)", pod, strings.Join(pods, ", "))
		}
	}
	return nil
}

func (p *Plan) applyDefaults() {
	for i := range p.Stages {
		g := &p.Stages[i].Gates
		if g.MinObservations == 0 {
			g.MinObservations = 1000
		}
		if g.MinDuration.Duration == 0 {
			g.MinDuration.Duration = 10 * time.Minute
		}
		if g.MaxRates == nil {
			g.MaxRates = map[compare.Class]float64{
				compare.ClassOutcomeMismatch:    0.001,
				compare.ClassAllocationMismatch: 0.001,
				compare.ClassShadowMissing:      0.005,
			}
		}
		if g.MaxShadowErrorRate == 0 {
			g.MaxShadowErrorRate = 0.01
		}
	}
}

// Validate reports the first problem, naming the field.
func (p *Plan) Validate() error {
	if len(p.Pods) == 0 {
		return errors.New("rollout: plan: pods must list every pod, lowest traffic first")
	}
	for i, pod := range p.Pods {
		if slices.Index(p.Pods, pod) != i {
			return fmt.Errorf("rollout: plan: pods: %q is listed twice", pod)
		}
	}
	if len(p.Stages) == 0 {
		return errors.New("rollout: plan: at least one [[stages]] is required")
	}
	for i, s := range p.Stages {
		f := fmt.Sprintf("rollout: plan: stages[%d]", i)
		switch {
		case s.Name == "":
			return fmt.Errorf("%s.name is required", f)
		case !s.Mode.Valid():
			return fmt.Errorf("%s.mode %q is not one of %s", f, s.Mode, modeList())
		case len(s.Pods) == 0:
			return fmt.Errorf("%s.pods is empty", f)
		case s.Percent < 0 || s.Percent > 99:
			return fmt.Errorf("%s.percent must be 0 (all shops) or 1..99, got %d", f, s.Percent)
		case s.Gates.MinObservations < 1:
			return fmt.Errorf("%s.gates.min_observations must be >= 1: no data never passes", f)
		case s.Gates.MinDuration.Duration < 0:
			return fmt.Errorf("%s.gates.min_duration must not be negative", f)
		case s.Gates.MaxShadowErrorRate < 0 || s.Gates.MaxShadowErrorRate > 1:
			return fmt.Errorf("%s.gates.max_shadow_error_rate must be within 0..1", f)
		case s.Gates.MaxLatencyRatio < 0:
			return fmt.Errorf("%s.gates.max_latency_ratio must not be negative", f)
		}
		for _, pod := range s.Pods {
			if !slices.Contains(p.Pods, pod) {
				return fmt.Errorf("%s.pods: %q is not in the plan's pods", f, pod)
			}
		}
		for c, r := range s.Gates.MaxRates {
			if !slices.Contains(compare.Classes, c) {
				return fmt.Errorf("%s.gates.max_rates: unknown class %q", f, c)
			}
			if r < 0 || r > 1 {
				return fmt.Errorf("%s.gates.max_rates.%s must be within 0..1", f, c)
			}
		}
	}
	return nil
}

// Apply sets stage s on flags.
func (s Stage) Apply(f *flagdoc.Flags) error {
	for _, pod := range s.Pods {
		var err error
		if s.Percent > 0 {
			err = f.SetRamp(pod, s.Mode, s.Percent)
		} else {
			err = f.SetMode(flagdoc.PodScope(pod), s.Mode)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// GivesMySQLAuthority reports whether the stage makes MySQL the authority
// for any shop.
func (s Stage) GivesMySQLAuthority() bool {
	return s.Mode == authority.ModeMySQL || s.Mode == authority.ModeMySQLOnly
}

// modeList names the modes for messages: "redis, shadow, mysql, mysql_only".
func modeList() string {
	names := make([]string, len(authority.Modes))
	for i, m := range authority.Modes {
		names[i] = string(m)
	}
	return strings.Join(names, ", ")
}
