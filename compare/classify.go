package compare

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Class is what an observation shows about the two stores.
type Class string

// The classes, in the order of precedence Classify applies (the first that
// fits wins). See Classify for the rules.
const (
	// ClassAuthorityError: the authority failed (not a domain answer): the
	// caller got an error and there is nothing to compare.
	ClassAuthorityError Class = "authority_error"
	// ClassShadowSkipped: the shadow never ran (the facade's bounded pool
	// was full).
	ClassShadowSkipped Class = "shadow_skipped"
	// ClassShadowTimeout: the shadow ran past its deadline.
	ClassShadowTimeout Class = "shadow_timeout"
	// ClassShadowPanic: the shadow panicked (recovered by the facade).
	ClassShadowPanic Class = "shadow_panic"
	// ClassShadowError: the shadow failed with an error that is not a
	// domain answer (connection, contention, a bug).
	ClassShadowError Class = "shadow_error"
	// ClassShadowLate: the shadow's answer comes from a later call of the
	// same token: a reserve's shadow, still running, found the
	// reservation already claimed, released or expired (the caller's
	// next call overtook it, or the relay delivered that call's result
	// first). It says nothing about either store's stock: nothing to
	// compare.
	ClassShadowLate Class = "shadow_late"
	// ClassPreSwitch: what would be ClassShadowMissing, for a call whose
	// shop's route changed less than Rules.SwitchWindow (one hold
	// lifetime) before it (Observation.Switched): the reservation may have
	// been made before the switch, while the shadow was not written (a
	// pod entering shadow mode, a redis_only kill switch released). The
	// shadow missing it is then expected, not a fault of the shadow, so
	// it is kept apart from shadow_missing and out of its gate.
	ClassPreSwitch Class = "pre_switch"
	// ClassShadowMissing: the authority claimed, released or adjusted, and
	// the shadow had no prior state for it (ErrNotFound, or "not_released"),
	// although the shop's route had not changed within one hold lifetime:
	// the shadow lost or never got a reservation made while it was
	// written.
	ClassShadowMissing Class = "shadow_missing"
	// ClassStockoutRace: a reserve where one store said reserved and the
	// other insufficient, and the short side was within Rules' margin of
	// serving every short line: boundary noise while both stores race for
	// the last units.
	ClassStockoutRace Class = "stockout_race"
	// ClassOutcomeMismatch: the two stores gave different answers.
	ClassOutcomeMismatch Class = "outcome_mismatch"
	// ClassAllocationMismatch: the same answer with different allocations.
	ClassAllocationMismatch Class = "allocation_mismatch"
	// ClassMatch: the same answer and the same allocations.
	ClassMatch Class = "match"
)

// Classes lists every class, in the order of precedence.
var Classes = []Class{
	ClassAuthorityError, ClassShadowSkipped, ClassShadowTimeout, ClassShadowPanic,
	ClassShadowError, ClassShadowLate, ClassPreSwitch, ClassShadowMissing, ClassStockoutRace, ClassOutcomeMismatch,
	ClassAllocationMismatch, ClassMatch,
}

// Mismatch reports whether c is a disagreement between the stores about the
// state (outcome, allocation, missing), as opposed to a match, a shadow
// fault, an authority failure or stock-out noise.
func (c Class) Mismatch() bool {
	return c == ClassOutcomeMismatch || c == ClassAllocationMismatch || c == ClassShadowMissing
}

// ShadowFault reports whether c is the shadow failing to answer in time
// (error, panic, timeout). A skipped shadow is not a fault of the shadow
// store: the facade chose not to run it.
func (c Class) ShadowFault() bool {
	return c == ClassShadowError || c == ClassShadowPanic || c == ClassShadowTimeout
}

// Rules tune Classify. The zero value of each field takes its default (see
// WithDefaults); DefaultRules holds them.
type Rules struct {
	// RaceMargin is how many units short a line may be and still count as
	// stock-out noise: a short line qualifies when
	//
	//	Requested - margin <= Unheld < Requested,
	//	margin = max(RaceMargin, ceil(RaceFraction × Requested)).
	//
	// Default: 2. Negative: never classify as ClassStockoutRace (every
	// reserved-vs-insufficient is ClassOutcomeMismatch).
	RaceMargin int64
	// RaceFraction widens the margin for large lines, as a fraction of the
	// requested quantity (see RaceMargin). Default: 0.1. Negative: no
	// fractional widening. At most 1.
	RaceFraction float64
	// SwitchWindow is how long after a change of its shop's route
	// (Observation.Switched) a shadow missing a reservation counts as
	// ClassPreSwitch rather than ClassShadowMissing: the longest a hold
	// made before the switch can still be claimed or released. Default:
	// reservation.DefaultLimits.MaxTTL (1h). Negative: never pre_switch.
	SwitchWindow time.Duration
}

// DefaultRules are the rules with every default applied.
var DefaultRules = Rules{}.WithDefaults()

// WithDefaults returns r with zero fields set to their defaults.
func (r Rules) WithDefaults() Rules {
	if r.RaceMargin == 0 {
		r.RaceMargin = 2
	}
	if r.RaceFraction == 0 {
		r.RaceFraction = 0.1
	}
	if r.SwitchWindow == 0 {
		r.SwitchWindow = reservation.DefaultLimits.MaxTTL
	}
	return r
}

// Validate reports a rule that makes no sense, naming the field.
func (r Rules) Validate() error {
	if r.RaceFraction > 1 || math.IsNaN(r.RaceFraction) {
		return fmt.Errorf("RaceFraction must be at most 1 (a fraction of the requested quantity), got %v", r.RaceFraction)
	}
	return nil
}

// margin is how far below the requested quantity a short line's unheld
// stock may be for the line to count as stock-out noise; negative when the
// race class is off.
func (r Rules) margin(requested int64) int64 {
	if r.RaceMargin < 0 {
		return -1
	}
	m := r.RaceMargin
	if r.RaceFraction > 0 {
		m = max(m, int64(math.Ceil(r.RaceFraction*float64(requested))))
	}
	return m
}

// Classify says what an observation shows. It is pure: it reads o and r
// only (zero fields of r take their defaults). The first rule that fits
// wins:
//
//  1. authority_error: the authority's Err is not a domain answer (see
//     below), or it is one and the shadow was not asked (its Outcome is
//     empty: no result, no error, no flag; the facade does not follow a
//     claim or release the authority refused). The caller got an error;
//     there is nothing to compare.
//  2. shadow_skipped: Shadow.Skipped.
//  3. shadow_timeout: Shadow.TimedOut, or the shadow's Err is
//     context.DeadlineExceeded.
//  4. shadow_panic: Shadow.Panicked.
//  5. shadow_error: the shadow's Err is not a domain answer.
//  6. shadow_late: a reserve the authority reserved and the shadow
//     answered with a later state of the token (ErrAlreadyClaimed,
//     ErrReleased, ErrExpired): the caller's next call overtook the shadow
//     reserve (the facade never makes the caller wait for it).
//  7. pre_switch: the authority claimed, released or adjusted, the shadow
//     answered reservation.ErrNotFound (or, for a release, released
//     nothing), and the shop's route changed less than Rules.SwitchWindow
//     before the call (Observation.Switched): the reservation may predate
//     the switch, when the shadow was not written.
//  8. shadow_missing: the same, without such a recent switch: the shadow
//     never saw the reservation, or lost it.
//  9. stockout_race: a reserve where one side said reserved and the other
//     insufficient, and every short line of the insufficient side has
//     Requested - margin <= Unheld < Requested (see Rules.RaceMargin).
//  10. outcome_mismatch: the answers differ (see "answers" below).
//  11. allocation_mismatch: the same answer, different allocations
//     (compared as a multiset of (item, location, quantity): reserve,
//     claim/settle, release).
//  12. match.
//
// # Answers
//
// An outcome's answer is its Result, or the domain error it returned. The
// domain errors are answers about the reservation, so they are compared like
// results: reservation.ErrNotFound, ErrExpired, ErrAlreadyClaimed,
// ErrTokenConflict, ErrInsufficientStock and ErrInvalidInput (the stores'
// limits differ: MySQL caps a line at its pool cap). Both sides answering
// ErrTokenConflict is a match; the authority reserving while the shadow
// answers ErrAlreadyClaimed or ErrTokenConflict (its state of the token
// differs) is an outcome_mismatch, and so is a shadow answering ErrExpired
// to a settle (the contract reserves ErrExpired for the authority).
// reservation.ErrContention, context errors and anything else are failures,
// not answers: "could not decide" says nothing about the state.
//
// A claim is "claimed" on the authority and "settled" on the shadow: the two
// are the same answer.
//
// # Stock-out races
//
// Near a stock-out both stores compete for the last units and may hand them
// to different callers: one caller gets reserved from the authority and
// insufficient from the shadow, another the reverse. The short side's Unheld
// at the moment of the answer is then just below the request. A short line
// reporting Unheld >= Requested contradicts itself (the store refused with
// stock available) and is never a race, nor is an insufficient answer with
// no short lines. One observation cannot tell a race from a store whose view
// of stock has drifted by a few units: races only happen while stock runs
// out, so with plenty of stock this class must stay at 0, and its floor is
// what a calibration run (ModeCalibration) measures. Allocation differences
// caused by a race (the preferred location ran out in one store only) stay
// allocation_mismatch; calibration measures those too.
func Classify(o Observation, r Rules) Class {
	r = r.WithDefaults()
	a, s := o.Authority, o.Shadow
	if a.Err != nil && (!isAnswer(a.Err) || notRun(s)) {
		return ClassAuthorityError
	}
	switch {
	case s.Skipped:
		return ClassShadowSkipped
	case s.TimedOut || errors.Is(s.Err, context.DeadlineExceeded):
		return ClassShadowTimeout
	case s.Panicked:
		return ClassShadowPanic
	case s.Err != nil && !isAnswer(s.Err):
		return ClassShadowError
	case o.Op == OpReserve && a.Err == nil && a.Result == ResultReserved && laterState(s.Err):
		return ClassShadowLate
	}
	if answer(a) != answer(s) {
		switch {
		case shadowMissing(o.Op, a, s) && afterSwitch(o, r):
			return ClassPreSwitch
		case shadowMissing(o.Op, a, s):
			return ClassShadowMissing
		case o.Op == OpReserve && stockoutRace(a, s, r):
			return ClassStockoutRace
		}
		return ClassOutcomeMismatch
	}
	if !sameAllocations(a.Allocations, s.Allocations) {
		return ClassAllocationMismatch
	}
	return ClassMatch
}

// notRun reports whether a shadow outcome is empty: the facade did not ask
// the shadow (as opposed to Skipped: it wanted to and had no room).
// laterState reports whether a shadow reserve's error is a later state of
// the token (a tombstone the caller's next call left).
func laterState(err error) bool {
	return errors.Is(err, reservation.ErrAlreadyClaimed) || errors.Is(err, reservation.ErrReleased) || errors.Is(err, reservation.ErrExpired)
}

func notRun(s Outcome) bool {
	return s.Result == "" && s.Err == nil && !s.Skipped && !s.TimedOut && !s.Panicked
}

func isAnswer(err error) bool { return reservation.AnswerName(err) != "" }

// answer is what an outcome said, comparable across the two sides.
func answer(o Outcome) string {
	if o.Err != nil {
		return "error:" + reservation.AnswerName(o.Err)
	}
	if o.Result == ResultSettled {
		return ResultClaimed
	}
	return o.Result
}

func shadowMissing(op Op, a, s Outcome) bool {
	if a.Err != nil {
		return false
	}
	switch op {
	case OpClaim, OpAdjust:
		return errors.Is(s.Err, reservation.ErrNotFound)
	case OpRelease:
		return a.Result == ResultReleased &&
			(errors.Is(s.Err, reservation.ErrNotFound) || (s.Err == nil && s.Result == ResultNotReleased))
	}
	return false
}

// afterSwitch reports whether o came less than r.SwitchWindow after its
// shop's route changed. An observation without a time (the Comparer fills
// in "now") is judged at its switch: it is as recent as can be.
func afterSwitch(o Observation, r Rules) bool {
	if o.Switched.IsZero() || r.SwitchWindow < 0 {
		return false
	}
	at := o.At
	if at.IsZero() {
		at = o.Switched
	}
	return at.Sub(o.Switched) < r.SwitchWindow
}

func stockoutRace(a, s Outcome, r Rules) bool {
	if a.Err != nil || s.Err != nil {
		return false
	}
	var short Outcome
	switch {
	case a.Result == ResultReserved && s.Result == ResultInsufficient:
		short = s
	case a.Result == ResultInsufficient && s.Result == ResultReserved:
		short = a
	default:
		return false
	}
	if len(short.Short) == 0 {
		return false
	}
	for _, l := range short.Short {
		m := r.margin(l.Requested)
		if m < 0 || l.Unheld >= l.Requested || l.Unheld < l.Requested-m {
			return false
		}
	}
	return true
}

// sameAllocations compares allocations as a multiset of units per
// (item, location): order and splitting do not matter.
func sameAllocations(a, b []reservation.Allocation) bool {
	type il struct{ item, loc int64 }
	sum := make(map[il]int64, len(a))
	for _, x := range a {
		sum[il{x.Item, x.Location}] += x.Quantity
	}
	for _, x := range b {
		sum[il{x.Item, x.Location}] -= x.Quantity
	}
	for _, n := range sum {
		if n != 0 {
			return false
		}
	}
	return true
}
