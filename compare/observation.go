package compare

import (
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Op is the operation an observation is about.
type Op string

// The dual-written operations.
const (
	OpReserve Op = "reserve"
	OpClaim   Op = "claim"
	OpRelease Op = "release"
	OpAdjust  Op = "adjust"
)

// ModeCalibration is the mode of an observation in which the facade ran the
// same store as both authority and shadow (Twitter Diffy's "primary vs
// secondary"). Whatever differences such observations show are noise: races
// and clocks, not a disagreement between stores. Any mode that starts with
// "calibration_" counts too (e.g. "calibration_mysql", "calibration_redis"),
// so each store's noise floor can be measured and kept apart. See
// IsCalibration and Totals.Calibration.
const ModeCalibration = "calibration"

// IsCalibration reports whether mode is a calibration mode: ModeCalibration
// or a mode starting with "calibration_".
func IsCalibration(mode string) bool {
	return mode == ModeCalibration || strings.HasPrefix(mode, ModeCalibration+"_")
}

// Outcome is what one store did with one call.
type Outcome struct {
	// Store is which store answered.
	Store reservation.Authority
	// Result is the answer's kind: "reserved", "insufficient", "claimed",
	// "settled", "released", "not_released", "adjusted"; empty on error or
	// when the store did not run.
	Result string
	// Allocations are the allocations the store answered with.
	Allocations []reservation.Allocation
	// Short are the short lines of an insufficient reserve.
	Short []reservation.ShortLine
	// Err is the store's error, if any.
	Err error
	// Latency is how long the store took.
	Latency time.Duration
	// Skipped: the shadow did not run at all (its bounded pool was full).
	Skipped bool
	// TimedOut: the shadow ran past its deadline.
	TimedOut bool
	// Panicked: the shadow panicked (recovered; Err holds the panic).
	Panicked bool
}

// The values of Outcome.Result.
const (
	ResultReserved     = "reserved"
	ResultInsufficient = "insufficient"
	ResultClaimed      = "claimed"
	ResultSettled      = "settled"
	ResultReleased     = "released"
	ResultNotReleased  = "not_released"
	ResultAdjusted     = "adjusted"
)

// Observation is one dual-written call: both stores' outcomes and where the
// call came from.
type Observation struct {
	// Op is the operation.
	Op Op
	// Pod is the pod (cell) of the shop; a metric label and a stats key.
	Pod string
	// Shop is the tenant. Never a metric label: it is kept in the sampled
	// diff records and the logs only.
	Shop int64
	// Token is the reservation's token (diff records and logs only).
	Token string
	// Mode is the effective mode the facade applied ("shadow", "mysql", ...).
	Mode string
	// At is when the call started. Zero means "now" to the Comparer.
	At time.Time
	// Switched is when the route of the call's shop last changed at the
	// facade that made the call (its mode or kill switch, and so which
	// store decides and whether the other is written): zero when it has
	// not changed since the facade first saw the shop. A reservation
	// claimed or released soon after a switch may have been made before
	// it, when the shadow was not written; Classify calls such a
	// difference ClassPreSwitch (see Rules.SwitchWindow).
	Switched time.Time
	// Authority is the answer returned to the caller.
	Authority Outcome
	// Shadow is the other store's outcome, compared only.
	Shadow Outcome
	// Relayed: Redis's outcome came from the relay, which asked Redis
	// about the cart just before applying MySQL's decision (see
	// RelayedReserve), not from a call beside the authority's. Neither
	// side's latency was measured, and none is recorded.
	Relayed bool
}

// RelayedReserve is the observation of a reserve MySQL decided in a mode
// that compares, made by the relay (package mirror) from the change that
// carried its cart (c.Cart, c.CartLabel) and Redis's answer to that cart,
// asked just before the change was applied, against the state every
// earlier change left: the state MySQL decided from, without the relay's
// lag that a call beside the authority's would see.
//
// MySQL's answer is read from the reservation's state when the change was
// read: refused is the insufficient answer with its short lines; any
// other state (held, or a later claimed, released or expired) was a
// reserve with the allocations the state keeps. ok is false when the
// change says nothing of the answer (no cart, or the reservation's record
// is gone).
func RelayedReserve(pod string, c reservation.Change, redis reservation.ReserveResult, err error) (o Observation, ok bool) {
	if len(c.Cart) == 0 || c.State == "" {
		return Observation{}, false
	}
	o = Observation{Op: OpReserve, Pod: pod, Shop: c.Shop, Token: c.Token, Mode: c.CartLabel, Relayed: true,
		Authority: Outcome{Store: reservation.AuthorityMySQL}, Shadow: Outcome{Store: reservation.AuthorityRedis}}
	if c.State == reservation.StateRefused {
		o.Authority.Result, o.Authority.Short = ResultInsufficient, c.Short
	} else {
		o.Authority.Result, o.Authority.Allocations = ResultReserved, c.Allocations
	}
	if err != nil {
		o.Shadow.Err = err
	} else {
		o.Shadow.Result, o.Shadow.Allocations, o.Shadow.Short = string(redis.Status), redis.Allocations, redis.Short
	}
	return o, true
}

// Observer takes observations: the facade's and the relay's (see
// ObserveRelayed). *Comparer is one; Observe must not block for long.
type Observer interface {
	Observe(Observation)
}

// ObserveRelayed returns the callback a pod's relay calls with Redis's
// answer to each cart it evaluated (mirror.Config.Evaluated): it hands
// obs the RelayedReserve observation of pod.
func ObserveRelayed(pod string, obs Observer) func(c reservation.Change, redis reservation.ReserveResult, err error) {
	return func(c reservation.Change, redis reservation.ReserveResult, err error) {
		if o, ok := RelayedReserve(pod, c, redis, err); ok {
			obs.Observe(o)
		}
	}
}
