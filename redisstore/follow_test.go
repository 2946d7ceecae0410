package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// A claim whose Redis half was lost while Redis never held the cart (in
// mysql mode, Redis was down for both the shadow reserve and the shadow
// settle): no hold for the reaper to find, and Redis offers the claimed
// units until a reconcile, or sells them after a kill switch. The claim
// follower finds the claim without a marker and settles it, once.
func TestFollowClaimsSettlesALostRedisHalf(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	ctx := context.Background()
	b.stock(t, 1, 1, 10)
	start := time.Now().Add(-time.Minute)
	d, err := b.ledger.Deduct(ctx, &reservation.DeductParams{Shop: shop, Token: "paid", Allocations: []reservation.Allocation{{Item: 1, Location: 1, Quantity: 3}}})
	if err != nil || !d.Applied {
		t.Fatalf("deduct: %+v %v", d, err)
	}
	if q := b.qty(t, 1, 1); q != 10 {
		t.Fatalf("Redis offers %d before following, want 10 (the lost half)", q)
	}
	if drift := b.drift(t, reservation.AuthorityMySQL); len(drift) != 1 || drift[0].Kind != redisstore.DriftQuantity {
		t.Fatalf("drift before following: %v, want the quantity", drift)
	}
	follow := &redisstore.FollowParams{Since: start, Lag: time.Microsecond}
	res, err := b.s.FollowClaims(ctx, follow)
	if err != nil || res.Checked != 1 || res.Settled != 1 || res.Last.IsZero() {
		t.Fatalf("follow: %+v %v, want 1 checked, 1 settled", res, err)
	}
	if q := b.qty(t, 1, 1); q != 7 {
		t.Errorf("Redis offers %d after following, want 7 (the ledger)", q)
	}
	if drift := b.drift(t, reservation.AuthorityMySQL); len(drift) != 0 {
		t.Errorf("drift after following: %v", drift)
	}
	// Again, and from the last claim seen: checked, settled nothing.
	for _, since := range []time.Time{start, res.Last} {
		again, err := b.s.FollowClaims(ctx, &redisstore.FollowParams{Since: since, Lag: time.Microsecond})
		if err != nil || again.Checked != 1 || again.Settled != 0 {
			t.Errorf("follow again from %s: %+v %v, want 1 checked, 0 settled", since, again, err)
		}
	}
	if q := b.qty(t, 1, 1); q != 7 {
		t.Errorf("Redis offers %d after following twice, want 7", q)
	}
	if n := b.counter(t, "reservoir_redis_follow_settled_total"); n != 1 {
		t.Errorf("follow_settled = %v, want 1", n)
	}
	// A claim younger than the lag is left for its own half.
	if _, err := b.ledger.Deduct(ctx, &reservation.DeductParams{Shop: shop, Token: "fresh", Allocations: []reservation.Allocation{{Item: 1, Location: 1, Quantity: 1}}}); err != nil {
		t.Fatal(err)
	}
	if res, err := b.s.FollowClaims(ctx, &redisstore.FollowParams{Since: start, Lag: time.Hour}); err != nil || res.Checked != 0 {
		t.Errorf("follow with a lag of an hour: %+v %v, want nothing checked", res, err)
	}
}

// Regression case "the follower settles a claim Resync already counted"
// (found in review): Resync rebuilds quantities from the ledger, which
// includes every claim; the follower then found the claim's marker
// missing and took it out a second time. Resync now marks the claims
// within the follower's reach before it reads the ledger.
func TestResyncThenFollowDeductsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	ctx := context.Background()
	b.stock(t, 1, 1, 10)
	if _, err := b.ledger.Deduct(ctx, &reservation.DeductParams{Shop: shop, Token: "paid", Allocations: []reservation.Allocation{{Item: 1, Location: 1, Quantity: 3}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.s.Resync(ctx, &redisstore.ResyncParams{Shops: []int64{shop}, HoldsFrom: reservation.AuthorityMySQL}); err != nil {
		t.Fatal(err)
	}
	if q := b.qty(t, 1, 1); q != 7 {
		t.Fatalf("Redis offers %d after Resync, want 7", q)
	}
	res, err := b.s.FollowClaims(ctx, &redisstore.FollowParams{Since: time.Now().Add(-time.Minute), Lag: time.Microsecond})
	if err != nil || res.Checked != 1 || res.Settled != 0 {
		t.Errorf("follow after Resync: %+v %v, want 1 checked, none settled", res, err)
	}
	if q := b.qty(t, 1, 1); q != 7 {
		t.Errorf("Redis offers %d after following, want 7: the claim was taken out twice", q)
	}
}
