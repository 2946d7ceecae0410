package reservation

import (
	"context"
	"fmt"
	"time"
)

// The types below are what the two stores hand the handoff machinery
// (package mirror) and take back from it: the relay's and the sweeper's
// leases, the two halves of a copy ahead, a shop's state for copy and
// catch-up, and the errors of those steps. They live here, in the
// vocabulary both stores import, because a store's method signatures name
// them and a store never imports the package that drives it. The roles
// that use them (mirror.Feed, mirror.Follower, ...) are declared where
// they are consumed. docs/ownership.md is the rule book.

// Lease is a named lock that at most one holder has at a time across
// every replica of a pod: it makes one relay and one handoff sweeper per
// pod, and one copier per shop. A lease is lost when its holder dies, so
// that another replica can take over without waiting for it.
type Lease interface {
	// Held reports whether the lease is still this holder's. A holder
	// that finds it lost stops the work the lease guards: another
	// replica may be doing it now.
	Held(ctx context.Context) bool
	// Release gives the lease up. It never fails: a lease whose release
	// is lost ends with its holder's connection anyway.
	Release()
}

// CopyLog is a copy of a shop's state out of the store that decides it
// (Redis) ahead of a handoff, as StartCopy began or joined it. While it
// is on, every write of a hold or a tombstone of the shop logs its token,
// so the copy can read again what changed after it read it.
type CopyLog struct {
	// ID names the copy (unique per shop); the store copied into marks
	// the shop with it, so that two copies never mix their parts.
	ID int64
	// Seq is the log's position when the copy was joined: a copy that
	// reads the shop after StartCopy, and then every token logged after
	// Seq, has read the shop's state.
	Seq int64
	// Size is about how many reservations the shop has (holds and
	// tombstones): what the copy will read. Small shops are copied while
	// their caller waits, large ones in the background.
	Size int64
}

// Copier is the receiving store's side (MySQL's) of one copy ahead of a
// handoff: it holds the shop's copy lease, so that a copier that lost it
// (its process died, its connection broke) cannot write another part and
// no older read overwrites a newer one. Not safe for concurrent use;
// Close releases it.
type Copier interface {
	// Held walks the shop's held reservations in the receiving store, a
	// page of tokens at a time: a copy covers them with the deciding
	// store's state, so that a hold the receiver has and the decider does
	// not (a shadow hold of a cart the decider never held) is dropped.
	// An error from each stops the walk.
	Held(ctx context.Context, each func(page []string) error) error
	// Copy makes the receiver's reservations of part's tokens exactly the
	// decider's (a partial snapshot: Snapshot.Tokens set), in one
	// transaction that first checks the shop is still marked with this
	// copy and the decider still decides it. ErrCopyLost otherwise,
	// nothing written.
	Copy(ctx context.Context, part *Snapshot) error
	// TakeOver is the copy's cut-over, after the decider yielded at
	// epoch: it copies the last part and moves the receiver's fence to
	// itself at epoch, atomically, ending the copy. A fence already at
	// epoch or later is returned as is (a handoff finished first);
	// ErrCopyLost when the shop is not marked with this copy any more.
	TakeOver(ctx context.Context, last *Snapshot, epoch int64) (Fence, error)
	// Refill tops up the shop's pools that the copied holds emptied,
	// calling pause after each with how long it took, and returns how
	// many units it added: the first reserves after the cut-over then
	// find their pools full.
	Refill(ctx context.Context, pause func(took time.Duration) error) (int64, error)
	// Close gives the copy lease up. The shop stays marked with the copy:
	// a later copier of the same copy goes on with it; a fence change
	// ends it.
	Close()
}

// ShopCopy is one shop's state read from MySQL, as it decides the shop,
// for the copy step of copy and catch-up (rebuilding Redis from MySQL): a
// consistent snapshot of its reservations and ledger, and the pending
// changes of the feed that the snapshot already reflects.
type ShopCopy struct {
	// Snapshot holds the shop's fence, holds and tombstones.
	Snapshot Snapshot
	// Ledger is the shop's ledger rows.
	Ledger []StockLevel
	// Covered are the pending changes the snapshot reflects; the feed
	// deletes them once the copy is written.
	Covered []int64
	// CoveredAdjusts are those of Covered that are adjusts: a relay that
	// read one before the copy and delivers it after must not move the
	// quantity again (the copy writes their markers).
	CoveredAdjusts []int64
}

// FenceState is a shop's fence in the store that keeps copy marks
// (MySQL), as the handoff sweeper reads it, with the copy under way into
// the shop (0: none): a copy the flags abandoned is ended by handing the
// shop back.
type FenceState struct {
	// Fence is the shop's fence.
	Fence Fence
	// Copying is the id of the copy the shop is marked with (0: none):
	// while it is set, the store keeps no shadow hold of its own.
	Copying int64
}

// Evaluated receives the following store's own answer to a change's cart
// (Change.Cart): what it, deciding, would have answered the reserve,
// against the state the changes before it left. i is the change's index
// in the slice being applied; err is the evaluation's failure (the change
// itself was applied all the same). It is how the relay compares a
// reserve MySQL decided with what Redis would have decided, without a
// second write path.
type Evaluated func(i int, answer ReserveResult, err error)

// NewerFenceError is the refusal of a rewrite of a shop (copy and
// catch-up) whose fence in the rewritten store has a higher epoch than the
// snapshot's: that store took the shop after the snapshot was read (a
// forced handoff), so the snapshot is not the truth any more, and nothing
// was written.
type NewerFenceError struct {
	Shop int64
	// Fence is the rewritten store's fence; Snapshot the snapshot's.
	Fence, Snapshot Fence
}

func (e *NewerFenceError) Error() string {
	return fmt.Sprintf("reservation: rewrite shop %d: the store's fence %s is newer than the snapshot's %s", e.Shop, e.Fence, e.Snapshot)
}
