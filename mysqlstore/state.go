package mysqlstore

import (
	"database/sql"
	"encoding/json"
	"errors"
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
	// copying: a copy of Redis's state into MySQL is under way (copy.go):
	// MySQL keeps no shadow hold of its own meanwhile.
	copying bool
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

// fenceAndState is one of the sqlFenceAndState statements for a token
// (withClaim: the one that also reads the claims row); its scan sets *f
// and *st (scanFenceAndState).
func fenceAndState(query string, shop int64, token string, withClaim bool, f *fenceRow, st *stateRow) stmt {
	args := []any{shop, fenceSlot(token), shop, token}
	if withClaim {
		args = append(args, shop, token)
	}
	return stmt{sql: query, args: args, scan: func(rows *sql.Rows) (err error) {
		*f, *st, err = scanFenceAndState(rows, shop, token)
		return err
	}}
}

// readFenceAndState runs a fenceAndState statement on its own.
func readFenceAndState(t *txn, query string, shop int64, token string, withClaim bool) (f fenceRow, st stateRow, err error) {
	err = t.query(fenceAndState(query, shop, token, withClaim, &f, &st))
	return f, st, err
}

// scanFenceAndState reads the rows of a fenceAndState statement.
func scanFenceAndState(rows *sql.Rows, shop int64, token string) (fenceRow, stateRow, error) {
	var f fenceRow
	var st stateRow
	var claimed []reservation.Allocation
	var wasClaimed bool
	for rows.Next() {
		var kind, a, b, c string
		var n int64
		var t sql.NullTime
		if err := rows.Scan(&kind, &a, &b, &c, &n, &t); err != nil {
			return fenceRow{}, stateRow{}, err
		}
		switch kind {
		case "fence":
			f = fenceRow{found: true, fence: reservation.Fence{Decider: reservation.Authority(a), Epoch: n}, copying: b != "" && b != "0"}
		case "claim":
			wasClaimed = true
			if err := json.Unmarshal([]byte(b), &claimed); err != nil {
				return fenceRow{}, stateRow{}, fmt.Errorf("mysqlstore: claims row of shop %d token %q: %w", shop, token, err)
			}
		case "state":
			var err error
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

// scanNow reads the one row of sqlNow.
func scanNow(rows *sql.Rows) (time.Time, error) {
	var now sql.NullTime
	if !rows.Next() {
		return time.Time{}, errors.New("mysqlstore: NOW(3) returned no row")
	}
	err := rows.Scan(&now)
	return now.Time, err
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
// never lands in a shop MySQL decides, nor in one whose state is being
// copied in from Redis ahead of a handoff (copy.go). A fence row read at the start with
// a shared lock settles it: a handoff cannot change it before this
// transaction ends. Without a row there was nothing to lock, so the row is
// read again, locked, after the write: a handoff to MySQL that creates it
// meanwhile either committed (and is seen) or waits for this transaction
// (the row it inserted is locked), and in both cases it locks the
// reservation rows of the shop, this transaction's included, before it
// copies Redis's state in. So the write lands before the copy, which
// replaces it, or is refused.
func (s *Store) checkShadowFence(t *txn, caller string, shop int64, token string, atStart fenceRow) error {
	f := atStart
	if !f.found {
		err := t.query(stmt{sql: tag(caller) + sqlShadowFence, args: []any{shop, fenceSlot(token)}, scan: func(rows *sql.Rows) error {
			if !rows.Next() {
				return nil
			}
			var d string
			var e, copying int64
			if err := rows.Scan(&d, &e, &copying); err != nil {
				return err
			}
			f = fenceRow{found: true, fence: reservation.Fence{Decider: reservation.Authority(d), Epoch: e}, copying: copying != 0}
			return nil
		}})
		if err != nil {
			return fmt.Errorf("mysqlstore: %s: read fence of shop %d: %w", caller, shop, err)
		}
	}
	if fence := f.effective(); fence.Decider == reservation.AuthorityMySQL || f.copying {
		// MySQL decides, or is being handed the shop: Redis's state is
		// being copied in, and a hold of MySQL's own would not be Redis's.
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

// insertState adds the insert of a reservation's row to t. When the token
// already has one (another call with it got there first), the transaction
// fails with a duplicate key (errDupEntry).
func (s *Store) insertState(t *txn, caller string, shop int64, token string, state reservation.State,
	decidedBy reservation.Authority, allocs []reservation.Allocation, short []reservation.ShortLine, expires time.Time) error {
	var exp any // none (a refusal): the database's now
	if !expires.IsZero() {
		exp = expires
	}
	if err := t.exec(tag(caller)+sqlStateInsert, shop, token, string(state), string(decidedBy),
		reservation.EncodeAllocations(allocs), reservation.EncodeShort(short), exp); err != nil {
		return err
	}
	if state.Terminal() {
		t.afterCommit(func() { s.metrics.tombstones.WithLabelValues(string(state)).Inc() })
	}
	return nil
}

// endState adds to t the move of a held reservation, whose row t holds
// locked and read held, to a terminal state.
func (s *Store) endState(t *txn, caller string, shop int64, token string, state reservation.State, decidedBy reservation.Authority) error {
	if err := t.exec(tag(caller)+sqlStateEnd, string(state), string(decidedBy), shop, token); err != nil {
		return fmt.Errorf("mysqlstore: %s: record %s: %w", caller, state, err)
	}
	t.afterCommit(func() { s.metrics.tombstones.WithLabelValues(string(state)).Inc() })
	return nil
}

// feedState adds to t the record that Redis must follow the token's new
// state.
func (s *Store) feedState(t *txn, caller string, shop int64, token string) error {
	return s.feedStateCart(t, caller, shop, token, nil, "")
}

// feedStateCart is feedState for a reserve: with a label (ReserveParams.
// Compare) the record carries the cart, for the relay to compare.
func (s *Store) feedStateCart(t *txn, caller string, shop int64, token string, cart []reservation.Line, label string) error {
	if s.cfg.NoFeed {
		return nil
	}
	query, args := tag(caller)+sqlFeedState, []any{shop, token, traceparent(t.ctx)}
	if label != "" {
		query, args = tag(caller)+sqlFeedStateCart, append(args, reservation.EncodeCart(cart), label)
	}
	if err := t.exec(query, args...); err != nil {
		return fmt.Errorf("mysqlstore: %s: record the change for Redis: %w", caller, err)
	}
	t.afterCommit(func() { s.metrics.feedWritten.WithLabelValues(string(reservation.ChangeState)).Inc() })
	return nil
}
