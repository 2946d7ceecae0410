package lossless_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/internal/history"
	"github.com/seed31b0e981/reservoir/internal/reconcile"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// flags is one version of the flags the world publishes: a mode and a
// kill switch per pod, kill switches per shop, and a global kill switch.
type flags struct {
	version  int64
	mode     map[string]authority.Mode
	kill     map[string]authority.Kill
	shopKill map[int64]authority.Kill
	global   authority.Kill
}

func (f flags) clone() flags {
	n := f
	n.mode, n.kill, n.shopKill = map[string]authority.Mode{}, map[string]authority.Kill{}, map[int64]authority.Kill{}
	for k, v := range f.mode {
		n.mode[k] = v
	}
	for k, v := range f.kill {
		n.kill[k] = v
	}
	for k, v := range f.shopKill {
		n.shopKill[k] = v
	}
	return n
}

// decide is what rollout's sources answer: the strongest kill switch of
// any scope wins over the pod's mode.
func (f flags) decide(pod string, shop int64) authority.Decision {
	d := authority.Decision{Mode: f.mode[pod], Kill: authority.KillOff, Version: f.version}
	if d.Mode == "" {
		d.Mode = authority.ModeRedis
	}
	for _, k := range []authority.Kill{f.global, f.kill[pod], f.shopKill[shop]} {
		if k == authority.KillRedisOnly || (k == authority.KillRedis && d.Kill == authority.KillOff) {
			d.Kill = k
		}
	}
	return d
}

func (f flags) String() string {
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(f.mode)) {
		s := p + "=" + string(f.mode[p])
		if k := f.kill[p]; k != "" && k != authority.KillOff {
			s += "+kill:" + string(k)
		}
		parts = append(parts, s)
	}
	for _, shop := range slices.Sorted(maps.Keys(f.shopKill)) {
		if k := f.shopKill[shop]; k != authority.KillOff {
			parts = append(parts, fmt.Sprintf("shop %d kill:%s", shop, k))
		}
	}
	if f.global != "" && f.global != authority.KillOff {
		parts = append(parts, "global kill:"+string(f.global))
	}
	return fmt.Sprintf("v%d %s", f.version, strings.Join(parts, " "))
}

// errInDoubt is what a view answers while it has no flags.
var errInDoubt = errors.New("lossless: this replica has not read its flags")

// view is one replica's flags: what it has applied so far. A nil
// current version is a replica in doubt.
type view struct {
	mu  sync.Mutex
	cur *flags
}

func (v *view) Decide(_ context.Context, pod string, shop int64) (authority.Decision, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cur == nil {
		return authority.Decision{}, errInDoubt
	}
	return v.cur.decide(pod, shop), nil
}

// apply makes f the view's flags unless it already has a newer version.
func (v *view) apply(f flags) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cur == nil || v.cur.version < f.version {
		v.cur = &f
	}
}

func (v *view) version() int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cur == nil {
		return 0
	}
	return v.cur.version
}

// faults injects failures between a replica's facade and its stores (and
// the legacy claim's ledger): a call that is not sent, or one whose reply
// is lost after it took effect. Probabilities are per mille.
type faults struct {
	drop, lose atomic.Int64
	rng        lockedRand
	injected   atomic.Int64
}

var (
	errNotSent   = errors.New("lossless: connection refused (injected: the call was not sent)")
	errReplyLost = errors.New("lossless: i/o timeout (injected: the call ran, its reply was lost)")
)

func (f *faults) before() error {
	if f == nil {
		return nil
	}
	if p := f.drop.Load(); p > 0 && f.rng.IntN(1000) < int(p) {
		f.injected.Add(1)
		return errNotSent
	}
	return nil
}

func (f *faults) after() bool {
	if f == nil {
		return false
	}
	if p := f.lose.Load(); p > 0 && f.rng.IntN(1000) < int(p) {
		f.injected.Add(1)
		return true
	}
	return false
}

// lockedRand is a rand shared by goroutines.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (l *lockedRand) IntN(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.IntN(n)
}

func (l *lockedRand) Int64N(n int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Int64N(n)
}

func (l *lockedRand) Float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

// lossyStore is a reservation.Store whose calls go through faults.
type lossyStore struct {
	reservation.Store
	f *faults
}

func (s lossyStore) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	if err := s.f.before(); err != nil {
		return reservation.ReserveResult{}, err
	}
	res, err := s.Store.Reserve(ctx, p)
	if s.f.after() {
		return reservation.ReserveResult{}, errReplyLost
	}
	return res, err
}

func (s lossyStore) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	if err := s.f.before(); err != nil {
		return reservation.ClaimResult{}, err
	}
	res, err := s.Store.Claim(ctx, p)
	if s.f.after() {
		return reservation.ClaimResult{}, errReplyLost
	}
	return res, err
}

func (s lossyStore) Release(ctx context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	if err := s.f.before(); err != nil {
		return reservation.ReleaseResult{}, err
	}
	res, err := s.Store.Release(ctx, p)
	if s.f.after() {
		return reservation.ReleaseResult{}, errReplyLost
	}
	return res, err
}

// Get goes through the faults too: a GET whose reply is lost is a call
// without an answer, which the reads check must not judge.
func (s lossyStore) Get(ctx context.Context, p *reservation.GetParams) (reservation.Hold, error) {
	if err := s.f.before(); err != nil {
		return reservation.Hold{}, err
	}
	h, err := s.Store.Get(ctx, p)
	if s.f.after() {
		return reservation.Hold{}, errReplyLost
	}
	return h, err
}

// lossyLedger is the legacy claim's ledger with faults.
type lossyLedger struct {
	reservation.Ledger
	f *faults
}

func (l lossyLedger) Deduct(ctx context.Context, p *reservation.DeductParams) (reservation.DeductResult, error) {
	if err := l.f.before(); err != nil {
		return reservation.DeductResult{}, err
	}
	res, err := l.Ledger.Deduct(ctx, p)
	if l.f.after() {
		return reservation.DeductResult{}, errReplyLost
	}
	return res, err
}

// worldConfig shapes a world.
type worldConfig struct {
	pods, replicas, shopsPerPod, items, locations int
	// stock is the starting quantity of each item x location (a range).
	stockMin, stockMax int64
	// noFeed: MySQL's change feed never reaches Redis (the knob).
	noFeed bool
	// noRelay: no relay runs; only handoffs deliver the feed (the cases
	// use it to show no path relies on a best-effort write).
	noRelay bool
	// claimGrace is Redis's grace for a legacy claim in progress.
	claimGrace time.Duration
}

func (c worldConfig) withDefaults() worldConfig {
	if c.pods == 0 {
		c.pods = 2
	}
	if c.replicas == 0 {
		c.replicas = 3
	}
	if c.shopsPerPod == 0 {
		c.shopsPerPod = 2
	}
	if c.items == 0 {
		c.items = 6
	}
	if c.locations == 0 {
		c.locations = 2
	}
	if c.stockMax == 0 {
		c.stockMin, c.stockMax = 4, 8
	}
	if c.claimGrace == 0 {
		c.claimGrace = time.Second
	}
	return c
}

// world is the system under test: pods of replicas over real servers.
type world struct {
	t    testing.TB
	cfg  worldConfig
	pods []*pod
	rng  *lockedRand

	mu        sync.Mutex
	published []flags
	// flipped is closed when the next version is published (and then
	// replaced): callers that read a reservation across a flip wait on it.
	flipped chan struct{}
	// stock is each ledger row's starting quantity.
	stock map[key]int64
	// nextItem is the last item id stocked; active the batch in use.
	nextItem int64
	active   [2]int64

	stop   context.CancelFunc
	ctx    context.Context
	wg     sync.WaitGroup
	delays []chan flags // one per replica: the flags it will apply

	// evaluated counts the carts the relays asked Redis about (the
	// comparison of reserves MySQL decided in mysql mode), and
	// evalFailed those whose evaluation failed (a fault, a shutdown).
	evaluated, evalFailed atomic.Int64
}

type key struct{ shop, item, loc int64 }

type pod struct {
	name     string
	db       *testdb.DB
	redis    *testredis.Redis
	shops    []int64
	replicas []*replica
}

type replica struct {
	name string
	pod  *pod
	// mirrorReg holds the mirror's metrics: the run's summary counts the
	// handoffs by how they went.
	mirrorReg *prometheus.Registry
	my        *mysqlstore.Store
	rd        *redisstore.Store
	mirror    *mirror.Mirror
	facade    *dualwrite.Facade
	view      *view
	faults    *faults
}

// newWorld builds a world; flags starts every pod in mode redis (version
// 1), and every replica has applied it unless inDoubt names it.
func newWorld(t testing.TB, cfg worldConfig, seed uint64, inDoubt map[string]bool) *world {
	t.Helper()
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	w := &world{t: t, cfg: cfg, rng: &lockedRand{r: rand.New(rand.NewPCG(seed, 0x10551e55))}, stock: map[key]int64{}, ctx: ctx, stop: cancel,
		flipped: make(chan struct{})}
	first := flags{version: 1, mode: map[string]authority.Mode{}, kill: map[string]authority.Kill{}, shopKill: map[int64]authority.Kill{}, global: authority.KillOff}
	limits := reservation.Limits{MaxQuantity: 20}
	for i := range cfg.pods {
		p := &pod{name: fmt.Sprintf("pod-%c", 'a'+i), db: testdb.New(t), redis: testredis.New(t)}
		first.mode[p.name] = authority.ModeRedis
		for s := range cfg.shopsPerPod {
			p.shops = append(p.shops, int64(1000*(i+1)+s+1))
		}
		for r := range cfg.replicas {
			rep := &replica{name: fmt.Sprintf("%s/%d", p.name, r), pod: p, view: &view{}, mirrorReg: prometheus.NewRegistry(),
				faults: &faults{rng: lockedRand{r: rand.New(rand.NewPCG(seed, uint64(100*i+r)))}}}
			var err error
			if rep.my, err = mysqlstore.New(mysqlstore.Config{DB: p.db.DB, PoolCap: 20, Limits: limits, Registerer: prometheus.NewRegistry()}); err != nil {
				t.Fatal(err)
			}
			if rep.rd, err = redisstore.New(redisstore.Config{Client: p.redis.Client, Prefix: p.redis.Prefix,
				Ledger: lossyLedger{rep.my, rep.faults}, Source: rep.my, Limits: limits, ClaimGrace: cfg.claimGrace,
				Registerer: prometheus.NewRegistry()}); err != nil {
				t.Fatal(err)
			}
			// CopyInline is low: every shop past its first few carts is
			// handed to MySQL by a copy ahead, while Redis decides and
			// callers follow it, as a large shop is in production.
			if rep.mirror, err = mirror.New(mirror.Config{Pod: p.name, MySQL: rep.my, Redis: rep.rd, Disabled: cfg.noFeed,
				Poll: 10 * time.Millisecond, Standby: 200 * time.Millisecond, Registerer: rep.mirrorReg, CopyInline: 8,
				Evaluated: func(_ reservation.Change, _ reservation.ReserveResult, err error) {
					w.evaluated.Add(1)
					if err != nil {
						w.evalFailed.Add(1)
					}
				}}); err != nil {
				t.Fatal(err)
			}
			if rep.facade, err = dualwrite.New(dualwrite.Config{Pod: p.name, Redis: lossyStore{rep.rd, rep.faults}, MySQL: lossyStore{rep.my, rep.faults},
				Modes: rep.view, Mirror: rep.mirror, ShadowTimeout: 250 * time.Millisecond, Registerer: prometheus.NewRegistry()}); err != nil {
				t.Fatal(err)
			}
			p.replicas = append(p.replicas, rep)
		}
		w.pods = append(w.pods, p)
	}
	w.published = append(w.published, first)
	// Registered after the databases: cleanups run last first, so the
	// relays and reapers stop before the databases go.
	t.Cleanup(w.close)
	for _, p := range w.pods {
		for _, r := range p.replicas {
			if !inDoubt[r.name] {
				r.view.apply(first)
			}
			ch := make(chan flags, 1024)
			w.delays = append(w.delays, ch)
			w.wg.Go(func() { w.follow(r, ch) })
			if !cfg.noRelay {
				w.wg.Go(func() { _ = r.mirror.Run(w.ctx) })
				// The pod's handoff sweeper (one replica at a time): shops
				// are handed off when the flags change, not only when a
				// call finds their fences behind.
				w.wg.Go(func() {
					_ = r.mirror.RunSweeper(w.ctx, mirror.SweeperConfig{Wanted: r.facade.Wanted, Replica: r.name, Interval: 50 * time.Millisecond,
						Version: func(context.Context) (int64, bool) { v := r.view.version(); return v, v > 0 }})
				})
			}
			w.wg.Go(func() { w.reap(r) })
		}
	}
	return w
}

// follow applies published flags to a replica's view, each after its own
// random delay of 0-200 ms, in order.
func (w *world) follow(r *replica, ch <-chan flags) {
	for {
		select {
		case <-w.ctx.Done():
			return
		case f := <-ch:
			d := time.Duration(w.rng.Int64N(int64(200 * time.Millisecond)))
			select {
			case <-w.ctx.Done():
				return
			case <-time.After(d):
			}
			r.view.apply(f)
		}
	}
}

// reap is a replica's reaper, as the cell runs it: both stores, MySQL
// skipped while the replica's flags say redis_only for the pod.
func (w *world) reap(r *replica) {
	t := time.NewTicker(150 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		}
		stores := []reservation.Store{r.rd}
		if d, err := r.view.Decide(w.ctx, r.pod.name, 0); err != nil || d.Kill != authority.KillRedisOnly {
			stores = append(stores, r.my)
		}
		for _, s := range stores {
			for range 10 {
				res, err := s.Reap(w.ctx, &reservation.ReapParams{})
				if err != nil || res.Holds == 0 {
					break
				}
			}
		}
	}
}

// publish makes f the next version of the flags and hands it to every
// replica (each applies it after its own delay). It returns the version.
func (w *world) publish(edit func(f *flags)) flags {
	w.mu.Lock()
	next := w.published[len(w.published)-1].clone()
	next.version++
	edit(&next)
	w.published = append(w.published, next)
	w.flip()
	w.mu.Unlock()
	for _, ch := range w.delays {
		ch <- next
	}
	return next
}

// flipTo makes the next version of the flags and applies it at once to
// the given replicas only (every replica when none is given): the others
// keep what they had, as a replica that has not seen a change yet does.
func (w *world) flipTo(edit func(f *flags), rs ...*replica) flags {
	w.mu.Lock()
	next := w.published[len(w.published)-1].clone()
	next.version++
	edit(&next)
	w.published = append(w.published, next)
	w.flip()
	w.mu.Unlock()
	if len(rs) == 0 {
		for _, p := range w.pods {
			rs = append(rs, p.replicas...)
		}
	}
	for _, r := range rs {
		r.view.apply(next)
	}
	return next
}

// flip wakes whoever waits for the next version (w.mu held).
func (w *world) flip() {
	close(w.flipped)
	w.flipped = make(chan struct{})
}

// nextFlip is closed when the next version of the flags is published.
func (w *world) nextFlip() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flipped
}

// latest is the newest version published.
func (w *world) latest() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.published[len(w.published)-1].version
}

// setStock sets an item x location's ledger (and Redis's quantity, which
// follows it) and records it as the starting stock.
func (w *world) setStock(shop, item, loc, n int64) {
	w.t.Helper()
	p := w.podOf(shop)
	if _, err := p.replicas[0].rd.Adjust(w.ctx, &reservation.AdjustParams{Shop: shop, Item: item, Location: loc, Available: &n}); err != nil {
		w.t.Fatalf("stock shop %d item %d location %d: %v", shop, item, loc, err)
	}
	w.mu.Lock()
	w.stock[key{shop, item, loc}] = n
	w.mu.Unlock()
}

// ledger reads an item x location's ledger.
func (w *world) ledger(shop, item, loc int64) int64 {
	w.t.Helper()
	var n int64
	err := w.podOf(shop).db.QueryRowContext(context.Background(),
		"SELECT available FROM inventory_ledger WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ?", shop, item, loc).Scan(&n)
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

// settle waits until every replica has applied the newest flags.
func (w *world) settle() {
	w.mu.Lock()
	want := w.published[len(w.published)-1].version
	w.mu.Unlock()
	w.waitFor("every replica applies flags v"+fmt.Sprint(want), 5*time.Second, func() bool {
		for _, p := range w.pods {
			for _, r := range p.replicas {
				if r.view.version() < want {
					return false
				}
			}
		}
		return true
	})
}

// waitFor polls cond until it holds or the time is up (a failure).
func (w *world) waitFor(what string, within time.Duration, cond func() bool) {
	w.t.Helper()
	if !w.waitUntil(within, cond) {
		w.t.Fatalf("waited %s for %s", within, what)
	}
}

// waitUntil polls cond until it holds (true) or within passes (false).
func (w *world) waitUntil(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// stockUp stocks the next batch of items (cfg.items of them) in every
// shop, through the ledger and Redis's own quantity, and makes it the
// batch callers pick from. Items roll over because claims use stock up
// for good, and the model knows only an item's starting stock.
func (w *world) stockUp(record func(shop, item, loc, qty int64)) {
	w.t.Helper()
	w.mu.Lock()
	first := w.nextItem + 1
	w.mu.Unlock()
	last := first + int64(w.cfg.items) - 1
	for _, p := range w.pods {
		r := p.replicas[0]
		for _, shop := range p.shops {
			for item := first; item <= last; item++ {
				for loc := int64(1); loc <= int64(w.cfg.locations); loc++ {
					n := w.cfg.stockMin + w.rng.Int64N(w.cfg.stockMax-w.cfg.stockMin+1)
					if record != nil {
						record(shop, item, loc, n) // before any call names the item
					}
					if _, err := r.rd.Adjust(w.ctx, &reservation.AdjustParams{Shop: shop, Item: item, Location: loc, Available: &n}); err != nil {
						w.t.Errorf("stock shop %d item %d location %d: %v", shop, item, loc, err)
						return
					}
					w.mu.Lock()
					w.stock[key{shop, item, loc}] = n
					w.mu.Unlock()
				}
			}
		}
	}
	w.mu.Lock()
	w.nextItem = last
	w.active = [2]int64{first, last}
	w.mu.Unlock()
}

// items returns the batch of items callers pick from now.
func (w *world) items() (first, last int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.active[0], w.active[1]
}

func (w *world) podOf(shop int64) *pod {
	for _, p := range w.pods {
		if slices.Contains(p.shops, shop) {
			return p
		}
	}
	w.t.Fatalf("no pod has shop %d", shop)
	return nil
}

// setFaults sets every replica's fault rates (per mille).
func (w *world) setFaults(drop, lose int64) {
	for _, p := range w.pods {
		for _, r := range p.replicas {
			r.faults.drop.Store(drop)
			r.faults.lose.Store(lose)
		}
	}
}

func (w *world) close() {
	w.stop()
	w.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, p := range w.pods {
		for _, r := range p.replicas {
			_ = r.mirror.Close(ctx)
			_ = r.facade.Close(ctx)
		}
	}
}

// ---- the end-state checks ----

// violations is what the end-state checks found.
type violations []string

func (v *violations) add(format string, args ...any) { *v = append(*v, fmt.Sprintf(format, args...)) }

// claimsOutcome is what the callers were told about a token's claim.
type claimsOutcome struct {
	acked   map[string]bool // shop/token -> the claim was acknowledged
	unknown map[string]bool // shop/token -> a claim got no definite answer
}

// checkLedger: every ledger row went down by exactly the claims its
// claims rows record; each acknowledged claim has a claims row; each claims
// row is an acknowledged claim or one whose outcome the caller never
// learned, and deducted exactly the allocations its reserve was
// acknowledged with (acked, from the reads check), when it was; nothing
// went below zero. It returns how many claims rows it held to an
// acknowledged reserve.
func (w *world) checkLedger(out *violations, claims claimsOutcome, acked map[history.TokenKey]reservation.Hold) (held int) {
	ctx := context.Background()
	for _, p := range w.pods {
		rows, err := p.db.QueryContext(ctx, "SELECT shop_id, token, allocations FROM reservation_claims")
		if err != nil {
			w.t.Fatal(err)
		}
		deducted := map[key]int64{}
		seen := map[string]bool{}
		for rows.Next() {
			var shop int64
			var token, doc string
			if err := rows.Scan(&shop, &token, &doc); err != nil {
				w.t.Fatal(err)
			}
			id := fmt.Sprintf("%d/%s", shop, token)
			seen[id] = true
			if !claims.acked[id] && !claims.unknown[id] {
				out.add("ledger: token %s was deducted but no caller was told it was claimed, nor left in doubt", id)
			}
			var as []reservation.Allocation
			if err := jsonUnmarshal(doc, &as); err != nil {
				w.t.Fatal(err)
			}
			for _, a := range as {
				deducted[key{shop, a.Item, a.Location}] += a.Quantity
			}
			if ack, ok := acked[history.TokenKey{Shop: shop, Token: token}]; ok {
				held++
				if !history.SameAllocations(as, ack.Allocations) {
					out.add("ledger: token %s was deducted at %s, but its reserve was acknowledged holding %s",
						id, history.FormatAllocations(as), history.FormatAllocations(ack.Allocations))
				}
			}
		}
		rows.Close()
		for id := range claims.acked {
			if w.shopInPod(p, id) && !seen[id] {
				out.add("ledger: the claim of %s was acknowledged but the ledger has no claims row for it", id)
			}
		}
		lrows, err := p.db.QueryContext(ctx, "SELECT shop_id, inventory_item_id, location_id, available FROM inventory_ledger")
		if err != nil {
			w.t.Fatal(err)
		}
		for lrows.Next() {
			var k key
			var avail int64
			if err := lrows.Scan(&k.shop, &k.item, &k.loc, &avail); err != nil {
				w.t.Fatal(err)
			}
			if avail < 0 {
				out.add("ledger: %v oversold: available %d", k, avail)
			}
			if want := w.stock[k] - deducted[k]; avail != want {
				out.add("ledger: %v has %d, want %d (stock %d minus %d deducted by claims rows)", k, avail, want, w.stock[k], deducted[k])
			}
		}
		lrows.Close()
	}
	return held
}

func (w *world) shopInPod(p *pod, id string) bool {
	var shop int64
	fmt.Sscanf(id, "%d/", &shop)
	return slices.Contains(p.shops, shop)
}

// checkNoHolds: after every hold's expiry (and the reapers), neither store
// holds anything.
func (w *world) checkNoHolds(out *violations) {
	ctx := context.Background()
	for _, p := range w.pods {
		var n int64
		if err := p.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM reservations WHERE state = 'held'").Scan(&n); err != nil {
			w.t.Fatal(err)
		}
		if n > 0 {
			out.add("holds: %s's MySQL still holds %d reservation(s) after every expiry", p.name, n)
		}
		for _, shop := range p.shops {
			snap, err := p.replicas[0].rd.Snapshot(ctx, shop)
			if err != nil {
				w.t.Fatal(err)
			}
			if len(snap.Holds) > 0 {
				var toks []string
				for _, h := range snap.Holds {
					toks = append(toks, h.Token)
				}
				sort.Strings(toks)
				out.add("holds: %s's Redis still holds %d reservation(s) of shop %d after every expiry: %s", p.name, len(snap.Holds), shop, strings.Join(toks, ", "))
			}
		}
	}
}

// checkAgree: reconcile finds no drift in any pod.
func (w *world) checkAgree(out *violations) {
	ctx := context.Background()
	var pods []reconcile.Pod
	for _, p := range w.pods {
		r := p.replicas[0]
		pods = append(pods, reconcile.Pod{Name: p.name, MySQL: r.my, Redis: r.rd, Mirror: r.mirror})
	}
	rc := reconcile.New(pods)
	for _, p := range w.pods {
		rep, err := rc.Run(ctx, p.name, reconcile.Options{Shops: p.shops})
		if err != nil {
			w.t.Fatal(err)
		}
		for _, f := range rep.Findings {
			if !f.Note {
				out.add("reconcile %s: %s %s: %s", p.name, f.Side, f.Kind, f.Detail)
			}
		}
	}
}

// drainFeeds waits until every pod's change feed is empty.
func (w *world) drainFeeds(within time.Duration) {
	w.waitFor("every change feed to drain", within, func() bool {
		for _, p := range w.pods {
			l, err := p.replicas[0].mirror.Lag(context.Background())
			if err != nil || l.Changes > 0 {
				return false
			}
		}
		return true
	})
}

func jsonUnmarshal(doc string, v any) error { return json.Unmarshal([]byte(doc), v) }

// handoffs sums the replicas' handoff metrics: "to mysql: done 12, joined 3; to redis: done 9; 240 tokens copied ahead, 15 cut-overs".
func (w *world) handoffs() string {
	counts := map[string]float64{}
	var copied float64
	var cutovers uint64
	for _, p := range w.pods {
		for _, r := range p.replicas {
			mfs, err := r.mirrorReg.Gather()
			if err != nil {
				return err.Error()
			}
			for _, mf := range mfs {
				for _, m := range mf.GetMetric() {
					switch mf.GetName() {
					case "reservoir_handoffs_total":
						var to, result string
						for _, l := range m.GetLabel() {
							switch l.GetName() {
							case "to":
								to = l.GetValue()
							case "result":
								result = l.GetValue()
							}
						}
						counts["to "+to+" "+result] += m.GetCounter().GetValue()
					case "reservoir_handoff_copied_tokens_total":
						copied += m.GetCounter().GetValue()
					case "reservoir_handoff_cutover_seconds":
						cutovers += m.GetHistogram().GetSampleCount()
					}
				}
			}
		}
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, counts[k]))
	}
	return fmt.Sprintf("%s; %.0f reservations copied ahead, %d cut-overs", strings.Join(parts, ", "), copied, cutovers)
}
