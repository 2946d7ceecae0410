package bench

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// The handoff scenario (issue 24, point 6): what a caller of a loaded shop
// sees while the shop's decider moves. A point is one shop of Size
// reservations, half live holds and half released (tombstones), loaded
// while the shop is in shadow mode (Redis decides, MySQL keeps shadow
// holds). Probe callers (the point's concurrency) reserve and release
// carts on that shop through a dualwrite.Facade whose mirror's relay and
// handoff sweeper run, with flags from authority.NewStatic, whose version
// grows with each change. Three switches follow, each watched until the
// new decider answered a probe and then for the point's duration:
//
//  1. advance: mode shadow -> mysql, a handoff to MySQL (copy ahead in the
//     background while Redis decides, then the cut-over);
//  2. kill: the kill switch redis, a handoff to Redis (MySQL yields, the
//     relay's feed for the shop is drained);
//  3. release: the kill switch released, a handoff to MySQL again.
//
// Per switch it reports the undecided window (from the start of the fence
// move, as the mirror reports it through mirror.Config.OnCutover, to the
// new decider's first answer to a probe), every probe call's wait in the
// window (the flags change to the end of the watch), the 503s, and the
// time from the flags change to the fence move (the copy, to MySQL).

const (
	handoffItems = 100
	handoffStock = 1_000_000
	// handoffTTL is the TTL of the loaded holds and the probes' holds.
	handoffTTL = 10 * time.Minute
	// maxHandoffSize bounds a handoff point's shop.
	maxHandoffSize = 1_000_000
	// handoffLoaders load the shop.
	handoffLoaders = 32
	// handoffLimit bounds one switch: a handoff that has not finished by
	// then fails the point.
	handoffLimit = 5 * time.Minute
	// handoffRate is the probes' reserves per second in all, unless
	// Options.Rate sets another: open-loop, so that a call held up by a
	// handoff delays the ones due after it and their waits count it, and
	// so that the shop does not grow by thousands of the probes'
	// reservations a second (each reserve leaves a hold or a tombstone).
	handoffRate = 200
)

// HandoffStats are what a handoff point's result adds to a window's: the
// switch and its figures.
type HandoffStats struct {
	// Switch is the flags change; To the store it hands the shop to.
	Switch       string `json:"switch"`
	To           string `json:"to"`
	FlagsVersion int64  `json:"flags_version"`
	// Loaded reservations (half live holds, half released) and how long
	// loading them took: the same on the point's three results.
	Loaded      int     `json:"loaded"`
	LoadSeconds float64 `json:"load_seconds"`
	// ShopSize is the shop's reservations when the flags changed: the
	// loaded ones and the probes' reserves until then (each leaves a hold
	// or a tombstone).
	ShopSize int64 `json:"shop_size"`
	// ProbeRate is the probes' reserves per second offered in all.
	ProbeRate float64 `json:"probe_rate"`
	// CopyMs is the flags change to the start of the fence move: to MySQL,
	// the copy ahead while Redis decides (and the sweeper's or a probe's
	// reaction to the new flags); to Redis, only that reaction.
	CopyMs float64 `json:"copy_ms"`
	// MoveMs is the fence move as the mirror reports it
	// (mirror.Config.OnCutover): to MySQL, Redis's yield to MySQL's
	// takeover of the last changes; to Redis, MySQL's yield to the end
	// of the drain.
	MoveMs float64 `json:"move_ms"`
	// UndecidedMs is the fence move's start to the new decider's first
	// answer to a probe.
	UndecidedMs float64 `json:"undecided_ms"`
	// OverlapCalls are the probe calls in flight at some moment of the
	// undecided window; OverlapMaxMs the longest of them.
	OverlapCalls int64   `json:"overlap_calls"`
	OverlapMaxMs float64 `json:"overlap_max_ms"`
	// Unavailable are the window's probe calls answered 503
	// (dualwrite.ErrDeciderUnreachable or ErrFlagsUnavailable); Errors
	// in the result counts every error by kind.
	Unavailable int64 `json:"unavailable"`
	// Slowest says where the time of the window's slowest probe call
	// went (its own time, from when it started: a call due while the one
	// before it ran starts late, and its wait counts that too): the
	// facade's calls of each store as the decider, of the mirror's
	// Handoff, and the rest (flags, routing, a CPU).
	Slowest string `json:"slowest,omitempty"`
}

// handoffSwitch is one flags change of the scenario.
type handoffSwitch struct {
	op, about string
	to        reservation.Authority
	apply     func(*authority.Static) error
}

var handoffSwitches = []handoffSwitch{
	{"advance", "mode shadow -> mysql", reservation.AuthorityMySQL, func(s *authority.Static) error { return s.SetMode(authority.ModeMySQL) }},
	{"kill", "kill switch redis", reservation.AuthorityRedis, func(s *authority.Static) error { return s.SetKill(authority.KillRedis) }},
	{"release", "kill switch released", reservation.AuthorityMySQL, func(s *authority.Static) error { return s.SetKill(authority.KillOff) }},
}

// handoffVariant reports whether v can run the handoff scenario: the
// facade in shadow mode, batched or not.
func handoffVariant(v string) bool {
	return v == VariantFacadeShadow || v == VariantFacadeShadow+Unbatched || v == VariantFacadeShadow+Alone
}

// handoffRig is the facade target of a handoff point, with the sweeper
// running, the mirror's fence moves recorded and the facade's stores
// watched.
type handoffRig struct {
	*facadeTarget
	// watched are the facade's stores, by name.
	watched map[reservation.Authority]*watchedStore
	mu      sync.Mutex
	moves   []fenceMove
	// stopSweeper ends the sweeper; sweeperDone is closed once it returned.
	stopSweeper context.CancelFunc
	sweeperDone chan struct{}
}

// fenceMove is one mirror.Config.OnCutover report.
type fenceMove struct {
	shop       int64
	to         reservation.Authority
	start, end time.Time
}

func newHandoffRig(env *pointEnv, variant string) (*handoffRig, error) {
	base, unbatched := strings.CutSuffix(variant, Unbatched)
	_, alone := strings.CutSuffix(base, Alone)
	cfg := mysqlstore.Config{Unbatched: unbatched}
	if unbatched || alone {
		cfg.GroupSize = 1
	}
	if unbatched {
		cfg.PoolConcurrency = -1
	}
	h := &handoffRig{watched: map[reservation.Authority]*watchedStore{}, sweeperDone: make(chan struct{})}
	ft, err := newFacadeTargetWith(env, authority.ModeShadow, cfg, facadeExtras{
		onCutover: func(shop int64, to reservation.Authority, start, end time.Time) {
			h.mu.Lock()
			h.moves = append(h.moves, fenceMove{shop: shop, to: to, start: start, end: end})
			h.mu.Unlock()
		},
		wrap: func(s reservation.Store) reservation.Store {
			w := &watchedStore{Store: s}
			h.watched[s.Name()] = w
			return w
		},
		wrapMirror: func(m dualwrite.Mirror) dualwrite.Mirror { return tracedMirror{m} },
	})
	if err != nil {
		return nil, err
	}
	h.facadeTarget = ft
	var sctx context.Context
	sctx, h.stopSweeper = context.WithCancel(context.Background())
	go func() {
		defer close(h.sweeperDone)
		_ = ft.mr.RunSweeper(sctx, mirror.SweeperConfig{Wanted: ft.f.Wanted, Replica: "bench",
			Version: func(context.Context) (int64, bool) { return ft.modes.Version(), true }})
	}()
	return h, nil
}

// move returns the first fence move of shop to to that started at or
// after since.
func (h *handoffRig) move(shop int64, to reservation.Authority, since time.Time) (fenceMove, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out fenceMove
	found := false
	for _, m := range h.moves {
		if m.shop == shop && m.to == to && !m.start.Before(since) && (!found || m.start.Before(out.start)) {
			out, found = m, true
		}
	}
	return out, found
}

// close stops the sweeper, the mirror's background handoffs, then the
// facade target.
func (h *handoffRig) close(ctx context.Context) error {
	h.stopSweeper()
	var err error
	select {
	case <-h.sweeperDone:
	case <-ctx.Done():
		err = fmt.Errorf("bench: the handoff sweeper did not stop: %w", ctx.Err())
	}
	return errors.Join(err, h.mr.Close(ctx), h.facadeTarget.close(ctx))
}

// watchedStore notes when the store first answered a probe's reserve or
// release as the decider after it was armed: the new decider's first
// answer after a switch.
type watchedStore struct {
	reservation.Store
	armed atomic.Bool
	first atomic.Int64 // unix ns; 0: none yet
}

func (w *watchedStore) arm() {
	w.first.Store(0)
	w.armed.Store(true)
}

func (w *watchedStore) note(as reservation.Role, err error) {
	if err == nil && as == reservation.AsAuthority && w.armed.Load() {
		w.first.CompareAndSwap(0, time.Now().UnixNano())
	}
}

// firstAnswer is the first answer since arm, if any.
func (w *watchedStore) firstAnswer() (time.Time, bool) {
	ns := w.first.Load()
	return time.Unix(0, ns), ns != 0
}

func (w *watchedStore) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	t0 := time.Now()
	res, err := w.Store.Reserve(ctx, p)
	w.note(p.As, err)
	traceOf(ctx).add(w.Name(), p.As, t0, err)
	return res, err
}

func (w *watchedStore) Release(ctx context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	t0 := time.Now()
	res, err := w.Store.Release(ctx, p)
	w.note(p.As, err)
	traceOf(ctx).add(w.Name(), p.As, t0, err)
	return res, err
}

// callTrace is where one probe call's time went: the facade's calls of
// each store as the decider (the shadow's run beside it) and of the
// mirror's Handoff; the rest is the facade's own (flags, routing) and
// waiting for a CPU.
type callTrace struct {
	mu                       sync.Mutex
	mysql, redis, handoff    time.Duration
	mysqlN, redisN, handoffN int
	notDecider               int
}

type traceKey struct{}

func withTrace(ctx context.Context, tr *callTrace) context.Context {
	return context.WithValue(ctx, traceKey{}, tr)
}

// traceOf is the call's trace, or nil (a call of no probe, or a shadow
// call, which runs apart).
func traceOf(ctx context.Context) *callTrace {
	tr, _ := ctx.Value(traceKey{}).(*callTrace)
	return tr
}

func (tr *callTrace) add(store reservation.Authority, as reservation.Role, t0 time.Time, err error) {
	if tr == nil || as != reservation.AsAuthority {
		return
	}
	d := time.Since(t0)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if errors.Is(err, reservation.ErrNotDecider) {
		tr.notDecider++
	}
	if store == reservation.AuthorityMySQL {
		tr.mysql, tr.mysqlN = tr.mysql+d, tr.mysqlN+1
	} else {
		tr.redis, tr.redisN = tr.redis+d, tr.redisN+1
	}
}

// String says where the time of a call that took total went.
func (tr *callTrace) String(total time.Duration) string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	rest := total - tr.mysql - tr.redis - tr.handoff
	return fmt.Sprintf("MySQL as decider %.1fms (calls: %d), Redis as decider %.1fms (%d), %d not the decider, handoffs %.1fms (%d), the rest %.1fms",
		ms(tr.mysql), tr.mysqlN, ms(tr.redis), tr.redisN, tr.notDecider, ms(tr.handoff), tr.handoffN, ms(rest))
}

// tracedMirror adds the time of each Handoff to the calling probe's
// trace.
type tracedMirror struct{ dualwrite.Mirror }

func (m tracedMirror) Handoff(ctx context.Context, shop int64, to reservation.Authority, epoch int64, force bool) (reservation.Fence, error) {
	t0 := time.Now()
	f, err := m.Mirror.Handoff(ctx, shop, to, epoch, force)
	if tr := traceOf(ctx); tr != nil {
		tr.mu.Lock()
		tr.handoff, tr.handoffN = tr.handoff+time.Since(t0), tr.handoffN+1
		tr.mu.Unlock()
	}
	return f, err
}

// loaded is what loading the shop acknowledged.
type loaded struct {
	holds    map[string][]reservation.Allocation
	released []string
	seconds  float64
}

// load puts n reservations in shop, half live holds and half released,
// with the calls the facade makes in shadow mode, made directly on the
// stores by handoffLoaders goroutines: Redis decides (reserve, and
// release for every other token), and MySQL keeps its shadow hold of the
// same cart (and releases it). The facade would skip shadow calls once
// its 64 shadow slots are full and would compare each pair; loading
// through the stores gives MySQL every shadow hold, at the rate the
// servers allow. The stores are the relay's, on direct connections.
func (h *handoffRig) load(ctx context.Context, shop int64, n int, sc *scenario, progress func(string)) (*loaded, error) {
	start := time.Now()
	ld := &loaded{holds: make(map[string][]reservation.Allocation, n/2+1)}
	var mu sync.Mutex
	var done atomic.Int64
	stopTick := make(chan struct{})
	tickDone := make(chan struct{})
	go func() {
		defer close(tickDone)
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopTick:
				return
			case <-t.C:
				d := done.Load()
				progress(fmt.Sprintf("loading: %d of %d reservations, %.0f/s", d, n, float64(d)/time.Since(start).Seconds()))
			}
		}
	}()
	rd, my := h.relayRd, h.relayMy
	err := forEachN(ctx, n, handoffLoaders, func(ctx context.Context, i int) error {
		token := "L" + strconv.FormatInt(shop, 10) + "-" + strconv.Itoa(i)
		lines := sc.cart(rand.New(rand.NewPCG(uint64(shop), uint64(i))), nil)
		p := &reservation.ReserveParams{Shop: shop, Token: token, Lines: lines, TTL: handoffTTL}
		res, err := rd.Reserve(ctx, p)
		if err == nil && res.Status != reservation.StatusReserved {
			err = fmt.Errorf("answered %s", res.Status)
		}
		if err != nil {
			return fmt.Errorf("load %s in Redis: %w", token, err)
		}
		sp := *p
		sp.As, sp.Authority = reservation.AsShadow, reservation.AuthorityRedis
		if err := retryContention(ctx, func() error { _, err := my.Reserve(ctx, &sp); return err }); err != nil {
			return fmt.Errorf("load %s as MySQL's shadow: %w", token, err)
		}
		if i%2 == 1 {
			rel := &reservation.ReleaseParams{Shop: shop, Token: token}
			if r, err := rd.Release(ctx, rel); err != nil || !r.Released {
				return fmt.Errorf("release %s in Redis: released %v, %v", token, r.Released, err)
			}
			srel := *rel
			srel.As = reservation.AsShadow
			if err := retryContention(ctx, func() error { _, err := my.Release(ctx, &srel); return err }); err != nil {
				return fmt.Errorf("release %s as MySQL's shadow: %w", token, err)
			}
		}
		mu.Lock()
		if i%2 == 1 {
			ld.released = append(ld.released, token)
		} else {
			ld.holds[token] = res.Allocations
		}
		mu.Unlock()
		done.Add(1)
		return nil
	})
	close(stopTick)
	<-tickDone
	ld.seconds = time.Since(start).Seconds()
	return ld, err
}

// retryContention runs fn again while it answers ErrContention (nothing
// was done), a few times.
func retryContention(ctx context.Context, fn func() error) error {
	var err error
	for attempt := range 8 {
		if err = fn(); !errors.Is(err, reservation.ErrContention) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 2 * time.Millisecond):
		}
	}
	return err
}

// forEachN runs fn for 0..n-1 on up to workers goroutines and returns the
// first error.
func forEachN(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, workers) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// probeCall is one call of a probe.
type probeCall struct {
	start, end time.Time
	release    bool
	reserved   bool // a reserve that held, or a release that released
	refused    bool
	err        error
	// late is how long after it was due the call started (open loop:
	// the calls before it were slow); its wait counts it.
	late  time.Duration
	trace *callTrace
}

// probe is one probe caller's record: its calls, and what they
// acknowledged (kept holds, released tokens) or left in doubt.
type probe struct {
	// mu guards calls, which the watch reads while the probe runs.
	mu       sync.Mutex
	calls    []probeCall
	kept     map[string][]reservation.Allocation
	released []string
	// doubt are the lines of calls whose outcome is unknown (an error):
	// their units may or may not be held.
	doubt       [][]reservation.Line
	doubtTokens []string
	// odd are answers that cannot be right (a release of a hold just
	// acknowledged that released nothing).
	odd []string
}

func (pr *probe) record(c probeCall) {
	pr.mu.Lock()
	pr.calls = append(pr.calls, c)
	pr.mu.Unlock()
}

// snapshot returns the calls so far.
func (pr *probe) snapshot() []probeCall {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return slices.Clone(pr.calls)
}

// run reserves a cart, and releases every other one it held right away,
// until stop.
func (pr *probe) run(ctx context.Context, ph *phase, f *dualwrite.Facade, w int, stop *atomic.Bool) {
	rng := rand.New(rand.NewPCG(uint64(ph.shop)+1<<32, uint64(w)))
	sched := ph.schedule(w)
	for n := 0; !stop.Load() && ctx.Err() == nil; n++ {
		lines := ph.sc.cart(rng, nil)
		token := "p" + strconv.FormatInt(ph.shop, 10) + "-" + strconv.Itoa(w) + "-" + strconv.Itoa(n)
		t0, due := sched.next(ctx, stop)
		if !due {
			return
		}
		late, tr := time.Since(t0), &callTrace{}
		res, err := f.Reserve(withTrace(ctx, tr), &reservation.ReserveParams{Shop: ph.shop, Token: token, Lines: lines, TTL: handoffTTL})
		reserved := err == nil && res.Status == reservation.StatusReserved
		pr.record(probeCall{start: t0, end: time.Now(), reserved: reserved, refused: err == nil && !reserved, err: err,
			late: late, trace: tr})
		switch {
		case err != nil:
			pr.doubt, pr.doubtTokens = append(pr.doubt, lines), append(pr.doubtTokens, token)
		case !reserved:
		case n%2 == 0:
			pr.kept[token] = res.Allocations
		default:
			t1, tr := time.Now(), &callTrace{}
			rr, err := f.Release(withTrace(ctx, tr), &reservation.ReleaseParams{Shop: ph.shop, Token: token})
			pr.record(probeCall{start: t1, end: time.Now(), release: true, reserved: err == nil && rr.Released, err: err, trace: tr})
			switch {
			case err != nil:
				pr.doubt, pr.doubtTokens = append(pr.doubt, lines), append(pr.doubtTokens, token)
			case !rr.Released:
				pr.odd = append(pr.odd, fmt.Sprintf("releasing %s, a hold just acknowledged, released nothing", token))
			default:
				pr.released = append(pr.released, token)
			}
		}
	}
}

// switchWatch is what one switch's watch recorded.
type switchWatch struct {
	sw            handoffSwitch
	version       int64
	at, end       time.Time
	move          fenceMove
	first         time.Time
	before, after snapshot
	err           error
}

// handoffPoint runs one point of the handoff scenario.
func (r *runner) handoffPoint(ctx context.Context, pt Point, shop int64) []Result {
	sc := scenarios[pt.Scenario]
	p := r.srv.paths[pt.Latency]
	base := Result{Point: pt, AddedRTTms: pt.Latency.Milliseconds(),
		MySQLRTTms: ms(p.mysqlRTT), RedisRTTms: ms(p.redisRTT), CommitMs: ms(p.commit)}
	progress := func(s string) { fmt.Fprintf(r.opts.Progress, "\n    %s", s) }
	fail := func(op string, err error) []Result {
		base.Op, base.Error, base.Invariant = op, err.Error(), "not checked"
		return []Result{base}
	}
	p.db.SetMaxOpenConns(pt.Concurrency + shadowConns)
	p.db.SetMaxIdleConns(pt.Concurrency + shadowConns)
	env := &pointEnv{path: p, prefix: r.srv.prefix, poolCap: r.opts.PoolCap, buckets: r.opts.Buckets,
		concurrency: pt.Concurrency, relayDB: r.srv.direct, relayRedis: r.srv.redisDirect}
	h, err := newHandoffRig(env, pt.Variant)
	if err != nil {
		return fail("setup", err)
	}
	after := context.WithoutCancel(ctx)
	defer func() {
		cctx, cancel := context.WithTimeout(after, time.Minute)
		defer cancel()
		_ = h.close(cctx)
		_, _ = r.srv.direct.ExecContext(cctx, sqlDiscardFeed, shop)
		if !r.opts.Keep {
			// The shop's keys are many: the next point's Redis starts
			// without them.
			_ = deletePrefix(cctx, r.srv.redisDirect, r.srv.prefix+"{shop:"+strconv.FormatInt(shop, 10)+"}:")
		}
	}()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = h.setup(sctx, shop, sc)
	cancel()
	if err != nil {
		return fail("setup", fmt.Errorf("setup: %w", err))
	}
	ld, err := h.load(ctx, shop, pt.Size, sc, progress)
	if err != nil {
		return fail("load", fmt.Errorf("load: %w", err))
	}
	progress(fmt.Sprintf("loaded %d reservations (%d live holds, %d released) in %.1fs, %.0f/s",
		pt.Size, len(ld.holds), len(ld.released), ld.seconds, float64(pt.Size)/ld.seconds))
	if settled, undo, err := settle(ctx, h.path.db); err != nil {
		progress(fmt.Sprintf("could not read InnoDB's history list: %v (measuring at once)", err))
	} else {
		progress(fmt.Sprintf("InnoDB purged the load's undo in %.1fs (history list %d)", settled.Seconds(), undo))
	}

	pr := *r
	if pr.opts.Rate == 0 {
		pr.opts.Rate = handoffRate
	}
	ph := &phase{r: &pr, pt: pt, sc: sc, tgt: h.facadeTarget, path: p, shop: shop}
	probes := make([]*probe, pt.Concurrency)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range probes {
		probes[w] = &probe{kept: map[string][]reservation.Allocation{}}
		wg.Go(func() { probes[w].run(ctx, ph, h.f, w, &stop) })
	}
	sleepCtx(ctx, r.opts.Warmup)
	var watches []switchWatch
	for _, sw := range handoffSwitches {
		if ctx.Err() != nil {
			break
		}
		wt := h.watch(ctx, ph, shop, sw, r.opts.Duration)
		watches = append(watches, wt)
		if wt.err != nil {
			progress(fmt.Sprintf("%s (%s): FAILED: %v", sw.op, sw.about, wt.err))
			break
		}
		progress(fmt.Sprintf("%s (%s, flags version %d): fence move started %.0fms after the flags, took %.1fms; first answer of %s %.1fms after its start; slowest call: %s",
			sw.op, sw.about, wt.version, ms(wt.move.start.Sub(wt.at)), ms(wt.move.end.Sub(wt.move.start)), sw.to, ms(wt.first.Sub(wt.move.start)),
			windowStats(&Result{}, wt, ld, probes).Slowest))
	}
	stop.Store(true)
	wg.Wait()

	cctx, cancel := context.WithTimeout(after, 5*time.Minute)
	defer cancel()
	inv := "ok"
	if len(watches) < len(handoffSwitches) || watches[len(watches)-1].err != nil {
		inv = "not checked: the switches did not finish"
	} else if err := h.check(cctx, shop, sc, ld, probes); err != nil {
		inv = "VIOLATED: " + err.Error()
	}
	var out []Result
	for _, wt := range watches {
		res := base
		res.Op = wt.sw.op
		res.Handoff = windowStats(&res, wt, ld, probes)
		res.Handoff.Loaded, res.Handoff.LoadSeconds, res.Handoff.ProbeRate = pt.Size, ld.seconds, pr.opts.Rate
		if wt.err != nil {
			res.Error = wt.err.Error()
		}
		res.fill(windowLatencies(wt, probes), wt.before, wt.after, r.srv)
		res.Invariant = inv
		res.Interrupted = ctx.Err() != nil
		out = append(out, res)
	}
	if len(out) == 0 {
		return fail("advance", fmt.Errorf("interrupted before the first switch: %w", ctx.Err()))
	}
	return out
}

// watch makes one switch and watches it: until the mirror reported the
// fence move and the new decider answered a probe, then for duration.
func (h *handoffRig) watch(ctx context.Context, ph *phase, shop int64, sw handoffSwitch, duration time.Duration) switchWatch {
	wt := switchWatch{sw: sw}
	w := h.watched[sw.to]
	wt.before = ph.snapshot(ctx)
	wt.at = time.Now()
	w.arm()
	if wt.err = sw.apply(h.modes); wt.err != nil {
		wt.end, wt.after = time.Now(), ph.snapshot(ctx)
		return wt
	}
	wt.version = h.modes.Version()
	deadline := wt.at.Add(handoffLimit)
	for {
		mv, moved := h.move(shop, sw.to, wt.at)
		first, answered := w.firstAnswer()
		if moved && answered {
			wt.move, wt.first = mv, first
			break
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			wt.err = fmt.Errorf("the handoff to %s did not finish within %s (fence moved: %v, the new decider answered: %v)", sw.to, handoffLimit, moved, answered)
			if ctx.Err() != nil {
				wt.err = fmt.Errorf("interrupted: %w", ctx.Err())
			}
			wt.end, wt.after = time.Now(), ph.snapshot(ctx)
			return wt
		}
		time.Sleep(2 * time.Millisecond)
	}
	sleepCtx(ctx, duration)
	wt.end, wt.after = time.Now(), ph.snapshot(ctx)
	return wt
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// inWindow reports whether a call started inside the switch's watch.
func (wt switchWatch) inWindow(c probeCall) bool {
	return !c.start.Before(wt.at) && c.start.Before(wt.end)
}

// windowLatencies are the waits of every probe call that started in the
// window, errors included.
func windowLatencies(wt switchWatch, probes []*probe) []time.Duration {
	var lat []time.Duration
	for _, pr := range probes {
		for _, c := range pr.snapshot() {
			if wt.inWindow(c) {
				lat = append(lat, c.end.Sub(c.start))
			}
		}
	}
	return lat
}

// windowStats fills res's counts from the window's probe calls and
// returns the switch's figures.
func windowStats(res *Result, wt switchWatch, ld *loaded, probes []*probe) *HandoffStats {
	hs := &HandoffStats{Switch: wt.sw.about, To: string(wt.sw.to), FlagsVersion: wt.version}
	res.Seconds = wt.end.Sub(wt.at).Seconds()
	res.Errors, res.ErrorSamples = map[string]int64{}, map[string]string{}
	if wt.err == nil {
		hs.CopyMs = ms(wt.move.start.Sub(wt.at))
		hs.MoveMs = ms(wt.move.end.Sub(wt.move.start))
		hs.UndecidedMs = ms(wt.first.Sub(wt.move.start))
	}
	hs.ShopSize = int64(len(ld.holds) + len(ld.released))
	var slowest time.Duration
	for _, pr := range probes {
		for _, c := range pr.snapshot() {
			if !c.release && c.start.Before(wt.at) {
				hs.ShopSize++
			}
			if wt.err == nil && c.start.Before(wt.first) && c.end.After(wt.move.start) {
				hs.OverlapCalls++
				hs.OverlapMaxMs = max(hs.OverlapMaxMs, ms(c.end.Sub(c.start)))
			}
			if !wt.inWindow(c) {
				continue
			}
			if own := c.end.Sub(c.start) - c.late; own > slowest {
				slowest = own
				op := "reserve"
				if c.release {
					op = "release"
				}
				hs.Slowest = fmt.Sprintf("a %s %.0fms after the flags change took %.1fms: %s", op, ms(c.start.Add(c.late).Sub(wt.at)), ms(own),
					c.trace.String(own))
			}
			switch {
			case c.err != nil:
				k := errKind(c.err)
				res.Errors[k]++
				if _, ok := res.ErrorSamples[k]; !ok {
					res.ErrorSamples[k] = c.err.Error()
				}
				if unavailable(c.err) {
					hs.Unavailable++
				}
			case c.refused:
				res.Refused++
			default:
				res.OK++
			}
		}
	}
	return hs
}

// unavailable reports whether err is a 503: the decider could not be
// settled or reached, or the flags could not be read.
func unavailable(err error) bool {
	return errors.Is(err, dualwrite.ErrDeciderUnreachable) || errors.Is(err, dualwrite.ErrFlagsUnavailable)
}

// check holds the stores to what the load and the probes acknowledged,
// once the probes have stopped after the three switches (MySQL decides):
// no probe call failed; per item, MySQL holds exactly the acknowledged
// live holds (calls in doubt either way), the ledger lost nothing (no
// claims) and the pool's projection holds; Redis, once the feed is
// drained, follows with the same quantities and the same holds; every
// acknowledged hold, the load's and the probes', is held by MySQL with
// the allocations it was acknowledged with, and read so through the
// facade (the probes' every one, a sample of the load's); released
// tokens read as released.
func (h *handoffRig) check(ctx context.Context, shop int64, sc *scenario, ld *loaded, probes []*probe) error {
	var errs []error
	failed, sample := 0, ""
	b := newBook(sc)
	addAllocs := func(to []atomic.Int64, allocs []reservation.Allocation) {
		for _, a := range allocs {
			to[a.Item-1].Add(a.Quantity)
		}
	}
	want := map[string][]reservation.Allocation{}
	inDoubt := map[string]bool{}
	for t, a := range ld.holds {
		want[t] = a
		addAllocs(b.reserved, a)
	}
	for _, pr := range probes {
		for _, c := range pr.snapshot() {
			if c.err != nil {
				failed++
				sample = c.err.Error()
			}
		}
		for t, a := range pr.kept {
			want[t] = a
			addAllocs(b.reserved, a)
		}
		for i, lines := range pr.doubt {
			b.add(b.reserveDoubt, lines)
			inDoubt[pr.doubtTokens[i]] = true
		}
		for _, o := range pr.odd {
			errs = append(errs, errors.New(o))
		}
	}
	if failed > 0 {
		errs = append(errs, fmt.Errorf("%d probe calls failed (the last: %s)", failed, sample))
	}
	if err := h.mr.Flush(ctx, shop); err != nil {
		errs = append(errs, fmt.Errorf("drain the feed into Redis: %w", err))
	}
	if err := checkPool(ctx, h.path.db, shop, b, h.my.PoolCap(), true); err != nil {
		errs = append(errs, fmt.Errorf("in MySQL: %w", err))
	}
	if err := checkRedis(ctx, h.relayRd, shop, b); err != nil {
		errs = append(errs, fmt.Errorf("in Redis: %w", err))
	}
	myHolds, err := h.relayMy.Holds(ctx, shop)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	snap, err := h.relayRd.Snapshot(ctx, shop)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	errs = append(errs, sameHolds("MySQL", myHolds, want, inDoubt)...)
	errs = append(errs, sameHolds("Redis", snap.Holds, want, inDoubt)...)
	// Through the facade, as a caller reads them.
	var gets []func(ctx context.Context) error
	get := func(token string, allocs []reservation.Allocation) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			hold, err := h.f.Get(ctx, &reservation.GetParams{Shop: shop, Token: token})
			switch {
			case allocs == nil && !errors.Is(err, reservation.ErrReleased):
				return fmt.Errorf("GET %s, released: %+v, %v", token, hold, err)
			case allocs != nil && err != nil:
				return fmt.Errorf("GET %s, held: %w", token, err)
			case allocs != nil && !sameAllocations(hold.Allocations, allocs):
				return fmt.Errorf("GET %s: allocations %v, acknowledged %v", token, hold.Allocations, allocs)
			}
			return nil
		}
	}
	for _, pr := range probes {
		for t, a := range pr.kept {
			gets = append(gets, get(t, a))
		}
		for _, t := range pr.released {
			gets = append(gets, get(t, nil))
		}
	}
	n := 0
	for t, a := range ld.holds {
		if n++; n > 100 {
			break
		}
		gets = append(gets, get(t, a))
	}
	for _, t := range ld.released[:min(100, len(ld.released))] {
		gets = append(gets, get(t, nil))
	}
	var mu sync.Mutex
	_ = forEach(ctx, len(gets), func(ctx context.Context, i int) error {
		if err := gets[i](ctx); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
		return nil
	})
	if len(errs) > 5 {
		errs = append(errs[:5], fmt.Errorf("and %d more", len(errs)-5))
	}
	return errors.Join(errs...)
}

// sameHolds compares a store's holds with the acknowledged ones: every
// acknowledged hold with its allocations, and nothing else but tokens
// in doubt.
func sameHolds(store string, got []reservation.Hold, want map[string][]reservation.Allocation, inDoubt map[string]bool) []error {
	seen := map[string]bool{}
	extra, differ := 0, 0
	var example string
	for _, hold := range got {
		a, ok := want[hold.Token]
		switch {
		case ok && sameAllocations(hold.Allocations, a):
			seen[hold.Token] = true
		case ok:
			seen[hold.Token] = true
			differ++
			example = fmt.Sprintf("%s holds %v, acknowledged %v", hold.Token, hold.Allocations, a)
		case !inDoubt[hold.Token]:
			extra++
			example = fmt.Sprintf("%s, which nobody acknowledged, is held", hold.Token)
		}
	}
	missing := 0
	for t := range want {
		if !seen[t] {
			missing++
			example = fmt.Sprintf("%s, acknowledged, is not held", t)
		}
	}
	if extra == 0 && missing == 0 && differ == 0 {
		return nil
	}
	return []error{fmt.Errorf("holds in %s: %d acknowledged missing, %d with other allocations, %d held that nobody acknowledged (e.g. %s)",
		store, missing, differ, extra, example)}
}

func sameAllocations(a, b []reservation.Allocation) bool {
	order := func(x, y reservation.Allocation) int {
		return cmp.Or(cmp.Compare(x.Item, y.Item), cmp.Compare(x.Location, y.Location))
	}
	a, b = slices.SortedFunc(slices.Values(a), order), slices.SortedFunc(slices.Values(b), order)
	return slices.Equal(a, b)
}

// The handoff scenario's acceptance targets (issue 24, acceptance d).
const (
	// handoffMaxWaitMs bounds every probe call's wait in a switch's
	// window, at the largest shop.
	handoffMaxWaitMs = 250
	// handoffMaxUndecidedMs bounds the undecided window at the largest
	// shop.
	handoffMaxUndecidedMs = 100
	// handoffMaxGrowth bounds how much each figure grows from the
	// smallest shop to the largest.
	handoffMaxGrowth = 2
)

// handoffTargets judges the handoff points at added latency l: at the
// largest shop run, per switch, the longest probe wait, the probe calls
// that failed (503s or any other error) and the undecided window; from
// the smallest shop to the largest, the growth of the undecided window
// and of the waits' p50, p99 and maximum.
func (rep *Report) handoffTargets(l int64, add func(t Target, ratio, bound float64, atLeast bool)) {
	type key struct {
		variant string
		c       int
		op      string
	}
	bySize := map[key]map[int]Result{}
	var keys []key
	for _, r := range rep.Results {
		if r.Scenario != ScenarioHandoff || r.AddedRTTms != l || r.Error != "" || r.Handoff == nil {
			continue
		}
		k := key{r.Variant, r.Concurrency, r.Op}
		if bySize[k] == nil {
			bySize[k] = map[int]Result{}
			keys = append(keys, k)
		}
		bySize[k][r.Size] = r
	}
	for _, k := range keys {
		sizes := slices.Sorted(maps.Keys(bySize[k]))
		small, large := bySize[k][sizes[0]], bySize[k][sizes[len(sizes)-1]]
		h := large.Handoff
		where := fmt.Sprintf("%s %s c=%d +%dms n=%d", ScenarioHandoff, k.variant, k.c, l, large.Size)
		name := k.op + " (" + h.Switch + ")"
		add(Target{Name: name + ": longest probe wait, ms", Where: where,
			Detail: fmt.Sprintf("%d calls, p50 %.2fms, p99 %.2fms, max %.2fms", large.OK+large.Refused+large.errorCount(), large.P50ms, large.P99ms, large.MaxMs)},
			large.MaxMs, handoffMaxWaitMs, false)
		add(Target{Name: name + ": probe calls failed (503s and any other error)", Where: where,
			Detail: fmt.Sprintf("%d 503s; errors: %s", h.Unavailable, errorsCell(large))}, float64(large.errorCount()), 0, false)
		add(Target{Name: name + ": undecided window, ms", Where: where,
			Detail: fmt.Sprintf("fence move %.1fms (to %s), then %.1fms to the first answer", h.MoveMs, h.To, h.UndecidedMs-h.MoveMs)},
			h.UndecidedMs, handoffMaxUndecidedMs, false)
		if small.Size == large.Size {
			continue
		}
		grow := fmt.Sprintf("%s %s c=%d +%dms n=%d -> %d", ScenarioHandoff, k.variant, k.c, l, small.Size, large.Size)
		for _, f := range []struct {
			what  string
			s, lg float64
		}{
			{"undecided window", small.Handoff.UndecidedMs, h.UndecidedMs},
			{"probe wait p50", small.P50ms, large.P50ms},
			{"probe wait p99", small.P99ms, large.P99ms},
			{"longest probe wait", small.MaxMs, large.MaxMs},
		} {
			add(Target{Name: name + ": growth of the " + f.what, Where: grow,
				Detail: fmt.Sprintf("%.2fms -> %.2fms", f.s, f.lg)}, f.lg/max(f.s, 0.01), handoffMaxGrowth, false)
		}
	}
}

// handoffTable writes the handoff scenario's results: a row per shop
// size and switch.
func (rep *Report) handoffTable(b *strings.Builder) {
	b.WriteString("Window: the flags change to the end of the watch (the new decider's first answer to a probe, then the window's duration). " +
		"Waits: every probe call (reserve or release) that started in the window, errors included. " +
		"Undecided: the fence move's start (the old decider's yield) to the new decider's first answer to a probe. " +
		"Copy: the flags change to the fence move's start. In flight: probe calls in flight during the undecided window, and the longest. " +
		"Shop: its reservations when the flags changed, the loaded n and the probes' so far.\n\n")
	b.WriteString("| variant | c | +rtt | n | switch | to | flags v | shop | probes/s | load s | copy ms | fence move ms | undecided ms | calls | wait p50 ms | wait p99 ms | wait max ms | in flight (max ms) | 503s | errors | cores mysqld/redis/gen | load | invariant |\n")
	b.WriteString("|---|--:|--:|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|---|---|--:|---|\n")
	for _, r := range rep.Results {
		if r.Scenario != ScenarioHandoff {
			continue
		}
		if r.Error != "" && r.Handoff == nil {
			fmt.Fprintf(b, "| %s | %d | %d | %d | %s | failed: %s |\n", r.Variant, r.Concurrency, r.AddedRTTms, r.Size, r.Op, mdEscape(r.Error))
			continue
		}
		h := r.Handoff
		inv := r.Invariant
		if inv != "ok" {
			inv = "**" + mdEscape(inv) + "**"
		}
		if r.Error != "" {
			inv = "failed: " + mdEscape(r.Error) + "; " + inv
		}
		if r.Interrupted {
			inv += " (interrupted)"
		}
		fmt.Fprintf(b, "| %s | %d | %d | %d | %s (%s) | %s | %d | %d | %g | %.1f | %.0f | %.1f | %.1f | %d | %.2f | %.2f | %.2f | %d (%.1f) | %d | %s | %s | %.1f | %s |\n",
			r.Variant, r.Concurrency, r.AddedRTTms, r.Size, r.Op, h.Switch, h.To, h.FlagsVersion, h.ShopSize, h.ProbeRate, h.LoadSeconds, h.CopyMs, h.MoveMs, h.UndecidedMs,
			r.OK+r.Refused+r.errorCount(), r.P50ms, r.P99ms, r.MaxMs, h.OverlapCalls, h.OverlapMaxMs, h.Unavailable, errorsCell(r),
			coresCell(r), r.LoadAvg, inv)
	}
	b.WriteString("\nThe slowest probe call of each switch (its own time, lateness aside), and where its time went:\n\n")
	for _, r := range rep.Results {
		if r.Scenario == ScenarioHandoff && r.Handoff != nil && r.Handoff.Slowest != "" {
			fmt.Fprintf(b, "- n=%d %s: %s\n", r.Size, r.Op, mdEscape(r.Handoff.Slowest))
		}
	}
	b.WriteString("\n")
}

// settle waits, at most settleMax, for InnoDB to purge what the load left
// (its history list below settleBelow): a shop loaded in two minutes
// leaves seconds of purge that would compete with the switches for the
// server's core, which no production shop about to be handed off has.
// It returns how long it waited and the list's length at the end.
func settle(ctx context.Context, db *sql.DB) (time.Duration, int64, error) {
	start := time.Now()
	for {
		var n int64
		if err := db.QueryRowContext(ctx, sqlHistoryLength).Scan(&n); err != nil {
			return time.Since(start), 0, err
		}
		if n < settleBelow || time.Since(start) > settleMax {
			return time.Since(start), n, nil
		}
		sleepCtx(ctx, 100*time.Millisecond)
		if ctx.Err() != nil {
			return time.Since(start), n, ctx.Err()
		}
	}
}

const (
	settleBelow = 1000
	settleMax   = time.Minute
)
