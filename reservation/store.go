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
	// the existing hold with Replayed set, not a second hold.
	//
	// Errors: ErrTokenConflict when the token holds different lines;
	// ErrAlreadyClaimed when the token was claimed; ErrContention when the
	// store could not settle the answer under contention (retryable).
	Reserve(ctx context.Context, p *ReserveParams) (ReserveResult, error)

	// Claim, as authority, deducts the ledger by the hold's allocations and
	// removes the hold in one step, exactly once per (shop, token): a repeat
	// returns Replayed. As shadow, it removes this store's own hold and
	// follows p.Deducted; it never touches the ledger.
	//
	// Errors: ErrNotFound when the store has neither a hold nor a claim for
	// the token; ErrExpired (authority only) when the hold has expired;
	// ErrInsufficientStock (authority only) when the ledger no longer has the
	// stock (a merchant lowered it below what was held): nothing changes.
	Claim(ctx context.Context, p *ClaimParams) (ClaimResult, error)

	// Release gives a hold's units back. Releasing nothing is not an error
	// (Released is false).
	//
	// Errors: ErrAlreadyClaimed when the token was claimed.
	Release(ctx context.Context, p *ReleaseParams) (ReleaseResult, error)

	// Get returns the hold for a token.
	//
	// Errors: ErrNotFound when there is no hold.
	Get(ctx context.Context, p *GetParams) (Hold, error)

	// Adjust applies a merchant's stock change: as authority to the ledger
	// and this store's view, as shadow to this store's view only.
	//
	// Errors: ErrNotFound for a delta on an item x location the ledger does
	// not know; ErrInsufficientStock when a delta would make it negative.
	Adjust(ctx context.Context, p *AdjustParams) (AdjustResult, error)

	// Availability reports, per known location of an item, what a buyer
	// could reserve now.
	Availability(ctx context.Context, p *AvailabilityParams) (AvailabilityResult, error)

	// Reap returns expired holds, judged by the store's own clock. Several
	// reapers may run at once; each hold is returned once.
	Reap(ctx context.Context, p *ReapParams) (ReapResult, error)
}

// Ledger is the stock ledger, the source of truth for sellable quantity.
// mysqlstore implements it; the Redis store's legacy claim goes through it.
type Ledger interface {
	// Deduct subtracts a claimed reservation's allocations from the ledger
	// exactly once per (shop, token). A repeat changes nothing and returns
	// Applied false with the first call's allocations.
	//
	// Errors: ErrInsufficientStock when a location has less than its
	// allocation; nothing changes.
	Deduct(ctx context.Context, p *DeductParams) (DeductResult, error)

	// AdjustStock changes the ledger for one item x location (p.As is
	// ignored). Creating an item x location takes p.Available.
	//
	// Errors: as Store.Adjust.
	AdjustStock(ctx context.Context, p *AdjustParams) (AdjustResult, error)

	// Stock lists the ledger rows of a shop.
	Stock(ctx context.Context, p *StockParams) ([]StockLevel, error)
}
