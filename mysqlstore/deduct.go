package mysqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/seed31b0e981/reservoir/reservation"
)

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
// Concurrent Deducts share transactions (see combiner): in `redis` mode
// every payment of a flash sale deducts the same ledger row. Each keeps
// its own claims row and answer.
func (s *Store) Deduct(ctx context.Context, p *reservation.DeductParams) (reservation.DeductResult, error) {
	if err := s.cfg.Limits.ValidateDeduct(p); err != nil {
		return reservation.DeductResult{}, err
	}
	allocs := slices.Clone(p.Allocations)
	reservation.SortAllocations(allocs)
	d := &deduct{ctx: ctx, shop: p.Shop, token: p.Token, allocs: allocs, done: make(chan struct{})}
	if err := s.deducts.submit(d, &s.deductRun, d.done); err != nil {
		return reservation.DeductResult{}, err
	}
	return d.res, d.err
}

// deduct is one Deduct call waiting for its group.
type deduct struct {
	ctx    context.Context // the caller's
	shop   int64
	token  string
	allocs []reservation.Allocation // sorted
	done   chan struct{}
	res    reservation.DeductResult
	err    error
}

func (d *deduct) tok() tokenKey           { return tokenKey{d.shop, d.token} }
func (d *deduct) caller() context.Context { return d.ctx }
func (d *deduct) finish(err error)        { d.err = err; close(d.done) }

// deductRun is how the store's deduct combiner runs groups.
func (s *Store) newDeductRun() groupRun[*deduct] {
	return groupRun[*deduct]{
		max:   s.cfg.GroupSize,
		alone: s.deductAlone,
		group: func(ctx context.Context, group []*deduct) error {
			if err := s.deductGroup(ctx, group); err != nil {
				return err
			}
			for _, d := range group {
				d.res = reservation.DeductResult{Applied: true, Allocations: d.allocs}
			}
			return nil
		},
		observe: func(n int) { s.metrics.deductGroup.Observe(float64(n)) },
	}
}

// deductAlone runs d as a group of one and turns the errors that belong to
// it into its answer.
func (s *Store) deductAlone(d *deduct) {
	d.res, d.err = s.deductOne(d)
	close(d.done)
}

func (s *Store) deductOne(d *deduct) (reservation.DeductResult, error) {
	err := s.deductGroup(d.ctx, []*deduct{d})
	switch mysqlErrno(err) {
	case errDupEntry:
		// Deducted before: the answer is that deduction.
		prev, _, err := readClaim(d.ctx, s.db, callerDeduct, d.shop, d.token)
		return reservation.DeductResult{Allocations: prev}, err
	case errExpectRows:
		return reservation.DeductResult{}, fmt.Errorf("mysqlstore: deduct shop %d token %q: the ledger cannot give %s: %w",
			d.shop, d.token, reservation.EncodeAllocations(d.allocs), reservation.ErrInsufficientStock)
	}
	if err != nil {
		return reservation.DeductResult{}, err
	}
	return reservation.DeductResult{Applied: true, Allocations: d.allocs}, nil
}

// deductGroup deducts every call of group in one transaction, two round
// trips batched: the claims rows first (their primary keys make each
// deduction happen once, and a repeat stops there, before the hot
// ledger rows), the reservations' rows, this store's hold lines of them
// (locked) and the shops' fence slots in the first; the writes with the
// COMMIT in the second. The hot ledger rows are written in that last
// batch only, once per item x location whatever the group's size, so
// their locks are held for server time. It takes no replenish lock row: a
// refill reads the ledger row with a shared lock (see replenish), so it
// sees all of a deduct or none of it. It fills in no answers (deductOne
// and newDeductRun's group do).
func (s *Store) deductGroup(ctx context.Context, group []*deduct) error {
	return s.inBatch(ctx, callerDeduct, func(t *txn) error {
		claims := make([]any, 0, 4*len(group))
		states := make([]any, 0, 3*len(group))
		tokens := make([]any, 0, 2*len(group))
		for _, d := range group {
			doc, err := json.Marshal(d.allocs)
			if err != nil {
				return err
			}
			claims = append(claims, d.shop, d.token, string(doc), callerDeduct)
			states = append(states, d.shop, d.token, reservation.EncodeAllocations(d.allocs))
			tokens = append(tokens, d.shop, d.token)
		}
		fenceArgs, slots := groupSlots(group)
		if err := t.exec(groupClaimsQuery(callerDeduct, len(group)), claims...); err != nil {
			return err
		}
		if err := t.exec(deductStatesQuery(len(group)), states...); err != nil {
			return fmt.Errorf("mysqlstore: deduct: record the claims: %w", err)
		}
		type holdKey struct {
			shop      int64
			token     string
			item, loc int64
		}
		type tok struct {
			shop  int64
			token string
		}
		held := map[holdKey]int64{}
		holding := map[tok]bool{}
		var holders []any // (shop, token) of the calls this store holds something for
		var refused error
		err := t.query(
			stmt{sql: groupHoldsQuery(callerDeduct, len(group)), args: tokens, scan: eachRow(func(rows *sql.Rows) error {
				var k holdKey
				var q int64
				if err := rows.Scan(&k.shop, &k.token, &k.item, &k.loc, &q); err != nil {
					return err
				}
				if tk := (tok{k.shop, k.token}); !holding[tk] {
					holding[tk] = true
					holders = append(holders, k.shop, k.token)
				}
				held[k] += q
				return nil
			})},
			stmt{sql: groupFencesQuery(callerDeduct, slots), args: fenceArgs, scan: eachRow(func(rows *sql.Rows) error {
				var shop, epoch int64
				var slot int
				var decider string
				if err := rows.Scan(&shop, &slot, &decider, &epoch); err != nil {
					return err
				}
				if d := reservation.Authority(decider); d == reservation.AuthorityMySQL && refused == nil {
					refused = &reservation.NotDeciderError{Shop: shop, Store: reservation.AuthorityMySQL, Fence: reservation.Fence{Decider: d, Epoch: epoch}}
				}
				return nil
			})})
		if err != nil {
			return fmt.Errorf("mysqlstore: deduct: %w", err)
		}
		if refused != nil {
			// See checkShadowFence: the fence slots were read after the
			// reservations' rows were locked.
			s.metrics.notDecider.Inc()
			return refused
		}
		if len(holders) > 0 {
			if err := deleteHolds(t, callerDeduct, holders); err != nil {
				return err
			}
		}
		// Per item x location: what the group deducts there, and what it
		// takes from the pool: pool + held <= available held before; each
		// call removes its hold there from held and its quantity from
		// available, so taking the difference from the pool keeps it. (It
		// may take more than the slack required, which is safe: the next
		// reserve refills.)
		deduct, trim := map[key]int64{}, map[key]int64{}
		for _, d := range group {
			for _, a := range d.allocs {
				k := key{d.shop, a.Item, a.Location}
				deduct[k] += a.Quantity
				trim[k] += max(0, a.Quantity-held[holdKey{d.shop, d.token, a.Item, a.Location}])
			}
		}
		keys, err := s.deductSums(t, callerDeduct, deduct)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if trim[k] > 0 {
				if err := t.exec(tag(callerDeduct)+sqlPoolTrim, k.shop, k.item, k.loc, trim[k]); err != nil {
					return fmt.Errorf("mysqlstore: deduct: trim %s: %w", k, err)
				}
			}
		}
		if err := s.feedStates(t, callerDeduct, tokens); err != nil {
			return err
		}
		t.afterCommit(func() {
			s.metrics.tombstones.WithLabelValues(string(reservation.StateClaimed)).Add(float64(len(group)))
		})
		return nil
	})
}
