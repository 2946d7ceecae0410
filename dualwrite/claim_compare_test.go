package dualwrite_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/reservation"
)

// A compared claim hands the comparer what each store answered: the
// decider's "claimed" with what it deducted, and the shadow's own answer
// ("settled" with what its hold held) or error. The rollout's gates read nothing else: a claim MySQL never
// held (its shadow says not found) must reach them as shadow_missing, and
// a claim both stores hold as a match of the same allocations, not two
// empty outcomes that match whatever the stores did.
func TestClaimComparisonSeesWhatEachStoreAnswered(t *testing.T) {
	t.Parallel()
	// The shadow's look at MySQL runs beside the decider's claim; the
	// legacy claim's deduct writes the claim into MySQL, and a look after
	// it would find the claim (settled) rather than "never held". The
	// case under test is the look before it: the decider's claim of
	// "redis-only" waits until MySQL's shadow has answered.
	looked := make(chan struct{})
	b := setup(t, options{shadowTimeout: 5 * time.Second,
		wrapMySQL: func(s reservation.Store) reservation.Store { return afterShadowClaim{s, "redis-only", looked} },
		wrapRedis: func(s reservation.Store) reservation.Store { return beforeClaim{s, "redis-only", looked} }})
	b.stock(t, 1, 1, 10)
	ctx := context.Background()

	b.mustReserve(t, "both", line(1, 2))
	b.drain(t) // MySQL's shadow hold is in place before the claim
	both, err := b.claim(ctx, "both")
	if err != nil || both.Outcome != reservation.OutcomeClaimed || len(both.Allocations) == 0 {
		t.Fatalf("claim of a held cart: %+v %v", both, err)
	}
	// A hold placed in Redis behind the facade's back: MySQL never saw it.
	if _, err := b.rd.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "redis-only", Lines: line(1, 1), TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	alone, err := b.claim(ctx, "redis-only")
	if err != nil || alone.Outcome != reservation.OutcomeClaimed {
		t.Fatalf("claim of the cart only Redis held: %+v %v", alone, err)
	}
	b.drain(t)

	got := b.rec.byToken(compare.OpClaim)

	o, ok := got["both"]
	if !ok {
		t.Fatal("no observation of the claim both stores held")
	}
	if o.Authority.Err != nil || o.Authority.Result != compare.ResultClaimed || !slices.Equal(o.Authority.Allocations, both.Allocations) {
		t.Errorf("the decider's side of the claim: %+v, want claimed with %v", o.Authority, both.Allocations)
	}
	if o.Shadow.Err != nil || o.Shadow.Result != compare.ResultSettled || !slices.Equal(o.Shadow.Allocations, both.Allocations) {
		t.Errorf("the shadow's side of the claim: %+v, want settled with what its hold held, %v", o.Shadow, both.Allocations)
	}
	if c := compare.Classify(o, compare.DefaultRules); c != compare.ClassMatch {
		t.Errorf("the claim both stores held: %s, want match", c)
	}

	o, ok = got["redis-only"]
	if !ok {
		t.Fatal("no observation of the claim only Redis held")
	}
	if o.Authority.Result != compare.ResultClaimed || !errors.Is(o.Shadow.Err, reservation.ErrNotFound) {
		t.Errorf("the claim only Redis held: authority %+v, shadow %+v; want claimed and not found", o.Authority, o.Shadow)
	}
	if c := compare.Classify(o, compare.DefaultRules); c != compare.ClassShadowMissing {
		t.Errorf("the claim only Redis held: %s, want shadow_missing", c)
	}
}

// afterShadowClaim closes done once the shadow claim of token answered.
type afterShadowClaim struct {
	reservation.Store
	token string
	done  chan struct{}
}

func (s afterShadowClaim) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, p)
	if p.Token == s.token && p.As == reservation.AsShadow {
		close(s.done)
	}
	return res, err
}

// beforeClaim holds the claim of token as authority until ready is closed
// (at most a few seconds: a test that never closes it fails on its own).
type beforeClaim struct {
	reservation.Store
	token string
	ready chan struct{}
}

func (s beforeClaim) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	if p.Token == s.token && p.As == reservation.AsAuthority {
		select {
		case <-s.ready:
		case <-time.After(5 * time.Second):
		}
	}
	return s.Store.Claim(ctx, p)
}
