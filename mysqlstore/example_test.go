package mysqlstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// Reserve a cart, then claim it when payment succeeds: the hold goes away
// and the ledger is deducted, once, in one transaction.
func Example() {
	ctx := context.Background()
	db, cleanup := testdb.ForExample() // a fresh migrated database
	defer cleanup()

	store, err := mysqlstore.New(mysqlstore.Config{DB: db.DB, PoolCap: 100})
	if err != nil {
		panic(err)
	}
	// MySQL decides shop 42's reservations: a handoff from Redis, with
	// nothing to copy, moved its fence (package mirror does this).
	if _, err := store.TakeOver(ctx, &reservation.Snapshot{Shop: 42}, 1); err != nil {
		panic(err)
	}
	ten := int64(10)
	// The merchant has 10 units of item 1001 at location 1 (and none at 2).
	store.Adjust(ctx, &reservation.AdjustParams{Shop: 42, Item: 1001, Location: 1, Available: &ten})

	res, err := store.Reserve(ctx, &reservation.ReserveParams{
		Shop:  42,
		Token: "cart-7f3a",
		Lines: []reservation.Line{{Item: 1001, Quantity: 3, Locations: []int64{2, 1}}},
		TTL:   10 * time.Minute,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status, res.Allocations)

	claim, err := store.Claim(ctx, &reservation.ClaimParams{Shop: 42, Token: "cart-7f3a", As: reservation.AsAuthority})
	if err != nil {
		panic(err)
	}
	again, _ := store.Claim(ctx, &reservation.ClaimParams{Shop: 42, Token: "cart-7f3a", As: reservation.AsAuthority})
	fmt.Println(claim.Outcome, "replayed:", again.Replayed)

	stock, _ := store.Stock(ctx, &reservation.StockParams{Shop: 42})
	fmt.Println("ledger:", stock[0].Available)
	// Output:
	// reserved [{1001 1 3}]
	// claimed replayed: true
	// ledger: 7
}
