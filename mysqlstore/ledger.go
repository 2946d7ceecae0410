package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Adjust applies a merchant's stock change. As authority it changes the
// ledger and trims the pool in one transaction (AdjustStock). As shadow the
// ledger has already been changed through this store's Ledger by the
// authority, so it only re-checks the projection.
func (s *Store) Adjust(ctx context.Context, p *reservation.AdjustParams) (reservation.AdjustResult, error) {
	if err := s.cfg.Limits.ValidateAdjust(p); err != nil {
		return reservation.AdjustResult{}, err
	}
	if p.As == reservation.AsAuthority {
		return s.adjustLedger(ctx, p)
	}
	k := key{p.Shop, p.Item, p.Location}
	var res reservation.AdjustResult
	err := s.inTx(ctx, callerAdjust, func(tx *sql.Tx) error {
		if _, _, ok, err := lockPool(ctx, tx, callerAdjust, k); err != nil || !ok {
			if err == nil {
				err = fmt.Errorf("mysqlstore: adjust %s: %w", k, reservation.ErrNotFound)
			}
			return err
		}
		if err := tx.QueryRowContext(ctx, tag(callerAdjust)+sqlLedgerRead, k.args()...).Scan(&res.Available); err != nil {
			return fmt.Errorf("mysqlstore: adjust %s: read ledger: %w", k, err)
		}
		res.Delta = p.Delta
		return trim(ctx, tx, callerAdjust, k)
	})
	return res, err
}

// AdjustStock changes the ledger for one item x location and trims its pool
// so that pool + held <= available holds when it commits, even with
// reserves running (see trim). Lock order: replenish lock row, ledger row,
// units, the same as every other writer of pools.
func (s *Store) AdjustStock(ctx context.Context, p *reservation.AdjustParams) (reservation.AdjustResult, error) {
	q := *p
	q.As = reservation.AsAuthority
	if err := s.cfg.Limits.ValidateAdjust(&q); err != nil {
		return reservation.AdjustResult{}, err
	}
	return s.adjustLedger(ctx, &q)
}

func (s *Store) adjustLedger(ctx context.Context, p *reservation.AdjustParams) (reservation.AdjustResult, error) {
	k := key{p.Shop, p.Item, p.Location}
	var res reservation.AdjustResult
	err := s.inTx(ctx, callerAdjust, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, tag(callerAdjust)+sqlPoolLockEnsure, k.args()...); err != nil {
			return fmt.Errorf("mysqlstore: adjust %s: lock pool: %w", k, err)
		}
		var cur int64
		err := tx.QueryRowContext(ctx, sqlLedgerLock, k.args()...).Scan(&cur)
		exists := !isNoRows(err)
		if err != nil && exists {
			return fmt.Errorf("mysqlstore: adjust %s: read ledger: %w", k, err)
		}
		next := cur + p.Delta
		switch {
		case p.Available != nil:
			next = *p.Available
		case !exists:
			return fmt.Errorf("mysqlstore: adjust %s by %d: no ledger row (set available first): %w", k, p.Delta, reservation.ErrNotFound)
		case next < 0:
			return fmt.Errorf("mysqlstore: adjust %s by %d: ledger has %d: %w", k, p.Delta, cur, reservation.ErrInsufficientStock)
		case next > s.cfg.Limits.MaxStock:
			return &reservation.ValidationError{Field: "delta", Reason: fmt.Sprintf("would take stock to %d, above %d", next, s.cfg.Limits.MaxStock)}
		}
		if _, err := tx.ExecContext(ctx, sqlLedgerUpsert, p.Shop, p.Item, p.Location, next); err != nil {
			return fmt.Errorf("mysqlstore: adjust %s: write ledger: %w", k, err)
		}
		res = reservation.AdjustResult{Available: next, Delta: next - cur}
		return trim(ctx, tx, callerAdjust, k)
	})
	return res, err
}

// Deduct is the legacy claim's ledger step: it subtracts a reservation's
// allocations exactly once per (shop, token), the claims row's primary key
// being the guard. Because the allocations come from another store, the
// pools they touch are trimmed in the same transaction so the projection
// holds even if this store's own hold was elsewhere.
func (s *Store) Deduct(ctx context.Context, p *reservation.DeductParams) (reservation.DeductResult, error) {
	if err := s.cfg.Limits.ValidateDeduct(p); err != nil {
		return reservation.DeductResult{}, err
	}
	allocs := slices.Clone(p.Allocations)
	reservation.SortAllocations(allocs)
	var res reservation.DeductResult
	err := s.inTx(ctx, callerDeduct, func(tx *sql.Tx) error {
		res = reservation.DeductResult{}
		// Replenish locks first, like every pool writer, so trimming below
		// cannot race a refill computed from the old ledger.
		for _, a := range allocs {
			if _, _, _, err := lockPool(ctx, tx, callerDeduct, key{p.Shop, a.Item, a.Location}); err != nil {
				return err
			}
		}
		inserted, err := insertClaim(ctx, tx, callerDeduct, p.Shop, p.Token, allocs)
		if err != nil {
			return err
		}
		if !inserted {
			prev, _, err := readClaim(ctx, tx, callerDeduct, p.Shop, p.Token)
			res.Allocations = prev
			return err
		}
		if err := s.deductLedger(ctx, tx, callerDeduct, p.Shop, allocs); err != nil {
			return err
		}
		// The claim is happening elsewhere (the legacy Redis claim): this
		// store's own hold of the token, if it shadows one, is settled in
		// the same transaction. Left for the shadow settle that follows,
		// the hold and the deduction would both count until it lands, and
		// a buyer could be refused units the ledger still has; if the
		// settle were lost, until the hold expired. The settle then finds
		// the claims row and answers as a replay.
		if _, err := s.removeHold(ctx, tx, callerDeduct, p.Shop, p.Token); err != nil {
			return err
		}
		for _, a := range allocs {
			if err := trim(ctx, tx, callerDeduct, key{p.Shop, a.Item, a.Location}); err != nil {
				return err
			}
		}
		res = reservation.DeductResult{Applied: true, Allocations: allocs}
		return nil
	})
	return res, err
}
