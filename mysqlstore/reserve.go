package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// errTokenRace means another call with the same token inserted its hold
// first; the answer is that call's hold.
var errTokenRace = errors.New("mysqlstore: concurrent reserve of the same token")

// Reserve holds a cart's lines in one transaction.
//
// Each attempt selects, in one round trip, units for every line at the
// line's current location (a UNION ALL of SKIP LOCKED branches in
// (item, location) order), deletes them, then inserts the hold rows. A line
// whose location came up short sends the reserver to that pool's
// replenisher (single flight: concurrent reservers wait for one refill),
// then back to the pool. A location is passed over only when the ledger
// itself has fewer unheld units than the line needs there, so an empty pool
// is never an answer: the answer is "insufficient" only when no eligible
// location has the stock.
func (s *Store) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	if err := s.cfg.Limits.ValidateReserve(p); err != nil {
		return reservation.ReserveResult{}, err
	}
	r := &reserveCall{s: s, p: p, authority: p.Authority, lines: slices.Clone(p.Lines)}
	if r.authority == "" {
		r.authority = reservation.AuthorityMySQL
	}
	// The global lock order: lines by item (items are unique in a cart).
	slices.SortFunc(r.lines, func(a, b reservation.Line) int { return cmp.Compare(a.Item, b.Item) })
	r.cursor = make([]int, len(r.lines))
	return r.run(ctx)
}

type reserveCall struct {
	s         *Store
	p         *reservation.ReserveParams
	authority reservation.Authority
	lines     []reservation.Line // sorted by item
	cursor    []int              // per line: index of the location being tried
}

func (r *reserveCall) loc(i int) int64 { return r.lines[i].Locations[r.cursor[i]] }

func (r *reserveCall) run(ctx context.Context) (reservation.ReserveResult, error) {
	checkExisting := true
	backoff := r.s.cfg.RetryBase
	for attempt := 1; ; attempt++ {
		res, short, err := r.attempt(ctx, checkExisting)
		if errors.Is(err, errTokenRace) {
			checkExisting = true
			continue
		}
		if err != nil || short == nil {
			return res, err
		}
		checkExisting = false
		progressed, err := r.resolveShort(ctx, short)
		if err != nil {
			return reservation.ReserveResult{}, err
		}
		if slices.ContainsFunc(short, func(i int) bool { return r.cursor[i] == len(r.lines[i].Locations) }) {
			return r.insufficient(ctx)
		}
		if attempt >= r.s.cfg.ReserveAttempts {
			return reservation.ReserveResult{}, fmt.Errorf("mysqlstore: reserve shop %d token %q: pool still short after %d attempts: %w",
				r.p.Shop, r.p.Token, attempt, reservation.ErrContention)
		}
		r.s.stats.reserveRetries.Add(1)
		if progressed {
			backoff = r.s.cfg.RetryBase
			continue
		}
		// Units are there but locked by other reservers: wait for them to
		// commit or roll back.
		select {
		case <-ctx.Done():
			return reservation.ReserveResult{}, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, r.s.cfg.RetryMax)
	}
}

// attempt runs one reserve transaction. It returns the indexes of lines
// whose pool came up short (and then changes nothing), or the result.
func (r *reserveCall) attempt(ctx context.Context, checkExisting bool) (res reservation.ReserveResult, short []int, err error) {
	err = r.s.inTx(ctx, callerReserve, func(tx *sql.Tx) error {
		res, short = reservation.ReserveResult{}, nil
		if checkExisting {
			found, err := r.existing(ctx, tx, &res)
			if err != nil || found {
				return err
			}
		}
		units, now, err := r.takeUnits(ctx, tx)
		if err != nil {
			return err
		}
		for i, ln := range r.lines {
			if int64(len(units[i])) < ln.Quantity {
				short = append(short, i)
			}
		}
		if short != nil {
			return nil // commit releases the row locks; nothing was written
		}
		if err := r.deleteUnits(ctx, tx, units); err != nil {
			return err
		}
		// DATETIME(3) keeps milliseconds: truncate here so the answer
		// equals what is stored.
		expires := now.Add(r.p.TTL).Truncate(time.Millisecond)
		if err := r.insertHolds(ctx, tx, expires); err != nil {
			return err
		}
		if hook := r.s.beforeReserveCommit; hook != nil {
			hook()
		}
		res = reservation.ReserveResult{
			Status:      reservation.StatusReserved,
			Allocations: r.allocations(),
			ExpiresAt:   expires,
			Authority:   r.authority,
		}
		return nil
	})
	return res, short, err
}

// existing answers a repeated token: the first hold (Replayed), a conflict,
// or "already claimed".
func (r *reserveCall) existing(ctx context.Context, tx *sql.Tx, res *reservation.ReserveResult) (bool, error) {
	rows, err := tx.QueryContext(ctx, sqlReserveExisting, r.p.Shop, r.p.Token, r.p.Shop, r.p.Token)
	if err != nil {
		return false, fmt.Errorf("mysqlstore: reserve: %w", err)
	}
	defer rows.Close()
	var allocs []reservation.Allocation
	var expires sqlTime
	var authority string
	claimed := false
	for rows.Next() {
		var kind string
		var a reservation.Allocation
		if err := rows.Scan(&kind, &a.Item, &a.Location, &a.Quantity, &expires, &authority); err != nil {
			return false, err
		}
		if kind == "claim" {
			claimed = true
			continue
		}
		allocs = append(allocs, a)
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	switch {
	case claimed:
		return false, fmt.Errorf("mysqlstore: reserve shop %d token %q: %w", r.p.Shop, r.p.Token, reservation.ErrAlreadyClaimed)
	case allocs == nil:
		return false, nil
	case !reservation.SameLines(r.p.Lines, allocs):
		return false, fmt.Errorf("mysqlstore: reserve shop %d token %q holds %v: %w", r.p.Shop, r.p.Token, allocs, reservation.ErrTokenConflict)
	}
	*res = reservation.ReserveResult{
		Status:      reservation.StatusReserved,
		Allocations: allocs,
		ExpiresAt:   expires.Time,
		Authority:   reservation.Authority(authority),
		Replayed:    true,
	}
	return true, nil
}

// takeUnits locks up to each line's quantity of units at its current
// location, all lines in one round trip, and returns the database's clock.
func (r *reserveCall) takeUnits(ctx context.Context, tx *sql.Tx) ([][]int64, time.Time, error) {
	args := make([]any, 0, 5*len(r.lines))
	for i, ln := range r.lines {
		args = append(args, i, r.p.Shop, ln.Item, r.loc(i), ln.Quantity)
	}
	rows, err := tx.QueryContext(ctx, reserveUnitsQuery(len(r.lines)), args...)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("mysqlstore: reserve: select units: %w", err)
	}
	defer rows.Close()
	units := make([][]int64, len(r.lines))
	var now sqlTime
	for rows.Next() {
		var lineNo int
		var unit int64
		if err := rows.Scan(&lineNo, &unit, &now); err != nil {
			return nil, time.Time{}, err
		}
		units[lineNo] = append(units[lineNo], unit)
	}
	return units, now.Time, rows.Err()
}

// deleteUnits removes the taken units. It runs before the holds are
// inserted: every transaction touches units before holds, so reserve and
// claim never lock the two tables in opposite orders.
func (r *reserveCall) deleteUnits(ctx context.Context, tx *sql.Tx, units [][]int64) error {
	n := 0
	counts := make([]int, len(units))
	args := make([]any, 0, 3*len(units))
	for i, us := range units {
		n += len(us)
		counts[i] = len(us)
		args = append(args, r.p.Shop, r.lines[i].Item, r.loc(i))
		for _, u := range us {
			args = append(args, u)
		}
	}
	res, err := tx.ExecContext(ctx, reserveDeleteQuery(counts), args...)
	if err != nil {
		return fmt.Errorf("mysqlstore: reserve: delete units: %w", err)
	}
	if got, _ := res.RowsAffected(); got != int64(n) {
		// We hold these rows' locks, so only a writer bypassing the store
		// can cause this: refuse rather than hold units that are not there.
		return fmt.Errorf("mysqlstore: reserve: deleted %d of %d locked units: the pool was changed outside the store", got, n)
	}
	return nil
}

func (r *reserveCall) insertHolds(ctx context.Context, tx *sql.Tx, expires time.Time) error {
	args := make([]any, 0, 7*len(r.lines))
	for i, ln := range r.lines {
		args = append(args, r.p.Shop, r.p.Token, ln.Item, r.loc(i), ln.Quantity, expires, string(r.authority))
	}
	if _, err := tx.ExecContext(ctx, reserveInsertHoldsQuery(len(r.lines)), args...); err != nil {
		if mysqlErrno(err) == errDupEntry {
			return errTokenRace
		}
		return fmt.Errorf("mysqlstore: reserve: insert holds: %w", err)
	}
	return nil
}

func (r *reserveCall) allocations() []reservation.Allocation {
	out := make([]reservation.Allocation, len(r.lines))
	for i, ln := range r.lines {
		out[i] = reservation.Allocation{Item: ln.Item, Location: r.loc(i), Quantity: ln.Quantity}
	}
	reservation.SortAllocations(out)
	return out
}

// resolveShort replenishes each short line's pool and moves a line to its
// next location when the ledger cannot cover it where it is. It reports
// whether anything changed (units added or a location passed over).
func (r *reserveCall) resolveShort(ctx context.Context, short []int) (bool, error) {
	progressed := false
	for _, i := range short {
		ln := r.lines[i]
		snap, added, err := r.s.replenish(ctx, key{r.p.Shop, ln.Item, r.loc(i)})
		if err != nil {
			return false, err
		}
		if added > 0 {
			progressed = true
		}
		if snap.unheld() < ln.Quantity {
			r.cursor[i]++
			progressed = true
			if r.cursor[i] == len(ln.Locations) {
				return progressed, nil
			}
		}
	}
	return progressed, nil
}

// insufficient builds the all-or-nothing refusal: every line that no
// eligible location can cover, with the best that one could.
func (r *reserveCall) insufficient(ctx context.Context) (reservation.ReserveResult, error) {
	c, err := r.s.acquire(ctx, callerReserve)
	if err != nil {
		return reservation.ReserveResult{}, err
	}
	defer c.release()
	res := reservation.ReserveResult{Status: reservation.StatusInsufficient}
	for _, ln := range r.lines {
		args := []any{r.p.Shop, ln.Item}
		for _, l := range ln.Locations {
			args = append(args, l)
		}
		rows, err := c.QueryContext(ctx, reserveUnheldQuery(len(ln.Locations)), args...)
		if err != nil {
			return reservation.ReserveResult{}, fmt.Errorf("mysqlstore: reserve: unheld: %w", err)
		}
		var best int64
		for rows.Next() {
			var loc, unheld int64
			if err := rows.Scan(&loc, &unheld); err != nil {
				rows.Close()
				return reservation.ReserveResult{}, err
			}
			best = max(best, unheld)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return reservation.ReserveResult{}, err
		}
		if best < ln.Quantity {
			res.Short = append(res.Short, reservation.ShortLine{Item: ln.Item, Requested: ln.Quantity, Unheld: best})
		}
	}
	if res.Short == nil {
		// Stock came back between the decision and this read (a release,
		// an adjust): report the line that ran out of locations anyway,
		// since nothing was held.
		for i, ln := range r.lines {
			if r.cursor[i] == len(ln.Locations) {
				res.Short = append(res.Short, reservation.ShortLine{Item: ln.Item, Requested: ln.Quantity})
			}
		}
	}
	return res, nil
}
