// Package reservation is the shared vocabulary of reservoir: the types of a
// reservation, the Store and Ledger contracts that both stores implement, the
// sentinel and typed errors those contracts return, and input validation.
//
// It owns meaning, not mechanics: nothing here talks to a database. Stores
// (mysqlstore, redisstore) import it; it imports neither of them, nor the
// facade.
//
// # Operations
//
// A reservation is a hold identified by (shop, token). Reserve places it,
// Claim makes it permanent when payment succeeds, Release gives it back when
// payment fails, and each store's reaper (Reap) returns it when it expires.
// Every operation is idempotent on (shop, token).
//
// # How a line is served
//
// A line names an item, a quantity and its eligible locations in the
// caller's preference order. A line is served whole from the first eligible
// location, in that order, whose unheld stock covers the line's entire
// quantity. Lines never split across locations, and a location not named by
// the line never serves it. A cart is all-or-nothing: if any line cannot be
// served, nothing is held and the result is StatusInsufficient with the short
// lines. Both stores apply the same rule; the conformance suite in
// reservation/storetest is the judge.
//
// # Authority and shadow
//
// During the migration both stores see every operation. The authority's
// answer is final: its Claim deducts the ledger (exactly once per token,
// enforced by a claims row). The shadow only settles: it removes its own
// hold and follows the deduction the authority made, never touching the
// ledger itself. Role says which of the two a call is.
package reservation
