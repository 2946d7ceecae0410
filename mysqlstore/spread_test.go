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
