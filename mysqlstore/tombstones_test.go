package mysqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// reservoir_mysql_tombstones_written_total{state} (docs/api.md, on the
// dashboard) counts every reservation that reached a final state in
// MySQL, once: a claim MySQL decided and a legacy claim (Deduct, while
// Redis decides) alike, a release, a refusal; a replayed Deduct writes
// nothing and counts nothing.
func TestTombstonesWrittenCountEachFinalState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, 10)
	b.stock(t, 1, 1, 10)
	written := func(state reservation.State) float64 {
		return metricSum(t, b, "reservoir_mysql_tombstones_written_total", "state", string(state))
	}
	reserve := func(token string, q int64) reservation.Status {
		t.Helper()
		res, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: token, TTL: time.Minute,
			Lines: []reservation.Line{{Item: 1, Quantity: q, Locations: []int64{1}}}})
		if err != nil {
			t.Fatalf("reserve %s: %v", token, err)
		}
		return res.Status
	}
	if reserve("paid", 1) != reservation.StatusReserved || reserve("gone", 1) != reservation.StatusReserved {
		t.Fatal("reserve: not reserved")
	}
	if reserve("too-many", 9) != reservation.StatusInsufficient {
		t.Fatal("reserve 9 of the 8 left: not refused")
	}
	if _, err := b.s.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "paid"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.s.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: "gone"}); err != nil {
		t.Fatal(err)
	}

	handOff(b.s)(t, shop)
	deduct := func(token string) reservation.DeductResult {
		t.Helper()
		res, err := b.s.Deduct(ctx, &reservation.DeductParams{Shop: shop, Token: token, Allocations: []reservation.Allocation{{Item: 1, Location: 1, Quantity: 1}}})
		if err != nil {
			t.Fatalf("deduct %s: %v", token, err)
		}
		return res
	}
	deduct("legacy-1")
	deduct("legacy-2")
	if deduct("legacy-1").Applied {
		t.Error("a repeated deduct was applied again")
	}

	for state, want := range map[reservation.State]float64{
		reservation.StateClaimed:  3, // paid, legacy-1, legacy-2
		reservation.StateReleased: 1,
		reservation.StateRefused:  1,
	} {
		if got := written(state); got != want {
			t.Errorf("reservoir_mysql_tombstones_written_total{state=%q} = %v, want %v", state, got, want)
		}
	}
}
