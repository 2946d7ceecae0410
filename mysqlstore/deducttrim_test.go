package mysqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// A legacy claim (Deduct) trims the pool by what it takes beyond this
// store's own hold of the token, no more: units a shadow hold already took
// out of the pool are not taken again, so in `redis` mode a payment does
// not empty the shadow pool and make the next buyer pay for a refill
// (the ledger's hot row). A deduction this store held nothing for takes
// its whole quantity from the pool, so pool + held stays within the
// ledger.
func TestDeductTrimsThePoolByWhatTheHoldDidNotCover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, 100)
	b.stockShop(t, redisShop, 1, 1, 5)
	b.stockShop(t, redisShop, 1, 2, 5)
	shadow := func(token string, loc, q int64) {
		t.Helper()
		res, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: redisShop, Token: token, TTL: time.Minute,
			Lines: []reservation.Line{{Item: 1, Quantity: q, Locations: []int64{loc}}}, Authority: reservation.AuthorityRedis, As: reservation.AsShadow})
		if err != nil || res.Status != reservation.StatusReserved {
			t.Fatalf("shadow reserve %s: %+v %v", token, res, err)
		}
	}
	pool := func(loc int64) int64 {
		t.Helper()
		var n int64
		if err := b.db.QueryRow("SELECT COUNT(*) FROM available_units WHERE shop_id = ? AND inventory_item_id = 1 AND location_id = ?", redisShop, loc).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	shadow("cart", 1, 2)  // location 1: held 2, pool 3
	shadow("other", 2, 1) // location 2: held 1, pool 4
	if p1, p2 := pool(1), pool(2); p1 != 3 || p2 != 4 {
		t.Fatalf("pools %d and %d before the deductions, want 3 and 4", p1, p2)
	}
	for token, loc := range map[string]int64{"cart": 1, "unshadowed": 2} {
		if d, err := b.s.Deduct(ctx, &reservation.DeductParams{Shop: redisShop, Token: token,
			Allocations: []reservation.Allocation{{Item: 1, Location: loc, Quantity: 2}}}); err != nil || !d.Applied {
			t.Fatalf("deduct %s: %+v %v", token, d, err)
		}
	}
	// Location 1: ledger 3, held 0, pool 3 (the hold covered the claim).
	// Location 2: ledger 3, held 1, pool 2 (the claim came from the pool).
	if p1, p2 := pool(1), pool(2); p1 != 3 || p2 != 2 {
		t.Errorf("pools %d and %d after the deductions, want 3 (untouched) and 2 (trimmed by 2)", p1, p2)
	}
	if d := b.drift(t); len(d) != 0 {
		t.Errorf("drift after the deductions: %v", d)
	}
	refills := metricSum(t, b, "reservoir_mysql_replenish_total")
	shadow("next", 1, 3)
	if n := metricSum(t, b, "reservoir_mysql_replenish_total"); n != refills {
		t.Errorf("the next reserve of location 1's stock ran %v replenishes, want none: the pool had its units", n-refills)
	}
}
