package redisstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/migrations"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// exampleLedger makes a throwaway migrated database on the server in
// $RESERVOIR_MYSQL_DSN (scripts/services prints it) for the ledger.
func exampleLedger(ctx context.Context) (*mysqlstore.Store, func()) {
	cfg, err := mysql.ParseDSN(os.Getenv("RESERVOIR_MYSQL_DSN"))
	if err != nil {
		panic(err)
	}
	cfg.DBName = fmt.Sprintf("rsv_example_redis_%d", os.Getpid())
	root, err := sql.Open("mysql", os.Getenv("RESERVOIR_MYSQL_DSN"))
	if err != nil {
		panic(err)
	}
	if _, err := root.ExecContext(ctx, "CREATE DATABASE "+cfg.DBName); err != nil {
		panic(err)
	}
	db, err := mysqlstore.Open(cfg.FormatDSN())
	if err != nil {
		panic(err)
	}
	if _, err := migrations.Up(ctx, db); err != nil {
		panic(err)
	}
	ledger, err := mysqlstore.New(mysqlstore.Config{DB: db, PoolCap: 100})
	if err != nil {
		panic(err)
	}
	return ledger, func() {
		db.Close()
		root.ExecContext(context.Background(), "DROP DATABASE "+cfg.DBName)
		root.Close()
	}
}

// Reserve a cart in Redis, then claim it when payment succeeds: the legacy
// two-system step deducts the MySQL ledger (once, however often the claim
// is repeated) and removes the Redis hold.
func Example() {
	ctx := context.Background()
	ledger, cleanup := exampleLedger(ctx)
	defer cleanup()

	// A client that never resends a command: a lost reply must not run a
	// script twice.
	client := redisstore.NewClient(&redis.UniversalOptions{Addrs: []string{os.Getenv("RESERVOIR_REDIS_ADDR")}})
	defer client.Close()
	prefix := fmt.Sprintf("example:%d:", os.Getpid())
	defer deleteKeys(client, prefix)

	store, err := redisstore.New(redisstore.Config{Client: client, Ledger: ledger, Prefix: prefix})
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

func deleteKeys(c redis.UniversalClient, prefix string) {
	ctx := context.Background()
	iter := c.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		c.Del(ctx, iter.Val())
	}
}
