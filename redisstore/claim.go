package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Claim as authority is the legacy two-system claim of a hold Redis
// decided:
//
//  1. claim_check checks the fence (*reservation.NotDeciderError, nothing
//     changed) and the token's tombstone (claimed: replayed with the
//     tombstone's allocations; released: ErrReleased; expired: ErrExpired;
//     refused: ErrNotFound). No hold is ErrNotFound, unless the ledger
//     (Config.Source) has a claim of the token: then the claim is finished
//     and answered Replayed. A hold past its expiry that no claim has
//     started is ErrExpired (the reaper returns it). Otherwise the hold is
//     marked claiming: a release now answers ErrClaimInProgress and the
//     reaper leaves it alone, for Config.ClaimGrace.
//  2. Ledger.Deduct deducts the hold's allocations, once per token (a
//     repeat answers Applied false), and checks MySQL's fence.
//  3. The cleanup removes the hold, gives its units back, takes the
//     deduction out and leaves the claimed tombstone. With a Source (and
//     without Config.InlineClaimCleanup) it is not on the caller's path:
//     the ledger recorded the claim in its change feed, and Redis follows
//     it through Apply, as it would after a lost cleanup. Until then the
//     hold stays claiming, and every call that finds it (Get, Release, a
//     repeated Reserve or Claim) asks the ledger first, so each answers
//     as claimed (finishing the Redis side on the way when it may write):
//     no answer after this one contradicts it.
//
// Once the ledger is deducted the answer is success, even if an inline
// cleanup fails: Redis follows through Apply (the failure is counted, see
// ClaimWindow). A
// deduction the ledger refuses (ErrInsufficientStock, invalid input, or
// *reservation.NotDeciderError when a handoff to MySQL overtook the claim)
// clears the claiming mark and returns the ledger's error; a
// NotDeciderError is returned as it is, so the caller can route by it. Any
// other Deduct error leaves the mark: the outcome is unknown, and a retry
// of the claim goes to Deduct again, which is idempotent.
//
// As shadow it writes nothing and never touches the ledger: it answers
// OutcomeSettled with the hold's allocations when Redis holds the token,
// Replayed with the claimed tombstone's allocations, else the errors
// above. p.Deducted is not used: Redis follows the ledger's claims through
// the change feed.
func (s *Store) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	if err := s.cfg.Limits.ValidateClaim(p); err != nil {
		return reservation.ClaimResult{}, err
	}
	k := s.shopKeys(p.Shop)
	keys := []string{k.hold(p.Token), k.tomb(p.Token), k.fence()}
	var reply []any
	var err error
	if p.As == reservation.AsShadow {
		reply, err = s.runRO(ctx, "claim_check_shadow", scriptClaimCheck, keys, modeShadow, k.base, p.Token, s.cfg.TombstoneTTL.Milliseconds())
	} else {
		reply, err = s.run(ctx, "claim_check", scriptClaimCheck, keys, modeDecide, k.base, p.Token, s.cfg.TombstoneTTL.Milliseconds())
	}
	if err != nil {
		return reservation.ClaimResult{}, err
	}
	outcome := reservation.OutcomeClaimed
	if p.As == reservation.AsShadow {
		outcome = reservation.OutcomeSettled
	}
	switch reply[0] {
	case "fence":
		return reservation.ClaimResult{}, s.notDecider("claim", p.Shop, at(reply, 1))
	case "tomb":
		t, err := s.tombstone("claim", p.Token, at(reply, 1))
		if err != nil {
			return reservation.ClaimResult{}, err
		}
		if t.State == reservation.StateClaimed {
			return reservation.ClaimResult{Outcome: outcome, Allocations: t.Allocations, Replayed: true}, nil
		}
		return reservation.ClaimResult{}, tombErr("claim", p.Shop, p.Token, t.State)
	case "none":
		if p.As == reservation.AsAuthority && s.cfg.Source != nil {
			deducted, claimed, err := s.ledgerClaim(ctx, p.Shop, p.Token)
			if err != nil {
				return reservation.ClaimResult{}, fmt.Errorf("redisstore: claim shop %d token %q: %w", p.Shop, p.Token, err)
			}
			if claimed {
				// An earlier attempt deducted the ledger and its Redis
				// step, and what followed, are gone: finish it.
				if _, err := s.settle(ctx, "claim_finish", p.Shop, p.Token, deducted); err != nil {
					return reservation.ClaimResult{}, err
				}
				return reservation.ClaimResult{Outcome: reservation.OutcomeClaimed, Allocations: reservation.SortedAllocations(deducted), Replayed: true}, nil
			}
		}
		return reservation.ClaimResult{}, fmt.Errorf("redisstore: claim shop %d token %q: %w", p.Shop, p.Token, reservation.ErrNotFound)
	case "expired":
		exp, _ := toInt(at(reply, 1))
		return reservation.ClaimResult{}, fmt.Errorf("redisstore: claim shop %d token %q expired at %s: %w",
			p.Shop, p.Token, msTime(exp), reservation.ErrExpired)
	case "hold":
	default:
		return reservation.ClaimResult{}, fmt.Errorf("redisstore: claim: unexpected reply %v", reply)
	}
	h, err := parseHold(at(reply, 1))
	if err != nil {
		return reservation.ClaimResult{}, err
	}
	if p.As == reservation.AsShadow {
		// A claim whose cleanup Redis has not followed yet: the ledger
		// has it, so Redis as shadow answers what its claimed tombstone
		// will.
		deducted, claimed, err := s.ledgerClaimed(ctx, "claim_shadow", p.Shop, p.Token, h.claimingMS != 0, false)
		if err != nil {
			return reservation.ClaimResult{}, err
		}
		if claimed {
			return reservation.ClaimResult{Outcome: reservation.OutcomeSettled, Allocations: reservation.SortedAllocations(deducted), Replayed: true}, nil
		}
		return reservation.ClaimResult{Outcome: reservation.OutcomeSettled, Allocations: h.allocs}, nil
	}
	stamp, err := toString(at(reply, 2))
	if err != nil {
		return reservation.ClaimResult{}, fmt.Errorf("redisstore: claim: claiming stamp: %w", err)
	}

	d, err := s.cfg.Ledger.Deduct(ctx, &reservation.DeductParams{Shop: p.Shop, Token: p.Token, Allocations: h.allocs})
	if err != nil {
		if isNotDecider(err) || errors.Is(err, reservation.ErrInsufficientStock) || errors.Is(err, reservation.ErrInvalidInput) {
			// A refusal: the ledger changed nothing, so the hold is
			// released from its claim and stays as it was. If that script
			// fails, the mark only makes releases wait for the grace, after
			// which they ask the ledger: the refusal is still the answer
			// (the script's failure is counted with the other script
			// errors).
			_, _ = s.run(ctx, "claim_abort", scriptClaimAbort, []string{k.hold(p.Token)}, stamp)
			if isNotDecider(err) {
				return reservation.ClaimResult{}, err
			}
			return reservation.ClaimResult{}, fmt.Errorf("redisstore: claim shop %d token %q: %w", p.Shop, p.Token, err)
		}
		s.metrics.claimFailures.WithLabelValues(string(WindowDeductError)).Inc()
		return reservation.ClaimResult{}, fmt.Errorf("redisstore: claim shop %d token %q: deduct the ledger (outcome unknown, hold kept claiming; retry the claim): %w", p.Shop, p.Token, err)
	}
	res := reservation.ClaimResult{Outcome: reservation.OutcomeClaimed, Allocations: reservation.SortedAllocations(d.Allocations), Replayed: !d.Applied}
	// From here on the claim has happened: the cleanup only makes Redis
	// follow it now rather than when the change feed delivers it, so it
	// stays off the caller's path whenever the claiming hold can be told
	// from one still being claimed (see finishClaimed).
	if !s.inlineCleanup() {
		return res, nil
	}
	cleanupErr := error(nil)
	if hook := s.afterDeduct; hook != nil {
		cleanupErr = hook()
	}
	if cleanupErr == nil {
		var settled string
		settled, cleanupErr = s.settle(ctx, "claim_cleanup", p.Shop, p.Token, d.Allocations)
		if settled == "converted" || settled == "gone" {
			s.metrics.claimFailures.WithLabelValues(string(WindowHoldGone)).Inc()
		}
	}
	if cleanupErr != nil {
		s.metrics.claimFailures.WithLabelValues(string(WindowAfterDeduct)).Inc()
	}
	return res, nil
}

// settle runs the settle script for caller: the Redis side of a claim the
// ledger has recorded. It returns the script's first reply word ("done",
// "removed", "converted" or "gone") and counts the tombstone it wrote.
func (s *Store) settle(ctx context.Context, caller string, shop int64, token string, deducted []reservation.Allocation) (string, error) {
	k := s.shopKeys(shop)
	reply, err := s.run(ctx, caller, scriptSettle, []string{k.hold(token), k.tomb(token)},
		k.base, token, s.cfg.TombstoneTTL.Milliseconds(), reservation.EncodeAllocations(reservation.SortedAllocations(deducted)))
	if err != nil {
		return "", err
	}
	what, _ := reply[0].(string)
	switch what {
	case "done":
	case "removed", "converted", "gone":
		s.metrics.tombstonesWritten.WithLabelValues(string(reservation.StateClaimed)).Inc()
	default:
		return "", fmt.Errorf("redisstore: %s: unexpected reply %v", caller, reply)
	}
	return what, nil
}

// inlineCleanup reports whether a legacy claim cleans Redis up before it
// answers: asked to (Config.InlineClaimCleanup), or without a Source, in
// which case a claiming hold cannot be resolved by asking the ledger.
func (s *Store) inlineCleanup() bool {
	return s.cfg.InlineClaimCleanup || s.cfg.Source == nil
}

// finishClaimed resolves a hold that a call found claiming (a legacy
// claim marked it): when the ledger has recorded the token's claim, the
// claim happened (its caller may already have been told so), and the
// call must answer as for a claimed tombstone. With write set the Redis
// side of the claim is finished first (the settle script, as the claim's
// cleanup would), for caller. A hold no claim marked (claiming false), a
// claim the ledger has not recorded (it may be under way), and a store
// whose claims clean up inline (inlineCleanup: there a claiming hold is one
// whose claim is under way or whose cleanup failed, as before) answer
// false.
func (s *Store) finishClaimed(ctx context.Context, caller string, shop int64, token string, claiming, write bool) (bool, error) {
	_, claimed, err := s.ledgerClaimed(ctx, caller, shop, token, claiming, write)
	return claimed, err
}

// ledgerClaimed is finishClaimed, with the allocations the ledger
// deducted.
func (s *Store) ledgerClaimed(ctx context.Context, caller string, shop int64, token string, claiming, write bool) ([]reservation.Allocation, bool, error) {
	if !claiming || s.inlineCleanup() {
		return nil, false, nil
	}
	deducted, claimed, err := s.ledgerClaim(ctx, shop, token)
	if err != nil {
		return nil, false, fmt.Errorf("redisstore: %s shop %d token %q: the hold is being claimed: %w", caller, shop, token, err)
	}
	if !claimed {
		return nil, false, nil
	}
	if write {
		if _, err := s.settle(ctx, caller+"_settle", shop, token, deducted); err != nil {
			return nil, false, err
		}
	}
	return deducted, true, nil
}
