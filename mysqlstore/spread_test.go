package mysqlstore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// Reserves of a pool whose top the store has learnt start their scan at a
// random unit among the pool's newest ids, not at its head: the head is
// where the units other reservers hold and the delete-marked rows of the
// units taken since the last purge pile up, which every head scan walks
// over, so a busy pool got slower the busier it was (see takeUnits). What
// the table holds shows it: a head scan always takes the pool's lowest
// unit. The twin with Config.ScanFromHead checks that the count notices a
// head scan.
func TestReservesSpreadOverThePool(t *testing.T) {
	t.Parallel()
	const reserves = 20
	fromHead := func(t *testing.T, cfg mysqlstore.Config) int {
		t.Helper()
		ctx := context.Background()
		cfg.PoolCap = 100
		b := setupWith(t, cfg)
		b.stock(t, 1, 1, 200)
		pool := func() []int64 {
			t.Helper()
			rows, err := b.db.Query("SELECT unit_id FROM available_units WHERE shop_id = ? AND inventory_item_id = 1 AND location_id = 1 ORDER BY unit_id", shop)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var ids []int64
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return ids
		}
		reserve := func(token string) {
			t.Helper()
			if res, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: token, Lines: one(1, 1), TTL: time.Minute}); err != nil || res.Status != reservation.StatusReserved {
				t.Fatalf("reserve %s: %+v %v", token, res, err)
			}
		}
		reserve("warm") // fills the pool and learns its top
		head := 0
		for i := range reserves {
			before := pool()
			reserve(fmt.Sprint("t", i))
			after := pool()
			if len(before) < 2 || len(after) != len(before)-1 {
				t.Fatalf("reserve %d: pool of %d units, then %d; want one taken from a pool of several (no refill)", i, len(before), len(after))
			}
			if !slices.Contains(after, before[0]) {
				head++
			}
		}
		return head
	}
	t.Run("Spread", func(t *testing.T) {
		t.Parallel()
		// Each reserve takes the lowest unit with a chance of about
		// (units taken before)/100: a handful of the 20 at most.
		if n := fromHead(t, mysqlstore.Config{}); n >= reserves/2 {
			t.Errorf("%d of %d reserves took the pool's lowest unit: the scans start at the head", n, reserves)
		}
	})
	t.Run("ScanFromHead", func(t *testing.T) {
		t.Parallel()
		if n := fromHead(t, mysqlstore.Config{ScanFromHead: true}); n != reserves {
			t.Errorf("with ScanFromHead, %d of %d reserves took the pool's lowest unit, want all", n, reserves)
		}
	})
}

// A scan that starts inside the pool and finds fewer units above its
// start than the line needs goes round to the head for the rest, and takes
// only the rest: a reserve removes from the pool exactly the units it
// holds. Units taken beyond that would vanish (deleted, held by no one)
// and the pool drain faster than it sells.
//
// A scan starts among the newest PoolCap unit ids. To make it wrap with
// units to spare below its start, the pool holds more units than the
// reserving store's PoolCap (filled by a replica with a larger cap, or
// before the cap was lowered): per item, ids 12..30 once the first two
// reserves took theirs, and a scan of 10 starting in 22..30 finds 1 to 9
// there; only a start at 21 (one in ten) finds all 10 without wrapping,
// so six items make a wrap all but certain.
func TestAWrappedScanTakesOnlyWhatTheLineNeeds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	big := setup(t, 30)
	small, err := mysqlstore.New(mysqlstore.Config{DB: big.db.DB, PoolCap: 10, Limits: reservation.Limits{MaxQuantity: 10}})
	if err != nil {
		t.Fatal(err)
	}
	for item := int64(1); item <= 6; item++ {
		big.stock(t, item, 1, 1000)
		pool := func() int64 {
			t.Helper()
			var n int64
			if err := big.db.QueryRow("SELECT COUNT(*) FROM available_units WHERE shop_id = ? AND inventory_item_id = ? AND location_id = 1", shop, item).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		reserve := func(s *mysqlstore.Store, token string, q int64) {
			t.Helper()
			before := pool()
			res, err := s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: fmt.Sprint(token, item), TTL: time.Minute,
				Lines: []reservation.Line{{Item: item, Quantity: q, Locations: []int64{1}}}})
			if err != nil || res.Status != reservation.StatusReserved {
				t.Fatalf("item %d: reserve %s: %+v %v", item, token, res, err)
			}
			if after := pool(); before != 0 && before-after != q {
				t.Errorf("item %d: reserve %s of %d units: the pool went from %d to %d units", item, token, q, before, after)
			}
		}
		reserve(big.s, "fill", 1) // refills the pool to 30 units, takes one
		if n := pool(); n != 29 {
			t.Fatalf("item %d: pool of %d units after the first reserve, want 29", item, n)
		}
		reserve(small, "learn", 10) // small learns the pool's top: a head scan
		reserve(small, "wrap", 10)  // starts in 21..30
		if l := big.ledger(t, item, 1); l != 1000 {
			t.Errorf("item %d: ledger %d, want 1000", item, l)
		}
	}
}
