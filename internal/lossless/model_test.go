package lossless_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/internal/history"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// Environment knobs of TestModel.
const (
	// EnvSeed replays a run: the seed a failing run printed.
	EnvSeed = "RESERVOIR_MODEL_SEED"
	// EnvDuration sets how long the traffic runs (a Go duration).
	EnvDuration = "RESERVOIR_MODEL_DURATION"
)

// TestModel is the randomized model test (see the package doc).
func TestModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(EnvSeed); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvSeed, s, err)
		}
		seed = n
	}
	duration := 60 * time.Second
	if s := os.Getenv(EnvDuration); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvDuration, s, err)
		}
		duration = d
	}
	t.Logf("seed %d (replay: %s=%d), traffic for %s", seed, EnvSeed, seed, duration)
	run := runModel(t, modelRun{seed: seed, duration: duration, callers: 32, faults: true})
	t.Log(run.summary)
	for _, v := range run.violations {
		t.Errorf("%s", v)
	}
	if t.Failed() {
		t.Logf("replay this run with %s=%d", EnvSeed, seed)
	}
}

// TestModelCatchesAnUndeliveredFeed: the same world with MySQL's change
// feed never reaching Redis. MySQL decides for a while, then the kill
// switch hands every shop to Redis, which does not know what MySQL
// holds: the checks must find it (re-sold units refuse acknowledged
// claims, and the stores disagree).
func TestModelCatchesAnUndeliveredFeed(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	run := runModel(t, modelRun{seed: seed, duration: 12 * time.Second, callers: 32, noFeed: true,
		script: []func(*flags){
			func(f *flags) { setAllModes(f, authority.ModeShadow) },
			func(f *flags) { setAllModes(f, authority.ModeMySQL) },
			func(f *flags) {},
			func(f *flags) {},
			func(f *flags) { f.global = authority.KillRedis },
			func(f *flags) {},
			func(f *flags) {},
		}, flipEvery: 1500 * time.Millisecond})
	t.Log(run.summary)
	if len(run.violations) == 0 {
		t.Fatal("with the change feed off, the model test found no violation: its checks cannot fail")
	}
	t.Logf("found %d violation(s), as it must; the first: %s", len(run.violations), run.violations[0])
}

func setAllModes(f *flags, m authority.Mode) {
	for p := range f.mode {
		f.mode[p] = m
	}
}

// modelRun is one run's shape.
type modelRun struct {
	seed     uint64
	duration time.Duration
	callers  int
	faults   bool
	noFeed   bool
	// script, when set, is the flips in order (one per flipEvery); after
	// it the flags stay. Without it the flips are random (coverFirst).
	script    []func(*flags)
	flipEvery time.Duration
}

type runResult struct {
	violations violations
	summary    string
}

// runModel runs traffic and flips in a world, then checks the end state.
func runModel(t *testing.T, m modelRun) runResult {
	t.Helper()
	rng := rand.New(rand.NewPCG(m.seed, 0xf11b5))
	// One replica of the first pod starts without its flags: it must
	// serve nothing (503) until it reads them.
	doubt := map[string]bool{"pod-a/2": true}
	// Each pod's third shop is quiet (see caller.cart).
	w := newWorld(t, worldConfig{noFeed: m.noFeed, shopsPerPod: 3}, m.seed, doubt)
	rec := history.New()
	record := func(shop, item, loc, qty int64) {
		rec.Stock(history.Key{Shop: shop, Item: item, Location: loc}, qty)
	}
	w.stockUp(record)
	if m.faults {
		w.setFaults(10, 20)
	}

	stats := &trafficStats{claims: claimsOutcome{acked: map[string]bool{}, unknown: map[string]bool{}}}
	tctx, stopTraffic := context.WithTimeout(context.Background(), m.duration)
	defer stopTraffic()
	var callers sync.WaitGroup
	for i := range m.callers {
		c := &caller{w: w, id: i, rng: rand.New(rand.NewPCG(m.seed, uint64(i)+1)), stats: stats}
		client := rec.Client(c)
		callers.Go(func() { c.run(tctx, client) })
	}

	// A new batch of items every few seconds: claims use stock up.
	var stocker sync.WaitGroup
	stocker.Go(func() {
		for {
			select {
			case <-tctx.Done():
				return
			case <-time.After(restockEvery):
			}
			w.stockUp(record)
		}
	})

	// The replica in doubt reads its flags after two seconds.
	go func() {
		select {
		case <-tctx.Done():
		case <-time.After(2 * time.Second):
		}
		w.mu.Lock()
		last := w.published[len(w.published)-1]
		w.mu.Unlock()
		w.pods[0].replicas[2].view.apply(last)
	}()

	var flips []string
	flipEvery := m.flipEvery
	if flipEvery == 0 {
		flipEvery = 1200 * time.Millisecond
	}
	walk := newFlipWalk(rng, w)
	for i := 0; ; i++ {
		jitter := time.Duration(rng.Int64N(int64(flipEvery / 2)))
		select {
		case <-tctx.Done():
		case <-time.After(flipEvery/2 + jitter):
		}
		if tctx.Err() != nil {
			break
		}
		var f flags
		switch {
		case m.script != nil && i < len(m.script):
			f = w.publish(m.script[i])
		case m.script != nil:
			continue
		default:
			f = w.publish(walk.next)
		}
		flips = append(flips, f.String())
	}
	callers.Wait()
	stocker.Wait()

	// The end: no faults, flags without a kill switch, every hold expired
	// and reaped, every change delivered.
	w.setFaults(0, 0)
	final := w.publish(func(f *flags) {
		f.global = authority.KillOff
		for p := range f.kill {
			f.kill[p] = authority.KillOff
		}
		for s := range f.shopKill {
			f.shopKill[s] = authority.KillOff
		}
	})
	w.settle()
	var out violations
	expiry := time.Now().Add(maxTTL + w.cfg.claimGrace + time.Second)
	// A hold that never goes is a violation checkNoHolds reports below
	// (with the feed off, a hold Redis kept when MySQL took the shop over
	// at the end is one), not a reason to stop before the other checks.
	if !w.waitUntil(maxTTL+w.cfg.claimGrace+30*time.Second, func() bool {
		if time.Now().Before(expiry) {
			return false
		}
		var v violations
		w.checkNoHolds(&v)
		return len(v) == 0
	}) {
		t.Logf("not every hold expired within %s: checkNoHolds reports them", maxTTL+w.cfg.claimGrace+30*time.Second)
	}
	if !m.noFeed {
		w.drainFeeds(30 * time.Second)
	}
	reads := history.CheckReads(rec.Calls(), history.ReadsOptions{})
	claimRows := w.checkLedger(&out, stats.claims, reads.Acked)
	w.checkNoHolds(&out)
	w.checkAgree(&out)
	res, err := history.Check(rec.Entries(), history.CheckOptions{Dir: history.ArtifactDir(t), Name: "model", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != porcupine.Ok {
		out.add("history: %s", res)
	}
	out = append(out, reads.Violations...)
	if reads.Held == 0 || reads.Claims == 0 {
		// A run whose callers read nothing back would pass the reads
		// check without judging anything.
		out.add("reads: the run held %d GETs to a live hold and %d claims to their reserve: the reads check judged nothing", reads.Held, reads.Claims)
	}
	var injected int64
	for _, p := range w.pods {
		for _, r := range p.replicas {
			injected += r.faults.injected.Load()
		}
	}
	summary := fmt.Sprintf("traffic %s, %d callers: %s; %d faults injected; %d carts compared by the relays (%d failed); handoffs: %s; %d flips (final %s): %s; history %s; reads: %s; ledger: %d claims rows held to their acknowledged reserve",
		m.duration, m.callers, stats, injected, w.evaluated.Load(), w.evalFailed.Load(), w.handoffs(), len(flips), final, strings.Join(flips, " | "), res, reads, claimRows)
	return runResult{violations: out, summary: summary}
}

// maxTTL is the longest hold the callers ask for.
const maxTTL = 3 * time.Second

// restockEvery is how often a new batch of items is stocked.
const restockEvery = 4 * time.Second

// flipWalk chooses flips: first a path that visits every mode and every
// kill switch variant at every scope, with the exits from mysql_only and
// from the kill switches, then random steps.
type flipWalk struct {
	rng   *rand.Rand
	w     *world
	cover []func(*flags)
}

func newFlipWalk(rng *rand.Rand, w *world) *flipWalk {
	a, b := w.pods[0].name, w.pods[len(w.pods)-1].name
	shopB := w.pods[len(w.pods)-1].shops[0]
	set := func(pod string, m authority.Mode) func(*flags) { return func(f *flags) { f.mode[pod] = m } }
	kill := func(pod string, k authority.Kill) func(*flags) { return func(f *flags) { f.kill[pod] = k } }
	return &flipWalk{rng: rng, w: w, cover: []func(*flags){
		set(a, authority.ModeShadow), set(b, authority.ModeShadow),
		set(a, authority.ModeMySQL),
		kill(a, authority.KillRedis), set(b, authority.ModeMySQL), kill(a, authority.KillOff),
		set(a, authority.ModeMySQLOnly),
		kill(a, authority.KillRedisOnly), kill(a, authority.KillOff),
		func(f *flags) { f.global = authority.KillRedis }, func(f *flags) { f.global = authority.KillOff },
		func(f *flags) { f.shopKill[shopB] = authority.KillRedisOnly }, set(b, authority.ModeMySQLOnly),
		func(f *flags) { f.shopKill[shopB] = authority.KillOff },
		set(a, authority.ModeMySQL), set(b, authority.ModeShadow), set(a, authority.ModeRedis),
	}}
}

func (fw *flipWalk) next(f *flags) {
	if len(fw.cover) > 0 {
		fw.cover[0](f)
		fw.cover = fw.cover[1:]
		return
	}
	pods := fw.w.pods
	p := pods[fw.rng.IntN(len(pods))].name
	switch n := fw.rng.IntN(10); {
	case n < 5:
		f.mode[p] = authority.Modes[fw.rng.IntN(len(authority.Modes))]
	case n < 8:
		f.kill[p] = []authority.Kill{authority.KillOff, authority.KillOff, authority.KillRedis, authority.KillRedisOnly}[fw.rng.IntN(4)]
	case n < 9:
		shop := pods[fw.rng.IntN(len(pods))].shops[0]
		f.shopKill[shop] = []authority.Kill{authority.KillOff, authority.KillRedis, authority.KillRedisOnly}[fw.rng.IntN(3)]
	default:
		f.global = []authority.Kill{authority.KillOff, authority.KillOff, authority.KillRedis}[fw.rng.IntN(3)]
	}
}

// trafficStats counts what the callers did and keeps the claims' outcomes.
type trafficStats struct {
	reserved, refused, claimed, released, abandoned, unknown, lateClaims atomic.Int64
	// reservedLater: reserves acknowledged by a repeat after an attempt
	// that got no answer (counted in reserved too).
	reservedLater atomic.Int64
	mu            sync.Mutex
	claims        claimsOutcome
}

func (s *trafficStats) String() string {
	return fmt.Sprintf("%d reserved (%d of them by a repeat after no answer), %d refused, %d claimed, %d released, %d abandoned, %d late or repeated calls, %d calls without an answer",
		s.reserved.Load(), s.reservedLater.Load(), s.refused.Load(), s.claimed.Load(), s.released.Load(), s.abandoned.Load(), s.lateClaims.Load(), s.unknown.Load())
}

func (s *trafficStats) claim(shop int64, token string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := fmt.Sprintf("%d/%s", shop, token)
	switch {
	case err == nil:
		s.claims.acked[id] = true
	case reservation.AnswerName(err) == "":
		s.claims.unknown[id] = true
	}
}

// caller is one checkout client: it reserves carts, reads them back, and
// claims, releases or abandons them, each call sent to a random replica
// of the shop's pod and retried (same token) while its outcome is
// unknown. It is the history.Reservations the recorder wraps.
type caller struct {
	w       *world
	id      int
	rng     *rand.Rand
	stats   *trafficStats
	retried bool
	// via names the replica that answered the last call, and its flags.
	via string
	n   int
}

var (
	_ history.Retrier = (*caller)(nil)
	_ history.Getter  = (*caller)(nil)
	_ history.Router  = (*caller)(nil)
)

func (c *caller) Retried() bool { return c.retried }

func (c *caller) Via() string { return c.via }

// attempts is how often a call is tried before its outcome stays unknown.
const attempts = 6

func (c *caller) try(shop int64, call func(ctx context.Context, f *dualwrite.Facade) error) error {
	p := c.w.podOf(shop)
	c.retried = false
	n := attempts
	if c.rng.IntN(5) == 0 {
		n = 1 + c.rng.IntN(2) // an impatient client gives up early: the outcome stays unknown
	}
	var err error
	for i := range n {
		r := p.replicas[c.rng.IntN(len(p.replicas))]
		// The flags the replica had and the newest: a stale replica's
		// answer says so in a failing check's report.
		c.via = fmt.Sprintf("%s (flags v%d of v%d)", r.name, r.view.version(), c.w.latest())
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err = call(ctx, r.facade)
		cancel()
		if err == nil || reservation.AnswerName(err) != "" {
			c.retried = i > 0
			return err
		}
		time.Sleep(time.Duration(20+c.rng.IntN(80)) * time.Millisecond)
	}
	c.retried = true
	return err
}

func (c *caller) Reserve(_ context.Context, p *reservation.ReserveParams) (res reservation.ReserveResult, err error) {
	err = c.try(p.Shop, func(ctx context.Context, f *dualwrite.Facade) error {
		var e error
		res, e = f.Reserve(ctx, p)
		return e
	})
	return res, err
}

func (c *caller) Claim(_ context.Context, p *reservation.ClaimParams) (res reservation.ClaimResult, err error) {
	err = c.try(p.Shop, func(ctx context.Context, f *dualwrite.Facade) error {
		var e error
		res, e = f.Claim(ctx, p)
		return e
	})
	return res, err
}

func (c *caller) Release(_ context.Context, p *reservation.ReleaseParams) (res reservation.ReleaseResult, err error) {
	err = c.try(p.Shop, func(ctx context.Context, f *dualwrite.Facade) error {
		var e error
		res, e = f.Release(ctx, p)
		return e
	})
	return res, err
}

func (c *caller) Get(_ context.Context, p *reservation.GetParams) (h reservation.Hold, err error) {
	err = c.try(p.Shop, func(ctx context.Context, f *dualwrite.Facade) error {
		var e error
		h, e = f.Get(ctx, p)
		return e
	})
	return h, err
}

// get reads the cart's reservation back, as a buyer's checkout page
// does: the reads check (history.CheckReads) judges the answer.
func (c *caller) get(ctx context.Context, client *history.Client, shop int64, token string) {
	_, _ = client.Get(ctx, &reservation.GetParams{Shop: shop, Token: token})
}

// getAcrossFlip waits for the next flip of the flags (until at the
// latest), then reads the reservation while the replicas take the flip up
// one by one (each within 200 ms of it: the moment their flags disagree),
// and once more a little later. It returns false when ctx ended.
func (c *caller) getAcrossFlip(ctx context.Context, client *history.Client, shop int64, token string, until time.Time) bool {
	select {
	case <-ctx.Done():
		return false
	case <-c.w.nextFlip():
	case <-time.After(time.Until(until)):
	}
	c.get(ctx, client, shop, token)
	if !pause(ctx, time.Duration(50+c.rng.IntN(200))*time.Millisecond) {
		return false
	}
	c.get(ctx, client, shop, token)
	return true
}

// pause waits d (a buyer's pace, not a synchronisation); false when ctx
// ended first.
func pause(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// run makes carts until ctx ends.
func (c *caller) run(ctx context.Context, client *history.Client) {
	for ctx.Err() == nil {
		c.cart(ctx, client)
	}
}

func (c *caller) cart(ctx context.Context, client *history.Client) {
	w := c.w
	p := w.pods[c.rng.IntN(len(w.pods))]
	// A pod's last shop is quiet: one cart in 16 (the others share the
	// rest). Its fence moves only when one of its rare calls hands it off,
	// so after a flip its replicas' flags and its fence disagree for a
	// while, as they do for most shops of a real pod: what a read of it
	// meets then is what the busy shops, handed off within milliseconds
	// of a flip, seldom show.
	shop := p.shops[c.rng.IntN(len(p.shops)-1)]
	if c.rng.IntN(16) == 0 {
		shop = p.shops[len(p.shops)-1]
	}
	// One cart in 8 starts as the flags flip: its reserve may be the call
	// that hands the shop off, and its reads race the replicas taking the
	// flip up (each within 200 ms of it).
	atFlip := c.rng.IntN(8) == 0
	if atFlip {
		select {
		case <-ctx.Done():
			return
		case <-c.w.nextFlip():
		case <-time.After(1500 * time.Millisecond):
		}
	}
	c.n++
	token := fmt.Sprintf("c%d-%d", c.id, c.n)
	var lines []reservation.Line
	nlines := 1
	if c.rng.IntN(3) == 0 {
		nlines = 2
	}
	first, last := w.items()
	for _, item := range c.rng.Perm(int(last - first + 1))[:nlines] {
		locs := c.rng.Perm(w.cfg.locations)[:1+c.rng.IntN(w.cfg.locations)]
		ln := reservation.Line{Item: first + int64(item), Quantity: 1 + int64(c.rng.IntN(2))}
		for _, l := range locs {
			ln.Locations = append(ln.Locations, int64(l+1))
		}
		lines = append(lines, ln)
	}
	ttl := 1200*time.Millisecond + time.Duration(c.rng.Int64N(int64(maxTTL-1200*time.Millisecond)))
	rp := &reservation.ReserveParams{Shop: shop, Token: token, Lines: lines, TTL: ttl}
	res, err := client.Reserve(ctx, rp)
	later := false
	if err != nil && reservation.AnswerName(err) == "" {
		c.stats.unknown.Add(1)
		// Half the buyers whose reserve got no answer ask again, same
		// token: the answer (the first decision, replayed, or a new one
		// if the first attempt did nothing) acknowledges the reservation
		// or not, and the cart goes on from it.
		if c.rng.IntN(2) == 0 || !pause(ctx, time.Duration(50+c.rng.IntN(200))*time.Millisecond) {
			return
		}
		res, err = client.Reserve(ctx, rp)
		later = true
	}
	switch {
	case err != nil && reservation.AnswerName(err) == "":
		c.stats.unknown.Add(1)
		return
	case err != nil:
		return
	case res.Status != reservation.StatusReserved:
		c.stats.refused.Add(1)
		if c.rng.IntN(10) == 0 { // a delayed repeat of the refused cart
			c.stats.lateClaims.Add(1)
			_, _ = client.Reserve(ctx, rp)
		}
		// A buyer told "sold out" does not come back at once.
		time.Sleep(time.Duration(50+c.rng.IntN(200)) * time.Millisecond)
		return
	}
	c.stats.reserved.Add(1)
	if later {
		c.stats.reservedLater.Add(1)
	}
	// The checkout page reads the reservation back, often at once: right
	// after the decision, where a store that only follows has not caught
	// up yet. A cart started at a flip reads it a few times while the
	// replicas take the flip up.
	gets := c.rng.IntN(3)
	if atFlip {
		gets = 2 + c.rng.IntN(3)
	}
	for i := range gets {
		if i > 0 && atFlip && !pause(ctx, time.Duration(20+c.rng.IntN(60))*time.Millisecond) {
			return
		}
		c.get(ctx, client, shop, token)
	}
	// Paying takes a while; now and then longer than the hold. Meanwhile
	// the page may read the reservation again, or read it across the next
	// flip (while it has a second left, so the read is judged).
	wait := time.Duration(c.rng.Int64N(int64(ttl / 2)))
	if c.rng.IntN(8) == 0 {
		wait = ttl/2 + time.Duration(c.rng.Int64N(int64(ttl*3/4)))
	}
	switch c.rng.IntN(6) {
	case 0:
		if !c.getAcrossFlip(ctx, client, shop, token, res.ExpiresAt.Add(-time.Second)) {
			return
		}
	case 1, 2:
		if !pause(ctx, wait/2) {
			return
		}
		c.get(ctx, client, shop, token)
		wait -= wait / 2
	}
	if !pause(ctx, wait) {
		return
	}
	if c.rng.IntN(20) == 0 { // a repeated reserve: the hold, replayed
		c.stats.lateClaims.Add(1)
		_, _ = client.Reserve(ctx, rp)
	}
	switch n := c.rng.IntN(100); {
	case n < 60:
		_, err := client.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token})
		c.stats.claim(shop, token, err)
		if err == nil {
			c.stats.claimed.Add(1)
		} else if reservation.AnswerName(err) == "" {
			c.stats.unknown.Add(1)
		}
		if err == nil { // the order page reads it back: claimed
			switch c.rng.IntN(6) {
			case 0, 1:
				c.get(ctx, client, shop, token)
			case 2:
				if !c.getAcrossFlip(ctx, client, shop, token, time.Now().Add(1500*time.Millisecond)) {
					return
				}
			}
		}
		if c.rng.IntN(10) == 0 { // release after claim: already claimed
			c.stats.lateClaims.Add(1)
			_, _ = client.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: token})
		}
	case n < 85:
		res, err := client.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: token})
		if err == nil && res.Released {
			c.stats.released.Add(1)
		} else if err != nil && reservation.AnswerName(err) == "" {
			c.stats.unknown.Add(1)
		}
		if c.rng.IntN(4) == 0 { // read back after the release: its tombstone, never not found
			c.get(ctx, client, shop, token)
		}
		if c.rng.IntN(5) == 0 { // a claim after the release: never succeeds
			c.stats.lateClaims.Add(1)
			_, err := client.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token})
			c.stats.claim(shop, token, err)
		}
	default:
		c.stats.abandoned.Add(1)
		if c.rng.IntN(3) == 0 { // a late claim of the abandoned cart
			if !pause(ctx, ttl) {
				return
			}
			if c.rng.IntN(2) == 0 { // read first: expired (or held still), never not found
				c.get(ctx, client, shop, token)
			}
			c.stats.lateClaims.Add(1)
			_, err := client.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token})
			c.stats.claim(shop, token, err)
		}
	}
}
