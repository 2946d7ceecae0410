package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Adjust applies a merchant's stock change to the ledger (AdjustStock):
// the store is the ledger, whoever decides the shop's reservations. Redis
// follows the change through the change feed. As shadow it is refused:
// there is nothing for a shadow to follow that the feed does not carry.
func (s *Store) Adjust(ctx context.Context, p *reservation.AdjustParams) (reservation.AdjustResult, error) {
	if err := s.cfg.Limits.ValidateAdjust(p); err != nil {
		return reservation.AdjustResult{}, err
	}
	if p.As != reservation.AsAuthority {
		return reservation.AdjustResult{}, &reservation.ValidationError{Field: "as", Reason: "an adjust changes the ledger; Redis follows it through the change feed"}
	}
	return s.adjustLedger(ctx, p)
}

// AdjustStock changes the ledger for one item x location, trims its pool
// so that pool + held <= available holds when it commits, even with
// reserves running (see trim), and records the delta in the change feed
// (AdjustResult.ChangeID) for Redis to follow. Lock order: replenish lock
// row, ledger row, units, the same as every other writer of pools.
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
		if res.Delta != 0 {
			fed, err := tx.ExecContext(ctx, tag(callerAdjust)+sqlFeedAdjust, p.Shop, p.Item, p.Location, res.Delta)
			if err != nil {
				return fmt.Errorf("mysqlstore: adjust %s: record the change for Redis: %w", k, err)
			}
			if res.ChangeID, err = fed.LastInsertId(); err != nil {
				return fmt.Errorf("mysqlstore: adjust %s: change id: %w", k, err)
			}
			s.metrics.feedWritten.WithLabelValues(string(reservation.ChangeAdjust)).Inc()
		}
		if p.Key != "" {
			if _, err := tx.ExecContext(ctx, sqlAdjustKeyResult, res.Delta, res.Available, res.ChangeID, p.Shop, p.Key); err != nil {
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
	if err := c.QueryRowContext(ctx, sqlAdjustKeyRead, p.Shop, p.Key).Scan(&item, &loc, &request, &res.Delta, &res.Available, &res.ChangeID); err != nil {
		return reservation.AdjustResult{}, fmt.Errorf("mysqlstore: adjust shop %d key %q: read its first result: %w", p.Shop, p.Key, err)
	}
	if item != p.Item || loc != p.Location || request != adjustRequest(p) {
		return reservation.AdjustResult{}, fmt.Errorf("mysqlstore: adjust shop %d key %q was used for item %d location %d %s, not item %d location %d %s: %w",
			p.Shop, p.Key, item, loc, request, p.Item, p.Location, adjustRequest(p), reservation.ErrTokenConflict)
	}
	return res, nil
}

// Deduct is the legacy claim's ledger step, for a reservation Redis
// decided: it subtracts the allocations exactly once per (shop, token),
// the claims row's primary key being the guard. In the same transaction it
// records the reservation as claimed (removing this store's shadow hold of
// it), trims the pools the allocations touch by what the deduction takes
// from them beyond that hold (the allocations come from another store, so
// the projection pool + held <= available must hold even if this store's
// hold was elsewhere or absent), and records the change in the feed, so
// Redis follows the claim even if the legacy claim's own Redis step is
// lost.
//
// It refuses (*reservation.NotDeciderError, nothing changed) when MySQL
// decides the shop: a handoff to MySQL overtook the legacy claim after
// Redis checked its hold, and MySQL, which now holds the reservation, must
// decide the claim. The fence is read after the reservation's row is
// locked (see checkShadowFence for why that order closes the race).
//
// Batched, it is two round trips: the claims row, the reservation's row,
// this store's hold lines (locked) and the fence in the first; the writes
// with the COMMIT in the second. The hot rows (ledger) are written in that
// last batch only, so their locks are held for server time. It takes no
// replenish lock row: a refill reads the ledger row with a shared lock
// (see replenish), so it sees either nothing of a deduct or all of it.
func (s *Store) Deduct(ctx context.Context, p *reservation.DeductParams) (reservation.DeductResult, error) {
	if err := s.cfg.Limits.ValidateDeduct(p); err != nil {
		return reservation.DeductResult{}, err
	}
	allocs := slices.Clone(p.Allocations)
	reservation.SortAllocations(allocs)
	var res reservation.DeductResult
	err := s.inBatch(ctx, callerDeduct, func(t *txn) error {
		res = reservation.DeductResult{}
		// The claims row first: its primary key makes the deduction happen
		// once, and a repeat stops here without queueing on the hot
		// ledger rows (a retry storm after a fault is mostly repeats).
		if err := insertClaim(t, callerDeduct, p.Shop, p.Token, allocs); err != nil {
			return err
		}
		if err := t.exec(tag(callerDeduct)+sqlStateClaimed, p.Shop, p.Token, reservation.EncodeAllocations(allocs)); err != nil {
			return fmt.Errorf("mysqlstore: deduct: record the claim: %w", err)
		}
		held := map[key]int64{}
		err := t.query(func(_ int, rows *sql.Rows) error {
			for rows.Next() {
				var item, loc, q int64
				if err := rows.Scan(&item, &loc, &q); err != nil {
					return err
				}
				held[key{p.Shop, item, loc}] += q
			}
			return nil
		}, stmt{tag(callerDeduct) + sqlHoldsLock, []any{p.Shop, p.Token}})
		if err != nil {
			return fmt.Errorf("mysqlstore: deduct: %w", err)
		}
		if err := s.checkShadowFence(t, callerDeduct, p.Shop, p.Token, fenceRow{}); err != nil {
			return err
		}
		if len(held) > 0 {
			if err := t.exec(tag(callerDeduct)+sqlHoldsDelete, p.Shop, p.Token); err != nil {
				return fmt.Errorf("mysqlstore: deduct: settle this store's hold: %w", err)
			}
		}
		if err := s.deductLedger(t, callerDeduct, p.Shop, allocs); err != nil {
			return err
		}
		// pool + held <= available held before; this removes held[k] from
		// held and a.Quantity from available, so taking the difference
		// from the pool keeps it. (It may take more than the slack
		// required, which is safe: the next reserve refills.)
		for _, a := range allocs {
			k := key{p.Shop, a.Item, a.Location}
			if n := a.Quantity - held[k]; n > 0 {
				if err := t.exec(tag(callerDeduct)+sqlPoolTrim, k.shop, k.item, k.loc, n); err != nil {
					return fmt.Errorf("mysqlstore: deduct: trim %s: %w", k, err)
				}
			}
		}
		if err := s.feedState(t, callerDeduct, p.Shop, p.Token); err != nil {
			return err
		}
		t.afterCommit(func() { s.metrics.tombstones.WithLabelValues(string(reservation.StateClaimed)).Inc() })
		res = reservation.DeductResult{Applied: true, Allocations: allocs}
		return nil
	})
	switch mysqlErrno(err) {
	case errDupEntry:
		// Deducted before: the answer is that deduction.
		prev, _, err := readClaim(ctx, s.db, callerDeduct, p.Shop, p.Token)
		if err != nil {
			return reservation.DeductResult{}, err
		}
		return reservation.DeductResult{Allocations: prev}, nil
	case errExpectRows:
		return reservation.DeductResult{}, fmt.Errorf("mysqlstore: deduct shop %d token %q: the ledger cannot give %s: %w",
			p.Shop, p.Token, reservation.EncodeAllocations(allocs), reservation.ErrInsufficientStock)
	}
	if err != nil {
		return reservation.DeductResult{}, err
	}
	return res, nil
}
