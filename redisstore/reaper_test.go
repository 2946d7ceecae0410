package redisstore_test

import (
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/reservation"
)

// The reaper's peek reads each shop's fence and skips a shop MySQL
// decides before listing its holds or running the reap script on them.
// The cell runs the Redis reaper on every replica at every tick, in every
// mode, and while MySQL decides, Redis's copies of MySQL's holds fall due
// before the tombstones of MySQL's own reaper arrive: without the skip,
// every pass would list and script each such shop for nothing. Once Redis
// decides again, the same hold is reaped by one script.
func TestReaperRunsNoScriptOnAShopMySQLDecides(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	b.stock(t, 1, 1, 10)
	b.reserve(t, "cart-1", time.Minute, line(1, 3, 1))
	b.age(t, "cart-1", time.Second, -1)
	if _, err := b.s.Yield(ctx(t), shop, 1); err != nil {
		t.Fatal(err)
	}
	r, err := b.s.Reap(ctx(t), &reservation.ReapParams{})
	if err != nil || r.Holds != 0 || r.Units != 0 {
		t.Fatalf("reap while MySQL decides: %+v %v, want nothing", r, err)
	}
	if n := b.scriptRuns(t, "reap"); n != 0 {
		t.Errorf("the reaper ran the reap script %d time(s) on a shop MySQL decides; its peek must skip the shop", n)
	}
	if n := b.r.Client.Exists(ctx(t), b.key("hold:", "cart-1")).Val(); n != 1 || b.qty(t, 1, 1) != 7 {
		t.Errorf("the hold of a shop MySQL decides was touched (exists %d, quantity %d; want 1 and 7)", n, b.qty(t, 1, 1))
	}

	// The kill switch: Redis decides again, and reaps the hold.
	if _, err := b.s.Force(ctx(t), shop, 2); err != nil {
		t.Fatal(err)
	}
	r, err = b.s.Reap(ctx(t), &reservation.ReapParams{})
	if err != nil || r.Holds != 1 || r.Units != 3 {
		t.Fatalf("reap once Redis decides: %+v %v, want the hold of 3", r, err)
	}
	if n := b.scriptRuns(t, "reap"); n != 1 {
		t.Errorf("reap scripts = %d once Redis decides, want 1", n)
	}
	if q := b.qty(t, 1, 1); q != 10 {
		t.Errorf("quantity = %d after the reap, want 10", q)
	}
}

// ReapParams.Limit caps the hold records one Reap returns, counting those
// expired on both sides of the ledger's answer: a claiming hold past the
// grace whose claim the ledger never recorded is expired by a second
// script, which may take only what the first left of the limit. (A script
// always takes the first hold it reaches, so that a large cart cannot
// block the reaper; the holds after it must fit.) The cell reaps in rounds
// of bounded calls; what one call leaves, the next expires.
func TestReapLimitSpansTheLedgerRound(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	b.stock(t, 1, 1, 10)
	b.stock(t, 2, 1, 10)
	b.reserve(t, "a", time.Minute, line(1, 1, 1))                // 1 record
	b.reserve(t, "b", time.Minute, line(1, 2, 1), line(2, 1, 1)) // 2 records
	b.reserve(t, "c", time.Minute, line(2, 3, 1))                // 1 record
	// Due in this order; b and c began claims a minute ago that the
	// ledger never recorded, so the reaper asks it and then expires them.
	b.age(t, "a", 3*time.Minute, -1)
	b.age(t, "b", 2*time.Minute, time.Minute)
	b.age(t, "c", time.Minute, time.Minute)

	r, err := b.s.Reap(ctx(t), &reservation.ReapParams{Limit: 3})
	if err != nil || r.Holds != 3 || r.Units != 4 {
		t.Fatalf("reap with limit 3: %+v %v, want 3 records (a, then b after the ledger) and 4 units", r, err)
	}
	if _, err := b.s.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "c"}); err != nil {
		t.Errorf("c is beyond the limit and must still be held: %v", err)
	}
	if q1, q2 := b.qty(t, 1, 1), b.qty(t, 2, 1); q1 != 10 || q2 != 7 {
		t.Errorf("quantities %d and %d, want 10 and 7 (c still holds 3)", q1, q2)
	}
	r, err = b.s.Reap(ctx(t), &reservation.ReapParams{Limit: 3})
	if err != nil || r.Holds != 1 || r.Units != 3 {
		t.Fatalf("the next reap: %+v %v, want c's record of 3 units", r, err)
	}
	if q := b.qty(t, 2, 1); q != 10 {
		t.Errorf("quantity = %d after c expired, want 10", q)
	}
	if n := b.counter(t, "reservoir_redis_reaped_holds_total"); n != 4 {
		t.Errorf("reaped holds metric = %v, want 4", n)
	}
}
