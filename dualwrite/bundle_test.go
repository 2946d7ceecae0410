package dualwrite_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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

const (
	pod     = "pod-a"
	shop    = 42
	poolCap = 100
)

// The mirror is what the facade hands shops off through.
var _ dualwrite.Mirror = (*mirror.Mirror)(nil)

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

// byToken returns the observations of op by token (the last one of each).
func (r *recorder) byToken(op compare.Op) map[string]compare.Observation {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]compare.Observation{}
	for _, o := range r.obs {
		if o.Op == op {
			out[o.Token] = o
		}
	}
	return out
}

// dumpMismatches logs up to n observations of each class but match.
func (r *recorder) dumpMismatches(t *testing.T, n int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[compare.Class]int{}
	for _, o := range r.obs {
		if c := compare.Classify(o, compare.DefaultRules); c != compare.ClassMatch && seen[c] < n {
			seen[c]++
			t.Logf("%s %s %s: authority %+v; shadow %+v", c, o.Op, o.Token, o.Authority, o.Shadow)
		}
	}
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.obs)
}

// bundle is one pod wired as production wires it: a fresh MySQL database
// and Redis prefix, the two stores (the MySQL store is Redis's ledger and
// source), a mirror for them, a authority.Static mode source and the facade.
type bundle struct {
	db    *testdb.DB
	r     *testredis.Redis
	my    *mysqlstore.Store
	rd    *redisstore.Store
	m     *mirror.Mirror
	modes *authority.Static
	rec   *recorder
	reg   *prometheus.Registry
	f     *dualwrite.Facade
}

// options change the bundle setup builds.
type options struct {
	// mode is the starting mode. Default: shadow.
	mode          authority.Mode
	shadowTimeout time.Duration
	slots         int
	// wrapMySQL / wrapRedis, when set, replace the store the facade calls
	// (not the mirror's) by a faulty version.
	wrapMySQL func(reservation.Store) reservation.Store
	wrapRedis func(reservation.Store) reservation.Store
	observer  dualwrite.Observer
	// noRelay leaves the mirror's relay stopped: only a handoff's drain
	// brings MySQL's changes to Redis, which is what a test of the drain
	// needs to see.
	noRelay bool
	// mirror changes the mirror's config (its stores, Disabled).
	mirror func(*mirror.Config)
}

// setup wires a bundle. The relay runs until the test ends (unless
// o.noRelay); shadow calls in flight are waited for at cleanup.
func setup(t *testing.T, o options) *bundle {
	t.Helper()
	b := &bundle{db: testdb.New(t), r: testredis.New(t), rec: &recorder{}, reg: prometheus.NewRegistry()}
	var err error
	b.my, err = mysqlstore.New(mysqlstore.Config{DB: b.db.DB, PoolCap: poolCap, Registerer: b.reg})
	if err != nil {
		t.Fatal(err)
	}
	b.rd, err = redisstore.New(redisstore.Config{Client: b.r.Client, Prefix: b.r.Prefix, Ledger: b.my, Source: b.my,
		Limits: reservation.Limits{MaxQuantity: poolCap}})
	if err != nil {
		t.Fatal(err)
	}
	mc := mirror.Config{Pod: pod, MySQL: b.my, Redis: b.rd, Registerer: b.reg, Poll: 10 * time.Millisecond, Logger: testLogger(t)}
	if o.mirror != nil {
		o.mirror(&mc)
	}
	if b.m, err = mirror.New(mc); err != nil {
		t.Fatal(err)
	}
	if !o.noRelay {
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		go func() { defer close(stopped); _ = b.m.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-stopped })
	}
	if o.mode == "" {
		o.mode = authority.ModeShadow
	}
	b.modes = authority.NewStatic(o.mode)
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
	b.f, err = dualwrite.New(dualwrite.Config{Pod: pod, Redis: rd, MySQL: my, Modes: b.modes, Mirror: b.m, Observer: obs,
		ShadowTimeout: o.shadowTimeout, ShadowSlots: o.slots, Registerer: b.reg, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drain(t, b.f) })
	return b
}

// replica is another facade of the bundle's pod (another replica of the
// service) on the same stores and mirror, with its own flags and metrics.
func (b *bundle) replica(t *testing.T, modes authority.ModeSource) (*dualwrite.Facade, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	f, err := dualwrite.New(dualwrite.Config{Pod: pod, Redis: b.rd, MySQL: b.my, Modes: modes, Mirror: b.m, Registerer: reg, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drain(t, f) })
	return f, reg
}

// testLogger logs warnings and errors to the test's log (the relay's
// info lines would only be noise).
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

type multiObserver []dualwrite.Observer

func (m multiObserver) Observe(o compare.Observation) {
	for _, x := range m {
		x.Observe(o)
	}
}

// drain waits for a facade's shadow work in flight.
func drain(t *testing.T, f *dualwrite.Facade) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Close(ctx); err != nil {
		t.Errorf("drain: %v", err)
	}
}

func (b *bundle) drain(t *testing.T) { t.Helper(); drain(t, b.f) }

// stock sets stock through the facade: the store the flags name changes
// the ledger; Redis follows (at once through Redis, by the relay through
// MySQL).
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

// fences returns both stores' fences of the shop.
func (b *bundle) fences(t *testing.T) (my, rd reservation.Fence) {
	t.Helper()
	my, err := b.my.Fence(context.Background(), shop)
	if err != nil {
		t.Fatal(err)
	}
	if rd, err = b.rd.Fence(context.Background(), shop); err != nil {
		t.Fatal(err)
	}
	return my, rd
}

func line(item, qty int64) []reservation.Line {
	return []reservation.Line{{Item: item, Quantity: qty, Locations: []int64{1}}}
}

func (b *bundle) reserve(ctx context.Context, token string, ttl time.Duration, lines []reservation.Line) (reservation.ReserveResult, error) {
	return b.f.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: token, Lines: lines, TTL: ttl})
}

func (b *bundle) claim(ctx context.Context, token string) (reservation.ClaimResult, error) {
	return b.f.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token})
}

// mustReserve reserves through the facade and fails the test unless the
// cart is held.
func (b *bundle) mustReserve(t *testing.T, token string, lines []reservation.Line) reservation.ReserveResult {
	t.Helper()
	res, err := b.reserve(context.Background(), token, time.Minute, lines)
	if err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve %s: %+v %v", token, res, err)
	}
	return res
}

// counter sums a counter of reg whose labels include want.
func counter(t *testing.T, reg prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == k && l.GetValue() == v)
				}
				if !found {
					continue metric
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func (b *bundle) counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	return counter(t, b.reg, name, labels)
}

// waitFor polls cond until it holds, failing the test after 15s with
// cond's last explanation. It is how a test waits for the relay.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not after 15s: %s", what, why)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// faulty wraps a store: before each reservation call it runs fault, which
// may sleep, panic or return an error.
type faulty struct {
	reservation.Store
	fault func(ctx context.Context, op string, as reservation.Role) error
}

func (f faulty) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	if err := f.fault(ctx, "reserve", p.As); err != nil {
		return reservation.ReserveResult{}, err
	}
	return f.Store.Reserve(ctx, p)
}

func (f faulty) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	if err := f.fault(ctx, "claim", p.As); err != nil {
		return reservation.ClaimResult{}, err
	}
	return f.Store.Claim(ctx, p)
}

func (f faulty) Release(ctx context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	if err := f.fault(ctx, "release", p.As); err != nil {
		return reservation.ReleaseResult{}, err
	}
	return f.Store.Release(ctx, p)
}

// onShadow applies fault to shadow calls only; the store decides as usual.
func onShadow(fault func(context.Context) error) func(context.Context, string, reservation.Role) error {
	return func(ctx context.Context, _ string, as reservation.Role) error {
		if as != reservation.AsShadow {
			return nil
		}
		return fault(ctx)
	}
}

// sleeper ignores its context on purpose: a shadow that does not honour
// cancellation must still not hold the caller.
func sleeper(d time.Duration) func(context.Context) error {
	return func(context.Context) error { time.Sleep(d); return nil }
}

func panicker(context.Context) error { panic("shadow bug") }

func tok(prefix string, i ...any) string { return prefix + fmt.Sprint(i...) }

// failingSource cannot read its flags; it answers d (RedisSafe by
// default) beside the error, as a ModeSource does.
type failingSource struct{ d authority.Decision }

func (s failingSource) Decide(context.Context, string, int64) (authority.Decision, error) {
	return s.d, errors.New("flag provider down")
}

// fixedSource answers d, without an error.
type fixedSource struct{ d authority.Decision }

func (s fixedSource) Decide(context.Context, string, int64) (authority.Decision, error) {
	return s.d, nil
}

// untouchable is a store that must not be called: it counts and fails
// every call.
type untouchable struct {
	name  reservation.Authority
	calls *atomic.Int64
}

var (
	_ reservation.Store = untouchable{}
	_ reservation.Store = pingPong{}
	_ dualwrite.Mirror  = (*mirrorSpy)(nil)
)

var errTouched = errors.New("untouchable store called")

func (u untouchable) Name() reservation.Authority { return u.name }
func (u untouchable) Reserve(context.Context, *reservation.ReserveParams) (reservation.ReserveResult, error) {
	u.calls.Add(1)
	return reservation.ReserveResult{}, errTouched
}
func (u untouchable) Claim(context.Context, *reservation.ClaimParams) (reservation.ClaimResult, error) {
	u.calls.Add(1)
	return reservation.ClaimResult{}, errTouched
}
func (u untouchable) Release(context.Context, *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	u.calls.Add(1)
	return reservation.ReleaseResult{}, errTouched
}
func (u untouchable) Get(context.Context, *reservation.GetParams) (reservation.Hold, error) {
	u.calls.Add(1)
	return reservation.Hold{}, errTouched
}
func (u untouchable) Adjust(context.Context, *reservation.AdjustParams) (reservation.AdjustResult, error) {
	u.calls.Add(1)
	return reservation.AdjustResult{}, errTouched
}
func (u untouchable) Availability(context.Context, *reservation.AvailabilityParams) (reservation.AvailabilityResult, error) {
	u.calls.Add(1)
	return reservation.AvailabilityResult{}, errTouched
}
func (u untouchable) Reap(context.Context, *reservation.ReapParams) (reservation.ReapResult, error) {
	u.calls.Add(1)
	return reservation.ReapResult{}, errTouched
}

// mirrorSpy is a Mirror that counts its calls; handoff, when set, answers
// them (by default a handoff fails).
type mirrorSpy struct {
	handoffs, pushes, flushes atomic.Int64
	handoff                   func(shop int64, to reservation.Authority, epoch int64) (reservation.Fence, error)
}

func (m *mirrorSpy) Handoff(_ context.Context, shop int64, to reservation.Authority, epoch int64, _ bool) (reservation.Fence, error) {
	m.handoffs.Add(1)
	if m.handoff != nil {
		return m.handoff(shop, to, epoch)
	}
	return reservation.Fence{}, errors.New("mirrorSpy: no handoff")
}

func (m *mirrorSpy) Push() { m.pushes.Add(1) }

func (m *mirrorSpy) Evaluates() bool { return false }

func (m *mirrorSpy) Following(int64) (reservation.Fence, bool) { return reservation.Fence{}, false }

func (m *mirrorSpy) Flush(context.Context, int64) error {
	m.flushes.Add(1)
	return nil
}
