package rollout_test

import (
	"context"
	"testing"

	"github.com/seed31b0e981/reservoir/rollout"
)

// The mode decision is made once per facade call. Static is the in-memory
// source (tests, the bench); Flags.Resolve is the same decision computed
// from a flag state without a provider; Decision.Route turns it into what
// the facade does. (BenchmarkFlagSourceDecide, next to FlagSource, measures
// the OpenFeature/flagd evaluation itself.) Run with
// `go test -run '^$' -bench . -benchmem ./rollout/`.
func BenchmarkStaticDecide(b *testing.B) {
	s := rollout.NewStatic(rollout.ModeShadow)
	if err := s.SetPodMode("pod-b", rollout.ModeMySQL); err != nil {
		b.Fatal(err)
	}
	if err := s.SetShopMode(1001, rollout.ModeRedis); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		shop := int64(0)
		for b.Loop() {
			shop++
			if _, err := s.Decide(ctx, "pod-b", shop%5000+1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			shop := int64(0)
			for pb.Next() {
				shop++
				if _, err := s.Decide(ctx, "pod-b", shop%5000+1); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func BenchmarkFlagsResolve(b *testing.B) {
	f := rollout.NewFlags()
	for _, step := range []error{
		f.SetMode(rollout.Global(), rollout.ModeShadow),
		f.SetMode(rollout.PodScope("pod-a"), rollout.ModeMySQL),
		f.SetRamp("pod-b", rollout.ModeMySQL, 25),
		f.SetMode(rollout.ShopScope(1001), rollout.ModeRedis),
		f.EngageKill(rollout.ShopScope(1002), rollout.KillRedis, rollout.Attribution{Actor: "bench", Reason: "bench"}),
	} {
		if step != nil {
			b.Fatal(step)
		}
	}
	b.ReportAllocs()
	shop := int64(0)
	for b.Loop() {
		shop++
		_ = f.Resolve("pod-b", shop%5000+1)
	}
}

func BenchmarkDecisionRoute(b *testing.B) {
	ds := []rollout.Decision{
		{Mode: rollout.ModeShadow, Kill: rollout.KillOff},
		{Mode: rollout.ModeMySQL, Kill: rollout.KillOff},
		{Mode: rollout.ModeMySQL, Kill: rollout.KillRedis},
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		_ = ds[i%len(ds)].Route()
	}
}
