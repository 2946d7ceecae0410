package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/reservation"
)

// A handoff to MySQL copies ahead (docs/ownership.md, section 3): while
// Redis keeps deciding the shop, its state is copied into MySQL, and the
// cut-over moves only what changed since. This file is Redis's side: a
// change log of the shop's holds and tombstones, on only while a copy is
// under way, and the reads the copy makes.

// copyTTL is how long a copy's log stays on without its copier reading
// it: a copier that died stops costing the shop's writes after it.
const copyTTL = 10 * time.Minute

// StartCopy turns on the shop's change log for a copy into MySQL, or joins
// the copy under way. From its return on, every change of a hold or a
// tombstone of the shop is logged until EndCopy, or until nobody has read
// the log for copyTTL. It refuses a shop Redis does not decide
// (*reservation.NotDeciderError): only the decider's state is copied.
func (s *Store) StartCopy(ctx context.Context, shop int64) (reservation.CopyLog, error) {
	if err := validShop("shop", shop); err != nil {
		return reservation.CopyLog{}, err
	}
	k := s.shopKeys(shop)
	reply, err := s.run(ctx, "copy_start", scriptCopyStart, []string{k.copy(), k.fence()}, k.base, copyTTL.Milliseconds())
	if err != nil {
		return reservation.CopyLog{}, err
	}
	if reply[0] == "fence" {
		return reservation.CopyLog{}, s.notDecider("copy", shop, at(reply, 1))
	}
	id, err1 := toInt(at(reply, 1))
	seq, err2 := toInt(at(reply, 2))
	size, err3 := toInt(at(reply, 3))
	if reply[0] != "copy" || err1 != nil || err2 != nil || err3 != nil {
		return reservation.CopyLog{}, fmt.Errorf("redisstore: start copy of shop %d: unexpected reply %v", shop, reply)
	}
	return reservation.CopyLog{ID: id, Seq: seq, Size: size}, nil
}

// Changed returns the tokens of the shop whose hold or tombstone changed
// after position after in copy id's log, in log order, at most limit, and
// the position it read up to (pass it as after next time). It renews the
// copy's lifetime. reservation.ErrCopyLost: the log is not the copy's
// any more (it lapsed, or another copy replaced it): the copy cannot know
// everything that changed since it started, and must start again (or the
// handoff copy the whole shop at the cut-over).
func (s *Store) Changed(ctx context.Context, shop, id, after int64, limit int) ([]string, int64, error) {
	if err := validShop("shop", shop); err != nil {
		return nil, 0, err
	}
	if limit < 1 {
		return nil, 0, &reservation.ValidationError{Field: "limit", Reason: fmt.Sprintf("must be positive, got %d", limit)}
	}
	k := s.shopKeys(shop)
	reply, err := s.run(ctx, "copy_changed", scriptCopyChanged, []string{k.copy()}, k.base, strconv.FormatInt(id, 10), after, limit, copyTTL.Milliseconds())
	if err != nil {
		return nil, 0, err
	}
	if reply[0] == "lost" {
		return nil, 0, fmt.Errorf("redisstore: shop %d copy %d: %w", shop, id, reservation.ErrCopyLost)
	}
	upto, err := toInt(at(reply, 1))
	if reply[0] != "changed" || err != nil {
		return nil, 0, fmt.Errorf("redisstore: changes of shop %d: unexpected reply %v", shop, reply)
	}
	tokens := make([]string, 0, len(reply)-2)
	for _, v := range reply[2:] {
		t, err := toString(v)
		if err != nil {
			return nil, 0, fmt.Errorf("redisstore: changes of shop %d: %w", shop, err)
		}
		tokens = append(tokens, t)
	}
	return tokens, upto, nil
}

// EndCopy turns copy id's change log off (a copy that ended, handed off
// or abandoned). Another copy's log is left alone.
func (s *Store) EndCopy(ctx context.Context, shop, id int64) error {
	if err := validShop("shop", shop); err != nil {
		return err
	}
	k := s.shopKeys(shop)
	_, err := s.run(ctx, "copy_end", scriptCopyEnd, []string{k.copy()}, k.base, strconv.FormatInt(id, 10))
	return err
}

// Tokens walks the tokens of a shop's holds and tombstones while the shop
// may change, handing each page to each: it walks the shop's two indexes
// with ZSCAN, which returns every member present for the whole walk (once
// or more: each must not mind a token twice), where pages by rank would
// skip a member whenever one before it leaves. A member added or removed
// during the walk may be missing: a copy reads those again from its
// change log (every such write logs its token while the copy is on).
// Pages come in no order; an error from each stops the walk.
func (s *Store) Tokens(ctx context.Context, shop int64, each func(page []string) error) error {
	if err := validShop("shop", shop); err != nil {
		return err
	}
	k := s.shopKeys(shop)
	for _, index := range []string{k.expiry(), k.tombs()} {
		var cursor uint64
		for {
			page, next, err := s.client.ZScan(ctx, index, cursor, "", snapshotPage).Result()
			if err != nil {
				return fmt.Errorf("redisstore: tokens of shop %d: %w", shop, err)
			}
			tokens := make([]string, 0, len(page)/2)
			for i := 0; i < len(page); i += 2 { // member, score, ...
				tokens = append(tokens, page[i])
			}
			if err := each(tokens); err != nil {
				return err
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// Records reads the current hold or tombstone of each of a shop's tokens,
// in pipelined pages: a partial snapshot (Snapshot.Tokens is tokens) that
// says, for each token, what Redis holds now; a token with neither a hold
// nor a tombstone has none. Like Snapshot, the pages agree with each other
// only while nothing of the shop changes; a copy reads the tokens that
// changed since again.
func (s *Store) Records(ctx context.Context, shop int64, tokens []string) (reservation.Snapshot, error) {
	if err := validShop("shop", shop); err != nil {
		return reservation.Snapshot{}, err
	}
	if tokens == nil {
		tokens = []string{} // partial, of no token
	}
	snap := reservation.Snapshot{Shop: shop, Tokens: tokens}
	k := s.shopKeys(shop)
	for start := 0; start < len(tokens); start += snapshotPage {
		page := tokens[start:min(start+snapshotPage, len(tokens))]
		holds := make([]*redis.MapStringStringCmd, len(page))
		tombs := make([]*redis.StringCmd, len(page))
		_, err := s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i, t := range page {
				holds[i] = pipe.HGetAll(ctx, k.hold(t))
				tombs[i] = pipe.Get(ctx, k.tomb(t))
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return reservation.Snapshot{}, fmt.Errorf("redisstore: records of shop %d: %w", shop, err)
		}
		for i, t := range page {
			m, err := holds[i].Result()
			if err != nil {
				return reservation.Snapshot{}, fmt.Errorf("redisstore: records of shop %d: hold %q: %w", shop, t, err)
			}
			if len(m) > 0 {
				h, err := parseHoldMap(m)
				if err != nil {
					return reservation.Snapshot{}, fmt.Errorf("redisstore: records of shop %d: token %q: %w", shop, t, err)
				}
				snap.Holds = append(snap.Holds, h.hold(shop, t))
				continue
			}
			v, err := tombs[i].Result()
			if errors.Is(err, redis.Nil) {
				continue // neither: nothing held
			}
			if err != nil {
				return reservation.Snapshot{}, fmt.Errorf("redisstore: records of shop %d: tombstone %q: %w", shop, t, err)
			}
			tomb, err := decodeTomb(t, v)
			if err != nil {
				return reservation.Snapshot{}, err
			}
			snap.Tombstones = append(snap.Tombstones, tomb)
		}
	}
	return snap, nil
}
