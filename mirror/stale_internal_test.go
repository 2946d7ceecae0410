package mirror

import (
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// A cart is asked about only when every change before it in the read was
// applied in a state the cart's decision could have seen: a reservation
// released or expired at or after the decision (StateSince not before the
// cart's Written) is applied early, its units back, and the cart's
// evaluation is dropped, whether the release's own change is in the same
// read or not. A claim, a refusal, a release that came before the cart, a
// release in another shop, or the cart's own reservation does not drop it.
func TestDropStaleCartsInARead(t *testing.T) {
	cart := []reservation.Line{{Item: 1, Quantity: 1, Locations: []int64{1}}}
	t0 := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// st is a state change of shop 1 written at ms, its reservation in
	// state s since ms since.
	st := func(token string, s reservation.State, since, written int, withCart bool) reservation.Change {
		c := reservation.Change{Kind: reservation.ChangeState, Shop: 1, Token: token, State: s, StateSince: at(since), Written: at(written)}
		if withCart {
			c.Cart, c.CartLabel = cart, "mysql"
		}
		return c
	}
	const (
		held     = reservation.StateHeld
		released = reservation.StateReleased
		expired  = reservation.StateExpired
		claimed  = reservation.StateClaimed
		refused  = reservation.StateRefused
	)
	otherShop := st("x", released, 30, 10, false)
	otherShop.Shop = 2
	for _, tc := range []struct {
		name    string
		changes []reservation.Change
		kept    []bool // per change: has its cart after the call
	}{
		{"x released after t's decision, in the same read", []reservation.Change{st("x", released, 30, 10, true), st("t", held, 20, 20, true), st("x", released, 30, 30, false)},
			[]bool{true, false, false}},
		{"x released after t's decision, in the next read", []reservation.Change{st("x", released, 30, 10, true), st("t", held, 20, 20, true)},
			[]bool{true, false}},
		{"x released in the millisecond of t's decision", []reservation.Change{st("x", released, 20, 10, false), st("t", held, 20, 20, true)},
			[]bool{false, false}},
		{"x expired after t's decision", []reservation.Change{st("x", expired, 30, 10, false), st("t", held, 20, 20, true)},
			[]bool{false, false}},
		{"x released before t's decision", []reservation.Change{st("x", released, 15, 10, true), st("x", released, 15, 15, false), st("t", held, 20, 20, true)},
			[]bool{true, false, true}},
		{"x claimed after t's decision", []reservation.Change{st("x", claimed, 30, 10, true), st("t", held, 20, 20, true), st("x", claimed, 30, 30, false)},
			[]bool{true, true, false}},
		{"x refused", []reservation.Change{st("x", refused, 10, 10, true), st("t", held, 20, 20, true)},
			[]bool{true, true}},
		{"x still held", []reservation.Change{st("x", held, 10, 10, true), st("t", held, 20, 20, true)},
			[]bool{true, true}},
		{"t released by now itself", []reservation.Change{st("t", released, 30, 10, true), st("u", held, 20, 20, true), st("t", released, 30, 30, false)},
			[]bool{true, false, false}},
		{"a release in another shop", []reservation.Change{otherShop, st("t", held, 20, 20, true)},
			[]bool{false, true}},
		{"an adjust between", []reservation.Change{st("x", released, 30, 10, false), {Kind: reservation.ChangeAdjust, Shop: 1, Delta: 1, Written: at(15)},
			st("t", held, 20, 20, true)}, []bool{false, false, false}},
		{"a later cart after an earlier one was dropped", []reservation.Change{st("x", released, 30, 10, false), st("t", held, 20, 20, true),
			st("x", released, 30, 30, false), st("u", held, 40, 40, true)}, []bool{false, false, false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := 0
			for i, c := range tc.changes {
				if len(c.Cart) > 0 && !tc.kept[i] {
					want++
				}
			}
			var r releasedShops
			if n := r.dropStale(tc.changes); n != want {
				t.Errorf("dropped %d, want %d", n, want)
			}
			for i, c := range tc.changes {
				if has := len(c.Cart) > 0; has != tc.kept[i] || has != (c.CartLabel != "") {
					t.Errorf("change %d (%s %s): cart %v label %q, want kept %v", i, c.Token, c.State, c.Cart, c.CartLabel, tc.kept[i])
				}
			}
		})
	}
}

// The releases applied in one read are remembered for the next: a cart in
// a later read, decided before a release an earlier read applied, is
// dropped; one decided after it is kept; a release long behind the changes
// being read is forgotten.
func TestDropStaleCartsAcrossReads(t *testing.T) {
	cart := []reservation.Line{{Item: 1, Quantity: 1, Locations: []int64{1}}}
	t0 := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	change := func(shop int64, token string, s reservation.State, since, written time.Time, withCart bool) reservation.Change {
		c := reservation.Change{Kind: reservation.ChangeState, Shop: shop, Token: token, State: s, StateSince: since, Written: written}
		if withCart {
			c.Cart, c.CartLabel = cart, "mysql"
		}
		return c
	}
	var r releasedShops
	ms := time.Millisecond
	// Read 1: x, released since 30 ms (after t's decision at 20 ms).
	if n := r.dropStale([]reservation.Change{change(1, "x", reservation.StateReleased, t0.Add(30*ms), t0.Add(10*ms), false)}); n != 0 {
		t.Fatalf("read 1 dropped %d", n)
	}
	// Read 2: t (decided at 20 ms: stale), u (at 40 ms: kept), v of
	// another shop (kept).
	read2 := []reservation.Change{
		change(1, "t", reservation.StateHeld, t0.Add(20*ms), t0.Add(20*ms), true),
		change(1, "u", reservation.StateHeld, t0.Add(40*ms), t0.Add(40*ms), true),
		change(2, "v", reservation.StateHeld, t0.Add(25*ms), t0.Add(25*ms), true),
	}
	if n := r.dropStale(read2); n != 1 || read2[0].Cart != nil || read2[1].Cart == nil || read2[2].Cart == nil {
		t.Fatalf("read 2 dropped %d: carts %v, %v, %v", n, read2[0].Cart, read2[1].Cart, read2[2].Cart)
	}
	// Read 3, long after: x's release is forgotten, and a cart that
	// claims an old decision (which no real one can) is kept.
	later := t0.Add(forgetAfter + time.Second)
	if n := r.dropStale([]reservation.Change{change(3, "w", reservation.StateHeld, later, later, false)}); n != 0 {
		t.Fatalf("read 3 dropped %d", n)
	}
	old := []reservation.Change{change(1, "y", reservation.StateHeld, t0, t0, true)}
	if n := r.dropStale(old); n != 0 || old[0].Cart == nil {
		t.Errorf("a release a minute behind the feed still drops carts: dropped %d", n)
	}
}
