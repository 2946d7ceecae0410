package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// Reserve a cart in Redis, then claim it when payment succeeds: the legacy
// two-system step deducts the MySQL ledger (once, however often the claim
// is repeated) and removes the Redis hold.
func Example() {
	ctx := context.Background()
	db, dropDB := testdb.ForExample() // a fresh migrated database for the ledger
	defer dropDB()
	ledger, err := mysqlstore.New(mysqlstore.Config{DB: db.DB, PoolCap: 100})
	if err != nil {
		panic(err)
	}
	// A client that never resends a command (a lost reply must not run a
	// script twice) and a fresh key prefix.
	r, dropKeys := testredis.ForExample()
	defer dropKeys()

	store, err := redisstore.New(redisstore.Config{Client: r.Client, Ledger: ledger, Prefix: r.Prefix})
	if err != nil {
		panic(err)
	}
	ten := int64(10)
	// The merchant has 10 units of item 1001 at location 1 (and none at 2).
	if _, err := store.Adjust(ctx, &reservation.AdjustParams{Shop: 42, Item: 1001, Location: 1, Available: &ten}); err != nil {
		panic(err)
	}

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

	stock, _ := ledger.Stock(ctx, &reservation.StockParams{Shop: 42})
	avail, _ := store.Availability(ctx, &reservation.AvailabilityParams{Shop: 42, Item: 1001})
	fmt.Println("ledger:", stock[0].Available, "redis unheld:", avail.At(1))
	// Output:
	// reserved [{1001 1 3}]
	// claimed replayed: true
	// ledger: 7 redis unheld: 7
}
