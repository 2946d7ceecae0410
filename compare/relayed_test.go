package compare_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/reservation"
)

// The relay's observation of a compared reserve: MySQL's answer read from
// the reservation's state (refused is insufficient with its short lines,
// any other state was a reserve with its allocations), Redis's from its
// evaluation; nothing for a change without a cart or whose record is gone.
func TestRelayedReserve(t *testing.T) {
	t.Parallel()
	cart := []reservation.Line{{Item: 1, Quantity: 2, Locations: []int64{1}}}
	allocs := []reservation.Allocation{{Item: 1, Location: 1, Quantity: 2}}
	short := []reservation.ShortLine{{Item: 1, Requested: 2, Unheld: 1}}
	change := func(st reservation.State) reservation.Change {
		c := reservation.Change{Kind: reservation.ChangeState, Shop: 42, Token: "t", State: st, Cart: cart, CartLabel: "mysql"}
		if st == reservation.StateRefused {
			c.Short = short
		} else {
			c.Allocations = allocs
		}
		return c
	}
	reserved := reservation.ReserveResult{Status: reservation.StatusReserved, Allocations: allocs}
	for _, st := range []reservation.State{reservation.StateHeld, reservation.StateClaimed, reservation.StateReleased, reservation.StateExpired} {
		o, ok := compare.RelayedReserve("p", change(st), reserved, nil)
		want := compare.Observation{Op: compare.OpReserve, Pod: "p", Shop: 42, Token: "t", Mode: "mysql", Relayed: true,
			Authority: compare.Outcome{Store: "mysql", Result: compare.ResultReserved, Allocations: allocs},
			Shadow:    compare.Outcome{Store: "redis", Result: compare.ResultReserved, Allocations: allocs}}
		if !ok || !reflect.DeepEqual(o, want) {
			t.Errorf("%s: %+v %v\nwant %+v", st, o, ok, want)
		}
		if c := compare.Classify(o, compare.DefaultRules); c != compare.ClassMatch {
			t.Errorf("%s: class %s, want match", st, c)
		}
	}
	o, ok := compare.RelayedReserve("p", change(reservation.StateRefused), reserved, nil)
	if !ok || o.Authority.Result != compare.ResultInsufficient || !reflect.DeepEqual(o.Authority.Short, short) || o.Authority.Allocations != nil {
		t.Errorf("refused: %+v %v", o, ok)
	}
	boom := errors.New("redis down")
	if o, ok := compare.RelayedReserve("p", change(reservation.StateHeld), reservation.ReserveResult{}, boom); !ok || o.Shadow.Err != boom || o.Shadow.Result != "" {
		t.Errorf("an evaluation that failed: %+v %v", o, ok)
	} else if c := compare.Classify(o, compare.DefaultRules); c != compare.ClassShadowError {
		t.Errorf("an evaluation that failed: class %s, want shadow_error", c)
	}
	noCart := change(reservation.StateHeld)
	noCart.Cart = nil
	gone := change("")
	for name, c := range map[string]reservation.Change{"no cart": noCart, "record gone": gone} {
		if o, ok := compare.RelayedReserve("p", c, reserved, nil); ok {
			t.Errorf("%s: observed %+v", name, o)
		}
	}
}

// A relayed observation is counted like any other, but its latencies,
// which nobody measured, are not: they would pull both sides' means (and
// the latency gate) towards zero.
func TestRelayedObservationsRecordNoLatency(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := ctxT(t)
	c, reg := newComparer(t, db.DB, compare.Config{})
	now := time.Now()
	c.Observe(matchObs("p1", "mysql", now))
	r := matchObs("p1", "mysql", now)
	r.Relayed, r.Authority.Latency, r.Shadow.Latency = true, 0, 0
	c.Observe(r)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	tot, err := c.Totals(ctx, "p1", now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	live := tot.Live()
	a, s := live.Latency[compare.SideAuthority], live.Latency[compare.SideShadow]
	if live.Observations != 2 || a.Count != 1 || s.Count != 1 || a.Mean != time.Millisecond || s.Mean != 3*time.Millisecond {
		t.Errorf("%d observations, latency authority %+v, shadow %+v; want 2, and one sample each (1 ms, 3 ms)", live.Observations, a, s)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	samples := uint64(0)
	for _, mf := range mfs {
		if mf.GetName() == "reservoir_compare_latency_seconds" {
			for _, m := range mf.GetMetric() {
				samples += m.GetHistogram().GetSampleCount()
			}
		}
	}
	if samples != 2 {
		t.Errorf("%d latency samples, want 2 (the unrelayed observation's two sides)", samples)
	}
}
