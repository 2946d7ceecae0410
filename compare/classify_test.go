package compare_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/reservation"
)

const (
	redis = reservation.AuthorityRedis
	mysql = reservation.AuthorityMySQL
)

func alloc(item, loc, q int64) reservation.Allocation {
	return reservation.Allocation{Item: item, Location: loc, Quantity: q}
}

func short(item, requested, unheld int64) reservation.ShortLine {
	return reservation.ShortLine{Item: item, Requested: requested, Unheld: unheld}
}

func ok(store reservation.Authority, result string, as ...reservation.Allocation) compare.Outcome {
	return compare.Outcome{Store: store, Result: result, Allocations: as}
}

func insufficient(store reservation.Authority, lines ...reservation.ShortLine) compare.Outcome {
	return compare.Outcome{Store: store, Result: compare.ResultInsufficient, Short: lines}
}

func failed(store reservation.Authority, err error) compare.Outcome {
	return compare.Outcome{Store: store, Err: err}
}

func wrapped(err error) error { return fmt.Errorf("somestore: shop 1 token %q: %w", "t", err) }

var (
	errConn  = errors.New("dial tcp 127.0.0.1:33306: connection refused")
	a1       = alloc(1, 1, 2)
	a1at2    = alloc(1, 2, 2)
	a2       = alloc(2, 1, 1)
	reserved = ok(redis, compare.ResultReserved, a1, a2)
)

func TestClassify(t *testing.T) {
	t.Parallel()
	type tc struct {
		name string
		op   compare.Op
		a, s compare.Outcome
		r    compare.Rules
		want compare.Class
	}
	skipped := compare.Outcome{Store: mysql, Skipped: true}
	timedOut := compare.Outcome{Store: mysql, TimedOut: true, Err: context.DeadlineExceeded}
	panicked := compare.Outcome{Store: mysql, Panicked: true, Err: errors.New("panic: boom")}
	cases := []tc{
		// 10. match
		{"reserve same allocations", compare.OpReserve, reserved, ok(mysql, "reserved", a1, a2), compare.Rules{}, compare.ClassMatch},
		{"reserve same allocations in another order and split", compare.OpReserve, reserved,
			ok(mysql, "reserved", a2, alloc(1, 1, 1), alloc(1, 1, 1)), compare.Rules{}, compare.ClassMatch},
		{"both insufficient (short lines are not compared)", compare.OpReserve, insufficient(redis, short(1, 5, 4)),
			insufficient(mysql, short(1, 5, 0)), compare.Rules{}, compare.ClassMatch},
		{"claimed vs settled is one answer", compare.OpClaim, ok(redis, "claimed", a1), ok(mysql, "settled", a1), compare.Rules{}, compare.ClassMatch},
		{"both not_released", compare.OpRelease, ok(redis, "not_released"), ok(mysql, "not_released"), compare.Rules{}, compare.ClassMatch},
		{"both adjusted", compare.OpAdjust, ok(redis, "adjusted"), ok(mysql, "adjusted"), compare.Rules{}, compare.ClassMatch},
		{"same domain error: token conflict", compare.OpReserve, failed(redis, wrapped(reservation.ErrTokenConflict)),
			failed(mysql, reservation.ErrTokenConflict), compare.Rules{}, compare.ClassMatch},
		{"same domain error: claim of unknown token", compare.OpClaim, failed(redis, wrapped(reservation.ErrNotFound)),
			failed(mysql, wrapped(reservation.ErrNotFound)), compare.Rules{}, compare.ClassMatch},
		{"same validation error", compare.OpReserve, failed(redis, &reservation.ValidationError{Field: "ttl"}),
			failed(mysql, &reservation.ValidationError{Field: "ttl"}), compare.Rules{}, compare.ClassMatch},

		// 9. allocation_mismatch
		{"reserve served from another location", compare.OpReserve, reserved, ok(mysql, "reserved", a1at2, a2), compare.Rules{}, compare.ClassAllocationMismatch},
		{"reserve with a line missing", compare.OpReserve, reserved, ok(mysql, "reserved", a1), compare.Rules{}, compare.ClassAllocationMismatch},
		{"claim deducted other allocations than the shadow held", compare.OpClaim, ok(mysql, "claimed", a1), ok(redis, "settled", a1at2), compare.Rules{}, compare.ClassAllocationMismatch},
		{"release gave back other quantities", compare.OpRelease, ok(redis, "released", a1), ok(mysql, "released", alloc(1, 1, 3)), compare.Rules{}, compare.ClassAllocationMismatch},

		// 8. outcome_mismatch
		{"authority answered, shadow not asked (a facade bug)", compare.OpRelease, ok(redis, "released", a1),
			compare.Outcome{Store: mysql}, compare.Rules{}, compare.ClassOutcomeMismatch},
		{"reserved vs insufficient far from the request", compare.OpReserve, reserved,
			insufficient(mysql, short(1, 10, 2)), compare.Rules{}, compare.ClassOutcomeMismatch},
		{"insufficient with stock it says it has", compare.OpReserve, reserved,
			insufficient(mysql, short(1, 2, 2)), compare.Rules{}, compare.ClassOutcomeMismatch},
		{"insufficient without short lines", compare.OpReserve, reserved, insufficient(mysql), compare.Rules{}, compare.ClassOutcomeMismatch},
		{"race class off", compare.OpReserve, reserved, insufficient(mysql, short(1, 2, 1)), compare.Rules{RaceMargin: -1}, compare.ClassOutcomeMismatch},
		{"one short line near, one far", compare.OpReserve, reserved,
			insufficient(mysql, short(1, 2, 1), short(2, 30, 3)), compare.Rules{}, compare.ClassOutcomeMismatch},
		// The caller's claim overtook the reserve's shadow: nothing to
		// compare. Only for a reserve the authority reserved.
		{"shadow reserve overtaken by the claim", compare.OpReserve, reserved, failed(mysql, wrapped(reservation.ErrAlreadyClaimed)), compare.Rules{}, compare.ClassShadowLate},
		{"shadow reserve overtaken by the release", compare.OpReserve, reserved, failed(mysql, wrapped(reservation.ErrReleased)), compare.Rules{}, compare.ClassShadowLate},
		{"already claimed against a refusal", compare.OpReserve, ok(redis, "insufficient"), failed(mysql, reservation.ErrAlreadyClaimed), compare.Rules{}, compare.ClassOutcomeMismatch},
		{"shadow holds other lines for the token", compare.OpReserve, reserved, failed(mysql, reservation.ErrTokenConflict), compare.Rules{}, compare.ClassOutcomeMismatch},
		{"authority conflict, shadow reserved", compare.OpReserve, failed(redis, reservation.ErrTokenConflict), ok(mysql, "reserved", a1), compare.Rules{}, compare.ClassOutcomeMismatch},
		{"different domain errors", compare.OpReserve, failed(redis, reservation.ErrTokenConflict), failed(mysql, reservation.ErrAlreadyClaimed), compare.Rules{}, compare.ClassOutcomeMismatch},
		{"shadow rejects what the authority took (limits)", compare.OpReserve, reserved,
			failed(mysql, &reservation.ValidationError{Field: "lines[0].quantity"}), compare.Rules{}, compare.ClassOutcomeMismatch},
		{"shadow settle says expired (authority-only error)", compare.OpClaim, ok(redis, "claimed", a1), failed(mysql, reservation.ErrExpired), compare.Rules{}, compare.ClassOutcomeMismatch},
		{"authority expired, shadow settled", compare.OpClaim, failed(redis, reservation.ErrExpired), ok(mysql, "settled", a1), compare.Rules{}, compare.ClassOutcomeMismatch},
		{"authority found nothing, shadow released", compare.OpRelease, ok(redis, "not_released"), ok(mysql, "released", a1), compare.Rules{}, compare.ClassOutcomeMismatch},
		{"shadow ledger short on adjust", compare.OpAdjust, ok(redis, "adjusted"), failed(mysql, reservation.ErrInsufficientStock), compare.Rules{}, compare.ClassOutcomeMismatch},

		// 7. stockout_race
		{"shadow one unit short of a one-unit line", compare.OpReserve, ok(redis, "reserved", alloc(1, 1, 1)),
			insufficient(mysql, short(1, 1, 0)), compare.Rules{}, compare.ClassStockoutRace},
		{"authority short, shadow reserved", compare.OpReserve, insufficient(redis, short(1, 2, 0)),
			ok(mysql, "reserved", alloc(1, 1, 2)), compare.Rules{}, compare.ClassStockoutRace},
		{"every short line near", compare.OpReserve, reserved,
			insufficient(mysql, short(1, 2, 1), short(2, 30, 27)), compare.Rules{}, compare.ClassStockoutRace},
		{"fraction widens the margin for big lines", compare.OpReserve, reserved,
			insufficient(mysql, short(1, 100, 90)), compare.Rules{}, compare.ClassStockoutRace},
		{"just outside the fraction", compare.OpReserve, reserved,
			insufficient(mysql, short(1, 100, 89)), compare.Rules{}, compare.ClassOutcomeMismatch},
		{"a wider margin", compare.OpReserve, reserved,
			insufficient(mysql, short(1, 10, 2)), compare.Rules{RaceMargin: 8}, compare.ClassStockoutRace},

		// 6. shadow_missing
		{"claim of a reservation the shadow never saw", compare.OpClaim, ok(redis, "claimed", a1),
			failed(mysql, wrapped(reservation.ErrNotFound)), compare.Rules{}, compare.ClassShadowMissing},
		{"release, shadow had nothing", compare.OpRelease, ok(redis, "released", a1), ok(mysql, "not_released"), compare.Rules{}, compare.ClassShadowMissing},
		{"release, shadow not found", compare.OpRelease, ok(redis, "released", a1), failed(mysql, reservation.ErrNotFound), compare.Rules{}, compare.ClassShadowMissing},
		{"adjust of an item x location the shadow lacks", compare.OpAdjust, ok(redis, "adjusted"), failed(mysql, reservation.ErrNotFound), compare.Rules{}, compare.ClassShadowMissing},

		// 5. shadow_error
		{"shadow connection refused", compare.OpReserve, reserved, failed(mysql, errConn), compare.Rules{}, compare.ClassShadowError},
		{"shadow contention is a failure, not an answer", compare.OpReserve, reserved, failed(mysql, wrapped(reservation.ErrContention)), compare.Rules{}, compare.ClassShadowError},
		{"shadow cancelled", compare.OpClaim, ok(redis, "claimed", a1), failed(mysql, context.Canceled), compare.Rules{}, compare.ClassShadowError},

		// 4. shadow_panic
		{"shadow panicked", compare.OpReserve, reserved, panicked, compare.Rules{}, compare.ClassShadowPanic},

		// 3. shadow_timeout
		{"shadow timed out", compare.OpReserve, reserved, timedOut, compare.Rules{}, compare.ClassShadowTimeout},
		{"shadow deadline error without the flag", compare.OpRelease, ok(redis, "released"),
			failed(mysql, fmt.Errorf("mysqlstore: release: %w", context.DeadlineExceeded)), compare.Rules{}, compare.ClassShadowTimeout},

		// 2. shadow_skipped
		{"shadow skipped", compare.OpReserve, reserved, skipped, compare.Rules{}, compare.ClassShadowSkipped},

		// 1. authority_error
		{"authority connection refused", compare.OpReserve, failed(redis, errConn), ok(mysql, "reserved", a1), compare.Rules{}, compare.ClassAuthorityError},
		{"authority contention", compare.OpReserve, failed(redis, reservation.ErrContention), insufficient(mysql, short(1, 1, 0)), compare.Rules{}, compare.ClassAuthorityError},
		{"authority refused a claim, shadow not asked", compare.OpClaim, failed(redis, wrapped(reservation.ErrExpired)),
			compare.Outcome{Store: mysql}, compare.Rules{}, compare.ClassAuthorityError},
		{"authority found no claim, shadow not asked", compare.OpClaim, failed(mysql, reservation.ErrNotFound),
			compare.Outcome{Store: redis}, compare.Rules{}, compare.ClassAuthorityError},
		{"authority deadline", compare.OpClaim, failed(mysql, context.DeadlineExceeded), ok(redis, "settled"), compare.Rules{}, compare.ClassAuthorityError},

		// Precedence: each row has the faults of every later rule too.
		{"authority error beats skipped", compare.OpReserve, failed(redis, errConn), skipped, compare.Rules{}, compare.ClassAuthorityError},
		{"skipped beats timeout", compare.OpReserve, reserved, compare.Outcome{Skipped: true, TimedOut: true, Panicked: true, Err: errConn}, compare.Rules{}, compare.ClassShadowSkipped},
		{"timeout beats panic", compare.OpReserve, reserved, compare.Outcome{TimedOut: true, Panicked: true, Err: errConn}, compare.Rules{}, compare.ClassShadowTimeout},
		{"panic beats error", compare.OpReserve, reserved, compare.Outcome{Panicked: true, Err: errConn}, compare.Rules{}, compare.ClassShadowPanic},
		{"error beats missing", compare.OpClaim, ok(redis, "claimed", a1), failed(mysql, errors.Join(errConn, reservation.ErrContention)), compare.Rules{}, compare.ClassShadowError},
		{"missing beats outcome", compare.OpRelease, ok(redis, "released", a1), ok(mysql, "not_released", a1at2), compare.Rules{}, compare.ClassShadowMissing},
		{"race beats outcome, outcome beats allocation", compare.OpReserve, ok(redis, "reserved", a1),
			compare.Outcome{Store: mysql, Result: "insufficient", Short: []reservation.ShortLine{short(1, 2, 1)}, Allocations: []reservation.Allocation{a1at2}},
			compare.Rules{}, compare.ClassStockoutRace},
		{"outcome beats allocation", compare.OpClaim, failed(redis, reservation.ErrExpired), ok(mysql, "settled", a1at2), compare.Rules{}, compare.ClassOutcomeMismatch},
	}
	seen := map[compare.Class]bool{}
	at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := compare.Classify(compare.Observation{Op: c.op, Pod: "p1", Mode: "shadow", Authority: c.a, Shadow: c.s}, c.r)
			if got != c.want {
				t.Errorf("Classify = %s, want %s\nauthority %+v\nshadow    %+v", got, c.want, c.a, c.s)
			}
			// The same call a minute after its shop's route changed: only
			// a shadow missing the reservation becomes pre_switch (it may
			// predate the switch); every other verdict stands.
			want := c.want
			if want == compare.ClassShadowMissing {
				want = compare.ClassPreSwitch
			}
			o := compare.Observation{Op: c.op, Pod: "p1", Mode: "shadow", At: at, Switched: at.Add(-time.Minute), Authority: c.a, Shadow: c.s}
			if got := compare.Classify(o, c.r); got != want {
				t.Errorf("a minute after a switch: Classify = %s, want %s", got, want)
			}
			seen[want] = true
		})
		seen[c.want] = true
	}
	for _, cl := range compare.Classes {
		if !seen[cl] {
			t.Errorf("no case for class %s", cl)
		}
	}
}

func TestRulesMarginAndValidate(t *testing.T) {
	t.Parallel()
	if r := compare.DefaultRules; r.RaceMargin != 2 || r.RaceFraction != 0.1 {
		t.Errorf("DefaultRules = %+v", r)
	}
	if err := (compare.Rules{RaceFraction: 1.5}).Validate(); err == nil || !strings.Contains(err.Error(), "RaceFraction") {
		t.Errorf("Validate(RaceFraction 1.5) = %v, want an error naming RaceFraction", err)
	}
	// A negative fraction leaves the unit margin alone.
	o := compare.Observation{Op: compare.OpReserve, Authority: reserved, Shadow: insufficient(mysql, short(1, 100, 97))}
	if got := compare.Classify(o, compare.Rules{RaceFraction: -1}); got != compare.ClassOutcomeMismatch {
		t.Errorf("no fraction, 3 short of 100 with margin 2: %s, want outcome_mismatch", got)
	}
	if got := compare.Classify(o, compare.Rules{}); got != compare.ClassStockoutRace {
		t.Errorf("default fraction, 3 short of 100: %s, want stockout_race", got)
	}
}

func TestClassHelpers(t *testing.T) {
	t.Parallel()
	for _, cl := range compare.Classes {
		m := cl == compare.ClassOutcomeMismatch || cl == compare.ClassAllocationMismatch || cl == compare.ClassShadowMissing
		f := cl == compare.ClassShadowError || cl == compare.ClassShadowPanic || cl == compare.ClassShadowTimeout
		if cl.Mismatch() != m || cl.ShadowFault() != f {
			t.Errorf("%s: Mismatch %v ShadowFault %v", cl, cl.Mismatch(), cl.ShadowFault())
		}
	}
	for mode, want := range map[string]bool{"calibration": true, "calibration_mysql": true, "shadow": false, "calibrationx": false, "": false} {
		if compare.IsCalibration(mode) != want {
			t.Errorf("IsCalibration(%q) = %v", mode, !want)
		}
	}
}

// A shadow missing a reservation is pre_switch only within one hold
// lifetime (Rules.SwitchWindow) of its shop's route change: after that no
// hold made before the switch can still be claimed, and the shadow lost it.
func TestClassifyPreSwitchWindow(t *testing.T) {
	t.Parallel()
	switched := time.Date(2025, 3, 4, 5, 0, 0, 0, time.UTC)
	missing := func(at time.Time, sw time.Time) compare.Observation {
		return compare.Observation{Op: compare.OpClaim, At: at, Switched: sw, Authority: ok(redis, "claimed", a1),
			Shadow: failed(mysql, wrapped(reservation.ErrNotFound))}
	}
	for _, c := range []struct {
		name string
		o    compare.Observation
		r    compare.Rules
		want compare.Class
	}{
		{"no switch seen", missing(switched.Add(time.Minute), time.Time{}), compare.Rules{}, compare.ClassShadowMissing},
		{"at the switch", missing(switched, switched), compare.Rules{}, compare.ClassPreSwitch},
		{"just inside the default hour", missing(switched.Add(time.Hour-time.Millisecond), switched), compare.Rules{}, compare.ClassPreSwitch},
		{"one hold lifetime after", missing(switched.Add(time.Hour), switched), compare.Rules{}, compare.ClassShadowMissing},
		{"a shorter window", missing(switched.Add(11*time.Minute), switched), compare.Rules{SwitchWindow: 10 * time.Minute}, compare.ClassShadowMissing},
		{"window off", missing(switched.Add(time.Second), switched), compare.Rules{SwitchWindow: -1}, compare.ClassShadowMissing},
		{"no time: judged at the switch", missing(time.Time{}, switched), compare.Rules{}, compare.ClassPreSwitch},
	} {
		if got := compare.Classify(c.o, c.r); got != c.want {
			t.Errorf("%s: Classify = %s, want %s", c.name, got, c.want)
		}
	}
	if compare.DefaultRules.SwitchWindow != reservation.DefaultLimits.MaxTTL {
		t.Errorf("DefaultRules.SwitchWindow = %s, want the longest hold %s", compare.DefaultRules.SwitchWindow, reservation.DefaultLimits.MaxTTL)
	}
	if compare.ClassPreSwitch.Mismatch() || compare.ClassPreSwitch.ShadowFault() {
		t.Error("pre_switch counts as a mismatch or a shadow fault: the gates would hold a stage for reservations made before it")
	}
}
