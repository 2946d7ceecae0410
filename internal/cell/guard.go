package cell

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/internal/breaker"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// A pod's stores are guarded by a circuit breaker each (package breaker):
// the facade's calls and the legacy claim's ledger calls go through them,
// and the cell's health loop pings every store and opens a breaker whose
// store does not answer. A failing store then costs its pod's callers a
// fast refusal (the server answers 503 store_unavailable), and costs the
// other pods nothing.

// Breakers are one pod's two circuit breakers.
type Breakers struct {
	// MySQL guards the pod's MySQL: the unit-pool store and the ledger
	// (the legacy claim's deduction, adjusts of stock).
	MySQL *breaker.Breaker
	// Redis guards the pod's Redis.
	Redis *breaker.Breaker
}

// breakerMetrics are the breakers' series, shared by every pod.
type breakerMetrics struct {
	opened *prometheus.CounterVec
	open   *prometheus.GaugeVec
}

// BreakerOpenMetric is the gauge that is 1 while a pod's store's breaker
// refuses calls (open or half-open), labelled reservoir_pod and store.
const BreakerOpenMetric = "reservoir_store_breaker_open"

func newBreakerMetrics(reg prometheus.Registerer) (*breakerMetrics, error) {
	m := &breakerMetrics{
		opened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reservoir_store_breaker_opened_total",
			Help: "Times a pod's store's circuit breaker opened (consecutive failed calls, or a failed health check), by pod and store.",
		}, []string{"reservoir_pod", "store"}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: BreakerOpenMetric,
			Help: "1 while a pod's store's circuit breaker refuses calls (open, or half-open with its probe in flight): " +
				"the pod's calls that need that store answer 503 store_unavailable at once; by pod and store.",
		}, []string{"reservoir_pod", "store"}),
	}
	for _, c := range []prometheus.Collector{m.opened, m.open} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// newBreakers builds a pod's breakers, their changes logged and counted.
func (c *Cell) newBreakers(pod string, m *breakerMetrics) (Breakers, error) {
	build := func(store string) (*breaker.Breaker, error) {
		m.open.WithLabelValues(pod, store).Set(0)
		m.opened.WithLabelValues(pod, store)
		var b *breaker.Breaker // set before any change can be reported
		b, err := breaker.New(breaker.Config{
			Name:     fmt.Sprintf("pod %s's %s", pod, store),
			Failures: c.cfg.BreakerFailures,
			OpenFor:  c.cfg.BreakerOpenFor,
			OnChange: func(from, to breaker.State, why string) {
				open := 0.0
				if now, _ := b.State(); now != breaker.Closed {
					open = 1
				}
				m.open.WithLabelValues(pod, store).Set(open)
				level := slog.LevelWarn
				switch to {
				case breaker.Open:
					if from == breaker.Closed {
						m.opened.WithLabelValues(pod, store).Inc()
					}
					level = slog.LevelError
				case breaker.Closed:
					level = slog.LevelInfo
				}
				c.log.Log(context.Background(), level, "cell: store breaker "+to.String(), "pod", pod, "store", store, "from", from.String(), "why", why)
			},
		})
		return b, err
	}
	var bs Breakers
	var err error
	if bs.MySQL, err = build("mysql"); err != nil {
		return bs, err
	}
	bs.Redis, err = build("redis")
	return bs, err
}

// storeFailed says whether a store call's error counts against its
// breaker: a failure of the store (a timeout, a lost connection, a server
// error), not an answer (not found, insufficient stock, a store that does
// not decide the shop, contention), not a refusal by a breaker, not a
// caller that gave up, and not the ledger's failure seen through Redis
// (it counts against MySQL's breaker).
func storeFailed(err error) bool {
	var lf *ledgerFailure
	switch {
	case err == nil,
		reservation.AnswerName(err) != "",
		errors.Is(err, reservation.ErrNotDecider),
		errors.Is(err, reservation.ErrContention),
		errors.Is(err, reservation.ErrClaimInProgress),
		errors.Is(err, breaker.ErrOpen),
		errors.Is(err, context.Canceled),
		errors.As(err, &lf):
		return false
	}
	return true
}

// guard runs call through b: refused at once while b is open, its outcome
// counted otherwise.
func guard[T any](b *breaker.Breaker, call func() (T, error)) (T, error) {
	done, err := b.Allow()
	if err != nil {
		var zero T
		return zero, err
	}
	r, err := call()
	done(storeFailed(err))
	return r, err
}

// guardedStore is a reservation.Store whose calls go through a breaker.
type guardedStore struct {
	reservation.Store
	b *breaker.Breaker
}

var _ reservation.Store = (*guardedStore)(nil)

// Reserve guards the wrapped store's Reserve.
func (s *guardedStore) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	return guard(s.b, func() (reservation.ReserveResult, error) { return s.Store.Reserve(ctx, p) })
}

// Claim guards the wrapped store's Claim.
func (s *guardedStore) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	return guard(s.b, func() (reservation.ClaimResult, error) { return s.Store.Claim(ctx, p) })
}

// Release guards the wrapped store's Release.
func (s *guardedStore) Release(ctx context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	return guard(s.b, func() (reservation.ReleaseResult, error) { return s.Store.Release(ctx, p) })
}

// Get guards the wrapped store's Get.
func (s *guardedStore) Get(ctx context.Context, p *reservation.GetParams) (reservation.Hold, error) {
	return guard(s.b, func() (reservation.Hold, error) { return s.Store.Get(ctx, p) })
}

// Adjust guards the wrapped store's Adjust.
func (s *guardedStore) Adjust(ctx context.Context, p *reservation.AdjustParams) (reservation.AdjustResult, error) {
	return guard(s.b, func() (reservation.AdjustResult, error) { return s.Store.Adjust(ctx, p) })
}

// Availability guards the wrapped store's Availability.
func (s *guardedStore) Availability(ctx context.Context, p *reservation.AvailabilityParams) (reservation.AvailabilityResult, error) {
	return guard(s.b, func() (reservation.AvailabilityResult, error) { return s.Store.Availability(ctx, p) })
}

// ledgerFailure marks an error of the guarded ledger, so that the Redis
// store's breaker, which sees it inside a legacy claim's error, does not
// count it: it is MySQL's, and MySQL's breaker counted it.
type ledgerFailure struct{ err error }

func (e *ledgerFailure) Error() string { return e.err.Error() }
func (e *ledgerFailure) Unwrap() error { return e.err }

// guardedLedger is a reservation.Ledger whose calls go through MySQL's
// breaker: a legacy claim in a pod whose MySQL is failing is refused
// before Redis marks anything, instead of waiting for its deadline.
type guardedLedger struct {
	l reservation.Ledger
	b *breaker.Breaker
}

var _ reservation.Ledger = (*guardedLedger)(nil)

// mark wraps a failed ledger call's error (answers are left as they are).
func mark[T any](r T, err error) (T, error) {
	if err != nil {
		err = &ledgerFailure{err: err}
	}
	return r, err
}

// Deduct guards the ledger's Deduct.
func (g *guardedLedger) Deduct(ctx context.Context, p *reservation.DeductParams) (reservation.DeductResult, error) {
	return mark(guard(g.b, func() (reservation.DeductResult, error) { return g.l.Deduct(ctx, p) }))
}

// AdjustStock guards the ledger's AdjustStock.
func (g *guardedLedger) AdjustStock(ctx context.Context, p *reservation.AdjustParams) (reservation.AdjustResult, error) {
	return mark(guard(g.b, func() (reservation.AdjustResult, error) { return g.l.AdjustStock(ctx, p) }))
}

// Stock guards the ledger's Stock.
func (g *guardedLedger) Stock(ctx context.Context, p *reservation.StockParams) ([]reservation.StockLevel, error) {
	return mark(guard(g.b, func() ([]reservation.StockLevel, error) { return g.l.Stock(ctx, p) }))
}

// guardedSource is the Redis store's view of MySQL's holds and claims
// (redisstore.Config.Source) through MySQL's breaker, its failures marked
// as the ledger's. A Redis call that finds a hold a legacy claim marked
// asks the ledger whether the claim happened (redisstore's finishClaimed):
// while MySQL fails, that call is refused at once rather than waiting for
// its deadline, and its failure counts against MySQL's breaker, not
// against Redis's, which stays closed for the pod's other calls (under the
// kill switch redis_only Redis is the pod's only store).
type guardedSource struct {
	s redisstore.Source
	b *breaker.Breaker
}

var _ redisstore.Source = (*guardedSource)(nil)

// Holds guards the source's Holds.
func (g *guardedSource) Holds(ctx context.Context, shop int64) ([]reservation.Hold, error) {
	return mark(guard(g.b, func() ([]reservation.Hold, error) { return g.s.Holds(ctx, shop) }))
}

// Claims guards the source's Claims.
func (g *guardedSource) Claims(ctx context.Context, shop int64, tokens []string) (map[string][]reservation.Allocation, error) {
	return mark(guard(g.b, func() (map[string][]reservation.Allocation, error) { return g.s.Claims(ctx, shop, tokens) }))
}

// healthLoop pings every store each interval (within the interval) and
// moves the breakers: a store that did not answer opens its breaker, one
// that answered lets an open breaker probe. The last round is what
// Health reports.
func (c *Cell) healthLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, every)
		hs := c.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		for _, h := range hs[1:] {
			p := c.byName[h.Pod]
			c.move(p.Name, "mysql", p.Breakers.MySQL, h.MySQLErr)
			c.move(p.Name, "redis", p.Breakers.Redis, h.RedisErr)
		}
		c.healthMu.Lock()
		c.lastHealth, c.lastHealthAt = hs, time.Now()
		c.healthMu.Unlock()
		c.degraded(hs)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// move moves a store's breaker by its ping: a failure opens it (logged
// with the driver's error when the breaker was closed, once per outage),
// an answer lets an open one probe.
func (c *Cell) move(pod, store string, b *breaker.Breaker, pingErr error) {
	if pingErr == nil {
		b.Healthy()
		return
	}
	if st, _ := b.State(); st == breaker.Closed {
		c.log.Warn("cell: a store failed its health check", "pod", pod, "store", store, "err", pingErr)
	}
	b.Unhealthy("its ping failed") // the error names hosts: /readyz shows this reason to anyone
}

// DegradedMetric is the gauge that is 1 while a pod is degraded: one of
// its stores failed the last health check or its breaker refuses calls.
const DegradedMetric = "reservoir_pod_degraded"

// degraded sets the degraded gauge of every pod from a health round and
// the breakers.
func (c *Cell) degraded(hs []Health) {
	for _, h := range hs[1:] {
		v := 0.0
		if len(c.Degraded(h)) > 0 {
			v = 1
		}
		c.degradedGauge.WithLabelValues(h.Pod).Set(v)
	}
}

// Degraded lists why a pod (a Health of one round) is degraded, one
// reason per store: its ping failed, or its breaker refuses calls. None
// when it is healthy. The control database's Health is never degraded
// here (it has no breaker; a failed ping is its own reason).
func (c *Cell) Degraded(h Health) []string {
	p := c.byName[h.Pod]
	if p == nil {
		return nil
	}
	var why []string
	for _, s := range []struct {
		name string
		err  error
		b    *breaker.Breaker
	}{{"mysql", h.MySQLErr, p.Breakers.MySQL}, {"redis", h.RedisErr, p.Breakers.Redis}} {
		switch st, reason := s.b.State(); {
		case s.err != nil:
			why = append(why, s.name+" failed its ping")
		case st != breaker.Closed:
			why = append(why, s.name+" breaker "+st.String()+" ("+reason+")")
		}
	}
	return why
}

// Reachable pings a pod's store now, within a second (rollout.StoreChecker:
// the controller refuses to move a pod's shops to a store that does not
// answer). MySQL is not ready to decide either while shops Redis took by
// force still carry its old fence (mirror.ForcedPending). Its error names
// no host or user; the driver's is logged.
func (c *Cell) Reachable(ctx context.Context, pod string, store reservation.Authority) error {
	p := c.byName[pod]
	if p == nil {
		return fmt.Errorf("no pod %q in the topology", pod)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var err error
	switch store {
	case reservation.AuthorityMySQL:
		err = p.DB.PingContext(ctx)
	case reservation.AuthorityRedis:
		err = pingRedis(ctx, p.RedisClient)
	default:
		return fmt.Errorf("no store %q", store)
	}
	if err == nil && store == reservation.AuthorityMySQL {
		// MySQL answers; it may still hold a fence Redis overrode.
		n, ferr := p.Mirror.ForcedPending(ctx)
		switch {
		case ferr != nil:
			c.log.Warn("cell: the shops Redis took by force could not be read", "pod", pod, "err", ferr)
			return errors.New("MySQL answers, but the shops Redis took over without it could not be read from Redis; the replica's log has the error")
		case n > 0:
			return fmt.Errorf("MySQL answers, but %d shop(s) Redis took over while MySQL was down still have MySQL's old fence; "+
				"the handoff sweeper moves it off them within seconds of MySQL's return", n)
		}
	}
	if err == nil {
		return nil
	}
	c.log.Warn("cell: a store failed its check before a switch", "pod", pod, "store", string(store), "err", err)
	if errors.Is(err, context.DeadlineExceeded) {
		return errors.New("no answer to a ping within 1s")
	}
	return errors.New("its ping failed; the replica's log has the driver's error")
}
