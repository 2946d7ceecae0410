package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
)

// snapshot is one item x location's projection, read in one statement.
type snapshot struct {
	available, held, pool int64
}

// unheld is stock not held by anyone: what buyers could still reserve.
func (s snapshot) unheld() int64 { return s.available - s.held }

// room is how many units may be added without breaking the projection
// (pool + held <= available) or the cap.
func (s snapshot) room(poolCap int64) int64 {
	return max(0, min(poolCap-s.pool, s.available-s.held-s.pool))
}

func readSnapshot(ctx context.Context, tx *sql.Tx, caller string, k key) (snapshot, error) {
	var sn snapshot
	args := append(append(k.args(), k.args()...), k.args()...)
	if err := tx.QueryRowContext(ctx, tag(caller)+sqlPoolSnapshot, args...).Scan(&sn.available, &sn.held, &sn.pool); err != nil {
		return snapshot{}, fmt.Errorf("mysqlstore: %s: snapshot of %s: %w", caller, k, err)
	}
	return sn, nil
}

// lockPool takes the item x location's single-flight lock row. ok is false
// when the row does not exist (the ledger never had the item there).
func lockPool(ctx context.Context, tx *sql.Tx, caller string, k key) (nextUnit, generation int64, ok bool, err error) {
	err = tx.QueryRowContext(ctx, tag(caller)+sqlPoolLock, k.args()...).Scan(&nextUnit, &generation)
	if isNoRows(err) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("mysqlstore: %s: lock pool %s: %w", caller, k, err)
	}
	return nextUnit, generation, true, nil
}

// addUnits inserts n units with ids from nextUnit on and advances the lock
// row's unit id and refill generation (what waiting reservers watch). The
// caller holds the lock row.
func addUnits(ctx context.Context, tx *sql.Tx, caller string, k key, nextUnit, n int64) error {
	args := make([]any, 0, 4*n)
	for i := range n {
		args = append(args, k.shop, k.item, k.loc, nextUnit+i)
	}
	if _, err := tx.ExecContext(ctx, poolInsertQuery(caller, int(n)), args...); err != nil {
		return fmt.Errorf("mysqlstore: %s: insert %d units into %s: %w", caller, n, k, err)
	}
	if _, err := tx.ExecContext(ctx, tag(caller)+sqlPoolAdvance, n, k.shop, k.item, k.loc); err != nil {
		return fmt.Errorf("mysqlstore: %s: advance pool %s: %w", caller, k, err)
	}
	return nil
}

// replenish tops up one pool from the ledger, single flight: the lock row
// serialises replenishers, and one that waited while another refilled (the
// generation moved) takes that refill instead of adding its own. It returns
// the projection it saw and how many units it added.
func (s *Store) replenish(ctx context.Context, k key) (snap snapshot, added int64, err error) {
	result := ""
	var top int64 // the pool's next_unit_id after a refill that added units
	err = s.inTx(ctx, callerReplenish, func(tx *sql.Tx) error {
		snap, added, result, top = snapshot{}, 0, "", 0
		var seen int64
		if err := tx.QueryRowContext(ctx, tag(callerReplenish)+sqlPoolGeneration, k.args()...).Scan(&seen); err != nil {
			if isNoRows(err) {
				result = "no_stock" // never stocked here
				return nil
			}
			return fmt.Errorf("mysqlstore: replenish %s: %w", k, err)
		}
		next, gen, ok, err := lockPool(ctx, tx, callerReplenish, k)
		if err != nil || !ok {
			result = "no_stock"
			return err
		}
		// The ledger row, shared: a deduct in flight (which takes no lock
		// row, see Deduct) commits before the snapshot below, or waits
		// for this refill, so the snapshot sees all of it or none.
		if _, err := tx.ExecContext(ctx, tag(callerReplenish)+sqlLedgerShare, k.args()...); err != nil {
			return fmt.Errorf("mysqlstore: replenish %s: lock ledger: %w", k, err)
		}
		if snap, err = readSnapshot(ctx, tx, callerReplenish, k); err != nil {
			return err
		}
		if gen != seen {
			result = "joined"
			return nil
		}
		n := snap.room(s.cfg.PoolCap)
		if n == 0 {
			result = "full"
			if snap.unheld()-snap.pool <= 0 {
				result = "no_stock"
			}
			return nil
		}
		if err := addUnits(ctx, tx, callerReplenish, k, next, n); err != nil {
			return err
		}
		snap.pool += n
		added, result, top = n, "inserted", next+n
		return nil
	})
	if err != nil {
		return snapshot{}, 0, err
	}
	if top > 0 {
		// The reserves of this process start their scans below the new
		// top without reading it (see takeUnits).
		s.pivots.learn(k, top)
	}
	s.metrics.replenish.WithLabelValues(result).Inc()
	if added > 0 {
		s.metrics.replenishUnits.Add(float64(added))
	}
	return snap, added, nil
}

// trim deletes pool units until pool + held <= available. The delete waits
// for units an in-flight reserve has locked; when that reserve commits they
// are gone, and since a reserve moves units from pool to held without
// changing the sum, the count still holds.
func trim(ctx context.Context, tx *sql.Tx, caller string, k key) error {
	snap, err := readSnapshot(ctx, tx, caller, k)
	if err != nil {
		return err
	}
	excess := min(snap.pool+snap.held-snap.available, snap.pool)
	if excess <= 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, tag(caller)+sqlPoolTrim, k.shop, k.item, k.loc, excess); err != nil {
		return fmt.Errorf("mysqlstore: %s: trim %d units from %s: %w", caller, excess, k, err)
	}
	return nil
}
