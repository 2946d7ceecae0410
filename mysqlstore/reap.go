package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Reap expires held reservations past their expiry, oldest first, judged
// by the database's clock (NOW(3)), never the app server's, and then
// forgets tombstones past their time.
//
// It takes whole reservations (their rows, with SKIP LOCKED), never single
// hold lines: a claim or release holding a reservation's row is skipped,
// and one the reaper holds waits for it, so a claim is never left with
// part of a cart. Several reapers share the work and each hold is expired
// once. A shop MySQL decides gets expired tombstones and changes for Redis
// to follow; in a shop Redis decides, MySQL's own shadow holds expire
// quietly (Redis expires the real ones), and in a shop being copied into
// MySQL nothing expires: the copied holds are Redis's until the cut-over.
// Like Release, it deletes the hold lines; the replenisher brings the units
// back into the pool when a reserve needs them.
func (s *Store) Reap(ctx context.Context, p *reservation.ReapParams) (reservation.ReapResult, error) {
	if err := s.cfg.Limits.ValidateReap(p); err != nil {
		return reservation.ReapResult{}, err
	}
	limit := p.Limit
	if limit == 0 {
		limit = s.cfg.ReapBatch
	}
	var res reservation.ReapResult
	// Counted after the commit: an attempt that rolled back (a deadlock,
	// retried) wrote nothing.
	var fed, expired int
	err := s.inTx(ctx, callerReap, func(tx *sql.Tx) error {
		res, fed, expired = reservation.ReapResult{}, 0, 0
		due, err := s.dueReservations(ctx, tx, limit)
		if err != nil || len(due) == 0 {
			return err
		}
		deciding, copying, err := s.decidingShops(ctx, tx, due)
		if err != nil {
			return err
		}
		due = slices.DeleteFunc(due, func(d dueReservation) bool { return copying[d.shop] })
		if len(due) == 0 {
			return nil
		}
		args := make([]any, 0, 2*len(due))
		for _, d := range due {
			args = append(args, d.shop, d.token)
		}
		if _, err := tx.ExecContext(ctx, reapExpireQuery(len(due)), args...); err != nil {
			return fmt.Errorf("mysqlstore: reap: expire: %w", err)
		}
		if _, err := tx.ExecContext(ctx, reapDeleteQuery(len(due)), args...); err != nil {
			return fmt.Errorf("mysqlstore: reap: delete holds: %w", err)
		}
		var feed []any
		for _, d := range due {
			if deciding[d.shop] {
				feed = append(feed, d.shop, d.token)
			}
			res.Holds += len(d.allocs)
			res.Units += reservation.TotalQuantity(d.allocs)
		}
		if len(feed) > 0 && !s.cfg.NoFeed {
			if _, err := tx.ExecContext(ctx, feedStatesQuery(callerReap, len(feed)/2), feed...); err != nil {
				return fmt.Errorf("mysqlstore: reap: record the changes for Redis: %w", err)
			}
			fed = len(feed) / 2
		}
		expired = len(due)
		return nil
	})
	if err != nil {
		return reservation.ReapResult{}, err
	}
	s.metrics.feedWritten.WithLabelValues(string(reservation.ChangeState)).Add(float64(fed))
	s.metrics.tombstones.WithLabelValues(string(reservation.StateExpired)).Add(float64(expired))
	s.metrics.reapedHolds.Add(float64(res.Holds))
	if err := s.forget(ctx, limit); err != nil {
		return res, err
	}
	return res, nil
}

type dueReservation struct {
	shop   int64
	token  string
	allocs []reservation.Allocation
}

func (s *Store) dueReservations(ctx context.Context, tx *sql.Tx, limit int) ([]dueReservation, error) {
	rows, err := tx.QueryContext(ctx, sqlReapSelect, limit)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: reap: %w", err)
	}
	defer rows.Close()
	var due []dueReservation
	for rows.Next() {
		var d dueReservation
		var allocs string
		if err := rows.Scan(&d.shop, &d.token, &allocs); err != nil {
			return nil, err
		}
		if d.allocs, err = reservation.DecodeAllocations(allocs); err != nil {
			return nil, err
		}
		due = append(due, d)
	}
	return due, rows.Err()
}

// decidingShops returns which shops of due MySQL decides, and which a copy
// into MySQL is under way in, holding a shared lock on their fence rows
// until the reap commits: a handoff to Redis drains these changes before
// Redis decides, and a copy that began since the select waits for the
// reap instead of being overtaken by it.
func (s *Store) decidingShops(ctx context.Context, tx *sql.Tx, due []dueReservation) (deciding, copying map[int64]bool, err error) {
	seen := map[int64]bool{}
	var args []any
	for _, d := range due {
		if !seen[d.shop] {
			seen[d.shop] = true
			args = append(args, d.shop)
		}
	}
	rows, err := tx.QueryContext(ctx, reapFencesQuery(len(args)), args...)
	if err != nil {
		return nil, nil, fmt.Errorf("mysqlstore: reap: fences: %w", err)
	}
	defer rows.Close()
	deciding, copying = map[int64]bool{}, map[int64]bool{}
	for rows.Next() {
		var shop, copy int64
		var decider string
		if err := rows.Scan(&shop, &decider, &copy); err != nil {
			return nil, nil, err
		}
		deciding[shop] = decider == string(reservation.AuthorityMySQL)
		copying[shop] = copy != 0
	}
	return deciding, copying, rows.Err()
}

// forget deletes up to limit tombstones past their time (their hold's
// expiry older than Config.TombstoneTTL) that Redis may have no pending
// change about.
func (s *Store) forget(ctx context.Context, limit int) error {
	// A transaction of its own, so a deadlock with a transition moving a
	// row between the index ranges it scans is retried.
	var n int64
	err := s.inTx(ctx, callerForget, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, sqlForget, s.forgetSeconds(), limit)
		if err != nil {
			return fmt.Errorf("mysqlstore: forget tombstones: %w", err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	if err != nil {
		return err
	}
	s.metrics.forgotten.Add(float64(n))
	return nil
}
