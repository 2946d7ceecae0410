package mirror_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// Hand a shop to MySQL and back to Redis without losing anything: the
// handoff to MySQL copies Redis's holds in, and the handoff back drains
// what MySQL decided meanwhile (a claim, a new hold) into Redis before
// Redis decides again. Each handoff carries the epoch of the flags that
// asked for it.
func ExampleMirror_Handoff() {
	ctx := context.Background()
	db, dropDB := testdb.ForExample() // a fresh migrated database
	defer dropDB()
	r, dropKeys := testredis.ForExample() // a client that never resends, and a fresh key prefix
	defer dropKeys()

	my, err := mysqlstore.New(mysqlstore.Config{DB: db.DB, PoolCap: 100})
	if err != nil {
		panic(err)
	}
	rd, err := redisstore.New(redisstore.Config{Client: r.Client, Prefix: r.Prefix, Ledger: my, Source: my,
		Limits: reservation.Limits{MaxQuantity: 100}})
	if err != nil {
		panic(err)
	}
	m, err := mirror.New(mirror.Config{Pod: "pod-a", MySQL: my, Redis: rd})
	if err != nil {
		panic(err)
	}
	cart := func(token string, qty int64) *reservation.ReserveParams {
		return &reservation.ReserveParams{Shop: 42, Token: token, TTL: 10 * time.Minute,
			Lines: []reservation.Line{{Item: 1001, Quantity: qty, Locations: []int64{1}}}}
	}

	// Redis decides the shop, as before the migration.
	ten := int64(10)
	if _, err := rd.Adjust(ctx, &reservation.AdjustParams{Shop: 42, Item: 1001, Location: 1, Available: &ten}); err != nil {
		panic(err)
	}
	if _, err := rd.Reserve(ctx, cart("cart-1", 3)); err != nil {
		panic(err)
	}

	// Flags version 1 names MySQL.
	fence, err := m.HandoffWait(ctx, 42, reservation.AuthorityMySQL, 1, false)
	if err != nil {
		panic(err)
	}
	fmt.Println("fence:", fence)
	claim, err := my.Claim(ctx, &reservation.ClaimParams{Shop: 42, Token: "cart-1"})
	if err != nil {
		panic(err)
	}
	fmt.Println("mysql claimed cart-1:", claim.Allocations)
	res, err := my.Reserve(ctx, cart("cart-2", 2))
	if err != nil {
		panic(err)
	}
	fmt.Println("mysql reserved cart-2:", res.Status, res.Allocations)

	// Flags version 2 names Redis again (the kill switch, say).
	if fence, err = m.Handoff(ctx, 42, reservation.AuthorityRedis, 2, false); err != nil {
		panic(err)
	}
	fmt.Println("fence:", fence)
	hold, err := rd.Get(ctx, &reservation.GetParams{Shop: 42, Token: "cart-2"})
	fmt.Println("redis holds cart-2:", hold.Allocations, "decided by", hold.Authority, err)
	_, err = rd.Get(ctx, &reservation.GetParams{Shop: 42, Token: "cart-1"})
	fmt.Println("redis knows cart-1 is claimed:", errors.Is(err, reservation.ErrAlreadyClaimed))
	avail, _ := rd.Availability(ctx, &reservation.AvailabilityParams{Shop: 42, Item: 1001})
	stock, _ := my.Stock(ctx, &reservation.StockParams{Shop: 42})
	fmt.Println("ledger:", stock[0].Available, "redis unheld:", avail.At(1))
	_, err = my.Reserve(ctx, cart("cart-3", 1))
	fmt.Println("mysql decides:", !errors.Is(err, reservation.ErrNotDecider))
	// Output:
	// fence: mysql@1
	// mysql claimed cart-1: [{1001 1 3}]
	// mysql reserved cart-2: reserved [{1001 1 2}]
	// fence: redis@2
	// redis holds cart-2: [{1001 1 2}] decided by mysql <nil>
	// redis knows cart-1 is claimed: true
	// ledger: 7 redis unheld: 5
	// mysql decides: false
}

// Run the relay while MySQL decides: Redis follows MySQL's decisions
// within a poll, and Lag says how far behind it is (the figure shown next
// to the pod's kill switch).
func ExampleMirror_Run() {
	ctx := context.Background()
	db, dropDB := testdb.ForExample()
	defer dropDB()
	r, dropKeys := testredis.ForExample()
	defer dropKeys()
	my, err := mysqlstore.New(mysqlstore.Config{DB: db.DB, PoolCap: 100})
	if err != nil {
		panic(err)
	}
	rd, err := redisstore.New(redisstore.Config{Client: r.Client, Prefix: r.Prefix, Ledger: my, Source: my,
		Limits: reservation.Limits{MaxQuantity: 100}})
	if err != nil {
		panic(err)
	}
	// A real process passes its logger; the example keeps its output to
	// what it prints.
	m, err := mirror.New(mirror.Config{Pod: "pod-a", MySQL: my, Redis: rd, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	if _, err := m.HandoffWait(ctx, 42, reservation.AuthorityMySQL, 1, false); err != nil {
		panic(err)
	}

	relay, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- m.Run(relay) }()
	defer func() { stop(); <-stopped }()

	ten := int64(10)
	if _, err := my.Adjust(ctx, &reservation.AdjustParams{Shop: 42, Item: 1001, Location: 1, Available: &ten}); err != nil {
		panic(err)
	}
	if _, err := my.Reserve(ctx, &reservation.ReserveParams{Shop: 42, Token: "cart-1", TTL: 10 * time.Minute,
		Lines: []reservation.Line{{Item: 1001, Quantity: 4, Locations: []int64{1}}}}); err != nil {
		panic(err)
	}
	m.Push() // what a facade does after MySQL decided: the relay looks now
	for deadline := time.Now().Add(10 * time.Second); ; {
		lag, err := m.Lag(ctx)
		if err != nil {
			panic(err)
		}
		if lag.Changes == 0 {
			break
		}
		if time.Now().After(deadline) {
			panic(fmt.Sprintf("the relay is behind by %d changes", lag.Changes))
		}
		time.Sleep(5 * time.Millisecond) // the next look at the lag
	}
	hold, _ := rd.Get(ctx, &reservation.GetParams{Shop: 42, Token: "cart-1"})
	avail, _ := rd.Availability(ctx, &reservation.AvailabilityParams{Shop: 42, Item: 1001})
	fmt.Println("redis follows:", hold.Allocations, "decided by", hold.Authority, "unheld:", avail.At(1))
	// Output:
	// redis follows: [{1001 1 4}] decided by mysql unheld: 6
}
