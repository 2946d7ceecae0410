package mysqlstore

import (
	"context"
	"fmt"
)

// DriftKind classifies a reconciliation finding.
type DriftKind string

const (
	// DriftOverProjected: pool + held > available. Units could be reserved
	// that the ledger does not have: an oversell risk.
	DriftOverProjected DriftKind = "over_projected"
	// DriftOverCap: the pool holds more than PoolCap units.
	DriftOverCap DriftKind = "over_cap"
	// DriftEmptyPool: the pool is empty while the ledger has unheld stock.
	// Reserve replenishes inline, so this is not an undersell by itself,
	// but it means the next buyer pays for a refill.
	DriftEmptyPool DriftKind = "empty_pool"
)

// Drift is one item x location whose pool does not match the ledger.
type Drift struct {
	Shop, Item, Location  int64
	Available, Held, Pool int64
	Kind                  DriftKind
}

func (d Drift) String() string {
	return fmt.Sprintf("%s: shop %d item %d location %d: available %d held %d pool %d",
		d.Kind, d.Shop, d.Item, d.Location, d.Available, d.Held, d.Pool)
}

// Reconcile compares every ledger row of a shop (0: every shop) with its
// holds and pool and reports each finding. It reads without locks, so a
// finding on a row under heavy writes may be a passing state; report it
// again before acting.
func (s *Store) Reconcile(ctx context.Context, shop int64) ([]Drift, error) {
	c, err := s.acquire(ctx, callerReconcile)
	if err != nil {
		return nil, err
	}
	defer c.release()
	rows, err := c.QueryContext(ctx, sqlReconcile, shop, shop)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: reconcile: %w", err)
	}
	defer rows.Close()
	var out []Drift
	for rows.Next() {
		var d Drift
		if err := rows.Scan(&d.Shop, &d.Item, &d.Location, &d.Available, &d.Held, &d.Pool); err != nil {
			return nil, err
		}
		switch {
		case d.Pool+d.Held > d.Available:
			d.Kind = DriftOverProjected
		case d.Pool > s.cfg.PoolCap:
			d.Kind = DriftOverCap
		case d.Pool == 0 && d.Available-d.Held > 0:
			d.Kind = DriftEmptyPool
		default:
			continue
		}
		out = append(out, d)
	}
	return out, rows.Err()
}
