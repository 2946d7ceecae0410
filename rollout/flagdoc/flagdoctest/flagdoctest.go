// Package flagdoctest holds the flags states the tests of the flags
// document, its sources and the controller share, so each package checks
// the same documented examples (docs/flags.md).
package flagdoctest

import (
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// At is the time the fixtures' kill switches were engaged at.
var At = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

// Rollout is a rollout in progress at version 41: shadow everywhere, pod-a
// on mysql, pod-b ramping 25% of its shops to mysql, pod-c's kill switch
// on redis, shops 1001 (mysql_only) and 1002 (redis) pinned, and shop
// 1003's kill switch on redis_only.
func Rollout(t testing.TB) *flagdoc.Flags {
	t.Helper()
	f := flagdoc.NewFlags()
	f.Version = 41
	must(t, f.SetMode(flagdoc.Global(), authority.ModeShadow))
	must(t, f.SetMode(flagdoc.PodScope("pod-a"), authority.ModeMySQL))
	must(t, f.SetRamp("pod-b", authority.ModeMySQL, 25))
	must(t, f.EngageKill(flagdoc.PodScope("pod-c"), authority.KillRedis, flagdoc.Attribution{Actor: "alice", Reason: "p99 reserve latency x3 on pod-c MySQL", At: At}))
	must(t, f.SetMode(flagdoc.ShopScope(1001), authority.ModeMySQLOnly))
	must(t, f.SetMode(flagdoc.ShopScope(1002), authority.ModeRedis))
	must(t, f.EngageKill(flagdoc.ShopScope(1003), authority.KillRedisOnly, flagdoc.Attribution{Actor: "bob", Reason: "shop 1003 hot item deadlocks", At: At}))
	return f
}

// GlobalKill is Rollout one version later with the global kill switch on
// redis_only.
func GlobalKill(t testing.TB) *flagdoc.Flags {
	t.Helper()
	f := Rollout(t)
	f.Version++
	must(t, f.EngageKill(flagdoc.Global(), authority.KillRedisOnly, flagdoc.Attribution{Actor: "carol", Reason: "MySQL primary failover", At: At}))
	return f
}

// RampShops returns one shop inside a ramp of percent and one outside,
// both clear of the shops with overrides in Rollout, as flagd's evaluator
// buckets them (Flags.Resolve).
func RampShops(t testing.TB, percent int) (in, out int64) {
	t.Helper()
	f := flagdoc.NewFlags()
	f.Version = 1
	must(t, f.SetMode(flagdoc.Global(), authority.ModeRedis))
	must(t, f.SetRamp("pod", authority.ModeMySQL, percent))
	for shop := int64(1); in == 0 || out == 0; shop++ {
		if shop > 10000 {
			t.Fatal("no shops on both sides of the ramp")
		}
		if shop >= 1000 && shop < 1100 {
			continue // keep clear of the shops with overrides
		}
		d, err := f.Decide("pod", shop)
		must(t, err)
		if d.Mode == authority.ModeMySQL {
			if in == 0 {
				in = shop
			}
		} else if out == 0 {
			out = shop
		}
	}
	return in, out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
