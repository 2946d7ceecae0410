package dualwrite_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
)

// lostReserveReply is a store whose reserves commit but whose replies are
// lost: the caller sees a deadline, the store holds the cart.
type lostReserveReply struct{ reservation.Store }

func (s lostReserveReply) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	res, err := s.Store.Reserve(ctx, p)
	if err == nil && res.Status == reservation.StatusReserved {
		return reservation.ReserveResult{}, context.DeadlineExceeded
	}
	return res, err
}

// flakyWrites is a store whose first n releases and settles fail without
// reaching it, as through a connection that was just cut.
type flakyWrites struct {
	reservation.Store
	failures atomic.Int64
}

var errCut = errors.New("connection reset by peer")

func (s *flakyWrites) fail() bool { return s.failures.Add(-1) >= 0 }

func (s *flakyWrites) Release(ctx context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	if s.fail() {
		return reservation.ReleaseResult{}, errCut
	}
	return s.Store.Release(ctx, p)
}

func (s *flakyWrites) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	if p.As == reservation.AsShadow && s.fail() {
		return reservation.ClaimResult{}, errCut
	}
	return s.Store.Claim(ctx, p)
}

// Regression case "orphaned shadow hold after a lost shadow reply", found
// by the soak's porcupine check (an undersell after the flip to mysql).
//
// In shadow mode Redis refuses a cart (its stock is out) while the MySQL
// shadow reserves it, and the shadow's reply is lost. The facade used to
// clean up a shadow hold only when the shadow said "reserved", so MySQL
// kept the cart: a hold no buyer owns, which after the flip to mysql
// refused buyers until it expired. The authority said "insufficient", so
// the token holds nothing there: the shadow's hold, if any, is released.
func TestOrphanedShadowHoldAfterLostReplyIsReleased(t *testing.T) {
	t.Parallel()
	b := setup(t, options{mode: rollout.ModeShadow, wrapMySQL: func(s reservation.Store) reservation.Store { return lostReserveReply{s} }})
	b.stock(t, 1, 1, 2)
	ctx := context.Background()
	// Redis alone holds the 2 units (a cart made before MySQL was
	// shadowing, say): MySQL still has them free.
	if res, err := b.rd.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "redis-only", Lines: line(1, 2), TTL: time.Minute}); err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve in Redis: %+v %v", res, err)
	}
	res, err := b.reserve(ctx, "refused", time.Minute, line(1, 1))
	if err != nil || res.Status != reservation.StatusInsufficient {
		t.Fatalf("reserve: %+v %v, want insufficient (Redis answers)", res, err)
	}
	b.drain(t)
	if _, err := b.my.Get(ctx, &reservation.GetParams{Shop: shop, Token: "refused"}); !errors.Is(err, reservation.ErrNotFound) {
		t.Errorf("MySQL still holds the refused cart: %v", err)
	}
	if n := b.unheld(t, b.my, 1, 1); n != 2 {
		t.Errorf("MySQL offers %d, want 2: the orphaned hold refuses buyers after a flip", n)
	}
	if n := b.counter(t, "reservoir_dualwrite_shadow_cleaned_total"); n != 1 {
		t.Errorf("shadow_cleaned = %v, want 1", n)
	}
}

// A shadow release or settle that fails without an answer is retried: a
// lost one leaves the shadow a hold nobody owns until it expires.
func TestFailedShadowWritesAreRetried(t *testing.T) {
	t.Parallel()
	flaky := &flakyWrites{}
	b := setup(t, options{mode: rollout.ModeShadow, wrapMySQL: func(s reservation.Store) reservation.Store { flaky.Store = s; return flaky }})
	b.stock(t, 1, 1, 10)
	ctx := context.Background()
	for _, token := range []string{"released", "claimed"} {
		if res, err := b.reserve(ctx, token, time.Minute, line(1, 2)); err != nil || res.Status != reservation.StatusReserved {
			t.Fatalf("reserve %s: %+v %v", token, res, err)
		}
	}
	b.drain(t)
	flaky.failures.Store(2)
	if _, err := b.f.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: "released"}); err != nil {
		t.Fatal(err)
	}
	b.drain(t)
	flaky.failures.Store(2)
	if _, err := b.f.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "claimed"}); err != nil {
		t.Fatal(err)
	}
	b.drain(t)
	for _, token := range []string{"released", "claimed"} {
		if _, err := b.my.Get(ctx, &reservation.GetParams{Shop: shop, Token: token}); !errors.Is(err, reservation.ErrNotFound) {
			t.Errorf("MySQL still holds %q after its shadow write failed twice: %v", token, err)
		}
	}
	if n := b.unheld(t, b.my, 1, 1); n != 8 {
		t.Errorf("MySQL offers %d, want 8 (10 minus the 2 claimed)", n)
	}
	if n := b.counter(t, "reservoir_dualwrite_shadow_repair_failures_total"); n != 0 {
		t.Errorf("repair failures = %v, want 0", n)
	}
}
