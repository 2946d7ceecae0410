package mysqlstore

import (
	"context"
	"fmt"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Reconcile compares every ledger row of a shop (0: every shop) with its
// holds and pool and reports each finding. It reads without locks, so a
// finding on a row under heavy writes may be a passing state; report it
// again before acting.
func (s *Store) Reconcile(ctx context.Context, shop int64) ([]reservation.PoolDrift, error) {
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
	var out []reservation.PoolDrift
	for rows.Next() {
		var d reservation.PoolDrift
		if err := rows.Scan(&d.Shop, &d.Item, &d.Location, &d.Available, &d.Held, &d.Pool); err != nil {
			return nil, err
		}
		switch {
		case d.Pool+d.Held > d.Available:
			d.Kind = reservation.DriftOverProjected
		case d.Pool > s.cfg.PoolCap:
			d.Kind = reservation.DriftOverCap
		case d.Pool == 0 && d.Available-d.Held > 0:
			d.Kind = reservation.DriftEmptyPool
		default:
			continue
		}
		out = append(out, d)
	}
	return out, rows.Err()
}
