package faulttest

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/internal/faults"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testproc"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/migrations"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

const (
	pod     = "pod-f"
	shop    = 7
	poolCap = 100
)

// items are the items carts pick from, each stocked at location 1 only.
const items = 3

// timings are a cell's phases. The fault window sits inside the traffic,
// and so does the kill switch of the kill column, in the middle of the
// window; after the traffic every caller finishes what it started
// (settle), then the cell waits for every hold to expire before reaping
// and checking.
type timings struct {
	// traffic is how long callers start new carts.
	traffic time.Duration
	// faultAt and healAt bound the fault window, from the traffic's start.
	faultAt, healAt time.Duration
	// killAt is when the kill column engages its kill switch.
	killAt time.Duration
	// settle bounds how long after the traffic callers may take to get an
	// answer for the cart they are on.
	settle time.Duration
	// ttl is every hold's TTL: longer than traffic + settle, so every
	// acknowledged reservation is still valid when its claim is retried.
	ttl time.Duration
	// op is each call's deadline; shadow is the facade's shadow deadline.
	op, shadow time.Duration
	// workers is the number of concurrent callers; think is each one's
	// pause between carts.
	workers int
	think   time.Duration
	// stock is each item's starting stock at location 1. Item 1 is hot:
	// it sells out during the traffic, so refusals at the boundary (the
	// no oversell and no undersell rules) are exercised in every cell; the
	// others outgrow the pool cap, so the MySQL pools are refilled, and
	// last the whole traffic, so the fault always meets claims.
	stock map[int64]int64
}

func cellTimings() timings {
	if longRun() {
		return timings{traffic: 30 * time.Second, faultAt: 5 * time.Second, healAt: 20 * time.Second, killAt: 12 * time.Second, settle: 15 * time.Second,
			ttl: 60 * time.Second, op: 2 * time.Second, shadow: 500 * time.Millisecond, workers: 8, think: 5 * time.Millisecond,
			stock: map[int64]int64{1: 600, 2: 12000, 3: 12000}}
	}
	// A call's deadline is generous for a loaded 2-core CI machine (the
	// race detector, other packages' tests): a timeout must come from the
	// fault, not from the machine.
	return timings{traffic: 2 * time.Second, faultAt: 400 * time.Millisecond, healAt: 1500 * time.Millisecond, killAt: 900 * time.Millisecond, settle: 3 * time.Second,
		ttl: 8 * time.Second, op: 2 * time.Second, shadow: 400 * time.Millisecond, workers: 5, think: 10 * time.Millisecond,
		stock: map[int64]int64{1: 30, 2: 250, 3: 250}}
}

// mode is a column of the matrix: a rollout decision.
type mode struct {
	name string
	mode authority.Mode
	// kill, when set, is engaged at timings.killAt, inside the fault
	// window: the traffic starts in mode and the kill switch hands the
	// shop back to Redis under the fault.
	kill authority.Kill
}

var modes = []mode{
	{"redis", authority.ModeRedis, authority.KillOff},
	{"shadow", authority.ModeShadow, authority.KillOff},
	{"mysql", authority.ModeMySQL, authority.KillOff},
	{"kill", authority.ModeMySQL, authority.KillRedis},
}

// server is which server the fault is injected on: on its proxy, or on
// its process.
type server string

const (
	serverMySQL server = "mysql"
	serverRedis server = "redis"
)

// cell is one pod wired for a matrix cell: both stores reach their servers
// through proxies, but for a private server (a process cell's), which they
// reach directly; direct stores (no proxy) read the truth for the checks.
type cell struct {
	t     timings
	mode  mode
	db    *testdb.DB
	r     *testredis.Redis
	proxy map[server]*faults.Proxy
	// proc holds the cell's private server, whose process a process fault
	// kills or pauses.
	proc map[server]*testproc.Server

	my, myDirect *mysqlstore.Store
	rd, rdDirect *redisstore.Store
	// mirror is the pod's mirror on the proxied stores: the facade hands
	// shops off through it and its relay runs for the cell's life.
	// direct is one on the direct stores, for reconciliation's repairs.
	mirror, direct *mirror.Mirror
	// noFeed: the mirror was built Disabled (the feed never reaches
	// Redis): a cell that shows what the feed protects.
	noFeed bool
	modes  *authority.Static
	facade *dualwrite.Facade
	obs    *observations
}

// cellOptions change what setup builds, to show that the checks catch a
// broken pod.
type cellOptions struct {
	// wrap replaces the MySQL store the facade calls.
	wrap func(*mysqlstore.Store) reservation.Store
	// noFeed builds the mirror Disabled: MySQL's change feed never reaches
	// Redis, neither by the relay nor by a handoff's drain.
	noFeed bool
	// stockIn is the mode the stock is set in (default: the cell's):
	// stocked in redis mode, Redis's quantities are set at once rather
	// than by the feed.
	stockIn authority.Mode
	// private, when set, runs that server as the cell's own process
	// (package testproc), reached without a proxy, for a process fault;
	// the other server stays the shared one, behind its proxy.
	private server
}

// quietLogger drops the logs of the pod's mirror and facade: under a
// fault they log every failed round, and the cell report counts what
// matters.
var quietLogger = slog.New(slog.DiscardHandler)

// setup builds a cell: a fresh database and Redis prefix, a proxy in front
// of each server (but a private one), the stores and the mirror (its relay
// running) on the proxies, the facade in mode m, and the stock set through
// the facade.
func setup(t *testing.T, m mode, tm timings, o cellOptions) *cell {
	t.Helper()
	c := &cell{t: tm, mode: m, obs: &observations{}, proxy: map[server]*faults.Proxy{}, proc: map[server]*testproc.Server{}, noFeed: o.noFeed}
	redisAddr := ""
	if o.private == serverMySQL {
		c.proc[serverMySQL] = testproc.MySQL(t)
		c.db = privateDB(t, c.proc[serverMySQL].DSN)
	} else {
		c.db = testdb.New(t)
	}
	if o.private == serverRedis {
		c.proc[serverRedis] = testproc.Redis(t)
		redisAddr = c.proc[serverRedis].Addr
		c.r = &testredis.Redis{Client: redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1, PoolSize: 64}), Prefix: "rsvtest:proc:"}
		t.Cleanup(func() { c.r.Client.Close() })
	} else {
		c.r, redisAddr = testredis.New(t), testredis.Addr(t)
	}
	cfg, err := mysql.ParseDSN(c.db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Net != "tcp" {
		t.Fatalf("%s uses %s: the fault matrix needs MySQL over TCP, or the proxy is bypassed", testdb.EnvDSN, cfg.Net)
	}
	if o.private != serverMySQL {
		c.proxy[serverMySQL] = faults.Start(t, "mysql", cfg.Addr)
		cfg.Addr = c.proxy[serverMySQL].Addr()
	}
	if o.private != serverRedis {
		c.proxy[serverRedis] = faults.Start(t, "redis", redisAddr)
		redisAddr = c.proxy[serverRedis].Addr()
	}

	// The pod's pool: a short dial timeout, so a "down" server fails a
	// call fast instead of eating its whole deadline; the calls' contexts
	// bound everything else (the driver closes a connection whose call is
	// cancelled, and bounds the handshake by it too, which a paused
	// server, whose kernel still accepts, never sends).
	cfg.Timeout = 300 * time.Millisecond
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	proxied := sql.OpenDB(connector)
	proxied.SetMaxOpenConns(64)
	proxied.SetMaxIdleConns(64)
	t.Cleanup(func() { proxied.Close() })
	if c.my, err = mysqlstore.New(mysqlstore.Config{DB: proxied, PoolCap: poolCap}); err != nil {
		t.Fatal(err)
	}
	if c.myDirect, err = mysqlstore.New(mysqlstore.Config{DB: c.db.DB, PoolCap: poolCap}); err != nil {
		t.Fatal(err)
	}

	// A client that never resends (NewClient), honours the call's
	// deadline instead of its own 3s read timeout, and dials once.
	client := redisstore.NewClient(&redis.UniversalOptions{Addrs: []string{redisAddr},
		ContextTimeoutEnabled: true, DialTimeout: 300 * time.Millisecond, DialerRetries: 1, PoolSize: 64})
	t.Cleanup(func() { client.Close() })
	limits := reservation.Limits{MaxQuantity: poolCap}
	if c.rd, err = redisstore.New(redisstore.Config{Client: client, Prefix: c.r.Prefix, Ledger: c.my, Source: c.my, Limits: limits}); err != nil {
		t.Fatal(err)
	}
	if c.rdDirect, err = redisstore.New(redisstore.Config{Client: c.r.Client, Prefix: c.r.Prefix, Ledger: c.myDirect, Source: c.myDirect, Limits: limits}); err != nil {
		t.Fatal(err)
	}

	if c.mirror, err = mirror.New(mirror.Config{Pod: pod, MySQL: c.my, Redis: c.rd, Logger: quietLogger, Disabled: o.noFeed}); err != nil {
		t.Fatal(err)
	}
	if c.direct, err = mirror.New(mirror.Config{Pod: pod, MySQL: c.myDirect, Redis: c.rdDirect, Logger: quietLogger}); err != nil {
		t.Fatal(err)
	}
	relay, stopRelay := context.WithCancel(context.Background())
	relayDone := make(chan struct{})
	go func() { defer close(relayDone); _ = c.mirror.Run(relay) }()
	t.Cleanup(func() { stopRelay(); <-relayDone })

	stockIn := m.mode
	if o.stockIn != "" {
		stockIn = o.stockIn
	}
	c.modes = authority.NewStatic(stockIn)
	var my reservation.Store = c.my
	if o.wrap != nil {
		my = o.wrap(c.my)
	}
	if c.facade, err = dualwrite.New(dualwrite.Config{Pod: pod, Redis: c.rd, MySQL: my, Modes: c.modes, Mirror: c.mirror, Observer: c.obs,
		ShadowTimeout: tm.shadow, Registerer: prometheus.NewRegistry(), Logger: quietLogger}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.drain(t) })

	ctx := context.Background()
	for item, n := range tm.stock {
		if _, err := c.facade.Adjust(ctx, &reservation.AdjustParams{Shop: shop, Item: item, Location: 1, Available: &n}); err != nil {
			t.Fatalf("stock item %d: %v", item, err)
		}
	}
	if err := c.modes.SetMode(m.mode); err != nil {
		t.Fatal(err)
	}
	c.drain(t)
	c.obs.reset() // the stock's observations are setup, not traffic
	return c
}

// privateDB creates the cell's database on its private MariaDB and
// migrates it, with the settings testdb gives a database on the shared
// server (mysqlstore.DSN); it goes with the server when the test ends.
func privateDB(t *testing.T, server string) *testdb.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin, err := sql.Open("mysql", server)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	const name = "reservoir"
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil { //sqlcheck:ok a database name cannot be a parameter; this one is a constant
		t.Fatalf("create database %s: %v", name, err)
	}
	cfg, err := mysql.ParseDSN(server)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = name
	dsn, err := mysqlstore.DSN(cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	db, err := mysqlstore.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(200)
	if _, err := migrations.Up(ctx, db, migrations.Sets()...); err != nil {
		t.Fatalf("migrate %s: %v", name, err)
	}
	return &testdb.DB{Name: name, DSN: dsn, DB: db}
}

// awaitHandoff waits, in the mysql column, until both stores' fences name
// MySQL. Its first call hands the shop to MySQL, and the handoff needs
// Redis (Redis yields, its holds are copied): on a loaded machine it can
// outlast timings.faultAt, and a fault on Redis meeting it makes Redis
// take part in answers that the checks expect it only to follow
// (authorityUses). The kill column's checks expect either server in every
// answer: its fault does not wait.
func (c *cell) awaitHandoff(deadline time.Time) error {
	if c.mode.mode != authority.ModeMySQL || c.mode.kill != authority.KillOff {
		return nil
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for {
		mf, err := c.myDirect.Fence(ctx, shop)
		if err == nil && mf.Decider == reservation.AuthorityMySQL {
			var rf reservation.Fence
			if rf, err = c.rdDirect.Fence(ctx, shop); err == nil && rf.Decider == reservation.AuthorityMySQL {
				return nil
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the first call's handoff to MySQL had not finished when the traffic ended (last read: %v)", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// engageKill engages the cell's kill switch (the kill column does it in
// the middle of the traffic).
func (c *cell) engageKill(t testing.TB) {
	t.Helper()
	if err := c.modes.SetKill(c.mode.kill); err != nil {
		t.Errorf("engage the kill switch: %v", err) // not Fatal: called from the traffic's goroutine
	}
}

// drain waits for the facade's shadow calls in flight.
func (c *cell) drain(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := c.facade.Close(ctx); err != nil {
		t.Errorf("drain the facade: %v", err)
	}
}

// observations keeps every observation the facade reports, classified.
type observations struct {
	mu      sync.Mutex
	classes map[compare.Class]int
	samples map[compare.Class]string
}

// Observe implements dualwrite.Observer.
func (o *observations) Observe(ob compare.Observation) {
	c := compare.Classify(ob, compare.DefaultRules)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.classes == nil {
		o.classes, o.samples = map[compare.Class]int{}, map[compare.Class]string{}
	}
	o.classes[c]++
	if _, ok := o.samples[c]; !ok && c != compare.ClassMatch {
		o.samples[c] = fmt.Sprintf("%s %s: authority %s; shadow %s", ob.Op, ob.Token, outcome(ob.Authority), outcome(ob.Shadow))
	}
}

func outcome(o compare.Outcome) string {
	switch {
	case o.Skipped:
		return "skipped"
	case o.Panicked:
		return fmt.Sprintf("panicked: %v", o.Err)
	case o.Err != nil:
		s := o.Err.Error()
		if o.TimedOut {
			s = "timed out: " + s
		}
		return s
	case o.TimedOut:
		return "timed out"
	}
	return fmt.Sprint(o.Result, " ", o.Allocations)
}

func (o *observations) reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.classes, o.samples = nil, nil
}

func (o *observations) snapshot() (map[compare.Class]int, map[compare.Class]string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	classes := map[compare.Class]int{}
	samples := map[compare.Class]string{}
	for k, v := range o.classes {
		classes[k] = v
	}
	for k, v := range o.samples {
		samples[k] = v
	}
	return classes, samples
}
