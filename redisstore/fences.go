package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/reservation"
)

// fencesPage is how many fences one pipeline of Fences reads.
const fencesPage = 1000

// Shops lists the shops this store knows (the reaper's set: every shop
// whose stock or holds Redis was ever given), in no order.
func (s *Store) Shops(ctx context.Context) ([]int64, error) {
	var out []int64
	var cursor uint64
	for {
		page, next, err := s.client.SScan(ctx, s.shopsKey(), cursor, "", shopsPage).Result()
		if err != nil {
			return nil, fmt.Errorf("redisstore: shops: %w", err)
		}
		for _, m := range page {
			if shop, err := strconv.ParseInt(m, 10, 64); err == nil && shop > 0 {
				out = append(out, shop)
			}
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

// Fences reads the fences of many shops, pipelined (a shop without one
// reads reservation.NoFence): what the handoff sweeper compares with the
// flags.
func (s *Store) Fences(ctx context.Context, shops []int64) (map[int64]reservation.Fence, error) {
	out := make(map[int64]reservation.Fence, len(shops))
	for start := 0; start < len(shops); start += fencesPage {
		page := shops[start:min(start+fencesPage, len(shops))]
		cmds := make([]*redis.StringCmd, len(page))
		_, err := s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i, shop := range page {
				cmds[i] = pipe.Get(ctx, s.shopKeys(shop).fence())
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("redisstore: fences: %w", err)
		}
		for i, shop := range page {
			v, err := cmds[i].Result()
			switch {
			case errors.Is(err, redis.Nil):
				out[shop] = reservation.NoFence
				continue
			case err != nil:
				return nil, fmt.Errorf("redisstore: fence of shop %d: %w", shop, err)
			}
			f, err := reservation.ParseFence(v)
			if err != nil {
				return nil, fmt.Errorf("redisstore: fence of shop %d: %w", shop, err)
			}
			out[shop] = f
		}
	}
	return out, nil
}
