package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// b. 64 concurrent reservers of one unit on an item with 500 in stock:
// exactly 500 succeed, and Redis holds exactly 500 holds of one unit.
func TestHotItemReservesExactlyTheStock(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, srv.new)
			b.stock(t, 1, 1, 500)
			var reserved, short atomic.Int64
			var wg sync.WaitGroup
			for w := range 64 {
				wg.Go(func() {
					for i := 0; ; i++ {
						res, err := b.s.Reserve(context.Background(), &reservation.ReserveParams{
							Shop: shop, Token: fmt.Sprintf("w%d-%d", w, i), TTL: time.Minute, Lines: []reservation.Line{line(1, 1, 1)},
						})
						if err != nil {
							t.Errorf("reserve: %v", err)
							return
						}
						if res.Status != reservation.StatusReserved {
							short.Add(1)
							return // stock is out for this worker
						}
						reserved.Add(1)
					}
				})
			}
			wg.Wait()
			if reserved.Load() != 500 || short.Load() != 64 {
				t.Fatalf("%d reserved, %d refused; want exactly 500 reserved and each of the 64 workers refused once", reserved.Load(), short.Load())
			}
			if q := b.qty(t, 1, 1); q != 0 {
				t.Errorf("quantity = %d, want 0", q)
			}
			if n := b.r.Client.ZCard(ctx(t), b.key("expiry", "")).Val(); n != 500 {
				t.Errorf("expiry index has %d holds, want 500", n)
			}
			if n := b.r.Client.ZCard(ctx(t), b.key("tombs", "")).Val(); n != 64 {
				t.Errorf("tombstone index has %d tombstones, want the 64 refusals", n)
			}
			if d := b.drift(t); len(d) != 0 {
				t.Errorf("drift after the rush: %v", d)
			}
		})
	}
}

// d. A legacy claim whose inline Redis cleanup fails after the ledger
// deduction: the claim has happened, so the answer is success. The hold
// stays, marked claiming (a release must wait), the failure is counted,
// Drift shows the leftover, and each of the ways Redis catches up settles
// it once: a retry of the claim, the change feed, or the reaper after the
// grace.
func TestLegacyClaimCleanupFails(t *testing.T) {
	t.Parallel()
	failing := func(t *testing.T, edit func(*redisstore.Config)) bundle {
		t.Helper()
		// The cleanup on the claim's path, the one that fails here.
		b := setupWith(t, testredis.New, func(c *redisstore.Config) {
			c.InlineClaimCleanup = true
			if edit != nil {
				edit(c)
			}
		})
		b.stock(t, 1, 1, 10)
		b.reserve(t, "other", time.Minute, line(1, 2, 1))
		b.reserve(t, "cart-1", time.Minute, line(1, 3, 1))
		redisstore.SetAfterDeduct(b.s, func() error { return errInjected })
		res, err := b.s.Claim(ctx(t), &reservation.ClaimParams{Shop: shop, Token: "cart-1"})
		if err != nil || res.Outcome != reservation.OutcomeClaimed || res.Replayed || fmt.Sprint(res.Allocations) != "[{1 1 3}]" {
			t.Fatalf("claim with the cleanup failing: %+v %v, want claimed [{1 1 3}] and no error: the ledger was deducted", res, err)
		}
		redisstore.SetAfterDeduct(b.s, nil)
		if l := b.ledgerAt(t, 1, 1); l != 7 {
			t.Fatalf("ledger = %d, want 7 (deducted once)", l)
		}
		if n := b.counter(t, "reservoir_redis_legacy_claim_failures_total", "window", "after_deduct_before_cleanup"); n != 1 {
			t.Errorf("after_deduct_before_cleanup failures = %v, want 1", n)
		}
		// Redis still holds the units for nobody: 10 - 2 - 3.
		if q := b.qty(t, 1, 1); q != 5 {
			t.Errorf("quantity = %d with the leftover hold, want 5", q)
		}
		if b.claiming(t, "cart-1") == "" {
			t.Error("the leftover hold is not marked claiming")
		}
		if _, err := b.s.Release(ctx(t), &reservation.ReleaseParams{Shop: shop, Token: "cart-1"}); !errors.Is(err, reservation.ErrClaimInProgress) {
			t.Errorf("release of the leftover hold within the grace: %v, want ErrClaimInProgress", err)
		}
		d := b.drift(t)
		if len(d) != 1 || d[0].Kind != reservation.DriftLeftoverHold || d[0].Token != "cart-1" || fmt.Sprint(d[0].Allocations) != "[{1 1 3}]" {
			t.Fatalf("drift = %v, want exactly the leftover hold of cart-1", d)
		}
		return b
	}
	wantRepaired := func(t *testing.T, b bundle) {
		t.Helper()
		c := ctx(t)
		if d := b.drift(t); len(d) != 0 {
			t.Errorf("drift after the repair: %v", d)
		}
		if l, q := b.ledgerAt(t, 1, 1), b.qty(t, 1, 1); l != 7 || q != 5 {
			t.Errorf("ledger %d, quantity %d; want 7 and 5 (7 minus the other hold's 2)", l, q)
		}
		if _, err := b.s.Get(c, &reservation.GetParams{Shop: shop, Token: "cart-1"}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
			t.Errorf("get cart-1 after the repair: %v, want ErrAlreadyClaimed", err)
		}
		if _, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "cart-1"}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
			t.Errorf("release cart-1 after the repair: %v, want ErrAlreadyClaimed", err)
		}
		res, err := b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "cart-1"})
		if err != nil || !res.Replayed || fmt.Sprint(res.Allocations) != "[{1 1 3}]" {
			t.Errorf("claim again: %+v %v, want replayed [{1 1 3}]", res, err)
		}
		if _, err := b.s.Get(c, &reservation.GetParams{Shop: shop, Token: "other"}); err != nil {
			t.Errorf("the other hold must survive: %v", err)
		}
		if l, q := b.ledgerAt(t, 1, 1), b.qty(t, 1, 1); l != 7 || q != 5 {
			t.Errorf("at the end: ledger %d, quantity %d; want 7 and 5: deducted once, settled once", l, q)
		}
	}

	t.Run("RetryCompletes", func(t *testing.T) {
		t.Parallel()
		b := failing(t, nil)
		res, err := b.s.Claim(ctx(t), &reservation.ClaimParams{Shop: shop, Token: "cart-1"})
		if err != nil || res.Outcome != reservation.OutcomeClaimed || !res.Replayed {
			t.Fatalf("retried claim: %+v %v, want claimed, replayed (the ledger answered Applied false)", res, err)
		}
		wantRepaired(t, b)
	})

	// The ledger recorded the claim in its change feed; the relay delivers
	// it as the token's current state.
	t.Run("ChangeFeedCompletes", func(t *testing.T) {
		t.Parallel()
		b := failing(t, nil)
		claimed := reservation.Change{ID: 1, Kind: reservation.ChangeState, Shop: shop, Token: "cart-1",
			State: reservation.StateClaimed, Allocations: []reservation.Allocation{alloc(1, 1, 3)}}
		for range 2 { // delivered twice: settled once
			if n, err := b.s.Apply(ctx(t), []reservation.Change{claimed}); err != nil || n != 1 {
				t.Fatalf("apply the claim: %d %v", n, err)
			}
		}
		wantRepaired(t, b)
	})

	// Left alone, the leftover hold expires. Past the grace, the reaper
	// asks the ledger (Config.Source): cart-1 was deducted, so it settles
	// the hold as claimed instead of offering 3 units the ledger no longer
	// has (Redis would offer 8 where 5 is right).
	t.Run("ReapSettlesTheClaim", func(t *testing.T) {
		t.Parallel()
		b := failing(t, nil)
		b.age(t, "cart-1", time.Second, time.Minute)
		if r, err := b.s.Reap(ctx(t), &reservation.ReapParams{}); err != nil || r.Holds != 0 || r.Units != 0 {
			t.Fatalf("reap: %+v %v, want nothing given back", r, err)
		}
		if n := b.counter(t, "reservoir_redis_reap_settled_total"); n != 1 {
			t.Errorf("reap_settled = %v, want 1", n)
		}
		wantRepaired(t, b)
	})

	// A store without a Source cannot ask the ledger: its reaper gives the
	// units back and Redis oversells by 3 (Drift shows it) until the
	// change feed delivers the claim, which turns the expired tombstone
	// into a claimed one and takes the deduction out.
	t.Run("ReapedWithoutSourceThenFeed", func(t *testing.T) {
		t.Parallel()
		b := failing(t, nil)
		blind, _ := b.store(t, func(c *redisstore.Config) { c.Source = nil })
		b.age(t, "cart-1", time.Second, time.Minute)
		if r, err := blind.Reap(ctx(t), &reservation.ReapParams{}); err != nil || r.Holds != 1 || r.Units != 3 {
			t.Fatalf("reap: %+v %v, want the leftover hold of 3", r, err)
		}
		d := b.drift(t)
		if len(d) != 1 || d[0].Kind != reservation.DriftQuantity || d[0].Have != 8 || d[0].Want != 5 {
			t.Fatalf("drift after the reap = %v, want quantity 8 where 5 is right", d)
		}
		claimed := reservation.Change{ID: 1, Kind: reservation.ChangeState, Shop: shop, Token: "cart-1",
			State: reservation.StateClaimed, Allocations: []reservation.Allocation{alloc(1, 1, 3)}}
		if _, err := b.s.Apply(ctx(t), []reservation.Change{claimed}); err != nil {
			t.Fatal(err)
		}
		if n := b.counter(t, "reservoir_redis_mirror_applies_total", "kind", "state", "result", "converted"); n != 1 {
			t.Errorf("mirror applies converted = %v, want 1", n)
		}
		wantRepaired(t, b)
	})

	// The ledger cannot be read when the hold is due: nothing is given
	// back (an unchecked give-back could be the oversell above) and Reap
	// says why; the next pass, with the ledger back, settles it.
	t.Run("ReapWaitsForTheLedger", func(t *testing.T) {
		t.Parallel()
		b := failing(t, nil)
		cut, _ := b.store(t, func(c *redisstore.Config) { c.Source = failingSource{} })
		b.age(t, "cart-1", time.Second, time.Minute)
		r, err := cut.Reap(ctx(t), &reservation.ReapParams{})
		if err == nil || !strings.Contains(err.Error(), "claiming holds stay") || r.Holds != 0 {
			t.Fatalf("reap with the ledger unreadable: %+v %v, want an error and nothing given back", r, err)
		}
		if q := b.qty(t, 1, 1); q != 5 {
			t.Fatalf("quantity = %d after the refused reap, want 5 (the hold kept)", q)
		}
		if r, err := b.s.Reap(ctx(t), &reservation.ReapParams{}); err != nil || r.Holds != 0 {
			t.Fatalf("reap with the ledger back: %+v %v", r, err)
		}
		wantRepaired(t, b)
	})
}

// The ledger's own failure: Deduct errors with something other than a
// refusal (here: a reset connection), so whether it committed is unknown.
// The hold stays marked claiming (a release must not give back what the
// ledger may have deducted), the window is counted, and the retry claims.
func TestLegacyClaimDeductError(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	b.stock(t, 1, 1, 10)
	b.reserve(t, "cart-1", time.Minute, line(1, 3, 1))
	s, reg := b.store(t, func(c *redisstore.Config) { c.Ledger = failingLedger{b.ledger} })
	res, err := s.Claim(ctx(t), &reservation.ClaimParams{Shop: shop, Token: "cart-1"})
	if err == nil || !strings.Contains(err.Error(), "retry the claim") || res.Outcome != "" {
		t.Fatalf("claim with the ledger failing: %+v %v, want the deduct error and no result", res, err)
	}
	if n := counterOf(t, reg, "reservoir_redis_legacy_claim_failures_total", "window", "deduct_error"); n != 1 {
		t.Errorf("deduct_error failures = %v, want 1", n)
	}
	if _, err := b.s.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "cart-1"}); err != nil {
		t.Errorf("the hold must stay: %v", err)
	}
	if b.claiming(t, "cart-1") == "" {
		t.Error("the hold is not marked claiming after an unknown deduction")
	}
	if _, err := b.s.Release(ctx(t), &reservation.ReleaseParams{Shop: shop, Token: "cart-1"}); !errors.Is(err, reservation.ErrClaimInProgress) {
		t.Errorf("release after an unknown deduction: %v, want ErrClaimInProgress", err)
	}
	if l, q := b.ledgerAt(t, 1, 1), b.qty(t, 1, 1); l != 10 || q != 7 {
		t.Errorf("ledger %d, quantity %d; want 10 and 7", l, q)
	}
	// The real ledger behind it: the retry claims.
	if res, err := b.s.Claim(ctx(t), &reservation.ClaimParams{Shop: shop, Token: "cart-1"}); err != nil || res.Replayed {
		t.Errorf("retry: %+v %v, want claimed, not replayed", res, err)
	}
	if l, q := b.ledgerAt(t, 1, 1), b.qty(t, 1, 1); l != 7 || q != 7 {
		t.Errorf("after the retry: ledger %d, quantity %d; want 7 and 7", l, q)
	}
}

// e. Several reapers in parallel, over many shops, with carts of several
// lines: every expired hold record is returned once, live holds stay.
func TestParallelReapersReturnEachHoldOnce(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, srv.new)
			const shops, carts = 6, 15
			c := context.Background()
			for sh := int64(1); sh <= shops; sh++ {
				for item := int64(1); item <= 3; item++ {
					n := int64(1000)
					if _, err := b.s.Adjust(c, &reservation.AdjustParams{Shop: sh, Item: item, Location: 1, Available: &n}); err != nil {
						t.Fatal(err)
					}
				}
			}
			var wantRecords, wantUnits int64
			for sh := int64(1); sh <= shops; sh++ {
				for i := range carts {
					lines := []reservation.Line{line(1, 2, 1)}
					if i%3 != 0 {
						lines = append(lines, line(2, 1, 1), line(3, 3, 1))
					}
					ttl := time.Second
					if i%5 == 0 {
						ttl = time.Minute // stays
					} else {
						wantRecords += int64(len(lines))
						for _, l := range lines {
							wantUnits += l.Quantity
						}
					}
					if _, err := b.s.Reserve(c, &reservation.ReserveParams{Shop: sh, Token: fmt.Sprintf("c%d", i), Lines: lines, TTL: ttl}); err != nil {
						t.Fatal(err)
					}
				}
			}
			time.Sleep(1300 * time.Millisecond)
			var records, units atomic.Int64
			var wg sync.WaitGroup
			for r := range 6 {
				wg.Go(func() {
					for {
						res, err := b.s.Reap(c, &reservation.ReapParams{Limit: 2 + r})
						if err != nil {
							t.Errorf("reap: %v", err)
							return
						}
						if res.Holds == 0 {
							return
						}
						records.Add(int64(res.Holds))
						units.Add(res.Units)
					}
				})
			}
			wg.Wait()
			if records.Load() != wantRecords || units.Load() != wantUnits {
				t.Errorf("reapers returned %d records, %d units; want %d and %d, each once", records.Load(), units.Load(), wantRecords, wantUnits)
			}
			if got := b.counter(t, "reservoir_redis_reaped_holds_total"); got != float64(wantRecords) {
				t.Errorf("reaped holds metric = %v, want %d", got, wantRecords)
			}
			if got := b.counter(t, "reservoir_redis_tombstones_written_total", "state", "expired"); got != shops*12 {
				t.Errorf("expired tombstones metric = %v, want %d", got, shops*12)
			}
			for sh := int64(1); sh <= shops; sh++ {
				a, err := b.s.Availability(c, &reservation.AvailabilityParams{Shop: sh, Item: 1})
				// The live carts (i%5 == 0: 3 of 15) hold 2 units of item 1.
				if err != nil || a.At(1) != 1000-3*2 {
					t.Errorf("shop %d item 1 unheld = %+v %v, want %d", sh, a, err, 1000-3*2)
				}
			}
		})
	}
}

// f. Drift finds each kind of corruption of a shop Redis decides, and
// Rewrite from a snapshot and the ledger restores it exactly.
func TestDriftAndRewriteRestoreCorruptedShop(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			c := ctx(t)
			// Claims clean up on their path: no change waits for a relay.
			b := setupWith(t, srv.new, func(c *redisstore.Config) { c.InlineClaimCleanup = true })
			for item := int64(1); item <= 3; item++ {
				b.stock(t, item, 1, 20)
				b.stock(t, item, 2, 20)
			}
			b.reserve(t, "a", time.Minute, line(1, 2, 1), line(2, 1, 2))
			b.reserve(t, "b", time.Minute, line(3, 4, 2, 1))
			b.reserve(t, "c", time.Minute, line(1, 5, 1))
			b.reserve(t, "d", time.Minute, line(2, 3, 1))
			if _, err := b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "c"}); err != nil {
				t.Fatal(err)
			}
			if _, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "d"}); err != nil {
				t.Fatal(err)
			}
			if d := b.drift(t); len(d) != 0 {
				t.Fatalf("drift before the corruption: %v", d)
			}
			snap, err := b.s.Snapshot(c, shop)
			if err != nil {
				t.Fatal(err)
			}
			ledger, err := b.ledger.Stock(c, &reservation.StockParams{Shop: shop})
			if err != nil {
				t.Fatal(err)
			}
			want := quantities(t, b)

			rc := b.r.Client
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(rc.HSet(c, b.key("qty:", 1), "1", 999).Err()) // wrong quantity
			must(rc.HDel(c, b.key("qty:", 2), "2").Err())      // lost quantity
			must(rc.HSet(c, b.key("qty:", 3), "9", 5).Err())   // quantity nobody knows
			must(rc.Del(c, b.key("hold:", "a")).Err())         // lost hold (its index entry stays)
			must(rc.Del(c, b.key("tomb:", "d")).Err())         // lost tombstone
			must(rc.HSet(c, b.key("hold:", "ghost"), "exp", time.Now().Add(time.Hour).UnixMilli(), "auth", "redis", "a:1:1", 4).Err())
			must(rc.ZAdd(c, b.key("expiry", ""), redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "ghost"}).Err()) // hold nobody made
			must(rc.HSet(c, b.key("hold:", "c"), "exp", time.Now().Add(time.Hour).UnixMilli(), "auth", "redis", "a:1:1", 5).Err())
			must(rc.ZAdd(c, b.key("expiry", ""), redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "c"}).Err()) // a claimed hold back

			kinds := map[reservation.DriftKind]bool{}
			for _, d := range b.drift(t) {
				kinds[d.Kind] = true
			}
			for _, k := range []reservation.DriftKind{reservation.DriftQuantity, reservation.DriftMissingQuantity, reservation.DriftExtraQuantity,
				reservation.DriftOrphanIndex, reservation.DriftLeftoverHold} {
				if !kinds[k] {
					t.Errorf("drift of the corrupted shop lacks %s (has %v)", k, kinds)
				}
			}

			if err := b.s.Rewrite(c, snap, ledger, nil); err != nil {
				t.Fatal(err)
			}
			after, err := b.s.Snapshot(c, shop)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(after) != fmt.Sprint(snap) {
				t.Errorf("after the rewrite:\n%+v\nwant\n%+v", after, snap)
			}
			// The quantity nobody knows (item 3 at 9) is in a hash the
			// ledger names, so it went too.
			if got := quantities(t, b); got != want {
				t.Errorf("quantities after the rewrite:\n%s\nwant\n%s", got, want)
			}
			if d := b.drift(t); len(d) != 0 {
				t.Errorf("drift after the rewrite: %v", d)
			}
		})
	}
}

// quantities renders the quantity hashes of items 1..3 as stored.
func quantities(t *testing.T, b bundle) string {
	t.Helper()
	var out []string
	for item := int64(1); item <= 3; item++ {
		m, err := b.r.Client.HGetAll(ctx(t), b.key("qty:", item)).Result()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprint(item, sortedMap(m)))
	}
	return strings.Join(out, "\n")
}

// Where MySQL decides, Redis must hold exactly MySQL's holds: Drift
// reports a hold Redis lacks, one it has in excess, and one it holds
// differently, each with the quantities that follow from MySQL's holds.
// (Needs the MySQL store's shadow reserve and Holds.)
func TestDriftAgainstMySQLHolds(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	c := ctx(t)
	b.stock(t, 1, 1, 20)
	for _, tc := range []struct {
		token string
		lines []reservation.Line
	}{{"same", []reservation.Line{line(1, 2, 1)}}, {"missing", []reservation.Line{line(1, 3, 1)}}, {"differs", []reservation.Line{line(1, 4, 1)}}} {
		p := &reservation.ReserveParams{Shop: shop, Token: tc.token, Lines: tc.lines, TTL: time.Minute, As: reservation.AsShadow}
		if res, err := b.ledger.Reserve(c, p); err != nil || res.Status != reservation.StatusReserved {
			t.Fatalf("mysql shadow reserve %s: %+v %v", tc.token, res, err)
		}
	}
	if _, err := b.s.Yield(c, shop, 1); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Minute)
	held := func(id int64, token string, q int64) reservation.Change {
		return reservation.Change{ID: id, Kind: reservation.ChangeState, Shop: shop, Token: token, State: reservation.StateHeld,
			Allocations: []reservation.Allocation{alloc(1, 1, q)}, ExpiresAt: exp}
	}
	if _, err := b.s.Apply(c, []reservation.Change{held(1, "same", 2), held(2, "differs", 1), held(3, "extra", 7)}); err != nil {
		t.Fatal(err)
	}
	got := map[string]reservation.RedisDrift{}
	for _, d := range b.drift(t) {
		got[string(d.Kind)+":"+d.Token] = d
	}
	for _, want := range []string{"missing_hold:missing", "extra_hold:extra", "hold_mismatch:differs", "quantity:"} {
		if _, ok := got[want]; !ok {
			t.Errorf("drift lacks %s: %v", want, got)
		}
	}
	// Redis holds 2 + 1 + 7 of 20; MySQL's holds leave 20 - 2 - 3 - 4.
	if d := got["quantity:"]; d.Have != 10 || d.Want != 11 {
		t.Errorf("quantity drift %v, want redis 10 where MySQL's holds leave 11", d)
	}
	if len(got) != 4 {
		t.Errorf("drift = %v, want the three hold findings and the quantity", got)
	}
}

// g. Bad input gets the same typed error, naming the same field, from the
// Redis store as from mysqlstore (the shared validation), and writes
// nothing: not one key, not one ledger row. The Redis store's own calls
// name their fields too.
func TestBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	c := context.Background()
	long := strings.Repeat("x", reservation.MaxTokenBytes+1)
	neg, big := int64(-1), int64(2_000_000_000)
	calls := []struct {
		name string
		call func(s reservation.Store) error
	}{
		{"reserve zero quantity", func(s reservation.Store) error {
			_, err := s.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "t", TTL: time.Minute, Lines: []reservation.Line{line(1, 0, 1)}})
			return err
		}},
		{"reserve quantity over the limit", func(s reservation.Store) error {
			_, err := s.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "t", TTL: time.Minute, Lines: []reservation.Line{line(1, poolCap+1, 1)}})
			return err
		}},
		{"reserve repeated location", func(s reservation.Store) error {
			_, err := s.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "t", TTL: time.Minute, Lines: []reservation.Line{line(1, 1, 2, 2)}})
			return err
		}},
		{"reserve token with a space", func(s reservation.Store) error {
			_, err := s.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "a b", TTL: time.Minute, Lines: []reservation.Line{line(1, 1, 1)}})
			return err
		}},
		{"reserve bad authority", func(s reservation.Store) error {
			_, err := s.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "t", TTL: time.Minute, Authority: "memcached", Lines: []reservation.Line{line(1, 1, 1)}})
			return err
		}},
		{"reserve nil", func(s reservation.Store) error { _, err := s.Reserve(c, nil); return err }},
		{"claim long token", func(s reservation.Store) error {
			_, err := s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: long})
			return err
		}},
		{"settle bad deducted", func(s reservation.Store) error {
			_, err := s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "t", As: reservation.AsShadow, Deducted: []reservation.Allocation{{Item: 1, Location: 0, Quantity: 1}}})
			return err
		}},
		{"claim unknown role", func(s reservation.Store) error {
			_, err := s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "t", As: 7})
			return err
		}},
		{"release bad shop", func(s reservation.Store) error {
			_, err := s.Release(c, &reservation.ReleaseParams{Shop: 0, Token: "t"})
			return err
		}},
		{"get empty token", func(s reservation.Store) error {
			_, err := s.Get(c, &reservation.GetParams{Shop: shop})
			return err
		}},
		{"adjust negative available", func(s reservation.Store) error {
			_, err := s.Adjust(c, &reservation.AdjustParams{Shop: shop, Item: 1, Location: 1, Available: &neg})
			return err
		}},
		{"adjust above max stock", func(s reservation.Store) error {
			_, err := s.Adjust(c, &reservation.AdjustParams{Shop: shop, Item: 1, Location: 1, Available: &big})
			return err
		}},
		{"adjust shadow with available", func(s reservation.Store) error {
			one := int64(1)
			_, err := s.Adjust(c, &reservation.AdjustParams{Shop: shop, Item: 1, Location: 1, Available: &one, As: reservation.AsShadow})
			return err
		}},
		{"adjust no change", func(s reservation.Store) error {
			_, err := s.Adjust(c, &reservation.AdjustParams{Shop: shop, Item: 1, Location: 1})
			return err
		}},
		{"availability bad item", func(s reservation.Store) error {
			_, err := s.Availability(c, &reservation.AvailabilityParams{Shop: shop, Item: -4})
			return err
		}},
		{"reap limit", func(s reservation.Store) error {
			_, err := s.Reap(c, &reservation.ReapParams{Limit: -1})
			return err
		}},
	}
	for _, tc := range calls {
		rerr, merr := tc.call(b.s), tc.call(b.ledger)
		var rve, mve *reservation.ValidationError
		if !errors.As(rerr, &rve) || !errors.Is(rerr, reservation.ErrInvalidInput) {
			t.Errorf("%s: redis answered %v, want a *ValidationError", tc.name, rerr)
			continue
		}
		if !errors.As(merr, &mve) || rve.Field != mve.Field {
			t.Errorf("%s: redis names %q, mysql answered %v", tc.name, rve.Field, merr)
		}
	}
	hold := reservation.Hold{Shop: shop, Token: "h", Authority: reservation.AuthorityMySQL, Allocations: []reservation.Allocation{alloc(1, 1, 1)}}
	for _, tc := range []struct {
		name, field string
		err         error
	}{
		{"reserve unknown role", "as", func() error {
			_, err := b.s.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "t", TTL: time.Minute, Lines: []reservation.Line{line(1, 1, 1)}, As: 3})
			return err
		}()},
		{"release unknown role", "as", func() error {
			_, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "t", As: 3})
			return err
		}()},
		{"adjust as shadow", "as", func() error {
			_, err := b.s.Adjust(c, &reservation.AdjustParams{Shop: shop, Item: 1, Location: 1, Delta: 1, As: reservation.AsShadow})
			return err
		}()},
		{"drift shop", "shop", func() error { _, err := b.s.Drift(c, &reservation.DriftParams{}); return err }()},
		{"fence shop", "shop", func() error { _, err := b.s.Fence(c, -1); return err }()},
		{"yield epoch", "epoch", func() error { _, err := b.s.Yield(c, shop, 0); return err }()},
		{"force epoch", "epoch", func() error { _, err := b.s.Force(c, shop, -2); return err }()},
		{"snapshot shop", "shop", func() error { _, err := b.s.Snapshot(c, 0); return err }()},
		{"apply bad state", "changes[1].state", func() error {
			_, err := b.s.Apply(c, []reservation.Change{
				{Kind: reservation.ChangeState, Shop: shop, Token: "x"}, // State "": nothing to apply, valid
				{Kind: reservation.ChangeState, Shop: shop, Token: "t", State: "gone"},
			})
			return err
		}()},
		{"apply adjust without id", "changes[0].id", func() error {
			_, err := b.s.Apply(c, []reservation.Change{{Kind: reservation.ChangeAdjust, Shop: shop, Item: 1, Location: 1, Delta: 1}})
			return err
		}()},
		{"apply bad fence", "changes[0].fence", func() error {
			_, err := b.s.Apply(c, []reservation.Change{{Kind: reservation.ChangeFence, Shop: shop, Fence: reservation.Fence{Decider: "disk", Epoch: 1}}})
			return err
		}()},
		{"apply bad kind", "changes[0].kind", func() error {
			_, err := b.s.Apply(c, []reservation.Change{{Kind: "move", Shop: shop}})
			return err
		}()},
		// The mirror and the rewrite write allocations as they are given: one
		// at location 0 would hold units no reserve can use, and leave a
		// quantity no ledger row matches.
		{"apply allocation at location 0", "changes[0].allocations[0]", func() error {
			_, err := b.s.Apply(c, []reservation.Change{{Kind: reservation.ChangeState, Shop: shop, Token: "t", State: reservation.StateHeld,
				Allocations: []reservation.Allocation{alloc(1, 0, 1)}, ExpiresAt: time.Now().Add(time.Minute)}})
			return err
		}()},
		{"rewrite hold at location 0", "snapshot.holds[0].allocations[0]", func() error {
			at0 := reservation.Hold{Shop: shop, Token: "h", Authority: reservation.AuthorityMySQL, Allocations: []reservation.Allocation{alloc(1, 0, 1)}}
			return b.s.Rewrite(c, reservation.Snapshot{Shop: shop, Fence: reservation.NoFence, Holds: []reservation.Hold{at0}}, nil, nil)
		}()},
		{"rewrite hold twice", "snapshot.holds[1].token", func() error {
			return b.s.Rewrite(c, reservation.Snapshot{Shop: shop, Fence: reservation.NoFence, Holds: []reservation.Hold{hold, hold}}, nil, nil)
		}()},
		{"rewrite held tombstone", "snapshot.tombstones[0].state", func() error {
			return b.s.Rewrite(c, reservation.Snapshot{Shop: shop, Fence: reservation.NoFence, Tombstones: []reservation.Tombstone{{Token: "t", State: reservation.StateHeld}}}, nil, nil)
		}()},
		{"rewrite covered id", "covered[1]", func() error {
			return b.s.Rewrite(c, reservation.Snapshot{Shop: shop, Fence: reservation.NoFence}, nil, []int64{4, 0})
		}()},
		{"rewrite other shop's ledger", "ledger[0].shop", func() error {
			return b.s.Rewrite(c, reservation.Snapshot{Shop: shop, Fence: reservation.NoFence}, []reservation.StockLevel{{Shop: 7, Item: 1, Location: 1}}, nil)
		}()},
	} {
		var ve *reservation.ValidationError
		if !errors.As(tc.err, &ve) || ve.Field != tc.field {
			t.Errorf("%s: %v, want a *ValidationError naming %q", tc.name, tc.err, tc.field)
		}
	}
	// The valid State "" change before the bad one applied nothing, so it
	// registered the shop and wrote nothing else.
	keys := b.r.Keys(t)
	if len(keys) > 1 || (len(keys) == 1 && keys[0] != b.r.Prefix+"shops") {
		t.Errorf("bad calls wrote keys %v", keys)
	}
	if n := b.db.Count(t, "inventory_ledger"); n != 0 {
		t.Errorf("bad calls wrote %d ledger rows", n)
	}
}

// New refuses what cannot work, naming the field, and above all a client
// that would resend a script after a lost reply.
func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	r := testredis.New(t)
	ledger := failingLedger{}
	resending := redis.NewClient(&redis.Options{Addr: testredis.Addr(t)})
	clusterResending := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testredis.ClusterAddrs(t), MaxRetries: -1})
	clusterNodesResending := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testredis.ClusterAddrs(t), MaxRetries: 2, MaxRedirects: -1})
	t.Cleanup(func() { resending.Close(); clusterResending.Close(); clusterNodesResending.Close() })
	for _, tc := range []struct {
		name, want string
		cfg        redisstore.Config
	}{
		{"no client", "Config.Client", redisstore.Config{Ledger: ledger}},
		{"no ledger", "Config.Ledger", redisstore.Config{Client: r.Client}},
		{"client resends", "MaxRetries is 3", redisstore.Config{Client: resending, Ledger: ledger}},
		{"cluster resends", "MaxRedirects is 3", redisstore.Config{Client: clusterResending, Ledger: ledger}},
		{"cluster nodes resend", "MaxRetries is 2", redisstore.Config{Client: clusterNodesResending, Ledger: ledger}},
		{"braces in prefix", "Config.Prefix", redisstore.Config{Client: r.Client, Ledger: ledger, Prefix: "a{b}:"}},
		{"tombstone ttl", "Config.TombstoneTTL", redisstore.Config{Client: r.Client, Ledger: ledger, TombstoneTTL: time.Minute}},
		{"claim grace", "Config.ClaimGrace", redisstore.Config{Client: r.Client, Ledger: ledger, ClaimGrace: -time.Second}},
		{"reap batch", "Config.ReapBatch", redisstore.Config{Client: r.Client, Ledger: ledger, ReapBatch: -1}},
		{"limits", "Config.Limits", redisstore.Config{Client: r.Client, Ledger: ledger, Limits: reservation.Limits{MinTTL: time.Hour, MaxTTL: time.Minute}}},
	} {
		if _, err := redisstore.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
	for _, o := range []*redis.UniversalOptions{
		{Addrs: []string{testredis.Addr(t)}},
		{Addrs: testredis.ClusterAddrs(t)},
	} {
		c := redisstore.NewClient(o)
		t.Cleanup(func() { c.Close() })
		if _, err := redisstore.New(redisstore.Config{Client: c, Ledger: ledger, Registerer: prometheus.NewRegistry()}); err != nil {
			t.Errorf("New with NewClient(%v): %v", o.Addrs, err)
		}
	}
	// Defaults: a private registry each, so two stores never collide.
	for range 2 {
		if _, err := redisstore.New(redisstore.Config{Client: r.Client, Ledger: ledger}); err != nil {
			t.Errorf("New with defaults: %v", err)
		}
	}
}

// Without a Source, Drift says what is missing; every store operation
// still works.
func TestDriftNeedsASource(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	s, _ := b.store(t, func(c *redisstore.Config) { c.Source = nil })
	if _, err := s.Drift(ctx(t), &reservation.DriftParams{Shop: shop}); !errors.Is(err, redisstore.ErrNoSource) {
		t.Errorf("drift: %v, want ErrNoSource", err)
	}
}

// The reaper's two steps around the ledger (issue 17's race inside
// background work): it finds a due hold claiming for longer than the
// grace, asks the ledger whether that claim happened, and settles with the
// stamp it asked about. If a retried claim stamps the hold again in
// between (and goes on to deduct), the settle must leave the hold: the
// stamp it carries is no longer the hold's. Expired instead, the hold's
// units would be back for sale while the retried claim deducts the ledger.
func TestReapLeavesAHoldAClaimStampedAgainMeanwhile(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	b.stock(t, 1, 1, 10)
	b.reserve(t, "cart-1", time.Minute, line(1, 3, 1))
	// A claim began a minute ago and never finished; the hold is due.
	b.age(t, "cart-1", time.Minute, time.Minute)
	restamped := 0
	restamp := func() {
		// What a retried claim's first step does: a fresh stamp.
		now, err := b.r.Client.Time(ctx(t)).Result()
		if err != nil {
			t.Error(err)
			return
		}
		if err := b.r.Client.HSet(ctx(t), b.key("hold:", "cart-1"), "claiming", now.UnixMilli()).Err(); err != nil {
			t.Error(err)
		}
		restamped++
	}
	reaper, _ := b.store(t, func(c *redisstore.Config) { c.Source = restampingSource{Source: b.ledger, between: restamp} })
	r, err := reaper.Reap(ctx(t), &reservation.ReapParams{})
	if err != nil {
		t.Fatal(err)
	}
	if restamped != 1 {
		t.Fatalf("the reaper asked the ledger %d times; want once, so that the window under test opened", restamped)
	}
	if r.Holds != 0 {
		t.Errorf("reap expired %d hold(s); a claim stamped the hold after the ledger was asked, so none may go", r.Holds)
	}
	if _, err := b.s.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "cart-1"}); err != nil {
		t.Errorf("the hold a retried claim holds: %v, want it still there", err)
	}
	if q := b.qty(t, 1, 1); q != 7 {
		t.Errorf("quantity = %d after the reap, want 7: the claimed units must not be for sale again", q)
	}
}

// restampingSource is the ledger, with between run after it answered
// which claims it has: the window between the reaper's look at the ledger
// and its settle.
type restampingSource struct {
	redisstore.Source
	between func()
}

func (s restampingSource) Claims(ctx context.Context, shop int64, tokens []string) (map[string][]reservation.Allocation, error) {
	claims, err := s.Source.Claims(ctx, shop, tokens)
	s.between()
	return claims, err
}
