package mirror_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/seed31b0e981/reservoir/internal/faults"
	"github.com/seed31b0e981/reservoir/internal/testbuf"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// servers are the Redis deployments the relay and handoff tests run
// against: a shop's keys share one hash slot, which only the cluster
// checks.
var servers = []struct {
	name string
	new  func(testing.TB) *testredis.Redis
}{
	{"standalone", testredis.New},
	{"cluster", testredis.NewCluster},
}

const (
	pod     = "p"
	shop    = 42
	item    = 1001
	loc     = 1
	poolCap = 100
	// waitLimit bounds every wait for an observable condition: far above
	// what any of them takes, so only a real failure reaches it.
	waitLimit = 15 * time.Second
)

// bundle is one pod: a fresh database, a fresh Redis prefix, the two
// stores on them and a mirror between them.
type bundle struct {
	db  *testdb.DB
	r   *testredis.Redis
	my  *mysqlstore.Store
	rd  *redisstore.Store
	m   *mirror.Mirror
	reg *prometheus.Registry
	log *testbuf.Buffer
}

// setup builds a bundle on srv; edit, when set, changes the mirror's
// config. No relay runs: a test that wants one calls run.
func setup(t *testing.T, srv func(testing.TB) *testredis.Redis, edit func(*mirror.Config)) *bundle {
	t.Helper()
	b := &bundle{db: testdb.New(t), r: srv(t)}
	b.my = newMySQL(t, b.db.DB, nil)
	b.rd = newRedis(t, b.r, b.my)
	b.m, b.reg, b.log = newMirror(t, b.my, b.rd, edit)
	return b
}

func newMySQL(t *testing.T, db *sql.DB, reg prometheus.Registerer) *mysqlstore.Store {
	t.Helper()
	s, err := mysqlstore.New(mysqlstore.Config{DB: db, PoolCap: poolCap, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newRedis(t *testing.T, r *testredis.Redis, ledger *mysqlstore.Store) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(redisstore.Config{Client: r.Client, Prefix: r.Prefix, Ledger: ledger, Source: ledger,
		Limits: reservation.Limits{MaxQuantity: poolCap}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newMirror builds a mirror with its own registry and a log kept in a
// buffer (shown when the test fails: the relay logs from its own
// goroutine).
func newMirror(t *testing.T, my *mysqlstore.Store, rd *redisstore.Store, edit func(*mirror.Config)) (*mirror.Mirror, *prometheus.Registry, *testbuf.Buffer) {
	t.Helper()
	reg, log := prometheus.NewRegistry(), &testbuf.Buffer{}
	cfg := mirror.Config{Pod: pod, MySQL: my, Redis: rd, Registerer: reg, Logger: slog.New(slog.NewTextHandler(log, nil)),
		Poll: 10 * time.Millisecond, Standby: 100 * time.Millisecond}
	if edit != nil {
		edit(&cfg)
	}
	m, err := mirror.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(context.Background()); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("mirror log:\n%s", log)
		}
	})
	return m, reg, log
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// run starts m's relay and returns what stops it: it cancels Run's
// context and waits for Run to return (also done at cleanup).
func run(t *testing.T, m *mirror.Mirror) (stop func()) {
	t.Helper()
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(c) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v, want context.Canceled", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds, failing the test at waitLimit.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", waitLimit, what)
		}
		<-tick.C
	}
}

// lagIs returns the condition "the feed holds n changes".
func lagIs(c context.Context, m *mirror.Mirror, n int64) func() (bool, error) {
	return func() (bool, error) {
		l, err := m.Lag(c)
		return l.Changes == n, err
	}
}

// metric reads the value of a counter or gauge series of g (labels are
// name, value pairs; a series has to carry them all), 0 when there is no
// such series.
func metric(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	var v float64
	each(t, g, name, labels, func(m metricPoint) { v += m.value })
	return v
}

// samples reads how many observations a histogram series of g has.
func samples(t *testing.T, g prometheus.Gatherer, name string, labels ...string) uint64 {
	t.Helper()
	var n uint64
	each(t, g, name, labels, func(m metricPoint) { n += m.samples })
	return n
}

type metricPoint struct {
	value   float64
	samples uint64
}

func each(t *testing.T, g prometheus.Gatherer, name string, labels []string, fn func(metricPoint)) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
					return l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}) {
					continue series
				}
			}
			fn(metricPoint{value: m.GetCounter().GetValue() + m.GetGauge().GetValue(), samples: m.GetHistogram().GetSampleCount()})
		}
	}
}

func lines(qty int64) []reservation.Line {
	return []reservation.Line{{Item: item, Quantity: qty, Locations: []int64{loc}}}
}

func alloc(qty int64) []reservation.Allocation {
	return []reservation.Allocation{{Item: item, Location: loc, Quantity: qty}}
}

// reserve has s decide a hold of qty units of the test item for token.
func reserve(t *testing.T, s reservation.Store, sh int64, token string, qty int64) reservation.ReserveResult {
	t.Helper()
	res, err := s.Reserve(ctx(t), &reservation.ReserveParams{Shop: sh, Token: token, Lines: lines(qty), TTL: 10 * time.Minute})
	if err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("%s reserve %s of shop %d: %+v %v", s.Name(), token, sh, res, err)
	}
	return res
}

// refuse has s decide a reserve of qty units that it must refuse.
func refuse(t *testing.T, s reservation.Store, sh int64, token string, qty int64) reservation.ReserveResult {
	t.Helper()
	res, err := s.Reserve(ctx(t), &reservation.ReserveParams{Shop: sh, Token: token, Lines: lines(qty), TTL: 10 * time.Minute})
	if err != nil || res.Status != reservation.StatusInsufficient {
		t.Fatalf("%s reserve %s of shop %d: %+v %v, want insufficient", s.Name(), token, sh, res, err)
	}
	return res
}

// setStock sets the ledger's stock of the test item through s.
func setStock(t *testing.T, s reservation.Store, sh, n int64) {
	t.Helper()
	if _, err := s.Adjust(ctx(t), &reservation.AdjustParams{Shop: sh, Item: item, Location: loc, Available: &n}); err != nil {
		t.Fatalf("stock shop %d = %d: %v", sh, n, err)
	}
}

// unheld is what a buyer could reserve of the test item in s.
func unheld(t *testing.T, s reservation.Store, sh int64) int64 {
	t.Helper()
	a, err := s.Availability(ctx(t), &reservation.AvailabilityParams{Shop: sh, Item: item})
	if err != nil {
		t.Fatal(err)
	}
	return a.At(loc)
}

func get(t *testing.T, s reservation.Store, sh int64, token string) (reservation.Hold, error) {
	t.Helper()
	return s.Get(ctx(t), &reservation.GetParams{Shop: sh, Token: token})
}

// handoff hands sh to store to at epoch through m and checks it happened.
func handoff(t *testing.T, m *mirror.Mirror, sh int64, to reservation.Authority, epoch int64) {
	t.Helper()
	f, err := m.HandoffWait(ctx(t), sh, to, epoch, false)
	if want := (reservation.Fence{Decider: to, Epoch: epoch}); err != nil || f != want {
		t.Fatalf("hand shop %d to %s@%d: %v %v", sh, to, epoch, f, err)
	}
}

// fences renders both stores' fences of sh.
func (b *bundle) fences(t *testing.T, sh int64) string {
	t.Helper()
	mf, err := b.my.Fence(ctx(t), sh)
	if err != nil {
		t.Fatal(err)
	}
	rf, err := b.rd.Fence(ctx(t), sh)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("mysql %s, redis %s", mf, rf)
}

// notDecider checks that err is a refusal to decide with fence want.
func notDecider(t *testing.T, what string, err error, want string) {
	t.Helper()
	var nd *reservation.NotDeciderError
	if !errors.As(err, &nd) || nd.Fence.String() != want {
		t.Errorf("%s: %v, want a *reservation.NotDeciderError with fence %s", what, err, want)
	}
}

// expireInMySQL moves a MySQL hold's expiry into the past on the
// database's clock, as if its time had run out (instead of sleeping).
func (b *bundle) expireInMySQL(t *testing.T, sh int64, token string) {
	t.Helper()
	for _, table := range []string{"reservations", "reserved_quantities"} {
		res, err := b.db.ExecContext(ctx(t), "UPDATE "+table+" SET expires_at = NOW(3) - INTERVAL 1 SECOND WHERE shop_id = ? AND token = ?", sh, token)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			t.Fatalf("age %s of shop %d: no row in %s", token, sh, table)
		}
	}
}

// redisState renders a shop's Redis state without what differs between
// two shops that went through the same calls at different moments (the
// expiries): fence, holds, tombstones and the test item's quantity.
func (b *bundle) redisState(t *testing.T, sh int64) string {
	t.Helper()
	snap, err := b.rd.Snapshot(ctx(t), sh)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	out = append(out, "fence "+snap.Fence.String())
	for _, h := range snap.Holds {
		out = append(out, fmt.Sprintf("hold %s %v by %s", h.Token, h.Allocations, h.Authority))
	}
	for _, tb := range snap.Tombstones {
		out = append(out, fmt.Sprintf("tomb %s %s %v short %v", tb.Token, tb.State, tb.Allocations, tb.Short))
	}
	out = append(out, fmt.Sprintf("unheld %d", unheld(t, b.rd, sh)))
	return strings.Join(out, "\n")
}

// mysqlState renders a shop's MySQL state the same way: fence,
// reservations, hold lines, ledger and what a buyer could reserve.
func (b *bundle) mysqlState(t *testing.T, sh int64) string {
	t.Helper()
	c := ctx(t)
	mf, err := b.my.Fence(c, sh)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"fence " + mf.String()}
	rows, err := b.db.QueryContext(c, "SELECT token, state, decided_by, allocations, short FROM reservations WHERE shop_id = ? ORDER BY token", sh)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var token, state, by, allocs, short string
		if err := rows.Scan(&token, &state, &by, &allocs, &short); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("reservation %s %s by %s [%s] short [%s]", token, state, by, allocs, short))
	}
	rows.Close()
	rows, err = b.db.QueryContext(c, "SELECT token, inventory_item_id, location_id, quantity, authority FROM reserved_quantities WHERE shop_id = ? ORDER BY token, inventory_item_id, location_id", sh)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var token, by string
		var it, l, q int64
		if err := rows.Scan(&token, &it, &l, &q, &by); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("hold line %s %d:%d:%d by %s", token, it, l, q, by))
	}
	rows.Close()
	stock, err := b.my.Stock(c, &reservation.StockParams{Shop: sh})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stock {
		out = append(out, fmt.Sprintf("ledger %d:%d = %d", s.Item, s.Location, s.Available))
	}
	out = append(out, fmt.Sprintf("unheld %d", unheld(t, b.my, sh)))
	return strings.Join(out, "\n")
}

// 1. The relay delivers every kind of MySQL decision into Redis: Redis's
// holds, tombstones and quantities end as MySQL's, the feed is empty, and
// the applied metric counts each change.
func TestRelayDeliversMySQLDecisions(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, srv.new, nil)
			c := ctx(t)
			handoff(t, b.m, shop, reservation.AuthorityMySQL, 1)
			run(t, b.m)

			setStock(t, b.my, shop, 10) // adjust
			for _, r := range []struct {
				token string
				qty   int64
			}{{"claimed", 3}, {"released", 2}, {"expired", 1}, {"held", 1}} {
				reserve(t, b.my, shop, r.token, r.qty) // 4 states
			}
			if res, err := b.my.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "released"}); err != nil || !res.Released {
				t.Fatalf("release: %+v %v", res, err)
			}
			if res, err := b.my.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "claimed"}); err != nil || res.Outcome != reservation.OutcomeClaimed {
				t.Fatalf("claim: %+v %v", res, err)
			}
			b.expireInMySQL(t, shop, "expired")
			if res, err := b.my.Reap(c, &reservation.ReapParams{}); err != nil || res.Holds != 1 {
				t.Fatalf("reap: %+v %v, want the one hold expired", res, err)
			}
			if _, err := b.my.Adjust(c, &reservation.AdjustParams{Shop: shop, Item: item, Location: loc, Delta: 5}); err != nil {
				t.Fatal(err)
			}

			waitFor(t, "the relay to empty the feed", lagIs(c, b.m, 0))
			if l, err := b.m.Lag(c); err != nil || l.Changes != 0 || l.Oldest != 0 {
				t.Errorf("lag after delivery: %+v %v, want none", l, err)
			}
			for token, want := range map[string]error{"claimed": reservation.ErrAlreadyClaimed, "released": reservation.ErrReleased, "expired": reservation.ErrExpired} {
				if _, err := get(t, b.rd, shop, token); !errors.Is(err, want) {
					t.Errorf("redis get %s: %v, want %v", token, err, want)
				}
			}
			mh, err := get(t, b.my, shop, "held")
			if err != nil {
				t.Fatal(err)
			}
			rh, err := get(t, b.rd, shop, "held")
			if err != nil || !slices.Equal(rh.Allocations, mh.Allocations) || !rh.ExpiresAt.Equal(mh.ExpiresAt) || rh.Authority != reservation.AuthorityMySQL {
				t.Errorf("redis hold: %+v %v, want MySQL's %+v with authority mysql", rh, err, mh)
			}
			// 10 stocked, 3 claimed, 1 held, 5 added.
			if r, m := unheld(t, b.rd, shop), unheld(t, b.my, shop); r != 11 || m != 11 {
				t.Errorf("unheld: redis %d, mysql %d, want 11 in both", r, m)
			}
			snap, err := b.rd.Snapshot(c, shop)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range snap.Holds {
				got = append(got, h.Token+" held")
			}
			for _, tb := range snap.Tombstones {
				got = append(got, tb.Token+" "+string(tb.State))
			}
			if want := "held held,claimed claimed,expired expired,released released"; strings.Join(got, ",") != want {
				t.Errorf("redis snapshot: %s, want %s", strings.Join(got, ","), want)
			}

			if n := metric(t, b.reg, "reservoir_mirror_applied_total", "kind", "state", "reservoir_pod", pod); n != 7 {
				t.Errorf("applied state changes = %v, want 7 (4 reserves, a release, a claim, an expiry)", n)
			}
			if n := metric(t, b.reg, "reservoir_mirror_applied_total", "kind", "adjust"); n != 2 {
				t.Errorf("applied adjusts = %v, want 2", n)
			}
			if n, err := testutil.GatherAndCount(b.reg, "reservoir_mirror_applied_total"); err != nil || n != 2 {
				t.Errorf("applied series = %d %v, want 2 (state and adjust: no fence change was relayed)", n, err)
			}
			if n := metric(t, b.reg, "reservoir_mirror_apply_failures_total"); n != 0 {
				t.Errorf("apply failures = %v, want 0", n)
			}
			if n := metric(t, b.reg, "reservoir_mirror_relay_active", "reservoir_pod", pod); n != 1 {
				t.Errorf("relay_active = %v, want 1 while the only relay runs", n)
			}
			if n := metric(t, b.reg, "reservoir_mirror_backlog_changes"); n != 0 {
				t.Errorf("backlog gauge = %v after Lag measured an empty feed, want 0", n)
			}
		})
	}
}

// 2. Two replicas of a pod both run the relay: one is active, the other
// stands by (it keeps trying and is refused); when the active one stops,
// the other takes over within a few standby periods and delivers.
func TestOneActiveRelayPerPod(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New, nil)
	c := ctx(t)
	handoff(t, b.m, shop, reservation.AuthorityMySQL, 1)
	setStock(t, b.my, shop, 10)

	type replica struct {
		my    *mysqlstore.Store
		myReg *prometheus.Registry
		m     *mirror.Mirror
		reg   *prometheus.Registry
		stop  func()
	}
	var rs [2]*replica
	for i := range rs {
		r := &replica{myReg: prometheus.NewRegistry()}
		r.my = newMySQL(t, b.db.DB, r.myReg) // its own store on the same database
		r.m, r.reg, _ = newMirror(t, r.my, newRedis(t, b.r, r.my), nil)
		rs[i] = r
	}
	for _, r := range rs {
		r.stop = run(t, r.m)
	}
	active := func(r *replica) float64 {
		return metric(t, r.reg, "reservoir_mirror_relay_active", "reservoir_pod", pod)
	}
	// A refused attempt returns its connection at once (and is observed);
	// the lease held keeps its connection.
	refusals := func(r *replica) uint64 {
		return samples(t, r.myReg, "reservoir_mysql_conn_hold_seconds", "caller", "lease")
	}
	var leader, standby *replica
	waitFor(t, "one relay active and the other refused twice", func() (bool, error) {
		a0, a1 := active(rs[0]), active(rs[1])
		if a0+a1 > 1 {
			return false, fmt.Errorf("both replicas' relays are active")
		}
		switch {
		case a0 == 1:
			leader, standby = rs[0], rs[1]
		case a1 == 1:
			leader, standby = rs[1], rs[0]
		default:
			return false, nil
		}
		return refusals(standby) >= 2, nil
	})
	if active(standby) != 0 {
		t.Fatalf("the standby replica reports relay_active %v", active(standby))
	}
	reserve(t, b.my, shop, "first", 1)
	waitFor(t, "the active relay to deliver", lagIs(c, b.m, 0))
	if n := metric(t, standby.reg, "reservoir_mirror_applied_total"); n != 0 {
		t.Errorf("the standby applied %v changes", n)
	}

	leader.stop()
	if a := active(leader); a != 0 {
		t.Errorf("the stopped relay reports relay_active %v", a)
	}
	start := time.Now()
	waitFor(t, "the standby to take over", func() (bool, error) { return active(standby) == 1, nil })
	// Standby is 100ms: a takeover within a few periods (slack for -race).
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the standby took %s to take over, want about one standby period (100ms)", took)
	}
	reserve(t, b.my, shop, "second", 2)
	waitFor(t, "the new relay to deliver", func() (bool, error) {
		_, err := get(t, b.rd, shop, "second")
		return err == nil, nil
	})
	// The hold is readable as soon as Redis ran the apply; the relay
	// counts it when the reply is back, before it marks the change done.
	waitFor(t, "the new relay to mark it done", lagIs(c, b.m, 0))
	if n := metric(t, standby.reg, "reservoir_mirror_applied_total"); n < 1 {
		t.Errorf("the new relay applied %v changes, want at least the second reserve", n)
	}
}

// 3. A handoff to Redis drains the feed: with no relay running, the hold
// MySQL decided reaches Redis before Redis's fence lets it decide, and
// MySQL decides nothing after. With the feed disabled (the knob), the
// same handoff leaves Redis without the hold: the check below catches it.
func TestHandoffToRedisDrains(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		for _, tc := range []struct {
			name     string
			disabled bool
		}{{"drained", false}, {"feed disabled", true}} {
			t.Run(srv.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, srv.new, func(c *mirror.Config) { c.Disabled = tc.disabled })
				c := ctx(t)
				handoff(t, b.m, shop, reservation.AuthorityMySQL, 1)
				setStock(t, b.my, shop, 10)
				reserve(t, b.my, shop, "kept", 3)
				if _, err := get(t, b.rd, shop, "kept"); !errors.Is(err, reservation.ErrNotFound) {
					t.Fatalf("before the handoff Redis has the hold (%v): nothing would be drained", err)
				}

				f, err := b.m.Handoff(c, shop, reservation.AuthorityRedis, 2, false)
				if err != nil || f.String() != "redis@2" {
					t.Fatalf("handoff: %v %v, want redis@2", f, err)
				}
				if got := b.fences(t, shop); got != "mysql redis@2, redis redis@2" {
					t.Errorf("fences: %s", got)
				}
				_, err = b.my.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "late", Lines: lines(1), TTL: time.Minute})
				notDecider(t, "a deciding MySQL reserve after the handoff", err, "redis@2")

				// What the handoff promises: Redis holds what MySQL held.
				lossless := func() error {
					h, err := get(t, b.rd, shop, "kept")
					if err != nil || !slices.Equal(h.Allocations, alloc(3)) || h.Authority != reservation.AuthorityMySQL {
						return fmt.Errorf("redis's hold for kept: %+v %v, want %v decided by mysql", h, err, alloc(3))
					}
					if u := unheld(t, b.rd, shop); u != 7 {
						return fmt.Errorf("redis unheld %d, want 7 (10 stocked, 3 held by MySQL)", u)
					}
					return nil
				}
				if tc.disabled {
					if lossless() == nil {
						t.Fatal("with the feed disabled Redis still holds MySQL's hold: this test cannot tell a drained handoff from one that is not")
					}
					if n := metric(t, b.reg, "reservoir_handoffs_total", "to", "redis", "result", "undrained"); n != 1 {
						t.Errorf("undrained handoffs = %v, want 1", n)
					}
					return
				}
				if err := lossless(); err != nil {
					t.Error(err)
				}
				// Redis decides now, on the drained state: the 3 units
				// MySQL holds are not sold again.
				refuse(t, b.rd, shop, "too-many", 8)
				reserve(t, b.rd, shop, "rest", 7)
				if l, err := b.m.Lag(c); err != nil || l.Changes != 0 {
					t.Errorf("lag after the drain: %+v %v, want none", l, err)
				}
				if n := metric(t, b.reg, "reservoir_handoffs_total", "to", "redis", "result", "done"); n != 1 {
					t.Errorf("done handoffs to redis = %v, want 1", n)
				}
			})
		}
	}
}

// 4. A handoff to MySQL copies Redis's state: MySQL holds Redis's holds
// and answers from Redis's tombstones, and Redis decides nothing after.
func TestHandoffToMySQLCopies(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, srv.new, nil)
			c := ctx(t)
			// Redis decides (no fence anywhere).
			setStock(t, b.rd, shop, 10)
			held := []reservation.ReserveResult{reserve(t, b.rd, shop, "h1", 2), reserve(t, b.rd, shop, "h2", 1)}
			reserve(t, b.rd, shop, "released", 1)
			if res, err := b.rd.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "released"}); err != nil || !res.Released {
				t.Fatalf("redis release: %+v %v", res, err)
			}
			refused := refuse(t, b.rd, shop, "refused", 8)

			f, err := b.m.HandoffWait(c, shop, reservation.AuthorityMySQL, 3, false)
			if err != nil || f.String() != "mysql@3" {
				t.Fatalf("handoff: %v %v, want mysql@3", f, err)
			}
			if got := b.fences(t, shop); got != "mysql mysql@3, redis mysql@3" {
				t.Errorf("fences: %s", got)
			}
			for i, token := range []string{"h1", "h2"} {
				h, err := get(t, b.my, shop, token)
				if err != nil || !slices.Equal(h.Allocations, held[i].Allocations) || !h.ExpiresAt.Equal(held[i].ExpiresAt) || h.Authority != reservation.AuthorityRedis {
					t.Errorf("mysql hold %s: %+v %v, want Redis's %+v", token, h, err, held[i])
				}
			}
			if _, err := b.my.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "released"}); !errors.Is(err, reservation.ErrReleased) {
				t.Errorf("mysql claim of the released token: %v, want ErrReleased", err)
			}
			res, err := b.my.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "refused", Lines: lines(8), TTL: 10 * time.Minute})
			if err != nil || res.Status != reservation.StatusInsufficient || !res.Replayed || !slices.Equal(res.Short, refused.Short) {
				t.Errorf("mysql reserve of the refused token: %+v %v, want Redis's refusal %v replayed", res, err, refused.Short)
			}
			if u := unheld(t, b.my, shop); u != 7 {
				t.Errorf("mysql unheld %d, want 7 (10 stocked, 3 held)", u)
			}
			_, err = b.rd.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "late", Lines: lines(1), TTL: time.Minute})
			notDecider(t, "a deciding Redis reserve after the handoff", err, "mysql@3")
			// MySQL decides on the copied state: it claims Redis's hold
			// and does not sell the other one's units again.
			if res, err := b.my.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "h1"}); err != nil || !slices.Equal(res.Allocations, held[0].Allocations) {
				t.Errorf("mysql claim of h1: %+v %v", res, err)
			}
			refuse(t, b.my, shop, "too-many", 8)
		})
	}
}

// 5a. Concurrent handoffs of one shop to one store at one epoch, from
// several replicas at once, all succeed and end where one handoff ends.
func TestConcurrentHandoffsEndAsOne(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, srv.new, nil)
			const once, many = 7, 8 // two shops through the same calls
			// Four replicas, each with its own stores: concurrent calls
			// meet in the stores, not only in one mirror's flights.
			var replicas []*mirror.Mirror
			for range 4 {
				my := newMySQL(t, b.db.DB, nil)
				m, _, _ := newMirror(t, my, newRedis(t, b.r, my), nil)
				replicas = append(replicas, m)
			}
			concurrently := func(to reservation.Authority, epoch int64) {
				t.Helper()
				var wg sync.WaitGroup
				results := make([]string, 8)
				for i := range results {
					wg.Go(func() {
						f, err := replicas[i%len(replicas)].HandoffWait(ctx(t), many, to, epoch, false)
						results[i] = fmt.Sprintf("%v %v", f, err)
					})
				}
				wg.Wait()
				// A handoff to MySQL copies on one replica at a time: the
				// others answer Redis's fence at once (the caller follows
				// Redis while the copier works), and the copier's callers
				// return once it cut over.
				want := fmt.Sprintf("%s@%d <nil>", to, epoch)
				done := 0
				for i, r := range results {
					switch {
					case r == want:
						done++
					case to == reservation.AuthorityMySQL && r == "redis@0 <nil>":
					default:
						t.Errorf("handoff %d to %s@%d: %s, want %s", i, to, epoch, r, want)
					}
				}
				if done == 0 {
					t.Errorf("no handoff to %s@%d returned its fence: %v", to, epoch, results)
				}
				if got, want := b.fences(t, many), fmt.Sprintf("mysql %s@%d, redis %[1]s@%[2]d", to, epoch); got != want {
					t.Errorf("fences after the handoffs to %s@%d: %s, want %s", to, epoch, got, want)
				}
			}

			for _, sh := range []int64{once, many} {
				setStock(t, b.rd, sh, 10)
				reserve(t, b.rd, sh, "h1", 2)
				reserve(t, b.rd, sh, "h2", 1)
				if _, err := b.rd.Release(ctx(t), &reservation.ReleaseParams{Shop: sh, Token: "h2"}); err != nil {
					t.Fatal(err)
				}
				refuse(t, b.rd, sh, "refused", 9)
			}
			handoff(t, b.m, once, reservation.AuthorityMySQL, 3)
			concurrently(reservation.AuthorityMySQL, 3)
			if a, m := b.mysqlState(t, once), b.mysqlState(t, many); a != m {
				t.Errorf("MySQL after one handoff:\n%s\nafter 8 concurrent ones:\n%s", a, m)
			}

			for _, sh := range []int64{once, many} {
				reserve(t, b.my, sh, "m1", 3)
			}
			handoff(t, b.m, once, reservation.AuthorityRedis, 4)
			concurrently(reservation.AuthorityRedis, 4)
			one, all := b.redisState(t, once), b.redisState(t, many)
			if one != all {
				t.Errorf("Redis after one handoff:\n%s\nafter 8 concurrent ones:\n%s", one, all)
			}
			if !strings.Contains(all, "hold m1 [{1001 1 3}] by mysql") || !strings.Contains(all, "unheld 5") {
				t.Errorf("Redis after the handoffs lacks MySQL's hold:\n%s", all)
			}

			// Repeated later, it changes nothing either.
			handoff(t, replicas[0], many, reservation.AuthorityRedis, 4)
			if again := b.redisState(t, many); again != all {
				t.Errorf("Redis after a repeated handoff:\n%s\nbefore:\n%s", again, all)
			}
			if l, err := b.m.Lag(ctx(t)); err != nil || l.Changes != 0 {
				t.Errorf("lag: %+v %v, want none (a repeated yield records no fence change)", l, err)
			}
		})
	}
}

// 5b. A handoff at a lower epoch than the fence changes nothing and
// returns the newer fence, which may name the other store.
func TestHandoffAtALowerEpochChangesNothing(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, srv.new, nil)
			c := ctx(t)
			setStock(t, b.rd, shop, 10)
			reserve(t, b.rd, shop, "r1", 1)
			handoff(t, b.m, shop, reservation.AuthorityMySQL, 3)
			reserve(t, b.my, shop, "m1", 2)
			state := func() string {
				l, err := b.m.Lag(c)
				if err != nil {
					t.Fatal(err)
				}
				return fmt.Sprintf("%s\n%s\n%s\nlag %d", b.fences(t, shop), b.mysqlState(t, shop), b.redisState(t, shop), l.Changes)
			}
			before := state()

			for _, tc := range []struct {
				to     reservation.Authority
				epoch  int64
				result string
			}{
				{reservation.AuthorityRedis, 2, "overtaken"}, // the kill switch of an older flags version
				{reservation.AuthorityMySQL, 2, "done"},      // an older handoff to the same store
				{reservation.AuthorityRedis, 3, "overtaken"}, // the same epoch: the first one won
			} {
				f, err := b.m.HandoffWait(c, shop, tc.to, tc.epoch, false)
				if err != nil || f.String() != "mysql@3" {
					t.Errorf("handoff to %s@%d: %v %v, want mysql@3", tc.to, tc.epoch, f, err)
				}
				if after := state(); after != before {
					t.Errorf("handoff to %s@%d changed the stores:\n%s\nwas:\n%s", tc.to, tc.epoch, after, before)
				}
			}
			if n := metric(t, b.reg, "reservoir_handoffs_total", "to", "redis", "result", "overtaken"); n != 2 {
				t.Errorf("overtaken handoffs to redis = %v, want 2", n)
			}
			reserve(t, b.my, shop, "m2", 1) // MySQL still decides

			handoff(t, b.m, shop, reservation.AuthorityRedis, 5)
			before = state()
			f, err := b.m.HandoffWait(c, shop, reservation.AuthorityMySQL, 4, false)
			if err != nil || f.String() != "redis@5" {
				t.Errorf("handoff to mysql@4 after redis@5: %v %v, want redis@5", f, err)
			}
			if after := state(); after != before {
				t.Errorf("handoff to mysql@4 changed the stores:\n%s\nwas:\n%s", after, before)
			}
			if n := metric(t, b.reg, "reservoir_handoffs_total", "to", "mysql", "result", "overtaken"); n != 1 {
				t.Errorf("overtaken handoffs to mysql = %v, want 1", n)
			}
			reserve(t, b.rd, shop, "r2", 1) // Redis still decides
		})
	}
}

// 5c. A handoff to MySQL that a newer handoff to Redis overtook between
// its two steps (MySQL already yielded at a newer epoch, its drain not
// done yet) returns the newer fence, which names Redis: it did not make
// MySQL decide and must be counted as overtaken, not done.
//
// BUG: toMySQL returns TakeOver's fence with result "done" whatever store
// it names.
func TestHandoffOvertakenAtTakeOverIsCountedOvertaken(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New, nil)
	c := ctx(t)
	handoff(t, b.m, shop, reservation.AuthorityMySQL, 3)
	// A handoff to Redis at epoch 5 has yielded MySQL; its drain has not
	// run yet.
	if f, err := b.my.Yield(c, shop, 5); err != nil || f.String() != "redis@5" {
		t.Fatalf("yield: %v %v", f, err)
	}
	f, err := b.m.HandoffWait(c, shop, reservation.AuthorityMySQL, 4, false)
	if err != nil || f.String() != "redis@5" {
		t.Fatalf("handoff to mysql@4: %v %v, want the newer fence redis@5", f, err)
	}
	done := metric(t, b.reg, "reservoir_handoffs_total", "to", "mysql", "result", "done")
	overtaken := metric(t, b.reg, "reservoir_handoffs_total", "to", "mysql", "result", "overtaken")
	if done != 1 || overtaken != 1 {
		t.Errorf("handoffs to mysql: done %v, overtaken %v; want 1 and 1 (the first handoff, then this one): the returned fence names redis", done, overtaken)
	}
}

// 6. A forced handoff to Redis (kill switch redis_only) when MySQL does
// not answer: Redis takes the shop, counted and logged; without force the
// same call fails and leaves Redis's fence alone.
func TestForcedHandoffWhenMySQLRefuses(t *testing.T) {
	t.Parallel()
	r := testredis.New(t)
	ledger := newMySQL(t, testdb.New(t).DB, nil)
	rd := newRedis(t, r, ledger)
	// MySQL's server is gone: its port refuses connections.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.User, cfg.DBName, cfg.Timeout = "tcp", addr, "root", "gone", 300*time.Millisecond
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dead := sql.OpenDB(connector)
	t.Cleanup(func() { dead.Close() })
	m, reg, log := newMirror(t, newMySQL(t, dead, nil), rd, func(c *mirror.Config) { c.ForceAfter = 200 * time.Millisecond })

	setStock(t, rd, shop, 10)
	if f, err := rd.Yield(ctx(t), shop, 1); err != nil || f.String() != "mysql@1" {
		t.Fatalf("redis yield: %v %v", f, err) // MySQL decided the shop
	}
	checkForce(t, m, rd, reg, log)
}

// The same when MySQL black-holes every packet (toxiproxy's timeout):
// the forced handoff returns within a bound, not at the caller's
// deadline, and once MySQL answers again Resync refuses to rebuild Redis
// from it.
func TestForcedHandoffWhenMySQLHangs(t *testing.T) {
	t.Parallel()
	db, r := testdb.New(t), testredis.New(t)
	cfg, err := mysql.ParseDSN(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Net != "tcp" {
		t.Fatalf("%s uses %s: the proxy would be bypassed", testdb.EnvDSN, cfg.Net)
	}
	proxy := faults.Start(t, "mysql", cfg.Addr)
	cfg.Addr, cfg.Timeout = proxy.Addr(), 300*time.Millisecond
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	proxied := sql.OpenDB(connector)
	t.Cleanup(func() { proxied.Close() })
	direct := newMySQL(t, db.DB, nil)
	my := newMySQL(t, proxied, nil)
	rd := newRedis(t, r, direct)
	m, reg, log := newMirror(t, my, rd, func(c *mirror.Config) { c.ForceAfter = 200 * time.Millisecond })

	setStock(t, rd, shop, 10)
	handoff(t, m, shop, reservation.AuthorityMySQL, 1)
	in, err := proxy.Inject(faults.Fault{Kind: faults.Timeout})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	checkForce(t, m, rd, reg, log)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the handoffs took %s against a MySQL that does not answer, want about ForceAfter (200ms) each", took)
	}
	if err := in.Heal(); err != nil {
		t.Fatal(err)
	}
	if f, err := direct.Fence(ctx(t), shop); err != nil || f.String() != "mysql@1" {
		t.Errorf("MySQL's fence after the forced handoff: %v %v, want mysql@1 (it never heard of it)", f, err)
	}
	if err := m.Resync(ctx(t), shop); !errors.Is(err, mirror.ErrForcedHandoff) {
		t.Errorf("resync of the shop Redis took by force: %v, want ErrForcedHandoff", err)
	}
	if f, err := rd.Fence(ctx(t), shop); err != nil || f.String() != "redis@2" {
		t.Errorf("Redis's fence after the refused resync: %v %v, want redis@2", f, err)
	}
}

// checkForce runs the handoff to Redis at epoch 2 of a shop Redis sees at
// mysql@1 while m's MySQL does not answer: without force, then with it.
func checkForce(t *testing.T, m *mirror.Mirror, rd *redisstore.Store, reg *prometheus.Registry, log *testbuf.Buffer) {
	t.Helper()
	// Far longer than both handoffs may take: neither waits for it.
	c, cancelAll := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelAll()
	unforced, cancel := context.WithTimeout(c, time.Second)
	defer cancel()
	if f, err := m.Handoff(unforced, shop, reservation.AuthorityRedis, 2, false); err == nil {
		t.Errorf("unforced handoff without MySQL: %v and no error", f)
	}
	if f, err := rd.Fence(c, shop); err != nil || f.String() != "mysql@1" {
		t.Errorf("Redis's fence after the failed handoff: %v %v, want mysql@1 unchanged", f, err)
	}
	_, err := rd.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "meanwhile", Lines: lines(1), TTL: time.Minute})
	notDecider(t, "a Redis reserve after the failed handoff", err, "mysql@1")
	if n := metric(t, reg, "reservoir_handoffs_total", "to", "redis", "result", "failed"); n != 1 {
		t.Errorf("failed handoffs = %v, want 1", n)
	}

	f, err := m.Handoff(c, shop, reservation.AuthorityRedis, 2, true)
	if err != nil || f.String() != "redis@2" {
		t.Fatalf("forced handoff: %v %v, want redis@2", f, err)
	}
	if f, err := rd.Fence(c, shop); err != nil || f.String() != "redis@2" {
		t.Errorf("Redis's fence after the forced handoff: %v %v, want redis@2", f, err)
	}
	if n := metric(t, reg, "reservoir_handoffs_total", "to", "redis", "result", "forced"); n != 1 {
		t.Errorf("forced handoffs = %v, want 1", n)
	}
	if !strings.Contains(log.String(), "Redis took a shop without MySQL") {
		t.Errorf("the forced handoff was not logged:\n%s", log)
	}
	reserve(t, rd, shop, "after", 1) // Redis decides
}

// pendingOf lists the kinds of a shop's pending changes.
func (b *bundle) pendingOf(t *testing.T, sh int64) []string {
	t.Helper()
	cs, err := b.my.Pending(ctx(t), sh, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ch := range cs {
		out = append(out, string(ch.Kind)+" "+ch.Token)
	}
	return out
}

// poison records a change Redis cannot apply (an unknown kind) in sh's
// feed: what a bug or a bad migration could leave behind.
func (b *bundle) poison(t *testing.T, sh int64) {
	t.Helper()
	if _, err := b.db.ExecContext(ctx(t), "INSERT INTO reservation_outbox (shop_id, kind) VALUES (?, 'bogus')", sh); err != nil {
		t.Fatal(err)
	}
}

// 7. A change Redis refuses stops its own shop, not the relay: the other
// shop's changes are delivered, the failure is counted, and the lag keeps
// showing the stuck shop.
func TestPoisonedShopStopsOnlyItself(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, srv.new, nil)
			c := ctx(t)
			const stuck, fine = 7, 8
			for _, sh := range []int64{stuck, fine} {
				handoff(t, b.m, sh, reservation.AuthorityMySQL, 1)
				setStock(t, b.my, sh, 10)
			}
			b.poison(t, stuck)
			reserve(t, b.my, stuck, "a", 1)
			reserve(t, b.my, fine, "b", 2)
			run(t, b.m)

			waitFor(t, "the relay to deliver all but the stuck shop's two changes", lagIs(c, b.m, 2))
			if h, err := get(t, b.rd, fine, "b"); err != nil || !slices.Equal(h.Allocations, alloc(2)) {
				t.Errorf("the fine shop's hold in Redis: %+v %v", h, err)
			}
			if u := unheld(t, b.rd, fine); u != 8 {
				t.Errorf("the fine shop's unheld in Redis: %d, want 8", u)
			}
			if _, err := get(t, b.rd, stuck, "a"); !errors.Is(err, reservation.ErrNotFound) {
				t.Errorf("the stuck shop's hold behind the poison reached Redis: %v (its order was not kept)", err)
			}
			if u := unheld(t, b.rd, stuck); u != 10 {
				t.Errorf("the stuck shop's unheld in Redis: %d, want 10 (its stock, delivered before the poison)", u)
			}
			if got := b.pendingOf(t, stuck); !slices.Equal(got, []string{"bogus ", "state a"}) {
				t.Errorf("the stuck shop's pending changes: %q", got)
			}
			if n := metric(t, b.reg, "reservoir_mirror_apply_failures_total", "reservoir_pod", pod); n < 1 {
				t.Errorf("apply failures = %v, want at least 1", n)
			}
			if err := b.m.Flush(c, stuck); err == nil || !strings.Contains(err.Error(), "bogus") {
				t.Errorf("flush of the stuck shop: %v, want the error naming the poisoned change", err)
			}
			if err := b.m.Flush(c, fine); err != nil {
				t.Errorf("flush of the fine shop: %v", err)
			}
		})
	}
}

// 7b. The same when the stuck shop keeps deciding: its changes pile up
// behind the poisoned one. Once they fill a relay batch (Config.Batch,
// 500 by default: minutes of a busy shop), every round reads only the
// stuck shop's changes and no other shop of the pod is delivered again.
//
// BUG: deliver reads the oldest Batch changes of the pod and drops the
// stuck shop's after the failure, but never reads past them.
func TestPoisonedShopDoesNotStarveThePod(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New, func(c *mirror.Config) { c.Batch = 3 })
	c := ctx(t)
	const stuck, fine = 7, 8
	for _, sh := range []int64{stuck, fine} {
		handoff(t, b.m, sh, reservation.AuthorityMySQL, 1)
		setStock(t, b.my, sh, 10)
		if err := b.m.Flush(c, sh); err != nil {
			t.Fatal(err)
		}
	}
	b.poison(t, stuck)
	reserve(t, b.my, stuck, "a1", 1) // a batch's worth of the stuck shop
	reserve(t, b.my, stuck, "a2", 1)
	reserve(t, b.my, fine, "b", 2)
	run(t, b.m)

	delivered := func() bool { _, err := get(t, b.rd, fine, "b"); return err == nil }
	waitFor(t, "the fine shop's hold, or three failed relay rounds", func() (bool, error) {
		return delivered() || metric(t, b.reg, "reservoir_mirror_apply_failures_total") >= 3, nil
	})
	if !delivered() {
		l, _ := b.m.Lag(c)
		t.Errorf("after %v failed relay rounds the fine shop's hold is still not in Redis (lag %d): one poisoned shop holds up the pod's relay",
			metric(t, b.reg, "reservoir_mirror_apply_failures_total"), l.Changes)
	}
}

// wipe deletes every Redis key of the bundle: Redis lost its data.
func (b *bundle) wipe(t *testing.T) {
	t.Helper()
	for _, k := range b.r.Keys(t) {
		if err := b.r.Client.Del(ctx(t), k).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// 8. Copy and catch-up: Redis lost its data; Resync rebuilds the shop
// from MySQL (holds, tombstones, quantities as ledger minus held), a
// change after the copy is delivered on top, and an adjust the copy
// covered is not applied a second time.
func TestResyncRebuildsALostShop(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, srv.new, nil)
			c := ctx(t)
			handoff(t, b.m, shop, reservation.AuthorityMySQL, 1)
			setStock(t, b.my, shop, 10)
			reserve(t, b.my, shop, "h1", 3)
			reserve(t, b.my, shop, "h2", 2)
			if _, err := b.my.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "h2"}); err != nil {
				t.Fatal(err)
			}
			refuse(t, b.my, shop, "refused", 8)
			if err := b.m.Flush(c, shop); err != nil {
				t.Fatal(err)
			}
			want := b.redisState(t, shop)

			// An adjust the relay has read and not delivered yet.
			if _, err := b.my.Adjust(c, &reservation.AdjustParams{Shop: shop, Item: item, Location: loc, Delta: 5}); err != nil {
				t.Fatal(err)
			}
			inFlight, err := b.my.Pending(c, shop, 10)
			if err != nil || len(inFlight) != 1 || inFlight[0].Kind != reservation.ChangeAdjust {
				t.Fatalf("pending: %+v %v, want the adjust", inFlight, err)
			}

			b.wipe(t)
			if _, err := get(t, b.rd, shop, "h1"); !errors.Is(err, reservation.ErrNotFound) {
				t.Fatalf("after the wipe Redis still has h1: %v", err)
			}
			if err := b.m.Resync(c, shop); err != nil {
				t.Fatal(err)
			}
			want = strings.Replace(want, "unheld 7", "unheld 12", 1) // 15 in the ledger, 3 held
			if got := b.redisState(t, shop); got != want {
				t.Errorf("Redis after the resync:\n%s\nwant:\n%s", got, want)
			}
			mh, err := get(t, b.my, shop, "h1")
			if err != nil {
				t.Fatal(err)
			}
			if rh, err := get(t, b.rd, shop, "h1"); err != nil || !rh.ExpiresAt.Equal(mh.ExpiresAt) || rh.Authority != reservation.AuthorityMySQL {
				t.Errorf("Redis's h1 after the resync: %+v %v, want MySQL's %+v", rh, err, mh)
			}
			if l, err := b.m.Lag(c); err != nil || l.Changes != 0 {
				t.Errorf("lag after the resync: %+v %v, want none: the copy covered the adjust", l, err)
			}
			// The relay that read the adjust before the copy delivers it now.
			if n, err := b.rd.Apply(c, inFlight); err != nil || n != 1 {
				t.Fatalf("late delivery: %d %v", n, err)
			}
			if u := unheld(t, b.rd, shop); u != 12 {
				t.Errorf("Redis unheld after the late delivery of a covered adjust: %d, want 12 (not applied twice)", u)
			}

			run(t, b.m)
			reserve(t, b.my, shop, "h3", 1) // after the copy
			waitFor(t, "the relay to deliver the change after the copy", lagIs(c, b.m, 0))
			if h, err := get(t, b.rd, shop, "h3"); err != nil || !slices.Equal(h.Allocations, alloc(1)) {
				t.Errorf("Redis's h3: %+v %v", h, err)
			}
			if r, m := unheld(t, b.rd, shop), unheld(t, b.my, shop); r != 11 || m != 11 {
				t.Errorf("unheld: redis %d, mysql %d, want 11", r, m)
			}
		})
	}
}

// The covered adjusts' markers are what keep a late delivery from moving
// the quantity again: a copy written without them (the same CopyShop,
// Rewrite given no covered ids) counts the adjust twice, and the check of
// the test above sees it.
func TestResyncWithoutCoveredMarkersCountsTwice(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New, nil)
	c := ctx(t)
	handoff(t, b.m, shop, reservation.AuthorityMySQL, 1)
	setStock(t, b.my, shop, 10)
	if err := b.m.Flush(c, shop); err != nil {
		t.Fatal(err)
	}
	if _, err := b.my.Adjust(c, &reservation.AdjustParams{Shop: shop, Item: item, Location: loc, Delta: 5}); err != nil {
		t.Fatal(err)
	}
	inFlight, err := b.my.Pending(c, shop, 10)
	if err != nil || len(inFlight) != 1 {
		t.Fatalf("pending: %+v %v", inFlight, err)
	}
	b.wipe(t)
	err = b.my.CopyShop(c, shop, func(c context.Context, cp *reservation.ShopCopy) error {
		if len(cp.CoveredAdjusts) != 1 {
			t.Errorf("covered adjusts: %v, want the one pending", cp.CoveredAdjusts)
		}
		return b.rd.Rewrite(c, cp.Snapshot, cp.Ledger, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.rd.Apply(c, inFlight); err != nil {
		t.Fatal(err)
	}
	if u := unheld(t, b.rd, shop); u != 20 {
		t.Errorf("unheld %d; the broken copy should count the +5 twice (20)", u)
	}
}

// An adjust takes no fence lock, so while a Resync copies its shop a
// merchant's adjust may want to commit. Were it let through, the relay
// could deliver it before the copy is written, and the copy (read before
// it) would set the quantity back and write no marker: the adjust lost in
// Redis for good. The copy holds the shop's ledger rows instead: the
// adjust waits for the copy, and its change is delivered on top of it.
func TestResyncKeepsAnAdjustDuringTheCopy(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New, nil)
	c := ctx(t)
	handoff(t, b.m, shop, reservation.AuthorityMySQL, 1)
	setStock(t, b.my, shop, 10)
	reserve(t, b.my, shop, "h1", 3)
	if err := b.m.Flush(c, shop); err != nil {
		t.Fatal(err)
	}
	adjusted := make(chan error, 1)
	err := b.my.CopyShop(c, shop, func(c context.Context, cp *reservation.ShopCopy) error {
		go func() {
			_, err := b.my.Adjust(c, &reservation.AdjustParams{Shop: shop, Item: item, Location: loc, Delta: 5})
			adjusted <- err
		}()
		// The adjust either commits now or waits for a lock the copy holds:
		// its locking read of the ledger row seen running on polls 10ms
		// apart can only be waiting (nothing else in the test writes).
		seen := 0
		waitFor(t, "the adjust to commit or to wait for the copy", func() (bool, error) {
			select {
			case err := <-adjusted:
				adjusted <- err
				return true, nil
			default:
			}
			var n int
			err := b.db.QueryRowContext(c, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
  WHERE DB = DATABASE() AND COMMAND = 'Query' AND INFO LIKE '/*caller=''adjust''*/ SELECT available FROM inventory_ledger%'`).Scan(&n)
			if n == 0 {
				seen = 0
			} else {
				seen++
			}
			return seen >= 3, err
		})
		// The relay delivers whatever has committed, then the copy is written.
		if err := b.m.Flush(c, shop); err != nil {
			return err
		}
		return b.rd.Rewrite(c, cp.Snapshot, cp.Ledger, cp.CoveredAdjusts)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-adjusted; err != nil {
		t.Fatal(err)
	}
	if err := b.m.Flush(c, shop); err != nil {
		t.Fatal(err)
	}
	if r, m := unheld(t, b.rd, shop), unheld(t, b.my, shop); r != 12 || m != 12 {
		t.Errorf("unheld after an adjust during the copy: redis %d, mysql %d, want 12 (15 in the ledger, 3 held)", r, m)
	}
}

// Resync refuses a shop whose Redis state is the truth: one Redis decides
// (nothing of Redis is touched), and one Redis took by force
// (ErrForcedHandoff).
func TestResyncRefusesShopsRedisDecides(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New, nil)
	c := ctx(t)
	const redisShop, forcedShop = 7, 8
	setStock(t, b.rd, redisShop, 10)
	reserve(t, b.rd, redisShop, "x", 2)
	before := b.redisState(t, redisShop)
	err := b.m.Resync(c, redisShop)
	if err == nil || errors.Is(err, mirror.ErrForcedHandoff) {
		t.Errorf("resync of a shop Redis decides: %v, want a refusal (not ErrForcedHandoff)", err)
	}
	if after := b.redisState(t, redisShop); after != before {
		t.Errorf("the refused resync changed Redis:\n%s\nwas:\n%s", after, before)
	}

	setStock(t, b.rd, forcedShop, 10)
	handoff(t, b.m, forcedShop, reservation.AuthorityMySQL, 1)
	if f, err := b.rd.Force(c, forcedShop, 2); err != nil || f.String() != "redis@2" {
		t.Fatalf("force: %v %v", f, err)
	}
	reserve(t, b.rd, forcedShop, "y", 2)
	before = b.redisState(t, forcedShop)
	if err := b.m.Resync(c, forcedShop); !errors.Is(err, mirror.ErrForcedHandoff) {
		t.Errorf("resync of a shop Redis took by force: %v, want ErrForcedHandoff", err)
	}
	if after := b.redisState(t, forcedShop); after != before {
		t.Errorf("the refused resync changed Redis:\n%s\nwas:\n%s", after, before)
	}
}

// 8b. A forced handoff that lands while a Resync waits for MySQL's fence
// row (MySQL is slow: the reason the kill switch forced it) must not be
// undone by the copy: Redis decides the shop from the force on, and the
// hold it acknowledged then must survive.
//
// BUG: Resync reads Redis's fence before it takes MySQL's fence row lock,
// and Rewrite sets Redis's fence to MySQL's unconditionally, so the copy
// puts the fence back to mysql@1 and deletes Redis's own hold.
func TestResyncDoesNotUndoAForcedHandoff(t *testing.T) {
	t.Parallel()
	db, r := testdb.New(t), testredis.New(t)
	// Two replicas of the pod: one resyncs the shop, on a pool that waits
	// on row locks longer than the 2s default (so the copy waits for the
	// test's lock however slow the machine is); the other runs the kill
	// switch.
	cfg, err := mysql.ParseDSN(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Params["innodb_lock_wait_timeout"] = "30"
	patient, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { patient.Close() })
	my := newMySQL(t, patient, nil)
	rd := newRedis(t, r, my)
	m, _, _ := newMirror(t, my, rd, nil)
	killer, _, _ := newMirror(t, newMySQL(t, db.DB, nil), rd, func(c *mirror.Config) { c.ForceAfter = 200 * time.Millisecond })
	c := ctx(t)

	setStock(t, rd, shop, 10)
	handoff(t, m, shop, reservation.AuthorityMySQL, 1)
	reserve(t, my, shop, "mysql-hold", 3)
	if err := m.Flush(c, shop); err != nil {
		t.Fatal(err)
	}

	// MySQL is slow: something holds the shop's fence row.
	tx, err := db.BeginTx(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	var d string
	if err := tx.QueryRowContext(c, "SELECT decider FROM reservation_fences WHERE shop_id = ? FOR UPDATE", shop).Scan(&d); err != nil {
		t.Fatal(err)
	}
	resynced := make(chan error, 1)
	go func() { resynced <- m.Resync(c, shop) }()
	// A handoff statement on the fence table running now can only be
	// waiting for the test's lock.
	waitFor(t, "the resync to wait for the fence row", func() (bool, error) {
		select {
		case err := <-resynced:
			return false, fmt.Errorf("the resync returned without waiting: %v", err)
		default:
		}
		var n int
		err := db.QueryRowContext(c, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
  WHERE DB = ? AND COMMAND = 'Query' AND INFO LIKE '/*caller=''handoff''*/%reservation_fences%'`, db.Name).Scan(&n)
		return n >= 1, err
	})

	// The kill switch (redis_only) forces the shop to Redis meanwhile, and
	// Redis decides a hold.
	if f, err := killer.Handoff(c, shop, reservation.AuthorityRedis, 2, true); err != nil || f.String() != "redis@2" {
		t.Fatalf("forced handoff: %v %v", f, err)
	}
	reserve(t, rd, shop, "redis-hold", 2)

	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	err = <-resynced
	if !errors.Is(err, mirror.ErrForcedHandoff) {
		t.Errorf("resync racing the forced handoff: %v, want ErrForcedHandoff", err)
	}
	if f, err := rd.Fence(c, shop); err != nil || f.String() != "redis@2" {
		t.Errorf("Redis's fence after the resync: %v %v, want redis@2: the copy undid the forced handoff", f, err)
	}
	if _, err := get(t, rd, shop, "redis-hold"); err != nil {
		t.Errorf("the hold Redis acknowledged after taking the shop: %v: the copy deleted it", err)
	}
}

// The relay's own rounds ask Redis about the carts MySQL recorded and hand
// the answers to Config.Evaluated, once per change; a Flush (an adjust's,
// a handoff's drain), which may run beside the relay, delivers the change
// without asking. Evaluates says whether the facade can leave the
// comparison to the relay.
func TestRelayEvaluatesCartsFlushDoesNot(t *testing.T) {
	t.Parallel()
	type answer struct {
		token string
		res   reservation.ReserveResult
	}
	var mu sync.Mutex
	var got []answer
	b := setup(t, testredis.New, func(c *mirror.Config) {
		c.Evaluated = func(ch reservation.Change, res reservation.ReserveResult, err error) {
			if err != nil {
				t.Errorf("%s: %v", ch.Token, err)
			}
			mu.Lock()
			got = append(got, answer{ch.Token, res})
			mu.Unlock()
		}
	})
	if !b.m.Evaluates() {
		t.Fatal("a mirror with Evaluated does not evaluate")
	}
	c := ctx(t)
	handoff(t, b.m, shop, reservation.AuthorityMySQL, 1)
	setStock(t, b.my, shop, 3)
	compared := func(token string) {
		t.Helper()
		res, err := b.my.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: token, Lines: lines(1), TTL: time.Minute, Compare: "mysql"})
		if err != nil || res.Status != reservation.StatusReserved {
			t.Fatalf("reserve %s: %+v %v", token, res, err)
		}
	}
	compared("flushed")
	if err := b.m.Flush(c, shop); err != nil {
		t.Fatal(err)
	}
	if _, err := get(t, b.rd, shop, "flushed"); err != nil {
		t.Fatalf("the flushed hold is not in Redis: %v", err)
	}
	compared("relayed")
	run(t, b.m)
	waitFor(t, "the relay to empty the feed", lagIs(c, b.m, 0))
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].token != "relayed" || got[0].res.Status != reservation.StatusReserved {
		t.Errorf("evaluated %+v; want the relayed cart only, reserved", got)
	}
	if n := metric(t, b.reg, "reservoir_mirror_carts_evaluated_total"); n != 1 {
		t.Errorf("carts evaluated: %v, want 1", n)
	}
	for name, edit := range map[string]func(*mirror.Config){
		"no callback": nil,
		"disabled": func(c *mirror.Config) {
			c.Evaluated, c.Disabled = func(reservation.Change, reservation.ReserveResult, error) {}, true
		},
	} {
		if m, _, _ := newMirror(t, b.my, b.rd, edit); m.Evaluates() {
			t.Errorf("%s: Evaluates() is true", name)
		}
	}
}

// A cart read behind a reservation released after its decision (released
// before the relay read either) is not asked about: Redis would see that
// reservation's units back and could answer differently from MySQL for no
// fault of either. The reservation's own cart, before it, still is.
func TestRelaySkipsCartsBehindALaterRelease(t *testing.T) {
	t.Parallel()
	// A batch of 2 reads x's reserve and t's in one read and x's release
	// in the next: the release's own change is not in the read that
	// evaluates t, only x's state, released since after t's decision.
	for _, batch := range []int{0, 2} {
		t.Run(fmt.Sprintf("batch %d", batch), func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var got []string
			b := setup(t, testredis.New, func(c *mirror.Config) {
				c.Batch = batch
				c.Evaluated = func(ch reservation.Change, _ reservation.ReserveResult, _ error) {
					mu.Lock()
					got = append(got, ch.Token)
					mu.Unlock()
				}
			})
			c := ctx(t)
			handoff(t, b.m, shop, reservation.AuthorityMySQL, 1)
			setStock(t, b.my, shop, 2)
			for _, token := range []string{"x", "t"} {
				if res, err := b.my.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: token, Lines: lines(1), TTL: time.Minute, Compare: "mysql"}); err != nil || res.Status != reservation.StatusReserved {
					t.Fatalf("reserve %s: %+v %v", token, res, err)
				}
			}
			if res, err := b.my.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "x"}); err != nil || !res.Released {
				t.Fatalf("release x: %+v %v", res, err)
			}
			run(t, b.m)
			waitFor(t, "the relay to empty the feed", lagIs(c, b.m, 0))
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 || got[0] != "x" {
				t.Errorf("evaluated %v; want x only", got)
			}
			if n := metric(t, b.reg, "reservoir_mirror_carts_stale_total"); n != 1 {
				t.Errorf("stale carts: %v, want 1", n)
			}
		})
	}
}
