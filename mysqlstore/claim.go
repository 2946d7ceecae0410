package mysqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Claim as authority (MySQL decides the shop) is one transaction: lock the
// shop's fence row (shared) and the reservation's row, check the hold is
// still live by the database's clock after the lock is held (a claim that
// waited on a release or the reaper must not judge by the time it started
// waiting), remove the hold, record the claims row, deduct the ledger and
// record the change Redis must follow. The reservation's row is what makes
// a claim all lines or none: the reaper and a release take it too, whole.
// The claims row's primary key makes the deduction happen once whoever
// retries; the ledger rows, the hot rows, are updated last, in
// (item, location) order, so their locks are never held in a cycle.
//
// Batched, it is two round trips: BEGIN and the locking reads (with the
// clock read after them) in the first; every write with the COMMIT in the
// second, so the hot ledger rows are locked for server time only.
// Concurrent claims share that transaction (see combiner), each with its
// own claims row and answer.
//
// As shadow it only answers what a claim would find (see settle).
func (s *Store) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	if err := s.cfg.Limits.ValidateClaim(p); err != nil {
		return reservation.ClaimResult{}, err
	}
	if p.As == reservation.AsShadow {
		return s.settle(ctx, p)
	}
	c := &claimCall{ctx: ctx, shop: p.Shop, token: p.Token, done: make(chan struct{})}
	if err := s.claims.submit(c, &s.claimRun, c.done); err != nil {
		return reservation.ClaimResult{}, err
	}
	return c.res, c.err
}

// claimCall is one Claim call waiting for its group.
type claimCall struct {
	ctx   context.Context // the caller's
	shop  int64
	token string
	done  chan struct{}
	res   reservation.ClaimResult
	err   error
}

func (c *claimCall) tok() tokenKey           { return tokenKey{c.shop, c.token} }
func (c *claimCall) caller() context.Context { return c.ctx }
func (c *claimCall) finish(err error) {
	if err != nil {
		c.res, c.err = reservation.ClaimResult{}, err
	}
	close(c.done)
}

// newClaimRun is how the store's claim combiner runs groups.
func (s *Store) newClaimRun() groupRun[*claimCall] {
	return groupRun[*claimCall]{
		max:     s.cfg.GroupSize,
		alone:   s.claimAlone,
		group:   s.claimGroup,
		observe: func(n int) { s.metrics.claimGroup.Observe(float64(n)) },
	}
}

// claimAlone runs c as a group of one and turns the errors that belong to
// it into its answer.
func (s *Store) claimAlone(c *claimCall) {
	err := s.claimGroup(c.ctx, []*claimCall{c})
	switch mysqlErrno(err) {
	case errDupEntry:
		// The claims row was there (a token reused after its tombstone
		// was forgotten, and claimed by another call meanwhile): the
		// answer is that claim, and this transaction rolled back.
		var allocs []reservation.Allocation
		if allocs, _, err = readClaim(c.ctx, s.db, callerClaim, c.shop, c.token); err == nil {
			c.res = reservation.ClaimResult{Outcome: reservation.OutcomeClaimed, Allocations: allocs, Replayed: true}
		}
	case errExpectRows:
		err = fmt.Errorf("mysqlstore: claim shop %d token %q: the ledger cannot give %s: %w",
			c.shop, c.token, reservation.EncodeAllocations(c.res.Allocations), reservation.ErrInsufficientStock)
	}
	if err != nil {
		c.res, c.err = reservation.ClaimResult{}, err
	}
	close(c.done)
}

// claimGroup claims every call of group in one transaction and sets each
// call's answer (the transaction's own error aside).
func (s *Store) claimGroup(ctx context.Context, group []*claimCall) error {
	return s.inBatch(ctx, callerClaim, func(t *txn) error {
		tokens := make([]any, 0, 2*len(group))
		for _, c := range group {
			c.res, c.err = reservation.ClaimResult{}, nil
			tokens = append(tokens, c.shop, c.token)
		}
		fenceArgs, slots := groupSlots(group)
		fences := map[[2]int64]fenceRow{}
		states := map[tokenKey]stateRow{}
		claimed := map[tokenKey][]reservation.Allocation{}
		var now time.Time
		err := t.query(
			stmt{sql: groupFencesQuery(callerClaim, slots), args: fenceArgs, scan: eachRow(func(rows *sql.Rows) error {
				var shop, slot, epoch int64
				var decider string
				if err := rows.Scan(&shop, &slot, &decider, &epoch); err != nil {
					return err
				}
				fences[[2]int64{shop, slot}] = fenceRow{found: true, fence: reservation.Fence{Decider: reservation.Authority(decider), Epoch: epoch}}
				return nil
			})},
			stmt{sql: groupStatesQuery(callerClaim, len(group)), args: tokens, scan: eachRow(func(rows *sql.Rows) (err error) {
				var k tokenKey
				var state, allocs string
				var exp sql.NullTime
				if err := rows.Scan(&k.shop, &k.token, &state, &allocs, &exp); err != nil {
					return err
				}
				st := stateRow{found: true, state: reservation.State(state), expiresAt: exp.Time}
				if st.allocs, err = reservation.DecodeAllocations(allocs); err != nil {
					return err
				}
				states[k] = st
				return nil
			})},
			stmt{sql: groupClaimedQuery(callerClaim, len(group)), args: tokens, scan: eachRow(func(rows *sql.Rows) error {
				var k tokenKey
				var doc string
				if err := rows.Scan(&k.shop, &k.token, &doc); err != nil {
					return err
				}
				var allocs []reservation.Allocation
				if err := json.Unmarshal([]byte(doc), &allocs); err != nil {
					return fmt.Errorf("mysqlstore: claims row of shop %d token %q: %w", k.shop, k.token, err)
				}
				reservation.SortAllocations(allocs)
				claimed[k] = allocs
				return nil
			})},
			stmt{sql: tag(callerClaim) + sqlNow, scan: func(rows *sql.Rows) (err error) {
				now, err = scanNow(rows)
				return err
			}})
		if err != nil {
			return fmt.Errorf("mysqlstore: claim: lock reservations: %w", err)
		}
		var claim, expire []any // (shop, token) pairs
		var claimRows []any
		sums := map[key]int64{}
		for _, c := range group {
			k := c.tok()
			st, ok := states[k]
			if !ok && claimed[k] != nil {
				// The tombstone was forgotten; the ledger's claim never is.
				st = stateRow{found: true, state: reservation.StateClaimed, allocs: claimed[k]}
			}
			switch s.judgeClaim(c, fences[[2]int64{c.shop, int64(fenceSlot(c.token))}], st, now) {
			case planClaim:
				claim = append(claim, c.shop, c.token)
				doc, err := json.Marshal(st.allocs)
				if err != nil {
					return err
				}
				claimRows = append(claimRows, c.shop, c.token, string(doc), callerClaim)
				for _, a := range st.allocs {
					sums[key{c.shop, a.Item, a.Location}] += a.Quantity
				}
			case planExpire:
				expire = append(expire, c.shop, c.token)
			}
		}
		if len(claim)+len(expire) == 0 {
			return nil // answers only: the commit writes nothing
		}
		for _, end := range []struct {
			state  reservation.State
			tokens []any
		}{{reservation.StateClaimed, claim}, {reservation.StateExpired, expire}} {
			for i := 0; i < len(end.tokens); i += 2 {
				if err := s.endState(t, callerClaim, end.tokens[i].(int64), end.tokens[i+1].(string), end.state, reservation.AuthorityMySQL); err != nil {
					return err
				}
			}
		}
		ended := append(slices.Clone(claim), expire...)
		if err := deleteHolds(t, callerClaim, ended); err != nil {
			return err
		}
		if len(claim) > 0 {
			// A duplicate key here: the ledger deducted a token before (see
			// claimAlone).
			if err := t.exec(groupClaimsQuery(callerClaim, len(claim)/2), claimRows...); err != nil {
				return fmt.Errorf("mysqlstore: claim: insert claims: %w", err)
			}
			if _, err := s.deductSums(t, callerClaim, sums); err != nil {
				return err
			}
		}
		return s.feedStates(t, callerClaim, ended)
	})
}

// claimPlan is what a claim's transaction does with a reservation it
// locked.
type claimPlan int

const (
	planAnswer claimPlan = iota // nothing to write: the call's answer is set
	planExpire                  // expire it (as the reaper would); the answer is ErrExpired
	planClaim                   // claim it; the answer is set
)

// judgeClaim decides a claim from what its transaction read, after the
// locks were taken (now is the database's clock then), and sets c's
// answer.
func (s *Store) judgeClaim(c *claimCall, fence fenceRow, st stateRow, now time.Time) claimPlan {
	if err := s.decides(c.shop, fence); err != nil {
		c.err = err
		return planAnswer
	}
	if !st.found {
		c.err = fmt.Errorf("mysqlstore: claim shop %d token %q: %w", c.shop, c.token, reservation.ErrNotFound)
		return planAnswer
	}
	switch st.state {
	case reservation.StateHeld:
	case reservation.StateClaimed:
		s.metrics.tombstoneHits.WithLabelValues(string(st.state)).Inc()
		c.res = reservation.ClaimResult{Outcome: reservation.OutcomeClaimed, Allocations: st.allocs, Replayed: true}
		return planAnswer
	default:
		c.err = s.tombstoneErr("claim", c.shop, c.token, st)
		return planAnswer
	}
	if !st.expiresAt.After(now) {
		// Expired: expire it now, as the reaper would, so that every
		// later answer agrees with this one.
		c.err = fmt.Errorf("mysqlstore: claim shop %d token %q expired at %s: %w", c.shop, c.token, st.expiresAt, reservation.ErrExpired)
		return planExpire
	}
	c.res = reservation.ClaimResult{Outcome: reservation.OutcomeClaimed, Allocations: st.allocs}
	return planClaim
}

func readClaim(ctx context.Context, q querier, caller string, shop int64, token string) ([]reservation.Allocation, bool, error) {
	var doc string
	err := q.QueryRowContext(ctx, tag(caller)+sqlClaimRead, shop, token).Scan(&doc)
	if isNoRows(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("mysqlstore: %s: read claim: %w", caller, err)
	}
	var allocs []reservation.Allocation
	if err := json.Unmarshal([]byte(doc), &allocs); err != nil {
		return nil, false, fmt.Errorf("mysqlstore: %s: claim row of shop %d token %q: %w", caller, shop, token, err)
	}
	return allocs, true, nil
}

// settle is Claim as shadow: what a claim would find here, for the
// comparer, writing nothing. A shadow claim must never record a claim: a
// reservation this store calls claimed is one the ledger deducted, which
// is what a handoff to MySQL relies on (copyIn keeps claimed tokens).
func (s *Store) settle(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	st, _, err := s.readState(ctx, callerSettle, "settle", p.Shop, p.Token)
	if err != nil {
		return reservation.ClaimResult{}, err
	}
	switch st.state {
	case reservation.StateHeld:
		return reservation.ClaimResult{Outcome: reservation.OutcomeSettled, Allocations: st.allocs}, nil
	case reservation.StateClaimed:
		return reservation.ClaimResult{Outcome: reservation.OutcomeSettled, Allocations: st.allocs, Replayed: true}, nil
	}
	return reservation.ClaimResult{}, s.tombstoneErr("settle", p.Shop, p.Token, st)
}

// Release gives a hold back and records it released. As authority MySQL
// must decide the shop, and the change is recorded for Redis; as shadow
// (Redis decides, this is MySQL's own copy) it is refused once MySQL
// decides. A hold is released whether or not it has expired (an expired
// hold the reaper has not reached yet would give its units back all the
// same). The units are not put back into the pool here: deleting the
// hold lowers pool + held, so the projection stays within the ledger
// whatever runs concurrently, and the next reserve that finds the pool
// short refills it from the ledger in one batch. Putting units back would
// need the single-flight lock row (for the cap and the unit ids), and
// every release of a hot item would queue on it.
func (s *Store) Release(ctx context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	if err := s.cfg.Limits.ValidateRelease(p); err != nil {
		return reservation.ReleaseResult{}, err
	}
	deciding := p.As == reservation.AsAuthority
	var res reservation.ReleaseResult
	err := s.inBatch(ctx, callerRelease, func(t *txn) error {
		res = reservation.ReleaseResult{}
		fence, st, err := readFenceAndState(t, tag(callerRelease)+sqlFenceAndStateLock, p.Shop, p.Token, true)
		if err != nil {
			return fmt.Errorf("mysqlstore: release: lock reservation: %w", err)
		}
		if deciding {
			if err := s.decides(p.Shop, fence); err != nil {
				return err
			}
		}
		if !st.found {
			return nil // never reserved here: nothing to release
		}
		switch st.state {
		case reservation.StateHeld:
		case reservation.StateClaimed:
			return s.tombstoneErr("release", p.Shop, p.Token, st)
		default:
			s.metrics.tombstoneHits.WithLabelValues(string(st.state)).Inc()
			return nil
		}
		by := reservation.AuthorityMySQL
		if !deciding {
			by = reservation.AuthorityRedis
		}
		if err := s.endState(t, callerRelease, p.Shop, p.Token, reservation.StateReleased, by); err != nil {
			return err
		}
		if err := t.exec(tag(callerRelease)+sqlHoldsDelete, p.Shop, p.Token); err != nil {
			return fmt.Errorf("mysqlstore: release: delete hold: %w", err)
		}
		if deciding {
			err = s.feedState(t, callerRelease, p.Shop, p.Token)
		} else {
			err = s.checkShadowFence(t, callerRelease, p.Shop, p.Token, fence)
		}
		if err != nil {
			return err
		}
		res = reservation.ReleaseResult{Released: true, Allocations: st.allocs}
		return nil
	})
	if err != nil {
		return reservation.ReleaseResult{}, err
	}
	return res, nil
}
