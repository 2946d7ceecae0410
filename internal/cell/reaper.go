package cell

import (
	"context"
	"sync"
	"time"

	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
)

// reaper returns expired holds in every pod's two stores, every interval.
// Each store judges expiry by its own clock and returns each hold once
// however many replicas reap at the same time, so every replica may run
// one. A pod whose kill switch is redis_only is not reaped in MySQL:
// that switch means MySQL reservation tables must not be touched.
//
// Each tick it also makes Redis follow the ledger's recent claims
// (redisstore.Store.FollowClaims), except on a pod in mysql_only, where
// Redis is not kept.
type reaper struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// warned is when a failure of each pod's store was last logged, so a
	// pod that is down logs once a minute, not once a tick. Only the
	// reaper's goroutine touches it (as followed).
	warned map[string]time.Time
	// followed is, per pod, the newest claim the follower has checked.
	followed map[string]time.Time
	// ticks counts the reaper's ticks (for the deep follow).
	ticks int
}

const (
	// followOverlap is checked again on every tick: a claim's time is
	// when its statement ran, and its transaction may commit later.
	followOverlap = 5 * time.Second
	// Every followDeepEvery ticks the overlap is followDeepOverlap, for a
	// claim whose transaction committed later than followOverlap (lock
	// waits, a slow fsync).
	followDeepEvery   = 60
	followDeepOverlap = 2 * time.Minute
	// followRounds bounds the follow calls per pod per tick.
	followRounds = 5
)

// reapRounds bounds the reap calls per store per tick, so that one tick
// after a long pause cannot run for ever; the next tick goes on.
const reapRounds = 20

func startReaper(c *Cell, every time.Duration) *reaper {
	ctx, cancel := context.WithCancel(context.Background())
	r := &reaper{cancel: cancel, warned: map[string]time.Time{}, followed: map[string]time.Time{}}
	r.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				r.ticks++
				for _, p := range c.pods {
					c.reapPod(ctx, r, p, every)
					c.followClaims(ctx, r, p, every)
				}
			}
		}
	})
	return r
}

func (r *reaper) stop() {
	r.cancel()
	r.wg.Wait()
}

// warn logs a failure of a pod's store at most once a minute.
func (c *Cell) warn(ctx context.Context, r *reaper, key, msg string, args ...any) {
	if ctx.Err() == nil && time.Since(r.warned[key]) > time.Minute {
		r.warned[key] = time.Now()
		c.log.Warn(msg, args...)
	}
}

// followClaims runs a pod's claim follower from where it stopped (at
// first, redisstore.FollowWindow ago). Under mysql_only Redis is not kept:
// the follower stops and forgets where it was, and starts over when the
// pod leaves that mode (whose runbook resyncs Redis, which marks the
// claims of the window).
func (c *Cell) followClaims(ctx context.Context, r *reaper, p *Pod, budget time.Duration) {
	if d, err := c.Flags.Decide(ctx, p.Name, 0); err == nil && d.Mode == rollout.ModeMySQLOnly {
		delete(r.followed, p.Name)
		return
	}
	since, ok := r.followed[p.Name]
	if !ok {
		since = time.Now().Add(-redisstore.FollowWindow)
	}
	overlap := followOverlap
	if r.ticks%followDeepEvery == 0 {
		overlap = followDeepOverlap
	}
	fctx, cancel := context.WithTimeout(ctx, max(budget, time.Second))
	defer cancel()
	// The overlap is read again once per tick; further rounds of the same
	// tick go on from the newest claim seen.
	from := since.Add(-overlap)
	for range followRounds {
		res, err := p.Redis.FollowClaims(fctx, &redisstore.FollowParams{Since: from})
		if err != nil {
			c.warn(ctx, r, p.Name+"/follow", "cell: claim follower failed; the next tick retries", "pod", p.Name, "err", err)
			return
		}
		if res.Settled > 0 {
			c.log.Warn("cell: settled claims whose Redis half was lost", "pod", p.Name, "claims", res.Settled)
		}
		if res.Last.After(since) {
			since = res.Last
		}
		r.followed[p.Name] = since
		if res.Checked < redisstore.DefaultFollowLimit || !res.Last.After(from) {
			return
		}
		from = res.Last
	}
}

func (c *Cell) reapPod(ctx context.Context, r *reaper, p *Pod, budget time.Duration) {
	stores := []reservation.Store{p.Redis}
	if d, err := c.Flags.Decide(ctx, p.Name, 0); err != nil || d.Kill != rollout.KillRedisOnly {
		stores = append(stores, p.MySQL)
	}
	for _, s := range stores {
		rctx, cancel := context.WithTimeout(ctx, max(budget, time.Second))
		for range reapRounds {
			res, err := s.Reap(rctx, &reservation.ReapParams{})
			if err != nil {
				c.warn(ctx, r, p.Name+"/"+string(s.Name()), "cell: reap failed; the next tick retries", "pod", p.Name, "store", s.Name(), "err", err)
				break
			}
			if res.Holds == 0 {
				break
			}
			c.log.Debug("cell: reaped expired holds", "pod", p.Name, "store", s.Name(), "holds", res.Holds, "units", res.Units)
		}
		cancel()
	}
}
