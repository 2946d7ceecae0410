package dualwrite_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// trafficCounter records Served calls as "pod mode op" -> n.
type trafficCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *trafficCounter) Served(pod, mode string, op compare.Op) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[fmt.Sprintf("%s %s %s", pod, mode, op)]++
}

// The facade counts every call it takes, in every mode, with the mode it
// applied: in redis and mysql_only modes too, where nothing is compared
// and the Observer sees nothing. Reads (Get, Availability) are not
// counted.
func TestTrafficCountedInEveryMode(t *testing.T) {
	t.Parallel()
	b := setup(t, options{mode: authority.ModeRedis})
	counter := &trafficCounter{n: map[string]int{}}
	modes := authority.NewStatic(authority.ModeRedis)
	f, err := dualwrite.New(dualwrite.Config{Pod: pod, Redis: b.rd, MySQL: b.my, Modes: modes, Mirror: b.m,
		Traffic: counter, Registerer: prometheus.NewRegistry(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drain(t, f) })
	ctx := context.Background()
	want := map[string]int{}
	for _, m := range authority.Modes {
		if err := modes.SetMode(m); err != nil {
			t.Fatal(err)
		}
		n := int64(50)
		if _, err := f.Adjust(ctx, &reservation.AdjustParams{Shop: shop, Item: 1, Location: 1, Available: &n}); err != nil {
			t.Fatalf("%s: adjust: %v", m, err)
		}
		for _, end := range []string{"claim", "release"} {
			token := string(m) + "-" + end
			res, err := f.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: token, TTL: time.Minute,
				Lines: []reservation.Line{{Item: 1, Quantity: 1, Locations: []int64{1}}}})
			if err != nil || res.Status != reservation.StatusReserved {
				t.Fatalf("%s: reserve: %+v %v", m, res, err)
			}
			if end == "claim" {
				_, err = f.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token})
			} else {
				_, err = f.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: token})
			}
			if err != nil {
				t.Fatalf("%s: %s: %v", m, end, err)
			}
		}
		if _, err := f.Get(ctx, &reservation.GetParams{Shop: shop, Token: string(m) + "-claim"}); err == nil {
			t.Fatalf("%s: the claimed hold is still there", m)
		}
		for op, n := range map[compare.Op]int{compare.OpAdjust: 1, compare.OpReserve: 2, compare.OpClaim: 1, compare.OpRelease: 1} {
			want[fmt.Sprintf("%s %s %s", pod, m, op)] = n
		}
	}
	counter.mu.Lock()
	defer counter.mu.Unlock()
	if !maps.Equal(counter.n, want) {
		t.Errorf("counted:\n%v\nwant:\n%v", slices.Sorted(maps.Keys(counter.n)), slices.Sorted(maps.Keys(want)))
		for k, n := range want {
			if counter.n[k] != n {
				t.Errorf("%s: %d, want %d", k, counter.n[k], n)
			}
		}
	}
}
