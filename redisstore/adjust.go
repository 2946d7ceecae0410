package redisstore

import (
	"context"
	"fmt"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Adjust applies a merchant's stock change to the ledger
// (Ledger.AdjustStock), then makes the Redis quantity follow the change at
// once: the ledger's delta, applied once per change-feed id
// (AdjustResult.ChangeID), with the same marker Apply uses, so the relay's
// later delivery of the same change does not move the quantity again. A
// change id of 0 (the ledger changed nothing) applies nothing. A delta of
// 0 with a change id (a new item x location at 0) creates the quantity
// field, so Availability lists the location.
//
// If the Redis step fails the ledger has still changed: the error says so
// and reservoir_redis_adjust_follow_failures_total counts it. Repeating
// the call with the same p.Key completes it (the ledger replays the key
// with the same change id); without a key, the relay delivers the change.
//
// As shadow it is refused (*reservation.ValidationError on "as"): Redis
// follows the ledger through the change feed, never through a second
// write.
func (s *Store) Adjust(ctx context.Context, p *reservation.AdjustParams) (reservation.AdjustResult, error) {
	if err := s.cfg.Limits.ValidateAdjust(p); err != nil {
		return reservation.AdjustResult{}, err
	}
	if p.As != reservation.AsAuthority {
		return reservation.AdjustResult{}, &reservation.ValidationError{Field: "as", Reason: "Redis follows the ledger's adjusts through the change feed; adjust as authority"}
	}
	// Register the shop first so the reaper will find it whatever happens
	// next; registering a shop twice, or one that ends up empty, is harmless.
	if err := s.client.SAdd(ctx, s.shopsKey(), p.Shop).Err(); err != nil {
		return reservation.AdjustResult{}, fmt.Errorf("redisstore: adjust: register shop %d: %w", p.Shop, err)
	}
	res, err := s.cfg.Ledger.AdjustStock(ctx, p)
	if err != nil {
		return reservation.AdjustResult{}, err
	}
	if res.ChangeID == 0 {
		return res, nil
	}
	if _, err := s.applyAdjust(ctx, "adjust", p.Shop, res.ChangeID, p.Item, p.Location, res.Delta); err != nil {
		s.metrics.adjustFailures.Inc()
		return reservation.AdjustResult{}, fmt.Errorf("redisstore: adjust shop %d item %d location %d: the ledger changed by %d (now %d, change %d) but the Redis quantity did not follow yet (retry with the same key, or the change feed delivers it): %w",
			p.Shop, p.Item, p.Location, res.Delta, res.Available, res.ChangeID, err)
	}
	return res, nil
}

// applyAdjust moves one quantity by delta once per change id. It reports
// whether this call moved it.
func (s *Store) applyAdjust(ctx context.Context, caller string, shop, change, item, location, delta int64) (bool, error) {
	k := s.shopKeys(shop)
	reply, err := s.run(ctx, caller, scriptAdjust, []string{k.qty(item), k.op(change)}, location, delta, changeTTL.Milliseconds())
	if err != nil {
		return false, err
	}
	n, err := toInt(at(reply, 0))
	if err != nil {
		return false, fmt.Errorf("redisstore: %s: unexpected reply %v", caller, reply)
	}
	return n == 1, nil
}
