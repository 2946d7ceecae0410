package flagsource_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"testing"
	"time"

	"github.com/open-feature/go-sdk/openfeature"
	"github.com/open-feature/go-sdk/openfeature/memprovider"

	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
	"github.com/seed31b0e981/reservoir/rollout/flagsource"
)

// memFlags are reservoir's two flags for the SDK's in-memory provider, at
// version: every shop of pod-b on MySQL, the others on Redis, and the kill
// switch at kill on the pods in killed. The provider targets on the
// context's "pod" attribute; it could as well on "shop" or the targeting
// key (the shop id).
func memFlags(version int64, kill authority.Kill, killed ...string) map[string]memprovider.InMemoryFlag {
	flag := func(key, def string, pick func(pod string) string) memprovider.InMemoryFlag {
		eval := func(_ memprovider.InMemoryFlag, ec openfeature.FlattenedContext) (any, openfeature.ProviderResolutionDetail) {
			pod, _ := ec["pod"].(string)
			v := pick(pod)
			return v, openfeature.ProviderResolutionDetail{Variant: v, Reason: openfeature.TargetingMatchReason,
				FlagMetadata: openfeature.FlagMetadata{"version": version}}
		}
		return memprovider.InMemoryFlag{Key: key, State: memprovider.Enabled, DefaultVariant: def,
			Variants: map[string]any{def: def}, ContextEvaluator: &eval}
	}
	return map[string]memprovider.InMemoryFlag{
		flagdoc.FlagMode: flag(flagdoc.FlagMode, "redis", func(pod string) string {
			if pod == "pod-b" {
				return "mysql"
			}
			return "redis"
		}),
		flagdoc.FlagKillSwitch: flag(flagdoc.FlagKillSwitch, "off", func(pod string) string {
			for _, p := range killed {
				if p == pod {
					return string(kill)
				}
			}
			return "off"
		}),
	}
}

// Any OpenFeature provider can serve the flags instead of a file, the
// control database or a flagd daemon: here the SDK's in-memory provider.
// It answers both flags' variants by name, targets on the context's "pod"
// and "shop" (the shop id is the targeting key), and carries the same
// metadata.version on both flags, raised at every change. reservoir cannot
// write to it: the kill switch is engaged through whatever manages the
// provider (here UpdateFlags).
func ExampleNew_provider() {
	provider := memprovider.NewInMemoryProvider(memFlags(1, authority.KillOff))
	ctx := context.Background()
	replica, err := flagsource.New(ctx, flagsource.Config{
		Provider: provider,
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer replica.Close()
	d, _ := replica.Decide(ctx, "pod-b", 1001)
	fmt.Printf("loaded %v: mode %s, kill %s, authority %s, version %d\n", replica.Loaded(), d.Mode, d.Kill, d.Route().Authority, d.Version)

	// pod-b's MySQL misbehaves: whoever manages the provider engages the
	// kill switch there, at the next version.
	provider.UpdateFlags(memFlags(2, authority.KillRedis, "pod-b"))
	d, _ = replica.Decide(ctx, "pod-b", 1001)
	fmt.Printf("killed: mode %s, kill %s, authority %s, version %d\n", d.Mode, d.Kill, d.Route().Authority, d.Version)
	d, _ = replica.Decide(ctx, "pod-a", 2002)
	fmt.Printf("pod-a: mode %s, kill %s\n", d.Mode, d.Kill)
	// Output:
	// loaded true: mode mysql, kill off, authority mysql, version 1
	// killed: mode mysql, kill redis, authority redis, version 2
	// pod-a: mode redis, kill off
}

// slowProvider is an in-memory provider whose start waits for release.
type slowProvider struct {
	*memprovider.InMemoryProvider
	release chan struct{}
}

func (p slowProvider) Init(openfeature.EvaluationContext) error {
	<-p.release
	return nil
}

func (p slowProvider) Shutdown() {}

// A provider not ready within LoadTimeout does not fail the source: it
// starts not loaded, answering ErrFlagsNotLoaded, and is loaded once the
// provider reports ready.
func TestFlagSourceProviderNotReadyYet(t *testing.T) {
	t.Parallel()
	p := slowProvider{memprovider.NewInMemoryProvider(memFlags(3, authority.KillOff)), make(chan struct{})}
	src, err := flagsource.New(t.Context(), flagsource.Config{Provider: p, LoadTimeout: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	if d, err := src.Decide(t.Context(), "pod-b", 1); src.Loaded() || d != authority.RedisSafe || !errors.Is(err, flagsource.ErrFlagsNotLoaded) {
		t.Fatalf("before the provider is ready: %+v, %v (loaded %v); want RedisSafe, ErrFlagsNotLoaded", d, err, src.Loaded())
	}
	close(p.release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, err := src.Decide(t.Context(), "pod-b", 1)
		if err == nil && src.Loaded() && d.Mode == authority.ModeMySQL && d.Version == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5s after the provider is ready: %+v, %v (loaded %v); want mysql at version 3", d, err, src.Loaded())
		}
		time.Sleep(2 * time.Millisecond)
	}
	if v, ok := src.AppliedVersion(t.Context()); !ok || v != 3 {
		t.Errorf("AppliedVersion = %d, %v; want 3, true", v, ok)
	}
}

// A config naming a provider and another source is refused.
func TestFlagSourceProviderIsAlone(t *testing.T) {
	t.Parallel()
	_, err := flagsource.New(t.Context(), flagsource.Config{Provider: memprovider.NewInMemoryProvider(nil), Path: "flags.json"})
	if err == nil {
		t.Fatal("a provider and a file at once were accepted")
	}
}
