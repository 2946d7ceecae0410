package rollout_test

import (
	"context"
	"testing"

	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// The mode decision is made once per facade call. Static is the in-memory
// source (tests, the bench); Flags.Resolve is the same decision computed
// from a flag state without a provider; Decision.Route turns it into what
// the facade does. (BenchmarkFlagSourceDecide, next to FlagSource, measures
// the OpenFeature/flagd evaluation itself.) Run with
// `go test -run '^$' -bench . -benchmem ./rollout/`.
func BenchmarkStaticDecide(b *testing.B) {
	s := authority.NewStatic(authority.ModeShadow)
	if err := s.SetPodMode("pod-b", authority.ModeMySQL); err != nil {
		b.Fatal(err)
	}
	if err := s.SetShopMode(1001, authority.ModeRedis); err != nil {
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
	f := flagdoc.NewFlags()
	for _, step := range []error{
		f.SetMode(flagdoc.Global(), authority.ModeShadow),
		f.SetMode(flagdoc.PodScope("pod-a"), authority.ModeMySQL),
		f.SetRamp("pod-b", authority.ModeMySQL, 25),
		f.SetMode(flagdoc.ShopScope(1001), authority.ModeRedis),
		f.EngageKill(flagdoc.ShopScope(1002), authority.KillRedis, flagdoc.Attribution{Actor: "bench", Reason: "bench"}),
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
	ds := []authority.Decision{
		{Mode: authority.ModeShadow, Kill: authority.KillOff},
		{Mode: authority.ModeMySQL, Kill: authority.KillOff},
		{Mode: authority.ModeMySQL, Kill: authority.KillRedis},
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		_ = ds[i%len(ds)].Route()
	}
}
