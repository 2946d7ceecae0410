package mirror

import (
	"context"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// The roles the stores play in the protocol (docs/ownership.md), declared
// here, where they are consumed, so that the protocol reads in its own
// words and can be driven by anything that keeps the contracts: the real
// stores in production (mysqlstore.Store is a MySQL, redisstore.Store a
// Redis; their tests assert it) and in-memory ones in this package's
// tests, which inject faults between any two steps. This package imports
// neither store.
//
// The protocol is not symmetric, and neither are the roles. MySQL records
// every change Redis must follow in its Feed, and Redis is its Follower:
// a handoff to Redis drains the feed, the last change moving Redis's
// fence. Redis has no feed: a handoff to MySQL copies Redis's state ahead
// (Redis is the CopySource) into MySQL (the CopyTarget), and the fence
// moves with only the last changes. Either store is a Decider: it tells
// its fence and gives the shop up.

// Decider is a store that may decide a shop: the one its fence names.
type Decider interface {
	// Fence returns the shop's fence in this store: reservation.NoFence
	// (Redis decides) when it has none.
	Fence(ctx context.Context, shop int64) (reservation.Fence, error)
	// Yield stops this store deciding the shop from epoch on: if its
	// fence has a lower epoch, it moves to the other store at epoch,
	// after the deciding calls in flight and before any later one. It
	// returns the fence after, whatever it is (a newer handoff may have
	// overtaken this one); repeating it changes nothing.
	Yield(ctx context.Context, shop, epoch int64) (reservation.Fence, error)
}

// Feed is MySQL's change feed (a transactional outbox): every change Redis
// must follow, written in the transaction that made it, read in order by
// the relay and deleted once Redis applied it. Its leases keep one relay
// and one handoff sweeper per pod across every replica.
type Feed interface {
	// Pending returns up to limit pending changes, oldest first, of one
	// shop (every shop for 0), each with its reservation's current state:
	// delivering a change late or twice applies the latest state.
	Pending(ctx context.Context, shop int64, limit int) ([]reservation.Change, error)
	// PendingExcept is Pending of every shop but skip: the relay reads
	// past the shops stopped at a change Redis did not apply.
	PendingExcept(ctx context.Context, skip []int64, limit int) ([]reservation.Change, error)
	// Done deletes delivered changes.
	Done(ctx context.Context, ids []int64) error
	// Backlog is how many changes are pending and the age of the oldest:
	// what a kill switch engaged now would have to drain.
	Backlog(ctx context.Context) (changes int64, oldest time.Duration, err error)
	// CopyShop is copy and catch-up's copy step: with the shop held still,
	// it reads one consistent copy of the shop, calls write, and deletes
	// the pending changes the copy covered. If write fails nothing is
	// deleted.
	CopyShop(ctx context.Context, shop int64, write func(ctx context.Context, c *reservation.ShopCopy) error) error
	// TryLease takes the named lease if nobody holds it, and returns nil
	// (and no error) if somebody does.
	TryLease(ctx context.Context, name string) (reservation.Lease, error)
}

// Follower is Redis following the shops MySQL decides: it applies the
// feed, is rebuilt from MySQL's copy when it lost its data, and takes a
// shop without MySQL when the kill switch redis_only finds MySQL silent.
type Follower interface {
	// Fence returns the shop's fence in Redis.
	Fence(ctx context.Context, shop int64) (reservation.Fence, error)
	// ApplyEvaluating applies changes in order and returns how many, from
	// the first, were applied; it stops at the first failure, and a fence
	// change is applied only after every change before it. Each change is
	// idempotent. eval, when not nil, receives Redis's own answer to each
	// change's cart.
	ApplyEvaluating(ctx context.Context, changes []reservation.Change, eval reservation.Evaluated) (applied int, err error)
	// Rewrite makes the shop exactly snap, its quantities the ledger's
	// minus the holds, marking covered adjusts as applied.
	// *reservation.NewerFenceError: Redis took the shop after snap was
	// read, and nothing was written.
	Rewrite(ctx context.Context, snap reservation.Snapshot, ledger []reservation.StockLevel, covered []int64) error
	// Force moves Redis's fence to redis@epoch (if lower) without the
	// drain: what the feed held for the shop is lost to Redis.
	Force(ctx context.Context, shop, epoch int64) (reservation.Fence, error)
	// NoteForced records, before Force, that MySQL's fence of the shop
	// still names MySQL: MySQL would decide it again from stale state as
	// soon as it answers, unless its fence is moved off first.
	NoteForced(ctx context.Context, shop int64) error
	// Forced lists the shops noted and not yet fenced off.
	Forced(ctx context.Context) ([]int64, error)
	// FencedOff clears a shop's note once MySQL's fence moved off it.
	FencedOff(ctx context.Context, shop int64) error
}

// CopySource is the store a handoff to MySQL copies ahead (Redis) while
// it keeps deciding: a log of the tokens that change meanwhile, and reads
// of its holds and tombstones.
type CopySource interface {
	Decider
	// StartCopy turns the shop's change log on, or joins the copy under
	// way; *reservation.NotDeciderError when it does not decide the shop.
	StartCopy(ctx context.Context, shop int64) (reservation.CopyLog, error)
	// Changed returns the tokens logged after position after, at most
	// limit, and the position read up to. reservation.ErrCopyLost: the
	// log is not the copy's any more.
	Changed(ctx context.Context, shop, id, after int64, limit int) ([]string, int64, error)
	// EndCopy turns copy id's log off.
	EndCopy(ctx context.Context, shop, id int64) error
	// Tokens walks every token of the shop while it may change; a token
	// changed meanwhile may be missed, and is in the log.
	Tokens(ctx context.Context, shop int64, each func(page []string) error) error
	// Records reads the current state of tokens: a partial snapshot.
	Records(ctx context.Context, shop int64, tokens []string) (reservation.Snapshot, error)
	// Snapshot reads the whole shop: exact once the store yielded.
	Snapshot(ctx context.Context, shop int64) (reservation.Snapshot, error)
}

// CopyTarget is the store a handoff to MySQL copies into and that takes
// the shop over (MySQL).
type CopyTarget interface {
	Decider
	// BeginCopy takes the shop's copy lease and marks the shop with copy
	// id, stopping this store's shadow writes of the shop. It returns
	// this store's fence, and no Copier when it decides the shop since
	// after from (the source's fence): nothing to copy.
	// reservation.ErrCopyBusy: another copier holds the shop.
	BeginCopy(ctx context.Context, shop, id int64, from reservation.Fence) (reservation.Copier, reservation.Fence, error)
	// TakeOver makes the shop exactly snap (a whole shop) and moves this
	// store's fence to itself at epoch, in one step, unless its fence is
	// at epoch or later already: the handoff without a copy ahead.
	TakeOver(ctx context.Context, snap *reservation.Snapshot, epoch int64) (reservation.Fence, error)
}

// MySQL is everything the mirror asks of a pod's MySQL store: its feed,
// its part in handoffs, and what the handoff sweeper reads and writes.
type MySQL interface {
	Feed
	CopyTarget
	// Shops lists the shops the ledger knows.
	Shops(ctx context.Context) ([]int64, error)
	// Fences returns every fenced shop's fence with the copy under way
	// into it.
	Fences(ctx context.Context) (map[int64]reservation.FenceState, error)
	// SaveHandoffProgress writes the sweeper's report in the pod's
	// database, where every replica and operator command reads the same.
	SaveHandoffProgress(ctx context.Context, p reservation.HandoffProgress) error
	// LoadHandoffProgress reads it; ok is false before any sweep.
	LoadHandoffProgress(ctx context.Context) (p reservation.HandoffProgress, ok bool, err error)
}

// Redis is everything the mirror asks of a pod's Redis store: to follow
// MySQL, to be copied ahead of a handoff to MySQL, and what the handoff
// sweeper reads.
type Redis interface {
	Follower
	CopySource
	// Shops lists the shops Redis knows.
	Shops(ctx context.Context) ([]int64, error)
	// Fences returns the fences of shops (reservation.NoFence for one
	// without).
	Fences(ctx context.Context, shops []int64) (map[int64]reservation.Fence, error)
}
