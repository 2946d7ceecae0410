package mysqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// A shadow claim (Claim as shadow, while Redis decides) says what a claim
// would find in this store, for the comparer, and changes nothing: a held
// cart is settled with the allocations its hold holds, a claimed one
// (the legacy claim's Deduct recorded it) settled as a replay, a released
// or unknown one refused with the answer a claim would get. The comparer
// files these answers against Redis's claim; an empty answer would match
// nothing and hide every difference the shadow exists to show.
func TestShadowClaimSaysWhatAClaimWouldFind(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	b.stockShop(t, redisShop, 1, 1, 10)
	hold := []reservation.Allocation{{Item: 1, Location: 1, Quantity: 2}}
	for _, token := range []string{"held", "claimed", "released"} {
		if res, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: redisShop, Token: token, TTL: time.Minute,
			Lines:     []reservation.Line{{Item: 1, Quantity: 2, Locations: []int64{1}}},
			Authority: reservation.AuthorityRedis, As: reservation.AsShadow}); err != nil || res.Status != reservation.StatusReserved {
			t.Fatalf("shadow reserve %s: %+v %v", token, res, err)
		}
	}
	if d, err := b.s.Deduct(ctx, &reservation.DeductParams{Shop: redisShop, Token: "claimed", Allocations: hold}); err != nil || !d.Applied {
		t.Fatalf("deduct: %+v %v", d, err)
	}
	if r, err := b.s.Release(ctx, &reservation.ReleaseParams{Shop: redisShop, Token: "released", As: reservation.AsShadow}); err != nil || !r.Released {
		t.Fatalf("shadow release: %+v %v", r, err)
	}
	settle := func(token string) (reservation.ClaimResult, error) {
		return b.s.Claim(ctx, &reservation.ClaimParams{Shop: redisShop, Token: token, As: reservation.AsShadow})
	}

	if res, err := settle("held"); err != nil || res.Outcome != reservation.OutcomeSettled || res.Replayed || fmt.Sprint(res.Allocations) != fmt.Sprint(hold) {
		t.Errorf("shadow claim of a held cart: %+v %v, want settled with %v", res, err, hold)
	}
	if res, err := settle("claimed"); err != nil || res.Outcome != reservation.OutcomeSettled || !res.Replayed || fmt.Sprint(res.Allocations) != fmt.Sprint(hold) {
		t.Errorf("shadow claim of a claimed cart: %+v %v, want settled, replayed, with %v", res, err, hold)
	}
	if res, err := settle("released"); !errors.Is(err, reservation.ErrReleased) || res.Outcome != "" {
		t.Errorf("shadow claim of a released cart: %+v %v, want ErrReleased", res, err)
	}
	if res, err := settle("never"); !errors.Is(err, reservation.ErrNotFound) || res.Outcome != "" {
		t.Errorf("shadow claim of a cart never reserved: %+v %v, want ErrNotFound", res, err)
	}

	// Nothing changed: the held cart is still held, nothing more was
	// deducted.
	if h, err := b.s.Get(ctx, &reservation.GetParams{Shop: redisShop, Token: "held"}); err != nil || fmt.Sprint(h.Allocations) != fmt.Sprint(hold) {
		t.Errorf("the held cart after its shadow claim: %+v %v, want still held", h, err)
	}
	var ledger int64
	if err := b.db.QueryRow("SELECT available FROM inventory_ledger WHERE shop_id = ? AND inventory_item_id = 1 AND location_id = 1", redisShop).Scan(&ledger); err != nil || ledger != 8 {
		t.Errorf("ledger %d (%v), want 8: only the Deduct took units", ledger, err)
	}
}
