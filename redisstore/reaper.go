package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/reservation"
)

// shopsPage is how many shops one SSCAN step and one peek pipeline cover.
const shopsPage = 200

// Reap returns expired holds, judged by the Redis server's clock, up to
// p.Limit hold records (one per allocation, as mysqlstore counts them).
//
// A hold is given back only when the ledger says its token was not
// claimed. A claim whose Redis half was lost (the shadow settle in mysql
// mode while Redis was unreachable, or the legacy claim's cleanup after
// its deduction) leaves a hold whose units the ledger no longer has;
// giving them back would make Redis offer stock that does not exist, and a
// kill switch before the next reconcile would sell it. So the reaper asks
// Config.Source which of the expired tokens the ledger deducted, settles
// those (the hold is dropped and the deduction applied, exactly as the lost
// settle would have done) and gives back only the others. When the ledger
// cannot be read the shop's holds stay where they are and Reap returns the
// error: expired stock waits for the next pass rather than risk an
// oversell (a claim needs the ledger too, so nothing sells meanwhile). A
// store without a Source gives every expired hold back, unchecked.
//
// The check and the give-back are two steps: a claim the ledger commits
// between them, whose Redis half is then also lost, still gives back its
// units. The ledger's claim must have started before the hold expired, and
// Redis's hold expires after the MySQL hold it shadows, so this needs a
// claim transaction that outlives the hold and a lost settle together; the
// next reconcile repairs it.
//
// A shop that fails (its claims cannot be read, a script errs) is skipped
// and the others are reaped; the errors are returned joined.
//
// The shops set cannot share a script with shop keys on a cluster, so the
// reaper walks it in pages: it peeks at each shop's earliest expiry in one
// pipeline (against the time of one TIME call, only to skip shops with
// nothing due), lists the due tokens, and runs the reap script on those.
// The script re-reads the clock and pops holds atomically, so several
// reapers running at once each return a hold at most once.
func (s *Store) Reap(ctx context.Context, p *reservation.ReapParams) (reservation.ReapResult, error) {
	if err := s.cfg.Limits.ValidateReap(p); err != nil {
		return reservation.ReapResult{}, err
	}
	limit := p.Limit
	if limit == 0 {
		limit = s.cfg.ReapBatch
	}
	var res reservation.ReapResult
	now, err := s.client.Time(ctx).Result()
	if err != nil {
		return res, fmt.Errorf("redisstore: reap: server time: %w", err)
	}
	nowMS := now.UnixMilli()
	var cursor uint64
	var errs []error
	for {
		page, next, err := s.client.SScan(ctx, s.shopsKey(), cursor, "", shopsPage).Result()
		if err != nil {
			return res, fmt.Errorf("redisstore: reap: list shops: %w", err)
		}
		due, err := s.dueShops(ctx, page, nowMS)
		if err != nil {
			return res, err
		}
		for _, shop := range due {
			holds, units, err := s.reapShop(ctx, shop, nowMS, limit-res.Holds)
			res.Holds += holds
			res.Units += units
			s.metrics.reapedHolds.Add(float64(holds))
			s.metrics.reapedUnits.Add(float64(units))
			if err != nil {
				// One shop's failure (its claims unreadable, say) must not
				// starve the shops after it in the set's order.
				errs = append(errs, err)
				continue
			}
			if res.Holds >= limit {
				return res, errors.Join(errs...)
			}
		}
		if cursor = next; cursor == 0 {
			return res, errors.Join(errs...)
		}
	}
}

// reapShop gives back a shop's holds expired by nowMS, up to limit hold
// records, after settling those whose tokens the ledger deducted.
func (s *Store) reapShop(ctx context.Context, shop, nowMS int64, limit int) (holds int, units int64, err error) {
	k := s.shopKeys(shop)
	// One token per record at most: a hold has at least one allocation.
	tokens, err := s.client.ZRangeArgs(ctx, redis.ZRangeArgs{
		Key: k.expiry(), Start: "-inf", Stop: strconv.FormatInt(nowMS, 10), ByScore: true, Count: int64(limit),
	}).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("redisstore: reap shop %d: list expired holds: %w", shop, err)
	}
	if len(tokens) == 0 {
		return 0, 0, nil
	}
	if s.cfg.Source != nil {
		claimed, err := s.cfg.Source.Claims(ctx, shop, tokens)
		if err != nil {
			return 0, 0, fmt.Errorf("redisstore: reap shop %d: the ledger's claims could not be read, so no hold was given back: %w", shop, err)
		}
		for _, token := range tokens {
			deducted, ok := claimed[token]
			if !ok {
				continue
			}
			moved, err := s.settleLost(ctx, "reap_settle", shop, token, deducted)
			if err != nil {
				return 0, 0, fmt.Errorf("redisstore: reap: %w", err)
			}
			if moved {
				s.metrics.reapSettled.Inc()
			}
		}
		tokens = slices.DeleteFunc(tokens, func(t string) bool { _, ok := claimed[t]; return ok })
		if len(tokens) == 0 {
			return 0, 0, nil
		}
	}
	args := make([]any, 0, 2+len(tokens))
	args = append(args, k.base, limit)
	for _, t := range tokens {
		args = append(args, t)
	}
	reply, err := s.run(ctx, "reap", scriptReap, []string{k.expiry()}, args...)
	if err != nil {
		return 0, 0, err
	}
	h, err1 := toInt(at(reply, 0))
	u, err2 := toInt(at(reply, 1))
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("redisstore: reap: unexpected reply %v", reply)
	}
	return int(h), u, nil
}

// dueShops returns the shops whose earliest hold expires by nowMS.
// Members that are not shop ids are skipped.
func (s *Store) dueShops(ctx context.Context, page []string, nowMS int64) ([]int64, error) {
	var shops []int64
	for _, m := range page {
		if shop, err := strconv.ParseInt(m, 10, 64); err == nil && shop > 0 {
			shops = append(shops, shop)
		}
	}
	ks := make([]keys, len(shops))
	for i, shop := range shops {
		ks[i] = s.shopKeys(shop)
	}
	if len(ks) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.ZSliceCmd, len(ks))
	_, err := s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, k := range ks {
			cmds[i] = pipe.ZRangeWithScores(ctx, k.expiry(), 0, 0)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redisstore: reap: peek expiry: %w", err)
	}
	var due []int64
	for i, c := range cmds {
		if z := c.Val(); len(z) > 0 && int64(z[0].Score) <= nowMS {
			due = append(due, shops[i])
		}
	}
	return due, nil
}
