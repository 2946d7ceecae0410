package dualwrite_test

import (
	"context"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// A reservation made while the shop was not compared (redis mode), then
// released once the pod entered shadow mode, is missing from MySQL's shadow
// by design: its observation carries the switch, and the comparer calls it
// pre_switch, out of the shadow_missing gate. One MySQL never saw although
// the shop's route did not change is still shadow_missing.
//
// Releases, not claims: a legacy claim deducts MySQL's ledger, which
// records the cart as claimed there, and the shadow's claim, running beside
// it, answers from that record when it comes second (a match), so a claim's
// class here would depend on which came first.
func TestPreSwitchReservationsAreMarked(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.stock(t, 1, 1, 50)
	ctx := context.Background()

	// In shadow mode from the facade's first call: a hold placed in Redis
	// behind the facade's back is one MySQL lost, as far as anyone knows.
	if _, err := b.rd.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "behind", Lines: line(1, 1), TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	release := func(token string) {
		t.Helper()
		if _, err := b.f.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: token}); err != nil {
			t.Fatal(err)
		}
	}
	release("behind")

	// redis mode: a cart reserved and nothing compared.
	if err := b.modes.SetMode(authority.ModeRedis); err != nil {
		t.Fatal(err)
	}
	b.mustReserve(t, "before", line(1, 2))
	switched := time.Now()
	if err := b.modes.SetMode(authority.ModeShadow); err != nil {
		t.Fatal(err)
	}
	release("before")
	b.drain(t)

	got := b.rec.byToken(compare.OpRelease)
	if o := got["behind"]; !o.Switched.IsZero() || compare.Classify(o, compare.DefaultRules) != compare.ClassShadowMissing {
		t.Errorf("release without a switch: switched %v, class %s; want none and shadow_missing", o.Switched, compare.Classify(o, compare.DefaultRules))
	}
	o := got["before"]
	if o.Switched.Before(switched) || o.Switched.After(o.At) {
		t.Errorf("release after the switch: switched at %v, want between the switch %v and the call %v", o.Switched, switched, o.At)
	}
	if c := compare.Classify(o, compare.DefaultRules); c != compare.ClassPreSwitch {
		t.Errorf("release of a cart reserved before the switch: %s, want pre_switch", c)
	}
}
