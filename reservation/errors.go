package reservation

import (
	"errors"
	"fmt"
)

// Sentinel errors. Stores wrap them with %w; test with errors.Is.
var (
	// ErrInvalidInput is matched by every *ValidationError. Returned by every
	// Store and Ledger method before anything is written.
	ErrInvalidInput = errors.New("reservation: invalid input")
	// ErrNotFound: Claim or Get of a token the store never held (or whose
	// reserve was refused), Adjust (delta on an unknown item x location).
	ErrNotFound = errors.New("reservation: not found")
	// ErrExpired: Claim of a hold past its expiry, reaped or not; Reserve
	// and Get of a token whose hold expired (its tombstone).
	ErrExpired = errors.New("reservation: hold expired")
	// ErrReleased: Claim, Reserve or Get of a token whose hold was
	// released (its tombstone). A released token is never claimed.
	ErrReleased = errors.New("reservation: released")
	// ErrAlreadyClaimed: Reserve or Release of a token that was claimed.
	ErrAlreadyClaimed = errors.New("reservation: already claimed")
	// ErrTokenConflict: Reserve with a token that holds different lines.
	ErrTokenConflict = errors.New("reservation: token already holds different lines")
	// ErrInsufficientStock: Claim as authority, Deduct and Adjust when the
	// ledger would go below zero. Not used for an ordinary short cart: that
	// is a ReserveResult with StatusInsufficient.
	ErrInsufficientStock = errors.New("reservation: ledger has insufficient stock")
	// ErrContention: Reserve gave up after bounded retries under lock
	// contention. The caller may retry; nothing was held.
	ErrContention = errors.New("reservation: contention, retry")
	// ErrClaimInProgress: Release of a Redis hold whose legacy claim has
	// started and not finished (the ledger may be deducting it). Nothing
	// changed; retry. Not a domain answer: the outcome of the claim is
	// not known yet.
	ErrClaimInProgress = errors.New("reservation: a claim of this token is in progress, retry")
	// ErrCopyBusy: the receiving store's BeginCopy, when another copier
	// (this process or another replica) holds the shop's copy lease. The
	// caller leaves the copy to that one; the decider decides meanwhile.
	ErrCopyBusy = errors.New("reservation: another copier is copying the shop")
	// ErrCopyLost: a copy ahead of a handoff is no longer in force. The
	// deciding store's log of what changed lapsed or another copy replaced
	// it (Changed), or the receiving store's shop is no longer marked with
	// the copy (Copier.Copy, Copier.TakeOver). What was copied can no
	// longer be trusted to be complete: the copy starts again, or the
	// handoff takes the whole shop over. Nothing was written.
	ErrCopyLost = errors.New("reservation: the shop's copy is no longer in force")
)

// ValidationError names the field that made a call invalid. It matches
// ErrInvalidInput.
type ValidationError struct {
	// Field is the parameter path, e.g. "lines[2].quantity".
	Field string
	// Reason says what is wrong, for a person.
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("reservation: invalid %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidInput) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidInput }

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// answers are the sentinel errors that say something definite about a
// reservation's state, by the name an answer carries in comparisons,
// histories and logs.
var answers = []struct {
	err  error
	name string
}{
	{ErrNotFound, "not_found"},
	{ErrExpired, "expired"},
	{ErrReleased, "released"},
	{ErrAlreadyClaimed, "already_claimed"},
	{ErrTokenConflict, "token_conflict"},
	{ErrInsufficientStock, "insufficient_stock"},
	{ErrInvalidInput, "invalid_input"},
}

// AnswerName names err when it is a domain answer (not found, expired,
// released, already claimed, token conflict, insufficient stock, invalid
// input) and returns "" for a failure (a timeout, a lost connection,
// contention, a claim in progress, a store that does not decide,
// anything else): a call that failed that way has an unknown outcome.
func AnswerName(err error) string {
	for _, a := range answers {
		if errors.Is(err, a.err) {
			return a.name
		}
	}
	return ""
}

// AnswerError is the inverse of AnswerName: the sentinel error an answer
// name stands for (as the API's error codes carry them), or nil for a name
// that is not a domain answer.
func AnswerError(name string) error {
	for _, a := range answers {
		if a.name == name {
			return a.err
		}
	}
	return nil
}
