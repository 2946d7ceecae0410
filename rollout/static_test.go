package rollout_test

import (
	"context"
	"testing"

	"github.com/seed31b0e981/reservoir/rollout"
)

// The static source (tests, the benchmark, the demo's first steps) decides
// the kill switch as the flags do: the strongest state of any scope wins,
// so a pod's switch engages over a global one that is off and never
// weakens a stronger global one.
func TestStaticKillSwitchStrongestWins(t *testing.T) {
	t.Parallel()
	s := rollout.NewStatic(rollout.ModeMySQL)
	kill := func(pod string) rollout.Kill {
		t.Helper()
		d, err := s.Decide(context.Background(), pod, 1)
		if err != nil {
			t.Fatal(err)
		}
		return d.Kill
	}
	steps := []struct {
		what         string
		set          func() error
		podA, others rollout.Kill
	}{
		{"pod-a's switch, the global one off", func() error { return s.SetPodKill("pod-a", rollout.KillRedis) }, rollout.KillRedis, rollout.KillOff},
		{"the global switch redis_only over pod-a's redis", func() error { return s.SetKill(rollout.KillRedisOnly) }, rollout.KillRedisOnly, rollout.KillRedisOnly},
		{"the global switch redis, pod-a's redis_only", func() error {
			if err := s.SetKill(rollout.KillRedis); err != nil {
				return err
			}
			return s.SetPodKill("pod-a", rollout.KillRedisOnly)
		}, rollout.KillRedisOnly, rollout.KillRedis},
		{"pod-a's switch released, the global one off", func() error {
			if err := s.SetKill(rollout.KillOff); err != nil {
				return err
			}
			return s.SetPodKill("pod-a", rollout.KillOff)
		}, rollout.KillOff, rollout.KillOff},
	}
	for _, st := range steps {
		if err := st.set(); err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
		if a, b := kill("pod-a"), kill("pod-b"); a != st.podA || b != st.others {
			t.Errorf("%s: pod-a %s, pod-b %s; want %s, %s", st.what, a, b, st.podA, st.others)
		}
	}
}
