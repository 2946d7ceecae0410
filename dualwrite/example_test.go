package dualwrite_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// printer is an Observer that prints each observation's class.
type printer struct{}

func (printer) Observe(o compare.Observation) {
	fmt.Printf("observed %s in %s mode: %s\n", o.Op, o.Mode, compare.Classify(o, compare.DefaultRules))
}

// The facade in front of both stores of a pod. In shadow mode Redis
// decides and MySQL is asked what it would do, for comparison; flipping the
// mode to mysql hands the shop to MySQL on the next call (Redis's holds
// become MySQL's), so a reservation made before the flip is claimed by
// MySQL. The mirror relays MySQL's decisions back into Redis, so the kill
// switch can hand the shop back without losing any, and Redis is now the
// one asked for comparison.
func Example() {
	ctx := context.Background()
	db, dropDB := testdb.ForExample() // a fresh migrated database
	defer dropDB()
	r, dropKeys := testredis.ForExample() // a no-resend client, a fresh key prefix
	defer dropKeys()

	my, err := mysqlstore.New(mysqlstore.Config{DB: db.DB})
	if err != nil {
		panic(err)
	}
	rd, err := redisstore.New(redisstore.Config{Client: r.Client, Prefix: r.Prefix, Ledger: my, Source: my})
	if err != nil {
		panic(err)
	}
	// The mirror hands shops off between the stores; its relay (one
	// active per pod) keeps Redis following MySQL.
	m, err := mirror.New(mirror.Config{Pod: "pod-a", MySQL: my, Redis: rd})
	if err != nil {
		panic(err)
	}
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan struct{})
	go func() { defer close(relayDone); _ = m.Run(relayCtx) }()
	defer func() { stopRelay(); <-relayDone }()

	modes := authority.NewStatic(authority.ModeShadow)
	f, err := dualwrite.New(dualwrite.Config{Pod: "pod-a", Redis: rd, MySQL: my, Modes: modes, Mirror: m,
		Observer: printer{}, ShadowTimeout: time.Second})
	if err != nil {
		panic(err)
	}
	wait := func() { _ = f.Close(ctx) } // let the shadow finish, for a stable print order

	ten := int64(10)
	if _, err := f.Adjust(ctx, &reservation.AdjustParams{Shop: 1, Item: 7, Location: 1, Available: &ten}); err != nil {
		panic(err)
	}
	res, err := f.Reserve(ctx, &reservation.ReserveParams{Shop: 1, Token: "cart-1", TTL: time.Minute,
		Lines: []reservation.Line{{Item: 7, Quantity: 2, Locations: []int64{1}}}})
	wait()
	if err != nil {
		panic(err) // 503: outcome unknown, repeat the same call
	}
	fmt.Println("reserve:", res.Status, "decided by", res.Authority)

	_ = modes.SetMode(authority.ModeMySQL) // the flip
	claim, err := f.Claim(ctx, &reservation.ClaimParams{Shop: 1, Token: "cart-1"})
	if err != nil {
		panic(err)
	}
	stock, _ := my.Stock(ctx, &reservation.StockParams{Shop: 1})
	fence, _ := my.Fence(ctx, 1)
	fmt.Println("claim:", claim.Outcome, "ledger", stock[0].Available, "fence", fence)

	// Where MySQL decides, Redis is asked what it would do about a reserve
	// (a claim or a release there would only measure the relay's lag).
	res, err = f.Reserve(ctx, &reservation.ReserveParams{Shop: 1, Token: "cart-2", TTL: time.Minute,
		Lines: []reservation.Line{{Item: 7, Quantity: 1, Locations: []int64{1}}}})
	wait()
	if err != nil {
		panic(err)
	}
	fmt.Println("reserve:", res.Status, "decided by", res.Authority)
	// Output:
	// observed reserve in shadow mode: match
	// reserve: reserved decided by redis
	// claim: claimed ledger 8 fence mysql@2
	// observed reserve in mysql mode: match
	// reserve: reserved decided by mysql
}

// examplePod is one pod wired as in Example, its relay running, for the
// examples that follow.
type examplePod struct {
	f     *dualwrite.Facade
	modes *authority.Static
	my    *mysqlstore.Store
	rd    *redisstore.Store
	close func()
}

func openExamplePod(mode authority.Mode, obs dualwrite.Observer) *examplePod {
	db, dropDB := testdb.ForExample()
	r, dropKeys := testredis.ForExample()
	p := &examplePod{modes: authority.NewStatic(mode)}
	var err error
	if p.my, err = mysqlstore.New(mysqlstore.Config{DB: db.DB}); err != nil {
		panic(err)
	}
	if p.rd, err = redisstore.New(redisstore.Config{Client: r.Client, Prefix: r.Prefix, Ledger: p.my, Source: p.my}); err != nil {
		panic(err)
	}
	m, err := mirror.New(mirror.Config{Pod: "pod-a", MySQL: p.my, Redis: p.rd})
	if err != nil {
		panic(err)
	}
	if p.f, err = dualwrite.New(dualwrite.Config{Pod: "pod-a", Redis: p.rd, MySQL: p.my, Modes: p.modes, Mirror: m,
		Observer: obs, ShadowTimeout: time.Second}); err != nil {
		panic(err)
	}
	ctx, stopRelay := context.WithCancel(context.Background())
	relayDone := make(chan struct{})
	go func() { defer close(relayDone); _ = m.Run(ctx) }()
	p.close = func() {
		_ = p.f.Close(context.Background())
		stopRelay()
		<-relayDone
		dropKeys()
		dropDB()
	}
	ten := int64(10)
	if _, err := p.f.Adjust(context.Background(), &reservation.AdjustParams{Shop: 1, Item: 1001, Location: 1, Available: &ten}); err != nil {
		panic(err)
	}
	return p
}

// Reserve holds a cart with the shop's deciding store: every line or
// nothing. The token is the idempotency key: a repeat answers the first
// answer, and a cart that cannot be served holds nothing.
func ExampleFacade_Reserve() {
	p := openExamplePod(authority.ModeRedis, nil)
	defer p.close()
	ctx := context.Background()

	cart := &reservation.ReserveParams{Shop: 1, Token: "cart-7f3a", TTL: 10 * time.Minute,
		Lines: []reservation.Line{{Item: 1001, Quantity: 3, Locations: []int64{2, 1}}}}
	res, err := p.f.Reserve(ctx, cart)
	if err != nil {
		panic(err) // 503: outcome unknown, repeat the same call
	}
	fmt.Println(res.Status, res.Allocations, "decided by", res.Authority)

	again, _ := p.f.Reserve(ctx, cart)
	fmt.Println("repeated:", again.Status, "replayed:", again.Replayed)

	big, _ := p.f.Reserve(ctx, &reservation.ReserveParams{Shop: 1, Token: "cart-9b1c", TTL: 10 * time.Minute,
		Lines: []reservation.Line{{Item: 1001, Quantity: 8, Locations: []int64{1}}}})
	fmt.Println("too big:", big.Status, big.Short)
	// Output:
	// reserved [{1001 1 3}] decided by redis
	// repeated: reserved replayed: true
	// too big: insufficient [{1001 8 7}]
}

// Claim makes a reservation permanent once payment succeeded: the ledger
// is deducted exactly once, however often the claim is repeated, and a
// claimed reservation cannot be released.
func ExampleFacade_Claim() {
	p := openExamplePod(authority.ModeMySQL, nil)
	defer p.close()
	ctx := context.Background()

	if _, err := p.f.Reserve(ctx, &reservation.ReserveParams{Shop: 1, Token: "cart-7f3a", TTL: 10 * time.Minute,
		Lines: []reservation.Line{{Item: 1001, Quantity: 3, Locations: []int64{1}}}}); err != nil {
		panic(err)
	}
	claim, err := p.f.Claim(ctx, &reservation.ClaimParams{Shop: 1, Token: "cart-7f3a"})
	if err != nil {
		panic(err) // 503: outcome unknown, repeat the same call
	}
	again, _ := p.f.Claim(ctx, &reservation.ClaimParams{Shop: 1, Token: "cart-7f3a"})
	fmt.Println(claim.Outcome, claim.Allocations, "repeated, replayed:", again.Replayed)

	_, err = p.f.Release(ctx, &reservation.ReleaseParams{Shop: 1, Token: "cart-7f3a"})
	fmt.Println("release after the claim:", errors.Is(err, reservation.ErrAlreadyClaimed))

	stock, _ := p.my.Stock(ctx, &reservation.StockParams{Shop: 1})
	fmt.Println("ledger:", stock[0].Available)
	// Output:
	// claimed [{1001 1 3}] repeated, replayed: true
	// release after the claim: true
	// ledger: 7
}

// Dual writes for comparison: in shadow mode Redis decides and answers,
// and MySQL is asked concurrently what it would have done (keeping a
// shadow hold of its own). The caller never waits for MySQL; each pair of
// outcomes goes to the Observer (the comparer, in production).
func Example_dualWrite() {
	p := openExamplePod(authority.ModeShadow, printer{})
	defer p.close()
	ctx := context.Background()
	wait := func() { _ = p.f.Close(ctx) } // let the shadow finish, for a stable print order

	for _, token := range []string{"cart-1", "cart-2"} {
		if _, err := p.f.Reserve(ctx, &reservation.ReserveParams{Shop: 1, Token: token, TTL: time.Minute,
			Lines: []reservation.Line{{Item: 1001, Quantity: 2, Locations: []int64{1}}}}); err != nil {
			panic(err)
		}
		wait()
	}
	if _, err := p.f.Claim(ctx, &reservation.ClaimParams{Shop: 1, Token: "cart-1"}); err != nil {
		panic(err)
	}
	wait()
	if _, err := p.f.Release(ctx, &reservation.ReleaseParams{Shop: 1, Token: "cart-2"}); err != nil {
		panic(err)
	}
	wait()
	// Output:
	// observed reserve in shadow mode: match
	// observed reserve in shadow mode: match
	// observed claim in shadow mode: match
	// observed release in shadow mode: match
}

// The kill switch over a shop MySQL decides: the next call hands the shop
// back to Redis, after draining MySQL's change feed into it, so a hold
// MySQL made is claimed through Redis and the ledger deducted once.
// Releasing the kill switch hands the shop to MySQL again.
func Example_killSwitch() {
	p := openExamplePod(authority.ModeMySQL, nil)
	defer p.close()
	ctx := context.Background()

	res, err := p.f.Reserve(ctx, &reservation.ReserveParams{Shop: 1, Token: "cart-1", TTL: time.Minute,
		Lines: []reservation.Line{{Item: 1001, Quantity: 2, Locations: []int64{1}}}})
	if err != nil {
		panic(err)
	}
	fmt.Println("reserve:", res.Status, "decided by", res.Authority)

	_ = p.modes.SetKill(authority.KillRedis) // what `reservoir rollout kill` does to the flags
	claim, err := p.f.Claim(ctx, &reservation.ClaimParams{Shop: 1, Token: "cart-1"})
	if err != nil {
		panic(err) // 503: the handoff did not finish; retry
	}
	fence, _ := p.rd.Fence(ctx, 1)
	stock, _ := p.my.Stock(ctx, &reservation.StockParams{Shop: 1})
	offer, _ := p.rd.Availability(ctx, &reservation.AvailabilityParams{Shop: 1, Item: 1001})
	fmt.Println("claim:", claim.Outcome, "fence", fence, "ledger", stock[0].Available, "redis offers", offer.At(1))

	_ = p.modes.SetKill(authority.KillOff)
	res, err = p.f.Reserve(ctx, &reservation.ReserveParams{Shop: 1, Token: "cart-2", TTL: time.Minute,
		Lines: []reservation.Line{{Item: 1001, Quantity: 1, Locations: []int64{1}}}})
	if err != nil {
		panic(err)
	}
	fence, _ = p.my.Fence(ctx, 1)
	fmt.Println("kill switch released: reserve", res.Status, "decided by", res.Authority, "fence", fence)
	// Output:
	// reserve: reserved decided by mysql
	// claim: claimed fence redis@2 ledger 8 redis offers 8
	// kill switch released: reserve reserved decided by mysql fence mysql@3
}
