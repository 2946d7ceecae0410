package dualwrite_test

import (
	"context"
	"fmt"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
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
	db, dropDB := testdb.ForExample() // a fresh migrated database
	defer dropDB()
	r, dropKeys := testredis.ForExample() // a no-resend client, a fresh key prefix
	defer dropKeys()

	my, _ := mysqlstore.New(mysqlstore.Config{DB: db.DB})
	rd, err := redisstore.New(redisstore.Config{Client: r.Client, Prefix: r.Prefix, Ledger: my, Source: my})
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
