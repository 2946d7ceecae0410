package faulttest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seed31b0e981/reservoir/internal/faults"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// Every bug the suite found is kept here as a named case, adapted to the
// design of docs/ownership.md: each names the protection that now covers
// it, and where that protection can be switched off in a test (the
// mirror's Disabled knob stops MySQL's change feed from reaching Redis),
// the case is also run without it and shown to fail.

// regression is a case's body: it reports a broken rule through t.
type regression func(t testing.TB, c *cell)

// withoutProtection runs a regression on a cell built with o (which
// removes the protection) and checks that it reports a failure saying
// want: the case still tests what it claims to.
func withoutProtection(t *testing.T, m mode, tm timings, o cellOptions, body regression, want string) {
	t.Helper()
	t.Run("without the protection the case fails", func(t *testing.T) {
		t.Parallel()
		c := setup(t, m, tm, o)
		rec := &recordingTB{TB: t}
		func() {
			defer func() {
				if p := recover(); p != nil {
					if _, ok := p.(fatal); !ok {
						panic(p)
					}
				}
			}()
			body(rec, c)
		}()
		all := strings.Join(rec.errors, "\n")
		t.Logf("the case reported:\n%s", all)
		if !strings.Contains(all, want) {
			t.Errorf("no failure saying %q: the case no longer tests its protection", want)
		}
	})
}

// Regression case "kill switch after a lost Redis settle".
//
// Then: in mysql mode a claim's Redis settle was attempted once. When
// Redis could not be reached, MySQL had claimed (the ledger deducted), the
// caller was told "claimed", and the Redis hold stayed; when it expired,
// the Redis reaper gave its units back to a quantity the ledger no longer
// backed. After the kill switch Redis acknowledged reservations the ledger
// then refused to claim (insufficient stock): the kill switch was not
// lossless.
//
// Now: Redis never settles a claim itself. MySQL records the claim in its
// change feed in the claim's transaction; the relay delivers it once Redis
// answers again (taking the deduction out of Redis's quantity), Redis's
// reaper leaves a shop MySQL decides alone, and the kill switch's handoff
// drains whatever the relay has not delivered yet. Protection: the change
// feed and the drain. Without them (the mirror Disabled) Redis offers the
// claimed units again after the kill switch and the ledger refuses them.
func TestKillSwitchAfterLostRedisSettle(t *testing.T) {
	t.Parallel()
	tm := cellTimings()
	tm.ttl = 2 * time.Second
	// Stocked while Redis decides, so Redis's quantity is set directly
	// and is only right afterwards if the feed keeps it so.
	m, o := mode{"mysql", authority.ModeMySQL, authority.KillOff}, cellOptions{stockIn: authority.ModeRedis}
	lostRedisSettle(t, setup(t, m, tm, o))
	o.noFeed = true
	withoutProtection(t, m, tm, o, lostRedisSettle, "could not be claimed")
}

func lostRedisSettle(t testing.TB, c *cell) {
	ctx := context.Background()
	line := func(qty int64) []reservation.Line {
		return []reservation.Line{{Item: 1, Quantity: qty, Locations: []int64{1}}}
	}
	if res, err := c.facade.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "paid", Lines: line(3), TTL: c.t.ttl}); err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	c.drain(t)

	// Redis is unreachable while the buyer's payment succeeds.
	down, err := c.proxy[serverRedis].Inject(faults.Fault{Kind: faults.Down})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := c.facade.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "paid"}); err != nil || res.Outcome != reservation.OutcomeClaimed {
		t.Fatalf("claim with Redis down (MySQL decides): %+v %v", res, err)
	}
	c.drain(t)
	if err := down.Heal(); err != nil {
		t.Fatal(err)
	}

	// The hold's time passes and Redis's reaper runs.
	time.Sleep(c.t.ttl + 500*time.Millisecond)
	if _, err := c.rdDirect.Reap(ctx, &reservation.ReapParams{}); err != nil {
		t.Fatal(err)
	}

	// The kill switch: Redis decides. Every unit it offers is reserved,
	// every reservation acknowledged; each must then be claimable.
	if err := c.modes.SetKill(authority.KillRedis); err != nil {
		t.Fatal(err)
	}
	probe, err := c.facade.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "probe", Lines: line(1), TTL: time.Minute})
	if err != nil {
		t.Fatalf("first call after the kill switch: %v", err)
	}
	redisSays, err := c.rdDirect.Availability(ctx, &reservation.AvailabilityParams{Shop: shop, Item: 1})
	if err != nil {
		t.Fatal(err)
	}
	ledger := ledgerAt(t, c, 1)
	t.Logf("after the kill switch: ledger %d, Redis offers %d more (the probe holds %v)", ledger, redisSays.At(1), probe.Allocations)
	var refused []string
	for i := int64(0); i < redisSays.At(1); i++ {
		token := fmt.Sprintf("after-kill-%d", i)
		res, err := c.facade.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: token, Lines: line(1), TTL: time.Minute})
		if err != nil || res.Status != reservation.StatusReserved {
			continue
		}
		if _, err := c.facade.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token}); err != nil {
			if errors.Is(err, reservation.ErrInsufficientStock) {
				refused = append(refused, token)
				continue
			}
			t.Fatalf("claim %s: %v", token, err)
		}
	}
	if len(refused) > 0 {
		t.Errorf("after the kill switch, %d acknowledged reservations could not be claimed (the ledger has no stock for them): %v", len(refused), refused)
	}
}

// Regression case "kill switch after a lost Redis shadow reserve".
//
// Then: in mysql mode a reserve was acknowledged once MySQL held it,
// whatever happened to the Redis write the call waited for. When Redis
// could not be reached, Redis never learnt of the reservation, and after
// the kill switch its claim failed although the buyer had paid.
//
// Now: the reserve's state change is in MySQL's feed from the reserve's
// own transaction; the relay delivers it when Redis is back, and the kill
// switch's handoff drains the feed before Redis decides. Protection: the
// change feed and the drain. Without them the claim after the kill switch
// answers not_found.
func TestKillSwitchAfterLostRedisReserve(t *testing.T) {
	t.Parallel()
	m := mode{"mysql", authority.ModeMySQL, authority.KillOff}
	lostRedisReserve(t, setup(t, m, cellTimings(), cellOptions{}))
	withoutProtection(t, m, cellTimings(), cellOptions{noFeed: true}, lostRedisReserve, "after the kill switch")
}

func lostRedisReserve(t testing.TB, c *cell) {
	ctx := context.Background()
	// The first call hands the shop to MySQL; then Redis goes away.
	if res, err := c.facade.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "first", TTL: time.Minute,
		Lines: []reservation.Line{{Item: 3, Quantity: 1, Locations: []int64{1}}}}); err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	down, err := c.proxy[serverRedis].Inject(faults.Fault{Kind: faults.Down})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.facade.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "paid", TTL: time.Minute,
		Lines: []reservation.Line{{Item: 2, Quantity: 2, Locations: []int64{1}}}})
	if err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve with Redis down (MySQL decides): %+v %v", res, err)
	}
	c.drain(t)
	if err := down.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := c.modes.SetKill(authority.KillRedis); err != nil {
		t.Fatal(err)
	}
	claim, err := c.facade.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "paid"})
	if err != nil || claim.Outcome != reservation.OutcomeClaimed {
		t.Fatalf("claim of the acknowledged reservation after the kill switch: %+v %v", claim, err)
	}
	c.drain(t)
	if l := ledgerAt(t, c, 2); l != c.t.stock[2]-2 {
		t.Errorf("ledger %d, want %d: deducted once", l, c.t.stock[2]-2)
	}
}

// Regression case "the shadow answers for an unreachable authority".
//
// Then: in shadow mode (Redis decides) the facade treated any error from
// Redis's Get as "Redis does not hold it" and, since the MySQL shadow held
// it, let MySQL claim as the authority: the ledger was deducted, the
// caller told "claimed", while Redis still held the units; its reaper
// then gave back units the ledger no longer had, and reconciliation could
// not repair the authority.
//
// Now: nothing guesses. The facade only ever asks the store its flags
// name, follows a fence, or hands the shop off at a newer epoch; an
// unreachable decider is a retryable error. And MySQL itself refuses to
// decide for a shop whose fence names Redis. Protection: the fences (and
// the facade's routing by them), checked here directly: while Redis is
// down, MySQL asked to claim as the authority answers NotDeciderError.
func TestShadowNeverAnswersForAnUnreachableAuthority(t *testing.T) {
	t.Parallel()
	tm := cellTimings()
	tm.ttl = 2 * time.Second
	c := setup(t, mode{"shadow", authority.ModeShadow, authority.KillOff}, tm, cellOptions{})
	ctx := context.Background()
	if res, err := c.facade.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "paid", TTL: tm.ttl,
		Lines: []reservation.Line{{Item: 2, Quantity: 2, Locations: []int64{1}}}}); err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	c.drain(t)
	down, err := c.proxy[serverRedis].Inject(faults.Fault{Kind: faults.Down})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := c.facade.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "paid"})
	t.Logf("claim with the deciding Redis down: %+v %v", claim, err)
	if err == nil || !retryable(errKind(err)) {
		t.Errorf("claim with the deciding Redis down: %+v %v; want a retryable error (the outcome is unknown)", claim, err)
	}
	_, merr := c.myDirect.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "paid", As: reservation.AsAuthority})
	var nd *reservation.NotDeciderError
	if !errors.As(merr, &nd) || nd.Fence.Decider != reservation.AuthorityRedis {
		t.Errorf("MySQL asked to claim as authority for a shop Redis decides: %v; want NotDeciderError naming Redis", merr)
	}
	c.drain(t)
	if err := down.Heal(); err != nil {
		t.Fatal(err)
	}
	if claims := countClaims(t, c); claims != 0 {
		t.Errorf("%d claim rows while the decider was down", claims)
	}
	if claim, err = c.facade.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "paid"}); err != nil || claim.Outcome != reservation.OutcomeClaimed {
		t.Fatalf("claim after healing: %+v %v", claim, err)
	}
	c.drain(t)
	time.Sleep(tm.ttl + 500*time.Millisecond)
	if _, err := c.rdDirect.Reap(ctx, &reservation.ReapParams{}); err != nil {
		t.Fatal(err)
	}
	a, err := c.rdDirect.Availability(ctx, &reservation.AvailabilityParams{Shop: shop, Item: 2})
	if err != nil {
		t.Fatal(err)
	}
	if l := ledgerAt(t, c, 2); a.At(1) != l || l != tm.stock[2]-2 {
		t.Errorf("Redis, which decides, offers %d units of item 2, the ledger has %d (want %d): the claim left its Redis hold behind or deducted twice",
			a.At(1), l, tm.stock[2]-2)
	}
}

func ledgerAt(t testing.TB, c *cell, item int64) int64 {
	t.Helper()
	levels, err := c.myDirect.Stock(context.Background(), &reservation.StockParams{Shop: shop})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range levels {
		if l.Item == item && l.Location == 1 {
			return l.Available
		}
	}
	t.Fatalf("no ledger row for item %d", item)
	return 0
}

func countClaims(t testing.TB, c *cell) int64 {
	t.Helper()
	var n int64
	if err := c.db.QueryRow("SELECT COUNT(*) FROM reservation_claims WHERE shop_id = ?", shop).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Regression case "a claim retry waits on the shadow".
//
// Then: in mysql mode the facade looked a reservation's owner up in MySQL,
// then in Redis, with the caller's context. A claim repeated after it
// succeeded found no hold in MySQL and asked Redis; while Redis black-holed
// requests that lookup ate the caller's whole deadline, and the caller got
// "deadline exceeded" instead of the replayed claim: a shadow fault changed
// the answer. (A variant: after a lost Redis settle, Redis still held the
// token, claimed it as the shadow and answered with its own error.)
//
// Now: the facade asks only the shop's decider, MySQL, which answers the
// replay from its claims row; Redis is asked only as a shadow, in its own
// slot, and the caller never waits for a shadow. Protection: routing by
// the fence and the asynchronous shadow. The retry must be answered well
// before the shadow's deadline, which a caller that waited for the shadow
// could not beat.
func TestClaimRetryWaitsOnTheShadow(t *testing.T) {
	t.Parallel()
	tm := cellTimings()
	tm.shadow = 1500 * time.Millisecond
	c := setup(t, mode{"mysql", authority.ModeMySQL, authority.KillOff}, tm, cellOptions{})
	ctx := context.Background()
	if res, err := c.facade.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "paid", TTL: time.Minute,
		Lines: []reservation.Line{{Item: 2, Quantity: 1, Locations: []int64{1}}}}); err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	if _, err := c.facade.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "paid"}); err != nil {
		t.Fatalf("claim: %v", err)
	}
	c.drain(t)
	blackhole, err := c.proxy[serverRedis].Inject(faults.Fault{Kind: faults.Timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer blackhole.Heal()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	start := time.Now()
	res, err := c.facade.Claim(cctx, &reservation.ClaimParams{Shop: shop, Token: "paid"})
	took := time.Since(start)
	if err != nil || !res.Replayed {
		t.Errorf("claim retry with the Redis shadow black-holed: %+v %v after %s; want the replayed claim from MySQL", res, err, took.Round(time.Millisecond))
	}
	if took >= tm.shadow {
		t.Errorf("claim retry took %s, the shadow's deadline is %s: the caller waited for the shadow", took.Round(time.Millisecond), tm.shadow)
	}
}

// Regression case "a broken pooled connection makes inTx panic".
//
// mysqlstore's inTx, when BeginTx reports driver.ErrBadConn (a pooled
// connection the server, the network or a cancelled call broke), releases
// the connection and acquires a fresh one; when that acquire failed too
// (the server still unreachable, or the caller's deadline passed), c was
// left nil and the deferred c.release() dereferenced it: a nil pointer
// panic instead of an error. The facade recovers it for a shadow call
// (the matrix saw it as shadow_panic in kill/redis/reset_peer on a loaded
// machine, where shadow deadlines cut MySQL connections); for the decider
// it is the caller's goroutine that panics. The driver below makes the two
// failures happen on demand. Protection: mysqlstore's connection handling
// (unchanged by the redesign).
func TestBrokenPooledConnectionDoesNotPanic(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	cfg, err := mysql.ParseDSN(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	broken := &breakingConnector{Connector: inner}
	pool := sql.OpenDB(broken)
	t.Cleanup(func() { pool.Close() })
	my, err := mysqlstore.New(mysqlstore.Config{DB: pool, PoolCap: poolCap})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// MySQL decides the shop (a handoff with nothing to copy), and one
	// call leaves an idle connection in the pool.
	if _, err := my.TakeOver(ctx, &reservation.Snapshot{Shop: shop}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := my.Availability(ctx, &reservation.AvailabilityParams{Shop: shop, Item: 1}); err != nil {
		t.Fatal(err)
	}
	broken.broken.Store(true) // that connection is now bad, and no new one can be made
	var panicked any
	func() {
		defer func() { panicked = recover() }()
		_, err = my.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "t", TTL: time.Minute,
			Lines: []reservation.Line{{Item: 2, Quantity: 1, Locations: []int64{1}}}})
	}()
	if panicked != nil {
		t.Fatalf("Reserve on a broken pooled connection, with no new connection to be had, panicked: %v", panicked)
	}
	if err == nil {
		t.Fatal("Reserve succeeded without a connection")
	}
	t.Logf("error, as it should be: %v", err)
}

// breakingConnector wraps the MySQL driver: once broken is set, pooled
// connections answer BeginTx with driver.ErrBadConn (as a connection the
// server closed does) and new connections cannot be made.
type breakingConnector struct {
	driver.Connector
	broken atomic.Bool
}

// mysqlConn is what the MySQL driver's connections implement and
// database/sql uses.
type mysqlConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.SessionResetter
	driver.Validator
}

func (b *breakingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if b.broken.Load() {
		return nil, errors.New("dial: connection refused (test)")
	}
	c, err := b.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &breakingConn{mysqlConn: c.(mysqlConn), b: b}, nil
}

type breakingConn struct {
	mysqlConn
	b *breakingConnector
}

func (c *breakingConn) BeginTx(ctx context.Context, o driver.TxOptions) (driver.Tx, error) {
	if c.b.broken.Load() {
		return nil, driver.ErrBadConn
	}
	return c.mysqlConn.BeginTx(ctx, o)
}
