package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// feed builds change-feed entries of the test shop.
type feed struct {
	id  int64
	exp time.Time
}

func newFeed() *feed { return &feed{exp: time.Now().Add(time.Hour).Truncate(time.Millisecond)} }

func (f *feed) next() int64 { f.id++; return f.id }

func (f *feed) adjust(item, loc, delta int64) reservation.Change {
	return reservation.Change{ID: f.next(), Kind: reservation.ChangeAdjust, Shop: shop, Item: item, Location: loc, Delta: delta}
}

func (f *feed) state(token string, st reservation.State, allocs ...reservation.Allocation) reservation.Change {
	c := reservation.Change{ID: f.next(), Kind: reservation.ChangeState, Shop: shop, Token: token, State: st, Allocations: allocs}
	if st != reservation.StateRefused {
		c.ExpiresAt = f.exp
	}
	return c
}

func (f *feed) fence(d reservation.Authority, epoch int64) reservation.Change {
	return reservation.Change{ID: f.next(), Kind: reservation.ChangeFence, Shop: shop, Fence: reservation.Fence{Decider: d, Epoch: epoch}}
}

func (b bundle) apply(t *testing.T, changes ...reservation.Change) {
	t.Helper()
	if n, err := b.s.Apply(ctx(t), changes); err != nil || n != len(changes) {
		t.Fatalf("apply: %d of %d applied: %v", n, len(changes), err)
	}
}

// otherPrefix is a second store on a fresh prefix of srv, sharing b's
// ledger: a Redis that holds nothing yet.
func (b bundle) otherPrefix(t *testing.T, srv func(testing.TB) *testredis.Redis) bundle {
	t.Helper()
	o := bundle{r: srv(t), db: b.db, ledger: b.ledger, reg: prometheus.NewRegistry()}
	s, err := redisstore.New(redisstore.Config{Client: o.r.Client, Ledger: b.ledger, Source: b.ledger, Prefix: o.r.Prefix, Registerer: o.reg, Limits: limits()})
	if err != nil {
		t.Fatal(err)
	}
	o.s = s
	return o
}

// Applying the same changes twice ends in the same state: every kind of
// change is idempotent.
func TestApplyIsIdempotent(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, srv.new)
			f := newFeed()
			changes := []reservation.Change{
				f.adjust(1, 1, 10),
				f.adjust(2, 1, 5),
				f.state("a", reservation.StateHeld, alloc(1, 1, 2)),
				f.state("b", reservation.StateHeld, alloc(2, 1, 1)),
				f.state("c", reservation.StateClaimed, alloc(1, 1, 3)), // Redis never saw its hold
				f.state("b", reservation.StateReleased, alloc(2, 1, 1)),
				{ID: f.next(), Kind: reservation.ChangeState, Shop: shop, Token: "d", State: reservation.StateRefused, Short: []reservation.ShortLine{{Item: 1, Requested: 9, Unheld: 5}}},
				f.state("e", reservation.StateExpired, alloc(1, 1, 1)),                // expired before Redis saw it
				{ID: f.next(), Kind: reservation.ChangeState, Shop: shop, Token: "x"}, // MySQL forgot it
			}
			b.apply(t, changes...)
			once := b.dump(t)
			if q1, q2 := b.qty(t, 1, 1), b.qty(t, 2, 1); q1 != 5 || q2 != 5 {
				t.Errorf("quantities %d and %d, want 5 (10 - 2 held - 3 claimed) and 5", q1, q2)
			}
			snap, err := b.s.Snapshot(ctx(t), shop)
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("{Shop:42 Fence:redis@0 Holds:[{Shop:42 Token:a Allocations:[{Item:1 Location:1 Quantity:2}] ExpiresAt:%s Authority:mysql}] "+
				"Tombstones:[{Token:b State:released Allocations:[{Item:2 Location:1 Quantity:1}] ExpiresAt:%[1]s Short:[]} "+
				"{Token:c State:claimed Allocations:[{Item:1 Location:1 Quantity:3}] ExpiresAt:%[1]s Short:[]} "+
				"{Token:d State:refused Allocations:[] ExpiresAt:0001-01-01 00:00:00 +0000 UTC Short:[{Item:1 Requested:9 Unheld:5}]} "+
				"{Token:e State:expired Allocations:[{Item:1 Location:1 Quantity:1}] ExpiresAt:%[1]s Short:[]}] Tokens:[]}", f.exp.UTC())
			if got := fmt.Sprintf("%+v", snap); got != want {
				t.Errorf("after one apply:\n%s\nwant\n%s", got, want)
			}
			b.apply(t, changes...)
			if again := b.dump(t); again != once {
				t.Errorf("the second apply changed Redis:\n%s\nwas\n%s", again, once)
			}
			if n := b.counter(t, "reservoir_redis_mirror_applies_total", "kind", "adjust", "result", "duplicate"); n != 2 {
				t.Errorf("duplicate adjusts = %v, want 2", n)
			}
			if n := b.counter(t, "reservoir_redis_mirror_applies_total", "kind", "state", "result", "unchanged"); n != 6 {
				t.Errorf("unchanged states = %v, want 6 (every state change of the second apply)", n)
			}
		})
	}
}

// A token's held and terminal changes may arrive in either order (a
// redelivery, a facade's push racing the relay): the end state is the
// same, and a terminal state that came first is never resurrected.
func TestApplyOrderIndependence(t *testing.T) {
	t.Parallel()
	for _, terminal := range []reservation.State{reservation.StateReleased, reservation.StateExpired, reservation.StateClaimed} {
		t.Run(string(terminal), func(t *testing.T) {
			t.Parallel()
			inOrder := setup(t, testredis.New)
			reversed := inOrder.otherPrefix(t, testredis.New)
			f := newFeed()
			stock := f.adjust(1, 1, 10)
			held := f.state("t", reservation.StateHeld, alloc(1, 1, 4))
			end := f.state("t", terminal, alloc(1, 1, 4))
			inOrder.apply(t, stock, held, end)
			reversed.apply(t, stock, end, held)
			if a, b := inOrder.state(t), reversed.state(t); a != b {
				t.Errorf("held then %s:\n%s\n%s then held:\n%s", terminal, a, terminal, b)
			}
			want := int64(10)
			if terminal == reservation.StateClaimed {
				want = 6
			}
			for _, b := range []bundle{inOrder, reversed} {
				if q := b.qty(t, 1, 1); q != want {
					t.Errorf("quantity = %d, want %d", q, want)
				}
				if _, err := b.s.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "t"}); err == nil {
					t.Errorf("the %s token holds again", terminal)
				}
			}
		})
	}
}

// A ledger adjust moves Redis's quantity once per change id: Adjust
// applies it at once, and the relay's delivery of the same change, or a
// second delivery, does not move it again.
func TestAdjustAppliedOncePerChange(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	c := ctx(t)
	f := newFeed()
	f.id = 1 << 40 // far from the ledger's ids
	plus5 := f.adjust(1, 1, 5)
	b.apply(t, plus5, plus5)
	b.apply(t, plus5)
	if q := b.qty(t, 1, 1); q != 5 {
		t.Errorf("quantity = %d after three deliveries of +5, want 5", q)
	}
	ten := int64(10)
	res, err := b.s.Adjust(c, &reservation.AdjustParams{Shop: shop, Item: 2, Location: 1, Available: &ten})
	if err != nil || res.ChangeID == 0 || res.Delta != 10 {
		t.Fatalf("adjust: %+v %v, want a change id and a delta of 10", res, err)
	}
	if q := b.qty(t, 2, 1); q != 10 {
		t.Errorf("quantity = %d after the adjust, want 10 (applied at once)", q)
	}
	relayed := reservation.Change{ID: res.ChangeID, Kind: reservation.ChangeAdjust, Shop: shop, Item: 2, Location: 1, Delta: res.Delta}
	b.apply(t, relayed)
	if q := b.qty(t, 2, 1); q != 10 {
		t.Errorf("quantity = %d after the relay delivered the same change, want 10", q)
	}
	if n := b.counter(t, "reservoir_redis_mirror_applies_total", "kind", "adjust", "result", "duplicate"); n != 3 {
		t.Errorf("duplicate adjusts = %v, want 3", n)
	}
}

// A fence change is applied only after every change before it succeeded
// (the handoff's drain must be complete before Redis decides), and only
// when its epoch is higher than the fence Redis has.
func TestApplyFenceAfterEarlierChanges(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, srv.new)
			c := ctx(t)
			f := newFeed()
			fenceIs := func(want string) {
				t.Helper()
				if got, err := b.s.Fence(c, shop); err != nil || got.String() != want {
					t.Errorf("fence = %v %v, want %s", got, err, want)
				}
			}
			if _, err := b.s.Yield(c, shop, 2); err != nil {
				t.Fatal(err)
			}

			// An invalid change stops the feed before the fence.
			bad := f.state("a b", reservation.StateHeld, alloc(1, 1, 1))
			n, err := b.s.Apply(c, []reservation.Change{f.adjust(1, 1, 10), bad, f.fence(reservation.AuthorityRedis, 3)})
			var ve *reservation.ValidationError
			if n != 1 || !errors.As(err, &ve) || ve.Field != "changes[1].token" {
				t.Errorf("apply with a bad change: %d applied, %v; want 1 and a ValidationError on changes[1].token", n, err)
			}
			fenceIs("mysql@2")

			// A change that fails in Redis (its quantity key holds the
			// wrong type) stops it too.
			if err := b.r.Client.Set(c, b.key("qty:", 2), "not a hash", 0).Err(); err != nil {
				t.Fatal(err)
			}
			held := f.state("h", reservation.StateHeld, alloc(1, 1, 1))
			failing := f.adjust(2, 1, 1)
			handback := f.fence(reservation.AuthorityRedis, 3)
			n, err = b.s.Apply(c, []reservation.Change{held, failing, handback})
			if n != 1 || err == nil {
				t.Errorf("apply with a failing change: %d applied, %v; want 1 and the error", n, err)
			}
			fenceIs("mysql@2")
			if n := b.counter(t, "reservoir_redis_mirror_applies_total", "kind", "adjust", "result", "error"); n != 1 {
				t.Errorf("adjust errors = %v, want 1", n)
			}
			// Repaired, the relay delivers the rest again: now the fence
			// moves, after the changes before it.
			if err := b.r.Client.Del(c, b.key("qty:", 2)).Err(); err != nil {
				t.Fatal(err)
			}
			b.apply(t, failing, handback)
			fenceIs("redis@3")
			if q := b.qty(t, 2, 1); q != 1 {
				t.Errorf("quantity of item 2 = %d, want 1", q)
			}

			// Only a higher epoch moves the fence.
			b.apply(t, f.fence(reservation.AuthorityMySQL, 3), f.fence(reservation.AuthorityMySQL, 1))
			fenceIs("redis@3")
			b.apply(t, f.fence(reservation.AuthorityMySQL, 7), f.fence(reservation.AuthorityRedis, 6))
			fenceIs("mysql@7")
			if n := b.counter(t, "reservoir_redis_mirror_applies_total", "kind", "fence", "result", "raised"); n != 2 {
				t.Errorf("fences raised = %v, want 2", n)
			}
			if n := b.counter(t, "reservoir_redis_mirror_applies_total", "kind", "fence", "result", "unchanged"); n != 3 {
				t.Errorf("fences unchanged = %v, want 3", n)
			}
		})
	}
}

// A claim the ledger recorded wins over any other tombstone: an expired,
// released or refused token that the ledger says was claimed becomes
// claimed, and its deduction goes out of the quantities once. No
// tombstone is ever turned back into a hold, and a claimed one stays.
func TestApplyClaimConvertsTombstones(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	c := ctx(t)
	b.stock(t, 1, 1, 20)
	b.reserve(t, "expired", time.Minute, line(1, 2, 1))
	b.age(t, "expired", time.Second, -1)
	if r, err := b.s.Reap(c, &reservation.ReapParams{}); err != nil || r.Holds != 1 {
		t.Fatalf("reap: %+v %v", r, err)
	}
	b.reserve(t, "released", time.Minute, line(1, 3, 1))
	if _, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "released"}); err != nil {
		t.Fatal(err)
	}
	if q := b.qty(t, 1, 1); q != 20 {
		t.Fatalf("quantity = %d, want 20", q)
	}
	f := newFeed()
	claims := []reservation.Change{
		f.state("expired", reservation.StateClaimed, alloc(1, 1, 2)),
		f.state("released", reservation.StateClaimed, alloc(1, 1, 3)),
	}
	b.apply(t, claims...)
	b.apply(t, claims...)
	if q := b.qty(t, 1, 1); q != 15 {
		t.Errorf("quantity = %d, want 15: both deductions out, once", q)
	}
	for _, token := range []string{"expired", "released"} {
		if _, err := b.s.Get(c, &reservation.GetParams{Shop: shop, Token: token}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
			t.Errorf("get %s: %v, want ErrAlreadyClaimed", token, err)
		}
	}
	if n := b.counter(t, "reservoir_redis_mirror_applies_total", "kind", "state", "result", "converted"); n != 2 {
		t.Errorf("converted = %v, want 2", n)
	}
	before := b.dump(t)
	b.apply(t,
		f.state("expired", reservation.StateReleased, alloc(1, 1, 2)), // a claimed tombstone stays
		f.state("released", reservation.StateHeld, alloc(1, 1, 3)),    // no resurrection
	)
	if after := b.dump(t); after != before {
		t.Errorf("changes on claimed tombstones wrote:\n%s\nwant\n%s", after, before)
	}
}

// A held change for a token Redis holds with other allocations: while
// Redis decides, Redis's own hold stands; once MySQL decides, MySQL's
// allocations replace it and the quantities follow.
func TestApplyHeldReplacesWhenMySQLDecides(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	c := ctx(t)
	b.stock(t, 1, 1, 10)
	b.stock(t, 1, 2, 10)
	b.reserve(t, "t", time.Minute, line(1, 2, 1))
	f := newFeed()
	same := f.state("t", reservation.StateHeld, alloc(1, 1, 2))
	other := f.state("t", reservation.StateHeld, alloc(1, 2, 2))
	b.apply(t, same, other)
	if q1, q2 := b.qty(t, 1, 1), b.qty(t, 1, 2); q1 != 8 || q2 != 10 {
		t.Errorf("while Redis decides: quantities %d and %d, want 8 and 10 (Redis's hold kept)", q1, q2)
	}
	if n := b.counter(t, "reservoir_redis_mirror_applies_total", "kind", "state", "result", "kept"); n != 1 {
		t.Errorf("kept = %v, want 1", n)
	}
	if _, err := b.s.Yield(c, shop, 1); err != nil {
		t.Fatal(err)
	}
	b.apply(t, other)
	if q1, q2 := b.qty(t, 1, 1), b.qty(t, 1, 2); q1 != 10 || q2 != 8 {
		t.Errorf("once MySQL decides: quantities %d and %d, want 10 and 8 (MySQL's hold)", q1, q2)
	}
	h, err := b.s.Get(c, &reservation.GetParams{Shop: shop, Token: "t"})
	if err != nil || fmt.Sprint(h.Allocations) != "[{1 2 2}]" || h.Authority != reservation.AuthorityMySQL || !h.ExpiresAt.Equal(f.exp) {
		t.Errorf("the replaced hold: %+v %v, want MySQL's", h, err)
	}
	if n := b.counter(t, "reservoir_redis_mirror_applies_total", "kind", "state", "result", "replaced"); n != 1 {
		t.Errorf("replaced = %v, want 1", n)
	}
}

// Snapshot reads a shop (in pages: more holds than one page) and Rewrite
// writes it into an empty Redis: the copy reads back the same, with the
// quantities the ledger and its holds leave, and the adjusts the ledger
// rows include are not applied again when the relay delivers them late.
func TestSnapshotRewriteRoundTrip(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			// The claims clean up on their path: Redis holds their tombstones at once.
			b := setupWith(t, srv.new, func(c *redisstore.Config) { c.InlineClaimCleanup = true })
			c := ctx(t)
			adjusts := []reservation.AdjustResult{b.stock(t, 1, 1, 1000), b.stock(t, 2, 1, 3)}
			const n = 530
			for i := range n {
				b.reserve(t, fmt.Sprintf("h%03d", i), time.Minute, line(1, 1, 1))
			}
			for i := range 5 {
				if _, err := b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: fmt.Sprintf("h%03d", i)}); err != nil {
					t.Fatal(err)
				}
				if _, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: fmt.Sprintf("h%03d", 5+i)}); err != nil {
					t.Fatal(err)
				}
				b.age(t, fmt.Sprintf("h%03d", 10+i), time.Second, -1)
				if res, err := b.s.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: fmt.Sprintf("r%d", i), Lines: []reservation.Line{line(2, 4, 1)}, TTL: time.Minute}); err != nil || res.Status != reservation.StatusInsufficient {
					t.Fatalf("refused reserve: %+v %v", res, err)
				}
			}
			if r, err := b.s.Reap(c, &reservation.ReapParams{}); err != nil || r.Holds != 5 {
				t.Fatalf("reap: %+v %v", r, err)
			}
			if _, err := b.s.Yield(c, shop, 3); err != nil {
				t.Fatal(err)
			}
			snap, err := b.s.Snapshot(c, shop)
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Holds) != n-15 || len(snap.Tombstones) != 20 || snap.Fence.String() != "mysql@3" {
				t.Fatalf("snapshot: %d holds, %d tombstones, fence %s; want %d, 20, mysql@3", len(snap.Holds), len(snap.Tombstones), snap.Fence, n-15)
			}
			ledger, err := b.ledger.Stock(c, &reservation.StockParams{Shop: shop})
			if err != nil {
				t.Fatal(err)
			}
			copied := b.otherPrefix(t, srv.new)
			covered := []int64{adjusts[0].ChangeID, adjusts[1].ChangeID}
			if err := copied.s.Rewrite(c, snap, ledger, covered); err != nil {
				t.Fatal(err)
			}
			// The relay read the two adjusts before the copy and delivers
			// them after it: the ledger rows include them already.
			copied.apply(t,
				reservation.Change{ID: covered[0], Kind: reservation.ChangeAdjust, Shop: shop, Item: 1, Location: 1, Delta: adjusts[0].Delta},
				reservation.Change{ID: covered[1], Kind: reservation.ChangeAdjust, Shop: shop, Item: 2, Location: 1, Delta: adjusts[1].Delta})
			again, err := copied.s.Snapshot(c, shop)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(again) != fmt.Sprint(snap) {
				t.Errorf("the copy reads back differently:\n%+v\nwant\n%+v", again, snap)
			}
			for _, it := range []int64{1, 2} {
				if q, want := copied.qty(t, it, 1), b.qty(t, it, 1); q != want {
					t.Errorf("item %d: the copy has %d, the original %d", it, q, want)
				}
			}
			if q := copied.qty(t, 1, 1); q != 995-(n-15) {
				t.Errorf("item 1: %d, want %d (ledger 995 minus %d held)", q, 995-(n-15), n-15)
			}
			// The copy decides what the original decided, and answers from
			// the tombstones it received.
			if _, err := copied.s.Force(c, shop, 4); err != nil {
				t.Fatal(err)
			}
			if _, err := copied.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "h000"}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
				t.Errorf("release of a claimed token in the copy: %v, want ErrAlreadyClaimed", err)
			}
			if res, err := copied.s.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "r0", Lines: []reservation.Line{line(2, 4, 1)}, TTL: time.Minute}); err != nil || !res.Replayed {
				t.Errorf("reserve of a refused token in the copy: %+v %v, want the refusal replayed", res, err)
			}
		})
	}
}

// reservoir_redis_script_seconds times each change the mirror applies
// under its own script: a state change under apply_state, an adjust under
// apply_adjust. An operator reading why the relay lags sees which script
// is slow (a state change moves a hold's every quantity and writes its
// tombstone; an adjust moves one field).
func TestApplyTimesEachChangeUnderItsScript(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	f := newFeed()
	b.apply(t, f.state("a", reservation.StateHeld, alloc(1, 1, 2)))
	if st, adj := b.scriptRuns(t, "apply_state"), b.scriptRuns(t, "apply_adjust"); st != 1 || adj != 0 {
		t.Errorf("after one state change: apply_state timed %d, apply_adjust %d; want 1 and 0", st, adj)
	}
	b.apply(t, f.adjust(1, 1, 10), f.adjust(2, 1, 5))
	if st, adj := b.scriptRuns(t, "apply_state"), b.scriptRuns(t, "apply_adjust"); st != 1 || adj != 2 {
		t.Errorf("after two adjusts more: apply_state timed %d, apply_adjust %d; want 1 and 2", st, adj)
	}
}

// ApplyEvaluating asks Redis about each cart a change carries, just
// before applying the change: Redis's own answer against the state the
// changes before it left (a cart after a hold that took the last unit is
// short; a cart MySQL refused may be one Redis would have held). It
// reports nothing for a change without a cart, nor for a change delivered
// again (Redis already has the token), and a cart that cannot be
// evaluated is reported as an error while its change is applied.
func TestApplyEvaluatesCartsBeforeApplying(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, srv.new)
			f := newFeed()
			b.apply(t, f.adjust(1, 1, 2), f.adjust(2, 1, 1))
			withCart := func(c reservation.Change, lines ...reservation.Line) reservation.Change {
				c.Cart, c.CartLabel = lines, "mysql"
				return c
			}
			refused := reservation.Change{ID: f.next(), Kind: reservation.ChangeState, Shop: shop, Token: "c", State: reservation.StateRefused,
				Short: []reservation.ShortLine{{Item: 2, Requested: 1, Unheld: 0}}}
			changes := []reservation.Change{
				withCart(f.state("a", reservation.StateHeld, alloc(1, 1, 2)), reservation.Line{Item: 1, Quantity: 2, Locations: []int64{2, 1}}),
				withCart(f.state("b", reservation.StateHeld, alloc(1, 1, 1)), reservation.Line{Item: 1, Quantity: 1, Locations: []int64{1}}),
				withCart(refused, reservation.Line{Item: 2, Quantity: 1, Locations: []int64{1}}),
				f.adjust(2, 1, 1),
				f.state("d", reservation.StateHeld, alloc(2, 1, 1)),
				withCart(f.state("e", reservation.StateHeld, alloc(2, 1, 1)), reservation.Line{Item: 0, Quantity: 1, Locations: []int64{1}}),
			}
			type answer struct {
				res reservation.ReserveResult
				err error
			}
			got := map[int]answer{}
			eval := func(i int, res reservation.ReserveResult, err error) { got[i] = answer{res, err} }
			if n, err := b.s.ApplyEvaluating(ctx(t), changes, eval); err != nil || n != len(changes) {
				t.Fatalf("applied %d of %d: %v", n, len(changes), err)
			}
			if len(got) != 4 {
				t.Errorf("%d carts reported, want 4 (changes 0, 1, 2 and 5): %v", len(got), got)
			}
			if a := got[0]; a.err != nil || a.res.Status != reservation.StatusReserved || len(a.res.Allocations) != 1 || a.res.Allocations[0] != alloc(1, 1, 2) {
				t.Errorf("a: %+v, want reserved 2 of item 1 at location 1 (location 2 has none)", a)
			}
			if a := got[1]; a.err != nil || a.res.Status != reservation.StatusInsufficient || len(a.res.Short) != 1 || a.res.Short[0] != (reservation.ShortLine{Item: 1, Requested: 1, Unheld: 0}) {
				t.Errorf("b: %+v, want short: a's hold, applied before, took both units", a)
			}
			if a := got[2]; a.err != nil || a.res.Status != reservation.StatusReserved {
				t.Errorf("c: %+v, want reserved (Redis had the unit MySQL refused)", a)
			}
			var ve *reservation.ValidationError
			if a := got[5]; !errors.As(a.err, &ve) {
				t.Errorf("e: %+v, want the invalid cart named", a)
			}
			if u := b.qty(t, 2, 1); u != 0 {
				t.Errorf("item 2 quantity %d, want 0: every change applied (1 + 1 - d - e)", u)
			}
			// Delivered again: Redis has every token (held or refused).
			clear(got)
			if n, err := b.s.ApplyEvaluating(ctx(t), changes[:3], eval); err != nil || n != 3 {
				t.Fatalf("again: applied %d of 3: %v", n, err)
			}
			if len(got) != 0 {
				t.Errorf("a change delivered again was evaluated: %v", got)
			}
		})
	}
}

// A pipeline whose first change fails still reports the carts of the
// changes after it that Redis applied: they come again with the failed
// one, and Redis, which has their tokens by then, would have no answer of
// its own for them.
func TestApplyReportsCartsAppliedAfterAFailure(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	f := newFeed()
	b.apply(t, f.adjust(1, 1, 5))
	// x's hold key is not a hash: its apply fails (WRONGTYPE).
	if err := b.r.Client.Set(ctx(t), b.key("hold:", "x"), "junk", 0).Err(); err != nil {
		t.Fatal(err)
	}
	cart := []reservation.Line{{Item: 1, Quantity: 1, Locations: []int64{1}}}
	y := f.state("y", reservation.StateHeld, alloc(1, 1, 1))
	y.Cart, y.CartLabel = cart, "mysql"
	changes := []reservation.Change{f.state("x", reservation.StateHeld, alloc(1, 1, 1)), y}
	got := map[int]reservation.ReserveResult{}
	eval := func(i int, res reservation.ReserveResult, err error) {
		if err != nil {
			t.Errorf("change %d: %v", i, err)
		}
		got[i] = res
	}
	if n, err := b.s.ApplyEvaluating(ctx(t), changes, eval); err == nil || n != 0 {
		t.Fatalf("applied %d, %v; want x to fail first", n, err)
	}
	if r, ok := got[1]; len(got) != 1 || !ok || r.Status != reservation.StatusReserved {
		t.Fatalf("reported %v; want y's evaluation, reserved", got)
	}
	clear(got)
	if n, err := b.s.ApplyEvaluating(ctx(t), changes[1:], eval); err != nil || n != 1 || len(got) != 0 {
		t.Errorf("y again: applied %d, %v, reported %v; want applied and nothing reported", n, err, got)
	}
}

// After the server lost its scripts (a restart, a failover), the apply
// reloads them and the carts are still evaluated, against the state before
// their changes: the failed applies changed nothing. (Not parallel, and on
// the cluster: flushing the scripts of the standalone server would make
// other packages' relays, which evaluate carts, miss comparisons.)
func TestApplyEvaluatesAfterTheScriptsWereLost(t *testing.T) {
	b := setup(t, testredis.NewCluster)
	f := newFeed()
	b.apply(t, f.adjust(1, 1, 1))
	cc, ok := b.r.Client.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("client %T, want a cluster client", b.r.Client)
	}
	flush := func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() }
	if err := cc.ForEachMaster(ctx(t), flush); err != nil {
		t.Fatal(err)
	}
	hashes := []string{redisstore.ScriptHash("reserve"), redisstore.ScriptHash("apply_state")}
	if ex, err := b.r.Client.ScriptExists(ctx(t), hashes...).Result(); err != nil || ex[0] || ex[1] {
		t.Fatalf("scripts still cached after the flush: %v %v", ex, err)
	}
	a := f.state("a", reservation.StateHeld, alloc(1, 1, 1))
	a.Cart, a.CartLabel = []reservation.Line{{Item: 1, Quantity: 1, Locations: []int64{1}}}, "mysql"
	var got []reservation.ReserveResult
	eval := func(_ int, res reservation.ReserveResult, err error) {
		if err != nil {
			t.Errorf("evaluation: %v", err)
		}
		got = append(got, res)
	}
	if n, err := b.s.ApplyEvaluating(ctx(t), []reservation.Change{a}, eval); err != nil || n != 1 {
		t.Fatalf("applied %d: %v", n, err)
	}
	if len(got) != 1 || got[0].Status != reservation.StatusReserved {
		t.Errorf("reported %v; want one evaluation, reserved", got)
	}
}
