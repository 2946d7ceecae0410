package dualwrite_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
)

// Issue 5 b. The kill switch is engaged, through the flags file, while 32
// callers run in mysql mode on four replicas (each its own facade and its
// own flagd FlagSource on the one file): the time until every replica
// obeys is measured; every reserve started after that has Redis authority;
// every acknowledged reservation is claimed exactly once and the ledger is
// deducted once per claim.
func TestKillSwitchUnderLoadAcrossReplicas(t *testing.T) {
	t.Parallel()
	b := setup(t, options{mode: rollout.ModeMySQL})
	b.stock(t, 1, 1, 1_000_000)
	flags := rollout.FlagsFile{Path: filepath.Join(t.TempDir(), "flags.json")}
	start := rollout.NewFlags()
	if err := start.SetMode(rollout.PodScope(pod), rollout.ModeMySQL); err != nil {
		t.Fatal(err)
	}
	if err := flags.Write(start); err != nil {
		t.Fatal(err)
	}
	const replicas = 4
	var facades []*dualwrite.Facade
	var sources []*rollout.FlagSource
	for range replicas {
		src, err := rollout.NewFlagSource(context.Background(), rollout.FlagSourceConfig{Path: flags.Path, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { src.Close() })
		f, err := dualwrite.New(dualwrite.Config{Pod: pod, Redis: b.rd, MySQL: b.my, Modes: src, ShadowTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		facades, sources = append(facades, f), append(sources, src)
	}

	type call struct {
		started   time.Time
		authority reservation.Authority
	}
	var mu sync.Mutex
	var calls []call
	var claimed, units atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			f := facades[w%replicas]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				token := fmt.Sprintf("k%d-%d", w, i)
				started := time.Now()
				res, err := f.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: token, Lines: line(1, 1), TTL: time.Minute})
				if err != nil || res.Status != reservation.StatusReserved {
					t.Errorf("reserve %s: %+v %v", token, res, err)
					return
				}
				mu.Lock()
				calls = append(calls, call{started, res.Authority})
				mu.Unlock()
				c, err := f.Claim(context.Background(), &reservation.ClaimParams{Shop: shop, Token: token})
				if err != nil || c.Replayed {
					t.Errorf("claim %s: %+v %v", token, c, err)
					return
				}
				claimed.Add(1)
				units.Add(reservation.TotalQuantity(c.Allocations))
			}
		})
	}
	time.Sleep(time.Second)
	engaged := time.Now()
	if _, _, err := flags.Update(func(f *rollout.Flags) error {
		return f.EngageKill(rollout.PodScope(pod), rollout.KillRedis, rollout.Attribution{Actor: "test", Reason: "drill under load"})
	}); err != nil {
		t.Fatal(err)
	}
	// Every replica's source, polled: when does each obey?
	obeyed := make([]time.Duration, replicas)
	for i, src := range sources {
		for {
			d, _ := src.Decide(context.Background(), pod, shop)
			if d.Kill == rollout.KillRedis {
				obeyed[i] = time.Since(engaged)
				break
			}
			if time.Since(engaged) > 10*time.Second {
				t.Fatalf("replica %d never obeyed the kill switch", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	allObeyed := engaged.Add(slices.Max(obeyed))
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	for _, f := range facades {
		f.Close(context.Background())
	}
	t.Logf("kill switch propagation to %d replicas under 32 callers: %v (max %v)", replicas, obeyed, slices.Max(obeyed))

	var before, after, lateMySQL int
	for _, c := range calls {
		switch {
		case c.started.Before(engaged):
			before++
		case c.started.After(allObeyed):
			after++
			if c.authority != reservation.AuthorityRedis {
				lateMySQL++
			}
		}
	}
	if before == 0 || after == 0 {
		t.Fatalf("calls before the switch %d, after every replica obeyed %d: both must be > 0", before, after)
	}
	if lateMySQL > 0 {
		t.Errorf("%d of %d reserves started after every replica obeyed still had MySQL authority", lateMySQL, after)
	}
	if n := b.db.Count(t, "reservation_claims"); n != claimed.Load() {
		t.Errorf("claim rows %d, claims acknowledged %d", n, claimed.Load())
	}
	if l := b.ledger(t, 1, 1); l != 1_000_000-units.Load() {
		t.Errorf("ledger %d, want %d - %d claimed", l, 1_000_000, units.Load())
	}
	if slices.Max(obeyed) > 2*time.Second {
		t.Errorf("propagation %v: want well under a second on this machine", slices.Max(obeyed))
	}
}
