package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

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
			fed, err := tx.ExecContext(ctx, tag(callerAdjust)+sqlFeedAdjust, p.Shop, p.Item, p.Location, res.Delta, traceparent(ctx))
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
