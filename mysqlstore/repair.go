package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Reconciliation's repairs of this store, for when Redis is the authority
// and MySQL is the side to fix. They never touch the ledger.

const callerRepair = "repair"

const (
	sqlShops = `/*caller='reconcile'*/ SELECT DISTINCT shop_id FROM inventory_ledger ORDER BY shop_id`
)

// Shops lists every shop the ledger knows, ascending.
func (s *Store) Shops(ctx context.Context) ([]int64, error) {
	c, err := s.acquire(ctx, callerReconcile)
	if err != nil {
		return nil, err
	}
	defer c.release()
	rows, err := c.QueryContext(ctx, sqlShops)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: shops: %w", err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// TrimPools trims every pool of a shop that holds more than the ledger
// allows (pool + held > available): the repair for DriftOverProjected.
func (s *Store) TrimPools(ctx context.Context, shop int64) (int, error) {
	drift, err := s.Reconcile(ctx, shop)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range drift {
		if d.Kind != reservation.DriftOverProjected && d.Kind != reservation.DriftOverCap {
			continue
		}
		k := key{d.Shop, d.Item, d.Location}
		err := s.inTx(ctx, callerRepair, func(tx *sql.Tx) error {
			if _, _, _, err := lockPool(ctx, tx, callerRepair, k); err != nil {
				return err
			}
			if err := trim(ctx, tx, callerRepair, k); err != nil {
				return err
			}
			// Over the cap: drop the surplus too.
			snap, err := readSnapshot(ctx, tx, callerRepair, k)
			if err != nil {
				return err
			}
			if extra := snap.pool - s.cfg.PoolCap; extra > 0 {
				if _, err := tx.ExecContext(ctx, tag(callerRepair)+sqlPoolTrim, k.shop, k.item, k.loc, extra); err != nil {
					return fmt.Errorf("mysqlstore: repair: trim %s to its cap: %w", k, err)
				}
			}
			return nil
		})
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
