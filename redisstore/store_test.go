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
	"github.com/seed31b0e981/reservoir/mysqlstore"
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
			if d := b.drift(t, reservation.AuthorityRedis); len(d) != 0 {
				t.Errorf("drift after the rush: %v", d)
			}
		})
	}
}

// d. A legacy claim fails between the ledger deduction and the Redis
// cleanup: the ledger is deducted once, the failure is counted, the
// leftover hold is reported as drift, and a retry, a resync or (after the
// hold expired and was reaped) a retry repairs it.
func TestLegacyClaimFailureAfterDeduct(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	failing := func(t *testing.T, ttl time.Duration) bundle {
		t.Helper()
		b := setup(t, testredis.New)
		b.stock(t, 1, 1, 10)
		b.reserve(t, "other", time.Minute, line(1, 2, 1))
		b.reserve(t, "cart-1", ttl, line(1, 3, 1))
		redisstore.SetAfterDeduct(b.s, func() error { return errInjected })
		_, err := b.s.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "cart-1"})
		var pe *redisstore.PartialClaimError
		if !errors.As(err, &pe) || !errors.Is(err, errInjected) || fmt.Sprint(pe.Deducted) != "[{1 1 3}]" {
			t.Fatalf("claim with the cleanup failing: %v, want a PartialClaimError for [{1 1 3}]", err)
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
		return b
	}
	wantLeftover := func(t *testing.T, b bundle) {
		t.Helper()
		d := b.drift(t, reservation.AuthorityRedis)
		if len(d) != 1 || d[0].Kind != redisstore.DriftLeftoverHold || d[0].Token != "cart-1" || fmt.Sprint(d[0].Allocations) != "[{1 1 3}]" {
			t.Fatalf("drift = %v, want exactly the leftover hold of cart-1", d)
		}
	}
	wantRepaired := func(t *testing.T, b bundle) {
		t.Helper()
		if d := b.drift(t, reservation.AuthorityRedis); len(d) != 0 {
			t.Errorf("drift after the repair: %v", d)
		}
		if l, q := b.ledgerAt(t, 1, 1), b.qty(t, 1, 1); l != 7 || q != 5 {
			t.Errorf("ledger %d, quantity %d; want 7 and 5 (7 minus the other hold's 2)", l, q)
		}
		if _, err := b.s.Get(ctx, &reservation.GetParams{Shop: shop, Token: "cart-1"}); !errors.Is(err, reservation.ErrNotFound) {
			t.Errorf("get cart-1 after the repair: %v, want ErrNotFound", err)
		}
		if _, err := b.s.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: "cart-1"}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
			t.Errorf("release cart-1 after the repair: %v, want ErrAlreadyClaimed", err)
		}
		res, err := b.s.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "cart-1"})
		if err != nil || !res.Replayed || fmt.Sprint(res.Allocations) != "[{1 1 3}]" {
			t.Errorf("claim again: %+v %v, want replayed [{1 1 3}]", res, err)
		}
		if _, err := b.s.Get(ctx, &reservation.GetParams{Shop: shop, Token: "other"}); err != nil {
			t.Errorf("the other hold must survive: %v", err)
		}
		if l := b.ledgerAt(t, 1, 1); l != 7 {
			t.Errorf("ledger = %d at the end, want 7: deducted once", l)
		}
	}

	t.Run("RetryCompletes", func(t *testing.T) {
		t.Parallel()
		b := failing(t, time.Minute)
		wantLeftover(t, b)
		res, err := b.s.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "cart-1"})
		if err != nil || res.Outcome != reservation.OutcomeClaimed || !res.Replayed {
			t.Fatalf("retried claim: %+v %v, want claimed, replayed (the ledger answered Applied false)", res, err)
		}
		wantRepaired(t, b)
	})

	t.Run("ResyncRepairs", func(t *testing.T) {
		t.Parallel()
		b := failing(t, time.Minute)
		wantLeftover(t, b)
		res, err := b.s.Resync(ctx, &redisstore.ResyncParams{Shops: []int64{shop}, HoldsFrom: reservation.AuthorityRedis})
		if err != nil || res.Shops != 1 || res.Holds != 1 || res.Dropped != 1 {
			t.Fatalf("resync: %+v %v, want 1 shop, 1 hold kept, 1 dropped", res, err)
		}
		wantRepaired(t, b)
	})

	// Left alone, the leftover hold expires. The reaper asks the ledger
	// (Config.Source) before giving units back: cart-1 was deducted, so it
	// settles the hold as claimed instead of offering 3 units the ledger no
	// longer has. Without that check (the protection removed, below) Redis
	// would offer 8 where 5 is right.
	t.Run("ReapSettlesTheClaim", func(t *testing.T) {
		t.Parallel()
		b := failing(t, time.Second)
		time.Sleep(1300 * time.Millisecond)
		if r, err := b.s.Reap(ctx, &reservation.ReapParams{}); err != nil || r.Holds != 0 || r.Units != 0 {
			t.Fatalf("reap: %+v %v, want nothing given back", r, err)
		}
		if n := b.counter(t, "reservoir_redis_reap_settled_total"); n != 1 {
			t.Errorf("reap_settled = %v, want 1", n)
		}
		wantRepaired(t, b)
	})

	// A store without a Source cannot ask the ledger: the reaper gives the
	// units back, Redis oversells by 3 (Drift shows it), and only the
	// retried claim takes them out again.
	t.Run("ReapedWithoutSourceThenRetried", func(t *testing.T) {
		t.Parallel()
		b := failing(t, time.Second)
		blind, err := redisstore.New(redisstore.Config{Client: b.r.Client, Ledger: b.ledger, Prefix: b.r.Prefix, Registerer: prometheus.NewRegistry(), Limits: limits()})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1300 * time.Millisecond)
		if r, err := blind.Reap(ctx, &reservation.ReapParams{}); err != nil || r.Holds != 1 || r.Units != 3 {
			t.Fatalf("reap: %+v %v, want the leftover hold of 3", r, err)
		}
		d := b.drift(t, reservation.AuthorityRedis)
		if len(d) != 1 || d[0].Kind != redisstore.DriftQuantity || d[0].Have != 8 || d[0].Want != 5 {
			t.Fatalf("drift after the reap = %v, want quantity 8 where 5 is right", d)
		}
		res, err := b.s.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "cart-1"})
		if err != nil || !res.Replayed {
			t.Fatalf("retried claim after the reap: %+v %v, want claimed, replayed", res, err)
		}
		if n := b.counter(t, "reservoir_redis_legacy_claim_failures_total", "window", "hold_gone_before_cleanup"); n != 1 {
			t.Errorf("hold_gone_before_cleanup = %v, want 1", n)
		}
		wantRepaired(t, b)
	})

	// The ledger cannot be read when the hold is due: nothing is given
	// back (an unchecked give-back could be the oversell above) and Reap
	// says why; the next pass, with the ledger back, settles it.
	t.Run("ReapWaitsForTheLedger", func(t *testing.T) {
		t.Parallel()
		b := failing(t, time.Second)
		cut, err := redisstore.New(redisstore.Config{Client: b.r.Client, Ledger: b.ledger, Source: failingSource{}, Prefix: b.r.Prefix, Registerer: prometheus.NewRegistry(), Limits: limits()})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1300 * time.Millisecond)
		r, err := cut.Reap(ctx, &reservation.ReapParams{})
		if err == nil || !strings.Contains(err.Error(), "no hold was given back") || r.Holds != 0 {
			t.Fatalf("reap with the ledger unreadable: %+v %v, want an error and nothing given back", r, err)
		}
		if q := b.qty(t, 1, 1); q != 5 {
			t.Fatalf("quantity = %d after the refused reap, want 5 (the hold kept)", q)
		}
		if r, err := b.s.Reap(ctx, &reservation.ReapParams{}); err != nil || r.Holds != 0 {
			t.Fatalf("reap with the ledger back: %+v %v", r, err)
		}
		wantRepaired(t, b)
	})
}

// failingSource is a ledger whose claims cannot be read.
type failingSource struct{}

func (failingSource) Holds(context.Context, int64) ([]reservation.Hold, error) {
	return nil, errors.New("ledger connection refused")
}

func (failingSource) Claims(context.Context, int64, []string) (map[string][]reservation.Allocation, error) {
	return nil, errors.New("ledger connection refused")
}

func (failingSource) ClaimsSince(context.Context, int64, time.Time, time.Duration, int) ([]reservation.Claimed, error) {
	return nil, errors.New("ledger connection refused")
}

// The ledger's own failure: Deduct errors with something other than a
// refusal (here: a reset connection), so whether it committed is unknown.
// The hold stays, the window is counted, and the error says to retry.
func TestLegacyClaimDeductError(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	b.stock(t, 1, 1, 10)
	b.reserve(t, "cart-1", time.Minute, line(1, 3, 1))
	reg := prometheus.NewRegistry()
	s, err := redisstore.New(redisstore.Config{Client: b.r.Client, Ledger: failingLedger{b.ledger}, Prefix: b.r.Prefix, Registerer: reg, Limits: limits()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Claim(context.Background(), &reservation.ClaimParams{Shop: shop, Token: "cart-1"})
	if err == nil || !strings.Contains(err.Error(), "retry the claim") {
		t.Fatalf("claim with the ledger failing: %v, want the deduct error", err)
	}
	if n := (bundle{reg: reg}).counter(t, "reservoir_redis_legacy_claim_failures_total", "window", "deduct_error"); n != 1 {
		t.Errorf("deduct_error failures = %v, want 1", n)
	}
	if _, err := b.s.Get(context.Background(), &reservation.GetParams{Shop: shop, Token: "cart-1"}); err != nil {
		t.Errorf("the hold must stay: %v", err)
	}
	if l, q := b.ledgerAt(t, 1, 1), b.qty(t, 1, 1); l != 10 || q != 7 {
		t.Errorf("ledger %d, quantity %d; want 10 and 7", l, q)
	}
	// The real ledger behind it: the retry claims.
	if res, err := b.s.Claim(context.Background(), &reservation.ClaimParams{Shop: shop, Token: "cart-1"}); err != nil || res.Replayed {
		t.Errorf("retry: %+v %v, want claimed, not replayed", res, err)
	}
}

type failingLedger struct{ *mysqlstore.Store }

func (failingLedger) Deduct(context.Context, *reservation.DeductParams) (reservation.DeductResult, error) {
	return reservation.DeductResult{}, errors.New("ledger connection reset")
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

// f. Resync restores a deliberately corrupted shop, quantities and holds,
// from the ledger and MySQL's holds (MySQL the authority), or from the
// ledger and Redis's own holds (Redis the authority).
func TestResyncRestoresCorruptedShop(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			c := context.Background()
			b := setup(t, srv.new)
			for item := int64(1); item <= 3; item++ {
				b.stock(t, item, 1, 20)
				b.stock(t, item, 2, 20)
			}
			// Dual-written carts: MySQL (the authority) and Redis (the
			// shadow) hold the same lines.
			carts := map[string][]reservation.Line{
				"a": {line(1, 2, 1), line(2, 1, 2)},
				"b": {line(3, 4, 2, 1)},
				"c": {line(1, 5, 1)},
				"d": {line(2, 3, 1)},
			}
			for token, lines := range carts {
				p := &reservation.ReserveParams{Shop: shop, Token: token, Lines: lines, TTL: time.Minute, Authority: reservation.AuthorityMySQL}
				for _, s := range []reservation.Store{b.ledger, b.s} {
					if res, err := s.Reserve(c, p); err != nil || res.Status != reservation.StatusReserved {
						t.Fatalf("%s reserve %s: %+v %v", s.Name(), token, res, err)
					}
				}
			}
			// MySQL claims c; Redis settles it as the shadow.
			cl, err := b.ledger.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "c"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "c", As: reservation.AsShadow, Deducted: cl.Allocations}); err != nil {
				t.Fatal(err)
			}
			if d := b.drift(t, reservation.AuthorityMySQL); len(d) != 0 {
				t.Fatalf("drift before the corruption: %v", d)
			}
			want := availability(t, b)

			// Corrupt the shop.
			rc := b.r.Client
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(rc.HSet(c, b.key("qty:", 1), "1", 999).Err())      // wrong quantity
			must(rc.HDel(c, b.key("qty:", 2), "2").Err())           // lost quantity
			must(rc.HSet(c, b.key("qty:", 3), "9", 5).Err())        // quantity nobody knows
			must(rc.Del(c, b.key("hold:", "a")).Err())              // lost hold (its index entry stays)
			must(rc.HSet(c, b.key("hold:", "b"), "a:3:2", 1).Err()) // hold changed
			must(rc.HSet(c, b.key("hold:", "ghost"), "exp", time.Now().Add(time.Hour).UnixMilli(), "auth", "redis", "a:1:1", 4).Err())
			must(rc.ZAdd(c, b.key("expiry", ""), redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "ghost"}).Err()) // hold nobody made
			must(rc.HSet(c, b.key("hold:", "c"), "exp", time.Now().Add(time.Hour).UnixMilli(), "auth", "mysql", "a:1:1", 5).Err())
			must(rc.ZAdd(c, b.key("expiry", ""), redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "c"}).Err()) // a claimed hold back

			kinds := map[redisstore.DriftKind]bool{}
			for _, d := range b.drift(t, reservation.AuthorityMySQL) {
				kinds[d.Kind] = true
			}
			for _, k := range []redisstore.DriftKind{redisstore.DriftQuantity, redisstore.DriftMissingQuantity, redisstore.DriftExtraQuantity,
				redisstore.DriftOrphanIndex, redisstore.DriftMissingHold, redisstore.DriftHoldMismatch, redisstore.DriftExtraHold, redisstore.DriftLeftoverHold} {
				if !kinds[k] {
					t.Errorf("drift of the corrupted shop lacks %s (has %v)", k, kinds)
				}
			}

			res, err := b.s.Resync(c, &redisstore.ResyncParams{Shops: []int64{shop}, HoldsFrom: reservation.AuthorityMySQL})
			if err != nil || res.Shops != 1 || res.Holds != 3 {
				t.Fatalf("resync: %+v %v, want 1 shop with 3 holds (a, b, d)", res, err)
			}
			if d := b.drift(t, reservation.AuthorityMySQL); len(d) != 0 {
				t.Errorf("drift after resync: %v", d)
			}
			if got := availability(t, b); got != want {
				t.Errorf("availability after resync:\n%s\nwant\n%s", got, want)
			}
			for token := range carts {
				mh, err1 := b.ledger.Get(c, &reservation.GetParams{Shop: shop, Token: token})
				rh, err2 := b.s.Get(c, &reservation.GetParams{Shop: shop, Token: token})
				if errors.Is(err1, reservation.ErrNotFound) && errors.Is(err2, reservation.ErrNotFound) {
					continue // c, claimed
				}
				if err1 != nil || err2 != nil || fmt.Sprint(mh.Allocations) != fmt.Sprint(rh.Allocations) ||
					!mh.ExpiresAt.Equal(rh.ExpiresAt) || rh.Authority != reservation.AuthorityMySQL {
					t.Errorf("hold %s: mysql %+v %v, redis %+v %v", token, mh, err1, rh, err2)
				}
			}
			if _, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "c"}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
				t.Errorf("release of the claimed token after resync: %v, want ErrAlreadyClaimed", err)
			}

			// Redis the authority: quantities corrupted again, holds kept.
			must(rc.HSet(c, b.key("qty:", 1), "1", -7, "2", 0).Err())
			if d := b.drift(t, reservation.AuthorityRedis); len(d) != 2 {
				t.Errorf("drift of two wrong quantities: %v", d)
			}
			if res, err := b.s.Resync(c, &redisstore.ResyncParams{Shops: []int64{shop}, HoldsFrom: reservation.AuthorityRedis}); err != nil || res.Holds != 3 || res.Dropped != 0 {
				t.Fatalf("resync from redis: %+v %v, want 3 holds kept", res, err)
			}
			if got := availability(t, b); got != want {
				t.Errorf("availability after the second resync:\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// availability renders the shop's availability of items 1..3.
func availability(t *testing.T, b bundle) string {
	t.Helper()
	var lines []string
	for item := int64(1); item <= 3; item++ {
		a, err := b.s.Availability(ctx(t), &reservation.AvailabilityParams{Shop: shop, Item: item})
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, fmt.Sprint(item, a.Locations))
	}
	return strings.Join(lines, "\n")
}

// g. Bad input gets the same typed error, naming the same field, from the
// Redis store as from mysqlstore (the shared validation), and writes
// nothing: not one key, not one ledger row.
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
	for _, tc := range []struct {
		name, field string
		err         error
	}{
		{"drift shop", "shop", func() error {
			_, err := b.s.Drift(c, &redisstore.DriftParams{HoldsFrom: reservation.AuthorityRedis})
			return err
		}()},
		{"drift holds from", "holds_from", func() error { _, err := b.s.Drift(c, &redisstore.DriftParams{Shop: shop}); return err }()},
		{"resync no shops", "shops", func() error {
			_, err := b.s.Resync(c, &redisstore.ResyncParams{HoldsFrom: reservation.AuthorityRedis})
			return err
		}()},
		{"resync bad shop", "shops[1]", func() error {
			_, err := b.s.Resync(c, &redisstore.ResyncParams{Shops: []int64{1, -2}, HoldsFrom: reservation.AuthorityRedis})
			return err
		}()},
		{"resync holds from", "holds_from", func() error {
			_, err := b.s.Resync(c, &redisstore.ResyncParams{Shops: []int64{1}, HoldsFrom: "disk"})
			return err
		}()},
	} {
		var ve *reservation.ValidationError
		if !errors.As(tc.err, &ve) || ve.Field != tc.field {
			t.Errorf("%s: %v, want a *ValidationError naming %q", tc.name, tc.err, tc.field)
		}
	}
	if keys := b.r.Keys(t); len(keys) != 0 {
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
		{"claimed ttl", "Config.ClaimedTTL", redisstore.Config{Client: r.Client, Ledger: ledger, ClaimedTTL: time.Minute}},
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

// Without a Source, Drift and Resync say what is missing; every store
// operation still works.
func TestDriftAndResyncNeedASource(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	s, err := redisstore.New(redisstore.Config{Client: b.r.Client, Ledger: b.ledger, Prefix: b.r.Prefix, Limits: limits()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Drift(ctx(t), &redisstore.DriftParams{Shop: shop, HoldsFrom: reservation.AuthorityRedis}); !errors.Is(err, redisstore.ErrNoSource) {
		t.Errorf("drift: %v, want ErrNoSource", err)
	}
	if _, err := s.Resync(ctx(t), &redisstore.ResyncParams{Shops: []int64{shop}, HoldsFrom: reservation.AuthorityRedis}); !errors.Is(err, redisstore.ErrNoSource) {
		t.Errorf("resync: %v, want ErrNoSource", err)
	}
}

// The shadow's view: settling a hold follows the authority's deduction; a
// settle of a token Redis never held still follows it (the ledger went down
// all the same) and answers ErrNotFound; a repeat answers Replayed.
func TestSettleFollowsTheDeduction(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	c := context.Background()
	b.stock(t, 1, 1, 10)
	deducted := []reservation.Allocation{{Item: 1, Location: 1, Quantity: 2}}
	if _, err := b.ledger.Deduct(c, &reservation.DeductParams{Shop: shop, Token: "missed", Allocations: deducted}); err != nil {
		t.Fatal(err)
	}
	settle := func() (reservation.ClaimResult, error) {
		return b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "missed", As: reservation.AsShadow, Deducted: deducted})
	}
	if _, err := settle(); !errors.Is(err, reservation.ErrNotFound) {
		t.Fatalf("settle of a token Redis never held: %v, want ErrNotFound", err)
	}
	if q := b.qty(t, 1, 1); q != 8 {
		t.Errorf("quantity = %d, want 8: it follows the ledger", q)
	}
	res, err := settle()
	if err != nil || !res.Replayed || res.Outcome != reservation.OutcomeSettled {
		t.Errorf("repeated settle: %+v %v, want settled, replayed", res, err)
	}
	if q := b.qty(t, 1, 1); q != 8 {
		t.Errorf("quantity = %d after a repeated settle, want 8", q)
	}
	if d := b.drift(t, reservation.AuthorityRedis); len(d) != 0 {
		t.Errorf("drift: %v", d)
	}
}
