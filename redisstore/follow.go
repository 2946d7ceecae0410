package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/reservation"
)

// FollowParams are the arguments of FollowClaims.
type FollowParams struct {
	// Since: claims the ledger recorded at or after it are checked.
	Since time.Time
	// Lag leaves out claims younger than it (ledger clock): their own
	// Redis half is most likely on its way. Default: 1s.
	Lag time.Duration
	// Limit bounds the claims one call checks. Default:
	// DefaultFollowLimit.
	Limit int
}

// FollowResult is what FollowClaims did.
type FollowResult struct {
	// Checked claims; Settled of them had lost their Redis half.
	Checked, Settled int
	// Last is the time of the newest claim checked (zero when none): the
	// caller's next Since, less an overlap for claims committed late.
	Last time.Time
}

// DefaultFollowLimit is FollowParams.Limit's default.
const DefaultFollowLimit = 2000

// FollowWindow is as far back as FollowClaims looks: an earlier Since is
// moved up to it. Resync marks every claim within it (and followMargin),
// which is what lets FollowClaims trust a missing marker.
const FollowWindow = 10 * time.Minute

// followMargin covers clocks: the ledger's claimed_at against this
// process's time.
const followMargin = 5 * time.Minute

// FollowClaims makes Redis follow the ledger's recent claims: every claim
// whose claimed marker is missing here lost its Redis half (the shadow
// settle in mysql mode, or the legacy claim's cleanup, failed), and is
// settled now, exactly as that half would have done.
//
// The reaper covers a lost half whose hold is still here (when the hold
// expires); this covers the other case, a claim whose reservation Redis
// never held (its shadow reserve failed too, say during a Redis outage).
// There the deduction never reached Redis's quantities, which would offer
// the claimed units to the next buyer after a kill switch.
//
// Settling is idempotent on the marker, so a claim whose own half lands
// at the same time is settled once, and checking a claim twice (an
// overlap between calls) costs one EXISTS. Run it only where Redis is
// kept up to date: not under mysql_only, where Redis is not written.
func (s *Store) FollowClaims(ctx context.Context, p *FollowParams) (FollowResult, error) {
	if s.cfg.Source == nil {
		return FollowResult{}, ErrNoSource
	}
	lag, limit := p.Lag, p.Limit
	if lag == 0 {
		lag = time.Second
	}
	if limit == 0 {
		limit = DefaultFollowLimit
	}
	if lag < 0 || limit < 0 || limit > 100000 {
		return FollowResult{}, &reservation.ValidationError{Field: "lag, limit", Reason: fmt.Sprintf("want lag >= 0 and limit in 1..100000, got %s and %d", lag, limit)}
	}
	since := p.Since
	if earliest := time.Now().Add(-FollowWindow); since.Before(earliest) {
		since = earliest
	}
	claims, err := s.cfg.Source.ClaimsSince(ctx, 0, since, lag, limit)
	if err != nil {
		return FollowResult{}, fmt.Errorf("redisstore: follow claims: %w", err)
	}
	res := FollowResult{Checked: len(claims)}
	if len(claims) == 0 {
		return res, nil
	}
	res.Last = claims[len(claims)-1].At
	cmds := make([]*redis.IntCmd, len(claims))
	_, err = s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, c := range claims {
			cmds[i] = pipe.Exists(ctx, s.shopKeys(c.Shop).claimed(c.Token))
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("redisstore: follow claims: read markers: %w", err)
	}
	// A claim that cannot be settled now is tried again by the next call:
	// Last stops at the first such claim. The others go on.
	var errs []error
	failed := false
	for i, c := range claims {
		if cmds[i].Val() == 1 {
			continue
		}
		moved, err := s.settleLost(ctx, "follow_claims", c.Shop, c.Token, c.Allocations)
		if err != nil {
			errs = append(errs, err)
			if !failed {
				failed, res.Last = true, c.At
			}
			continue
		}
		if !moved {
			continue // its own half landed meanwhile
		}
		res.Settled++
		s.metrics.followSettled.Inc()
	}
	if len(errs) > 0 {
		return res, fmt.Errorf("redisstore: follow claims: %w", errors.Join(errs...))
	}
	return res, nil
}
