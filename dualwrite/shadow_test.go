package dualwrite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// In shadow mode MySQL keeps a shadow hold of every cart it could serve.
// When Redis, which decides, refused the cart, no buyer holds those units:
// the shadow hold is released again (and counted), or MySQL would hold
// stock nobody bought until it expires and the comparisons after it would
// measure that phantom hold instead of the two stores.
func TestShadowHoldOfACartRedisRefusedIsReleased(t *testing.T) {
	t.Parallel()
	// A generous shadow deadline: a shadow that timed out is not cleaned.
	b := setup(t, options{shadowTimeout: 5 * time.Second})
	b.stock(t, 1, 1, 3)
	ctx := context.Background()
	// A hold placed in Redis behind the facade's back: Redis has 1 unit
	// left to sell, MySQL, which never saw it, still 3.
	if _, err := b.rd.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "behind", Lines: line(1, 2), TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	res, err := b.reserve(ctx, "cart", time.Minute, line(1, 2))
	if err != nil || res.Status != reservation.StatusInsufficient {
		t.Fatalf("reserve of 2 with 1 left in Redis: %+v %v, want insufficient", res, err)
	}
	b.drain(t)
	if h, err := b.my.Get(ctx, &reservation.GetParams{Shop: shop, Token: "cart"}); err == nil {
		t.Errorf("MySQL still holds %+v for a cart Redis refused", h)
	}
	if u := b.unheld(t, b.my, 1, 1); u != 3 {
		t.Errorf("MySQL unheld %d, want all 3: the shadow hold was not given back", u)
	}
	if n := b.counter(t, "reservoir_dualwrite_shadow_cleaned_total", nil); n != 1 {
		t.Errorf("shadow_cleaned counted %v, want 1", n)
	}

	// A cart both stores hold keeps its shadow hold: nothing is cleaned.
	b.mustReserve(t, "both", line(1, 1))
	b.drain(t)
	if _, err := b.my.Get(ctx, &reservation.GetParams{Shop: shop, Token: "both"}); err != nil {
		t.Errorf("MySQL's shadow hold of a cart Redis held: %v", err)
	}
	if n := b.counter(t, "reservoir_dualwrite_shadow_cleaned_total", nil); n != 1 {
		t.Errorf("shadow_cleaned counted %v after a cart both stores held, want 1 (the refused cart's)", n)
	}
}

// A shadow that answers only after its deadline (a store or driver that
// does not honour its context) is a timeout, whatever it answered: the
// comparer files it as shadow_timeout, which the rollout's latency gate
// reads, and does not compare an answer that came too late to count.
func TestShadowAnsweringAfterItsDeadlineIsATimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, options{mode: authority.ModeShadow, shadowTimeout: 50 * time.Millisecond,
		wrapMySQL: func(s reservation.Store) reservation.Store { return lateShadow{s} }})
	b.stock(t, 1, 1, 10)
	b.mustReserve(t, "late", line(1, 2))
	b.drain(t)
	b.rec.mu.Lock()
	obs := append([]compare.Observation(nil), b.rec.obs...)
	b.rec.mu.Unlock()
	if len(obs) != 1 {
		t.Fatalf("%d observations, want the reserve's", len(obs))
	}
	o := obs[0]
	if o.Shadow.Err != nil || o.Shadow.Result != compare.ResultReserved {
		t.Fatalf("precondition: the late shadow answered %+v, want reserved without an error", o.Shadow)
	}
	if !o.Shadow.TimedOut {
		t.Errorf("a shadow that answered in %s, past its deadline of 50ms, is not marked timed out", o.Shadow.Latency)
	}
	if c := compare.Classify(o, compare.DefaultRules); c != compare.ClassShadowTimeout {
		t.Errorf("class %s, want %s", c, compare.ClassShadowTimeout)
	}
}

// lateShadow answers its shadow reserves only once their deadline has
// passed, and then successfully: it does not honour the context.
type lateShadow struct{ reservation.Store }

func (l lateShadow) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	if p.As == reservation.AsShadow {
		<-ctx.Done()
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return reservation.ReserveResult{}, ctx.Err()
		}
		ctx = context.WithoutCancel(ctx)
	}
	return l.Store.Reserve(ctx, p)
}
