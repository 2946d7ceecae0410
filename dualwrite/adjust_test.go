package dualwrite_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// A merchant's adjust answers what the ledger did, whichever store the
// flags name: the new quantity and the change applied, or the ledger's
// refusal (stock cannot go below zero) with no result. The API turns the
// answer into the merchant's response; an adjust whose refusal were
// answered as a success would tell the merchant stock moved that did not.
func TestAdjustAnswersWhatTheLedgerDid(t *testing.T) {
	t.Parallel()
	b := setup(t, options{mode: authority.ModeRedis})
	ctx := context.Background()
	adjust := func(p reservation.AdjustParams) (reservation.AdjustResult, error) {
		p.Shop, p.Item, p.Location = shop, 1, 1
		return b.f.Adjust(ctx, &p)
	}
	seven := int64(7)
	for _, step := range []struct {
		mode authority.Mode
		what string
		p    reservation.AdjustParams
		// want is the ledger's quantity after the step.
		want, delta int64
	}{
		{authority.ModeRedis, "set to 7", reservation.AdjustParams{Available: &seven}, 7, 7},
		{authority.ModeRedis, "+2", reservation.AdjustParams{Delta: 2}, 9, 2},
		{authority.ModeMySQL, "-4", reservation.AdjustParams{Delta: -4}, 5, -4},
	} {
		if err := b.modes.SetMode(step.mode); err != nil {
			t.Fatal(err)
		}
		res, err := adjust(step.p)
		if err != nil || res.Available != step.want || res.Delta != step.delta {
			t.Errorf("%s: adjust %s: %+v %v; want available %d, delta %d", step.mode, step.what, res, err, step.want, step.delta)
		}
		// Stock cannot go below zero: the ledger refuses, changes nothing,
		// and the refusal is the caller's answer.
		res, err = adjust(reservation.AdjustParams{Delta: -100})
		if !errors.Is(err, reservation.ErrInsufficientStock) || fmt.Sprint(res) != fmt.Sprint(reservation.AdjustResult{}) {
			t.Errorf("%s: adjust by -100 with %d in stock: %+v %v; want ErrInsufficientStock and no result", step.mode, step.want, res, err)
		}
		if l := b.ledger(t, 1, 1); l != step.want {
			t.Errorf("%s: ledger %d after the refused adjust, want %d", step.mode, l, step.want)
		}
	}
}

// While MySQL decides, a merchant's adjust reaches Redis before the
// answer, without waiting for the relay (stopped here): a replica whose
// flags are behind still reads Redis (Get, Availability) and, after a
// kill switch, Redis decides from what it holds; neither must miss units
// the merchant was just told were added. The shop's earlier changes (a
// hold MySQL placed) arrive with it, in order.
func TestAdjustWhileMySQLDecidesReachesRedisAtOnce(t *testing.T) {
	t.Parallel()
	// The adjust's delivery is bounded by the shadow deadline: a generous
	// one, for a loaded machine.
	b := setup(t, options{mode: authority.ModeRedis, noRelay: true, shadowTimeout: 5 * time.Second})
	b.stock(t, 1, 1, 5) // Redis decides: its quantity moves at once
	_ = b.modes.SetMode(authority.ModeMySQL)
	if res := b.mustReserve(t, "held", line(1, 2)); res.Authority != reservation.AuthorityMySQL {
		t.Fatalf("reserve in mysql mode decided by %s", res.Authority)
	}
	b.drain(t)
	if u := b.unheld(t, b.rd, 1, 1); u != 5 {
		t.Fatalf("precondition: with the relay stopped Redis must not follow MySQL yet: unheld %d, want 5", u)
	}
	res, err := b.f.Adjust(context.Background(), &reservation.AdjustParams{Shop: shop, Item: 1, Location: 1, Delta: 10})
	if err != nil || res.Available != 15 {
		t.Fatalf("adjust +10 in mysql mode: %+v %v", res, err)
	}
	if u := b.unheld(t, b.rd, 1, 1); u != 13 {
		t.Errorf("Redis unheld %d right after the adjust, want 15 - 2 held: the adjust (and MySQL's hold before it) did not reach Redis", u)
	}
	if _, err := b.rd.Get(context.Background(), &reservation.GetParams{Shop: shop, Token: "held"}); err != nil {
		t.Errorf("Redis after the adjust: MySQL's hold: %v", err)
	}
}
