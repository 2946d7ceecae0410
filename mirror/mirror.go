// Package mirror keeps a pod's Redis store following the shops MySQL
// decides, and moves the decision for a shop from one store to the other.
// docs/ownership.md is the rule book; this package is its machinery:
//
//   - the relay: MySQL records every change Redis must follow in its change
//     feed (a transactional outbox, Feed.Pending); the relay
//     applies pending changes to Redis in order and deletes them. One relay
//     per pod is active at a time, across every replica (a MySQL lease);
//     the others stand by. Where a change carries the cart of a reserve
//     MySQL decided in mysql mode, the relay's rounds first ask Redis what
//     it would have answered and hand the answer to Config.Evaluated: the
//     comparison of that reserve (docs/compare.md).
//   - handoffs: Handoff moves a shop's fence to the store the caller's
//     flags name, draining the feed into Redis (to Redis) or copying Redis's
//     state into MySQL (to MySQL), so that the store that decides next holds
//     everything the one before decided.
//   - copy and catch-up: Resync rebuilds a shop in Redis from a consistent
//     snapshot of MySQL; the changes after the snapshot stay in the feed and
//     the relay applies them on top.
//
// It never decides a reservation itself and never builds SQL or Redis
// commands: it moves what the stores give it, through the roles they play
// (roles.go: Feed, Follower, CopySource, CopyTarget, Decider), and imports
// neither store.
package mirror

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Config configures a Mirror. New applies WithDefaults, then Validate.
type Config struct {
	// Pod names the pod; it labels the metrics (reservoir_pod). Required.
	Pod string
	// MySQL is the pod's MySQL store: the feed, its fences, the target of
	// handoffs to MySQL (*mysqlstore.Store). Required.
	MySQL MySQL
	// Redis is the pod's Redis store: the follower of the feed, the source
	// of handoffs to MySQL (*redisstore.Store). Required.
	Redis Redis
	// Registerer receives the metrics (labelled with the pod). Default: a
	// private registry.
	Registerer prometheus.Registerer
	// Logger logs leadership, failures and forced handoffs. Default:
	// slog.Default().
	Logger *slog.Logger
	// Poll is how long the active relay waits after finding the feed
	// empty before it looks again (a Push on this replica wakes it at
	// once). Default: 20ms.
	Poll time.Duration
	// Batch is how many changes the relay applies per round. Default: 500.
	Batch int
	// Standby is how often a replica that is not the active relay tries to
	// become it, and how often the active one checks it still is. Default:
	// 1s.
	Standby time.Duration
	// ForceAfter bounds MySQL's part of a handoff to Redis that may be
	// forced (kill switch redis_only): past it Redis takes the shop without
	// MySQL (see Handoff). Default: 1s.
	ForceAfter time.Duration
	// Evaluated, when set, receives Redis's own answer to each cart a
	// change carries (a reserve MySQL decided while the mode compares,
	// reservation.Change.Cart), asked just before the change is applied,
	// once it is applied: the comparison of that reserve. It runs in the
	// relay's goroutine and must not block (compare.Comparer.Observe does
	// not). Without it carts are not evaluated, and Evaluates says so.
	Evaluated func(c reservation.Change, redis reservation.ReserveResult, err error)
	// CopyInline: a handoff to MySQL of a shop with fewer reservations
	// (holds and tombstones) than this keeps its caller waiting until it
	// is done, as a handoff without a copy would: its copy is as short as
	// the cut-over. A larger shop is copied in the background while Redis
	// decides: Handoff returns Redis's fence at once (the caller follows
	// it) and the shop is undecided only during the cut-over. Default:
	// 200.
	CopyInline int64
	// CutoverWait bounds how long a handoff to MySQL that finds Redis
	// already yielded waits for the copy's cut-over, before it takes the
	// whole shop over itself (the copier may have died between the two
	// steps). Default: 2s.
	CutoverWait time.Duration
	// CopyRest paces a copy ahead: after each part it waits as long as
	// the part took, times this, so that the copy of a large shop keeps
	// to a share of MySQL's and Redis's time and the pod's calls keep
	// theirs (1: about half of one connection's time). Negative: flat
	// out. Default: 1.
	CopyRest float64
	// CatchUpBelow: a copy cuts over once a catch-up round copied at most
	// this many tokens that changed meanwhile. Default: 100.
	CatchUpBelow int
	// CatchUpRounds bounds the catch-up rounds before the cut-over (a shop
	// changing faster than it is copied cuts over with the last round's
	// changes). Default: 8.
	CatchUpRounds int
	// OnCutover, when set, is told of each fence move this mirror makes
	// for a handoff, with when it began and ended: to MySQL, from Redis's
	// yield to MySQL's takeover of the last changes (a copy's cut-over);
	// to Redis, from MySQL's yield to the end of the drain that set
	// Redis's fence (or Redis's forced fence). Between the two neither
	// store decides the shop. A handoff to Redis that finds MySQL yielded
	// already (a repeat) is reported too, its start being its own; one
	// that finds the move made or overtaken (joined, overtaken), and a
	// whole-shop takeover after a copier was lost, are not. It runs in
	// the handoff's goroutine and must not block. An observation hook
	// for reservoir bench's handoff scenario; production leaves it nil.
	OnCutover func(shop int64, to reservation.Authority, start, end time.Time)
	// Disabled stops the change feed from reaching Redis at all: Run
	// returns at once, Flush delivers nothing, and a handoff to Redis sets
	// Redis's fence without draining the shop's pending changes. Only
	// tests that show what the feed protects set it.
	Disabled bool
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Poll == 0 {
		c.Poll = 20 * time.Millisecond
	}
	if c.Batch == 0 {
		c.Batch = 500
	}
	if c.Standby == 0 {
		c.Standby = time.Second
	}
	if c.ForceAfter == 0 {
		c.ForceAfter = time.Second
	}
	if c.CopyInline == 0 {
		c.CopyInline = 200
	}
	if c.CopyRest == 0 {
		c.CopyRest = 1
	}
	if c.CutoverWait == 0 {
		c.CutoverWait = 2 * time.Second
	}
	if c.CatchUpBelow == 0 {
		c.CatchUpBelow = 100
	}
	if c.CatchUpRounds == 0 {
		c.CatchUpRounds = 8
	}
	return c
}

// Validate reports a setting that cannot work, naming the field.
func (c Config) Validate() error {
	switch {
	case c.Pod == "":
		return errors.New("mirror: Config.Pod is required")
	case c.MySQL == nil:
		return errors.New("mirror: Config.MySQL is required")
	case c.Redis == nil:
		return errors.New("mirror: Config.Redis is required")
	case c.Poll <= 0 || c.Standby <= 0 || c.ForceAfter <= 0:
		return fmt.Errorf("mirror: Config.Poll (%s), Standby (%s) and ForceAfter (%s) must be positive", c.Poll, c.Standby, c.ForceAfter)
	case c.Batch < 1 || c.Batch > 10000:
		return fmt.Errorf("mirror: Config.Batch must be between 1 and 10000, got %d", c.Batch)
	case c.CopyInline < 0 || c.CutoverWait <= 0:
		return fmt.Errorf("mirror: Config.CopyInline (%d) must not be negative and Config.CutoverWait (%s) must be positive", c.CopyInline, c.CutoverWait)
	case c.CatchUpBelow < 0 || c.CatchUpRounds < 0:
		return fmt.Errorf("mirror: Config.CatchUpBelow (%d) and Config.CatchUpRounds (%d) must not be negative", c.CatchUpBelow, c.CatchUpRounds)
	}
	return nil
}

// Mirror is one pod's relay and handoffs. Safe for concurrent use.
type Mirror struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	wake    chan struct{}
	flights flights
	// released is what the relay applied that can make a cart's
	// evaluation stale (stale.go).
	released releasedShops
	// copies are the handoffs to MySQL this process runs (copy.go), in
	// the background: bgCtx ends them (Close), bg waits for them.
	copies   copyRuns
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup

	// Test knobs, set only by this package's tests (export_test.go):
	// afterCopy runs between a copy's first pass and its catch-up (a
	// change made there must reach MySQL); skipDelta makes the catch-up
	// and the cut-over copy nothing (the broken copy the tests must
	// catch).
	afterCopy func(shop int64)
	skipDelta bool
	// onPause is told of the relay's wait after each round, and whether
	// a Push may cut it short.
	onPause func(wait time.Duration, wake bool)

	lagMu sync.Mutex
	lag   Lag
}

// New returns a mirror; Run starts its relay.
func New(cfg Config) (*Mirror, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"reservoir_pod": cfg.Pod}, cfg.Registerer))
	if err != nil {
		return nil, fmt.Errorf("mirror: register metrics: %w", err)
	}
	bgCtx, cancel := context.WithCancel(context.Background())
	return &Mirror{cfg: cfg, log: cfg.Logger.With("pod", cfg.Pod), metrics: m, wake: make(chan struct{}, 1),
		bgCtx: bgCtx, bgCancel: cancel}, nil
}

// Close stops the handoffs running in the background (copies to MySQL)
// and waits for them, within ctx. A copy stopped halfway is taken up by
// the next handoff of its shop, here or on another replica.
func (m *Mirror) Close(ctx context.Context) error {
	m.bgCancel()
	done := make(chan struct{})
	go func() { m.bg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("mirror: pod %s: background handoffs still running: %w", m.cfg.Pod, ctx.Err())
	}
}

// Push tells the relay that MySQL just recorded a change: the active relay,
// if it runs in this process, looks at the feed now instead of at its next
// poll. It never blocks.
func (m *Mirror) Push() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Lag is how far Redis is behind MySQL's decisions.
type Lag struct {
	// Changes pending in the feed.
	Changes int64 `json:"changes"`
	// Oldest is the age of the oldest pending change (zero when none).
	Oldest time.Duration `json:"oldest_ns"`
	// At is when it was measured (zero: never).
	At time.Time `json:"at"`
}

// Lag measures the feed's backlog now.
func (m *Mirror) Lag(ctx context.Context) (Lag, error) {
	n, oldest, err := m.cfg.MySQL.Backlog(ctx)
	if err != nil {
		return Lag{}, fmt.Errorf("mirror: lag of pod %s: %w", m.cfg.Pod, err)
	}
	l := Lag{Changes: n, Oldest: oldest, At: time.Now()}
	m.metrics.backlog.Set(float64(n))
	m.metrics.lag.Set(oldest.Seconds())
	m.lagMu.Lock()
	m.lag = l
	m.lagMu.Unlock()
	return l, nil
}

// LastLag is the last lag measured (by Lag or by the running relay).
func (m *Mirror) LastLag() Lag {
	m.lagMu.Lock()
	defer m.lagMu.Unlock()
	return m.lag
}

// Run runs the relay until ctx ends: it becomes the pod's active relay
// when no other replica is, and then applies the feed to Redis. It
// returns ctx's error, or nil at once when the relay is Disabled.
func (m *Mirror) Run(ctx context.Context) error {
	if m.cfg.Disabled {
		return nil
	}
	var lease reservation.Lease
	defer func() {
		if lease != nil {
			lease.Release()
			m.metrics.leader.Set(0)
		}
	}()
	lastCheck, lastLag, lastStuckLog := time.Time{}, time.Time{}, time.Time{}
	backoff := m.cfg.Poll
	for ctx.Err() == nil {
		if time.Since(lastLag) >= time.Second {
			lastLag = time.Now()
			if _, err := m.Lag(ctx); err != nil && ctx.Err() == nil {
				m.log.Debug("mirror: measure lag", "err", err)
			}
		}
		if lease == nil {
			l, err := m.cfg.MySQL.TryLease(ctx, "relay")
			if err != nil && ctx.Err() == nil {
				m.log.Warn("mirror: take the relay lease", "err", err)
			}
			if l == nil {
				sleep(ctx, m.cfg.Standby, nil)
				continue
			}
			lease, lastCheck = l, time.Now()
			m.metrics.leader.Set(1)
			m.log.Info("mirror: this replica is the pod's relay")
		}
		if time.Since(lastCheck) >= m.cfg.Standby {
			lastCheck = time.Now()
			if !lease.Held(ctx) && ctx.Err() == nil {
				lease.Release()
				lease = nil
				m.metrics.leader.Set(0)
				m.log.Warn("mirror: lost the relay lease; standing by")
				continue
			}
		}
		n, applied, err := m.deliver(ctx, 0)
		var wait time.Duration
		wake := false
		switch {
		case err != nil && onlyStuck(err) && applied > 0:
			// Some shop's change was not applied; others were. That
			// shop is retried next round; the rest of the pod must not
			// slow down for it.
			if ctx.Err() == nil && time.Since(lastStuckLog) >= 10*time.Second {
				lastStuckLog = time.Now()
				m.log.Warn("mirror: a shop's change was not applied; its shop waits, the others go on (logged every 10s at most)", "err", err)
			}
			backoff, wait, wake = m.cfg.Poll, m.cfg.Poll, true
		case err != nil && onlyStuck(err):
			// Nothing was applied: Redis does not answer, or every shop
			// with pending changes is stuck. A round at the poll's pace
			// would read the same changes from MySQL again and fail
			// again, fifty times a second for as long as Redis is down:
			// back off, as for any failure, and say so once in a while.
			if ctx.Err() == nil && time.Since(lastStuckLog) >= 10*time.Second {
				lastStuckLog = time.Now()
				m.log.Warn("mirror: no pending change could be applied (Redis does not answer, or every shop with pending changes is stuck); retrying with backoff (logged every 10s at most)", "err", err)
			}
			wait, backoff = backoff, min(2*backoff, 2*time.Second)
		case err != nil:
			if ctx.Err() == nil {
				m.log.Warn("mirror: relay round failed; retrying", "err", err)
			}
			wait, backoff = backoff, min(2*backoff, 2*time.Second)
		case n == m.cfg.Batch:
			backoff = m.cfg.Poll // more waiting: go on at once
		default:
			backoff, wait, wake = m.cfg.Poll, m.cfg.Poll, true
		}
		if m.onPause != nil {
			m.onPause(wait, wake)
		}
		if wait > 0 {
			w := m.wake
			if !wake {
				w = nil
			}
			sleep(ctx, wait, w)
		}
	}
	return ctx.Err()
}

func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-wake:
		// Woken by a Push: go, but not at once. Under load every decision
		// pushes; a round per decision would cost the database a read and
		// a delete per change. A short gap lets a round carry a batch,
		// for a few milliseconds of lag.
		g := time.NewTimer(min(d, wakeGap))
		defer g.Stop()
		select {
		case <-ctx.Done():
		case <-g.C:
		}
	}
}

// wakeGap is the least time between two relay rounds a Push woke.
const wakeGap = 5 * time.Millisecond

// deliver applies one batch of pending changes (of one shop, or of every
// shop for shop 0) to Redis and deletes those applied. It returns how many
// it read and how many Redis applied. A change Redis does not apply stops
// its shop, not the batch: the shop's later changes wait (their order
// matters), the other shops' are applied, so one shop whose change keeps
// failing cannot hold up the pod's relay (it is counted and returned as
// the round's error).
func (m *Mirror) deliver(ctx context.Context, shop int64) (read, applied int, err error) {
	var stuck []int64 // shops stopped at a change Redis did not apply
	var errs []error
	for {
		var changes []reservation.Change
		var err error
		if shop == 0 && len(stuck) > 0 {
			changes, err = m.cfg.MySQL.PendingExcept(ctx, stuck, m.cfg.Batch)
		} else {
			changes, err = m.cfg.MySQL.Pending(ctx, shop, m.cfg.Batch)
		}
		if err != nil {
			return read, applied, errors.Join(append(errs, err)...)
		}
		read += len(changes)
		// Only the relay's own rounds (every shop) ask Redis about carts:
		// a Flush (an adjust's, a handoff's drain) may run beside them on
		// this replica or another, and two deliverers could both ask
		// before either applies, observing one reserve twice. The carts a
		// Flush delivers go unobserved.
		n, newStuck, err := m.applyBatch(ctx, changes, shop == 0)
		applied += n
		if err != nil {
			errs = append(errs, err)
		}
		// A full batch that stopped shops hides the other shops' changes
		// behind them: read again without those shops.
		if shop != 0 || len(newStuck) == 0 || len(changes) < m.cfg.Batch || ctx.Err() != nil {
			return read, applied, errors.Join(errs...)
		}
		stuck = append(stuck, newStuck...)
	}
}

// applyBatch applies changes to Redis in order, a shop stopping at its
// first change Redis does not apply, and deletes those applied from the
// feed. It returns how many were applied and the shops stopped.
func (m *Mirror) applyBatch(ctx context.Context, changes []reservation.Change, evaluate bool) (int, []int64, error) {
	if len(changes) == 0 {
		return 0, nil, nil
	}
	var done, stuckShops []int64
	var errs []error
	evaluate = evaluate && m.cfg.Evaluated != nil
	if m.cfg.Evaluated != nil {
		// Every batch applied, evaluated or not, tells which releases
		// Redis has seen; only an evaluated one counts its stale carts.
		if n := m.released.dropStale(changes); n > 0 && evaluate {
			m.metrics.cartsStale.Add(float64(n))
		}
	}
	rest := changes
	for len(rest) > 0 {
		start := time.Now()
		actx, span := startApply(ctx, rest)
		var eval reservation.Evaluated
		if evaluate {
			eval = m.evaluated(actx, rest)
		}
		applied, aerr := m.cfg.Redis.ApplyEvaluating(actx, rest, eval)
		endApply(span, applied, aerr)
		m.metrics.applySeconds.Observe(time.Since(start).Seconds())
		for _, c := range rest[:applied] {
			done = append(done, c.ID)
			m.metrics.applied.WithLabelValues(string(c.Kind)).Inc()
		}
		if aerr == nil {
			break
		}
		m.metrics.failures.Inc()
		if ctx.Err() != nil {
			errs = append(errs, aerr)
			break
		}
		stuck := rest[applied]
		stuckShops = append(stuckShops, stuck.Shop)
		errs = append(errs, &shopStuckError{change: stuck, err: aerr})
		var next []reservation.Change
		for _, c := range rest[applied+1:] {
			if c.Shop != stuck.Shop {
				next = append(next, c)
			}
		}
		rest = next
	}
	if err := m.cfg.MySQL.Done(ctx, done); err != nil {
		errs = append(errs, err)
	}
	return len(done), stuckShops, errors.Join(errs...)
}

// evaluated is the Follower's callback that hands the answers Redis gave
// to the carts of changes to Config.Evaluated.
func (m *Mirror) evaluated(ctx context.Context, changes []reservation.Change) reservation.Evaluated {
	return func(i int, res reservation.ReserveResult, err error) {
		m.metrics.evaluated.Inc()
		span := startCompare(ctx, changes[i], res, err)
		m.cfg.Evaluated(changes[i], res, err)
		span.End()
	}
}

// Evaluates reports whether the relay asks Redis about the carts MySQL
// records for comparison (Change.Cart) and hands the answers to
// Config.Evaluated: true when the feed runs and Evaluated is set. The
// facade asks Redis itself when it is false.
func (m *Mirror) Evaluates() bool {
	return !m.cfg.Disabled && m.cfg.Evaluated != nil
}

// Flush applies every pending change of one shop now, in order: what a
// handoff to Redis drains. It stops at the first failure.
func (m *Mirror) Flush(ctx context.Context, shop int64) error {
	if m.cfg.Disabled {
		return nil
	}
	for {
		n, _, err := m.deliver(ctx, shop)
		if err != nil {
			return err
		}
		if n < m.cfg.Batch {
			return nil
		}
	}
}

// shopStuckError is the error of a change Redis did not apply: its shop
// waits, the relay goes on with the others.
type shopStuckError struct {
	change reservation.Change
	err    error
}

func (e *shopStuckError) Error() string {
	return fmt.Sprintf("mirror: apply change %d (shop %d, %s): its shop waits: %v", e.change.ID, e.change.Shop, e.change.Kind, e.err)
}

func (e *shopStuckError) Unwrap() error { return e.err }

// onlyStuck reports whether every error joined in err is a stuck shop's.
// It looks through joins only: a stuck shop's error wraps Redis's, which
// is no stuck shop's.
func onlyStuck(err error) bool {
	if _, ok := err.(*shopStuckError); ok {
		return true
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !onlyStuck(e) {
				return false
			}
		}
		return true
	}
	return false
}

// lagText is the last measured lag for a log line ("unknown" when it was
// never measured on this replica).
func (m *Mirror) lagText() string {
	l := m.LastLag()
	if l.At.IsZero() {
		return "unknown (not measured on this replica)"
	}
	return fmt.Sprintf("%d change(s), oldest %s, measured %s ago", l.Changes, l.Oldest.Round(time.Millisecond), time.Since(l.At).Round(time.Millisecond))
}

// ErrForcedHandoff wraps nothing: it is the error of Resync refusing a
// shop that Redis took by force (see Handoff), whose MySQL state is not
// the truth.
var ErrForcedHandoff = errors.New("mirror: Redis took the shop without MySQL (a forced handoff): MySQL's state is not the truth")

// Handoff makes store to the decider of shop, at epoch (the version of the
// flags that say so), and returns the fence after. It is idempotent: many
// callers may run it at once (they share one run per shop and target),
// and one that arrives when the handoff is done, or finds a newer one,
// changes nothing.
//
// To Redis: MySQL yields (its fence moves to redis@epoch, waiting for its
// deciding transactions in flight), then the shop's pending changes are
// applied to Redis in order, the last of them setting Redis's fence. With
// force (the kill switch redis_only: MySQL itself may be the problem) and
// MySQL not answering within Config.ForceAfter (its yield, or the drain),
// Redis takes the shop without it: whatever the feed held for the shop
// then is lost to Redis (the lag, shown next to the kill switch); counted
// and logged.
//
// To MySQL: Redis's state is copied ahead while Redis keeps deciding, the
// changes made meanwhile are copied again, and then Redis yields (its
// fence moves to mysql@epoch, atomically with its scripts) and MySQL takes
// the shop over with only the last changes (copy.go). The copy runs in the
// background: for a shop of at least Config.CopyInline reservations
// Handoff returns Redis's fence as soon as the copy has started, while
// Redis still decides (the caller follows Redis until the cut-over); for a
// smaller one, or once the cut-over has begun, it waits for the end.
//
// The returned fence may name the other store: the handoff is still
// copying (to MySQL), or a newer handoff overtook it; the caller follows
// it. An error means the handoff did not finish (a store did not answer):
// nothing was decided meanwhile, and the call that needed it has an
// unknown outcome.
func (m *Mirror) Handoff(ctx context.Context, shop int64, to reservation.Authority, epoch int64, force bool) (reservation.Fence, error) {
	if shop <= 0 || epoch <= 0 || !to.Valid() {
		return reservation.Fence{}, &reservation.ValidationError{Field: "shop, to, epoch",
			Reason: fmt.Sprintf("want a positive shop and epoch and a store, got %d, %q, %d", shop, to, epoch)}
	}
	if to == reservation.AuthorityMySQL {
		f, _, err := m.toMySQL(ctx, shop, epoch, true)
		return f, err
	}
	return m.flights.do(flightKey{shop, to, epoch, force}, func() (reservation.Fence, error) {
		start := time.Now()
		f, result, err := m.toRedis(ctx, shop, epoch, force)
		if err != nil {
			result = "failed"
		}
		if result == "done" || result == "forced" {
			m.cutover(shop, to, start)
		}
		m.metrics.handoffs.WithLabelValues(string(to), result).Inc()
		m.metrics.handoffSeconds.WithLabelValues(string(to)).Observe(time.Since(start).Seconds())
		return f, err
	})
}

// HandoffWait is Handoff that waits for a handoff to MySQL to finish
// (its copy and cut-over), however long the copy takes, unless another
// replica runs it: then it returns Redis's fence at once, as Handoff does.
// The handoff sweeper uses it.
func (m *Mirror) HandoffWait(ctx context.Context, shop int64, to reservation.Authority, epoch int64, force bool) (reservation.Fence, error) {
	if to == reservation.AuthorityMySQL && shop > 0 && epoch > 0 {
		f, _, err := m.toMySQL(ctx, shop, epoch, false)
		return f, err
	}
	return m.Handoff(ctx, shop, to, epoch, force)
}

func (m *Mirror) toRedis(ctx context.Context, shop, epoch int64, force bool) (reservation.Fence, string, error) {
	yctx, cancel := ctx, context.CancelFunc(func() {})
	if force {
		yctx, cancel = context.WithTimeout(ctx, m.cfg.ForceAfter)
	}
	mf, err := m.cfg.MySQL.Yield(yctx, shop, epoch)
	cancel()
	if err != nil {
		if !force || ctx.Err() != nil {
			return reservation.Fence{}, "", fmt.Errorf("mirror: hand shop %d to redis: %w", shop, err)
		}
		// MySQL's fence keeps naming MySQL: noted first, so that it is
		// moved off once MySQL answers (fenceOff), before MySQL may decide
		// the shop again with what it had.
		if nerr := m.cfg.Redis.NoteForced(ctx, shop); nerr != nil {
			return reservation.Fence{}, "", fmt.Errorf("mirror: hand shop %d to redis by force after MySQL failed (%v): %w", shop, err, nerr)
		}
		rf, ferr := m.cfg.Redis.Force(ctx, shop, epoch)
		if ferr != nil {
			return reservation.Fence{}, "", fmt.Errorf("mirror: hand shop %d to redis by force after MySQL failed (%v): %w", shop, err, ferr)
		}
		m.log.Error("mirror: Redis took a shop without MySQL (kill switch redis_only, MySQL did not answer); changes still in the feed for it are lost to Redis",
			"shop", shop, "epoch", epoch, "mysql_err", err, "lag", m.lagText())
		return rf, "forced", nil
	}
	if mf.Decider != reservation.AuthorityRedis {
		return mf, "overtaken", nil // a newer handoff gave it to MySQL
	}
	if m.cfg.Disabled {
		rf, err := m.cfg.Redis.Force(ctx, shop, mf.Epoch)
		return rf, "undrained", err
	}
	dctx, dcancel := ctx, context.CancelFunc(func() {})
	if force {
		dctx, dcancel = context.WithTimeout(ctx, m.cfg.ForceAfter)
	}
	err = m.Flush(dctx, shop)
	dcancel()
	if err != nil {
		if !force || ctx.Err() != nil {
			return reservation.Fence{}, "", fmt.Errorf("mirror: hand shop %d to redis: drain: %w", shop, err)
		}
		rf, ferr := m.cfg.Redis.Force(ctx, shop, mf.Epoch)
		if ferr != nil {
			return reservation.Fence{}, "", fmt.Errorf("mirror: hand shop %d to redis by force after the drain failed (%v): %w", shop, err, ferr)
		}
		m.log.Error("mirror: Redis took a shop without finishing the drain (kill switch redis_only, MySQL did not answer); changes still in the feed for it are lost to Redis",
			"shop", shop, "epoch", mf.Epoch, "err", err, "lag", m.lagText())
		return rf, "forced", nil
	}
	rf, err := m.cfg.Redis.Fence(ctx, shop)
	if err != nil {
		return reservation.Fence{}, "", fmt.Errorf("mirror: hand shop %d to redis: %w", shop, err)
	}
	if rf.Epoch < mf.Epoch {
		return reservation.Fence{}, "", fmt.Errorf("mirror: hand shop %d to redis: drained, but Redis's fence is %s, not %s", shop, rf, mf)
	}
	if rf.Decider != reservation.AuthorityRedis {
		return rf, "overtaken", nil // a newer handoff gave it to MySQL meanwhile
	}
	return rf, "done", nil
}

// Resync rebuilds one shop of Redis from MySQL: the copy step of copy and
// catch-up (Feed.CopyShop), with the changes made after the
// copy left in the feed for the relay. It is for a shop MySQL decides
// whose Redis state was lost or damaged; it refuses a shop Redis decides
// (Redis's state is the truth there) and one Redis took by force.
func (m *Mirror) Resync(ctx context.Context, shop int64) error {
	return m.cfg.MySQL.CopyShop(ctx, shop, func(ctx context.Context, cp *reservation.ShopCopy) error {
		mf := cp.Snapshot.Fence
		if mf.Decider != reservation.AuthorityMySQL {
			return fmt.Errorf("mirror: resync shop %d: MySQL does not decide it (fence %s): Redis's state is the truth", shop, mf)
		}
		err := m.cfg.Redis.Rewrite(ctx, cp.Snapshot, cp.Ledger, cp.CoveredAdjusts)
		var newer *reservation.NewerFenceError
		if errors.As(err, &newer) {
			return fmt.Errorf("mirror: resync shop %d: Redis's fence %s is newer than MySQL's %s: %w", shop, newer.Fence, mf, ErrForcedHandoff)
		}
		return err
	})
}

// cutover reports a fence move that began at start and ends now to
// Config.OnCutover.
func (m *Mirror) cutover(shop int64, to reservation.Authority, start time.Time) {
	if m.cfg.OnCutover != nil {
		m.cfg.OnCutover(shop, to, start, time.Now())
	}
}

type flightKey struct {
	shop  int64
	to    reservation.Authority
	epoch int64
	force bool
}

// flights lets concurrent handoffs of one shop to one store at one epoch
// share a single run. The zero value is ready.
type flights struct {
	mu sync.Mutex
	m  map[flightKey]*flight
}

type flight struct {
	done  chan struct{}
	fence reservation.Fence
	err   error
}

func (fs *flights) do(k flightKey, fn func() (reservation.Fence, error)) (reservation.Fence, error) {
	fs.mu.Lock()
	if f, ok := fs.m[k]; ok {
		fs.mu.Unlock()
		<-f.done
		return f.fence, f.err
	}
	if fs.m == nil {
		fs.m = map[flightKey]*flight{}
	}
	f := &flight{done: make(chan struct{})}
	fs.m[k] = f
	fs.mu.Unlock()
	f.fence, f.err = fn()
	fs.mu.Lock()
	delete(fs.m, k)
	fs.mu.Unlock()
	close(f.done)
	return f.fence, f.err
}
