package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/seed31b0e981/reservoir/reservation"
)

// PartialClaimError is returned by Claim as authority when the ledger was
// deducted but the Redis hold could not be removed: the payment is taken,
// the units are gone from the ledger, and Redis still holds them. Retry the
// Claim: the ledger answers the repeat without deducting again, and the
// cleanup runs. Never Release the token after this error: that would give
// Redis units the ledger no longer has. Until a retry or a Resync, Drift
// reports the hold as DriftLeftoverHold.
type PartialClaimError struct {
	Shop  int64
	Token string
	// Deducted is what the ledger was deducted by.
	Deducted []reservation.Allocation
	// Err is why the cleanup failed.
	Err error
}

// Error says what was deducted and that the claim should be retried.
func (e *PartialClaimError) Error() string {
	return fmt.Sprintf("redisstore: claim shop %d token %q: ledger deducted by %v but the Redis hold was not removed (retry the claim): %v",
		e.Shop, e.Token, e.Deducted, e.Err)
}

// Unwrap returns the cleanup's error.
func (e *PartialClaimError) Unwrap() error { return e.Err }

// Claim as authority is the legacy two-system claim: check the hold in
// Redis, deduct the MySQL ledger (exactly once per token: the ledger's
// claims row), then remove the Redis hold and mark the token claimed. The
// two systems cannot change together; see the package doc for what each
// failure in between leaves behind, and the metric that counts it.
//
// A retry after a failure completes the claim without a second deduction.
// With Config.Source set, that also holds when the hold expired or was
// reaped in the meantime: a token the ledger has deducted is cleaned up
// (its deduction taken out of the quantities) and answered Replayed instead
// of ErrExpired or ErrNotFound.
//
// As shadow it removes the Redis hold, gives its units back and takes
// p.Deducted (what the authority deducted) out, so the quantities follow
// the ledger; it never touches the ledger. Without a hold it still takes
// p.Deducted out and records the claim (the ledger went down all the
// same), then answers ErrNotFound: Redis missed the reservation. A repeated
// settle answers Replayed with the deducted allocations.
func (s *Store) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	if err := s.cfg.Limits.ValidateClaim(p); err != nil {
		return reservation.ClaimResult{}, err
	}
	if p.As == reservation.AsShadow {
		return s.settle(ctx, p)
	}
	k := s.shopKeys(p.Shop)
	reply, err := s.run(ctx, "claim_check", scriptClaimCheck, []string{k.hold(p.Token), k.claimed(p.Token)})
	if err != nil {
		return reservation.ClaimResult{}, err
	}
	var h holdRecord
	switch reply[0] {
	case "claimed":
		return claimedBefore(at(reply, 1))
	case "none":
		if res, ok, err := s.finishDeducted(ctx, p); ok || err != nil {
			return res, err
		}
		return reservation.ClaimResult{}, fmt.Errorf("redisstore: claim shop %d token %q: %w", p.Shop, p.Token, reservation.ErrNotFound)
	case "hold":
		now, err := toInt(at(reply, 1))
		if err != nil {
			return reservation.ClaimResult{}, fmt.Errorf("redisstore: claim: server time: %w", err)
		}
		if h, err = parseHold(at(reply, 2)); err != nil {
			return reservation.ClaimResult{}, err
		}
		if h.expiresMS <= now {
			if res, ok, err := s.finishDeducted(ctx, p); ok || err != nil {
				return res, err
			}
			return reservation.ClaimResult{}, fmt.Errorf("redisstore: claim shop %d token %q expired at %s: %w",
				p.Shop, p.Token, msTime(h.expiresMS), reservation.ErrExpired)
		}
	default:
		return reservation.ClaimResult{}, fmt.Errorf("redisstore: claim: unexpected reply %v", reply)
	}

	d, err := s.cfg.Ledger.Deduct(ctx, &reservation.DeductParams{Shop: p.Shop, Token: p.Token, Allocations: h.allocs})
	if err != nil {
		if errors.Is(err, reservation.ErrInsufficientStock) || errors.Is(err, reservation.ErrInvalidInput) {
			// A refusal: the ledger changed nothing and the hold stays.
			return reservation.ClaimResult{}, fmt.Errorf("redisstore: claim shop %d token %q: %w", p.Shop, p.Token, err)
		}
		s.metrics.claimFailures.WithLabelValues(string(WindowDeductError)).Inc()
		return reservation.ClaimResult{}, fmt.Errorf("redisstore: claim shop %d token %q: deduct the ledger (outcome unknown, hold kept; retry the claim): %w", p.Shop, p.Token, err)
	}
	if hook := s.afterDeduct; hook != nil {
		if err := hook(); err != nil {
			s.metrics.claimFailures.WithLabelValues(string(WindowAfterDeduct)).Inc()
			return reservation.ClaimResult{}, &PartialClaimError{Shop: p.Shop, Token: p.Token, Deducted: sorted(d.Allocations), Err: err}
		}
	}
	return s.cleanup(ctx, p, d.Allocations, !d.Applied)
}

// finishDeducted completes the claim of a token whose hold expired or is
// gone, if the ledger has deducted it (an earlier attempt failed after its
// deduction). ok is false when it cannot tell (no Source) or the token was
// not deducted.
func (s *Store) finishDeducted(ctx context.Context, p *reservation.ClaimParams) (res reservation.ClaimResult, ok bool, err error) {
	if s.cfg.Source == nil {
		return res, false, nil
	}
	claims, err := s.cfg.Source.Claims(ctx, p.Shop, []string{p.Token})
	if err != nil {
		return res, false, fmt.Errorf("redisstore: claim shop %d token %q: look up the ledger's claim: %w", p.Shop, p.Token, err)
	}
	deducted, found := claims[p.Token]
	if !found {
		return res, false, nil
	}
	res, err = s.cleanup(ctx, p, deducted, true)
	return res, true, err
}

// cleanup is the claim's Redis half, after the ledger was deducted.
func (s *Store) cleanup(ctx context.Context, p *reservation.ClaimParams, deducted []reservation.Allocation, replayed bool) (reservation.ClaimResult, error) {
	deducted = sorted(deducted)
	k := s.shopKeys(p.Shop)
	reply, err := s.run(ctx, "claim_cleanup", scriptSettle, []string{k.expiry(), k.hold(p.Token), k.claimed(p.Token)},
		k.base, p.Token, s.cfg.ClaimedTTL.Milliseconds(), encodeAllocs(deducted))
	if err != nil {
		s.metrics.claimFailures.WithLabelValues(string(WindowAfterDeduct)).Inc()
		return reservation.ClaimResult{}, &PartialClaimError{Shop: p.Shop, Token: p.Token, Deducted: deducted, Err: err}
	}
	// "done" means a concurrent claim of the token cleaned up first; the
	// ledger's answer (Applied) still says which call deducted.
	if reply[0] == "gone" {
		s.metrics.claimFailures.WithLabelValues(string(WindowHoldGone)).Inc()
	}
	return reservation.ClaimResult{Outcome: reservation.OutcomeClaimed, Allocations: deducted, Replayed: replayed}, nil
}

// claimedBefore answers a claim of a token whose marker is set.
func claimedBefore(marker any) (reservation.ClaimResult, error) {
	str, err := toString(marker)
	if err != nil {
		return reservation.ClaimResult{}, fmt.Errorf("redisstore: claimed marker: %w", err)
	}
	allocs, err := decodeAllocs(str)
	if err != nil {
		return reservation.ClaimResult{}, err
	}
	return reservation.ClaimResult{Outcome: reservation.OutcomeClaimed, Allocations: allocs, Replayed: true}, nil
}

// settle is Claim as shadow.
func (s *Store) settle(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	return s.settleAs(ctx, "settle", p)
}

// settleLost settles a claim whose Redis half was lost (callers:
// reap_settle, follow_claims), exactly as that half would have done. It
// reports whether it moved anything: not when the claim's own half landed
// first (the marker was there).
func (s *Store) settleLost(ctx context.Context, caller string, shop int64, token string, deducted []reservation.Allocation) (bool, error) {
	res, err := s.settleAs(ctx, caller, &reservation.ClaimParams{Shop: shop, Token: token, As: reservation.AsShadow, Deducted: deducted})
	switch {
	case errors.Is(err, reservation.ErrNotFound):
		return true, nil // no hold: the deduction went out all the same
	case err != nil:
		return false, fmt.Errorf("settle shop %d token %q: %w", shop, token, err)
	}
	return !res.Replayed, nil
}

// settleAs runs the settle script for caller (settle, or reap_settle: the
// reaper settling a claim whose Redis half was lost).
func (s *Store) settleAs(ctx context.Context, caller string, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	k := s.shopKeys(p.Shop)
	reply, err := s.run(ctx, caller, scriptSettle, []string{k.expiry(), k.hold(p.Token), k.claimed(p.Token)},
		k.base, p.Token, s.cfg.ClaimedTTL.Milliseconds(), encodeAllocs(sorted(p.Deducted)))
	if err != nil {
		return reservation.ClaimResult{}, err
	}
	switch reply[0] {
	case "gone":
		return reservation.ClaimResult{}, fmt.Errorf("redisstore: settle shop %d token %q: no hold (the quantities followed the deduction): %w", p.Shop, p.Token, reservation.ErrNotFound)
	case "done":
		res, err := claimedBefore(at(reply, 1))
		res.Outcome = reservation.OutcomeSettled
		return res, err
	case "removed":
		h, err := parseHold(at(reply, 1))
		if err != nil {
			return reservation.ClaimResult{}, err
		}
		return reservation.ClaimResult{Outcome: reservation.OutcomeSettled, Allocations: h.allocs}, nil
	}
	return reservation.ClaimResult{}, fmt.Errorf("redisstore: settle: unexpected reply %v", reply)
}
