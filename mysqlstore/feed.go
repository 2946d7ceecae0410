package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// The change feed: a transactional outbox. Every change Redis must follow
// (MySQL's decisions, the ledger's deltas and claims, fences) is a row of
// reservation_outbox written in the transaction that makes the change. The
// relay (package mirror) reads pending rows, applies them to Redis and
// deletes them. A state change carries no state of its own: it is read
// with the reservation's current state, so delivering it late or twice
// applies the latest state, which is what makes redelivery harmless.

// maxFeedBatch bounds one read of the feed.
const maxFeedBatch = 10000

// Pending returns up to limit pending changes, oldest first: of one shop,
// or of every shop when shop is 0. Changes still being written by
// transactions in flight are not visible yet and come in a later call; the
// order that matters (a shop's fence change after every change of that
// shop MySQL decided) holds, because those transactions held the fence row
// the fence change waited for.
func (s *Store) Pending(ctx context.Context, shop int64, limit int) ([]reservation.Change, error) {
	if shop < 0 || limit < 1 || limit > maxFeedBatch {
		return nil, &reservation.ValidationError{Field: "shop, limit", Reason: fmt.Sprintf("want shop >= 0 and limit in 1..%d, got %d and %d", maxFeedBatch, shop, limit)}
	}
	if shop == 0 {
		return s.pending(ctx, sqlFeedPending, limit)
	}
	return s.pending(ctx, sqlFeedPendingShop, shop, limit)
}

func (s *Store) pending(ctx context.Context, query string, args ...any) ([]reservation.Change, error) {
	c, err := s.acquire(ctx, callerFeed)
	if err != nil {
		return nil, err
	}
	defer c.release()
	rows, err := c.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: pending changes: %w", err)
	}
	defer rows.Close()
	var out []reservation.Change
	for rows.Next() {
		var ch reservation.Change
		var kind, decider, state, allocs, short, cart string
		var exp, since sql.NullTime
		if err := rows.Scan(&ch.ID, &ch.Shop, &kind, &ch.Token, &ch.Item, &ch.Location, &ch.Delta,
			&decider, &ch.Fence.Epoch, &state, &allocs, &short, &exp, &since, &ch.Written, &cart, &ch.CartLabel, &ch.Trace); err != nil {
			return nil, err
		}
		// The cart serves a comparison only: one that cannot be read is
		// dropped (nothing is compared), never a reason to hold up the
		// change Redis must follow.
		if lines, err := reservation.DecodeCart(cart); err == nil {
			ch.Cart = lines
		} else {
			ch.CartLabel = ""
		}
		ch.Kind, ch.Fence.Decider, ch.State, ch.ExpiresAt = reservation.ChangeKind(kind), reservation.Authority(decider), reservation.State(state), exp.Time
		ch.StateSince = since.Time
		if ch.Allocations, err = reservation.DecodeAllocations(allocs); err != nil {
			return nil, fmt.Errorf("mysqlstore: change %d: %w", ch.ID, err)
		}
		if ch.Short, err = reservation.DecodeShort(short); err != nil {
			return nil, fmt.Errorf("mysqlstore: change %d: %w", ch.ID, err)
		}
		out = append(out, ch)
	}
	return out, rows.Err()
}

// PendingExcept is Pending of every shop but those of skip: what the relay
// reads past shops stopped at a change Redis does not apply.
func (s *Store) PendingExcept(ctx context.Context, skip []int64, limit int) ([]reservation.Change, error) {
	if len(skip) == 0 {
		return s.Pending(ctx, 0, limit)
	}
	if limit < 1 || limit > maxFeedBatch || len(skip) > maxDoneBatch {
		return nil, &reservation.ValidationError{Field: "skip, limit", Reason: fmt.Sprintf("want at most %d shops and limit in 1..%d, got %d and %d", maxDoneBatch, maxFeedBatch, len(skip), limit)}
	}
	args := make([]any, 0, len(skip)+1)
	for _, sh := range skip {
		args = append(args, sh)
	}
	args = append(args, limit)
	return s.pending(ctx, sqlFeedPendingSelect+` WHERE o.shop_id NOT IN (`+repeatJoin("?", ",", len(skip))+`) ORDER BY o.id LIMIT ?`, args...)
}

// Done deletes delivered changes. Deleting one twice (two deliverers) is
// harmless.
//
// The relay keeps the outbox nearly empty, so a list of ids often names
// most of its rows, and the optimizer then scans the whole table rather
// than look the ids up: the scan locks, and waits on, the changes deciding
// transactions have just written and not yet committed. ORDER BY id LIMIT
// (the ids sorted) makes it walk the primary key from the lowest id and
// stop at the last one. And it runs at READ COMMITTED: at the session's
// default, REPEATABLE READ, that walk also locks the gap after the last
// id, which is where every deciding transaction inserts its change, so
// each of them would wait for this delete's commit (measured: the facade
// in mysql mode had 1.3-1.6x the p99 of the same without the feed).
func (s *Store) Done(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	c, err := s.acquire(ctx, callerFeed)
	if err != nil {
		return err
	}
	defer c.release()
	for start := 0; start < len(ids); start += maxDoneBatch {
		batch := ids[start:min(start+maxDoneBatch, len(ids))]
		if _, err := c.ExecContext(ctx, relayDoneQuery(len(batch)), feedDoneArgs(batch)...); err != nil {
			return fmt.Errorf("mysqlstore: delete delivered changes: %w", err)
		}
	}
	return nil
}

func feedDoneArgs(ids []int64) []any {
	args := make([]any, 0, len(ids)+1)
	for _, id := range ids {
		args = append(args, id)
	}
	return append(args, len(ids))
}

const maxDoneBatch = 1000

// Backlog reports how many changes are pending and how old the oldest is
// (by the database's clock): the relay's lag.
func (s *Store) Backlog(ctx context.Context) (changes int64, oldest time.Duration, err error) {
	c, err := s.acquire(ctx, callerFeed)
	if err != nil {
		return 0, 0, err
	}
	defer c.release()
	var us int64
	if err := c.QueryRowContext(ctx, sqlFeedBacklog).Scan(&changes, &us); err != nil {
		return 0, 0, fmt.Errorf("mysqlstore: feed backlog: %w", err)
	}
	return changes, time.Duration(max(us, 0)) * time.Microsecond, nil
}

// CopyShop is the copy step of copy and catch-up for one shop: with the
// shop's fence row locked (MySQL decides nothing for the shop meanwhile),
// it reads one consistent snapshot of the shop's reservations, ledger and
// pending changes, calls write (which rewrites the shop in Redis), and
// then deletes the pending changes the snapshot covered. Changes committed
// after the snapshot stay pending; the relay applies them on top. If write
// fails nothing is deleted.
func (s *Store) CopyShop(ctx context.Context, shop int64, write func(ctx context.Context, c *reservation.ShopCopy) error) error {
	if shop <= 0 {
		return &reservation.ValidationError{Field: "shop", Reason: fmt.Sprintf("must be a positive id, got %d", shop)}
	}
	c, err := s.acquire(ctx, callerHandoff)
	if err != nil {
		return err
	}
	defer c.release()
	// REPEATABLE READ: every read below sees one snapshot, taken after the
	// fence row and the ledger rows were locked (the first plain read
	// starts it), so it holds every change committed by the deciding
	// transactions and the adjusts the locks waited for. The ledger rows
	// stay locked (shared) until the copy is written: an adjust takes no
	// fence lock, and one committed after the snapshot could be delivered
	// by the relay before the copy is written, which would set its
	// quantity back (the copy does not include it) for good (its marker
	// is set); held, the adjust waits and is delivered on top of the copy.
	tx, err := c.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return fmt.Errorf("mysqlstore: copy shop %d: %w", shop, err)
	}
	defer func() { _ = tx.Rollback() }()
	fence, err := lockFence(ctx, tx, shop)
	if err != nil {
		return err
	}
	if err := lockLedger(ctx, tx, sqlCopyLedgerLock, shop); err != nil {
		return fmt.Errorf("mysqlstore: copy shop %d: %w", shop, err)
	}
	cp := &reservation.ShopCopy{Snapshot: reservation.Snapshot{Shop: shop, Fence: fence}}
	if err := s.readCopy(ctx, tx, cp); err != nil {
		return fmt.Errorf("mysqlstore: copy shop %d: %w", shop, err)
	}
	if err := write(ctx, cp); err != nil {
		return err
	}
	if len(cp.Covered) > 0 {
		if _, err := tx.ExecContext(ctx, feedDoneQuery(len(cp.Covered)), feedDoneArgs(cp.Covered)...); err != nil {
			return fmt.Errorf("mysqlstore: copy shop %d: delete covered changes: %w", shop, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("mysqlstore: copy shop %d: %w", shop, err)
	}
	return nil
}

func (s *Store) readCopy(ctx context.Context, tx *sql.Tx, cp *reservation.ShopCopy) error {
	shop := cp.Snapshot.Shop
	rows, err := tx.QueryContext(ctx, sqlCopyStates, shop)
	if err != nil {
		return err
	}
	for rows.Next() {
		var token, state, by, allocs, short string
		var exp sql.NullTime
		if err := rows.Scan(&token, &state, &by, &allocs, &short, &exp); err != nil {
			rows.Close()
			return err
		}
		as, err1 := reservation.DecodeAllocations(allocs)
		ss, err2 := reservation.DecodeShort(short)
		if err := errors.Join(err1, err2); err != nil {
			rows.Close()
			return err
		}
		if st := reservation.State(state); st == reservation.StateHeld {
			cp.Snapshot.Holds = append(cp.Snapshot.Holds, reservation.Hold{Shop: shop, Token: token, Allocations: as,
				ExpiresAt: exp.Time, Authority: reservation.Authority(by)})
		} else {
			cp.Snapshot.Tombstones = append(cp.Snapshot.Tombstones, reservation.Tombstone{Token: token, State: st,
				Allocations: as, ExpiresAt: exp.Time, Short: ss})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if rows, err = tx.QueryContext(ctx, sqlCopyLedger, shop); err != nil {
		return err
	}
	for rows.Next() {
		l := reservation.StockLevel{Shop: shop}
		if err := rows.Scan(&l.Item, &l.Location, &l.Available); err != nil {
			rows.Close()
			return err
		}
		cp.Ledger = append(cp.Ledger, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if rows, err = tx.QueryContext(ctx, sqlCopyPending, shop); err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var kind string
		if err := rows.Scan(&id, &kind); err != nil {
			return err
		}
		cp.Covered = append(cp.Covered, id)
		if reservation.ChangeKind(kind) == reservation.ChangeAdjust {
			cp.CoveredAdjusts = append(cp.CoveredAdjusts, id)
		}
	}
	return rows.Err()
}

// lockLedger runs a locking read of a shop's ledger rows (query takes the
// shop) and drops what it read: the locks are what it is for.
func lockLedger(ctx context.Context, tx *sql.Tx, query string, shop int64) error {
	rows, err := tx.QueryContext(ctx, query, shop)
	if err != nil {
		return err
	}
	for rows.Next() {
	}
	if err := rows.Close(); err != nil {
		return err
	}
	return rows.Err()
}
