package redisstore_test

import (
	"context"
	"errors"
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
// is repeated), removes the Redis hold and leaves a claimed tombstone, from
// which the repeat is answered.
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

// Hand a shop over to MySQL: after Yield, Redis refuses to decide for the
// shop and follows MySQL's decisions through the change feed instead,
// which the relay delivers with Apply.
func ExampleStore_Yield() {
	ctx := context.Background()
	db, dropDB := testdb.ForExample()
	defer dropDB()
	ledger, err := mysqlstore.New(mysqlstore.Config{DB: db.DB, PoolCap: 100})
	if err != nil {
		panic(err)
	}
	r, dropKeys := testredis.ForExample()
	defer dropKeys()
	store, err := redisstore.New(redisstore.Config{Client: r.Client, Ledger: ledger, Prefix: r.Prefix})
	if err != nil {
		panic(err)
	}

	fence, err := store.Yield(ctx, 42, 7) // the flags' version 7 names MySQL
	if err != nil {
		panic(err)
	}
	fmt.Println("fence:", fence)
	_, err = store.Reserve(ctx, &reservation.ReserveParams{
		Shop: 42, Token: "cart-1", TTL: 10 * time.Minute,
		Lines: []reservation.Line{{Item: 1001, Quantity: 1, Locations: []int64{1}}},
	})
	fmt.Println("redis decides:", !errors.Is(err, reservation.ErrNotDecider))

	// MySQL's feed: the merchant stocked 10 units, a buyer holds 3.
	applied, err := store.Apply(ctx, []reservation.Change{
		{ID: 1, Kind: reservation.ChangeAdjust, Shop: 42, Item: 1001, Location: 1, Delta: 10},
		{ID: 2, Kind: reservation.ChangeState, Shop: 42, Token: "cart-2", State: reservation.StateHeld,
			Allocations: []reservation.Allocation{{Item: 1001, Location: 1, Quantity: 3}}, ExpiresAt: time.Now().Add(10 * time.Minute)},
	})
	if err != nil {
		panic(err)
	}
	hold, _ := store.Get(ctx, &reservation.GetParams{Shop: 42, Token: "cart-2"})
	avail, _ := store.Availability(ctx, &reservation.AvailabilityParams{Shop: 42, Item: 1001})
	fmt.Println("applied:", applied, "mirrored hold:", hold.Allocations, hold.Authority, "redis unheld:", avail.At(1))
	// Output:
	// fence: mysql@7
	// redis decides: false
	// applied: 2 mirrored hold: [{1001 1 3}] mysql redis unheld: 7
}
