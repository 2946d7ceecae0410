package mysqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Every reservation has one row in reservations: its state (held, or a
// terminal state kept as a tombstone), what it holds or held, and which
// store decided it. Every transition of a reservation locks that row
// first, and every deciding transaction of a shop holds a shared lock on
// the shop's fence row (docs/ownership.md). This file reads and writes
// both.

// fenceRow is a shop's fence as a transaction read it.
type fenceRow struct {
	found bool
	fence reservation.Fence
}

// effective is the fence the row stands for: no row is NoFence.
func (f fenceRow) effective() reservation.Fence {
	if !f.found {
		return reservation.NoFence
	}
	return f.fence
}

// stateRow is a reservation's row as a transaction read it.
type stateRow struct {
	found     bool
	state     reservation.State
	allocs    []reservation.Allocation
	short     []reservation.ShortLine
	expiresAt time.Time
}

// readFenceAndState runs one of the sqlFenceAndState statements
// (withClaim: the one that also reads the claims row).
func readFenceAndState(ctx context.Context, tx *sql.Tx, query string, shop int64, token string, withClaim bool) (fenceRow, stateRow, error) {
	args := []any{shop, fenceSlot(token), shop, token}
	if withClaim {
		args = append(args, shop, token)
	}
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return fenceRow{}, stateRow{}, err
	}
	defer rows.Close()
	var f fenceRow
	var st stateRow
	var claimed []reservation.Allocation
	var wasClaimed bool
	for rows.Next() {
		var kind, a, b, c string
		var n int64
		var t sqlTime
		if err := rows.Scan(&kind, &a, &b, &c, &n, &t); err != nil {
			return fenceRow{}, stateRow{}, err
		}
		switch kind {
		case "fence":
			f = fenceRow{found: true, fence: reservation.Fence{Decider: reservation.Authority(a), Epoch: n}}
		case "claim":
			wasClaimed = true
			if err := json.Unmarshal([]byte(b), &claimed); err != nil {
				return fenceRow{}, stateRow{}, fmt.Errorf("mysqlstore: claims row of shop %d token %q: %w", shop, token, err)
			}
		case "state":
			st = stateRow{found: true, state: reservation.State(a), expiresAt: t.Time}
			if st.allocs, err = reservation.DecodeAllocations(b); err != nil {
				return fenceRow{}, stateRow{}, err
			}
			if st.short, err = reservation.DecodeShort(c); err != nil {
				return fenceRow{}, stateRow{}, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return fenceRow{}, stateRow{}, err
	}
	if wasClaimed && !st.found {
		// The tombstone was forgotten; the ledger's claim never is.
		reservation.SortAllocations(claimed)
		st = stateRow{found: true, state: reservation.StateClaimed, allocs: claimed}
	}
	return f, st, nil
}

// decides refuses a deciding call when MySQL does not decide the shop.
func (s *Store) decides(shop int64, f fenceRow) error {
	if fence := f.effective(); fence.Decider != reservation.AuthorityMySQL {
		s.metrics.notDecider.Inc()
		return &reservation.NotDeciderError{Shop: shop, Store: reservation.AuthorityMySQL, Fence: fence}
	}
	return nil
}

// checkShadowFence makes sure a shadow write (kept while Redis decides)
// never lands in a shop MySQL decides. A fence row read at the start with
// a shared lock settles it: a handoff cannot change it before this
// transaction ends. Without a row there was nothing to lock, so the row is
// read again, locked, after the write: a handoff to MySQL that creates it
// meanwhile either committed (and is seen) or waits for this transaction
// (the row it inserted is locked), and in both cases it locks the
// reservation rows of the shop, this transaction's included, before it
// copies Redis's state in. So the write lands before the copy, which
// replaces it, or is refused.
func (s *Store) checkShadowFence(ctx context.Context, tx *sql.Tx, caller string, shop int64, token string, atStart fenceRow) error {
	f := atStart
	if !f.found {
		var d string
		var e int64
		err := tx.QueryRowContext(ctx, tag(caller)+sqlShadowFence, shop, fenceSlot(token)).Scan(&d, &e)
		switch {
		case isNoRows(err):
		case err != nil:
			return fmt.Errorf("mysqlstore: %s: read fence of shop %d: %w", caller, shop, err)
		default:
			f = fenceRow{found: true, fence: reservation.Fence{Decider: reservation.Authority(d), Epoch: e}}
		}
	}
	if fence := f.effective(); fence.Decider == reservation.AuthorityMySQL {
		s.metrics.notDecider.Inc()
		return &reservation.NotDeciderError{Shop: shop, Store: reservation.AuthorityMySQL, Fence: fence}
	}
	return nil
}

// tombstoneErr is the answer to a call on a terminal reservation, for an
// operation that needs it held (reserve, claim).
func (s *Store) tombstoneErr(op string, shop int64, token string, st stateRow) error {
	s.metrics.tombstoneHits.WithLabelValues(string(st.state)).Inc()
	return fmt.Errorf("mysqlstore: %s shop %d token %q (%s): %w", op, shop, token, st.state, st.state.TombstoneErr())
}

// forgetSeconds is how long a tombstone is kept, for INTERVAL ? SECOND.
func (s *Store) forgetSeconds() int64 { return int64(s.cfg.TombstoneTTL / time.Second) }

// insertState inserts a reservation's row. inserted is false when the
// token already has one (another call with it got there first).
func (s *Store) insertState(ctx context.Context, tx *sql.Tx, caller string, shop int64, token string, state reservation.State,
	decidedBy reservation.Authority, allocs []reservation.Allocation, short []reservation.ShortLine, expires time.Time) (inserted bool, err error) {
	var exp any // none (a refusal): the database's now
	if !expires.IsZero() {
		exp = expires
	}
	_, err = tx.ExecContext(ctx, tag(caller)+sqlStateInsert, shop, token, string(state), string(decidedBy),
		reservation.EncodeAllocations(allocs), reservation.EncodeShort(short), exp)
	if mysqlErrno(err) == errDupEntry {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mysqlstore: %s: record %s reservation: %w", caller, state, err)
	}
	if state.Terminal() {
		s.metrics.tombstones.WithLabelValues(string(state)).Inc()
	}
	return true, nil
}

// endState moves a held reservation to a terminal state. With live, the
// hold must also be unexpired now (the statement's clock, after the row
// lock). ended is false when the guard did not hold.
func (s *Store) endState(ctx context.Context, tx *sql.Tx, caller string, shop int64, token string, state reservation.State,
	decidedBy reservation.Authority, live bool) (ended bool, err error) {
	q := sqlStateEnd
	if live {
		q = sqlStateEndLive
	}
	res, err := tx.ExecContext(ctx, tag(caller)+q, string(state), string(decidedBy), shop, token)
	if err != nil {
		return false, fmt.Errorf("mysqlstore: %s: record %s: %w", caller, state, err)
	}
	n, _ := res.RowsAffected()
	if n == 1 {
		s.metrics.tombstones.WithLabelValues(string(state)).Inc()
	}
	return n == 1, nil
}

// feedState records that Redis must follow the token's new state.
func (s *Store) feedState(ctx context.Context, tx *sql.Tx, caller string, shop int64, token string) error {
	if s.cfg.NoFeed {
		return nil
	}
	if _, err := tx.ExecContext(ctx, tag(caller)+sqlFeedState, shop, token); err != nil {
		return fmt.Errorf("mysqlstore: %s: record the change for Redis: %w", caller, err)
	}
	s.metrics.feedWritten.WithLabelValues(string(reservation.ChangeState)).Inc()
	return nil
}
