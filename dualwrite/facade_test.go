package dualwrite_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
)

// traffic runs workers that reserve 1-2 units of a random item and then
// claim or release, until d passes. It returns the tokens it claimed with
// what was deducted.
//
// done, when set, is polled between calls: the run also ends when it says
// so (e.g. every item sold out), so a slow machine runs longer, not less.
func traffic(t *testing.T, b *bundle, workers int, d time.Duration, items int64, done func() bool) (claimed map[string][]reservation.Allocation) {
	t.Helper()
	var mu sync.Mutex
	claimed = map[string][]reservation.Allocation{}
	deadline := time.Now().Add(d)
	var stop atomic.Bool
	if done != nil {
		go func() {
			for !stop.Load() && time.Now().Before(deadline) {
				if done() {
					stop.Store(true)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 3))
			for i := 0; time.Now().Before(deadline) && !stop.Load(); i++ {
				token := fmt.Sprintf("w%d-%d", w, i)
				res, err := b.reserve(context.Background(), token, time.Minute, line(1+r.Int64N(items), 1+r.Int64N(2)))
				if err != nil {
					t.Errorf("reserve: %v", err)
					return
				}
				if res.Status != reservation.StatusReserved {
					continue
				}
				if r.IntN(4) == 0 {
					if _, err := b.f.Release(context.Background(), &reservation.ReleaseParams{Shop: shop, Token: token}); err != nil {
						t.Errorf("release: %v", err)
						return
					}
					continue
				}
				c, err := b.f.Claim(context.Background(), &reservation.ClaimParams{Shop: shop, Token: token})
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				mu.Lock()
				claimed[token] = c.Allocations
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	b.drain(t)
	return claimed
}

// a. Shadow mode, 32 callers, stock that runs out: every observation is
// classified; the differences at the boundary land in the race class, not
// in outcome mismatches; with plenty of stock there is no mismatch at all.
func TestShadowModeClassifiesEveryObservation(t *testing.T) {
	t.Parallel()
	// A generous shadow deadline: this test is about classification, and
	// a shadow that times out on a loaded 2-core machine (race detector on)
	// turns its follow-up claim into a shadow_missing.
	const deadline = 2 * time.Second
	t.Run("stock runs out", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{shadowTimeout: deadline})
		for item := int64(1); item <= 3; item++ {
			b.stock(t, item, 1, 150)
		}
		var reached atomic.Bool
		soldOut := func() bool {
			for item := int64(1); item <= 3; item++ {
				a, err := b.rd.Availability(context.Background(), &reservation.AvailabilityParams{Shop: shop, Item: item})
				if err != nil || a.At(1) > 0 {
					return false
				}
			}
			reached.Store(true)
			return true
		}
		// Until every item is sold out (or 60 s on a very slow machine).
		claimed := traffic(t, b, 32, 60*time.Second, 3, soldOut)
		classes := b.rec.classes()
		t.Logf("%d observations: %v; %d claims", b.rec.count(), classes, len(claimed))
		total := 0
		for c, n := range classes {
			if !validClass(c) {
				t.Errorf("unclassified observation: class %q", c)
			}
			total += n
		}
		if total != b.rec.count() || total == 0 {
			t.Errorf("classified %d of %d observations", total, b.rec.count())
		}
		if classes[compare.ClassOutcomeMismatch] != 0 || classes[compare.ClassAllocationMismatch] != 0 {
			t.Errorf("real mismatches at the stock-out boundary: %v (want them in %s)", classes, compare.ClassStockoutRace)
		}
		if !reached.Load() {
			t.Errorf("the run never sold every item out: the boundary was not tested")
		}
	})
	t.Run("plenty of stock", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{shadowTimeout: deadline})
		for item := int64(1); item <= 3; item++ {
			b.stock(t, item, 1, 1_000_000)
		}
		traffic(t, b, 32, 3*time.Second, 3, nil)
		classes := b.rec.classes()
		t.Logf("%d observations: %v", b.rec.count(), classes)
		if classes[compare.ClassMatch] != b.rec.count() {
			t.Errorf("with plenty of stock every observation must match: %v", classes)
			b.rec.dumpMismatches(t, 10)
		}
	})
}

func validClass(c compare.Class) bool {
	for _, k := range compare.Classes {
		if c == k {
			return true
		}
	}
	return false
}

// b. A broken shadow (a store configured with the wrong pool cap, one that
// sleeps past the deadline ignoring its context, one that panics) changes no
// answer, adds at most a small bound to the caller's latency, and each
// fault shows in its class.
func TestBrokenShadowChangesNoAnswer(t *testing.T) {
	t.Parallel()
	const deadline = 200 * time.Millisecond
	cases := []struct {
		name  string
		mode  rollout.Mode
		wrap  func(b *bundle) options
		class compare.Class
		// budget is what the fault may add to the caller's latency: a
		// claim waits (up to the deadline) for the shadow of its own
		// reserve, and in mysql mode every call waits for its shadow.
		budget time.Duration
	}{
		{"wrong pool cap", rollout.ModeShadow, func(b *bundle) options {
			return options{wrapMySQL: func(reservation.Store) reservation.Store {
				// A MySQL store with a pool cap of 1 refuses 2-unit lines.
				s, err := mysqlstore.New(mysqlstore.Config{DB: b.db.DB, PoolCap: 1, Registerer: nil})
				if err != nil {
					panic(err)
				}
				return s
			}}
		}, compare.ClassOutcomeMismatch, 0},
		{"sleeps past the deadline", rollout.ModeShadow, func(*bundle) options {
			return options{wrapMySQL: func(s reservation.Store) reservation.Store { return faulty{s, sleeper(5 * deadline)} }}
		}, compare.ClassShadowTimeout, deadline},
		{"panics", rollout.ModeShadow, func(*bundle) options {
			return options{wrapMySQL: func(s reservation.Store) reservation.Store { return faulty{s, panicker} }}
		}, compare.ClassShadowPanic, 0},
		// In mysql mode the caller waits for the Redis shadow, up to its
		// deadline and no more.
		{"redis shadow sleeps (mysql mode)", rollout.ModeMySQL, func(*bundle) options {
			return options{wrapRedis: func(s reservation.Store) reservation.Store { return faulty{s, sleeper(5 * deadline)} }}
		}, compare.ClassShadowTimeout, 2 * deadline},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			probe := setup(t, options{mode: tc.mode})
			o := tc.wrap(probe)
			o.mode, o.shadowTimeout = tc.mode, deadline
			b := setup(t, o)
			b.stock(t, 1, 1, 10)
			// The same calls on the probe (no fault): the machine's own
			// latency today, which the fault's budget is added to.
			probe.stock(t, 1, 1, 10)
			control := sequence(probe)
			// The answers the authority alone gives.
			want := []string{"reserved [{1 1 2}]", "claimed [{1 1 2}]", "reserved [{1 1 2}]", "released", "insufficient"}
			var got []string
			var slowest time.Duration
			timed := func(f func() string) {
				start := time.Now()
				got = append(got, f())
				slowest = max(slowest, time.Since(start))
			}
			timed(func() string { return reserveAnswer(b.reserve(context.Background(), "a", time.Minute, line(1, 2))) })
			timed(func() string {
				c, err := b.f.Claim(context.Background(), &reservation.ClaimParams{Shop: shop, Token: "a"})
				return fmt.Sprint(c.Outcome, " ", c.Allocations, errString(err))
			})
			timed(func() string { return reserveAnswer(b.reserve(context.Background(), "b", time.Minute, line(1, 2))) })
			timed(func() string {
				r, err := b.f.Release(context.Background(), &reservation.ReleaseParams{Shop: shop, Token: "b"})
				if err != nil || !r.Released {
					return fmt.Sprint("not released", errString(err))
				}
				return "released"
			})
			timed(func() string { return reserveAnswer(b.reserve(context.Background(), "c", time.Minute, line(1, 9))) })
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("answers %q, want %q", got, want)
			}
			// A waited-for shadow adds at most its deadline to what the
			// same calls take without the fault; slack for a shared 2-core
			// machine.
			if limit := tc.budget + 2*control + 150*time.Millisecond; slowest > limit {
				t.Errorf("slowest call took %s, want under %s (budget %s + 2 x %s without the fault + slack)", slowest, limit, tc.budget, control)
			}
			b.drain(t)
			classes := b.rec.classes()
			if classes[tc.class] == 0 {
				t.Errorf("classes %v: no %s", classes, tc.class)
			}
			t.Logf("slowest call %s; classes %v", slowest, classes)
		})
	}
}

// sequence runs a reserve, claim, reserve, release on a fault-free bundle
// and returns the slowest call.
func sequence(b *bundle) time.Duration {
	var slowest time.Duration
	timed := func(f func()) {
		start := time.Now()
		f()
		slowest = max(slowest, time.Since(start))
	}
	ctx := context.Background()
	timed(func() { b.reserve(ctx, "a", time.Minute, line(1, 2)) })
	timed(func() { b.f.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "a"}) })
	timed(func() { b.reserve(ctx, "b", time.Minute, line(1, 2)) })
	timed(func() { b.f.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: "b"}) })
	return slowest
}

func reserveAnswer(r reservation.ReserveResult, err error) string {
	if err != nil {
		return "error " + err.Error()
	}
	if r.Status == reservation.StatusReserved {
		return fmt.Sprint(r.Status, " ", r.Allocations)
	}
	return string(r.Status)
}

func errString(err error) string {
	if err != nil {
		return " error " + err.Error()
	}
	return ""
}

// c. Bounded shadow: with MySQL made slow, shadow goroutines never exceed
// the slots, the callers do not wait, and the calls that found no free
// slot are skipped and counted.
//
// Not parallel: it counts the process's goroutines, so no other test may
// run beside it.
func TestShadowWorkIsBounded(t *testing.T) {
	// With slots = 100000 instead the peak reaches ~650 and the check fails.
	const slots, callers = 8, 64
	b := setup(t, options{slots: slots, shadowTimeout: 2 * time.Second, wrapMySQL: func(s reservation.Store) reservation.Store {
		return faulty{s, func(ctx context.Context, _ string) error {
			select {
			case <-time.After(300 * time.Millisecond):
			case <-ctx.Done():
			}
			return nil
		}}
	}})
	b.stock(t, 1, 1, 100_000)
	base := runtime.NumGoroutine()
	var peak atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				if n := int64(runtime.NumGoroutine()); n > peak.Load() {
					peak.Store(n)
				}
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() {
			for i := range 10 {
				if _, err := b.reserve(context.Background(), tok("c", w, "-", i), time.Minute, line(1, 1)); err != nil {
					t.Errorf("reserve: %v", err)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	b.drain(t)
	skipped := b.counter(t, "reservoir_dualwrite_shadow_skipped_total")
	classes := b.rec.classes()
	t.Logf("goroutines: %d before, peak %d; skipped %v; classes %v", base, peak.Load(), skipped, classes)
	// The callers, the sampler, the slots and the drivers' own goroutines;
	// without the bound it would be callers x 10 shadow goroutines.
	if limit := int64(base + callers + slots + 64); peak.Load() > limit {
		t.Errorf("peak goroutines %d > %d: shadow work is not bounded", peak.Load(), limit)
	}
	if skipped == 0 || classes[compare.ClassShadowSkipped] != int(skipped) {
		t.Errorf("skipped %v, shadow_skipped observations %d: want equal and > 0", skipped, classes[compare.ClassShadowSkipped])
	}
}

// d. Flip under load. Reservations made in shadow mode are claimed or
// released after the flip to mysql, and reservations made in mysql mode
// after the kill switch put Redis back in charge: every claim succeeds
// exactly once, the ledger is deducted once per claimed reservation (the
// claims table and the ledger agree), and after expiry no hold is left in
// either store.
func TestFlipUnderLoadHonoursEveryReservation(t *testing.T) {
	t.Parallel()
	b := setup(t, options{mode: rollout.ModeShadow})
	const items, stock = 4, 10_000
	for item := int64(1); item <= items; item++ {
		b.stock(t, item, 1, stock)
	}
	// Holds expire soon after the test is done with them, so the end can
	// check that nothing is left in either store, whatever shadow calls
	// timed out on the way.
	const ttl = 6 * time.Second
	expireBy := time.Now().Add(time.Minute)
	var deducted [items + 1]atomic.Int64
	var claims atomic.Int64
	phase := func(name string, flip func()) {
		// Reserve under the current mode...
		var tokens sync.Map
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for i := range 20 {
					token := fmt.Sprintf("%s-%d-%d", name, w, i)
					res, err := b.reserve(context.Background(), token, ttl, line(1+int64((w+i)%items), 1+int64(i%3)))
					if err != nil || res.Status != reservation.StatusReserved {
						t.Errorf("%s: reserve: %+v %v", name, res, err)
						continue
					}
					tokens.Store(token, true)
				}
			})
		}
		expireBy = time.Now().Add(ttl)
		// ...flip while they are in flight...
		time.Sleep(20 * time.Millisecond)
		flip()
		wg.Wait()
		// ...then claim three of four and release the rest, twice each
		// (a retry must change nothing).
		n := 0
		tokens.Range(func(k, _ any) bool {
			token, i := k.(string), n
			n++
			wg.Go(func() {
				for attempt := range 2 {
					if i%4 == 0 {
						if _, err := b.f.Release(context.Background(), &reservation.ReleaseParams{Shop: shop, Token: token}); err != nil {
							t.Errorf("%s: release %s: %v", name, token, err)
						}
						continue
					}
					c, err := b.f.Claim(context.Background(), &reservation.ClaimParams{Shop: shop, Token: token})
					if err != nil {
						t.Errorf("%s: claim %s (attempt %d): %v", name, token, attempt, err)
						return
					}
					if c.Replayed != (attempt == 1) {
						t.Errorf("%s: claim %s attempt %d: replayed = %v", name, token, attempt, c.Replayed)
					}
					if attempt == 0 {
						claims.Add(1)
						for _, a := range c.Allocations {
							deducted[a.Item].Add(a.Quantity)
						}
					}
				}
			})
			return true
		})
		wg.Wait()
		b.drain(t)
	}
	phase("shadow-to-mysql", func() { _ = b.modes.SetMode(rollout.ModeMySQL) })
	phase("mysql-to-kill", func() { _ = b.modes.SetKill(rollout.KillRedis) })
	_ = b.modes.SetKill(rollout.KillOff)
	phase("back-to-mysql", func() {})

	for item := int64(1); item <= items; item++ {
		if l := b.ledger(t, item, 1); l != stock-deducted[item].Load() {
			t.Errorf("item %d: ledger %d, want %d - %d claimed", item, l, stock, deducted[item].Load())
		}
	}
	if n := b.db.Count(t, "reservation_claims"); n != claims.Load() {
		t.Errorf("claims rows %d, claims answered %d", n, claims.Load())
	}

	// Holds that are never claimed expire in both stores.
	for i := range 10 {
		if _, err := b.reserve(context.Background(), tok("late", i), time.Second, line(1, 1)); err != nil {
			t.Fatal(err)
		}
	}
	b.drain(t)
	time.Sleep(time.Until(expireBy) + 300*time.Millisecond)
	for _, s := range []reservation.Store{b.my, b.rd} {
		if _, err := s.Reap(context.Background(), &reservation.ReapParams{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.db.Count(t, "reserved_quantities"); n != 0 {
		t.Errorf("%d MySQL holds left after expiry", n)
	}
	for item := int64(1); item <= items; item++ {
		l := b.ledger(t, item, 1)
		if u := b.unheld(t, b.rd, item, 1); u != l {
			t.Errorf("item %d: Redis unheld %d, ledger %d: a Redis hold was left or a deduction not followed", item, u, l)
		}
		if u := b.unheld(t, b.my, item, 1); u != l {
			t.Errorf("item %d: MySQL unheld %d, ledger %d", item, u, l)
		}
	}
	if d, err := b.rd.Drift(context.Background(), nil); err == nil && len(d) != 0 {
		t.Logf("redis drift: %v", d)
	}
	if d, _ := b.my.Reconcile(context.Background(), 0); len(d) != 0 {
		for _, x := range d {
			if x.Kind != mysqlstore.DriftEmptyPool {
				t.Errorf("mysql reconcile: %v", x)
			}
		}
	}
}

// The recorded authority routes a claim: a reservation made while Redis was
// the authority is claimed by Redis after the flip to mysql, even when the
// MySQL shadow never saw it.
func TestClaimGoesToTheReservationsAuthority(t *testing.T) {
	t.Parallel()
	b := setup(t, options{mode: rollout.ModeRedis})
	b.stock(t, 1, 1, 10)
	if _, err := b.reserve(context.Background(), "old", time.Minute, line(1, 3)); err != nil {
		t.Fatal(err)
	}
	_ = b.modes.SetMode(rollout.ModeMySQL)
	c, err := b.f.Claim(context.Background(), &reservation.ClaimParams{Shop: shop, Token: "old"})
	if err != nil || c.Outcome != reservation.OutcomeClaimed {
		t.Fatalf("claim after flip: %+v %v", c, err)
	}
	b.drain(t)
	if l := b.ledger(t, 1, 1); l != 7 {
		t.Errorf("ledger %d, want 7", l)
	}
	if classes := b.rec.classes(); classes[compare.ClassShadowMissing] != 1 {
		t.Errorf("classes %v: the MySQL shadow never saw the reservation, want one %s", classes, compare.ClassShadowMissing)
	}
	if _, err := b.rd.Get(context.Background(), &reservation.GetParams{Shop: shop, Token: "old"}); !errors.Is(err, reservation.ErrNotFound) {
		t.Errorf("Redis hold after claim: %v", err)
	}
}

// A failing mode source falls back to the Redis-safe decision.
func TestModeSourceFailureFallsBackToRedis(t *testing.T) {
	t.Parallel()
	b := setup(t, options{mode: rollout.ModeMySQL})
	broken, err := dualwrite.New(dualwrite.Config{Pod: pod, Redis: b.rd, MySQL: b.my, Modes: failingSource{}})
	if err != nil {
		t.Fatal(err)
	}
	b.stock(t, 1, 1, 5)
	res, err := broken.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: "t", Lines: line(1, 1), TTL: time.Minute})
	if err != nil || res.Authority != reservation.AuthorityRedis {
		t.Fatalf("reserve with a failing source: %+v %v, want Redis authority", res, err)
	}
	if _, err := b.my.Get(context.Background(), &reservation.GetParams{Shop: shop, Token: "t"}); !errors.Is(err, reservation.ErrNotFound) {
		t.Errorf("MySQL was written in redis mode: %v", err)
	}
}

type failingSource struct{}

func (failingSource) Decide(context.Context, string, int64) (rollout.Decision, error) {
	return rollout.Decision{Mode: rollout.ModeMySQLOnly}, errors.New("flag provider down")
}

func TestConfigValidate(t *testing.T) {
	_, err := dualwrite.New(dualwrite.Config{})
	if err == nil || err.Error() != "dualwrite: Config.Pod is required" {
		t.Errorf("empty config: %v", err)
	}
}

// e. Wired to a real comparer, a broken shadow's diffs are written to
// MySQL at the capped rate, survive a restart of the comparer, and the
// class counters are on the registry.
func TestDiffsPersistedThroughTheFacade(t *testing.T) {
	t.Parallel()
	probe := setup(t, options{})
	reg := prometheus.NewRegistry()
	cmp, err := compare.New(compare.Config{DB: probe.db.DB, Registerer: reg, DiffRate: 1, DiffBurst: 3})
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, options{observer: cmp, shadowTimeout: 100 * time.Millisecond,
		wrapMySQL: func(s reservation.Store) reservation.Store { return faulty{s, panicker} }})
	// The comparer writes into the probe's database; the stores use b's.
	b.stock(t, 1, 1, 100)
	for i := range 20 {
		if _, err := b.reserve(context.Background(), tok("p", i), time.Minute, line(1, 1)); err != nil {
			t.Fatal(err)
		}
	}
	b.drain(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cmp.Close(ctx); err != nil {
		t.Fatal(err)
	}
	restarted, err := compare.New(compare.Config{DB: probe.db.DB, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer restarted.Close(ctx)
	diffs, err := restarted.RecentDiffs(ctx, pod, 100)
	if err != nil {
		t.Fatal(err)
	}
	// 20 panics (plus the adjust's), burst 3 at 1/s: a handful, not all.
	if len(diffs) < 3 || len(diffs) > 6 {
		t.Errorf("%d diff records persisted, want the burst of 3 (+1 per second of the run)", len(diffs))
	}
	for _, d := range diffs {
		if d.Class != compare.ClassShadowPanic || d.Shadow.Error == "" {
			t.Errorf("diff %+v: want a shadow_panic with the panic's text", d)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var panics float64
	for _, mf := range mfs {
		if mf.GetName() != "reservoir_compare_observations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "class" && l.GetValue() == string(compare.ClassShadowPanic) {
					panics += m.GetCounter().GetValue()
				}
			}
		}
	}
	if panics < 20 {
		t.Errorf("shadow_panic counter = %v, want every one of the 20 reserves", panics)
	}
}

// Invariant 3 at a stock-out: in mysql mode MySQL accepts a reservation
// Redis refused (its view was short); after the kill switch puts Redis in
// charge, the reservation is still claimed, once, through the store that
// holds it, and Redis follows the deduction.
func TestKillSwitchHonoursAReservationOnlyMySQLHolds(t *testing.T) {
	t.Parallel()
	b := setup(t, options{mode: rollout.ModeMySQL})
	b.stock(t, 1, 1, 5)
	// Redis believes there is nothing left (drift, or a lost race).
	key := fmt.Sprintf("%s{shop:%d}:qty:1", b.r.Prefix, shop)
	if err := b.r.Client.HIncrBy(context.Background(), key, "1", -5).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := b.reserve(context.Background(), "only-mysql", time.Minute, line(1, 2))
	if err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve in mysql mode: %+v %v", res, err)
	}
	b.drain(t)
	if _, err := b.rd.Get(context.Background(), &reservation.GetParams{Shop: shop, Token: "only-mysql"}); !errors.Is(err, reservation.ErrNotFound) {
		t.Fatalf("precondition: Redis must not hold it: %v", err)
	}
	for _, kill := range []rollout.Kill{rollout.KillRedis} {
		_ = b.modes.SetKill(kill)
		c, err := b.f.Claim(context.Background(), &reservation.ClaimParams{Shop: shop, Token: "only-mysql"})
		if err != nil || c.Outcome != reservation.OutcomeClaimed {
			t.Fatalf("claim under kill switch %s: %+v %v", kill, c, err)
		}
	}
	b.drain(t)
	if l := b.ledger(t, 1, 1); l != 3 {
		t.Errorf("ledger %d, want 3", l)
	}
	// Redis followed the deduction: 0 - 2 after the drift (its own view is
	// short by the injected 5; reconcile repairs that).
	if u := b.unheld(t, b.rd, 1, 1); u != 0 {
		t.Errorf("Redis unheld %d, want 0 (clamped): it must not offer the claimed units", u)
	}
	if n := b.db.Count(t, "reservation_claims"); n != 1 {
		t.Errorf("%d claim rows, want 1", n)
	}
}
