package reservation

import (
	"time"
)

// Authority names a store that can be the source of truth for a
// reservation.
type Authority string

const (
	// AuthorityRedis is the legacy Redis store.
	AuthorityRedis Authority = "redis"
	// AuthorityMySQL is the MySQL unit-pool store.
	AuthorityMySQL Authority = "mysql"
)

// Valid reports whether a is one of the known authorities.
func (a Authority) Valid() bool { return a == AuthorityRedis || a == AuthorityMySQL }

// Role says whether a call decides (the store is the shop's decider, see
// Fence) or only follows the decider for comparison.
type Role int

const (
	// AsAuthority decides: Reserve places a hold or refuses, Claim deducts
	// the ledger, Release gives the units back, Adjust changes the ledger.
	// A store that does not decide the shop answers *NotDeciderError.
	AsAuthority Role = iota
	// AsShadow follows for comparison only and never decides anything a
	// caller acts on. mysqlstore keeps a shadow hold of its own while
	// Redis decides (Reserve and Release; refused once MySQL decides the
	// shop). Every other shadow call (a Claim in either store; anything in
	// Redis, which follows MySQL through the change feed) only answers
	// what the store would do, and writes nothing: a shadow claim never
	// records a claim the ledger did not make.
	AsShadow
)

// String returns "authority" or "shadow".
func (r Role) String() string {
	if r == AsShadow {
		return "shadow"
	}
	return "authority"
}

// Line is one item of a cart.
type Line struct {
	// Item is the inventory item id (positive).
	Item int64 `json:"item"`
	// Quantity is how many units to hold (1..Limits.MaxQuantity).
	Quantity int64 `json:"quantity"`
	// Locations are the locations allowed to serve the line, most preferred
	// first (at least one, each positive, no repeats).
	Locations []int64 `json:"locations"`
}

// Claimed is a claim the ledger recorded: a token's deduction and when
// (on the database's clock).
type Claimed struct {
	Shop        int64
	Token       string
	Allocations []Allocation
	At          time.Time
}

// Allocation says how many units of an item a location serves for a
// reservation. Stores return allocations sorted by (Item, Location).
type Allocation struct {
	Item     int64 `json:"item"`
	Location int64 `json:"location"`
	Quantity int64 `json:"quantity"`
}

// Status is the outcome of a Reserve.
type Status string

const (
	// StatusReserved means every line is held.
	StatusReserved Status = "reserved"
	// StatusInsufficient means at least one line could not be served and
	// nothing is held.
	StatusInsufficient Status = "insufficient"
)

// ReserveParams are the arguments of Store.Reserve.
type ReserveParams struct {
	// Shop is the tenant (positive).
	Shop int64
	// Token is the checkout token, the idempotency key (1..64 bytes).
	Token string
	// Lines are the cart's items (1..Limits.MaxLines, no item twice).
	Lines []Line
	// TTL is how long the hold lasts, measured on the store's own clock
	// (Limits.MinTTL..Limits.MaxTTL).
	TTL time.Duration
	// Authority is recorded on the hold: the store that decided it. Zero
	// means the store itself.
	Authority Authority
	// As: decide (the zero value) or follow for comparison (see Role).
	As Role
	// Compare, when set, asks the store that decides to have the cart
	// compared with what Redis would have decided, under this label (the
	// comparer's mode, at most MaxCompareLabel bytes): MySQL records the
	// cart with the change Redis must follow, and the relay that applies
	// the change asks Redis first (Change.Cart). The facade sets it in
	// mysql mode instead of asking Redis itself; Redis ignores it.
	Compare string
}

// MaxCompareLabel is the longest ReserveParams.Compare.
const MaxCompareLabel = 32

// ShortLine describes a line that could not be served.
type ShortLine struct {
	Item      int64 `json:"item"`
	Requested int64 `json:"requested"`
	// Unheld is the most any single eligible location could have served at
	// the time of the answer.
	Unheld int64 `json:"unheld"`
}

// ReserveResult is the answer of Store.Reserve.
type ReserveResult struct {
	Status Status
	// Allocations are set when Status is StatusReserved.
	Allocations []Allocation
	// ExpiresAt is the hold's expiry on the store's clock.
	ExpiresAt time.Time
	// Authority is the authority recorded on the hold.
	Authority Authority
	// Short lists the lines that could not be served when Status is
	// StatusInsufficient.
	Short []ShortLine
	// Replayed is true when the token's first answer was returned (its
	// hold, or its refusal) instead of deciding again.
	Replayed bool
}

// ClaimParams are the arguments of Store.Claim.
type ClaimParams struct {
	Shop  int64
	Token string
	// As selects claiming as authority (deduct the ledger, remove the
	// hold) or asking, as shadow, what a claim would find (see Role).
	As Role
	// Deducted is unused by the stores (kept for callers that record what
	// was deducted next to a shadow call).
	Deducted []Allocation
}

// ClaimOutcome says what a Claim did.
type ClaimOutcome string

const (
	// OutcomeClaimed: the ledger was deducted (now or, if Replayed, before).
	OutcomeClaimed ClaimOutcome = "claimed"
	// OutcomeSettled: a shadow's answer: the store holds the reservation
	// (or, Replayed, recorded its claim) with these allocations; nothing
	// was changed by this call.
	OutcomeSettled ClaimOutcome = "settled"
)

// ClaimResult is the answer of Store.Claim.
type ClaimResult struct {
	Outcome ClaimOutcome
	// Allocations are what was deducted (authority) or what the removed
	// hold held (shadow).
	Allocations []Allocation
	// Replayed is true when the token had been claimed already and this call
	// changed nothing.
	Replayed bool
}

// ReleaseParams are the arguments of Store.Release.
type ReleaseParams struct {
	Shop  int64
	Token string
	// As: decide (the zero value) or follow for comparison (see Role).
	As Role
}

// ReleaseResult is the answer of Store.Release.
type ReleaseResult struct {
	// Released is false when there was no hold to release (already
	// released, expired, refused or never reserved): release is
	// idempotent.
	Released bool
	// Allocations are the units given back.
	Allocations []Allocation
}

// GetParams are the arguments of Store.Get.
type GetParams struct {
	Shop  int64
	Token string
	// AsDecider asks the store to answer only as the shop's decider: it
	// reads the shop's fence with the reservation, atomically, and answers
	// *NotDeciderError when another store decides. The facade always sets
	// it, so what a caller reads is what the decider holds, never a
	// follower's copy or a shadow hold. Without it the store answers from
	// its own copy, whoever decides (reconciliation, tests).
	AsDecider bool
}

// Hold is a reservation as a store sees it.
type Hold struct {
	Shop        int64
	Token       string
	Allocations []Allocation
	ExpiresAt   time.Time
	Authority   Authority
}

// Quantity is the total number of units held.
func (h Hold) Quantity() int64 { return TotalQuantity(h.Allocations) }

// AdjustParams are the arguments of Store.Adjust and Ledger.AdjustStock: a
// merchant's stock change for one item at one location.
type AdjustParams struct {
	Shop, Item, Location int64
	// Available, when set, is the new sellable quantity (>= 0). Exactly one
	// of Available and Delta is given.
	Available *int64
	// Delta is added to the sellable quantity when Available is nil.
	Delta int64
	// As must be AsAuthority: an adjust changes the one ledger, and Redis
	// follows it through the change feed (AsShadow is refused).
	As Role
	// Key, when set, makes the adjust idempotent: repeated with the same
	// key (per shop), it changes nothing and answers the first result with
	// Replayed set, so a merchant's retried "+5" after a lost reply adds 5
	// once. A key reused for another item, location or change is refused
	// (ErrTokenConflict). Like a token: 1..64 printable ASCII bytes. The
	// ledger keeps keys for ever (a replay answers the first result, with
	// its ChangeID, which Redis applies once).
	Key string
}

// AdjustResult is the answer of Store.Adjust.
type AdjustResult struct {
	// Available is the ledger's sellable quantity after the change (after
	// the first call's change, when Replayed).
	Available int64
	// Delta is the change actually applied.
	Delta int64
	// Replayed is true when the adjust's Key had been applied before:
	// nothing changed this time.
	Replayed bool
	// ChangeID is the change-feed entry (Change.ID) that tells Redis to
	// follow the delta; 0 when nothing changed. Redis applies a delta once
	// per change id, so a store that applies it at once and the relay that
	// delivers it again move the quantity once.
	ChangeID int64
}

// AvailabilityParams are the arguments of Store.Availability.
type AvailabilityParams struct {
	Shop, Item int64
	// AsDecider: as GetParams.AsDecider.
	AsDecider bool
}

// LocationAvailability is what a buyer could reserve at one location now.
type LocationAvailability struct {
	Location int64 `json:"location"`
	// Unheld is stock not held by any reservation (never negative).
	Unheld int64 `json:"unheld"`
}

// AvailabilityResult is the answer of Store.Availability, locations sorted
// ascending.
type AvailabilityResult struct {
	Item      int64                  `json:"item"`
	Locations []LocationAvailability `json:"locations"`
}

// At returns the unheld quantity at a location (0 when unknown).
func (r AvailabilityResult) At(location int64) int64 {
	for _, l := range r.Locations {
		if l.Location == location {
			return l.Unheld
		}
	}
	return 0
}

// ReapParams are the arguments of Store.Reap.
type ReapParams struct {
	// Limit bounds one call's work (default 500): the reservations it
	// expires, roughly. It is not a cap on Holds: MySQL counts
	// reservations, each of which may hold several records (one per
	// line), and Redis's reaper finishes the hold it reached in each shop
	// and each pass, so a call may return a few records more.
	Limit int
}

// ReapResult is the answer of Store.Reap.
type ReapResult struct {
	// Holds is the number of hold records returned.
	Holds int
	// Units is the number of units they held.
	Units int64
}

// DeductParams are the arguments of Ledger.Deduct.
type DeductParams struct {
	Shop        int64
	Token       string
	Allocations []Allocation
}

// DeductResult is the answer of Ledger.Deduct.
type DeductResult struct {
	// Applied is false when the token had been deducted before; the ledger
	// was not changed again.
	Applied bool
	// Allocations are the ones deducted for this token (on a replay, the
	// first call's).
	Allocations []Allocation
}

// StockParams are the arguments of Ledger.Stock.
type StockParams struct {
	Shop int64
}

// StockLevel is one ledger row.
type StockLevel struct {
	Shop, Item, Location int64
	Available            int64
}

// TotalQuantity sums the quantities of allocations.
func TotalQuantity(as []Allocation) int64 {
	var n int64
	for _, a := range as {
		n += a.Quantity
	}
	return n
}
