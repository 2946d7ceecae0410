package dualwrite_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// The tests of issue 24: reads follow the decider, and an acknowledged
// allocation never changes. Whatever the facade answers about a token
// (Get, Availability, Claim, the ledger's deduction) must agree with the
// reserve it acknowledged: the same allocations, the same expiry. They do
// not say which store must answer: a handoff may be under way, and either
// store may serve the call, as long as the answer is the acknowledged one.
//
// Every shop here is arranged so that a fresh decision would allocate
// differently from the acknowledged one: item 1 has 2 units at location 1
// and 10 at location 2; while the token was reserved a filler held one of
// location 1's units, so the cart (2 units, location 1 preferred, then 2)
// was served from location 2; the filler is released (or, in the race,
// unknown to MySQL), so location 1 could now serve the cart. A store that
// decided the token again, or a shadow hold of its own, answers location
// 1: only a copy of the decider's hold answers location 2.

const (
	readItem = 1
	// readToken is the token whose reservation is acknowledged.
	readToken = "held"
)

// readCart is 2 units of the item, location 1 preferred, then 2.
func readCart() []reservation.Line {
	return []reservation.Line{{Item: readItem, Quantity: 2, Locations: []int64{1, 2}}}
}

// readAllocation is where the arrangement above serves the cart.
var readAllocation = []reservation.Allocation{{Item: readItem, Location: 2, Quantity: 2}}

// arrangeReadStock stocks the item (2 at location 1, 10 at location 2),
// holds 1 unit at location 1 for "filler", reserves readToken (served from
// location 2) and, when releaseFiller, releases the filler again, all
// through the facade in its current mode. It returns the acknowledged
// reserve.
func arrangeReadStock(t *testing.T, b *bundle, releaseFiller bool) reservation.ReserveResult {
	t.Helper()
	b.stock(t, readItem, 1, 2)
	b.stock(t, readItem, 2, 10)
	b.mustReserve(t, "filler", []reservation.Line{{Item: readItem, Quantity: 1, Locations: []int64{1}}})
	ack := b.mustReserve(t, readToken, readCart())
	if !slices.Equal(ack.Allocations, readAllocation) {
		t.Fatalf("precondition: the cart was served from %v, want %v (location 1 short by the filler)", ack.Allocations, readAllocation)
	}
	if releaseFiller {
		if r, err := b.f.Release(context.Background(), &reservation.ReleaseParams{Shop: shop, Token: "filler"}); err != nil || !r.Released {
			t.Fatalf("release the filler: %+v %v", r, err)
		}
	}
	b.drain(t)
	return ack
}

// quietAfterRedisToMySQL is a shop Redis decided (mode redis, no fence):
// the token reserved and acknowledged by Redis, then the flags moved
// through shadow to mysql, one version each, and no write since. MySQL
// never saw the hold (redis mode writes no MySQL reservation), and
// nothing has handed the shop off yet: that happens on the next call.
func quietAfterRedisToMySQL(t *testing.T) (*bundle, reservation.ReserveResult) {
	t.Helper()
	b := setup(t, options{mode: authority.ModeRedis})
	ack := arrangeReadStock(t, b, true)
	if _, err := b.my.Get(context.Background(), &reservation.GetParams{Shop: shop, Token: readToken}); !errors.Is(err, reservation.ErrNotFound) {
		t.Fatalf("precondition: MySQL must not know a reservation made in redis mode: %v", err)
	}
	_ = b.modes.SetMode(authority.ModeShadow)
	_ = b.modes.SetMode(authority.ModeMySQL)
	return b, ack
}

// quietAfterMySQLToRedis is a shop MySQL decided (mode mysql): the token
// reserved and acknowledged by MySQL, then the kill switch engaged (a new
// version of the flags), and no write since.
//
// The relay is not running (the mirror's Run is never started): the relay
// is asynchronous, and its lag is a condition production lives with (it
// is measured and shown next to the kill switch, docs/ownership.md section
// 4); here it lags for the whole test, so Redis's copy of the shop is what
// it was before MySQL's decisions. Nothing else is switched off: the
// mirror is not Disabled, so a handoff to Redis drains the feed as in
// production.
func quietAfterMySQLToRedis(t *testing.T) (*bundle, reservation.ReserveResult) {
	t.Helper()
	b := setup(t, options{mode: authority.ModeMySQL, noRelay: true})
	ack := arrangeReadStock(t, b, true)
	if ack.Authority != reservation.AuthorityMySQL {
		t.Fatalf("precondition: the reserve was decided by %s, want mysql", ack.Authority)
	}
	if _, err := b.rd.Get(context.Background(), &reservation.GetParams{Shop: shop, Token: readToken}); !errors.Is(err, reservation.ErrNotFound) {
		t.Fatalf("precondition: with the relay lagging Redis must not have MySQL's hold yet: %v", err)
	}
	_ = b.modes.SetKill(authority.KillRedis)
	return b, ack
}

// holdProblem says how a Get's answer disagrees with the acknowledged
// reserve ack ("" when it agrees). claimedOK accepts ErrAlreadyClaimed:
// the Get may run after a claim of the token took effect.
func holdProblem(h reservation.Hold, err error, ack reservation.ReserveResult, claimedOK bool) string {
	switch {
	case claimedOK && errors.Is(err, reservation.ErrAlreadyClaimed):
		return ""
	case err != nil:
		return fmt.Sprintf("get answered %v (%s), want the acknowledged hold %v expiring %s",
			err, reservation.AnswerName(err), ack.Allocations, ack.ExpiresAt.UTC().Format(time.RFC3339Nano))
	case h.Token != readToken || h.Shop != shop || !slices.Equal(h.Allocations, ack.Allocations) || !h.ExpiresAt.Equal(ack.ExpiresAt):
		return fmt.Sprintf("get answered the hold %v expiring %s (authority %s), want the acknowledged %v expiring %s",
			h.Allocations, h.ExpiresAt.UTC().Format(time.RFC3339Nano), h.Authority,
			ack.Allocations, ack.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	return ""
}

// checkQuietReads runs the three checks of a quiet shop, each on a fresh
// shop of its own: a claim (or the handoff one read triggers) would fix
// the others.
func checkQuietReads(t *testing.T, quiet func(*testing.T) (*bundle, reservation.ReserveResult)) {
	ctx := context.Background()
	t.Run("get", func(t *testing.T) {
		t.Parallel()
		b, ack := quiet(t)
		h, err := b.f.Get(ctx, &reservation.GetParams{Shop: shop, Token: readToken})
		if p := holdProblem(h, err, ack, false); p != "" {
			t.Error(p)
		}
	})
	t.Run("availability", func(t *testing.T) {
		t.Parallel()
		b, _ := quiet(t)
		a, err := b.f.Availability(ctx, &reservation.AvailabilityParams{Shop: shop, Item: readItem})
		if err != nil {
			t.Fatalf("availability: %v", err)
		}
		if a.At(1) != 2 || a.At(2) != 8 {
			t.Errorf("availability %+v: unheld %d at location 1, %d at location 2; want 2 and 8 (10 - the 2 acknowledged)", a.Locations, a.At(1), a.At(2))
		}
	})
	t.Run("claim", func(t *testing.T) {
		t.Parallel()
		b, ack := quiet(t)
		c, err := b.claim(ctx, readToken)
		if err != nil || c.Outcome != reservation.OutcomeClaimed || c.Replayed || !slices.Equal(c.Allocations, ack.Allocations) {
			t.Errorf("claim: %+v %v; want claimed now, %v (the acknowledged allocations)", c, err, ack.Allocations)
		}
		if l1, l2 := b.ledger(t, readItem, 1), b.ledger(t, readItem, 2); l1 != 2 || l2 != 8 {
			t.Errorf("ledger after the claim: %d at location 1, %d at location 2; want 2 and 8 (the acknowledged allocation deducted once)", l1, l2)
		}
		h, err := b.f.Get(ctx, &reservation.GetParams{Shop: shop, Token: readToken})
		if !errors.Is(err, reservation.ErrAlreadyClaimed) {
			t.Errorf("get after the claim: %+v %v, want already claimed", h, err)
		}
	})
}

// A shop Redis decided, quiet since the flags moved through shadow to
// mysql: before any write, the facade's Get answers Redis's acknowledged
// hold (allocations and expiry), Availability counts it as held, and a
// claim deducts exactly its allocations.
func TestQuietShopAfterRedisToMySQLReadsTheAcknowledgedHold(t *testing.T) {
	t.Parallel()
	checkQuietReads(t, quietAfterRedisToMySQL)
}

// A shop MySQL decided, quiet since the kill switch gave it back to
// Redis, with the relay lagging: before any write, the facade's Get
// answers MySQL's acknowledged hold, Availability counts it as held, and a
// claim deducts exactly its allocations.
func TestQuietShopAfterMySQLToRedisReadsTheAcknowledgedHold(t *testing.T) {
	t.Parallel()
	checkQuietReads(t, quietAfterMySQLToRedis)
}

// gate holds the first call it is given until the test opens it. entered
// is closed when that call arrives, returned when the wrapped call
// returned (after the gate opened).
type gate struct {
	once     sync.Once
	opened   sync.Once
	entered  chan struct{}
	open     chan struct{}
	returned chan struct{}
	mu       sync.Mutex
	err      error
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}), open: make(chan struct{}), returned: make(chan struct{})}
}

// hold runs call: the first time behind the gate, later at once.
func (g *gate) hold(call func() error) error {
	first := false
	g.once.Do(func() { first = true })
	if !first {
		return call()
	}
	close(g.entered)
	<-g.open
	err := call()
	g.mu.Lock()
	g.err = err
	g.mu.Unlock()
	close(g.returned)
	return err
}

// release opens the gate (once).
func (g *gate) release() { g.opened.Do(func() { close(g.open) }) }

func (g *gate) result() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// gatedMySQL is the MySQL store the facade calls, with the token's shadow
// reserve held by shadow (a slow shadow write: it is in flight) and the
// token's deciding claim held by claim (a claim whose request to MySQL is
// slow: it has not reached the store yet). Every other call passes.
type gatedMySQL struct {
	reservation.Store
	token         string
	shadow, claim *gate
}

func (g gatedMySQL) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	if p.Token != g.token || p.As != reservation.AsShadow {
		return g.Store.Reserve(ctx, p)
	}
	var res reservation.ReserveResult
	err := g.shadow.hold(func() error {
		var e error
		res, e = g.Store.Reserve(ctx, p)
		return e
	})
	return res, err
}

func (g gatedMySQL) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	if p.Token != g.token || p.As != reservation.AsAuthority {
		return g.Store.Claim(ctx, p)
	}
	var res reservation.ClaimResult
	err := g.claim.hold(func() error {
		var e error
		res, e = g.Store.Claim(ctx, p)
		return e
	})
	return res, err
}

// await waits for ch, failing the test after 15s: a call that should not
// wait for a blocked one did.
func await(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: still not after 15s", what)
	}
}

// A Get and a claim race the release of the kill switch while the shadow
// reserve of the same token is still in flight, and every answer is the
// hold Redis acknowledged: Get answers its allocations and expiry (never
// 404, never MySQL's own shadow hold, which sits at another location and
// expires later), Availability counts it, and the claim deducts exactly
// it.
//
// The shop: mode mysql with the kill switch redis engaged before the shop
// saw a call in mysql mode, so Redis decides and MySQL gets shadow
// writes. The filler was reserved while the mode was still redis, so
// MySQL never saw it: Redis serves the token from location 2, MySQL's
// shadow would serve it from location 1.
//
// What is held, and why that is fair: the token's shadow reserve in MySQL
// (shadow writes run beside the caller and may take long: it is in
// flight), and the claim's request to MySQL, before it reaches the store
// (a slow network call: the claim is in flight, it has handed nothing off
// and holds no lock). Neither gate is on the path of a Get, which must
// not wait for either: a Get that blocks fails the test after 15s. The
// gates only fix the order of events that the race allows anyway: Get
// while the shadow is in flight, then Get after the shadow wrote its own
// hold, then the claim.
func TestGetAndClaimRacingKillSwitchReleaseAnswerTheAcknowledgedHold(t *testing.T) {
	t.Parallel()
	shadowGate, claimGate := newGate(), newGate()
	b := setup(t, options{mode: authority.ModeRedis, shadowTimeout: 15 * time.Second,
		wrapMySQL: func(s reservation.Store) reservation.Store {
			return gatedMySQL{Store: s, token: readToken, shadow: shadowGate, claim: claimGate}
		}})
	// A test that fails early must not leave the held calls blocked
	// (this runs before the bundle's cleanup waits for shadow calls).
	t.Cleanup(func() { shadowGate.release(); claimGate.release() })
	ctx := context.Background()
	b.stock(t, readItem, 1, 2)
	b.stock(t, readItem, 2, 10)
	b.mustReserve(t, "filler", []reservation.Line{{Item: readItem, Quantity: 1, Locations: []int64{1}}})
	_ = b.modes.SetKill(authority.KillRedis)
	_ = b.modes.SetMode(authority.ModeMySQL)

	ack := b.mustReserve(t, readToken, readCart())
	if ack.Authority != reservation.AuthorityRedis || !slices.Equal(ack.Allocations, readAllocation) {
		t.Fatalf("precondition: reserve under the kill switch %+v; want decided by redis from %v", ack, readAllocation)
	}
	await(t, "the shadow reserve reaches MySQL", shadowGate.entered)

	_ = b.modes.SetKill(authority.KillOff) // a new version: mysql decides, from the next call on
	type claimed struct {
		res reservation.ClaimResult
		err error
	}
	claimDone := make(chan claimed, 1)
	go func() {
		c, err := b.claim(ctx, readToken)
		claimDone <- claimed{c, err}
	}()
	// The claim is in flight: held on its way to MySQL, or (a facade that
	// serves it elsewhere) already answered.
	var claim *claimed
	select {
	case <-claimGate.entered:
	case c := <-claimDone:
		claim = &c
	case <-time.After(15 * time.Second):
		t.Fatal("the claim neither reached MySQL nor returned after 15s")
	}

	var problems []string
	// read asks Get, then Availability; neither may wait for the held
	// shadow reserve or claim.
	read := func(when string) {
		var h reservation.Hold
		var a reservation.AvailabilityResult
		var herr, aerr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			h, herr = b.f.Get(ctx, &reservation.GetParams{Shop: shop, Token: readToken})
			a, aerr = b.f.Availability(ctx, &reservation.AvailabilityParams{Shop: shop, Item: readItem})
		}()
		await(t, "get and availability "+when, done)
		if p := holdProblem(h, herr, ack, true); p != "" {
			problems = append(problems, when+": "+p)
		}
		switch {
		case aerr != nil:
			problems = append(problems, fmt.Sprintf("%s: availability: %v", when, aerr))
		case a.At(1) != 1 || a.At(2) != 8:
			problems = append(problems, fmt.Sprintf("%s: availability %+v; want 1 unheld at location 1 (the filler holds 1), 8 at location 2 (the token holds 2)", when, a.Locations))
		}
	}
	read("the shadow reserve in flight")
	shadowGate.release()
	await(t, "the shadow reserve returns", shadowGate.returned)
	t.Logf("the shadow reserve answered %v", shadowGate.result())
	read("the shadow reserve done")

	claimGate.release()
	if claim == nil {
		select {
		case c := <-claimDone:
			claim = &c
		case <-time.After(15 * time.Second):
			t.Fatal("the claim did not return 15s after it reached MySQL")
		}
	}
	if claim.err != nil || claim.res.Outcome != reservation.OutcomeClaimed || claim.res.Replayed || !slices.Equal(claim.res.Allocations, ack.Allocations) {
		problems = append(problems, fmt.Sprintf("claim: %+v %v; want claimed now, %v (the acknowledged allocations)", claim.res, claim.err, ack.Allocations))
	}
	if l1, l2 := b.ledger(t, readItem, 1), b.ledger(t, readItem, 2); l1 != 2 || l2 != 8 {
		problems = append(problems, fmt.Sprintf("ledger after the claim: %d at location 1, %d at location 2; want 2 and 8 (the acknowledged allocation deducted once)", l1, l2))
	}
	if h, err := b.f.Get(ctx, &reservation.GetParams{Shop: shop, Token: readToken}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
		problems = append(problems, fmt.Sprintf("get after the claim: %+v %v, want already claimed", h, err))
	}
	for _, p := range problems {
		t.Error(p)
	}
}
