package mysqlstore_test

import (
	"context"
	"errors"
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
