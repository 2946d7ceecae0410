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
// Drift reports the quantity and Resync fixes it. Repeating the call with
// the same p.Key completes it (the ledger answers Replayed and the quantity
// follows once); repeating a delta without a key would apply it twice.
//
// As shadow it moves the Redis quantity by p.Delta, creating the field if
// needed: the authority reports the delta it applied, also when it created
// the row. Redis does not know the ledger, so the result's Available is
// the Redis quantity after the move (ledger minus held, as Redis sees it)
// and Delta is p.Delta.
//
// Each call carries an id that the script records (p.Key, or a random one),
// so a transport that delivered the same script twice would still move the
// quantity once.
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
		// A replayed key returns the first call's result, whose delta the
		// quantity follows below (once per key).
		var err error
		if res, err = s.cfg.Ledger.AdjustStock(ctx, p); err != nil {
			return reservation.AdjustResult{}, err
		}
	}
	// The quantity follows once per call; with a key, once per key, for as
	// long as a claimed marker lives: a retry after the ledger replayed the
	// key still completes a follow that failed the first time, and never
	// applies one twice.
	k := s.shopKeys(p.Shop)
	op, ttl := newOpID(), opTTL
	if p.Key != "" {
		op, ttl = "key:"+p.Key, s.cfg.ClaimedTTL
	}
	reply, err := s.run(ctx, "adjust", scriptAdjust, []string{k.qty(p.Item), k.op(op)}, p.Location, res.Delta, ttl.Milliseconds())
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
