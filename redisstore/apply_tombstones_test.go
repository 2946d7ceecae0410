package redisstore_test

import (
	"testing"

	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/reservation"
)

// reservoir_redis_tombstones_written_total{state} counts the reservations
// that reached a terminal state in this Redis, also those the relay brings
// from MySQL: each tombstone an applied change writes (or a claim that
// converts an earlier tombstone) counts once under its state, and a change
// that writes none (a hold created, a redelivered terminal state) counts
// nothing. An operator compares it with MySQL's count while MySQL decides.
func TestApplyCountsTheTombstonesItWrites(t *testing.T) {
	t.Parallel()
	b := setup(t, testredis.New)
	f := newFeed()
	written := func(st reservation.State) float64 {
		t.Helper()
		return b.counter(t, "reservoir_redis_tombstones_written_total", "state", string(st))
	}
	want := func(when string, claimed, released, expired, refused float64) {
		t.Helper()
		for st, n := range map[reservation.State]float64{reservation.StateClaimed: claimed, reservation.StateReleased: released,
			reservation.StateExpired: expired, reservation.StateRefused: refused} {
			if got := written(st); got != n {
				t.Errorf("%s: tombstones written{state=%s} = %v, want %v", when, st, got, n)
			}
		}
	}

	changes := []reservation.Change{
		f.state("held", reservation.StateHeld, alloc(1, 1, 1)),
		f.state("claimed", reservation.StateClaimed, alloc(1, 1, 2)),
		f.state("released", reservation.StateHeld, alloc(1, 1, 1)),
		f.state("released", reservation.StateReleased, alloc(1, 1, 1)),
		f.state("expired", reservation.StateExpired, alloc(1, 1, 1)),
		{ID: f.next(), Kind: reservation.ChangeState, Shop: shop, Token: "refused", State: reservation.StateRefused,
			Short: []reservation.ShortLine{{Item: 1, Requested: 9, Unheld: 5}}},
	}
	b.apply(t, changes...)
	want("after the relayed changes", 1, 1, 1, 1)
	if n := written(reservation.StateHeld); n != 0 {
		t.Errorf("tombstones written{state=held} = %v after holds were created, want 0", n)
	}

	b.apply(t, changes...) // a redelivery writes nothing
	want("after the same changes again", 1, 1, 1, 1)

	// A claim of a token Redis saw released converts its tombstone: one
	// more reservation claimed here.
	b.apply(t, f.state("released", reservation.StateClaimed, alloc(1, 1, 1)))
	want("after a claim converted a released tombstone", 2, 1, 1, 1)
}
