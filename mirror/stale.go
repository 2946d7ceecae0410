package mirror

import (
	"sync"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// A cart is asked about against the state Redis has when the relay comes
// to it, and that must be the state MySQL decided the cart from. A change
// carries its reservation's current state, not the state it recorded: a
// reservation released or expired by the time its change was read is
// applied as released or expired, its units back in stock, whichever of
// its changes is being delivered. If that release came after a cart's
// decision (its StateSince not before the cart's Written), MySQL decided
// the cart while the units were still held, and Redis, asked about the
// cart after the release was applied, could answer differently from MySQL
// for no fault of either. (A claim changes no availability: held units
// become deducted ones.)
//
// So the relay remembers, per shop, the latest release or expiry it has
// applied, in this read or an earlier one, and does not ask about a cart
// decided at or before it. At a lag of milliseconds this is rare; after a
// backlog it is not, and such differences would count against the
// rollout's gates. A release in the same millisecond as the cart's change
// counts as after it: a comparison left out is better than a false
// difference. Written is when the deciding transaction wrote the change,
// a moment after it took its units; a release in between is not caught, a
// window of one transaction. The memory is the process's: a relay that has
// just taken
// the lease over starts without it, and may compare a cart stale for the
// changes its predecessor applied.

// releasedShops is, per shop, the StateSince of the latest release or
// expiry the relay applied.
type releasedShops struct {
	mu     sync.Mutex
	latest map[int64]time.Time
}

// forgetAfter is how far behind the changes being read a shop's latest
// release must be to be forgotten: far longer than any transaction that
// decides a cart, so that no cart written later can have been decided
// before it.
const forgetAfter = time.Minute

// dropStale drops, in place, the carts of changes whose evaluation would
// not see the state MySQL decided from, records the releases and expiries
// among changes, and returns how many carts it dropped. Changes are in
// the order they are applied, each cart asked about before its own change.
func (r *releasedShops) dropStale(changes []reservation.Change) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.latest == nil {
		r.latest = make(map[int64]time.Time)
	}
	dropped := 0
	var newest time.Time
	for i := range changes {
		c := &changes[i]
		if c.Written.After(newest) {
			newest = c.Written
		}
		if c.Kind != reservation.ChangeState {
			continue
		}
		if at, ok := r.latest[c.Shop]; ok && len(c.Cart) > 0 && !at.Before(c.Written) {
			c.Cart, c.CartLabel = nil, ""
			dropped++
		}
		if (c.State == reservation.StateReleased || c.State == reservation.StateExpired) && c.StateSince.After(r.latest[c.Shop]) {
			r.latest[c.Shop] = c.StateSince
		}
	}
	for shop, at := range r.latest {
		if at.Before(newest.Add(-forgetAfter)) {
			delete(r.latest, shop)
		}
	}
	return dropped
}
