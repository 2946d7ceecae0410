package reservation

import "fmt"

// DriftKind classifies a difference a store finds between its state and
// what the ledger and the deciding store say it should be. The kinds are
// one namespace across both stores (and the reconciler's own findings), so
// a kind names one thing on one side everywhere: summaries, JSON, logs.
type DriftKind string

// MySQL's pools against the ledger (PoolDrift).
const (
	// DriftOverProjected: pool + held > available. Units could be reserved
	// that the ledger does not have: an oversell risk.
	DriftOverProjected DriftKind = "over_projected"
	// DriftOverCap: the pool holds more than the store's pool cap.
	DriftOverCap DriftKind = "over_cap"
	// DriftEmptyPool: the pool is empty while the ledger has unheld stock.
	// Reserve replenishes inline, so this is not an undersell by itself,
	// but it means the next buyer pays for a refill.
	DriftEmptyPool DriftKind = "empty_pool"
)

// Redis against the ledger and the true holds (RedisDrift).
const (
	// DriftLeftoverHold: a Redis hold for a token the ledger has deducted:
	// a legacy claim whose cleanup has not landed (the change feed brings
	// it, or a retry of the claim, or the reaper once the grace is over).
	// Its units are held for nobody meanwhile.
	DriftLeftoverHold DriftKind = "leftover_hold"
	// DriftOrphanIndex: the expiry index names a token that has no hold.
	DriftOrphanIndex DriftKind = "orphan_index"
	// DriftMissingHold: MySQL holds the token, Redis does not (a shop MySQL
	// decides).
	DriftMissingHold DriftKind = "missing_hold"
	// DriftExtraHold: Redis holds a token MySQL does not, and the ledger
	// has not deducted it (a shop MySQL decides).
	DriftExtraHold DriftKind = "extra_hold"
	// DriftHoldMismatch: both hold the token at different allocations (a
	// shop MySQL decides). Expiries are not compared: each store sets
	// them by its own clock.
	DriftHoldMismatch DriftKind = "hold_mismatch"
	// DriftQuantity: a Redis quantity differs from the ledger's available
	// minus what the true holds hold there.
	DriftQuantity DriftKind = "quantity"
	// DriftMissingQuantity: the ledger has an item x location Redis has no
	// quantity for (Availability does not list it; Reserve cannot use it).
	DriftMissingQuantity DriftKind = "missing_quantity"
	// DriftExtraQuantity: Redis has a quantity for an item x location that
	// neither the ledger nor any hold names.
	DriftExtraQuantity DriftKind = "extra_quantity"
)

// PoolDrift is one item x location whose MySQL pool does not match the
// ledger (mysqlstore's Reconcile).
type PoolDrift struct {
	Shop, Item, Location  int64
	Available, Held, Pool int64
	Kind                  DriftKind
}

// String is the finding for a person: kind, where, and the numbers.
func (d PoolDrift) String() string {
	return fmt.Sprintf("%s: shop %d item %d location %d: available %d held %d pool %d",
		d.Kind, d.Shop, d.Item, d.Location, d.Available, d.Held, d.Pool)
}

// DriftParams are the arguments of redisstore's Drift.
type DriftParams struct {
	// Shop is the shop to check (positive).
	Shop int64
}

// RedisDrift is one difference between Redis and what the ledger and the
// true holds (the deciding store's) say Redis should be (redisstore's
// Drift).
type RedisDrift struct {
	Kind DriftKind
	Shop int64
	// Token is set for hold findings.
	Token string
	// Allocations are the Redis hold's (leftover, extra, mismatch) or
	// MySQL's (missing).
	Allocations []Allocation
	// Item and Location are set for quantity findings.
	Item, Location int64
	// Have is the Redis quantity, Want what it should be (0 when the
	// field is absent or should be).
	Have, Want int64
}

// String is the finding for a person: kind, where, and the numbers.
func (d RedisDrift) String() string {
	if d.Token != "" {
		return fmt.Sprintf("%s: shop %d token %q %v", d.Kind, d.Shop, d.Token, d.Allocations)
	}
	return fmt.Sprintf("%s: shop %d item %d location %d: redis %d, want %d", d.Kind, d.Shop, d.Item, d.Location, d.Have, d.Want)
}
