package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/internal/proccpu"
	"github.com/seed31b0e981/reservoir/reservation"
)

// Run runs the sweeps of opts and returns their report.
//
// Cancelling ctx (Ctrl-C) stops the point in flight: its callers finish the
// call they are in, the point is checked and reported as interrupted, the
// run cleans up (database, Redis keys, server settings) and Run returns the
// report of what ran with ctx's error.
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	plan := RoundPlan(opts.Sweeps, opts.Rounds)
	var latencies []time.Duration
	for _, p := range plan {
		if !slices.Contains(latencies, p.Latency) {
			latencies = append(latencies, p.Latency)
		}
	}
	started := time.Now()
	if opts.Rounds > 1 {
		fmt.Fprintf(opts.Progress, "bench: %d points in %d rounds of %d, %s window each (+%s warmup); creating the run's database and proxies\n",
			len(plan), opts.Rounds, len(plan)/opts.Rounds, opts.Duration, opts.Warmup)
	} else {
		fmt.Fprintf(opts.Progress, "bench: %d points, %s window each (+%s warmup); creating the run's database and proxies\n",
			len(plan), opts.Duration, opts.Warmup)
	}
	srv, err := openServers(ctx, opts, latencies)
	if err != nil {
		return nil, err
	}
	rep := newReport(ctx, opts, srv, started)
	rep.Pairs = opts.Pairs
	if opts.Rounds > 1 {
		rep.Rounds = opts.Rounds
	}
	r := &runner{opts: opts, srv: srv}
	for i, pt := range plan {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(opts.Progress, "[%*d/%d] ", len(strconv.Itoa(len(plan))), i+1, len(plan))
		if pt.Round > 0 {
			fmt.Fprintf(opts.Progress, "round %*d/%d ", len(strconv.Itoa(opts.Rounds)), pt.Round, opts.Rounds)
		}
		fmt.Fprintf(opts.Progress, "%-40s", pt.String())
		results := r.point(ctx, pt, int64(i+1))
		rep.Results = append(rep.Results, results...)
		for _, res := range results {
			fmt.Fprintf(opts.Progress, " %s", res.progress())
		}
		elapsed := time.Since(started)
		left := time.Duration(float64(elapsed) / float64(i+1) * float64(len(plan)-i-1)).Round(time.Second)
		fmt.Fprintf(opts.Progress, " [%s, ~%s left]\n", elapsed.Round(time.Second), left)
	}
	rep.Interrupted = ctx.Err() != nil
	rep.Seconds = time.Since(started).Seconds()
	rep.finish()
	if cerr := srv.close(context.WithoutCancel(ctx)); cerr != nil {
		err = cerr
	}
	if rep.Interrupted {
		fmt.Fprintln(opts.Progress, "bench: interrupted; cleaned up; reporting the points done")
		err = errors.Join(ctx.Err(), err)
	}
	return rep, err
}

type runner struct {
	opts Options
	srv  *servers
}

// point runs one point: a fresh target on a fresh shop, its setup, its
// window(s) and its invariant check. A claim point has two results.
func (r *runner) point(ctx context.Context, pt Point, shop int64) []Result {
	sc := scenarios[pt.Scenario]
	if sc.handoff {
		return r.handoffPoint(ctx, pt, shop)
	}
	if sc.killflood {
		return r.killFloodPoint(ctx, pt, shop)
	}
	p := r.srv.paths[pt.Latency]
	base := Result{Point: pt, AddedRTTms: pt.Latency.Milliseconds(), Op: "reserve",
		MySQLRTTms: ms(p.mysqlRTT), RedisRTTms: ms(p.redisRTT), CommitMs: ms(p.commit)}
	fail := func(err error) []Result {
		base.Error = err.Error()
		base.Invariant = "not checked"
		return []Result{base}
	}
	// Room for every caller, the facade's shadow slots and the refills;
	// the idle connections of a bigger point before are closed.
	p.db.SetMaxOpenConns(pt.Concurrency + shadowConns)
	p.db.SetMaxIdleConns(pt.Concurrency + shadowConns)
	env := &pointEnv{path: p, prefix: r.srv.prefix, poolCap: r.opts.PoolCap, buckets: r.opts.Buckets,
		concurrency: pt.Concurrency, relayDB: r.srv.direct, relayRedis: r.srv.redisDirect}
	if sc.poolCap > 0 {
		env.poolCap = sc.poolCap
	}
	tgt, err := newTarget(pt.Variant, env)
	if err != nil {
		return fail(err)
	}
	after := context.WithoutCancel(ctx)
	defer func() {
		cctx, cancel := context.WithTimeout(after, 30*time.Second)
		defer cancel()
		_ = tgt.close(cctx)
		// The stores record every change Redis would follow in their
		// change feed, and only a facade point runs a relay to deliver
		// them. Left there, one point's entries would be delivered by a
		// later facade point's relay, inside its window.
		_, _ = r.srv.direct.ExecContext(cctx, sqlDiscardFeed, shop)
	}()
	b := newBook(sc)
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = tgt.setup(sctx, shop, sc)
	cancel()
	if err != nil {
		return fail(fmt.Errorf("setup: %w", err))
	}
	ph := &phase{r: r, pt: pt, sc: sc, tgt: tgt, path: p, shop: shop, book: b}
	out := []Result{ph.reserve(ctx, base)}
	if sc.claims && ctx.Err() == nil {
		claim := base
		claim.Op = "claim"
		out = append(out, ph.claims(ctx, claim))
	}
	cctx, cancel := context.WithTimeout(after, 2*time.Minute)
	defer cancel()
	inv := "ok"
	if err := tgt.check(cctx, shop, b); err != nil {
		inv = "VIOLATED: " + err.Error()
	} else if n := ph.early.Load(); n > 0 {
		inv = fmt.Sprintf("VIOLATED: %d refusals while at least %d units were unsold", n, pt.Concurrency)
	}
	for i := range out {
		out[i].Invariant = inv
		out[i].Interrupted = ctx.Err() != nil
	}
	return out
}

// phase drives one window of a point.
type phase struct {
	r    *runner
	pt   Point
	sc   *scenario
	tgt  target
	path *path
	shop int64
	book *book
	// held are the acknowledged holds, per caller, for the claim window.
	held [][]heldCart
	// early counts drain refusals while stock remained (an undersell).
	early atomic.Int64
}

type heldCart struct {
	token string
	lines []reservation.Line
}

// recorder is one caller's measurements inside the window.
type recorder struct {
	lat     []time.Duration
	ok      int64
	refused int64
	errs    map[string]int64
	samples map[string]string
}

func (rec *recorder) record(d time.Duration, ok bool, err error) {
	switch {
	case err != nil:
		if rec.errs == nil {
			rec.errs, rec.samples = map[string]int64{}, map[string]string{}
		}
		k := errKind(err)
		rec.errs[k]++
		if _, seen := rec.samples[k]; !seen {
			rec.samples[k] = err.Error()
		}
		return
	case ok:
		rec.ok++
	default:
		rec.refused++
	}
	rec.lat = append(rec.lat, d)
}

// window runs one caller function per concurrency slot. The callers run
// through the warmup unmeasured, then the window opens (counters are read),
// and closes after the duration, or, with untilDone, when every caller has
// returned (with a generous timeout). Calls are counted when they finish
// inside the window.
func (ph *phase) window(ctx context.Context, res Result, warmup, duration time.Duration, untilDone bool,
	caller func(ctx context.Context, w int, measuring, stop *atomic.Bool, rec *recorder)) Result {
	c := ph.pt.Concurrency
	var measuring, stop atomic.Bool
	recs := make([]recorder, c)
	var wg sync.WaitGroup
	done := make(chan struct{})
	if warmup == 0 {
		measuring.Store(true)
	}
	before := ph.snapshot(ctx)
	start := time.Now()
	for w := range c {
		wg.Go(func() { caller(ctx, w, &measuring, &stop, &recs[w]) })
	}
	go func() { wg.Wait(); close(done) }()
	if warmup > 0 {
		select {
		case <-time.After(warmup):
		case <-ctx.Done():
		case <-done:
		}
		before = ph.snapshot(ctx)
		start = time.Now()
		measuring.Store(true)
	}
	limit := duration
	if untilDone {
		limit = max(4*duration, 30*time.Second)
	}
	select {
	case <-time.After(limit):
	case <-ctx.Done():
	case <-done:
	}
	measuring.Store(false)
	elapsed := time.Since(start)
	after := ph.snapshot(ctx)
	stop.Store(true)
	<-done
	res.Seconds = elapsed.Seconds()
	var lat []time.Duration
	res.Errors, res.ErrorSamples = map[string]int64{}, map[string]string{}
	for _, rec := range recs {
		lat = append(lat, rec.lat...)
		res.OK += rec.ok
		res.Refused += rec.refused
		for k, n := range rec.errs {
			res.Errors[k] += n
			res.ErrorSamples[k] = rec.samples[k]
		}
	}
	res.fill(lat, before, after, ph.r.srv)
	return res
}

// reserve is the reserve window.
func (ph *phase) reserve(ctx context.Context, res Result) Result {
	warmup := ph.r.opts.Warmup
	if ph.sc.drain {
		warmup = 0 // the stock is the run: every call counts
	}
	ph.held = make([][]heldCart, ph.pt.Concurrency)
	seed := uint64(ph.shop)
	return ph.window(ctx, res, warmup, ph.r.opts.Duration, ph.sc.drain,
		func(ctx context.Context, w int, measuring, stop *atomic.Bool, rec *recorder) {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			var lines []reservation.Line
			sched := ph.schedule(w)
			for n := 0; !stop.Load() && ctx.Err() == nil; n++ {
				lines = ph.sc.cart(rng, lines)
				token := "b" + strconv.FormatInt(ph.shop, 10) + "-" + strconv.Itoa(w) + "-" + strconv.Itoa(n)
				t0, due := sched.next(ctx, stop)
				if !due {
					return
				}
				ok, err := ph.tgt.reserve(ctx, ph.shop, token, lines)
				d := time.Since(t0)
				switch {
				case err == nil && ok:
					ph.book.add(ph.book.reserved, lines)
					if ph.sc.claims {
						ph.held[w] = append(ph.held[w], heldCart{token: token, lines: slices.Clone(lines)})
					}
				case err != nil && inDoubt(err):
					ph.book.add(ph.book.reserveDoubt, lines)
				}
				if ctx.Err() != nil {
					return
				}
				if measuring.Load() {
					rec.record(d, ok, err)
				}
				if ph.sc.drain && err == nil && !ok {
					// Refused: the stock should be gone. Calls in flight
					// (at most one per other caller) may hold the last
					// units without being counted yet; fewer than that
					// counted is a refusal while stock remained.
					if ph.book.unsold() > int64(ph.pt.Concurrency) {
						ph.early.Add(1)
					}
					return
				}
			}
		})
}

// schedule is caller w's start times in a reserve window: now, one call
// after the other (closed-loop), or its share of Options.Rate.
func (ph *phase) schedule(w int) *schedule {
	s := &schedule{}
	if r := ph.r.opts.Rate; r > 0 {
		c := ph.pt.Concurrency
		s.every = time.Duration(float64(c) * float64(time.Second) / r)
		// Callers take interleaved slots: w starts w/c of a period late.
		s.at = time.Now().Add(s.every * time.Duration(w) / time.Duration(c))
	}
	return s
}

// schedule hands a caller the start time of its next call.
type schedule struct {
	every time.Duration // 0: closed-loop
	at    time.Time
}

// next waits until the next call is due and returns its due time (its
// latency runs from there); false when the window stops first.
func (s *schedule) next(ctx context.Context, stop *atomic.Bool) (time.Time, bool) {
	if s.every == 0 {
		return time.Now(), true
	}
	due := s.at
	s.at = s.at.Add(s.every)
	for {
		wait := time.Until(due)
		if wait <= 0 {
			return due, true
		}
		if stop.Load() || ctx.Err() != nil {
			return due, false
		}
		// Short sleeps, so a stopped window is left promptly.
		time.Sleep(min(wait, 50*time.Millisecond))
	}
}

// claims is the claim window: every caller claims the holds it placed.
func (ph *phase) claims(ctx context.Context, res Result) Result {
	return ph.window(ctx, res, 0, ph.r.opts.Duration, false,
		func(ctx context.Context, w int, measuring, stop *atomic.Bool, rec *recorder) {
			for _, h := range ph.held[w] {
				if stop.Load() || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				err := ph.tgt.claim(ctx, ph.shop, h.token)
				d := time.Since(t0)
				switch {
				case err == nil:
					ph.book.add(ph.book.claimed, h.lines)
				case inDoubt(err):
					ph.book.add(ph.book.claimDoubt, h.lines)
				}
				if ctx.Err() != nil {
					return
				}
				if measuring.Load() {
					rec.record(d, err == nil, err)
				}
			}
		})
}

// snapshot is every counter read at a window's edge.
type snapshot struct {
	status                      map[string]int64
	lockRequests                int64
	mysqlCPU, redisCPU, selfCPU time.Duration
	mysqlWrites, redisWrites    int64
	mysqlWaitNs, redisWaitNs    int64
	loadAvg                     float64
	tgt                         counters
}

func (ph *phase) snapshot(ctx context.Context) snapshot {
	s := snapshot{
		mysqlCPU:    proccpu.Of(ph.r.srv.mysqlPid),
		redisCPU:    proccpu.Of(ph.r.srv.redisPid),
		selfCPU:     selfCPU(),
		mysqlWrites: ph.path.mysqlConns.writes.Load(),
		redisWrites: ph.path.redisConns.writes.Load(),
		mysqlWaitNs: ph.path.mysqlConns.waitNs.Load(),
		redisWaitNs: ph.path.redisConns.waitNs.Load(),
		tgt:         ph.tgt.counters(),
		loadAvg:     loadAvg(),
		status:      map[string]int64{},
		// -1: not read (no monitor, or the read failed)
		lockRequests: -1,
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	args := make([]any, len(statusVars))
	for i, v := range statusVars {
		args[i] = v
	}
	if rows, err := ph.r.srv.admin.QueryContext(ctx, statusQuery(), args...); err == nil {
		for rows.Next() {
			var name string
			var v int64
			if rows.Scan(&name, &v) == nil {
				s.status[name] = v
			}
		}
		rows.Close()
	}
	if ph.r.srv.lockRequests {
		_ = ph.r.srv.admin.QueryRowContext(ctx, sqlMonitorCount, monitorLockRequests).Scan(&s.lockRequests)
	}
	return s
}

// inDoubt reports whether a failed call may have been applied: anything
// but an answer that says nothing was done.
func inDoubt(err error) bool {
	switch errKind(err) {
	case "contention", "invalid", "not_found", "expired", "ledger_insufficient":
		return false
	}
	return true
}

// errKind names an error for the errors-by-kind column.
func errKind(err error) string {
	var me *mysql.MySQLError
	var ne net.Error
	var re redis.Error
	switch {
	case errors.Is(err, dualwrite.ErrDeciderUnreachable):
		return "503_unreachable"
	case errors.Is(err, dualwrite.ErrFlagsUnavailable):
		return "503_flags"
	case errors.Is(err, reservation.ErrContention):
		return "contention"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, reservation.ErrInsufficientStock):
		return "ledger_insufficient"
	case errors.Is(err, reservation.ErrNotFound):
		return "not_found"
	case errors.Is(err, reservation.ErrExpired):
		return "expired"
	case errors.Is(err, reservation.ErrInvalidInput):
		return "invalid"
	case errors.Is(err, reservation.ErrReleased):
		return "released"
	case errors.Is(err, reservation.ErrNotDecider):
		return "not_decider"
	case errors.As(err, &me):
		return "mysql_" + strconv.Itoa(int(me.Number))
	case errors.As(err, &re):
		return "redis"
	case errors.As(err, &ne):
		return "network"
	}
	return "other"
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
