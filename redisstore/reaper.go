package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/reservation"
)

// shopsPage is how many shops one SSCAN step and one peek pipeline cover.
const shopsPage = 200

// Reap returns expired holds, judged by the Redis server's clock, up to
// p.Limit hold records (one per allocation, as mysqlstore counts them).
//
// The shops set cannot share a script with shop keys on a cluster, so the
// reaper walks it in pages: it peeks at each shop's earliest expiry in one
// pipeline (against the time of one TIME call, only to skip shops with
// nothing due) and runs the reap script on the shops that have something
// due. The script re-reads the clock and pops holds atomically, so several
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
	for {
		page, next, err := s.client.SScan(ctx, s.shopsKey(), cursor, "", shopsPage).Result()
		if err != nil {
			return res, fmt.Errorf("redisstore: reap: list shops: %w", err)
		}
		due, err := s.dueShops(ctx, page, nowMS)
		if err != nil {
			return res, err
		}
		for _, k := range due {
			reply, err := s.run(ctx, "reap", scriptReap, []string{k.expiry()}, k.base, limit-res.Holds)
			if err != nil {
				return res, err
			}
			holds, err1 := toInt(at(reply, 0))
			units, err2 := toInt(at(reply, 1))
			if err1 != nil || err2 != nil {
				return res, fmt.Errorf("redisstore: reap: unexpected reply %v", reply)
			}
			res.Holds += int(holds)
			res.Units += units
			s.metrics.reapedHolds.Add(float64(holds))
			s.metrics.reapedUnits.Add(float64(units))
			if res.Holds >= limit {
				return res, nil
			}
		}
		if cursor = next; cursor == 0 {
			return res, nil
		}
	}
}

// dueShops returns the keys of the shops whose earliest hold expires by
// nowMS. Members that are not shop ids are skipped.
func (s *Store) dueShops(ctx context.Context, page []string, nowMS int64) ([]keys, error) {
	ks := make([]keys, 0, len(page))
	for _, m := range page {
		if shop, err := strconv.ParseInt(m, 10, 64); err == nil && shop > 0 {
			ks = append(ks, s.shopKeys(shop))
		}
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
	var due []keys
	for i, c := range cmds {
		if z := c.Val(); len(z) > 0 && int64(z[0].Score) <= nowMS {
			due = append(due, ks[i])
		}
	}
	return due, nil
}
