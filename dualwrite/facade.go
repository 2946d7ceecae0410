// Package dualwrite is the facade checkout calls during the migration: it
// routes every reservation operation to the authority and the shadow store
// as the mode says, returns the authority's answer, and hands both outcomes
// to the comparer.
//
// What it guarantees (DESIGN section 6):
//   - The authority's answer and error are the caller's. A shadow error,
//     timeout or panic never changes them.
//   - Shadow work is bounded: a fixed number of slots; when they are full the
//     shadow call is skipped and counted, never queued.
//   - In shadow mode the caller never waits for the shadow; in mysql mode
//     the call waits for Redis too (up to the shadow deadline), so Redis
//     keeps a complete view and the kill switch stays lossless.
//   - Claim and release go to the store that was the authority for that
//     reservation (recorded on its hold), unless the kill switch says Redis.
//     That store claims (deducts the ledger, exactly once thanks to the
//     claims row); the other settles (removes its own hold).
//
// The facade never builds SQL or Redis commands; it only calls the
// reservation.Store seam.
package dualwrite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
)

// Observer receives one observation per dual-written call. *compare.Comparer
// implements it. Observe must not block for long.
type Observer interface {
	Observe(o compare.Observation)
}

// Config configures a Facade. New applies WithDefaults, then Validate.
type Config struct {
	// Pod names the cell whose stores these are. Required.
	Pod string
	// Redis is the legacy store. Required.
	Redis reservation.Store
	// MySQL is the unit-pool store. Required.
	MySQL reservation.Store
	// Modes answers the mode and kill switch per call. Required.
	Modes rollout.ModeSource
	// Observer receives the observations. Default: none (not compared).
	Observer Observer
	// ShadowTimeout is the shadow's own deadline, and the most a call in
	// mysql mode waits for it. Default: 250ms.
	ShadowTimeout time.Duration
	// ShadowSlots bounds concurrent shadow calls; beyond it shadow calls are
	// skipped (and counted). Default: 64.
	ShadowSlots int
	// Registerer receives the facade's metrics. Default: a private registry.
	Registerer prometheus.Registerer
	// Logger logs decisions that fell back to the Redis-safe default.
	// Default: slog.Default().
	Logger *slog.Logger
	// Calibration marks a facade whose two slots hold two instances of the
	// same kind of store (e.g. two Redis key prefixes fed the same traffic):
	// Twitter Diffy's trick for measuring the noise floor. Its observations
	// carry mode "calibration_<mode>", which the comparer keeps apart so
	// gates can subtract it. Default: false.
	Calibration bool
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.ShadowTimeout == 0 {
		c.ShadowTimeout = 250 * time.Millisecond
	}
	if c.ShadowSlots == 0 {
		c.ShadowSlots = 64
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports a missing or impossible setting, naming the field.
func (c Config) Validate() error {
	switch {
	case c.Pod == "":
		return errors.New("dualwrite: Config.Pod is required")
	case c.Redis == nil:
		return errors.New("dualwrite: Config.Redis is required")
	case c.MySQL == nil:
		return errors.New("dualwrite: Config.MySQL is required")
	case c.Modes == nil:
		return errors.New("dualwrite: Config.Modes is required")
	case c.ShadowTimeout <= 0:
		return fmt.Errorf("dualwrite: Config.ShadowTimeout must be > 0, got %s", c.ShadowTimeout)
	case c.ShadowSlots < 1:
		return fmt.Errorf("dualwrite: Config.ShadowSlots must be >= 1, got %d", c.ShadowSlots)
	}
	return nil
}

// Facade routes reservation calls to the authority and the shadow. It is
// safe for concurrent use.
type Facade struct {
	cfg     Config
	slots   chan struct{}
	wg      sync.WaitGroup
	metrics *metrics
	order   tokenOrder
	// lastFallbackLog rate-limits the fallback warning (unix nanoseconds):
	// a broken flag file must not flood the logs on the hot path.
	lastFallbackLog atomic.Int64
}

// New returns a facade.
func New(cfg Config) (*Facade, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer, cfg.Pod)
	if err != nil {
		return nil, fmt.Errorf("dualwrite: register metrics: %w", err)
	}
	return &Facade{cfg: cfg, slots: make(chan struct{}, cfg.ShadowSlots), metrics: m,
		order: tokenOrder{last: map[tokenKey]chan struct{}{}}}, nil
}

// Pod returns the facade's pod.
func (f *Facade) Pod() string { return f.cfg.Pod }

func (f *Facade) store(a reservation.Authority) reservation.Store {
	if a == reservation.AuthorityMySQL {
		return f.cfg.MySQL
	}
	return f.cfg.Redis
}

func other(a reservation.Authority) reservation.Authority {
	if a == reservation.AuthorityMySQL {
		return reservation.AuthorityRedis
	}
	return reservation.AuthorityMySQL
}

// decide evaluates the mode once for the call. A failing source falls back
// to the Redis-safe decision: the code default must never be the risky one.
func (f *Facade) decide(ctx context.Context, shop int64) (rollout.Decision, rollout.Route) {
	d, err := f.cfg.Modes.Decide(ctx, f.cfg.Pod, shop)
	if err != nil || !d.Mode.Valid() || !d.Kill.Valid() {
		f.metrics.modeFallbacks.Inc()
		now, last := time.Now().UnixNano(), f.lastFallbackLog.Load()
		if now-last >= int64(time.Second) && f.lastFallbackLog.CompareAndSwap(last, now) {
			f.cfg.Logger.Warn("dualwrite: mode source failed; using redis (logged at most once a second; see reservoir_dualwrite_mode_fallbacks_total)",
				"pod", f.cfg.Pod, "shop", shop, "decision", d, "err", err)
		}
		d = rollout.RedisSafe
	}
	return d, d.Route()
}

// Close waits, up to ctx, for shadow calls in flight to finish.
func (f *Facade) Close(ctx context.Context) error {
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("dualwrite: %d shadow calls still running: %w", len(f.slots), ctx.Err())
	}
}
