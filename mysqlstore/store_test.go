package mysqlstore_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

const shop = 42

type bundle struct {
	db  *testdb.DB
	s   *mysqlstore.Store
	reg *prometheus.Registry
}

func setup(t *testing.T, poolCap int64) bundle {
	t.Helper()
	return setupWith(t, mysqlstore.Config{PoolCap: poolCap})
}

// setupWith is setup with more of the store's config.
func setupWith(t *testing.T, cfg mysqlstore.Config) bundle {
	t.Helper()
	db := testdb.New(t)
	reg := prometheus.NewRegistry()
	cfg.DB, cfg.Registerer = db.DB, reg
	s, err := mysqlstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	decide(s)(t, shop)
	return bundle{db: db, s: s, reg: reg}
}

func (b bundle) stock(t *testing.T, item, loc, n int64) {
	t.Helper()
	if _, err := b.s.Adjust(context.Background(), &reservation.AdjustParams{Shop: shop, Item: item, Location: loc, Available: &n}); err != nil {
		t.Fatal(err)
	}
}

func (b bundle) ledger(t *testing.T, item, loc int64) int64 {
	t.Helper()
	var n int64
	if err := b.db.QueryRow("SELECT available FROM inventory_ledger WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ?", shop, item, loc).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (b bundle) drift(t *testing.T) []reservation.PoolDrift {
	t.Helper()
	d, err := b.s.Reconcile(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func one(item int64, locs ...int64) []reservation.Line {
	return []reservation.Line{{Item: item, Quantity: 1, Locations: locs}}
}

// b. 64 concurrent reservers of one unit, 500 in stock, pool cap 100:
// exactly 500 succeed; after claiming all, the ledger is 0 and reconcile
// finds nothing.
func TestHotItemReservesExactlyTheStock(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	b.stock(t, 1, 1, 500)
	var reserved, short atomic.Int64
	var tokens sync.Map
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Go(func() {
			for i := 0; ; i++ {
				tok := fmt.Sprintf("w%d-%d", w, i)
				res, err := b.s.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: tok, Lines: one(1, 1), TTL: time.Minute})
				if err != nil {
					t.Errorf("reserve: %v", err)
					return
				}
				if res.Status != reservation.StatusReserved {
					short.Add(1)
					return // this buyer saw it sold out
				}
				reserved.Add(1)
				tokens.Store(tok, true)
			}
		})
	}
	wg.Wait()
	if reserved.Load() != 500 || short.Load() != 64 {
		t.Fatalf("reserved %d (want 500), insufficient %d (want one per reserver, 64)", reserved.Load(), short.Load())
	}
	tokens.Range(func(k, _ any) bool {
		wg.Go(func() {
			if _, err := b.s.Claim(context.Background(), &reservation.ClaimParams{Shop: shop, Token: k.(string)}); err != nil {
				t.Errorf("claim %s: %v", k, err)
			}
		})
		return true
	})
	wg.Wait()
	if l := b.ledger(t, 1, 1); l != 0 {
		t.Errorf("ledger = %d after claiming all, want 0", l)
	}
	if d := b.drift(t); len(d) != 0 {
		t.Errorf("reconcile: %v", d)
	}
	if n := b.db.Count(t, "reservation_claims"); n != 500 {
		t.Errorf("claims rows = %d, want 500", n)
	}
}

// c. Pool drain: stock 5000, pool cap 50, 32 reservers. Every unit gets
// reserved, nobody hears "insufficient" while stock remains, and refills
// that inserted units number close to stock / cap, not one per reserver.
func TestPoolDrainRefillsSingleFlight(t *testing.T) {
	t.Parallel()
	const stock, poolCap = 5000, 50
	b := setup(t, poolCap)
	b.stock(t, 1, 1, stock)
	// A unit held in the database belongs to a reserve that either
	// returned (reserved) or has not returned yet (inFlight): an
	// insufficient answer is early only if those together are short of
	// the stock.
	var reserved, inFlight, early atomic.Int64
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			for i := 0; ; i++ {
				inFlight.Add(1)
				res, err := b.s.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: fmt.Sprintf("w%d-%d", w, i), Lines: one(1, 1), TTL: time.Minute})
				if err != nil {
					inFlight.Add(-1)
					t.Errorf("reserve: %v", err)
					return
				}
				if res.Status == reservation.StatusInsufficient {
					// Read before leaving the in-flight count: other reserves
					// may still be returning their units' acknowledgements.
					if n := reserved.Load() + inFlight.Load() - 1; n < stock {
						early.Add(1)
						t.Errorf("insufficient with at most %d of %d units reserved (short %+v)", n, stock, res.Short)
					}
					inFlight.Add(-1)
					return
				}
				reserved.Add(1)
				inFlight.Add(-1)
			}
		})
	}
	wg.Wait()
	refills := metricSum(t, b, "reservoir_mysql_replenish_total", "result", "inserted")
	refillUnits := metricSum(t, b, "reservoir_mysql_replenish_units_total")
	t.Logf("reserved %d; refills that inserted units: %.0f (%.0f units); reserve retries %.0f; deadlocks %.0f",
		reserved.Load(), refills, refillUnits, metricSum(t, b, "reservoir_mysql_reserve_short_retries_total"),
		metricSum(t, b, "reservoir_mysql_tx_retries_total", "reason", "deadlock"))
	if reserved.Load() != stock {
		t.Fatalf("reserved %d, want %d", reserved.Load(), stock)
	}
	if refillUnits != stock {
		t.Errorf("refills inserted %.0f units, want exactly the stock %d", refillUnits, stock)
	}
	// stock/cap = 100 refills if every refill fills the pool; waiters that
	// join the refill they waited on add none. Allow 50% for refills that
	// find the pool partly drained; one per reserve would be 5000.
	if want := float64(stock / poolCap); refills < want || refills > want*3/2 {
		t.Errorf("refills = %.0f, want close to %.0f", refills, want)
	}
}

// d. Carts of 3-5 items in random orders, reserved and claimed by 32
// goroutines: no deadlock reaches a caller and no claim deadlocks. Without
// the global order (ledger rows updated in random order), deadlocks do
// occur: the order is what prevents them. Claims here run each in its own
// transaction (GroupSize 1), as concurrent claims of different replicas
// do: one store's combined claims go one group at a time or two, each
// group sorted, and hide the question.
func TestCartsInRandomOrderDoNotDeadlock(t *testing.T) {
	t.Parallel()
	// claimDeadlocks are the deadlocks claims hit (and retried): the ledger
	// order is what this test is about. Reserves can deadlock too, rarely,
	// in the second pass of their unit scan (MariaDB 10.11 was seen to
	// wait on a unit another reserve held, under SKIP LOCKED); they are
	// retried and logged, not counted here.
	var claimDeadlocks func() float64
	run := func(t *testing.T, unordered bool, d time.Duration) {
		b := setupWith(t, mysqlstore.Config{PoolCap: 200, GroupSize: 1})
		claimDeadlocks = func() float64 { return retriesOf(t, b, "claim", "deadlock") }
		mysqlstore.SetUnorderedLedger(b.s, unordered)
		const items = 8
		for i := int64(1); i <= items; i++ {
			b.stock(t, i, 1, 1_000_000)
		}
		deadline := time.Now().Add(d)
		var ops atomic.Int64
		var wg sync.WaitGroup
		for w := range 32 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), 7))
				for i := 0; time.Now().Before(deadline); i++ {
					if unordered && metricSum(t, b, "reservoir_mysql_tx_retries_total", "reason", "deadlock") > 0 {
						return // shown: the test can fail
					}
					var lines []reservation.Line
					for _, p := range r.Perm(items)[:3+r.IntN(3)] {
						lines = append(lines, reservation.Line{Item: int64(p + 1), Quantity: 1 + int64(r.IntN(3)), Locations: []int64{1}})
					}
					tok := fmt.Sprintf("w%d-%d", w, i)
					res, err := b.s.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: tok, Lines: lines, TTL: time.Minute})
					if err != nil || res.Status != reservation.StatusReserved {
						t.Errorf("reserve: %+v %v", res, err)
						return
					}
					if _, err := b.s.Claim(context.Background(), &reservation.ClaimParams{Shop: shop, Token: tok}); err != nil {
						if unordered && errors.Is(err, reservation.ErrContention) {
							continue // deadlocked past its retries: the point of this run
						}
						t.Errorf("claim: %v", err)
						return
					}
					ops.Add(1)
				}
			})
		}
		wg.Wait()
		t.Logf("unordered=%v: %d carts reserved and claimed in %s; deadlocks %.0f (claims %.0f, reserves %.0f), lock wait timeouts %.0f",
			unordered, ops.Load(), d, metricSum(t, b, "reservoir_mysql_tx_retries_total", "reason", "deadlock"), claimDeadlocks(),
			retriesOf(t, b, "reserve", "deadlock"), metricSum(t, b, "reservoir_mysql_tx_retries_total", "reason", "lock_wait_timeout"))
	}
	t.Run("global order", func(t *testing.T) {
		run(t, false, 10*time.Second)
		if n := claimDeadlocks(); n != 0 {
			t.Errorf("claims deadlocked %.0f times with the global order, want 0", n)
		}
	})
	t.Run("cart order", func(t *testing.T) {
		run(t, true, 10*time.Second)
		if claimDeadlocks() == 0 {
			t.Errorf("no claim deadlocked without the global order: the ordered run proves nothing")
		}
	})
}

// e. One lock per unit: with a reserve transaction held open, InnoDB's lock
// listing shows one record lock per taken unit, on PRIMARY, and none on
// another index of the pool table and no gap (supremum) lock.
func TestOneRecordLockPerUnit(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	if _, err := b.db.Exec("SET GLOBAL innodb_status_output_locks = ON"); err != nil {
		t.Fatal(err)
	}
	b.stock(t, 1, 1, 100)
	b.stock(t, 2, 1, 100)
	// Fill the pools first, so the reserve below takes units, not a refill.
	for _, item := range []int64{1, 2} {
		if _, err := b.s.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: fmt.Sprint("warm", item), Lines: one(item, 1), TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	inside, done := make(chan struct{}), make(chan struct{})
	mysqlstore.SetBeforeReserveCommit(b.s, func() { close(inside); <-done })
	errc := make(chan error, 1)
	go func() {
		_, err := b.s.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: "held", TTL: time.Minute,
			Lines: []reservation.Line{{Item: 1, Quantity: 3, Locations: []int64{1}}, {Item: 2, Quantity: 2, Locations: []int64{1}}}})
		errc <- err
	}()
	<-inside
	var typ, name, status string
	err := b.db.QueryRow("SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status)
	close(done)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	locks := recordLocks(status, "`"+b.db.Name+"`.`available_units`")
	t.Logf("record locks on available_units by index: %v", locks)
	if locks["PRIMARY"] != 5 {
		t.Errorf("PRIMARY record locks = %d, want 5 (one per taken unit)\n%s", locks["PRIMARY"], status)
	}
	for idx, n := range locks {
		if idx != "PRIMARY" {
			t.Errorf("%d record locks on index %s, want none", n, idx)
		}
	}
}

// recordLocks counts, per index, the record locks InnoDB lists on table
// (supremum pseudo-records counted under "supremum").
func recordLocks(status, table string) map[string]int {
	out := map[string]int{}
	current := ""
	sc := bufio.NewScanner(strings.NewReader(status))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "RECORD LOCKS "):
			current = ""
			if strings.Contains(line, " of table "+table+" ") {
				f := strings.Fields(line[strings.Index(line, " index ")+len(" index "):])
				current = f[0]
			}
		case line == "":
			// blank lines separate the records of one lock struct
		case strings.HasPrefix(line, "Record lock, heap no ") && current != "":
			if strings.HasPrefix(line, "Record lock, heap no 1 ") {
				out["supremum"]++ // heap no 1 is the supremum
				continue
			}
			out[current]++
		case !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "Record lock"):
			current = ""
		}
	}
	return out
}

// f. READ COMMITTED: a reserve whose locking read finds an empty pool range
// does not block a refill inserting into that range. Under REPEATABLE READ
// the same read takes a gap lock and the insert waits (times out).
func TestReadCommittedLetsRefillIntoEmptyRange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		level   sql.IsolationLevel
		blocked bool
	}{{sql.LevelReadCommitted, false}, {sql.LevelRepeatableRead, true}} {
		t.Run(tc.level.String(), func(t *testing.T) {
			b := setup(t, 100)
			// Another item's units sit after the empty range, as in a real
			// table; the gap before them is what REPEATABLE READ locks.
			if _, err := b.db.Exec("INSERT INTO available_units VALUES (?, 2, 1, 1), (?, 2, 1, 2)", shop, shop); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			reserver, err := b.db.BeginTx(ctx, &sql.TxOptions{Isolation: tc.level})
			if err != nil {
				t.Fatal(err)
			}
			defer reserver.Rollback()
			rows, err := reserver.Query(mysqlstore.ReserveUnitsQuery(1), 0, shop, 1, 1, 3)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for rows.Next() {
				n++
			}
			rows.Close()
			if n != 0 {
				t.Fatalf("pool of item 1 has %d units, want empty", n)
			}
			refill, err := b.db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer refill.Close()
			if _, err := refill.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
				t.Fatal(err)
			}
			_, err = refill.ExecContext(ctx, "INSERT INTO available_units VALUES (?, 1, 1, 1)", shop)
			gotBlocked := err != nil && strings.Contains(err.Error(), "1205")
			if err != nil && !gotBlocked {
				t.Fatal(err)
			}
			if gotBlocked != tc.blocked {
				t.Errorf("%s: refill insert blocked = %v (%v), want %v", tc.level, gotBlocked, err, tc.blocked)
			}
		})
	}
}

// g. 16 concurrent claims of one token deduct the ledger once (the same
// check runs in the conformance suite); here also the claims table.
func TestConcurrentClaimsOneClaimRow(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	b.stock(t, 1, 1, 10)
	if _, err := b.s.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: "t", Lines: []reservation.Line{{Item: 1, Quantity: 4, Locations: []int64{1}}}, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var applied atomic.Int64
	for range 16 {
		wg.Go(func() {
			res, err := b.s.Claim(context.Background(), &reservation.ClaimParams{Shop: shop, Token: "t"})
			if err != nil {
				t.Errorf("claim: %v", err)
			} else if !res.Replayed {
				applied.Add(1)
			}
		})
	}
	wg.Wait()
	if applied.Load() != 1 || b.ledger(t, 1, 1) != 6 || b.db.Count(t, "reservation_claims") != 1 {
		t.Errorf("applied %d, ledger %d, claim rows %d; want 1, 6, 1", applied.Load(), b.ledger(t, 1, 1), b.db.Count(t, "reservation_claims"))
	}
}

// h. Expired holds come back through the reaper; parallel reapers return
// each once; the pool never exceeds its cap; every unit is reservable again.
func TestReapersRespectPoolCap(t *testing.T) {
	t.Parallel()
	const poolCap = 10
	b := setup(t, poolCap)
	b.stock(t, 1, 1, 100)
	for i := range 20 {
		res, err := b.s.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: fmt.Sprint("t", i), Lines: []reservation.Line{{Item: 1, Quantity: 5, Locations: []int64{1}}}, TTL: time.Second})
		if err != nil || res.Status != reservation.StatusReserved {
			t.Fatalf("reserve %d: %+v %v", i, res, err)
		}
	}
	time.Sleep(1300 * time.Millisecond)
	var holds, units atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				res, err := b.s.Reap(context.Background(), &reservation.ReapParams{Limit: 2})
				if err != nil {
					t.Errorf("reap: %v", err)
					return
				}
				if res.Holds == 0 {
					return
				}
				holds.Add(int64(res.Holds))
				units.Add(res.Units)
				if n := b.db.Count(t, "available_units"); n > poolCap {
					t.Errorf("pool has %d units, cap %d", n, poolCap)
				}
			}
		})
	}
	wg.Wait()
	if holds.Load() != 20 || units.Load() != 100 {
		t.Errorf("reaped %d holds, %d units; want 20, 100", holds.Load(), units.Load())
	}
	if n := b.db.Count(t, "reserved_quantities"); n != 0 {
		t.Errorf("%d holds left", n)
	}
	for i := range 10 {
		res, err := b.s.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: fmt.Sprint("again", i), Lines: []reservation.Line{{Item: 1, Quantity: 10, Locations: []int64{1}}}, TTL: time.Minute})
		if err != nil || res.Status != reservation.StatusReserved {
			t.Fatalf("reserve after reaping %d: %+v %v", i, res, err)
		}
		if n := b.db.Count(t, "available_units"); n > poolCap {
			t.Errorf("pool has %d units, cap %d", n, poolCap)
		}
	}
	if d := b.drift(t); len(d) != 0 {
		t.Errorf("reconcile: %v", d)
	}
}

// i. Adjusting below held + pool trims the pool, and the projection
// (pool + held <= available) holds after every adjust, with reserves and
// releases running. (Each reserver releases what it holds, so holds stay
// below the stock: adjusting below what is held cannot be projected, and
// reconcile reports it, as the conformance suite's adjust test shows.)
func TestAdjustTrimsPoolUnderConcurrentReserves(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	b.stock(t, 1, 1, 1000)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tok := fmt.Sprintf("w%d-%d", w, i)
				res, err := b.s.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: tok, Lines: []reservation.Line{{Item: 1, Quantity: 2, Locations: []int64{1}}}, TTL: time.Minute})
				if err != nil {
					t.Errorf("reserve: %v", err)
					return
				}
				if res.Status == reservation.StatusReserved {
					if _, err := b.s.Release(context.Background(), &reservation.ReleaseParams{Shop: shop, Token: tok}); err != nil {
						t.Errorf("release: %v", err)
						return
					}
				}
			}
		})
	}
	for _, avail := range []int64{800, 600, 450, 300, 200, 150, 120, 100} {
		time.Sleep(50 * time.Millisecond)
		a := avail
		if _, err := b.s.Adjust(context.Background(), &reservation.AdjustParams{Shop: shop, Item: 1, Location: 1, Available: &a}); err != nil {
			t.Fatal(err)
		}
		for _, d := range b.drift(t) {
			if d.Kind == reservation.DriftOverProjected {
				t.Errorf("after adjust to %d: %v", avail, d)
			}
		}
	}
	close(stop)
	wg.Wait()
	var pool, held int64
	if err := b.db.QueryRow("SELECT (SELECT COUNT(*) FROM available_units), (SELECT COALESCE(SUM(quantity),0) FROM reserved_quantities)").Scan(&pool, &held); err != nil {
		t.Fatal(err)
	}
	if pool+held > 100 {
		t.Errorf("pool %d + held %d > available 100", pool, held)
	}
	t.Logf("end: pool %d, held %d, available 100", pool, held)
}

// j. Bad input names the field and changes no row.
func TestBadInputChangesNoRow(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	b.stock(t, 1, 1, 10)
	if _, err := b.s.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: "ok", Lines: one(1, 1), TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	tables := []string{"inventory_ledger", "available_units", "reserved_quantities", "reservation_claims", "pool_replenish_locks"}
	before := map[string]int64{}
	for _, tb := range tables {
		before[tb] = b.db.Count(t, tb)
	}
	huge := int64(1 << 40)
	reserve := func(token string, lines ...reservation.Line) func() error {
		return func() error {
			_, err := b.s.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: token, TTL: time.Minute, Lines: lines})
			return err
		}
	}
	qty := func(q int64) reservation.Line { return reservation.Line{Item: 1, Quantity: q, Locations: []int64{1}} }
	bad := []struct {
		field string
		call  func() error
	}{
		{"lines[0].quantity", reserve("x", qty(0))},
		{"lines[0].quantity", reserve("x", qty(-1))},
		{"lines[0].quantity", reserve("x", qty(huge))},
		{"lines", reserve("x")},
		{"lines[1].item", reserve("x", qty(1), qty(1))},
		{"lines[0].locations", reserve("x", one(1)...)},
		{"token", reserve(strings.Repeat("t", 65), qty(1))},
		{"delta", func() error {
			_, err := b.s.Adjust(context.Background(), &reservation.AdjustParams{Shop: shop, Item: 1, Location: 1, Delta: huge * 1000})
			return err
		}},
		{"allocations[0].quantity", func() error {
			_, err := b.s.Deduct(context.Background(), &reservation.DeductParams{Shop: shop, Token: "ok", Allocations: []reservation.Allocation{{Item: 1, Location: 1}}})
			return err
		}},
	}
	for _, tc := range bad {
		err := tc.call()
		var ve *reservation.ValidationError
		if !errors.As(err, &ve) || ve.Field != tc.field {
			t.Errorf("want a validation error on %s, got %v", tc.field, err)
		}
	}
	for _, tb := range tables {
		if n := b.db.Count(t, tb); n != before[tb] {
			t.Errorf("%s: %d rows after bad calls, %d before", tb, n, before[tb])
		}
	}
	if l := b.ledger(t, 1, 1); l != 10 {
		t.Errorf("ledger = %d, want 10", l)
	}
}

// k. Statements reach the server with their caller tag (read back from the
// server's general log), and the connection hold-time histograms have
// observations for every write path.
func TestCallerTagsAndHoldTimes(t *testing.T) {
	t.Parallel()
	b := setup(t, 5)
	const tagShop = 913_377
	a := int64(10)
	mustOK := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.db.Exec("SET GLOBAL log_output = 'TABLE'"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec("SET GLOBAL general_log = 1"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	decide(b.s)(t, tagShop)
	mustOK(b.s.Adjust(ctx, &reservation.AdjustParams{Shop: tagShop, Item: 1, Location: 1, Available: &a}))
	mustOK(b.s.Reserve(ctx, &reservation.ReserveParams{Shop: tagShop, Token: "a", Lines: one(1, 1), TTL: time.Minute}))
	mustOK(b.s.Reserve(ctx, &reservation.ReserveParams{Shop: tagShop, Token: "b", Lines: one(1, 1), TTL: time.Second}))
	mustOK(b.s.Claim(ctx, &reservation.ClaimParams{Shop: tagShop, Token: "a"}))
	mustOK(b.s.Reserve(ctx, &reservation.ReserveParams{Shop: tagShop, Token: "c", Lines: one(1, 1), TTL: time.Minute}))
	mustOK(b.s.Release(ctx, &reservation.ReleaseParams{Shop: tagShop, Token: "c"}))
	time.Sleep(1100 * time.Millisecond)
	mustOK(b.s.Reap(ctx, &reservation.ReapParams{}))
	if _, err := b.db.Exec("SET GLOBAL general_log = 0"); err != nil {
		t.Fatal(err)
	}
	for _, caller := range []string{"reserve", "replenish", "claim", "release", "reap", "adjust"} {
		var n int
		// The reaper's statements name no shop; everything else names ours.
		filter := fmt.Sprintf("%%%d%%", tagShop)
		if caller == "reap" {
			filter = "%reserved_quantities%"
		}
		err := b.db.QueryRow("SELECT COUNT(*) FROM mysql.general_log WHERE argument LIKE ? AND argument LIKE ?",
			"/*caller='"+caller+"'*/%", filter).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Errorf("no statement tagged caller=%q reached the server", caller)
		}
	}
	mfs, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "reservoir_mysql_conn_hold_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "caller" {
					seen[l.GetValue()] += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	for _, caller := range []string{"reserve", "replenish", "claim", "release", "reap"} {
		if seen[caller] == 0 {
			t.Errorf("hold-time histogram has no observation for caller %q (have %v)", caller, seen)
		}
	}
}

// Regression case "a shadow hold counted with the deduction", found by the
// soak's porcupine check (an undersell after the flip to mysql).
//
// redisShop is a shop Redis decides (no fence): MySQL keeps shadow holds
// there and the legacy claim deducts its ledger.
const redisShop = shop + 1000

func (b bundle) stockShop(t *testing.T, sh, item, loc, n int64) {
	t.Helper()
	if _, err := b.s.Adjust(context.Background(), &reservation.AdjustParams{Shop: sh, Item: item, Location: loc, Available: &n}); err != nil {
		t.Fatal(err)
	}
}

// The legacy Redis claim deducts this ledger; this store, shadowing the
// cart, holds it too. Deduct settles the store's own hold in its
// transaction, so a buyer is never refused units the ledger still has,
// and records the cart as claimed.
func TestDeductSettlesTheShadowHold(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	b.stockShop(t, redisShop, 1, 1, 5)
	line := []reservation.Line{{Item: 1, Quantity: 2, Locations: []int64{1}}}
	if res, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: redisShop, Token: "cart", Lines: line, TTL: time.Minute,
		Authority: reservation.AuthorityRedis, As: reservation.AsShadow}); err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("shadow reserve: %+v %v", res, err)
	}
	deducted := []reservation.Allocation{{Item: 1, Location: 1, Quantity: 2}}
	if d, err := b.s.Deduct(ctx, &reservation.DeductParams{Shop: redisShop, Token: "cart", Allocations: deducted}); err != nil || !d.Applied {
		t.Fatalf("deduct: %+v %v", d, err)
	}
	a, err := b.s.Availability(ctx, &reservation.AvailabilityParams{Shop: redisShop, Item: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.At(1); got != 3 {
		t.Errorf("after the deduction a buyer can reserve %d, want 3: the shadow hold still counts", got)
	}
	if _, err := b.s.Get(ctx, &reservation.GetParams{Shop: redisShop, Token: "cart"}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
		t.Errorf("the cart after the deduction: %v, want ErrAlreadyClaimed", err)
	}
	if d, err := b.s.Deduct(ctx, &reservation.DeductParams{Shop: redisShop, Token: "cart", Allocations: deducted}); err != nil || d.Applied {
		t.Errorf("repeated deduct: %+v %v, want not applied", d, err)
	}
	var ledger int64
	if err := b.db.QueryRow("SELECT available FROM inventory_ledger WHERE shop_id = ? AND inventory_item_id = 1 AND location_id = 1", redisShop).Scan(&ledger); err != nil || ledger != 3 {
		t.Errorf("ledger %d (%v), want 3", ledger, err)
	}
}

// Regression case "a shadow reserve lands after the claim", found by the
// soak's porcupine check (an undersell after a kill switch was released).
//
// The legacy Redis claim's Deduct ran while this store's shadow reserve of
// the same token was still in flight. The reservation's row now settles
// it: Deduct records the cart as claimed, and the reserve's insert of the
// same row either goes first (and Deduct then removes its hold) or finds
// the claim and answers from it.
func TestShadowReserveAfterTheClaimHoldsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	b.stockShop(t, redisShop, 1, 1, 5)
	b.stockShop(t, redisShop, 1, 2, 5)
	// The legacy claim deducted at location 2 (Redis held it there), so it
	// takes no lock this reserve's location-1 units need.
	mysqlstore.SetBeforeHoldInsert(b.s, func() {
		mysqlstore.SetBeforeHoldInsert(b.s, nil)
		d, err := b.s.Deduct(ctx, &reservation.DeductParams{Shop: redisShop, Token: "cart", Allocations: []reservation.Allocation{{Item: 1, Location: 2, Quantity: 2}}})
		if err != nil || !d.Applied {
			t.Errorf("deduct inside the reserve: %+v %v", d, err)
		}
	})
	line := []reservation.Line{{Item: 1, Quantity: 2, Locations: []int64{1}}}
	res, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: redisShop, Token: "cart", Lines: line, TTL: time.Minute,
		Authority: reservation.AuthorityRedis, As: reservation.AsShadow})
	if !errors.Is(err, reservation.ErrAlreadyClaimed) {
		t.Errorf("shadow reserve that the claim overtook: %+v %v, want ErrAlreadyClaimed", res, err)
	}
	if _, err := b.s.Get(ctx, &reservation.GetParams{Shop: redisShop, Token: "cart"}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
		t.Errorf("the claimed cart: %v, want ErrAlreadyClaimed", err)
	}
	a, err := b.s.Availability(ctx, &reservation.AvailabilityParams{Shop: redisShop, Item: 1})
	if err != nil {
		t.Fatal(err)
	}
	if a.At(1) != 5 || a.At(2) != 3 {
		t.Errorf("a buyer can reserve %d at 1 and %d at 2, want 5 and 3", a.At(1), a.At(2))
	}
}

// A claim outlives its tombstone: the ledger keeps the claims row for
// good. Once the reservation's row is forgotten, a claim repeated is a
// replay and a release is refused; and a token reused against the
// contract (reserved again) is never deducted twice.
func TestClaimOutlivesItsTombstone(t *testing.T) {
	t.Parallel()
	b := setup(t, 10)
	ctx := context.Background()
	b.stock(t, 1, 1, 5)
	lines := []reservation.Line{{Item: 1, Quantity: 2, Locations: []int64{1}}}
	if res, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "old", Lines: lines, TTL: time.Minute}); err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	if _, err := b.s.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "old"}); err != nil {
		t.Fatal(err)
	}
	// What the tombstone collector does past Config.TombstoneTTL.
	if _, err := b.db.Exec("DELETE FROM reservations WHERE shop_id = ? AND token = 'old'", shop); err != nil {
		t.Fatal(err)
	}
	if res, err := b.s.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "old"}); err != nil || !res.Replayed || len(res.Allocations) != 1 {
		t.Errorf("claim again: %+v %v, want replayed with its allocations", res, err)
	}
	if _, err := b.s.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: "old"}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
		t.Errorf("release: %v, want ErrAlreadyClaimed", err)
	}
	// Reused against the contract: the new hold is never claimed twice.
	if res, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "old", Lines: lines, TTL: time.Minute}); err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve the reused token: %+v %v", res, err)
	}
	if res, err := b.s.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "old"}); err != nil || !res.Replayed {
		t.Errorf("claim of the reused token: %+v %v, want the first claim replayed", res, err)
	}
	if l := b.ledger(t, 1, 1); l != 3 {
		t.Errorf("ledger %d, want 3: one deduction per token, ever", l)
	}
}

// A tombstone is forgotten once its hold's expiry is older than the
// retention, but not while the change feed still holds a change Redis has
// not applied that is older than the tombstone (Redis must learn it
// first).
func TestTombstonesAreForgottenAfterTheirRetention(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	s, err := mysqlstore.New(mysqlstore.Config{DB: db.DB, PoolCap: 10,
		Limits: reservation.Limits{MaxQuantity: 10, MaxTTL: time.Second}, TombstoneTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	decide(s)(t, shop)
	ctx := context.Background()
	five := int64(5)
	if _, err := s.Adjust(ctx, &reservation.AdjustParams{Shop: shop, Item: 1, Location: 1, Available: &five}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "gone", Lines: one(1, 1), TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: "gone"}); err != nil {
		t.Fatal(err)
	}
	state := func() error {
		_, err := s.Get(ctx, &reservation.GetParams{Shop: shop, Token: "gone"})
		return err
	}
	// Past the hold's expiry plus the retention, the feed still holds the
	// release: the tombstone stays.
	deadline := time.Now().Add(2*time.Second + 500*time.Millisecond)
	for time.Now().Before(deadline) {
		if _, err := s.Reap(ctx, &reservation.ReapParams{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the clock has to move: nothing to wait on
	}
	if err := state(); !errors.Is(err, reservation.ErrReleased) {
		t.Fatalf("with the release still in the feed: %v, want the tombstone (ErrReleased)", err)
	}
	// Delivered: the tombstone goes at the next reap.
	pending, err := s.Pending(ctx, shop, 100)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, c := range pending {
		ids = append(ids, c.ID)
	}
	if err := s.Done(ctx, ids); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reap(ctx, &reservation.ReapParams{}); err != nil {
		t.Fatal(err)
	}
	if err := state(); !errors.Is(err, reservation.ErrNotFound) {
		t.Errorf("after the retention, delivered: %v, want the tombstone forgotten (ErrNotFound)", err)
	}
}

// The relay deletes what it delivered while deciders write new changes.
// With the outbox nearly empty, a plain "id IN (...)" delete is planned as
// a table scan that waits on every change not yet committed (and, under
// REPEATABLE READ, locks the gaps deciders insert into): the relay would
// queue behind the deciders' transactions.
func TestDoneDoesNotWaitForChangesInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, 10)
	ctx := context.Background()
	b.stock(t, 1, 1, 10)
	for i := range 5 {
		if _, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: fmt.Sprint("t", i), Lines: one(1, 1), TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	pending, err := b.s.Pending(ctx, shop, 100)
	if err != nil || len(pending) < 5 {
		t.Fatalf("pending: %d changes, %v", len(pending), err)
	}
	// A decision in flight: its change is written, not committed.
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `INSERT INTO reservation_outbox (shop_id, kind, token) VALUES (?, 'state', 'in-flight')`, shop); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, c := range pending {
		ids = append(ids, c.ID)
	}
	// No timing is asserted: a delete that waits ends in a lock wait
	// timeout (the store's sessions wait 2 s) and fails the test.
	if err := b.s.Done(ctx, ids); err != nil {
		t.Fatalf("delete the delivered changes while one is in flight: %v", err)
	}
	if left, err := b.s.Pending(ctx, shop, 100); err != nil || len(left) != 0 {
		t.Fatalf("after Done: %d changes pending, %v; want none", len(left), err)
	}
}

// retriesOf reads reservoir_mysql_tx_retries_total for a caller and reason.
func retriesOf(t *testing.T, b bundle, caller, reason string) float64 {
	t.Helper()
	return metricSum(t, b, "reservoir_mysql_tx_retries_total", "caller", caller, "reason", reason)
}

// metricSum is the sum of the store's counter name over the series whose
// labels match the name-value pairs of labels (every series when none).
func metricSum(t *testing.T, b bundle, name string, labels ...string) float64 {
	t.Helper()
	fams, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
