package mysqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
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
//
// As shadow it only answers what a claim would find (see settle).
func (s *Store) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	if err := s.cfg.Limits.ValidateClaim(p); err != nil {
		return reservation.ClaimResult{}, err
	}
	if p.As == reservation.AsShadow {
		return s.settle(ctx, p)
	}
	var res reservation.ClaimResult
	var expired stateRow
	err := s.inBatch(ctx, callerClaim, func(t *txn) error {
		res, expired = reservation.ClaimResult{}, stateRow{}
		var fence fenceRow
		var st stateRow
		var now time.Time
		err := t.query(func(i int, rows *sql.Rows) (err error) {
			if i == 0 {
				fence, st, err = scanFenceAndState(rows, p.Shop, p.Token)
			} else {
				now, err = scanNow(rows)
			}
			return err
		}, fenceAndState(tag(callerClaim)+sqlFenceAndStateLock, p.Shop, p.Token, true), stmt{tag(callerClaim) + sqlNow, nil})
		if err != nil {
			return fmt.Errorf("mysqlstore: claim: lock reservation: %w", err)
		}
		if err := s.decides(p.Shop, fence); err != nil {
			return err
		}
		if !st.found {
			return fmt.Errorf("mysqlstore: claim shop %d token %q: %w", p.Shop, p.Token, reservation.ErrNotFound)
		}
		switch st.state {
		case reservation.StateHeld:
		case reservation.StateClaimed:
			s.metrics.tombstoneHits.WithLabelValues(string(st.state)).Inc()
			res = reservation.ClaimResult{Outcome: reservation.OutcomeClaimed, Allocations: st.allocs, Replayed: true}
			return nil
		default:
			return s.tombstoneErr("claim", p.Shop, p.Token, st)
		}
		if !st.expiresAt.After(now) {
			// Expired: expire it now, as the reaper would, so that every
			// later answer agrees with this one.
			expired = st
			return s.expireHeld(t, callerClaim, p.Shop, p.Token)
		}
		if err := s.endState(t, callerClaim, p.Shop, p.Token, reservation.StateClaimed, reservation.AuthorityMySQL); err != nil {
			return err
		}
		if err := t.exec(tag(callerClaim)+sqlHoldsDelete, p.Shop, p.Token); err != nil {
			return fmt.Errorf("mysqlstore: claim: delete hold: %w", err)
		}
		// A duplicate key here: the ledger deducted this token before (a
		// token reused after its tombstone was forgotten, and claimed by
		// another call meanwhile): never twice (see below).
		if err := insertClaim(t, callerClaim, p.Shop, p.Token, st.allocs); err != nil {
			return err
		}
		if err := s.deductLedger(t, callerClaim, p.Shop, st.allocs); err != nil {
			return err
		}
		if err := s.feedState(t, callerClaim, p.Shop, p.Token); err != nil {
			return err
		}
		res = reservation.ClaimResult{Outcome: reservation.OutcomeClaimed, Allocations: st.allocs}
		return nil
	})
	switch mysqlErrno(err) {
	case errDupEntry:
		// The claims row was there: the answer is that claim, and this
		// transaction rolled back.
		allocs, _, err := readClaim(ctx, s.db, callerClaim, p.Shop, p.Token)
		if err != nil {
			return reservation.ClaimResult{}, err
		}
		return reservation.ClaimResult{Outcome: reservation.OutcomeClaimed, Allocations: allocs, Replayed: true}, nil
	case errExpectRows:
		return reservation.ClaimResult{}, fmt.Errorf("mysqlstore: claim shop %d token %q: the ledger cannot give %s: %w",
			p.Shop, p.Token, reservation.EncodeAllocations(res.Allocations), reservation.ErrInsufficientStock)
	}
	if err != nil {
		return reservation.ClaimResult{}, err
	}
	if expired.found {
		return reservation.ClaimResult{}, fmt.Errorf("mysqlstore: claim shop %d token %q expired at %s: %w", p.Shop, p.Token, expired.expiresAt, reservation.ErrExpired)
	}
	return res, nil
}

// expireHeld expires a held reservation MySQL decides, whose row the
// caller holds: the same change the reaper makes.
func (s *Store) expireHeld(t *txn, caller string, shop int64, token string) error {
	if err := s.endState(t, caller, shop, token, reservation.StateExpired, reservation.AuthorityMySQL); err != nil {
		return err
	}
	if err := t.exec(tag(caller)+sqlHoldsDelete, shop, token); err != nil {
		return fmt.Errorf("mysqlstore: %s: delete expired hold: %w", caller, err)
	}
	return s.feedState(t, caller, shop, token)
}

// deductLedger subtracts allocations from the ledger, in (item, location)
// order, refusing to go below zero: claims never exceed the stock the ledger
// was given. Each UPDATE is checked by sqlExpectRows, so a row that cannot
// give fails the transaction (errExpectRows) before its COMMIT.
func (s *Store) deductLedger(t *txn, caller string, shop int64, allocs []reservation.Allocation) error {
	order := slices.Clone(allocs)
	reservation.SortAllocations(order)
	if s.unorderedLedger {
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	for _, a := range order {
		if err := t.exec(tag(caller)+sqlLedgerDeduct, a.Quantity, shop, a.Item, a.Location, a.Quantity); err != nil {
			return fmt.Errorf("mysqlstore: %s: deduct ledger: %w", caller, err)
		}
		if err := t.exec(tag(caller)+sqlExpectRows, 1); err != nil {
			return fmt.Errorf("mysqlstore: %s: shop %d item %d location %d cannot give %d: %w",
				caller, shop, a.Item, a.Location, a.Quantity, reservation.ErrInsufficientStock)
		}
	}
	return nil
}

// insertClaim adds the claims row to t; a token claimed before fails the
// transaction with a duplicate key.
func insertClaim(t *txn, caller string, shop int64, token string, allocs []reservation.Allocation) error {
	doc, err := json.Marshal(allocs)
	if err != nil {
		return err
	}
	if err := t.exec(tag(caller)+sqlClaimInsert, shop, token, string(doc), caller); err != nil {
		return fmt.Errorf("mysqlstore: %s: insert claim: %w", caller, err)
	}
	return nil
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
		fence, st, err := readFenceAndState(t, fenceAndState(tag(callerRelease)+sqlFenceAndStateLock, p.Shop, p.Token, true), p.Shop, p.Token)
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
