package mirror_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/reservation"
)

// flagsSpy is the flags a sweeper reads: one store for every shop, at a
// version that grows with each change, as a flags document's does.
type flagsSpy struct {
	mu      sync.Mutex
	to      reservation.Authority
	version int64
	changed time.Time
}

func (f *flagsSpy) set(to reservation.Authority) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.to, f.version, f.changed = to, f.version+1, time.Now()
}

func (f *flagsSpy) wanted(context.Context, int64) (reservation.Authority, int64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.to, f.version, false, nil
}

func (f *flagsSpy) appliedVersion(context.Context) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.version, f.version > 0
}

// sweep runs m's sweeper on flags until the test ends (or stop).
func sweep(t *testing.T, m *mirror.Mirror, flags *flagsSpy, replica string) (stop func()) {
	t.Helper()
	return sweepWanted(t, m, flags, flags.wanted, replica)
}

// sweepWanted is sweep with another Wanted.
func sweepWanted(t *testing.T, m *mirror.Mirror, flags *flagsSpy, wanted mirror.Wanted, replica string) (stop func()) {
	t.Helper()
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- m.RunSweeper(c, mirror.SweeperConfig{Wanted: wanted, Version: flags.appliedVersion, Replica: replica, Interval: 20 * time.Millisecond})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != context.Canceled {
				t.Errorf("RunSweeper: %v, want context.Canceled", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// fencesAre waits until every shop's fences in both stores name to.
func (b *bundle) fencesAre(t *testing.T, shops []int64, to reservation.Authority) {
	t.Helper()
	waitFor(t, fmt.Sprintf("every shop's fences to name %s", to), func() (bool, error) {
		for _, sh := range shops {
			mf, err := b.my.Fence(ctx(t), sh)
			if err != nil {
				return false, err
			}
			rf, err := b.rd.Fence(ctx(t), sh)
			if err != nil || mf.Decider != to || rf.Decider != to {
				return false, err
			}
		}
		return true, nil
	})
}

// Handoffs happen when the flags change, not when a call arrives: quiet
// shops (no call at all) are handed to MySQL, then back to Redis, by the
// pod's sweeper alone, each within a second of the flags change; the
// report in the pod's database says how far it came; a large shop's
// copy runs ahead of its cut-over like any other.
func TestSweeperHandsQuietShopsOff(t *testing.T) {
	t.Parallel()
	b := setup(t, servers[0].new, nil)
	stopRelay := run(t, b.m)
	defer stopRelay()
	shops := []int64{101, 102, 103}
	for _, sh := range shops {
		b.loadShop(t, sh, 6)
	}
	b.loadShop(t, 104, bigShop) // copied in the background
	shops = append(shops, 104)
	flags := &flagsSpy{}
	flags.set(reservation.AuthorityRedis)
	sweep(t, b.m, flags, "replica-a")

	for i, to := range []reservation.Authority{reservation.AuthorityMySQL, reservation.AuthorityRedis} {
		flags.set(to)
		b.fencesAre(t, shops, to)
		took := time.Since(flags.changed)
		t.Logf("%d quiet shops handed to %s %s after the flags change", len(shops), to, took.Round(time.Millisecond))
		if took > time.Second {
			t.Errorf("handing %d quiet shops to %s took %s, want within 1s of the flags change", len(shops), to, took)
		}
		var p reservation.HandoffProgress
		waitFor(t, "the report of the sweep", func() (bool, error) {
			var ok bool
			var err error
			p, ok, err = b.m.Progress(ctx(t))
			return ok && p.FlagsVersion == int64(i+2) && p.Pending == 0, err
		})
		if p.Shops != int64(len(shops)) || p.Done != p.Shops || p.Finished.IsZero() || p.Replica != "replica-a" {
			t.Errorf("report after the handoffs to %s: %+v", to, p)
		}
		t.Logf("report: %s", p.Summary(time.Now()))
	}
	for _, sh := range shops {
		if _, err := b.rd.Get(ctx(t), &reservation.GetParams{Shop: sh, Token: "t000", AsDecider: true}); err != nil {
			t.Errorf("shop %d: Redis decides again and holds t000: %v", sh, err)
		}
	}
	if n := metric(t, b.reg, "reservoir_handoff_swept_total"); n != float64(2*len(shops)) {
		t.Errorf("swept %v shops, want %d", n, 2*len(shops))
	}
}

// One sweeper per pod: a second replica stands by; when the active one
// dies (its context ends, its lease with it) with handoffs still to do,
// the other takes the lease and finishes them.
func TestSweeperCrashLeavesTheWorkToAnother(t *testing.T) {
	t.Parallel()
	b := setup(t, servers[0].new, nil)
	other, otherReg, _ := newMirror(t, b.my, newRedis(t, b.r, b.my), nil)
	shops := []int64{201, 202}
	for _, sh := range shops {
		b.loadShop(t, sh, 4)
	}
	flags := &flagsSpy{}
	flags.set(reservation.AuthorityRedis)
	// Replica a hangs in the middle of the sweep of version 2, until it
	// dies: its handoffs are left undone.
	hung := make(chan struct{})
	var once sync.Once
	stopA := sweepWanted(t, b.m, flags, func(c context.Context, shop int64) (reservation.Authority, int64, bool, error) {
		if to, v, force, err := flags.wanted(c, shop); v < 2 {
			return to, v, force, err
		}
		once.Do(func() { close(hung) })
		<-c.Done()
		return "", 0, false, c.Err()
	}, "replica-a")
	waitFor(t, "replica-a to sweep", func() (bool, error) {
		return metric(t, b.reg, "reservoir_handoff_sweeper_active") == 1, nil
	})
	sweep(t, other, flags, "replica-b")
	flags.set(reservation.AuthorityMySQL)
	<-hung
	if got := b.fences(t, shops[0]); got != "mysql redis@0, redis redis@0" {
		t.Fatalf("fences while replica-a hangs: %s", got)
	}
	stopA() // a crash: its lease goes with its connection
	b.fencesAre(t, shops, reservation.AuthorityMySQL)
	waitFor(t, "replica-b's report", func() (bool, error) {
		p, ok, err := other.Progress(ctx(t))
		return ok && p.FlagsVersion == 2 && p.Pending == 0 && p.Replica == "replica-b", err
	})
	if n := metric(t, otherReg, "reservoir_handoff_sweeper_active"); n != 1 {
		t.Errorf("replica-b's sweeper active = %v, want 1", n)
	}
}

// A sweeper whose flags cannot be read hands nothing off.
func TestSweeperWithoutFlagsHandsNothingOff(t *testing.T) {
	t.Parallel()
	b := setup(t, servers[0].new, nil)
	b.loadShop(t, 301, 4)
	flags := &flagsSpy{} // version 0: nothing loaded
	stop := sweep(t, b.m, flags, "replica-a")
	waitFor(t, "the sweeper to be active", func() (bool, error) {
		return metric(t, b.reg, "reservoir_handoff_sweeper_active") == 1, nil
	})
	stop()
	if got := b.fences(t, 301); got != "mysql redis@0, redis redis@0" {
		t.Errorf("fences: %s", got)
	}
	if _, ok, err := b.m.Progress(ctx(t)); err != nil || ok {
		t.Errorf("a report without flags: %v %v", ok, err)
	}
}

// A copy the flags abandon (they go back to Redis before its cut-over)
// is ended by the sweeper: it hands the shop to Redis at the new epoch,
// which clears MySQL's copy mark (MySQL keeps shadow holds again) and
// overtakes the copy's cut-over (Redis keeps deciding).
func TestSweeperEndsAnAbandonedCopy(t *testing.T) {
	t.Parallel()
	b := setup(t, servers[0].new, nil)
	b.loadShop(t, shop, bigShop)
	copying := make(chan struct{})
	release := make(chan struct{})
	mirror.SetAfterCopy(b.m, func(int64) { close(copying); <-release })
	flags := &flagsSpy{}
	flags.set(reservation.AuthorityMySQL)
	if f, err := b.m.Handoff(ctx(t), shop, reservation.AuthorityMySQL, 1, false); err != nil || f.Decider != reservation.AuthorityRedis {
		t.Fatalf("handoff: %v %v, want Redis's fence (copying in the background)", f, err)
	}
	<-copying
	shadow := func(token string) error {
		_, err := b.my.Reserve(ctx(t), &reservation.ReserveParams{Shop: shop, Token: token, Lines: lines(1), TTL: time.Minute, As: reservation.AsShadow})
		return err
	}
	if err := shadow("s1"); err == nil {
		t.Fatal("a shadow reserve was kept while the copy runs")
	}
	flags.set(reservation.AuthorityRedis) // version 2: back to Redis
	other, _, _ := newMirror(t, b.my, newRedis(t, b.r, b.my), nil)
	sweep(t, other, flags, "replica-b")
	waitFor(t, "the sweeper to end the copy", func() (bool, error) {
		fs, err := b.my.Fences(ctx(t))
		return fs[shop].Copying == 0 && fs[shop].Fence.String() == "redis@2", err
	})
	close(release)
	waitFor(t, "the abandoned copy to give up", func() (bool, error) {
		return metric(t, b.reg, "reservoir_handoffs_total", "to", "mysql", "result", "overtaken")+
			metric(t, b.reg, "reservoir_handoffs_total", "to", "mysql", "result", "failed") == 1, nil
	})
	if got := b.fences(t, shop); got != "mysql redis@2, redis redis@2" {
		t.Errorf("fences: %s, want Redis deciding at 2", got)
	}
	if err := shadow("s2"); err != nil {
		t.Errorf("shadow reserve after the copy ended: %v", err)
	}
	reserve(t, b.rd, shop, "r2", 1) // Redis decides
}
