package authority_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// The static source (tests, the benchmark, the demo's first steps) decides
// the kill switch as the flags do: the strongest state of any scope wins,
// so a pod's switch engages over a global one that is off and never
// weakens a stronger global one.
func TestStaticKillSwitchStrongestWins(t *testing.T) {
	t.Parallel()
	s := authority.NewStatic(authority.ModeMySQL)
	kill := func(pod string) authority.Kill {
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
		podA, others authority.Kill
	}{
		{"pod-a's switch, the global one off", func() error { return s.SetPodKill("pod-a", authority.KillRedis) }, authority.KillRedis, authority.KillOff},
		{"the global switch redis_only over pod-a's redis", func() error { return s.SetKill(authority.KillRedisOnly) }, authority.KillRedisOnly, authority.KillRedisOnly},
		{"the global switch redis, pod-a's redis_only", func() error {
			if err := s.SetKill(authority.KillRedis); err != nil {
				return err
			}
			return s.SetPodKill("pod-a", authority.KillRedisOnly)
		}, authority.KillRedisOnly, authority.KillRedis},
		{"pod-a's switch released, the global one off", func() error {
			if err := s.SetKill(authority.KillOff); err != nil {
				return err
			}
			return s.SetPodKill("pod-a", authority.KillOff)
		}, authority.KillOff, authority.KillOff},
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

func TestStaticVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := authority.NewStatic(authority.ModeShadow)
	if v := s.Version(); v != 1 {
		t.Fatalf("NewStatic: version %d, want 1", v)
	}
	last := s.Version()
	steps := []struct {
		name    string
		set     func() error
		changes bool
	}{
		{"global mode", func() error { return s.SetMode(authority.ModeMySQL) }, true},
		{"same global mode", func() error { return s.SetMode(authority.ModeMySQL) }, false},
		{"pod mode", func() error { return s.SetPodMode("pod-b", authority.ModeRedis) }, true},
		{"same pod mode", func() error { return s.SetPodMode("pod-b", authority.ModeRedis) }, false},
		{"shop mode", func() error { return s.SetShopMode(7, authority.ModeShadow) }, true},
		{"clear shop mode", func() error { return s.SetShopMode(7, "") }, true},
		{"clear a cleared shop mode", func() error { return s.SetShopMode(7, "") }, false},
		{"global kill", func() error { return s.SetKill(authority.KillRedis) }, true},
		{"pod kill", func() error { return s.SetPodKill("pod-b", authority.KillRedisOnly) }, true},
		{"release pod kill", func() error { return s.SetPodKill("pod-b", authority.KillOff) }, true},
		{"release a released pod kill", func() error { return s.SetPodKill("pod-b", authority.KillOff) }, false},
		{"unknown mode", func() error { return s.SetMode("fast") }, false},
	}
	for _, st := range steps {
		err := st.set()
		v := s.Version()
		switch {
		case st.changes && v != last+1:
			t.Errorf("%s: version %d after %d, want one more", st.name, v, last)
		case !st.changes && v != last:
			t.Errorf("%s: version %d after %d, want it unchanged", st.name, v, last)
		}
		if st.name == "unknown mode" && err == nil {
			t.Error("an unknown mode was accepted")
		}
		last = v
		if d, err := s.Decide(ctx, "pod-b", 7); err != nil || d.Version != v {
			t.Errorf("%s: Decide = %+v, %v; want version %d", st.name, d, err, v)
		}
	}
}

// Versions stay consistent while setters race with Decide: no decision
// carries a version the source never had, and the last one is the count
// of changes.
func TestStaticVersionConcurrent(t *testing.T) {
	t.Parallel()
	s := authority.NewStatic(authority.ModeRedis)
	var wg sync.WaitGroup
	const writers, changes = 4, 100
	for w := range writers {
		wg.Go(func() {
			for i := range changes {
				// Every call changes the state: shop w, alternating modes.
				m := authority.ModeShadow
				if i%2 == 1 {
					m = authority.ModeMySQL
				}
				if err := s.SetShopMode(int64(w+1), m); err != nil {
					t.Error(err)
				}
			}
		})
	}
	var last atomic.Int64
	wg.Go(func() {
		for range 1000 {
			d, _ := s.Decide(context.Background(), "pod-a", 1)
			if d.Version < last.Load() {
				t.Errorf("version went back from %d to %d", last.Load(), d.Version)
			}
			last.Store(d.Version)
		}
	})
	wg.Wait()
	if v := s.Version(); v != 1+writers*changes {
		t.Errorf("version %d after %d changes, want %d", v, writers*changes, 1+writers*changes)
	}
}
