package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/reservation"
)

// shopsPage is how many shops one SSCAN step and one peek pipeline cover.
const shopsPage = 200

// Reap expires holds past their expiry, judged by the Redis server's
// clock, in the shops Redis decides, up to p.Limit hold records (one per
// allocation, as mysqlstore counts them). Each expired hold gives its units
// back and leaves an expired tombstone. A shop whose fence names MySQL is
// left alone, whatever its holds: they mirror MySQL's, which MySQL's own
// reaper expires (the change feed brings the tombstones).
//
// A hold whose legacy claim has started is not simply expired: the ledger
// may have deducted it. Within Config.ClaimGrace of the claim's start it is
// skipped. Older, the reaper asks the ledger (Config.Source.Claims):
// claimed, the hold is settled as claimed (as the claim's cleanup would
// have done, counted in reservoir_redis_reap_settled_total); not claimed,
// it expires. Without a Source it expires. When the ledger cannot be read,
// those holds stay for the next pass and Reap returns the error.
//
// A shop that fails is skipped and the others are reaped; the errors are
// returned joined.
//
// The shops set cannot share a script with shop keys on a cluster, so the
// reaper walks it in pages: it peeks at each shop's fence and earliest
// expiry in one pipeline (against the time of one TIME call, only to skip
// shops with nothing due), lists the due tokens, and runs the reap script
// on those. The script re-reads the clock and the fence and pops holds
// atomically, so several reapers running at once each return a hold at
// most once, and none expires a hold after a handoff.
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

// reapShop expires a shop's holds due by nowMS, up to limit hold records.
func (s *Store) reapShop(ctx context.Context, shop, nowMS int64, limit int) (records int, units int64, err error) {
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
	pass := make([][2]string, len(tokens))
	for i, t := range tokens {
		pass[i] = [2]string{t, ""}
	}
	r, resolve, err := s.reapScript(ctx, shop, limit, pass)
	if err != nil || len(resolve) == 0 {
		return r.records, r.units, err
	}
	// Claiming holds older than the grace: the ledger says which of their
	// claims happened.
	var claims map[string][]reservation.Allocation
	if s.cfg.Source != nil {
		list := make([]string, len(resolve))
		for i, rv := range resolve {
			list[i] = rv[0]
		}
		if claims, err = s.cfg.Source.Claims(ctx, shop, list); err != nil {
			return r.records, r.units, fmt.Errorf("redisstore: reap shop %d: the ledger's claims could not be read, so %d claiming holds stay: %w", shop, len(resolve), err)
		}
	}
	var unclaimed [][2]string
	for _, rv := range resolve {
		deducted, ok := claims[rv[0]]
		if !ok {
			unclaimed = append(unclaimed, rv)
			continue
		}
		what, err := s.settle(ctx, "reap_settle", shop, rv[0], deducted)
		if err != nil {
			return r.records, r.units, fmt.Errorf("redisstore: reap shop %d token %q: %w", shop, rv[0], err)
		}
		if what != "done" {
			s.metrics.reapSettled.Inc()
		}
	}
	if len(unclaimed) == 0 || r.records >= limit {
		return r.records, r.units, nil
	}
	r2, _, err := s.reapScript(ctx, shop, limit-r.records, unclaimed)
	return r.records + r2.records, r.units + r2.units, err
}

type reaped struct {
	records int
	units   int64
}

// reapScript runs the reap script on (token, resolved stamp) pairs and
// returns what it expired and the claiming holds to resolve, as (token,
// stamp) pairs.
func (s *Store) reapScript(ctx context.Context, shop int64, limit int, tokens [][2]string) (reaped, [][2]string, error) {
	k := s.shopKeys(shop)
	args := make([]any, 0, 4+2*len(tokens))
	args = append(args, k.base, limit, s.cfg.ClaimGrace.Milliseconds(), s.cfg.TombstoneTTL.Milliseconds())
	for _, t := range tokens {
		args = append(args, t[0], t[1])
	}
	reply, err := s.run(ctx, "reap", scriptReap, []string{k.expiry(), k.fence()}, args...)
	if err != nil {
		return reaped{}, nil, err
	}
	switch reply[0] {
	case "fence":
		// A handoff between the peek and the script: nothing to do here.
		return reaped{}, nil, nil
	case "ok":
	default:
		return reaped{}, nil, fmt.Errorf("redisstore: reap: unexpected reply %v", reply)
	}
	records, err1 := toInt(at(reply, 1))
	units, err2 := toInt(at(reply, 2))
	holds, err3 := toInt(at(reply, 3))
	list, ok := at(reply, 4).([]any)
	if err1 != nil || err2 != nil || err3 != nil || !ok || len(list)%2 != 0 {
		return reaped{}, nil, fmt.Errorf("redisstore: reap: unexpected reply %v", reply)
	}
	s.metrics.tombstonesWritten.WithLabelValues(string(reservation.StateExpired)).Add(float64(holds))
	var resolve [][2]string
	for i := 0; i < len(list); i += 2 {
		token, err1 := toString(list[i])
		stamp, err2 := toString(list[i+1])
		if err1 != nil || err2 != nil {
			return reaped{}, nil, fmt.Errorf("redisstore: reap: unexpected reply %v", reply)
		}
		resolve = append(resolve, [2]string{token, stamp})
	}
	return reaped{records: int(records), units: units}, resolve, nil
}

// dueShops returns the shops Redis decides whose earliest hold expires by
// nowMS. Members that are not shop ids are skipped.
func (s *Store) dueShops(ctx context.Context, page []string, nowMS int64) ([]int64, error) {
	var shops []int64
	for _, m := range page {
		if shop, err := strconv.ParseInt(m, 10, 64); err == nil && shop > 0 {
			shops = append(shops, shop)
		}
	}
	if len(shops) == 0 {
		return nil, nil
	}
	first := make([]*redis.ZSliceCmd, len(shops))
	fences := make([]*redis.StringCmd, len(shops))
	_, err := s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, shop := range shops {
			k := s.shopKeys(shop)
			first[i] = pipe.ZRangeWithScores(ctx, k.expiry(), 0, 0)
			fences[i] = pipe.Get(ctx, k.fence())
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redisstore: reap: peek expiry: %w", err)
	}
	var due []int64
	for i, c := range first {
		if err := c.Err(); err != nil {
			return nil, fmt.Errorf("redisstore: reap: peek expiry of shop %d: %w", shops[i], err)
		}
		z := c.Val()
		if len(z) == 0 || int64(z[0].Score) > nowMS {
			continue
		}
		if f, err := fences[i].Result(); err == nil {
			if fence, err := reservation.ParseFence(f); err == nil && fence.Decider != reservation.AuthorityRedis {
				continue // the script checks again; this only saves the listing
			}
		} else if !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("redisstore: reap: peek fence of shop %d: %w", shops[i], err)
		}
		due = append(due, shops[i])
	}
	return due, nil
}
