package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Adjust applies a merchant's stock change.
//
// As authority it changes the ledger first (Ledger.AdjustStock), then moves
// the Redis quantity by the delta the ledger applied. Setting Available on
// an item x location the store has not seen creates its quantity field,
// even at 0. If the Redis step fails the ledger has still changed: the
// error says so, reservoir_redis_adjust_follow_failures_total counts it,
// Drift reports the quantity and Resync fixes it. Repeating the call would
// apply a delta twice (an adjust has no token); repeating a set is safe.
//
// As shadow it moves the Redis quantity by p.Delta, creating the field if
// needed: the authority reports the delta it applied, also when it created
// the row. Redis does not know the ledger, so the result's Available is
// the Redis quantity after the move (ledger minus held, as Redis sees it)
// and Delta is p.Delta.
//
// Each call carries a random id that the script records, so a transport
// that delivered the same script twice would still move the quantity once.
func (s *Store) Adjust(ctx context.Context, p *reservation.AdjustParams) (reservation.AdjustResult, error) {
	if err := s.cfg.Limits.ValidateAdjust(p); err != nil {
		return reservation.AdjustResult{}, err
	}
	// Register the shop first so the reaper will find it whatever happens
	// next; registering a shop twice, or one that ends up empty, is harmless.
	if err := s.client.SAdd(ctx, s.shopsKey(), p.Shop).Err(); err != nil {
		return reservation.AdjustResult{}, fmt.Errorf("redisstore: adjust: register shop %d: %w", p.Shop, err)
	}
	res := reservation.AdjustResult{Delta: p.Delta}
	if p.As == reservation.AsAuthority {
		var err error
		if res, err = s.cfg.Ledger.AdjustStock(ctx, p); err != nil {
			return reservation.AdjustResult{}, err
		}
	}
	k := s.shopKeys(p.Shop)
	reply, err := s.run(ctx, "adjust", scriptAdjust, []string{k.qty(p.Item), k.op(newOpID())}, p.Location, res.Delta, opTTL.Milliseconds())
	if err != nil {
		if p.As == reservation.AsAuthority {
			s.metrics.adjustFailures.Inc()
			return reservation.AdjustResult{}, fmt.Errorf("redisstore: adjust shop %d item %d location %d: the ledger changed by %d (now %d) but the Redis quantity did not follow (Resync repairs it): %w",
				p.Shop, p.Item, p.Location, res.Delta, res.Available, err)
		}
		return reservation.AdjustResult{}, err
	}
	if p.As == reservation.AsShadow {
		if res.Available, err = toInt(at(reply, 1)); err != nil {
			return reservation.AdjustResult{}, fmt.Errorf("redisstore: adjust: quantity: %w", err)
		}
	}
	return res, nil
}

func newOpID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
