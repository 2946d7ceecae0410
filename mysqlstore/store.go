// Package mysqlstore is the MySQL unit-pool reservation store and the stock
// ledger it sits next to.
//
// Each reservable unit is a row in available_units, at most PoolCap per
// item x location: a bounded projection of the ledger, refilled by a
// single-flight replenisher. Reserve takes units with FOR UPDATE SKIP LOCKED,
// so concurrent buyers of a hot item spread over its rows instead of queueing
// on one; Claim is one ACID transaction that removes the hold, records the
// claim and deducts the ledger.
//
// Rules every transaction here keeps (they are what make deadlocks and
// oversells impossible by design, and the tests check each):
//   - READ COMMITTED, set per transaction, never per session.
//   - A checkout call's transaction (reserve, claim, release, deduct) is
//     sent in multi-statement batches: one round trip per read its logic
//     decides on, and its last writes travel with the COMMIT, so the hot
//     ledger rows are locked for server time only (see txn).
//   - One table order: units before holds (reserve); holds before claims
//     before ledger (claim); replenish lock before ledger before units
//     (adjust, replenish); claims, holds, ledger, units (deduct). Rows of
//     one table are locked in (shop, item, location) order.
//   - The pool projection: units in the pool plus units held never exceed
//     the ledger's available stock. Only the replenisher adds units, holding
//     the item x location's replenish lock row and the ledger row (shared)
//     and deciding from one snapshot statement; releases and the reaper
//     only delete holds; a deduct takes from the pool what it takes from
//     the ledger beyond the hold it removes.
//   - Deadlocks (1213) and lock wait timeouts (1205) are retried with capped
//     exponential backoff and jitter.
//   - Every statement is tagged with its caller, and connection hold time is
//     measured per caller.
//
// The package never decides authority or compares stores: that is the
// facade's job.
package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Store is the MySQL unit-pool store. It implements reservation.Store and
// reservation.Ledger. It is safe for concurrent use.
type Store struct {
	db        *sql.DB
	cfg       Config
	metrics   *metrics
	pivots    pivots            // where reserves start scanning each pool
	refills   refills           // refills in flight, joined by other reservers
	deducts   combiner[*deduct] // legacy claims waiting for a shared transaction
	deductRun groupRun[*deduct]
	claims    combiner[*claimCall] // claims waiting for a shared transaction
	claimRun  groupRun[*claimCall]
	gates     gates // reserve transactions per pool (Config.PoolConcurrency)

	// Test knobs, set only by this package's tests.
	//
	// unorderedLedger makes claims update ledger rows in a random order
	// instead of (item, location) order, to show that the order is what
	// prevents deadlocks.
	unorderedLedger bool
	// beforeReserveCommit, when set, runs inside the reserve transaction
	// just before its last batch (writes and COMMIT) is sent, while its
	// units are locked.
	beforeReserveCommit func()
	// beforeHoldInsert, when set, runs inside the reserve transaction once
	// its units are taken, before its hold rows are inserted (tests).
	beforeHoldInsert func()
	// afterCopyLock, when set, runs inside copyIn's transaction once the
	// rows of its tokens are locked, before they are written.
	afterCopyLock func()
}

var (
	_ reservation.Store  = (*Store)(nil)
	_ reservation.Ledger = (*Store)(nil)
)

// New returns a store on cfg.DB. The database must have the pod migration
// set (migrations.Pod): the store uses those tables and no others.
func New(cfg Config) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: register metrics: %w", err)
	}
	s := &Store{db: cfg.DB, cfg: cfg, metrics: m}
	s.deductRun, s.claimRun = s.newDeductRun(), s.newClaimRun()
	return s, nil
}

// Name returns reservation.AuthorityMySQL.
func (s *Store) Name() reservation.Authority { return reservation.AuthorityMySQL }

// PoolCap returns the configured pool cap.
func (s *Store) PoolCap() int64 { return s.cfg.PoolCap }

// key is one item x location of one shop: one ledger row, one pool.
type key struct{ shop, item, loc int64 }

func (k key) args() []any { return []any{k.shop, k.item, k.loc} }

func (k key) String() string {
	return fmt.Sprintf("shop %d item %d location %d", k.shop, k.item, k.loc)
}

// querier is what *sql.Tx, *sql.Conn and *sql.DB have in common.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Get returns the hold for a token, or the answer its tombstone gives.
// With p.AsDecider it answers only while MySQL decides the shop: the
// fence is read in the same statement as the reservation, and a shop
// MySQL does not decide answers *reservation.NotDeciderError (its own
// shadow hold is never served as the reservation).
func (s *Store) Get(ctx context.Context, p *reservation.GetParams) (reservation.Hold, error) {
	if err := s.cfg.Limits.ValidateGet(p); err != nil {
		return reservation.Hold{}, err
	}
	var st stateRow
	var by reservation.Authority
	var err error
	if p.AsDecider {
		st, by, err = s.readDecided(ctx, p.Shop, p.Token)
	} else {
		st, by, err = s.readState(ctx, callerRead, "get", p.Shop, p.Token)
	}
	if err != nil {
		return reservation.Hold{}, err
	}
	if st.state != reservation.StateHeld {
		return reservation.Hold{}, s.tombstoneErr("get", p.Shop, p.Token, st)
	}
	return reservation.Hold{Shop: p.Shop, Token: p.Token, Allocations: st.allocs, ExpiresAt: st.expiresAt, Authority: by}, nil
}

// readDecided reads a token's reservation row and the shop's fence in one
// statement: *reservation.NotDeciderError when MySQL does not decide the
// shop, ErrNotFound when it does and has no row.
func (s *Store) readDecided(ctx context.Context, shop int64, token string) (stateRow, reservation.Authority, error) {
	c, err := s.acquire(ctx, callerRead)
	if err != nil {
		return stateRow{}, "", err
	}
	defer c.release()
	rows, err := c.QueryContext(ctx, tag(callerRead)+sqlStateReadDecided, shop, fenceSlot(token), shop, token)
	if err != nil {
		return stateRow{}, "", fmt.Errorf("mysqlstore: get: %w", err)
	}
	defer rows.Close()
	var f fenceRow
	var st stateRow
	var by reservation.Authority
	for rows.Next() {
		var kind, a, b, d string
		var n int64
		var t sql.NullTime
		if err := rows.Scan(&kind, &a, &b, &d, &n, &t); err != nil {
			return stateRow{}, "", fmt.Errorf("mysqlstore: get: %w", err)
		}
		switch kind {
		case "fence":
			f = fenceRow{found: true, fence: reservation.Fence{Decider: reservation.Authority(a), Epoch: n}}
		case "state":
			st = stateRow{found: true, state: reservation.State(a), expiresAt: t.Time}
			if st.allocs, err = reservation.DecodeAllocations(b); err != nil {
				return stateRow{}, "", err
			}
			by = reservation.Authority(d)
		}
	}
	if err := rows.Err(); err != nil {
		return stateRow{}, "", fmt.Errorf("mysqlstore: get: %w", err)
	}
	if err := s.decides(shop, f); err != nil {
		return stateRow{}, "", err
	}
	if !st.found {
		return stateRow{}, "", fmt.Errorf("mysqlstore: get shop %d token %q: %w", shop, token, reservation.ErrNotFound)
	}
	return st, by, nil
}

// readState reads a token's reservation row, outside any transaction, for
// op: ErrNotFound when there is none.
func (s *Store) readState(ctx context.Context, caller, op string, shop int64, token string) (stateRow, reservation.Authority, error) {
	c, err := s.acquire(ctx, caller)
	if err != nil {
		return stateRow{}, "", err
	}
	defer c.release()
	var state, allocs, short, by string
	var exp sql.NullTime
	err = c.QueryRowContext(ctx, tag(caller)+sqlStateRead, shop, token).Scan(&state, &allocs, &short, &exp, &by)
	if isNoRows(err) {
		return stateRow{}, "", fmt.Errorf("mysqlstore: %s shop %d token %q: %w", op, shop, token, reservation.ErrNotFound)
	}
	if err != nil {
		return stateRow{}, "", fmt.Errorf("mysqlstore: %s: %w", op, err)
	}
	st := stateRow{found: true, state: reservation.State(state), expiresAt: exp.Time}
	if st.allocs, err = reservation.DecodeAllocations(allocs); err != nil {
		return stateRow{}, "", err
	}
	return st, reservation.Authority(by), nil
}

// Availability reports ledger stock minus holds per location of an item.
// With p.AsDecider it answers only while MySQL decides the shop (the fence
// is read in the same statement): *reservation.NotDeciderError otherwise.
func (s *Store) Availability(ctx context.Context, p *reservation.AvailabilityParams) (reservation.AvailabilityResult, error) {
	if err := s.cfg.Limits.ValidateAvailability(p); err != nil {
		return reservation.AvailabilityResult{}, err
	}
	c, err := s.acquire(ctx, callerRead)
	if err != nil {
		return reservation.AvailabilityResult{}, err
	}
	defer c.release()
	query, args := sqlAvailability, []any{p.Shop, p.Item}
	if p.AsDecider {
		query, args = sqlAvailabilityDecided, []any{p.Shop, p.Shop, p.Item}
	}
	rows, err := c.QueryContext(ctx, query, args...)
	if err != nil {
		return reservation.AvailabilityResult{}, fmt.Errorf("mysqlstore: availability: %w", err)
	}
	defer rows.Close()
	res := reservation.AvailabilityResult{Item: p.Item, Locations: []reservation.LocationAvailability{}}
	var f fenceRow
	for rows.Next() {
		var la reservation.LocationAvailability
		if !p.AsDecider {
			if err := rows.Scan(&la.Location, &la.Unheld); err != nil {
				return reservation.AvailabilityResult{}, err
			}
		} else {
			var kind, decider string
			var n int64
			if err := rows.Scan(&kind, &decider, &n, &la.Unheld); err != nil {
				return reservation.AvailabilityResult{}, err
			}
			if kind == "fence" {
				f = fenceRow{found: true, fence: reservation.Fence{Decider: reservation.Authority(decider), Epoch: n}}
				continue
			}
			la.Location = n
		}
		la.Unheld = max(la.Unheld, 0)
		res.Locations = append(res.Locations, la)
	}
	if err := rows.Err(); err != nil {
		return reservation.AvailabilityResult{}, err
	}
	if p.AsDecider {
		if err := s.decides(p.Shop, f); err != nil {
			return reservation.AvailabilityResult{}, err
		}
		slices.SortFunc(res.Locations, func(a, b reservation.LocationAvailability) int { return cmp.Compare(a.Location, b.Location) })
	}
	return res, nil
}

// Stock lists a shop's ledger rows.
func (s *Store) Stock(ctx context.Context, p *reservation.StockParams) ([]reservation.StockLevel, error) {
	if p == nil || p.Shop <= 0 {
		return nil, &reservation.ValidationError{Field: "shop", Reason: "must be a positive id"}
	}
	c, err := s.acquire(ctx, callerRead)
	if err != nil {
		return nil, err
	}
	defer c.release()
	rows, err := c.QueryContext(ctx, sqlLedgerStock, p.Shop)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: stock: %w", err)
	}
	defer rows.Close()
	var out []reservation.StockLevel
	for rows.Next() {
		l := reservation.StockLevel{Shop: p.Shop}
		if err := rows.Scan(&l.Item, &l.Location, &l.Available); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }
