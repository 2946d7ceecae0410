package compare

import (
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

// Observation is one dual-written call: both stores' outcomes and where the
// call came from.
type Observation struct {
	Op    Op
	Pod   string
	Shop  int64
	Token string
	// Mode is the effective mode the facade applied ("shadow", "mysql", ...).
	Mode string
	// At is when the call started.
	At time.Time
	// Authority is the answer returned to the caller.
	Authority Outcome
	// Shadow is the other store's outcome, compared only.
	Shadow Outcome
}
