package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/seed31b0e981/reservoir/reservation"
)

// FreezeShop runs fn while nothing that Redis follows can change for the
// shop in MySQL: the shop's fence rows are locked for update, so no
// transaction that decides for the shop (a reserve, claim, release or
// expiry of MySQL's, a shadow write, a deduct, a handoff) is in flight or
// starts until fn returns; its ledger rows are locked in share mode, so no
// adjust or deduct changes them. Plain reads on other connections see the
// shop as it stays meanwhile, and the relay may still deliver the changes
// already in the feed: reconciliation drains them, then compares the two
// stores knowing that neither moves (package internal/reconcile).
//
// fn must be short: the shop's traffic waits for it (a reserve waits for
// the lock up to innodb_lock_wait_timeout). A shop without fence rows
// (never handed off) has only its ledger held. It retries on a deadlock or
// a lock wait timeout, fn included; fn's own error is returned as is.
func (s *Store) FreezeShop(ctx context.Context, shop int64, fn func(ctx context.Context) error) error {
	if shop <= 0 {
		return &reservation.ValidationError{Field: "shop", Reason: fmt.Sprintf("must be a positive id, got %d", shop)}
	}
	return s.inTx(ctx, callerReconcile, func(tx *sql.Tx) error {
		for _, q := range []string{sqlFreezeFence, sqlFreezeLedger} {
			rows, err := tx.QueryContext(ctx, q, shop)
			if err != nil {
				return fmt.Errorf("mysqlstore: freeze shop %d: %w", shop, err)
			}
			for rows.Next() { // the locks are what the read is for
			}
			if err := rows.Close(); err != nil {
				return fmt.Errorf("mysqlstore: freeze shop %d: %w", shop, err)
			}
			if err := rows.Err(); err != nil {
				return fmt.Errorf("mysqlstore: freeze shop %d: %w", shop, err)
			}
		}
		return fn(ctx)
	})
}
