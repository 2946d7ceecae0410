package dualwrite_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// The tests of routing by fences: handoffs (docs/ownership.md, section 3),
// following a newer fence, and the relay that keeps Redis following MySQL.

// A flip redis -> shadow -> mysql hands the shop to MySQL on the first
// call after it, and only then: Redis's holds become MySQL's (a
// reservation made while only Redis was written is claimed by MySQL,
// deducted once), MySQL's shadow holds are replaced by Redis's, and Redis
// follows MySQL from then on.
func TestFlipHandsTheShopToMySQLOnTheFirstCall(t *testing.T) {
	t.Parallel()
	b := setup(t, options{mode: authority.ModeRedis})
	b.stock(t, 1, 1, 10)
	b.mustReserve(t, "redis-only", line(1, 3))
	if _, err := b.my.Get(context.Background(), &reservation.GetParams{Shop: shop, Token: "redis-only"}); !errors.Is(err, reservation.ErrNotFound) {
		t.Fatalf("precondition: MySQL must not know a reservation made in redis mode: %v", err)
	}
	_ = b.modes.SetMode(authority.ModeShadow)
	b.mustReserve(t, "shadowed", line(1, 2))
	b.drain(t)
	if my, rd := b.fences(t); my != reservation.NoFence || rd != reservation.NoFence {
		t.Fatalf("fences before the flip to mysql: MySQL %s, Redis %s; want %s (Redis decides, nothing handed off)", my, rd, reservation.NoFence)
	}

	_ = b.modes.SetMode(authority.ModeMySQL)
	epoch := b.modes.Version()
	c, err := b.claim(context.Background(), "redis-only")
	if err != nil || c.Outcome != reservation.OutcomeClaimed || c.Replayed || fmt.Sprint(c.Allocations) != "[{1 1 3}]" {
		t.Fatalf("first claim after the flip: %+v %v; want claimed [{1 1 3}]", c, err)
	}
	want := reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: epoch}
	if my, rd := b.fences(t); my != want || rd != want {
		t.Errorf("fences after the first call: MySQL %s, Redis %s; want both %s", my, rd, want)
	}
	if n := b.counter(t, "reservoir_dualwrite_rerouted_total", map[string]string{"action": "handed_off"}); n != 1 {
		t.Errorf("handed off %v times, want once (the first call)", n)
	}
	again, err := b.claim(context.Background(), "redis-only")
	if err != nil || !again.Replayed {
		t.Errorf("claim repeated: %+v %v, want replayed", again, err)
	}
	if c, err := b.claim(context.Background(), "shadowed"); err != nil || c.Replayed {
		t.Errorf("claim of the reservation made in shadow mode: %+v %v", c, err)
	}
	res := b.mustReserve(t, "after", line(1, 1))
	if res.Authority != reservation.AuthorityMySQL {
		t.Errorf("reserve after the flip decided by %s, want mysql", res.Authority)
	}
	if n := b.counter(t, "reservoir_dualwrite_rerouted_total", nil); n != 1 {
		t.Errorf("%v calls rerouted, want only the first one after the flip", n)
	}
	if l := b.ledger(t, 1, 1); l != 5 {
		t.Errorf("ledger %d, want 10 - 3 - 2: each claim deducted once", l)
	}
	if n := b.db.Count(t, "reservation_claims"); n != 2 {
		t.Errorf("%d claim rows, want 2", n)
	}
	// Redis follows MySQL: the claims' tombstones and the new hold arrive
	// through the relay.
	waitFor(t, "Redis follows MySQL", func() (bool, string) {
		_, e1 := b.rd.Get(context.Background(), &reservation.GetParams{Shop: shop, Token: "redis-only"})
		h, e2 := b.rd.Get(context.Background(), &reservation.GetParams{Shop: shop, Token: "after"})
		u := b.unheld(t, b.rd, 1, 1)
		return errors.Is(e1, reservation.ErrAlreadyClaimed) && e2 == nil && h.Quantity() == 1 && u == 4,
			fmt.Sprintf("redis-only: %v; after: %+v %v; unheld %d (want 5 - 1 held)", e1, h, e2, u)
	})
}

// A stale replica (one that has not seen the newest flags) follows the
// newer fence instead of handing the shop back, in both directions, and
// counts it.
func TestStaleReplicaFollowsTheNewerFence(t *testing.T) {
	t.Parallel()
	b := setup(t, options{mode: authority.ModeRedis}) // b.f is the stale replica: redis, version 1
	b.stock(t, 1, 1, 100)
	newer := authority.NewStatic(authority.ModeRedis)
	_ = newer.SetMode(authority.ModeMySQL) // version 2
	fresh, freshReg := b.replica(t, newer)
	ctx := context.Background()
	if res, err := fresh.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "fresh", Lines: line(1, 1), TTL: time.Minute}); err != nil || res.Authority != reservation.AuthorityMySQL {
		t.Fatalf("reserve on the replica with the newer flags: %+v %v", res, err)
	}
	atMySQL := reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: 2}

	res := b.mustReserve(t, "stale", line(1, 2))
	if res.Authority != reservation.AuthorityMySQL {
		t.Errorf("the stale replica's reserve was decided by %s, want mysql (the fence's)", res.Authority)
	}
	if c, err := b.claim(ctx, "stale"); err != nil || c.Replayed {
		t.Errorf("claim on the stale replica: %+v %v", c, err)
	}
	if my, rd := b.fences(t); my != atMySQL || rd != atMySQL {
		t.Errorf("fences after the stale replica's calls: MySQL %s, Redis %s; want both %s: it handed the shop back", my, rd, atMySQL)
	}
	if n := b.counter(t, "reservoir_dualwrite_rerouted_total", map[string]string{"action": "followed"}); n < 2 {
		t.Errorf("the stale replica counted %v follows, want one per call (2)", n)
	}
	if n := b.counter(t, "reservoir_dualwrite_rerouted_total", map[string]string{"action": "handed_off"}); n != 0 {
		t.Errorf("the stale replica handed off %v times", n)
	}

	// The other way: the newer flags engage the kill switch (version 3);
	// a replica still at version 2 (mysql) follows Redis.
	_ = newer.SetKill(authority.KillRedis)
	if res, err := fresh.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "killed", Lines: line(1, 1), TTL: time.Minute}); err != nil || res.Authority != reservation.AuthorityRedis {
		t.Fatalf("reserve on the replica that saw the kill switch: %+v %v", res, err)
	}
	if n := counter(t, freshReg, "reservoir_dualwrite_rerouted_total", map[string]string{"action": "handed_off"}); n != 2 {
		t.Errorf("the fresh replica handed off %v times, want 2 (to MySQL, back to Redis)", n)
	}
	behind := authority.NewStatic(authority.ModeRedis)
	_ = behind.SetMode(authority.ModeMySQL) // version 2: mysql, no kill switch
	stale, staleReg := b.replica(t, behind)
	res, err := stale.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "behind", Lines: line(1, 1), TTL: time.Minute})
	if err != nil || res.Authority != reservation.AuthorityRedis {
		t.Errorf("reserve on a replica that has not seen the kill switch: %+v %v, want decided by redis", res, err)
	}
	atRedis := reservation.Fence{Decider: reservation.AuthorityRedis, Epoch: 3}
	if my, rd := b.fences(t); my != atRedis || rd != atRedis {
		t.Errorf("fences: MySQL %s, Redis %s; want both %s", my, rd, atRedis)
	}
	if n := counter(t, staleReg, "reservoir_dualwrite_rerouted_total", map[string]string{"action": "followed"}); n != 1 {
		t.Errorf("the replica behind counted %v follows, want 1", n)
	}
}

// Two replicas whose flags disagree (one at mysql, version 2, one with the
// kill switch, version 3) serve the same shop at once: the shop moves at
// most once per epoch (to MySQL at 2 if that replica came first, to Redis
// at 3), never back and forth; every call is answered by a decider; every
// acknowledged reservation is claimed once.
func TestReplicasThatDisagreeMoveTheShopOncePerEpoch(t *testing.T) {
	t.Parallel()
	b := setup(t, options{mode: authority.ModeRedis})
	b.stock(t, 1, 1, 10_000)
	atMySQL := authority.NewStatic(authority.ModeRedis)
	_ = atMySQL.SetMode(authority.ModeMySQL)
	killed := authority.NewStatic(authority.ModeRedis)
	_ = killed.SetMode(authority.ModeMySQL)
	_ = killed.SetKill(authority.KillRedis)
	a, _ := b.replica(t, atMySQL)
	k, _ := b.replica(t, killed)
	var deducted atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		f := []*dualwrite.Facade{a, k}[w%2]
		wg.Go(func() {
			for i := range 15 {
				token := tok("pp", w, "-", i)
				res, err := f.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: token, Lines: line(1, 1), TTL: time.Minute})
				if err != nil || res.Status != reservation.StatusReserved {
					t.Errorf("reserve %s: %+v %v", token, res, err)
					continue
				}
				c, err := f.Claim(context.Background(), &reservation.ClaimParams{Shop: shop, Token: token})
				if err != nil || c.Replayed {
					t.Errorf("claim %s: %+v %v", token, c, err)
					continue
				}
				deducted.Add(reservation.TotalQuantity(c.Allocations))
			}
		})
	}
	wg.Wait()
	done := b.counter(t, "reservoir_handoffs_total", map[string]string{"result": "done"})
	t.Logf("handoffs done: %v; to mysql %v, to redis %v", done,
		b.counter(t, "reservoir_handoffs_total", map[string]string{"to": "mysql", "result": "done"}),
		b.counter(t, "reservoir_handoffs_total", map[string]string{"to": "redis", "result": "done"}))
	// A handoff that starts just after an identical one finished (its
	// caller saw the old fence before) finds the fence moved and changes
	// nothing, yet reports done; what must not repeat is a move.
	moved := b.counter(t, "reservoir_mysql_handoffs_total", map[string]string{"result": "changed"})
	t.Logf("fence moves in MySQL: %v", moved)
	if moved > 2 {
		t.Errorf("the fence moved %v times for two versions of the flags (%v handoffs done): the shop ping-ponged", moved, done)
	}
	if moved < 1 {
		t.Errorf("the fence never moved (%v handoffs done); want at least the kill switch's move to Redis", done)
	}
	atRedis := reservation.Fence{Decider: reservation.AuthorityRedis, Epoch: 3}
	if my, rd := b.fences(t); my != atRedis || rd != atRedis {
		t.Errorf("fences: MySQL %s, Redis %s; want both %s (the newest flags)", my, rd, atRedis)
	}
	if l := b.ledger(t, 1, 1); l != 10_000-deducted.Load() {
		t.Errorf("ledger %d, want 10000 - %d claimed", l, deducted.Load())
	}
	if n := b.db.Count(t, "reservation_claims"); n != 8*15 {
		t.Errorf("%d claim rows, want %d", n, 8*15)
	}
}

// However the stores answer, one call is sent on at most a bounded number
// of times: two stores that keep naming each other (each refusal a newer
// fence, so the facade follows every time) get ErrDeciderUnreachable, not
// a loop.
func TestStoresNamingEachOtherAreNotFollowedForever(t *testing.T) {
	t.Parallel()
	var epoch, calls atomic.Int64
	refuse := func(self reservation.Authority) *reservation.NotDeciderError {
		calls.Add(1)
		other := reservation.AuthorityMySQL
		if self == reservation.AuthorityMySQL {
			other = reservation.AuthorityRedis
		}
		return &reservation.NotDeciderError{Shop: shop, Store: self, Fence: reservation.Fence{Decider: other, Epoch: 100 + epoch.Add(1)}}
	}
	reg := prometheus.NewRegistry()
	m := &mirrorSpy{}
	f, err := dualwrite.New(dualwrite.Config{Pod: pod, Modes: authority.NewStatic(authority.ModeMySQLOnly), Mirror: m, Registerer: reg, Logger: testLogger(t),
		Redis: pingPong{reservation.AuthorityRedis, refuse}, MySQL: pingPong{reservation.AuthorityMySQL, refuse}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: "t", Lines: line(1, 1), TTL: time.Minute})
	if !errors.Is(err, dualwrite.ErrDeciderUnreachable) {
		t.Errorf("reserve: %v, want ErrDeciderUnreachable", err)
	}
	if n := calls.Load(); n < 2 || n > 6 {
		t.Errorf("the stores were asked %d times, want a small bound (at most 6)", n)
	}
	if n := m.handoffs.Load(); n != 0 {
		t.Errorf("%d handoffs: every fence was newer than the flags", n)
	}
	if n := counter(t, reg, "reservoir_dualwrite_owner_unreachable_total", map[string]string{"reason": "hops"}); n != 1 {
		t.Errorf("unreachable{reason=hops} = %v, want 1", n)
	}
	drain(t, f)
}

// pingPong is a store that never decides: every reserve is refused with
// the fence refuse returns.
type pingPong struct {
	name   reservation.Authority
	refuse func(self reservation.Authority) *reservation.NotDeciderError
}

func (p pingPong) Name() reservation.Authority { return p.name }
func (p pingPong) Reserve(context.Context, *reservation.ReserveParams) (reservation.ReserveResult, error) {
	return reservation.ReserveResult{}, p.refuse(p.name)
}
func (p pingPong) Claim(context.Context, *reservation.ClaimParams) (reservation.ClaimResult, error) {
	return reservation.ClaimResult{}, p.refuse(p.name)
}
func (p pingPong) Release(context.Context, *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	return reservation.ReleaseResult{}, p.refuse(p.name)
}
func (p pingPong) Get(context.Context, *reservation.GetParams) (reservation.Hold, error) {
	return reservation.Hold{}, reservation.ErrNotFound
}
func (p pingPong) Adjust(context.Context, *reservation.AdjustParams) (reservation.AdjustResult, error) {
	return reservation.AdjustResult{}, nil
}
func (p pingPong) Availability(context.Context, *reservation.AvailabilityParams) (reservation.AvailabilityResult, error) {
	return reservation.AvailabilityResult{}, nil
}
func (p pingPong) Reap(context.Context, *reservation.ReapParams) (reservation.ReapResult, error) {
	return reservation.ReapResult{}, nil
}

// A handoff that does not finish (the store to yield cannot be reached)
// answers ErrDeciderUnreachable, a "retry" and never a domain answer, and
// changes nothing: no fence moved, nothing held, the ledger untouched.
func TestFailedHandoffChangesNothing(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"closed client", "dead address"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{mode: authority.ModeMySQL, noRelay: true, mirror: func(c *mirror.Config) {
				c.Redis = unreachableRedis(t, how, c.MySQL.(*mysqlstore.Store))
			}})
			b.stock(t, 1, 1, 10)
			ctx := context.Background()
			res, err := b.reserve(ctx, "t", time.Minute, line(1, 2))
			if !errors.Is(err, dualwrite.ErrDeciderUnreachable) || res.Status != "" {
				t.Fatalf("reserve with a handoff that cannot finish: %+v %v, want ErrDeciderUnreachable and no result", res, err)
			}
			if name := reservation.AnswerName(err); name != "" {
				t.Errorf("the error is the domain answer %q: it must mean 'unknown, retry'", name)
			}
			if _, err := b.claim(ctx, "t"); !errors.Is(err, dualwrite.ErrDeciderUnreachable) {
				t.Errorf("claim: %v, want ErrDeciderUnreachable", err)
			}
			b.drain(t)
			if my, rd := b.fences(t); my != reservation.NoFence || rd != reservation.NoFence {
				t.Errorf("fences after the failed handoff: MySQL %s, Redis %s; want both untouched (%s)", my, rd, reservation.NoFence)
			}
			for _, s := range []reservation.Store{b.my, b.rd} {
				if _, err := s.Get(ctx, &reservation.GetParams{Shop: shop, Token: "t"}); !errors.Is(err, reservation.ErrNotFound) {
					t.Errorf("%s holds the token after the failed handoff: %v", s.Name(), err)
				}
			}
			if l := b.ledger(t, 1, 1); l != 10 {
				t.Errorf("ledger %d, want 10", l)
			}
			if n := b.counter(t, "reservoir_dualwrite_owner_unreachable_total", map[string]string{"reason": "handoff"}); n != 2 {
				t.Errorf("unreachable{reason=handoff} = %v, want 2", n)
			}
		})
	}
}

// unreachableRedis is a Redis store on ledger that cannot reach its
// server: its client is closed, or dials an address nobody listens on.
func unreachableRedis(t *testing.T, how string, ledger *mysqlstore.Store) *redisstore.Store {
	t.Helper()
	client := redisstore.NewClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}, DialTimeout: 100 * time.Millisecond})
	if how == "closed client" {
		client.Close()
	} else {
		t.Cleanup(func() { client.Close() })
	}
	s, err := redisstore.New(redisstore.Config{Client: client, Prefix: "unreachable:", Ledger: ledger, Source: ledger,
		Limits: reservation.Limits{MaxQuantity: poolCap}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// While MySQL decides, Redis follows it through the change feed: a hold
// MySQL places appears in Redis (with MySQL as its authority), and so do
// its release and a claim, with Redis's quantities following the ledger.
func TestMySQLDecisionsAreRelayedIntoRedis(t *testing.T) {
	t.Parallel()
	b := setup(t, options{mode: authority.ModeMySQL})
	b.stock(t, 1, 1, 10)
	ctx := context.Background()
	get := func(token string) (reservation.Hold, error) {
		return b.rd.Get(ctx, &reservation.GetParams{Shop: shop, Token: token})
	}
	if res := b.mustReserve(t, "r", line(1, 3)); res.Authority != reservation.AuthorityMySQL {
		t.Fatalf("reserve decided by %s, want mysql", res.Authority)
	}
	waitFor(t, "the hold reaches Redis", func() (bool, string) {
		h, err := get("r")
		u := b.unheld(t, b.rd, 1, 1)
		return err == nil && h.Authority == reservation.AuthorityMySQL && fmt.Sprint(h.Allocations) == "[{1 1 3}]" && u == 7,
			fmt.Sprintf("Redis hold %+v %v, unheld %d (want 7)", h, err, u)
	})
	if _, err := b.f.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: "r"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the release reaches Redis", func() (bool, string) {
		_, err := get("r")
		u := b.unheld(t, b.rd, 1, 1)
		return errors.Is(err, reservation.ErrReleased) && u == 10, fmt.Sprintf("Redis answers %v, unheld %d (want 10)", err, u)
	})
	b.mustReserve(t, "c", line(1, 4))
	if _, err := b.claim(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claim reaches Redis", func() (bool, string) {
		_, err := get("c")
		u := b.unheld(t, b.rd, 1, 1)
		return errors.Is(err, reservation.ErrAlreadyClaimed) && u == 6, fmt.Sprintf("Redis answers %v, unheld %d (want 6)", err, u)
	})
	if l := b.ledger(t, 1, 1); l != 6 {
		t.Errorf("ledger %d, want 6", l)
	}
}

// Flip under load. Reservations made in shadow mode are claimed or
// released after the flip to mysql, those made in mysql mode after the
// kill switch put Redis back in charge, and those made then after the kill
// switch is released: every claim succeeds exactly once, the ledger is
// deducted once per claimed reservation (the claims table and the ledger
// agree), and after expiry no hold is left in either store.
func TestFlipUnderLoadHonoursEveryReservation(t *testing.T) {
	t.Parallel()
	b := setup(t, options{mode: authority.ModeShadow, shadowTimeout: 2 * time.Second})
	const items, stock = 4, 10_000
	for item := int64(1); item <= items; item++ {
		b.stock(t, item, 1, stock)
	}
	// Holds expire soon after the test is done with them, so the end can
	// check that nothing is left in either store.
	const ttl = 6 * time.Second
	var deducted [items + 1]atomic.Int64
	var claims atomic.Int64
	// What each token's first claim or release answered: every later read
	// of the token must agree, across the handoffs and the expiries.
	var answered sync.Map // token -> error a Get must wrap
	phase := func(name string, flip func()) {
		// Reserve under the current mode...
		var tokens sync.Map
		var wg sync.WaitGroup
		var started sync.WaitGroup
		started.Add(16)
		for w := range 16 {
			wg.Go(func() {
				for i := range 20 {
					if i == 1 {
						started.Done()
					}
					token := fmt.Sprintf("%s-%d-%d", name, w, i)
					res, err := b.reserve(context.Background(), token, ttl, line(1+int64((w+i)%items), 1+int64(i%3)))
					if err != nil || res.Status != reservation.StatusReserved {
						t.Errorf("%s: reserve: %+v %v", name, res, err)
						continue
					}
					tokens.Store(token, true)
				}
			})
		}
		// ...flip while they are in flight...
		started.Wait()
		flip()
		wg.Wait()
		// ...then claim three of four and release the rest, twice each
		// (a retry must change nothing).
		n := 0
		tokens.Range(func(k, _ any) bool {
			token, i := k.(string), n
			n++
			wg.Go(func() {
				for attempt := range 2 {
					if i%4 == 0 {
						if _, err := b.f.Release(context.Background(), &reservation.ReleaseParams{Shop: shop, Token: token}); err != nil {
							t.Errorf("%s: release %s: %v", name, token, err)
						}
						answered.Store(token, reservation.ErrReleased)
						continue
					}
					c, err := b.claim(context.Background(), token)
					if err != nil {
						t.Errorf("%s: claim %s (attempt %d): %v", name, token, attempt, err)
						return
					}
					if c.Replayed != (attempt == 1) {
						t.Errorf("%s: claim %s attempt %d: replayed = %v", name, token, attempt, c.Replayed)
					}
					if attempt == 0 {
						answered.Store(token, reservation.ErrAlreadyClaimed)
						claims.Add(1)
						for _, a := range c.Allocations {
							deducted[a.Item].Add(a.Quantity)
						}
					}
				}
			})
			return true
		})
		wg.Wait()
		b.drain(t)
	}
	phase("shadow-to-mysql", func() { _ = b.modes.SetMode(authority.ModeMySQL) })
	phase("mysql-to-kill", func() { _ = b.modes.SetKill(authority.KillRedis) })
	phase("kill-released", func() { _ = b.modes.SetKill(authority.KillOff) })

	for item := int64(1); item <= items; item++ {
		if l := b.ledger(t, item, 1); l != stock-deducted[item].Load() {
			t.Errorf("item %d: ledger %d, want %d - %d claimed", item, l, stock, deducted[item].Load())
		}
	}
	if n := b.db.Count(t, "reservation_claims"); n != claims.Load() {
		t.Errorf("claims rows %d, claims answered %d", n, claims.Load())
	}
	// Every token still reads as its claim or release answered, through
	// the facade from the store that decides now: a claim a handoff lost
	// would read as held, and later as expired.
	agrees := func(when string) {
		t.Helper()
		answered.Range(func(k, v any) bool {
			token, want := k.(string), v.(error)
			if h, err := b.f.Get(context.Background(), &reservation.GetParams{Shop: shop, Token: token}); !errors.Is(err, want) {
				t.Errorf("get %s %s: %+v %v, want %v (as its claim or release answered)", token, when, h, err, want)
			}
			return true
		})
	}
	agrees("after the handoffs")

	// Holds that are never claimed expire: MySQL (which decides) reaps
	// them and Redis follows through the relay.
	for i := range 10 {
		if _, err := b.reserve(context.Background(), tok("late", i), time.Second, line(1, 1)); err != nil {
			t.Fatal(err)
		}
	}
	b.drain(t)
	waitFor(t, "every hold expires in both stores", func() (bool, string) {
		for _, s := range []reservation.Store{b.my, b.rd} {
			if _, err := s.Reap(context.Background(), &reservation.ReapParams{}); err != nil {
				return false, err.Error()
			}
		}
		if n := b.db.Count(t, "reserved_quantities"); n != 0 {
			return false, fmt.Sprintf("%d MySQL hold lines left", n)
		}
		for item := int64(1); item <= items; item++ {
			l := b.ledger(t, item, 1)
			if u := b.unheld(t, b.rd, item, 1); u != l {
				return false, fmt.Sprintf("item %d: Redis unheld %d, ledger %d", item, u, l)
			}
			if u := b.unheld(t, b.my, item, 1); u != l {
				return false, fmt.Sprintf("item %d: MySQL unheld %d, ledger %d", item, u, l)
			}
		}
		return true, ""
	})
	if d, err := b.rd.Drift(context.Background(), &reservation.DriftParams{Shop: shop}); err != nil || len(d) != 0 {
		t.Errorf("redis drift: %v %v", d, err)
	}
	agrees("after every hold expired")
	if d, err := b.my.Reconcile(context.Background(), 0); err != nil {
		t.Error(err)
	} else {
		for _, x := range d {
			if x.Kind != reservation.DriftEmptyPool {
				t.Errorf("mysql reconcile: %v", x)
			}
		}
	}
}

// A handoff that fails answers ErrDeciderUnreachable, an unknown outcome
// (503), whatever the handoff's own error wraps. MySQL's takeover refuses
// a snapshot it finds invalid (a Redis hold beyond MySQL's limits), and
// Redis's Apply refuses an invalid change during a drain, each with a
// *reservation.ValidationError: the facade's error must not carry it as a
// domain answer, or the API answers 400 invalid_input to a valid call
// whose outcome is unknown, and the client does not retry.
func TestFailedHandoffIsNeverADomainAnswer(t *testing.T) {
	t.Parallel()
	causes := map[string]error{
		"invalid snapshot": fmt.Errorf("mirror: hand shop 42 to mysql: %w",
			&reservation.ValidationError{Field: "snapshot.holds[0]", Reason: "quantity 150 is above the limit 100"}),
		"not found":       fmt.Errorf("mirror: hand shop 42 to mysql: %w", reservation.ErrNotFound),
		"expired context": fmt.Errorf("mirror: hand shop 42 to mysql: %w", context.DeadlineExceeded),
	}
	for name, cause := range causes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := &mirrorSpy{handoff: func(int64, reservation.Authority, int64) (reservation.Fence, error) {
				return reservation.Fence{}, cause
			}}
			stale := func(self reservation.Authority) *reservation.NotDeciderError {
				return &reservation.NotDeciderError{Shop: shop, Store: self, Fence: reservation.NoFence}
			}
			f, err := dualwrite.New(dualwrite.Config{Pod: pod, Modes: authority.NewStatic(authority.ModeMySQLOnly), Mirror: m,
				Registerer: prometheus.NewRegistry(), Logger: testLogger(t),
				Redis: pingPong{reservation.AuthorityRedis, stale}, MySQL: pingPong{reservation.AuthorityMySQL, stale}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.Claim(context.Background(), &reservation.ClaimParams{Shop: shop, Token: "paid"})
			if !errors.Is(err, dualwrite.ErrDeciderUnreachable) {
				t.Fatalf("claim: %v, want ErrDeciderUnreachable", err)
			}
			if answer := reservation.AnswerName(err); answer != "" {
				t.Errorf("claim whose handoff failed: the error %q is the domain answer %q; want only 'unknown, retry' (503)", err, answer)
			}
		})
	}
}

// Every new decision MySQL makes wakes the relay (Mirror.Push), so Redis
// follows within milliseconds instead of at the relay's next poll: a
// reserve (held or refused), a claim, a release. A call that changed
// nothing (a replayed reserve or claim, a release of nothing) does not,
// and neither does a decision Redis made: Redis holds it already.
func TestMySQLDecisionsWakeTheRelay(t *testing.T) {
	t.Parallel()
	b := setup(t, options{mode: authority.ModeMySQL})
	b.stock(t, 1, 1, 10)
	m := &pushCounter{Mirror: b.m}
	f, err := dualwrite.New(dualwrite.Config{Pod: pod, Redis: b.rd, MySQL: b.my, Modes: b.modes, Mirror: m,
		Registerer: prometheus.NewRegistry(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drain(t, f) })
	ctx := context.Background()
	reserve := func(token string, qty int64) error {
		_, err := f.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: token, Lines: line(1, qty), TTL: time.Minute})
		return err
	}
	claim := func(token string) error {
		_, err := f.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token})
		return err
	}
	release := func(token string) error {
		_, err := f.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: token})
		return err
	}
	steps := []struct {
		what   string
		call   func() error
		pushes int64
	}{
		{"mysql reserves", func() error { return reserve("a", 2) }, 1},
		{"the reserve repeated (replayed)", func() error { return reserve("a", 2) }, 0},
		{"mysql claims", func() error { return claim("a") }, 1},
		{"the claim repeated (replayed)", func() error { return claim("a") }, 0},
		{"mysql reserves another", func() error { return reserve("b", 1) }, 1},
		{"mysql releases it", func() error { return release("b") }, 1},
		{"the release repeated (nothing released)", func() error { return release("b") }, 0},
		{"mysql refuses a cart", func() error { return reserve("big", 50) }, 1},
		{"the kill switch: redis reserves", func() error { _ = b.modes.SetKill(authority.KillRedis); return reserve("c", 1) }, 0},
		{"redis claims", func() error { return claim("c") }, 0},
		{"redis reserves another", func() error { return reserve("d", 1) }, 0},
		{"redis releases it", func() error { return release("d") }, 0},
	}
	for _, s := range steps {
		before := m.pushes.Load()
		if err := s.call(); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		if n := m.pushes.Load() - before; n != s.pushes {
			t.Errorf("%s: the relay was woken %d times, want %d", s.what, n, s.pushes)
		}
	}
}

// pushCounter is a Mirror that counts the facade's Pushes and passes every
// call on.
type pushCounter struct {
	dualwrite.Mirror
	pushes atomic.Int64
}

func (p *pushCounter) Push() {
	p.pushes.Add(1)
	p.Mirror.Push()
}

// A replica whose flags are no newer than a shop's fence follows the
// fence and never hands the shop off: flags without a version (0, a flags
// document without metadata.version; no fence is below 0), and flags
// changed by hand without bumping their version (the fence already
// carries that epoch). docs/flags.md: such a change moves no shop. The
// calls are served by the store that decides, not failed by a handoff
// that cannot be made or that would move nothing.
func TestFlagsNoNewerThanTheFenceFollowIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// flags are the replica's: they name the store that does not decide.
		flags authority.Decision
		// toMySQL first hands the shop to MySQL at version 2.
		toMySQL bool
		fence   reservation.Fence
	}{
		{"no version, naming mysql over a shop nobody handed off",
			authority.Decision{Mode: authority.ModeMySQLOnly, Kill: authority.KillOff}, false, reservation.NoFence},
		{"the fence's version, naming redis over a shop mysql took at it",
			authority.Decision{Mode: authority.ModeRedis, Kill: authority.KillOff, Version: 2}, true,
			reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{mode: authority.ModeRedis})
			b.stock(t, 1, 1, 10)
			if tc.toMySQL {
				_ = b.modes.SetMode(authority.ModeMySQL) // version 2
				b.mustReserve(t, "first", line(1, 1))
			}
			if my, rd := b.fences(t); my != tc.fence || rd != tc.fence {
				t.Fatalf("precondition: fences MySQL %s, Redis %s; want both %s", my, rd, tc.fence)
			}
			f, reg := b.replica(t, fixedSource{tc.flags})
			res, err := f.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: "t", Lines: line(1, 2), TTL: time.Minute})
			if err != nil || res.Status != reservation.StatusReserved || res.Authority != tc.fence.Decider {
				t.Fatalf("reserve: %+v %v; want reserved by %s (the fence's)", res, err, tc.fence.Decider)
			}
			if my, rd := b.fences(t); my != tc.fence || rd != tc.fence {
				t.Errorf("fences MySQL %s, Redis %s; want both still %s", my, rd, tc.fence)
			}
			if n := counter(t, reg, "reservoir_dualwrite_rerouted_total", map[string]string{"action": "handed_off"}); n != 0 {
				t.Errorf("handed off %v times with flags no newer than the fence", n)
			}
			if n := counter(t, reg, "reservoir_dualwrite_rerouted_total", map[string]string{"action": "followed"}); n != 1 {
				t.Errorf("followed the fence %v times, want 1", n)
			}
		})
	}
}
