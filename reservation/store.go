package reservation

import "context"

// Store is the seam in front of both reservation stores. Every method
// validates its parameters first (see Limits) and returns a *ValidationError
// (matching ErrInvalidInput) without touching the store when they are bad.
// Every method is idempotent on (shop, token).
type Store interface {
	// Name is the authority this store embodies.
	Name() Authority

	// Reserve holds every line of a cart or nothing (see the package doc for
	// how a line is served). Repeating a reserve with the same token returns
	// the token's first answer with Replayed set: its hold, or its refusal
	// (a refused token stays refused, so a delayed first attempt cannot
	// hold anything later). As shadow, see Role.
	//
	// Errors: *NotDeciderError (as authority) when the store does not
	// decide the shop; ErrTokenConflict when the token holds different
	// lines; ErrAlreadyClaimed, ErrReleased or ErrExpired when the token
	// reached that state; ErrContention when the store could not settle the
	// answer under contention (retryable: nothing was held).
	Reserve(ctx context.Context, p *ReserveParams) (ReserveResult, error)

	// Claim, as authority, deducts the ledger by the hold's allocations and
	// removes the hold, all lines or none, exactly once per (shop, token): a
	// repeat returns Replayed. The hold must be live when the claim holds
	// its locks. Once the ledger is deducted the answer is success. As
	// shadow it answers what a claim would find and changes nothing.
	//
	// Errors: *NotDeciderError (as authority); ErrNotFound when the store
	// has no hold or tombstone for the token, or its reserve was refused;
	// ErrExpired when the hold expired; ErrReleased when it was released;
	// ErrInsufficientStock when the ledger no longer has the stock (a
	// merchant lowered it below what was held): nothing changes.
	Claim(ctx context.Context, p *ClaimParams) (ClaimResult, error)

	// Release gives a hold's units back and leaves a released tombstone.
	// Releasing nothing is not an error (Released is false).
	//
	// Errors: *NotDeciderError (as authority); ErrAlreadyClaimed when the
	// token was claimed; ErrClaimInProgress (Redis) while a legacy claim of
	// the token is under way.
	Release(ctx context.Context, p *ReleaseParams) (ReleaseResult, error)

	// Get returns the hold for a token. With p.AsDecider the store reads
	// the shop's fence atomically with the hold and answers only if it
	// decides the shop.
	//
	// Errors: *NotDeciderError (AsDecider) when the store does not decide
	// the shop; ErrNotFound when there is no hold or tombstone;
	// ErrAlreadyClaimed, ErrReleased or ErrExpired for a tombstone.
	Get(ctx context.Context, p *GetParams) (Hold, error)

	// Adjust applies a merchant's stock change to the ledger. Both stores
	// do it through the ledger, which records it in the change feed; Redis
	// follows the ledger through the feed.
	//
	// Errors: ErrNotFound for a delta on an item x location the ledger does
	// not know; ErrInsufficientStock when a delta would make it negative.
	Adjust(ctx context.Context, p *AdjustParams) (AdjustResult, error)

	// Availability reports, per known location of an item, what a buyer
	// could reserve now. With p.AsDecider, as Get.
	//
	// Errors: *NotDeciderError (AsDecider) when the store does not decide
	// the shop.
	Availability(ctx context.Context, p *AvailabilityParams) (AvailabilityResult, error)

	// Reap expires the holds past their expiry, judged by the store's own
	// clock, of the shops it decides (and, in MySQL, its own shadow holds),
	// leaving expired tombstones. Several reapers may run at once; each
	// hold is expired once.
	Reap(ctx context.Context, p *ReapParams) (ReapResult, error)
}

// Ledger is the stock ledger, the source of truth for sellable quantity.
// mysqlstore implements it; the Redis store's legacy claim goes through it.
type Ledger interface {
	// Deduct subtracts a claimed reservation's allocations from the ledger
	// exactly once per (shop, token): the legacy claim of a reservation
	// Redis decided. A repeat changes nothing and returns Applied false
	// with the first call's allocations. It records the claim as the
	// token's state and in the change feed, so Redis follows it even if
	// the legacy claim's own Redis step is lost.
	//
	// Errors: ErrInsufficientStock when a location has less than its
	// allocation; *NotDeciderError when MySQL decides the shop (a handoff
	// overtook the legacy claim): nothing changes.
	Deduct(ctx context.Context, p *DeductParams) (DeductResult, error)

	// AdjustStock changes the ledger for one item x location (p.As is
	// ignored). Creating an item x location takes p.Available.
	//
	// Errors: as Store.Adjust.
	AdjustStock(ctx context.Context, p *AdjustParams) (AdjustResult, error)

	// Stock lists the ledger rows of a shop.
	Stock(ctx context.Context, p *StockParams) ([]StockLevel, error)
}
