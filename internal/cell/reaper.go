package cell

import (
	"context"
	"sync"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// reaper expires held reservations in every pod's two stores, every
// interval. Each store judges expiry by its own clock, expires only what
// it decides (and MySQL its own shadow holds), and expires each hold once
// however many replicas reap at the same time, so every replica may run
// one. A pod whose kill switch is redis_only is not reaped in MySQL:
// that switch means MySQL reservation tables must not be touched.
type reaper struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// warned is when a failure of each pod's store was last logged, so a
	// pod that is down logs once a minute, not once a tick. Only the
	// reaper's goroutine touches it.
	warned map[string]time.Time
}

// reapRounds bounds the reap calls per store per tick, so that one tick
// after a long pause cannot run for ever; the next tick goes on.
const reapRounds = 20

func startReaper(c *Cell, every time.Duration) *reaper {
	ctx, cancel := context.WithCancel(context.Background())
	r := &reaper{cancel: cancel, warned: map[string]time.Time{}}
	r.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				for _, p := range c.pods {
					c.reapPod(ctx, r, p, every)
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

func (c *Cell) reapPod(ctx context.Context, r *reaper, p *Pod, budget time.Duration) {
	stores := []reservation.Store{p.Redis}
	if d, err := c.Flags.Decide(ctx, p.Name, 0); err != nil || d.Kill != authority.KillRedisOnly {
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
