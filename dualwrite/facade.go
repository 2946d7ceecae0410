// Package dualwrite is the facade checkout calls during the migration: it
// sends every reservation operation to the store that decides the shop,
// returns that store's answer, and, while the rollout compares the two
// stores, asks the other store what it would have done and hands both
// outcomes to the comparer.
//
// Which store decides is settled by the stores themselves (their fences;
// docs/ownership.md): the facade asks the store its flags name; a store
// that does not decide the shop refuses with *reservation.NotDeciderError,
// and the facade then either follows the fence (its flags are older than
// the fence) or hands the shop off (its flags are newer) through the
// Mirror, and asks again. No path asks "whichever store has it": every
// answer comes from the decider, and a decider that cannot be reached
// means an error whose outcome is unknown (the API's 503).
//
// What it guarantees:
//   - The decider's answer and error are the caller's. A shadow error,
//     timeout or panic never changes them, nor their latency: shadow calls
//     run concurrently, in a bounded number of slots; when the slots are
//     full the comparison is skipped and counted.
//   - A replica that cannot read its flags answers ErrFlagsUnavailable and
//     touches no store.
//   - While MySQL decides, Redis follows through MySQL's change feed (the
//     relay, package mirror); the facade only wakes the relay.
//
// The facade never builds SQL or Redis commands; it only calls the
// reservation.Store seam and the Mirror.
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
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// Observer receives one observation per dual-written call. *compare.Comparer
// implements it. Observe must not block for long.
type Observer = compare.Observer

// TrafficCounter counts every call a facade takes, in every mode: the
// Observer sees only the compared ones, and nothing is compared in redis
// or mysql_only mode. *compare.Comparer implements it. Served must not
// block for long.
type TrafficCounter interface {
	Served(pod, mode string, op compare.Op)
}

// Mirror moves a shop's decisions between the stores and keeps Redis
// following MySQL. *mirror.Mirror implements it.
type Mirror interface {
	// Handoff makes store to the decider of shop at epoch (the flags
	// version that says so) and returns the fence after, which may name
	// the other store: a newer handoff overtook this one, or the handoff
	// is still under way while the old decider keeps deciding (a handoff
	// to MySQL copies Redis's state ahead, in the background); the caller
	// asks the store it names. force allows
	// Redis to take the shop without MySQL when MySQL does not answer
	// (the kill switch redis_only). An error means the handoff did not
	// finish: nothing was decided, the outcome of the call is unknown.
	Handoff(ctx context.Context, shop int64, to reservation.Authority, epoch int64, force bool) (reservation.Fence, error)
	// Push tells the relay MySQL recorded a change; it never blocks.
	Push()
	// Flush delivers the shop's pending changes to Redis now.
	Flush(ctx context.Context, shop int64) error
	// Evaluates reports whether the relay compares the reserves MySQL
	// decides (ReserveParams.Compare): it asks Redis about each cart as
	// it applies MySQL's decision and observes the pair. When false the
	// facade asks Redis itself, beside the decision.
	Evaluates() bool
	// Following returns the fence of the store that decides shop while
	// a handoff of it to MySQL copies ahead (Redis's), when one is known
	// to be under way, until its cut-over begins: the facade asks that
	// store at once instead of asking MySQL first to be refused. A hint:
	// a store that does not decide still refuses, and the call goes on
	// by the fences.
	Following(shop int64) (reservation.Fence, bool)
}

// ErrFlagsUnavailable is returned, touching no store, when the replica
// cannot read its flags: it never guesses which store decides. Not a
// domain answer: retry (the API's 503).
var ErrFlagsUnavailable = errors.New("dualwrite: the flags cannot be read: this replica serves no reservation until they can")

// ErrDeciderUnreachable is wrapped by the error of a call whose shop's
// deciding store could not be settled or reached: a handoff did not
// finish, or the stores kept naming each other. Nothing was decided by
// this call beyond what the error says; the outcome is unknown: retry.
var ErrDeciderUnreachable = errors.New("dualwrite: the shop's deciding store could not be reached")

// Config configures a Facade. New applies WithDefaults, then Validate.
type Config struct {
	// Pod names the cell whose stores these are. Required.
	Pod string
	// Redis is the legacy store. Required.
	Redis reservation.Store
	// MySQL is the unit-pool store. Required.
	MySQL reservation.Store
	// Modes answers the mode and kill switch per call. Required.
	Modes authority.ModeSource
	// Mirror hands shops off between the stores and wakes the relay.
	// Required.
	Mirror Mirror
	// Observer receives the observations. Default: none (not compared).
	Observer Observer
	// Traffic counts the reserves, claims, releases and adjusts the facade
	// takes (those whose flags it could read), in every mode, with the
	// effective mode: the pod's traffic (`reservoir rollout order-pods`).
	// Default: none.
	Traffic TrafficCounter
	// ShadowTimeout is a shadow call's own deadline. Default: 250ms.
	ShadowTimeout time.Duration
	// ShadowSlots bounds concurrent shadow calls; beyond it shadow calls are
	// skipped (and counted). Default: 64.
	ShadowSlots int
	// Registerer receives the facade's metrics. Default: a private registry.
	Registerer prometheus.Registerer
	// Logger logs flags that cannot be read and handoffs that fail.
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
	case c.Mirror == nil:
		return errors.New("dualwrite: Config.Mirror is required (package mirror)")
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
	// switched remembers when each shop's route last changed, for the
	// observations (compare.Observation.Switched).
	switched switches
	// lastWarn rate-limits the warnings of the hot path (unix
	// nanoseconds): broken flags must not flood the logs.
	lastWarn atomic.Int64
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

// decide evaluates the flags once for the call. Flags that cannot be
// read (or answer something unknown) are an error: the replica is in doubt
// and must not act as if Redis decided (other replicas may treat the shop
// as MySQL's).
func (f *Facade) decide(ctx context.Context, shop int64) (authority.Decision, authority.Route, error) {
	d, rt, err := f.evaluate(ctx, shop)
	if err != nil {
		return authority.Decision{}, authority.Route{}, err
	}
	f.switched.note(shop, rt, time.Now())
	return d, rt, nil
}

// evaluate is decide without noting the route for the comparer: what the
// flags say, and nothing else.
func (f *Facade) evaluate(ctx context.Context, shop int64) (authority.Decision, authority.Route, error) {
	d, err := f.cfg.Modes.Decide(ctx, f.cfg.Pod, shop)
	if err == nil && (!d.Mode.Valid() || !d.Kill.Valid()) {
		err = fmt.Errorf("dualwrite: the flags answered mode %q, kill switch %q", d.Mode, d.Kill)
	}
	if err != nil {
		f.metrics.flagsUnavailable.Inc()
		f.warn("dualwrite: flags unavailable; answering 503 (logged at most once a second; see reservoir_dualwrite_flags_unavailable_total)",
			"pod", f.cfg.Pod, "shop", shop, "err", err)
		return authority.Decision{}, authority.Route{}, fmt.Errorf("%w: %w", ErrFlagsUnavailable, err)
	}
	return d, d.Route(), nil
}

// Wanted says which store the flags want deciding shop, at which epoch
// (the flags' version), and whether a handoff to Redis may be forced (the
// kill switch redis_only): what a call on the shop would hand it off to.
// It is mirror.Wanted, for the pod's handoff sweeper, which hands shops
// off when the flags change rather than when a call arrives. An error
// wraps ErrFlagsUnavailable.
func (f *Facade) Wanted(ctx context.Context, shop int64) (reservation.Authority, int64, bool, error) {
	// evaluate, not decide: the sweeper's look at every shop is not a
	// call on it, and must not mark its route as switched for the
	// comparer.
	d, rt, err := f.evaluate(ctx, shop)
	if err != nil {
		return "", 0, false, err
	}
	return rt.Authority, d.Version, d.Kill == authority.KillRedisOnly, nil
}

// served counts a call the facade took, with its effective mode.
func (f *Facade) served(plan authority.Route, op compare.Op) {
	if f.cfg.Traffic != nil {
		f.cfg.Traffic.Served(f.cfg.Pod, f.modeLabel(plan), op)
	}
}

// warn logs at most once a second.
func (f *Facade) warn(msg string, args ...any) {
	now, last := time.Now().UnixNano(), f.lastWarn.Load()
	if now-last >= int64(time.Second) && f.lastWarn.CompareAndSwap(last, now) {
		f.cfg.Logger.Warn(msg, args...)
	}
}

// maxHops bounds how often one call is sent on to another store. The
// longest legitimate path: the store the flags name refuses, a handoff to
// MySQL still copying sends the call to Redis, which yielded meanwhile,
// back to MySQL, which needs the cut-over finished (a second handoff),
// then answers.
const maxHops = 6

// decided runs op against the shop's deciding store. It starts with the
// store the flags name (d, plan); a store that refuses as not the decider
// is answered by its fence: if the fence is older than the flags, the shop
// is handed off to the store the flags name (their version is the epoch);
// otherwise the flags are stale and the fence's store is asked. It returns
// the store that answered. An error wrapping ErrDeciderUnreachable means
// no store decided.
func (f *Facade) decided(ctx context.Context, shop int64, d authority.Decision, plan authority.Route, op func(reservation.Store) error) (reservation.Authority, error) {
	want, epoch := plan.Authority, d.Version
	force := d.Kill == authority.KillRedisOnly
	if want == reservation.AuthorityMySQL {
		if fence, ok := f.cfg.Mirror.Following(shop); ok && fence.Decider != want {
			// A copy ahead of the shop's handoff to MySQL runs: Redis
			// decides until its cut-over. MySQL would only refuse.
			f.metrics.rerouted.WithLabelValues("followed").Inc()
			want, epoch, force = fence.Decider, fence.Epoch, false
		}
	}
	var last error
	for range maxHops {
		err := op(f.store(want))
		var nd *reservation.NotDeciderError
		if !errors.As(err, &nd) {
			return want, err
		}
		last = err
		if nd.Fence.Epoch < epoch {
			f.metrics.rerouted.WithLabelValues("handed_off").Inc()
			after, err := f.cfg.Mirror.Handoff(ctx, shop, want, epoch, force && want == reservation.AuthorityRedis)
			if err != nil {
				f.metrics.unreachable.WithLabelValues("handoff").Inc()
				f.warn("dualwrite: a handoff did not finish; answering 503", "pod", f.cfg.Pod, "shop", shop, "to", want, "epoch", epoch, "err", err)
				// The cause is kept as text, not wrapped: it may wrap a
				// domain sentinel (a takeover refusing an invalid snapshot,
				// a drain refusing an invalid change), and the caller must
				// see only "unknown, retry", never an answer.
				return want, fmt.Errorf("%w: shop %d: %v", ErrDeciderUnreachable, shop, err)
			}
			if after.Decider != want {
				// The fence has not moved yet (a handoff to MySQL copies
				// ahead while Redis decides), or a newer handoff overtook
				// this one: ask the store that decides now.
				f.metrics.rerouted.WithLabelValues("followed").Inc()
				want, epoch, force = after.Decider, after.Epoch, false
			}
			continue
		}
		f.metrics.rerouted.WithLabelValues("followed").Inc()
		want, epoch, force = nd.Fence.Decider, nd.Fence.Epoch, false
	}
	f.metrics.unreachable.WithLabelValues("hops").Inc()
	return want, fmt.Errorf("%w: shop %d: the stores kept naming each other: %w", ErrDeciderUnreachable, shop, last)
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
