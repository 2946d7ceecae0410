package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
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
		if p.Key != "" {
			if _, err := tx.ExecContext(ctx, sqlAdjustKeyInsert, p.Shop, p.Key, p.Item, p.Location, adjustRequest(p)); err != nil {
				if mysqlErrno(err) == errDupEntry {
					return errAdjustReplay
				}
				return fmt.Errorf("mysqlstore: adjust %s: record key: %w", k, err)
			}
		}
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
		if p.Key != "" {
			if _, err := tx.ExecContext(ctx, sqlAdjustKeyResult, res.Delta, res.Available, p.Shop, p.Key); err != nil {
				return fmt.Errorf("mysqlstore: adjust %s: record result: %w", k, err)
			}
		}
		return trim(ctx, tx, callerAdjust, k)
	})
	if errors.Is(err, errAdjustReplay) {
		return s.adjustReplay(ctx, p)
	}
	return res, err
}

// errAdjustReplay: the adjust's key was taken (rolls the transaction back).
var errAdjustReplay = errors.New("mysqlstore: adjust key applied before")

// adjustRequest is what an adjust asked, as its key's row records it.
func adjustRequest(p *reservation.AdjustParams) string {
	if p.Available != nil {
		return fmt.Sprintf("available=%d", *p.Available)
	}
	return fmt.Sprintf("delta=%d", p.Delta)
}

// adjustReplay answers a repeated adjust key from its row: the first
// call's result, or a conflict when the key was used for another change.
func (s *Store) adjustReplay(ctx context.Context, p *reservation.AdjustParams) (reservation.AdjustResult, error) {
	c, err := s.acquire(ctx, callerAdjust)
	if err != nil {
		return reservation.AdjustResult{}, err
	}
	defer c.release()
	var item, loc int64
	var request string
	res := reservation.AdjustResult{Replayed: true}
	if err := c.QueryRowContext(ctx, sqlAdjustKeyRead, p.Shop, p.Key).Scan(&item, &loc, &request, &res.Delta, &res.Available); err != nil {
		return reservation.AdjustResult{}, fmt.Errorf("mysqlstore: adjust shop %d key %q: read its first result: %w", p.Shop, p.Key, err)
	}
	if item != p.Item || loc != p.Location || request != adjustRequest(p) {
		return reservation.AdjustResult{}, fmt.Errorf("mysqlstore: adjust shop %d key %q was used for item %d location %d %s, not item %d location %d %s: %w",
			p.Shop, p.Key, item, loc, request, p.Item, p.Location, adjustRequest(p), reservation.ErrTokenConflict)
	}
	return res, nil
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
		// The claims row first: its primary key makes the deduction happen
		// once, and a repeat returns here without queueing on the hot
		// pool and ledger rows (a retry storm after a fault is mostly
		// repeats).
		inserted, err := insertClaim(ctx, tx, callerDeduct, p.Shop, p.Token, allocs)
		if err != nil {
			return err
		}
		if !inserted {
			prev, _, err := readClaim(ctx, tx, callerDeduct, p.Shop, p.Token)
			res.Allocations = prev
			return err
		}
		// The claim is happening elsewhere (the legacy Redis claim): this
		// store's own hold of the token, if it shadows one, is settled in
		// the same transaction. Left for the shadow settle that follows,
		// the hold and the deduction would both count until it lands, and
		// a buyer could be refused units the ledger still has; if the
		// settle were lost, until the hold expired. The claims row records
		// that a hold was settled here, and the settle then answers as a
		// replay (without one it answers ErrNotFound: this store never
		// held the cart, which the comparer counts). It comes after the
		// claims insert, which a concurrent reserve's claimedMeanwhile
		// relies on, and is one statement: in redis mode (no shadow) there
		// is never a hold.
		removed, err := tx.ExecContext(ctx, tag(callerDeduct)+sqlHoldsDelete, p.Shop, p.Token)
		if err != nil {
			return fmt.Errorf("mysqlstore: deduct: settle this store's hold: %w", err)
		}
		if n, _ := removed.RowsAffected(); n > 0 {
			if _, err := tx.ExecContext(ctx, tag(callerDeduct)+sqlClaimHeld, viaDeductHeld, p.Shop, p.Token); err != nil {
				return fmt.Errorf("mysqlstore: deduct: mark the settled hold: %w", err)
			}
		}
		// Then the replenish locks, like every pool writer, so trimming
		// below cannot race a refill computed from the old ledger.
		for _, a := range allocs {
			if _, _, _, err := lockPool(ctx, tx, callerDeduct, key{p.Shop, a.Item, a.Location}); err != nil {
				return err
			}
		}
		if err := s.deductLedger(ctx, tx, callerDeduct, p.Shop, allocs); err != nil {
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
