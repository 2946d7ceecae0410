package mysqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// A handoff at an epoch the fence already has (or has passed) changes
// nothing, and Repair refuses a shop MySQL decides (docs/ownership.md,
// sections 2 and 3): a replica with stale flags, or one repeating a
// handoff another replica finished, must neither take the shop back, nor
// drop the decider's holds by copying a stale snapshot over them, nor
// record a second fence change for the relay. Each of these reads the
// fence the handoff locked.
func TestStaleHandoffsChangeNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, 10) // MySQL decides at epoch 1
	b.stock(t, 1, 1, 5)
	handOff(b.s)(t, shop) // redis@2
	mysql3 := reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: 3}
	if f, err := b.s.TakeOver(ctx, &reservation.Snapshot{Shop: shop}, 3); err != nil || f != mysql3 {
		t.Fatalf("take over at 3: %v %v, want %v", f, err, mysql3)
	}
	if res, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "held", Lines: one(1, 1), TTL: time.Minute}); err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve as decider: %+v %v", res, err)
	}
	fenceChanges := func() int {
		t.Helper()
		cs, err := b.s.Pending(ctx, shop, 100)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range cs {
			if c.Kind == reservation.ChangeFence {
				n++
			}
		}
		return n
	}
	if n := fenceChanges(); n != 1 {
		t.Fatalf("%d fence changes in the feed after one yield, want 1", n)
	}

	// Stale: a yield at 2 (the shop went back to MySQL at 3), and again at 3.
	for _, e := range []int64{2, 3} {
		if f, err := b.s.Yield(ctx, shop, e); err != nil || f != mysql3 {
			t.Errorf("yield at %d with the fence at mysql@3: %v %v, want %v unchanged", e, f, err, mysql3)
		}
	}
	// Stale: a take over at 1, and a repeat of the one at 3, with a
	// snapshot that knows nothing of the hold MySQL decided since.
	for _, e := range []int64{1, 3} {
		if f, err := b.s.TakeOver(ctx, &reservation.Snapshot{Shop: shop}, e); err != nil || f != mysql3 {
			t.Errorf("take over at %d with the fence at mysql@3: %v %v, want %v unchanged", e, f, err, mysql3)
		}
	}
	// Repair is for a shop Redis decides.
	var nd *reservation.NotDeciderError
	if err := b.s.Repair(ctx, &reservation.Snapshot{Shop: shop}); !errors.As(err, &nd) || nd.Fence != mysql3 {
		t.Errorf("repair of a shop MySQL decides: %v, want a NotDeciderError with fence %v", err, mysql3)
	}

	if f, err := b.s.Fence(ctx, shop); err != nil || f != mysql3 {
		t.Errorf("fence after the stale handoffs: %v %v, want %v", f, err, mysql3)
	}
	if n := fenceChanges(); n != 1 {
		t.Errorf("%d fence changes in the feed after the stale handoffs, want still 1", n)
	}
	holds, err := b.s.Holds(ctx, shop)
	if err != nil {
		t.Fatal(err)
	}
	if len(holds) != 1 || holds[0].Token != "held" {
		t.Errorf("holds after the stale handoffs: %+v, want the decider's hold \"held\" alone", holds)
	}
	if _, err := b.s.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "held"}); err != nil {
		t.Errorf("claim the decider's hold after the stale handoffs: %v", err)
	}
	for _, kind := range []string{"yield", "take_over"} {
		if n := metricSum(t, b, "reservoir_mysql_handoffs_total", "kind", kind, "result", "unchanged"); n != 2 {
			t.Errorf("reservoir_mysql_handoffs_total{kind=%q,result=\"unchanged\"} = %v, want 2", kind, n)
		}
	}
}

// A take over makes MySQL's holds Redis's (docs/ownership.md, section 3):
// a hold only Redis has (reserved while Redis decided, never shadowed) is
// created with its lines and expiry, and the pool trimmed under it, so the
// new decider neither forgets nor re-sells it; a token the ledger already
// claimed stays claimed even if Redis's snapshot still shows its hold (a
// legacy claim whose last script was lost), so it cannot be claimed or
// released again.
func TestTakeOverCopiesRedisHoldsButNotOverAClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, 10)
	b.stock(t, 1, 1, 10)
	if res, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "shadowed", Lines: one(1, 1), TTL: time.Minute}); err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	handOff(b.s)(t, shop)
	// Redis decides: a legacy claim reaches the ledger.
	legacy := []reservation.Allocation{{Item: 1, Location: 1, Quantity: 2}}
	if _, err := b.s.Deduct(ctx, &reservation.DeductParams{Shop: shop, Token: "legacy", Allocations: legacy}); err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	snap := &reservation.Snapshot{Shop: shop, Holds: []reservation.Hold{
		{Shop: shop, Token: "shadowed", Allocations: []reservation.Allocation{{Item: 1, Location: 1, Quantity: 1}}, ExpiresAt: expires, Authority: reservation.AuthorityMySQL},
		{Shop: shop, Token: "redis-only", Allocations: []reservation.Allocation{{Item: 1, Location: 1, Quantity: 3}}, ExpiresAt: expires, Authority: reservation.AuthorityRedis},
		{Shop: shop, Token: "legacy", Allocations: legacy, ExpiresAt: expires, Authority: reservation.AuthorityRedis},
	}}
	if f, err := b.s.TakeOver(ctx, snap, 3); err != nil || f.Decider != reservation.AuthorityMySQL {
		t.Fatalf("take over: %v %v", f, err)
	}

	holds, err := b.s.Holds(ctx, shop)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, h := range holds {
		got[h.Token] = fmt.Sprint(h.Allocations)
		if h.Token == "redis-only" && (!h.ExpiresAt.Equal(expires) || h.Authority != reservation.AuthorityRedis) {
			t.Errorf("hold %s expires at %v, decided by %s; want Redis's %v, redis", h.Token, h.ExpiresAt, h.Authority, expires)
		}
	}
	want := map[string]string{"shadowed": "[{1 1 1}]", "redis-only": "[{1 1 3}]"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("holds after the take over = %v, want %v", got, want)
	}
	if _, err := b.s.Get(ctx, &reservation.GetParams{Shop: shop, Token: "legacy"}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
		t.Errorf("get the claimed token after the take over: %v, want ErrAlreadyClaimed", err)
	}
	if _, err := b.s.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: "legacy"}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
		t.Errorf("release the claimed token after the take over: %v, want ErrAlreadyClaimed", err)
	}
	if d := b.drift(t); len(d) != 0 {
		t.Errorf("drift after the take over: %v", d)
	}
	if _, err := b.s.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "redis-only"}); err != nil {
		t.Errorf("claim the hold copied from Redis: %v", err)
	}
	if l := b.ledger(t, 1, 1); l != 10-2-3 {
		t.Errorf("ledger = %d, want 5 (10, less the legacy claim of 2 and the copied hold's 3)", l)
	}
}

// A handoff names a real shop (a positive id) at a positive epoch: shop 0
// is what an unset field sends, and a handoff of it would create a fence
// and record a fence change the relay then applies to Redis. Each call
// refuses with a ValidationError and writes no row.
func TestHandoffsRefuseABadShopOrEpoch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, 10)
	tables := []string{"reservation_fences", "reservation_outbox", "reservations"}
	before := map[string]int64{}
	for _, tb := range tables {
		before[tb] = b.db.Count(t, tb)
	}
	calls := map[string]func() error{
		"yield shop 0":  func() error { _, err := b.s.Yield(ctx, 0, 5); return err },
		"yield shop -1": func() error { _, err := b.s.Yield(ctx, -1, 5); return err },
		"yield epoch 0": func() error { _, err := b.s.Yield(ctx, shop, 0); return err },
		"take over shop 0": func() error {
			_, err := b.s.TakeOver(ctx, &reservation.Snapshot{Shop: 0}, 5)
			return err
		},
		"take over epoch 0": func() error {
			_, err := b.s.TakeOver(ctx, &reservation.Snapshot{Shop: shop}, 0)
			return err
		},
		"repair shop 0": func() error { return b.s.Repair(ctx, &reservation.Snapshot{Shop: 0}) },
		"fence shop 0":  func() error { _, err := b.s.Fence(ctx, 0); return err },
	}
	for name, call := range calls {
		var ve *reservation.ValidationError
		if err := call(); !errors.As(err, &ve) {
			t.Errorf("%s: %v, want a ValidationError", name, err)
		}
	}
	for _, tb := range tables {
		if n := b.db.Count(t, tb); n != before[tb] {
			t.Errorf("%s: %d rows after the refused handoffs, %d before", tb, n, before[tb])
		}
	}
	if f, err := b.s.Fence(ctx, shop); err != nil || f != (reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: 1}) {
		t.Errorf("fence of shop %d after the refused handoffs: %v %v, want mysql@1", shop, f, err)
	}
}
