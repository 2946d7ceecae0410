package mysqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Claim as authority removes the hold, inserts the claim row and deducts the
// ledger in one transaction. The claims row's primary key (shop, token) makes
// the deduction happen once whoever retries; the ledger rows, now the hot
// rows, are updated last, in (item, location) order, so their locks are held
// for as short a time as the transaction allows and never in a cycle.
//
// As shadow it removes the hold. p.Deducted needs no following here: the
// authority's deduction went through this same ledger (Deduct), which
// trimmed the pool.
func (s *Store) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	if err := s.cfg.Limits.ValidateClaim(p); err != nil {
		return reservation.ClaimResult{}, err
	}
	if p.As == reservation.AsShadow {
		return s.settle(ctx, p)
	}
	var res reservation.ClaimResult
	err := s.inTx(ctx, callerClaim, func(tx *sql.Tx) error {
		res = reservation.ClaimResult{Outcome: reservation.OutcomeClaimed}
		h, err := readHolds(ctx, tx, tag(callerClaim)+sqlHoldsLock, p.Shop, p.Token)
		if err != nil {
			return fmt.Errorf("mysqlstore: claim: lock hold: %w", err)
		}
		if len(h.allocs) == 0 {
			allocs, found, err := readClaim(ctx, tx, callerClaim, p.Shop, p.Token)
			if err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("mysqlstore: claim shop %d token %q: %w", p.Shop, p.Token, reservation.ErrNotFound)
			}
			res.Allocations, res.Replayed = allocs, true
			return nil
		}
		if !h.live {
			return fmt.Errorf("mysqlstore: claim shop %d token %q expired at %s: %w", p.Shop, p.Token, h.expiresAt.Time, reservation.ErrExpired)
		}
		if _, err := tx.ExecContext(ctx, tag(callerClaim)+sqlHoldsDelete, p.Shop, p.Token); err != nil {
			return fmt.Errorf("mysqlstore: claim: delete hold: %w", err)
		}
		inserted, err := insertClaim(ctx, tx, callerClaim, p.Shop, p.Token, h.allocs)
		if err != nil {
			return err
		}
		if !inserted {
			// The legacy claim (Deduct) already took this token from the
			// ledger: deleting our hold (above) settled it.
			allocs, _, err := readClaim(ctx, tx, callerClaim, p.Shop, p.Token)
			if err != nil {
				return err
			}
			res.Allocations, res.Replayed = allocs, true
			return nil
		}
		res.Allocations = h.allocs
		return s.deductLedger(ctx, tx, callerClaim, p.Shop, h.allocs)
	})
	return res, err
}

// deductLedger subtracts allocations from the ledger, in (item, location)
// order, refusing to go below zero: claims never exceed the stock the ledger
// was given.
func (s *Store) deductLedger(ctx context.Context, tx *sql.Tx, caller string, shop int64, allocs []reservation.Allocation) error {
	order := slices.Clone(allocs)
	reservation.SortAllocations(order)
	if s.unorderedLedger {
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	for _, a := range order {
		res, err := tx.ExecContext(ctx, tag(caller)+sqlLedgerDeduct, a.Quantity, shop, a.Item, a.Location, a.Quantity)
		if err != nil {
			return fmt.Errorf("mysqlstore: %s: deduct ledger: %w", caller, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("mysqlstore: %s: shop %d item %d location %d cannot give %d: %w",
				caller, shop, a.Item, a.Location, a.Quantity, reservation.ErrInsufficientStock)
		}
	}
	return nil
}

// viaDeductHeld is a claims row's via when the legacy claim's Deduct also
// settled this store's own hold of the token.
const viaDeductHeld = "deduct_held"

// insertClaim records the claim; inserted is false when the token was
// claimed before.
func insertClaim(ctx context.Context, tx *sql.Tx, caller string, shop int64, token string, allocs []reservation.Allocation) (inserted bool, err error) {
	doc, err := json.Marshal(allocs)
	if err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, tag(caller)+sqlClaimInsert, shop, token, string(doc), caller); err != nil {
		if mysqlErrno(err) == errDupEntry {
			return false, nil
		}
		return false, fmt.Errorf("mysqlstore: %s: insert claim: %w", caller, err)
	}
	return true, nil
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

// settle is Claim as shadow.
func (s *Store) settle(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	var res reservation.ClaimResult
	err := s.inTx(ctx, callerSettle, func(tx *sql.Tx) error {
		allocs, err := s.removeHold(ctx, tx, callerSettle, p.Shop, p.Token)
		if err != nil {
			return err
		}
		if allocs == nil {
			// No hold: Deduct settled it with the ledger, or this store
			// never held the token. The claims row tells which.
			var doc, via string
			err := tx.QueryRowContext(ctx, tag(callerSettle)+sqlClaimVia, p.Shop, p.Token).Scan(&doc, &via)
			if err != nil && !isNoRows(err) {
				return fmt.Errorf("mysqlstore: settle: read claim: %w", err)
			}
			if err != nil || via != viaDeductHeld {
				return fmt.Errorf("mysqlstore: settle shop %d token %q: %w", p.Shop, p.Token, reservation.ErrNotFound)
			}
			var claimed []reservation.Allocation
			if err := json.Unmarshal([]byte(doc), &claimed); err != nil {
				return fmt.Errorf("mysqlstore: settle: claim row of token %q: %w", p.Token, err)
			}
			reservation.SortAllocations(claimed)
			res = reservation.ClaimResult{Outcome: reservation.OutcomeSettled, Allocations: claimed, Replayed: true}
			return nil
		}
		res = reservation.ClaimResult{Outcome: reservation.OutcomeSettled, Allocations: allocs}
		return nil
	})
	return res, err
}

// removeHold deletes a token's hold. It returns nil when there was no hold.
//
// The units are not put back into the pool here. Deleting a hold lowers
// pool + held, so the projection stays within the ledger whatever runs
// concurrently, and the next reserve that finds the pool short refills it
// from the ledger in one batch. Putting units back would need the
// single-flight lock row (for the cap and the unit ids), and every release
// of a hot item would queue on it: measured in the facade's tests, releases
// and settles timed out behind refills.
func (s *Store) removeHold(ctx context.Context, tx *sql.Tx, caller string, shop int64, token string) ([]reservation.Allocation, error) {
	h, err := readHolds(ctx, tx, tag(caller)+sqlHoldsLock, shop, token)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: %s: lock hold: %w", caller, err)
	}
	if len(h.allocs) == 0 {
		return nil, nil
	}
	if _, err := tx.ExecContext(ctx, tag(caller)+sqlHoldsDelete, shop, token); err != nil {
		return nil, fmt.Errorf("mysqlstore: %s: delete hold: %w", caller, err)
	}
	return h.allocs, nil
}

// Release deletes a hold; its units are reservable again at once (see
// removeHold for why they reach the pool through the replenisher).
func (s *Store) Release(ctx context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	if err := s.cfg.Limits.ValidateRelease(p); err != nil {
		return reservation.ReleaseResult{}, err
	}
	var res reservation.ReleaseResult
	err := s.inTx(ctx, callerRelease, func(tx *sql.Tx) error {
		allocs, err := s.removeHold(ctx, tx, callerRelease, p.Shop, p.Token)
		if err != nil {
			return err
		}
		if allocs == nil {
			_, claimed, err := readClaim(ctx, tx, callerRelease, p.Shop, p.Token)
			if err != nil {
				return err
			}
			if claimed {
				return fmt.Errorf("mysqlstore: release shop %d token %q: %w", p.Shop, p.Token, reservation.ErrAlreadyClaimed)
			}
		}
		res = reservation.ReleaseResult{Released: allocs != nil, Allocations: allocs}
		return nil
	})
	return res, err
}

// Reap returns expired holds, oldest first, judged by the database's clock
// (NOW(3)), never the app server's. The hold rows are taken with SKIP
// LOCKED, so several reapers share the work and each hold is returned once.
// Like Release, it deletes the holds; the replenisher brings the units back
// into the pool when a reserve needs them.
func (s *Store) Reap(ctx context.Context, p *reservation.ReapParams) (reservation.ReapResult, error) {
	if err := s.cfg.Limits.ValidateReap(p); err != nil {
		return reservation.ReapResult{}, err
	}
	limit := p.Limit
	if limit == 0 {
		limit = s.cfg.ReapBatch
	}
	var res reservation.ReapResult
	err := s.inTx(ctx, callerReap, func(tx *sql.Tx) error {
		res = reservation.ReapResult{}
		rows, err := tx.QueryContext(ctx, sqlReapSelect, limit)
		if err != nil {
			return fmt.Errorf("mysqlstore: reap: %w", err)
		}
		type row struct {
			k     key
			token string
			qty   int64
		}
		var got []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.k.shop, &r.token, &r.k.item, &r.k.loc, &r.qty); err != nil {
				rows.Close()
				return err
			}
			got = append(got, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(got) == 0 {
			return err
		}
		args := make([]any, 0, 4*len(got))
		for _, r := range got {
			args = append(args, r.k.shop, r.token, r.k.item, r.k.loc)
			res.Units += r.qty
		}
		if _, err := tx.ExecContext(ctx, reapDeleteQuery(len(got)), args...); err != nil {
			return fmt.Errorf("mysqlstore: reap: delete: %w", err)
		}
		res.Holds = len(got)
		return nil
	})
	if err == nil {
		s.metrics.reapedHolds.Add(float64(res.Holds))
	}
	return res, err
}
