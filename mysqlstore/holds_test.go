package mysqlstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Holds and Claims are what redisstore's Drift and Resync read: one entry
// per live token with its allocations, and the deducted allocations of the
// tokens that were claimed (by Claim or by the legacy Deduct).
func TestHoldsAndClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, 50)
	b.stock(t, 1, 1, 10)
	b.stock(t, 2, 1, 10)
	b.stock(t, 2, 2, 10)
	reserve := func(token string, lines ...reservation.Line) {
		t.Helper()
		res, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: token, Lines: lines, TTL: time.Minute})
		if err != nil || res.Status != reservation.StatusReserved {
			t.Fatalf("reserve %s: %+v %v", token, res, err)
		}
	}
	reserve("b-cart", reservation.Line{Item: 2, Quantity: 3, Locations: []int64{2}}, reservation.Line{Item: 1, Quantity: 1, Locations: []int64{1}})
	reserve("a-cart", reservation.Line{Item: 1, Quantity: 2, Locations: []int64{1}})
	reserve("claimed", reservation.Line{Item: 2, Quantity: 1, Locations: []int64{1}})
	if _, err := b.s.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "claimed"}); err != nil {
		t.Fatal(err)
	}
	// The legacy claim path, while Redis decided the shop: a deduction
	// for a token this store never held. Then MySQL decides again.
	handOff(b.s)(t, shop)
	if _, err := b.s.Deduct(ctx, &reservation.DeductParams{Shop: shop, Token: "legacy", Allocations: []reservation.Allocation{{Item: 2, Location: 2, Quantity: 2}}}); err != nil {
		t.Fatal(err)
	}
	if f, err := b.s.TakeOver(ctx, &reservation.Snapshot{Shop: shop, Holds: []reservation.Hold{
		{Shop: shop, Token: "a-cart", Allocations: []reservation.Allocation{{Item: 1, Location: 1, Quantity: 2}}, ExpiresAt: time.Now().Add(time.Minute), Authority: reservation.AuthorityMySQL},
		{Shop: shop, Token: "b-cart", Allocations: []reservation.Allocation{{Item: 1, Location: 1, Quantity: 1}, {Item: 2, Location: 2, Quantity: 3}}, ExpiresAt: time.Now().Add(time.Minute), Authority: reservation.AuthorityMySQL},
	}}, 3); err != nil || f.Decider != reservation.AuthorityMySQL {
		t.Fatalf("take over: %v %v", f, err)
	}
	// Another shop's holds stay out.
	other := int64(7)
	if _, err := b.s.Adjust(ctx, &reservation.AdjustParams{Shop: shop + 1, Item: 1, Location: 1, Available: &other}); err != nil {
		t.Fatal(err)
	}
	decide(b.s)(t, shop+1)
	if _, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop + 1, Token: "a-cart", Lines: []reservation.Line{{Item: 1, Quantity: 1, Locations: []int64{1}}}, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}

	holds, err := b.s.Holds(ctx, shop)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range holds {
		if h.Shop != shop || h.Authority != reservation.AuthorityMySQL || time.Until(h.ExpiresAt) < 50*time.Second {
			t.Errorf("hold %+v: want shop %d, authority mysql, expiry about a minute away", h, shop)
		}
		got = append(got, fmt.Sprint(h.Token, h.Allocations))
	}
	want := []string{"a-cart[{1 1 2}]", "b-cart[{1 1 1} {2 2 3}]"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("holds = %v, want %v", got, want)
	}

	claims, err := b.s.Claims(ctx, shop, []string{"a-cart", "claimed", "legacy", "never"})
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 2 || fmt.Sprint(claims["claimed"]) != "[{2 1 1}]" || fmt.Sprint(claims["legacy"]) != "[{2 2 2}]" {
		t.Errorf("claims = %v, want claimed [{2 1 1}] and legacy [{2 2 2}] only", claims)
	}
	if c, err := b.s.Claims(ctx, shop, nil); err != nil || len(c) != 0 {
		t.Errorf("claims of no tokens = %v %v, want empty", c, err)
	}
	// More tokens than one statement's batch.
	many := make([]string, 1201)
	for i := range many {
		many[i] = fmt.Sprintf("t-%d", i)
	}
	many[1200] = "legacy"
	if c, err := b.s.Claims(ctx, shop, many); err != nil || len(c) != 1 {
		t.Errorf("claims over several batches = %v %v, want legacy only", c, err)
	}
	if _, err := b.s.Holds(ctx, 0); err == nil {
		t.Error("holds of shop 0: no error")
	}
}
