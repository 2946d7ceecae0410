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
// # Who decides, and tombstones
//
// For each shop exactly one store decides (Fence): only it places, claims,
// releases and expires the shop's reservations; a store asked to decide
// for a shop it does not decide answers *NotDeciderError and changes
// nothing. The other store follows: MySQL keeps shadow holds to be
// compared while Redis decides; Redis follows MySQL's change feed (Change)
// while MySQL decides. Role says whether a call decides or only follows.
// A claim deducts the ledger exactly once per token, enforced by a claims
// row.
//
// A reservation that reached a terminal State (claimed, released,
// expired, or refused) is kept as a Tombstone for longer than any hold
// lives, so that a late claim answers ErrExpired or ErrReleased, and a late
// or repeated reserve cannot hold the token again. docs/ownership.md has
// the whole rule book.
package reservation
