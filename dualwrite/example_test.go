package dualwrite_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/migrations"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"

	goredis "github.com/redis/go-redis/v9"
)

// printer is an Observer that prints each observation's class.
type printer struct{}

func (printer) Observe(o compare.Observation) {
	fmt.Printf("observed %s in %s mode: %s\n", o.Op, o.Mode, compare.Classify(o, compare.DefaultRules))
}

// The facade in front of both stores: in shadow mode Redis answers and
// MySQL is written and compared; flipping the mode to mysql makes MySQL the
// authority, and a reservation made before the flip is still claimed by the
// store that made it.
func Example() {
	ctx := context.Background()
	db, redisClient, prefix, cleanup := exampleServers(ctx)
	defer cleanup()

	my, _ := mysqlstore.New(mysqlstore.Config{DB: db})
	rd, err := redisstore.New(redisstore.Config{Client: redisClient, Prefix: prefix, Ledger: my, Source: my})
	if err != nil {
		panic(err)
	}
	modes := rollout.NewStatic(rollout.ModeShadow)
	f, err := dualwrite.New(dualwrite.Config{Pod: "pod-a", Redis: rd, MySQL: my, Modes: modes, Observer: printer{}})
	if err != nil {
		panic(err)
	}
	wait := func() { _ = f.Close(ctx) } // let the shadow finish, for a stable print order

	ten := int64(10)
	f.Adjust(ctx, &reservation.AdjustParams{Shop: 1, Item: 7, Location: 1, Available: &ten})
	wait()
	res, _ := f.Reserve(ctx, &reservation.ReserveParams{Shop: 1, Token: "cart-1", TTL: time.Minute,
		Lines: []reservation.Line{{Item: 7, Quantity: 2, Locations: []int64{1}}}})
	wait()
	fmt.Println("reserve:", res.Status, "authority", res.Authority)

	modes.SetMode(rollout.ModeMySQL) // the flip
	claim, _ := f.Claim(ctx, &reservation.ClaimParams{Shop: 1, Token: "cart-1"})
	wait()
	stock, _ := my.Stock(ctx, &reservation.StockParams{Shop: 1})
	fmt.Println("claim:", claim.Outcome, "ledger", stock[0].Available)
	// Output:
	// observed adjust in shadow mode: match
	// observed reserve in shadow mode: match
	// reserve: reserved authority redis
	// observed claim in mysql mode: match
	// claim: claimed ledger 8
}

// exampleServers gives the example a fresh database and key prefix on the
// servers scripts/services started.
func exampleServers(ctx context.Context) (*sql.DB, goredis.UniversalClient, string, func()) {
	cfg, err := mysql.ParseDSN(os.Getenv("RESERVOIR_MYSQL_DSN"))
	if err != nil {
		panic(err)
	}
	cfg.DBName = fmt.Sprintf("rsv_example_dw_%d", os.Getpid())
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
	client := redisstore.NewClient(&goredis.UniversalOptions{Addrs: []string{os.Getenv("RESERVOIR_REDIS_ADDR")}})
	prefix := fmt.Sprintf("example-%d:", os.Getpid())
	return db, client, prefix, func() {
		db.Close()
		root.ExecContext(context.Background(), "DROP DATABASE "+cfg.DBName)
		root.Close()
		keys, _ := client.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			client.Del(context.Background(), keys...)
		}
		client.Close()
	}
}
