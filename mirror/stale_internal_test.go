package mirror

import (
	"testing"

	"github.com/seed31b0e981/reservoir/reservation"
)

// A cart is asked about only when every change before it in the read was
// applied in a state the cart's decision could have seen: a reservation
// released or expired after the decision (its next change comes later in
// the read) is applied early, its units back, and the cart's evaluation
// is dropped. A claim, a refusal, a release that came before the cart, or
// the cart's own reservation does not drop it.
func TestDropStaleCarts(t *testing.T) {
	cart := []reservation.Line{{Item: 1, Quantity: 1, Locations: []int64{1}}}
	st := func(token string, s reservation.State, withCart bool) reservation.Change {
		c := reservation.Change{Kind: reservation.ChangeState, Shop: 1, Token: token, State: s}
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
	)
	for _, tc := range []struct {
		name    string
		changes []reservation.Change
		kept    []bool // per change: has its cart after the call
	}{
		{"x released after t's decision", []reservation.Change{st("x", released, true), st("t", held, true), st("x", released, false)},
			[]bool{true, false, false}},
		{"x expired after t's decision", []reservation.Change{st("x", expired, false), st("t", held, true), st("x", expired, false)},
			[]bool{false, false, false}},
		{"x released before t's decision", []reservation.Change{st("x", released, true), st("x", released, false), st("t", held, true)},
			[]bool{true, false, true}},
		{"x claimed after t's decision", []reservation.Change{st("x", claimed, true), st("t", held, true), st("x", claimed, false)},
			[]bool{true, true, false}},
		{"x still held", []reservation.Change{st("x", held, true), st("t", held, true)},
			[]bool{true, true}},
		{"t released by now itself", []reservation.Change{st("t", released, true), st("u", held, true), st("t", released, false)},
			[]bool{true, false, false}},
		{"another shop's token", []reservation.Change{{Kind: reservation.ChangeState, Shop: 2, Token: "x", State: released},
			st("t", held, true), st("x", held, false)}, []bool{false, true, false}},
		{"an adjust between", []reservation.Change{st("x", released, false), {Kind: reservation.ChangeAdjust, Shop: 1, Delta: 1},
			st("t", held, true), st("x", released, false)}, []bool{false, false, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := 0
			for i, c := range tc.changes {
				if len(c.Cart) > 0 && !tc.kept[i] {
					want++
				}
			}
			if n := dropStaleCarts(tc.changes); n != want {
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
