package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// target is a variant under test, built fresh for each point on the
// point's path.
type target interface {
	// setup stocks the scenario's catalog for shop (and primes unit pools
	// where the scenario says).
	setup(ctx context.Context, shop int64, sc *scenario) error
	// reserve places a hold; reserved is false for an insufficient answer.
	reserve(ctx context.Context, shop int64, token string, lines []reservation.Line) (reserved bool, err error)
	// claim claims a hold as authority.
	claim(ctx context.Context, shop int64, token string) error
	// counters are the target's own counts since it was built.
	counters() counters
	// check verifies, once the callers have stopped, that the stores hold
	// exactly what the acknowledged calls of b say. It returns nil or the
	// first violation.
	check(ctx context.Context, shop int64, b *book) error
	close(ctx context.Context) error
}

// counters are a target's cumulative counts.
type counters struct {
	deadlocks, lockWaits, retries, refills, refillUnits, shadowSkipped int64
	// hold is connection hold time per caller (mysqlstore's histogram, or
	// the baselines' own measure of the same span).
	hold map[string]holdSum
}

type holdSum struct {
	seconds float64
	count   uint64
}

// book is what the calls of a point did to each item: the expectation the
// invariant check holds the stores to. A call that failed without a clean
// answer (a timeout, a cut connection, Ctrl-C) may or may not have been
// applied: its units are counted as in doubt, and the check accepts either.
type book struct {
	stock                  []int64
	reserved, reserveDoubt []atomic.Int64
	claimed, claimDoubt    []atomic.Int64
}

func newBook(sc *scenario) *book {
	n := sc.items
	b := &book{stock: make([]int64, n), reserved: make([]atomic.Int64, n), reserveDoubt: make([]atomic.Int64, n),
		claimed: make([]atomic.Int64, n), claimDoubt: make([]atomic.Int64, n)}
	for i := range b.stock {
		b.stock[i] = sc.stock(i)
	}
	return b
}

func (b *book) add(to []atomic.Int64, lines []reservation.Line) {
	for _, ln := range lines {
		to[ln.Item-1].Add(ln.Quantity)
	}
}

// unsold is the stock no acknowledged or in-doubt reserve took, over every
// item.
func (b *book) unsold() int64 {
	var n int64
	for i, s := range b.stock {
		n += s - b.reserved[i].Load() - b.reserveDoubt[i].Load()
	}
	return n
}

// span is what item i's acknowledged and in-doubt calls allow: between lo
// and hi units (reserved, or claimed) were applied.
func span(done, doubt []atomic.Int64, i int) (lo, hi int64) {
	lo = done[i].Load()
	return lo, lo + doubt[i].Load()
}

func within(v, lo, hi int64) bool { return lo <= v && v <= hi }

func rangeText(lo, hi int64) string {
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d..%d", lo, hi)
}

// pointEnv is what a target is built from.
type pointEnv struct {
	path *path
	// relayDB and relayRedis are the servers without the added latency,
	// for facade-mysql's relay (nil: the path's). The added latency stands
	// for the network between the callers and the servers; on this
	// machine the proxy that adds it also burns CPU beside the callers,
	// which a network would not, and the relay's latency only shows in
	// its lag, which is measured apart.
	relayDB     *sql.DB
	relayRedis  *redis.Client
	prefix      string
	poolCap     int64
	buckets     int
	concurrency int
	// inlineCleanup: the legacy claim cleans Redis up before it answers
	// (the Inline variants).
	inlineCleanup bool
}

func newTarget(variant string, env *pointEnv) (target, error) {
	base, unbatched := strings.CutSuffix(variant, Unbatched)
	base, alone := strings.CutSuffix(base, Alone)
	base, ungated := strings.CutSuffix(base, Ungated)
	base, inline := strings.CutSuffix(base, Inline)
	env.inlineCleanup = inline
	cfg := mysqlstore.Config{Unbatched: unbatched}
	if unbatched || alone {
		cfg.GroupSize = 1
	}
	if unbatched || ungated {
		cfg.PoolConcurrency = -1
	}
	switch base {
	case VariantPool:
		return newPoolTarget(env, cfg)
	case VariantPoolBefore:
		return newPoolTarget(env, mysqlstore.Config{ScanFromHead: true, SeparateRefills: true, PoolConcurrency: -1})
	case VariantPoolNoFeed:
		return newPoolTarget(env, mysqlstore.Config{NoFeed: true})
	case VariantPoolHeadScan:
		return newPoolTarget(env, mysqlstore.Config{ScanFromHead: true, PoolConcurrency: -1})
	case VariantRedis:
		return newRedisTarget(env, cfg)
	case VariantRow:
		return newBaseline(env, 1, unbatched), nil
	case VariantBuckets:
		return newBaseline(env, env.buckets, unbatched), nil
	case VariantFacadeRedis:
		return newFacadeTarget(env, authority.ModeRedis, cfg)
	case VariantFacadeShadow:
		return newFacadeTarget(env, authority.ModeShadow, cfg)
	case VariantFacadeMySQL:
		return newFacadeTarget(env, authority.ModeMySQL, cfg)
	case VariantFacadeMySQLNoFeed:
		return newFacadeTarget(env, authority.ModeMySQL, mysqlstore.Config{NoFeed: true})
	case VariantFacadeMySQLOnly:
		return newFacadeTarget(env, authority.ModeMySQLOnly, cfg)
	case VariantFacadeMySQLOnlyNoFeed:
		return newFacadeTarget(env, authority.ModeMySQLOnly, mysqlstore.Config{NoFeed: true})
	}
	return nil, fmt.Errorf("bench: unknown variant %q", variant)
}

// holdTTL outlives any point: nothing expires while it is measured.
const holdTTL = 30 * time.Minute

func reserveParams(shop int64, token string, lines []reservation.Line) *reservation.ReserveParams {
	return &reservation.ReserveParams{Shop: shop, Token: token, Lines: lines, TTL: holdTTL}
}

// forEach runs fn for 0..n-1 on up to 16 goroutines and returns the first
// error.
func forEach(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	return forEachN(ctx, n, 16, fn)
}

// ---------------------------------------------------------------- unit pool

type poolTarget struct {
	store *mysqlstore.Store
	reg   *prometheus.Registry
	db    *path
}

// newMySQLStore builds a unit-pool store on the point's path with cfg's
// knobs.
func newMySQLStore(env *pointEnv, cfg mysqlstore.Config) (*mysqlstore.Store, *prometheus.Registry, error) {
	cfg.DB, cfg.PoolCap, cfg.Registerer = env.path.db, env.poolCap, prometheus.NewRegistry()
	s, err := mysqlstore.New(cfg)
	return s, cfg.Registerer.(*prometheus.Registry), err
}

func newPoolTarget(env *pointEnv, cfg mysqlstore.Config) (*poolTarget, error) {
	s, reg, err := newMySQLStore(env, cfg)
	if err != nil {
		return nil, err
	}
	return &poolTarget{store: s, reg: reg, db: env.path}, nil
}

// takeOver makes MySQL the decider of shop (docs/ownership.md): the
// handoff from a Redis that never held anything for it, at epoch 1. The
// unit-pool variants measure MySQL deciding on its own.
func takeOver(ctx context.Context, my *mysqlstore.Store, shop int64) error {
	if _, err := my.TakeOver(ctx, &reservation.Snapshot{Shop: shop}, 1); err != nil {
		return fmt.Errorf("make MySQL the decider of shop %d: %w", shop, err)
	}
	return nil
}

// stockPools sets the ledger of every item and primes the pools the
// scenario asks for: a reserve of one unit makes the replenisher fill the
// pool; its release leaves the pool full less that unit.
func stockPools(ctx context.Context, my *mysqlstore.Store, shop int64, sc *scenario) error {
	return forEach(ctx, sc.items, func(ctx context.Context, i int) error {
		item := int64(i + 1)
		avail := sc.stock(i)
		if _, err := my.AdjustStock(ctx, &reservation.AdjustParams{Shop: shop, Item: item, Location: location, Available: &avail}); err != nil {
			return err
		}
		return primePool(ctx, my, reservation.AsAuthority, shop, sc, i)
	})
}

// primePool primes item i's pool when the scenario says so, with a reserve
// and a release of one unit: as the decider (as AsAuthority) or as the
// shadow of a shop Redis decides (AsShadow), whose pools fill the same way.
func primePool(ctx context.Context, my *mysqlstore.Store, as reservation.Role, shop int64, sc *scenario, i int) error {
	if !sc.prime(i) {
		return nil
	}
	token := fmt.Sprintf("prime-%d", i+1)
	p := reserveParams(shop, token, []reservation.Line{line(int64(i + 1))})
	p.As = as
	res, err := my.Reserve(ctx, p)
	if err != nil {
		return fmt.Errorf("prime item %d: %w", i+1, err)
	}
	if res.Status != reservation.StatusReserved {
		return fmt.Errorf("prime item %d: %s", i+1, res.Status)
	}
	_, err = my.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: token, As: as})
	return err
}

func (t *poolTarget) setup(ctx context.Context, shop int64, sc *scenario) error {
	if err := takeOver(ctx, t.store, shop); err != nil {
		return err
	}
	return stockPools(ctx, t.store, shop, sc)
}

func (t *poolTarget) reserve(ctx context.Context, shop int64, token string, lines []reservation.Line) (bool, error) {
	res, err := t.store.Reserve(ctx, reserveParams(shop, token, lines))
	return res.Status == reservation.StatusReserved, err
}

func (t *poolTarget) claim(ctx context.Context, shop int64, token string) error {
	_, err := t.store.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token})
	return err
}

func (t *poolTarget) counters() counters {
	return mysqlCounters(t.reg)
}

// mysqlCounters reads a MySQL store's counters from its registry.
func mysqlCounters(reg *prometheus.Registry) counters {
	fams, _ := reg.Gather() // a failed gather reads as zeros: the report shows them
	deadlocks := counterSum(fams, "reservoir_mysql_tx_retries_total", "reason", "deadlock")
	lockWaits := counterSum(fams, "reservoir_mysql_tx_retries_total", "reason", "lock_wait_timeout")
	return counters{
		deadlocks:   deadlocks,
		lockWaits:   lockWaits,
		retries:     deadlocks + lockWaits + counterSum(fams, "reservoir_mysql_reserve_short_retries_total", "", ""),
		refills:     counterSum(fams, "reservoir_mysql_replenish_total", "result", "inserted"),
		refillUnits: counterSum(fams, "reservoir_mysql_replenish_units_total", "", ""),
		hold:        gatherHold(reg),
	}
}

// counterSum sums the counter name over its series whose label has value
// (every series when label is "").
func counterSum(fams []*dto.MetricFamily, name, label, value string) int64 {
	var n float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					match = true
				}
			}
			if match {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return int64(n)
}

// gatherHold reads mysqlstore's connection hold histogram per caller.
func gatherHold(reg *prometheus.Registry) map[string]holdSum {
	out := map[string]holdSum{}
	fams, err := reg.Gather()
	if err != nil {
		return out
	}
	for _, f := range fams {
		if f.GetName() != "reservoir_mysql_conn_hold_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			caller := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "caller" {
					caller = l.GetValue()
				}
			}
			h := m.GetHistogram()
			out[caller] = holdSum{seconds: h.GetSampleSum(), count: h.GetSampleCount()}
		}
	}
	return out
}

func gatherCounter(reg *prometheus.Registry, name string) int64 {
	fams, err := reg.Gather()
	if err != nil {
		return 0
	}
	return counterSum(fams, name, "", "")
}

func (t *poolTarget) check(ctx context.Context, shop int64, b *book) error {
	return checkPool(ctx, t.db.db, shop, b, t.store.PoolCap(), true)
}

// checkPool holds the unit pool to the book: per item, the ledger lost
// exactly the claimed units, the holds are exactly the acknowledged
// reserves not yet claimed (when exact), and the projection holds:
// pool + held <= available, pool <= cap.
func checkPool(ctx context.Context, q querier, shop int64, b *book, poolCap int64, exact bool) error {
	rows, err := q.QueryContext(ctx, sqlCheckPool, shop)
	if err != nil {
		return err
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var item, avail, held, pool int64
		if err := rows.Scan(&item, &avail, &held, &pool); err != nil {
			return err
		}
		seen++
		i := item - 1
		if i < 0 || int(i) >= len(b.stock) {
			return fmt.Errorf("unexpected item %d in the ledger", item)
		}
		rlo, rhi := span(b.reserved, b.reserveDoubt, int(i))
		clo, chi := span(b.claimed, b.claimDoubt, int(i))
		claimed := b.stock[i] - avail // the ledger says exactly what was claimed
		switch {
		case !within(claimed, clo, chi):
			return fmt.Errorf("item %d: the ledger lost %d units, but %s were claimed", item, claimed, rangeText(clo, chi))
		case exact && !within(held+claimed, rlo, rhi):
			return fmt.Errorf("item %d: %d units held + %d claimed, but %s were reserved", item, held, claimed, rangeText(rlo, rhi))
		case pool+held > avail:
			return fmt.Errorf("item %d: pool %d + held %d > available %d: the projection is broken", item, pool, held, avail)
		case pool > poolCap:
			return fmt.Errorf("item %d: pool %d above its cap %d", item, pool, poolCap)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if seen != len(b.stock) {
		return fmt.Errorf("%d ledger rows, want %d", seen, len(b.stock))
	}
	return nil
}

func (t *poolTarget) close(context.Context) error { return nil }

// -------------------------------------------------------------------- redis

// redisTarget is the legacy store with its ledger, and the relay that
// makes Redis follow the ledger's changes, as a cell runs it in mode
// redis: the legacy claim leaves its Redis side to the relay (unless
// Inline), so a redis variant without one would skip work production
// does.
type redisTarget struct {
	ledger *mysqlstore.Store
	reg    *prometheus.Registry
	store  *redisstore.Store
	path   *path
	mr     *mirror.Mirror
	relay  *relayRun
}

func newRedisTarget(env *pointEnv, cfg mysqlstore.Config) (*redisTarget, error) {
	my, reg, err := newMySQLStore(env, cfg)
	if err != nil {
		return nil, err
	}
	rd, err := redisstore.New(redisConfig(env, my))
	if err != nil {
		return nil, err
	}
	relayMy, relayRd, err := relayStores(env, cfg, my, rd)
	if err != nil {
		return nil, err
	}
	mr, err := mirror.New(mirror.Config{Pod: "bench", MySQL: relayMy, Redis: relayRd, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	return &redisTarget{ledger: my, reg: reg, store: rd, path: env.path, mr: mr, relay: startRelay(mr)}, nil
}

// relayRun is a mirror's relay, running for a target's life in a
// goroutine the target owns.
type relayRun struct {
	stop context.CancelFunc
	done chan struct{} // closed once the relay returned
}

func startRelay(mr *mirror.Mirror) *relayRun {
	ctx, stop := context.WithCancel(context.Background())
	r := &relayRun{stop: stop, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		_ = mr.Run(ctx)
	}()
	return r
}

// close stops the relay and waits for it (within ctx).
func (r *relayRun) close(ctx context.Context) error {
	r.stop()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("bench: the relay did not stop: %w", ctx.Err())
	}
}

// redisConfig is the legacy store of a point, on the ledger my.
func redisConfig(env *pointEnv, my *mysqlstore.Store) redisstore.Config {
	return redisstore.Config{Client: env.path.redis, Ledger: my, Source: my, Prefix: env.prefix, InlineClaimCleanup: env.inlineCleanup}
}

// stockRedis sets the ledger and the Redis quantities of every item: an
// authority Adjust sets the ledger, then moves Redis by what it changed.
func stockRedis(ctx context.Context, rd *redisstore.Store, shop int64, sc *scenario) error {
	return forEach(ctx, sc.items, func(ctx context.Context, i int) error {
		avail := sc.stock(i)
		_, err := rd.Adjust(ctx, &reservation.AdjustParams{Shop: shop, Item: int64(i + 1), Location: location, Available: &avail})
		return err
	})
}

func (t *redisTarget) setup(ctx context.Context, shop int64, sc *scenario) error {
	return stockRedis(ctx, t.store, shop, sc)
}

func (t *redisTarget) reserve(ctx context.Context, shop int64, token string, lines []reservation.Line) (bool, error) {
	res, err := t.store.Reserve(ctx, reserveParams(shop, token, lines))
	return res.Status == reservation.StatusReserved, err
}

func (t *redisTarget) claim(ctx context.Context, shop int64, token string) error {
	_, err := t.store.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token})
	return err
}

func (t *redisTarget) counters() counters { return mysqlCounters(t.reg) }

// check holds the ledger and Redis to the book, then, once the relay has
// delivered every change of the shop, Redis to the ledger: no hold left
// that the ledger claimed (Drift), so every claim's Redis side was done.
func (t *redisTarget) check(ctx context.Context, shop int64, b *book) error {
	if err := checkPool(ctx, t.path.db, shop, b, t.ledger.PoolCap(), false); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	if err := checkRedis(ctx, t.store, shop, b); err != nil {
		return err
	}
	if err := t.mr.Flush(ctx, shop); err != nil {
		return fmt.Errorf("deliver the ledger's changes to Redis: %w", err)
	}
	d, err := t.store.Drift(ctx, &reservation.DriftParams{Shop: shop})
	if err != nil {
		return err
	}
	if len(d) > 0 {
		return fmt.Errorf("after the relay delivered every change, Redis does not follow the ledger: %d differences, the first %v", len(d), d[0])
	}
	return nil
}

// checkRedis holds the Redis quantities to the book: a reserve takes units
// out, a legacy claim leaves the quantity alone (the ledger and the hold go
// down together).
func checkRedis(ctx context.Context, rd *redisstore.Store, shop int64, b *book) error {
	return forEach(ctx, len(b.stock), func(ctx context.Context, i int) error {
		a, err := rd.Availability(ctx, &reservation.AvailabilityParams{Shop: shop, Item: int64(i + 1)})
		if err != nil {
			return err
		}
		lo, hi := span(b.reserved, b.reserveDoubt, i)
		if taken := b.stock[i] - a.At(location); !within(taken, lo, hi) {
			return fmt.Errorf("item %d: Redis quantity %d (%d taken from %d), but %s were reserved", i+1, a.At(location), taken, b.stock[i], rangeText(lo, hi))
		}
		return nil
	})
}

// close stops the relay (within ctx).
func (t *redisTarget) close(ctx context.Context) error { return t.relay.close(ctx) }

// ------------------------------------------------------------------- facade

// facadeTarget is the dual-write facade of one pod, as a cell runs it:
// both stores, a comparer, flags at a version (the epoch of the handoffs
// they cause) and the pod's mirror, whose relay runs for the target's
// life in a goroutine the target owns.
type facadeTarget struct {
	mode  authority.Mode
	modes *authority.Static
	my    *mysqlstore.Store
	myReg *prometheus.Registry
	rd    *redisstore.Store
	mr    *mirror.Mirror
	cmp   *compare.Comparer
	f     *dualwrite.Facade
	fReg  *prometheus.Registry
	path  *path
	// relayMy and relayRd are the stores of the relay and the handoffs
	// (relayStores).
	relayMy *mysqlstore.Store
	relayRd *redisstore.Store
	relay   *relayRun
}

// facadeExtras are what the handoff scenario adds to a facade target:
// the mirror's observation hook (mirror.Config.OnCutover) and a wrapper
// around each store the facade calls. The zero value adds nothing.
type facadeExtras struct {
	onCutover  func(shop int64, to reservation.Authority, start, end time.Time)
	wrap       func(reservation.Store) reservation.Store
	wrapMirror func(dualwrite.Mirror) dualwrite.Mirror
}

// newFacadeTarget builds the facade in mode. noFeed leaves Redis's mirror
// out (no change feed, no relay) to measure what it costs.
func newFacadeTarget(env *pointEnv, mode authority.Mode, cfg mysqlstore.Config) (*facadeTarget, error) {
	return newFacadeTargetWith(env, mode, cfg, facadeExtras{})
}

func newFacadeTargetWith(env *pointEnv, mode authority.Mode, cfg mysqlstore.Config, x facadeExtras) (*facadeTarget, error) {
	noFeed := cfg.NoFeed
	my, myReg, err := newMySQLStore(env, cfg)
	if err != nil {
		return nil, err
	}
	rd, err := redisstore.New(redisConfig(env, my))
	if err != nil {
		return nil, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	relayMy, relayRd, err := relayStores(env, cfg, my, rd)
	if err != nil {
		return nil, err
	}
	cmp, err := compare.New(compare.Config{DB: env.path.db, Logger: quiet})
	if err != nil {
		return nil, err
	}
	// Without the feed there is no relay to compare reserves: the facade
	// asks Redis itself, as it must (Evaluates is false).
	mr, err := mirror.New(mirror.Config{Pod: "bench", MySQL: relayMy, Redis: relayRd, Logger: quiet, Disabled: noFeed,
		Evaluated: compare.ObserveRelayed("bench", cmp), OnCutover: x.onCutover})
	if err != nil {
		_ = cmp.Close(context.Background())
		return nil, err
	}
	// NewStatic is at version 1: a shop whose fence is older (every shop,
	// at first) is handed off to the store the mode names.
	modes := authority.NewStatic(mode)
	fReg := prometheus.NewRegistry()
	var fRedis, fMySQL reservation.Store = rd, my
	if x.wrap != nil {
		fRedis, fMySQL = x.wrap(rd), x.wrap(my)
	}
	var fMirror dualwrite.Mirror = mr
	if x.wrapMirror != nil {
		fMirror = x.wrapMirror(mr)
	}
	f, err := dualwrite.New(dualwrite.Config{Pod: "bench", Redis: fRedis, MySQL: fMySQL, Modes: modes, Mirror: fMirror,
		Observer: cmp, Registerer: fReg, Logger: quiet})
	if err != nil {
		_ = cmp.Close(context.Background())
		return nil, err
	}
	t := &facadeTarget{mode: mode, modes: modes, my: my, myReg: myReg, rd: rd, mr: mr, cmp: cmp, f: f, fReg: fReg, path: env.path,
		relayMy: relayMy, relayRd: relayRd, relay: startRelay(mr)}
	return t, nil
}

// relayStores are the stores the relay (and the handoffs) use: my and rd
// themselves, or the same stores on the direct connections of env.
func relayStores(env *pointEnv, cfg mysqlstore.Config, my *mysqlstore.Store, rd *redisstore.Store) (*mysqlstore.Store, *redisstore.Store, error) {
	if env.relayDB == nil || env.relayRedis == nil {
		return my, rd, nil
	}
	cfg.DB, cfg.PoolCap, cfg.Registerer = env.relayDB, env.poolCap, prometheus.NewRegistry()
	relayMy, err := mysqlstore.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	relayRd, err := redisstore.New(redisstore.Config{Client: env.relayRedis, Ledger: relayMy, Source: relayMy, Prefix: env.prefix})
	if err != nil {
		return nil, nil, err
	}
	return relayMy, relayRd, nil
}

// setup stocks the shop through Redis, which decides every shop until it
// is handed off. In mysql and mysql_only mode the shop is handed to MySQL
// at the flags' version, as the facade's first call would do, so that the window
// measures MySQL deciding (with Redis following through the relay) rather
// than the handoff; the pools are then primed by MySQL as the decider,
// otherwise as Redis's shadow.
func (t *facadeTarget) setup(ctx context.Context, shop int64, sc *scenario) error {
	if err := stockRedis(ctx, t.rd, shop, sc); err != nil {
		return err
	}
	as := reservation.AsShadow
	if t.mysqlDecides() {
		f, err := t.mr.HandoffWait(ctx, shop, reservation.AuthorityMySQL, t.modes.Version(), false)
		if err != nil {
			return err
		}
		if f.Decider != reservation.AuthorityMySQL {
			return fmt.Errorf("hand shop %d to MySQL: the fence is %s", shop, f)
		}
		as = reservation.AsAuthority
	}
	return forEach(ctx, sc.items, func(ctx context.Context, i int) error { return primePool(ctx, t.my, as, shop, sc, i) })
}

// mysqlDecides: the target's mode has MySQL decide (mysql, mysql_only).
func (t *facadeTarget) mysqlDecides() bool {
	return t.mode == authority.ModeMySQL || t.mode == authority.ModeMySQLOnly
}

func (t *facadeTarget) reserve(ctx context.Context, shop int64, token string, lines []reservation.Line) (bool, error) {
	// The facade's shadow call reads the cart after Reserve returned, and
	// the caller reuses lines for its next cart: the facade gets its own.
	res, err := t.f.Reserve(ctx, reserveParams(shop, token, slices.Clone(lines)))
	return res.Status == reservation.StatusReserved, err
}

func (t *facadeTarget) claim(ctx context.Context, shop int64, token string) error {
	_, err := t.f.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token})
	return err
}

func (t *facadeTarget) counters() counters {
	c := mysqlCounters(t.myReg)
	c.shadowSkipped = gatherCounter(t.fReg, "reservoir_dualwrite_shadow_skipped_total")
	return c
}

// check waits for the shadow calls in flight, then holds the decider to
// the book exactly; the shadow side may miss calls (skipped when its slots
// were full, timed out), so of MySQL as shadow only the projection is
// checked.
func (t *facadeTarget) check(ctx context.Context, shop int64, b *book) error {
	if err := t.f.Close(ctx); err != nil {
		return err
	}
	if t.mysqlDecides() {
		return checkPool(ctx, t.path.db, shop, b, t.my.PoolCap(), true)
	}
	if err := checkPool(ctx, t.path.db, shop, b, t.my.PoolCap(), false); err != nil {
		return fmt.Errorf("MySQL: %w", err)
	}
	return checkRedis(ctx, t.rd, shop, b)
}

// close waits for the shadow calls, stops the relay (within ctx) and
// closes the comparer.
func (t *facadeTarget) close(ctx context.Context) error {
	err := t.f.Close(ctx)
	return errors.Join(err, t.relay.close(ctx), t.cmp.Close(ctx))
}
