package dualwrite_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
)

const (
	pod     = "pod-a"
	shop    = 42
	poolCap = 100
)

// recorder keeps every observation and classifies it with the default
// rules, as the comparer would.
type recorder struct {
	mu  sync.Mutex
	obs []compare.Observation
}

func (r *recorder) Observe(o compare.Observation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.obs = append(r.obs, o)
}

func (r *recorder) classes() map[compare.Class]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[compare.Class]int{}
	for _, o := range r.obs {
		out[compare.Classify(o, compare.DefaultRules)]++
	}
	return out
}

func (r *recorder) dumpMismatches(t *testing.T, n int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.obs {
		if c := compare.Classify(o, compare.DefaultRules); c != compare.ClassMatch && n > 0 {
			n--
			t.Logf("%s %s %s: authority %+v; shadow %+v", c, o.Op, o.Token, o.Authority, o.Shadow)
		}
	}
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.obs)
}

type bundle struct {
	db    *testdb.DB
	r     *testredis.Redis
	my    *mysqlstore.Store
	rd    *redisstore.Store
	modes *rollout.Static
	rec   *recorder
	reg   *prometheus.Registry
	f     *dualwrite.Facade
}

// setup wires a facade to a fresh MySQL database and a fresh Redis prefix.
// wrapMySQL / wrapRedis, when set, replace a store by a faulty version.
type options struct {
	mode          rollout.Mode
	shadowTimeout time.Duration
	slots         int
	wrapMySQL     func(reservation.Store) reservation.Store
	wrapRedis     func(reservation.Store) reservation.Store
	observer      dualwrite.Observer
}

func setup(t *testing.T, o options) *bundle {
	t.Helper()
	b := &bundle{db: testdb.New(t), r: testredis.New(t), rec: &recorder{}, reg: prometheus.NewRegistry()}
	var err error
	b.my, err = mysqlstore.New(mysqlstore.Config{DB: b.db.DB, PoolCap: poolCap})
	if err != nil {
		t.Fatal(err)
	}
	b.rd, err = redisstore.New(redisstore.Config{Client: b.r.Client, Prefix: b.r.Prefix, Ledger: b.my, Source: b.my,
		Limits: reservation.Limits{MaxQuantity: poolCap}})
	if err != nil {
		t.Fatal(err)
	}
	if o.mode == "" {
		o.mode = rollout.ModeShadow
	}
	b.modes = rollout.NewStatic(o.mode)
	var my, rd reservation.Store = b.my, b.rd
	if o.wrapMySQL != nil {
		my = o.wrapMySQL(my)
	}
	if o.wrapRedis != nil {
		rd = o.wrapRedis(rd)
	}
	var obs dualwrite.Observer = b.rec
	if o.observer != nil {
		obs = multiObserver{b.rec, o.observer}
	}
	b.f, err = dualwrite.New(dualwrite.Config{Pod: pod, Redis: rd, MySQL: my, Modes: b.modes, Observer: obs,
		ShadowTimeout: o.shadowTimeout, ShadowSlots: o.slots, Registerer: b.reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.drain(t) })
	return b
}

type multiObserver []dualwrite.Observer

func (m multiObserver) Observe(o compare.Observation) {
	for _, x := range m {
		x.Observe(o)
	}
}

// drain waits for shadow work in flight.
func (b *bundle) drain(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.f.Close(ctx); err != nil {
		t.Errorf("drain: %v", err)
	}
}

// stock sets stock through the facade (the authority changes the ledger;
// the shadow follows) and waits for the shadow.
func (b *bundle) stock(t *testing.T, item, loc, n int64) {
	t.Helper()
	if _, err := b.f.Adjust(context.Background(), &reservation.AdjustParams{Shop: shop, Item: item, Location: loc, Available: &n}); err != nil {
		t.Fatal(err)
	}
	b.drain(t)
}

func (b *bundle) ledger(t *testing.T, item, loc int64) int64 {
	t.Helper()
	rows, err := b.my.Stock(context.Background(), &reservation.StockParams{Shop: shop})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Item == item && r.Location == loc {
			return r.Available
		}
	}
	return 0
}

func (b *bundle) unheld(t *testing.T, s reservation.Store, item, loc int64) int64 {
	t.Helper()
	a, err := s.Availability(context.Background(), &reservation.AvailabilityParams{Shop: shop, Item: item})
	if err != nil {
		t.Fatal(err)
	}
	return a.At(loc)
}

func line(item, qty int64) []reservation.Line {
	return []reservation.Line{{Item: item, Quantity: qty, Locations: []int64{1}}}
}

func (b *bundle) reserve(ctx context.Context, token string, ttl time.Duration, lines []reservation.Line) (reservation.ReserveResult, error) {
	return b.f.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: token, Lines: lines, TTL: ttl})
}

// counter reads a counter of the facade's registry.
func (b *bundle) counter(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	return 0
}

// faulty wraps a store: before each call it runs fault, which may sleep,
// panic or return an error.
type faulty struct {
	reservation.Store
	fault func(ctx context.Context, op string) error
}

func (f faulty) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	if err := f.fault(ctx, "reserve"); err != nil {
		return reservation.ReserveResult{}, err
	}
	return f.Store.Reserve(ctx, p)
}

func (f faulty) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	if err := f.fault(ctx, "claim"); err != nil {
		return reservation.ClaimResult{}, err
	}
	return f.Store.Claim(ctx, p)
}

func (f faulty) Release(ctx context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	if err := f.fault(ctx, "release"); err != nil {
		return reservation.ReleaseResult{}, err
	}
	return f.Store.Release(ctx, p)
}

// sleeper ignores its context on purpose: a shadow that does not honour
// cancellation must still not hold the caller.
func sleeper(d time.Duration) func(context.Context, string) error {
	return func(context.Context, string) error { time.Sleep(d); return nil }
}

func panicker(context.Context, string) error { panic("shadow bug") }

func tok(prefix string, i ...any) string { return prefix + fmt.Sprint(i...) }
