package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Reconciliation's repairs of this store, for when Redis is the authority
// and MySQL is the side to fix. They never touch the ledger.

const callerRepair = "repair"

const (
	sqlShops = `/*caller='reconcile'*/ SELECT DISTINCT shop_id FROM inventory_ledger ORDER BY shop_id`
	// One hold row per allocation; the expiry is the authority's.
	sqlRepairInsertHold = `/*caller='repair'*/ INSERT INTO reserved_quantities
  (shop_id, token, inventory_item_id, location_id, quantity, expires_at, authority) VALUES (?, ?, ?, ?, ?, ?, ?)`
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

// RepairHolds makes this store's holds of a shop agree with the authority:
// each hold in put replaces the token's hold (allocations, expiry,
// authority), each token in drop loses its hold. A put of a token this
// store's ledger has claimed only drops its hold. Then every pool the
// changes touched is trimmed so that pool + held stays within the ledger.
// One transaction; the ledger is never changed.
func (s *Store) RepairHolds(ctx context.Context, shop int64, put []reservation.Hold, drop []string) error {
	if shop <= 0 {
		return &reservation.ValidationError{Field: "shop", Reason: fmt.Sprintf("must be a positive id, got %d", shop)}
	}
	touched := map[key]bool{}
	for _, h := range put {
		if h.Shop != shop {
			return &reservation.ValidationError{Field: "put", Reason: fmt.Sprintf("hold of shop %d given for shop %d", h.Shop, shop)}
		}
		for _, a := range h.Allocations {
			touched[key{shop, a.Item, a.Location}] = true
		}
	}
	keys := make([]key, 0, len(touched))
	for k := range touched {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.item != b.item {
			return cmpInt(a.item, b.item)
		}
		return cmpInt(a.loc, b.loc)
	})
	return s.inTx(ctx, callerRepair, func(tx *sql.Tx) error {
		// Pool lock rows first, in order, like every pool writer.
		for _, k := range keys {
			if _, _, _, err := lockPool(ctx, tx, callerRepair, k); err != nil {
				return err
			}
		}
		for _, token := range drop {
			if _, err := tx.ExecContext(ctx, tag(callerRepair)+sqlHoldsDelete, shop, token); err != nil {
				return fmt.Errorf("mysqlstore: repair: drop hold %q: %w", token, err)
			}
		}
		for _, h := range put {
			if _, err := tx.ExecContext(ctx, tag(callerRepair)+sqlHoldsDelete, shop, h.Token); err != nil {
				return fmt.Errorf("mysqlstore: repair: replace hold %q: %w", h.Token, err)
			}
			// A claimed token holds nothing here, whatever the authority
			// still shows (a leftover of a claim whose cleanup failed
			// there): its hold would refuse buyers until it expired.
			if _, claimed, err := readClaim(ctx, tx, callerRepair, shop, h.Token); err != nil {
				return err
			} else if claimed {
				continue
			}
			auth := h.Authority
			if !auth.Valid() {
				auth = reservation.AuthorityRedis
			}
			for _, a := range h.Allocations {
				if _, err := tx.ExecContext(ctx, sqlRepairInsertHold, shop, h.Token, a.Item, a.Location, a.Quantity, h.ExpiresAt.UTC(), string(auth)); err != nil {
					return fmt.Errorf("mysqlstore: repair: insert hold %q: %w", h.Token, err)
				}
			}
		}
		for _, k := range keys {
			if err := trim(ctx, tx, callerRepair, k); err != nil {
				return err
			}
		}
		return nil
	})
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
		if d.Kind != DriftOverProjected && d.Kind != DriftOverCap {
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

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
