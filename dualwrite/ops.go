package dualwrite

import (
	"context"
	"errors"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
)

// call is one dual-written operation: the authority runs in the caller's
// goroutine, the shadow in a slot; whoever finishes last hands both
// outcomes to the observer.
type call struct {
	f        *Facade
	plan     rollout.Route
	obs      compare.Observation
	authDone chan compare.Outcome
	shadow   shadowCall
	store    reservation.Authority // the shadow's
	skipped  bool
}

// begin starts the shadow side. cleanup, when non-nil, runs in the shadow's
// slot after both sides are known (e.g. release a hold only the shadow
// got), before the token's next shadow call may start.
func (f *Facade) begin(ctx context.Context, plan rollout.Route, op compare.Op, shop int64, token string, shadowStore reservation.Authority,
	shadowFn func(ctx context.Context) compare.Outcome, cleanup func(a, s compare.Outcome)) *call {
	c := &call{
		f:        f,
		plan:     plan,
		obs:      compare.Observation{Op: op, Pod: f.cfg.Pod, Shop: shop, Token: token, Mode: f.modeLabel(plan), At: time.Now()},
		authDone: make(chan compare.Outcome, 1),
		store:    shadowStore,
	}
	c.shadow = f.startShadow(ctx, tokenKey{shop, token}, shadowStore, shadowFn, func(s compare.Outcome) {
		a := <-c.authDone
		if cleanup != nil && !s.Skipped {
			cleanup(a, s)
		}
		c.observe(a, s)
	})
	c.skipped = c.shadow.skipped
	return c
}

// finish records the authority's outcome and, in mysql mode, waits for the
// shadow (bounded by its deadline).
func (c *call) finish(a compare.Outcome) {
	if c.skipped {
		c.observe(a, <-c.shadow.done)
		return
	}
	c.authDone <- a
	if c.plan.WaitShadow {
		c.f.wait(c.shadow, c.store)
	}
}

func (c *call) observe(a, s compare.Outcome) {
	if c.f.cfg.Observer == nil {
		return
	}
	o := c.obs
	o.Authority, o.Shadow = a, s
	c.f.cfg.Observer.Observe(o)
}

// modeLabel is the mode an observation carries.
func (f *Facade) modeLabel(plan rollout.Route) string {
	if f.cfg.Calibration {
		return compare.ModeCalibration + "_" + string(plan.Effective)
	}
	return string(plan.Effective)
}

func timed(store reservation.Authority, fn func() compare.Outcome) compare.Outcome {
	start := time.Now()
	out := fn()
	out.Store = store
	out.Latency = time.Since(start)
	return out
}

// Reserve places the hold with the authority and, concurrently, with the
// shadow; the hold records the authority. When the shadow holds a cart the
// authority did not, the shadow's hold is released (it holds no real stock).
func (f *Facade) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	_, plan := f.decide(ctx, p.Shop)
	q := *p
	q.Authority = plan.Authority
	auth := f.store(plan.Authority)
	if !plan.Shadow {
		return auth.Reserve(ctx, &q)
	}
	shadowName := other(plan.Authority)
	shadow := f.store(shadowName)
	c := f.begin(ctx, plan, compare.OpReserve, p.Shop, p.Token, shadowName,
		func(sctx context.Context) compare.Outcome { return reserveOutcome(shadow.Reserve(sctx, &q)) },
		func(a, s compare.Outcome) {
			if shadowMayHoldAlone(a, s) {
				f.cleanShadow(ctx, shadow, &reservation.ReleaseParams{Shop: p.Shop, Token: p.Token})
			}
		})
	var res reservation.ReserveResult
	var err error
	c.finish(timed(plan.Authority, func() compare.Outcome {
		res, err = auth.Reserve(ctx, &q)
		return reserveOutcome(res, err)
	}))
	return res, err
}

// shadowMayHoldAlone says whether the shadow may hold a cart the authority
// does not: the authority did not reserve it, and the shadow did, or may
// have (its call failed without a domain answer, e.g. a deadline that
// struck while its commit was on the wire). Such a hold is an orphan: it
// holds no real buyer's stock, and after a flip to the shadow's authority
// it would refuse buyers until it expired (an undersell, invariant 4).
//
// With the authority answering "insufficient" the token held nothing
// there (a held token is answered from its hold), so the shadow's hold,
// if any, is an orphan. With the authority failing, only a shadow that did
// reserve is cleaned, as before: the authority's own outcome is unknown.
// A domain refusal by the authority (token conflict, already claimed)
// may mean the shadow rightly holds the token's first cart: left alone.
func shadowMayHoldAlone(a, s compare.Outcome) bool {
	shadowHeld := s.Err == nil && s.Result == string(reservation.StatusReserved)
	switch {
	case a.Err == nil && a.Result == string(reservation.StatusInsufficient):
		return shadowHeld || failedWithoutAnswer(s)
	case failedWithoutAnswer(a):
		return shadowHeld
	}
	return false
}

// repairTimeout bounds the retries of one shadow repair. A repair holds
// its shadow slot meanwhile, so during an outage of the shadow store the
// slots fill and later shadow calls are skipped (and counted) rather than
// queued.
func (f *Facade) repairTimeout() time.Duration { return 4 * f.cfg.ShadowTimeout }

// repairShadow retries a shadow write that must not be lost, for up to
// repairTimeout: an orphaned hold to release (see shadowMayHoldAlone), or
// a shadow release or settle that failed without an answer. Each leaves a
// hold in the shadow that no buyer owns, which refuses buyers after a
// flip until it expires. The writes are idempotent on the token, so a retry
// after a lost reply, or of a hold the shadow never took, changes nothing.
// It stops at the first answer, a domain refusal included (the hold was
// gone, or claimed). It returns whether an answer came.
func (f *Facade) repairShadow(ctx context.Context, write func(ctx context.Context) error) bool {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.repairTimeout())
	defer cancel()
	backoff := 10 * time.Millisecond
	for {
		actx, acancel := context.WithTimeout(rctx, f.cfg.ShadowTimeout)
		out := runRecovered(actx, "", func(ctx context.Context) compare.Outcome { return compare.Outcome{Err: write(ctx)} })
		acancel()
		if out.Panicked {
			f.metrics.shadowPanics.Inc()
			return false
		}
		if out.Err == nil || reservation.AnswerName(out.Err) != "" {
			return true
		}
		select {
		case <-rctx.Done():
			f.metrics.shadowRepairFailed.Inc()
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// cleanShadow releases a cart the shadow may hold alone.
func (f *Facade) cleanShadow(ctx context.Context, shadow reservation.Store, p *reservation.ReleaseParams) {
	f.repairShadow(ctx, func(ctx context.Context) error {
		res, err := shadow.Release(ctx, p)
		if err == nil && res.Released {
			f.metrics.shadowCleaned.Inc()
		}
		return err
	})
}

// failedWithoutAnswer says whether an outcome is a failure that says
// nothing of the store's state (not a domain answer). A shadow that
// panicked is a bug, not a failure to retry.
func failedWithoutAnswer(o compare.Outcome) bool {
	return o.Err != nil && !o.Panicked && reservation.AnswerName(o.Err) == ""
}

func reserveOutcome(res reservation.ReserveResult, err error) compare.Outcome {
	if err != nil {
		return compare.Outcome{Err: err}
	}
	return compare.Outcome{Result: string(res.Status), Allocations: res.Allocations, Short: res.Short}
}

// owner is the store that answers for an existing reservation.
//
//   - Kill switch redis_only: Redis, and MySQL is not even read.
//   - Otherwise the preferred store is Redis under a kill switch, else the
//     mode's authority. If it holds the reservation: with both stores
//     written and no kill switch, the authority recorded on the hold
//     answers (a reservation made before a flip stays with its maker);
//     otherwise the preferred store does.
//   - If the preferred store does not hold it but the other does, the other
//     answers. This is what keeps an acknowledged reservation claimable
//     across a flip or a kill switch when one store never got it: in mysql
//     mode at a stock-out Redis may have refused the shadow reserve MySQL
//     accepted, and after the kill switch Redis alone would say "not
//     found". The claims row still makes the ledger deduction happen once.
//
// Looking the hold up costs a read (two on the miss path).
func (f *Facade) owner(ctx context.Context, d rollout.Decision, route rollout.Route, shop int64, token string) reservation.Authority {
	if d.Kill == rollout.KillRedisOnly {
		return reservation.AuthorityRedis
	}
	first := route.Authority
	if d.Kill == rollout.KillRedis {
		first = reservation.AuthorityRedis
	}
	get := &reservation.GetParams{Shop: shop, Token: token}
	h, err := f.store(first).Get(ctx, get)
	if err == nil {
		if d.Kill == rollout.KillOff && route.Shadow && h.Authority.Valid() {
			return h.Authority
		}
		return first
	}
	if !errors.Is(err, reservation.ErrNotFound) {
		// The preferred store is unreachable, not empty: it answers (with
		// its error). The other store must never act for an authority it
		// cannot see: it would claim a reservation the authority still
		// holds.
		return first
	}
	// The other store is asked within the shadow deadline: a retried claim
	// (the preferred store already claimed it) must not hang on it.
	octx, cancel := context.WithTimeout(ctx, f.cfg.ShadowTimeout)
	defer cancel()
	if _, err := f.store(other(first)).Get(octx, get); err == nil {
		return other(first)
	}
	return first
}

// Claim makes a reservation permanent. The reservation's owner claims as
// authority (deducts the ledger once); then the other store settles with
// what was deducted, concurrently and bounded (waited for in mysql mode).
//
// A claim that follows its reserve while the reserve's shadow is still
// running first waits for that shadow (at most the shadow deadline): the
// legacy claim deducts through the MySQL ledger, and overtaking the MySQL
// shadow reserve would make it find the token already claimed. Checkout
// claims seconds after it reserves, so this wait is for tests and retries,
// not the normal path.
func (f *Facade) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	d, plan := f.decide(ctx, p.Shop)
	f.order.wait(tokenKey{p.Shop, p.Token}, f.cfg.ShadowTimeout)
	owner := f.owner(ctx, d, plan, p.Shop, p.Token)
	q := reservation.ClaimParams{Shop: p.Shop, Token: p.Token, As: reservation.AsAuthority}
	if !plan.Shadow {
		res, err := f.store(owner).Claim(ctx, &q)
		if err == nil && owner != plan.Authority {
			// Only the other store held it. The store in use must still
			// follow the ledger deduction, or it would offer those units
			// again (a settle without a hold does exactly that).
			_, _ = f.store(plan.Authority).Claim(ctx, &reservation.ClaimParams{Shop: p.Shop, Token: p.Token, As: reservation.AsShadow, Deducted: res.Allocations})
		}
		return res, err
	}
	var res reservation.ClaimResult
	var err error
	a := timed(owner, func() compare.Outcome {
		res, err = f.store(owner).Claim(ctx, &q)
		if err != nil {
			return compare.Outcome{Err: err}
		}
		return compare.Outcome{Result: string(res.Outcome), Allocations: res.Allocations}
	})
	if err != nil {
		// The hold stays for a retry: the shadow must not settle it.
		f.observeAlone(plan, compare.OpClaim, p.Shop, p.Token, a, other(owner))
		return res, err
	}
	shadowName := other(owner)
	settle := reservation.ClaimParams{Shop: p.Shop, Token: p.Token, As: reservation.AsShadow, Deducted: res.Allocations}
	replayed := res.Replayed
	c := f.begin(ctx, plan, compare.OpClaim, p.Shop, p.Token, shadowName, func(sctx context.Context) compare.Outcome {
		sr, err := f.store(shadowName).Claim(sctx, &settle)
		if err != nil {
			if replayed && errors.Is(err, reservation.ErrNotFound) {
				// A retried claim: the shadow settled the first time.
				return compare.Outcome{Result: string(reservation.OutcomeSettled), Allocations: res.Allocations}
			}
			return compare.Outcome{Err: err}
		}
		return compare.Outcome{Result: string(sr.Outcome), Allocations: sr.Allocations}
	}, func(_, s compare.Outcome) {
		if failedWithoutAnswer(s) {
			f.repairShadow(ctx, func(ctx context.Context) error {
				_, err := f.store(shadowName).Claim(ctx, &settle)
				return err
			})
		}
	})
	c.finish(a)
	return res, nil
}

// observeAlone reports a call the shadow did not follow because the
// authority failed.
func (f *Facade) observeAlone(plan rollout.Route, op compare.Op, shop int64, token string, a compare.Outcome, shadow reservation.Authority) {
	if f.cfg.Observer == nil {
		return
	}
	f.cfg.Observer.Observe(compare.Observation{Op: op, Pod: f.cfg.Pod, Shop: shop, Token: token, Mode: f.modeLabel(plan),
		At: time.Now().Add(-a.Latency), Authority: a, Shadow: compare.Outcome{Store: shadow}})
}

// Release gives a reservation back: its owner releases, then the other
// store releases its own hold.
// Like Claim, it first lets a still-running shadow of the token finish.
func (f *Facade) Release(ctx context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	d, plan := f.decide(ctx, p.Shop)
	f.order.wait(tokenKey{p.Shop, p.Token}, f.cfg.ShadowTimeout)
	owner := f.owner(ctx, d, plan, p.Shop, p.Token)
	if !plan.Shadow {
		return f.store(owner).Release(ctx, p)
	}
	var res reservation.ReleaseResult
	var err error
	a := timed(owner, func() compare.Outcome {
		res, err = f.store(owner).Release(ctx, p)
		return releaseOutcome(res, err)
	})
	if err != nil {
		f.observeAlone(plan, compare.OpRelease, p.Shop, p.Token, a, other(owner))
		return res, err
	}
	shadowName := other(owner)
	q := *p
	c := f.begin(ctx, plan, compare.OpRelease, p.Shop, p.Token, shadowName, func(sctx context.Context) compare.Outcome {
		return releaseOutcome(f.store(shadowName).Release(sctx, &q))
	}, func(_, s compare.Outcome) {
		if failedWithoutAnswer(s) {
			f.repairShadow(ctx, func(ctx context.Context) error {
				_, err := f.store(shadowName).Release(ctx, &q)
				return err
			})
		}
	})
	c.finish(a)
	return res, nil
}

func releaseOutcome(res reservation.ReleaseResult, err error) compare.Outcome {
	switch {
	case err != nil:
		return compare.Outcome{Err: err}
	case res.Released:
		return compare.Outcome{Result: "released", Allocations: res.Allocations}
	default:
		return compare.Outcome{Result: "not_released"}
	}
}

// Adjust applies a merchant's stock change through the mode's authority
// (which changes the ledger); the shadow follows the delta it applied.
func (f *Facade) Adjust(ctx context.Context, p *reservation.AdjustParams) (reservation.AdjustResult, error) {
	_, plan := f.decide(ctx, p.Shop)
	q := *p
	q.As = reservation.AsAuthority
	auth := f.store(plan.Authority)
	if !plan.Shadow {
		return auth.Adjust(ctx, &q)
	}
	var res reservation.AdjustResult
	var err error
	a := timed(plan.Authority, func() compare.Outcome {
		res, err = auth.Adjust(ctx, &q)
		if err != nil {
			return compare.Outcome{Err: err}
		}
		return compare.Outcome{Result: "adjusted"}
	})
	if err != nil || res.Delta == 0 {
		return res, err
	}
	shadowName := other(plan.Authority)
	// The key goes along: a replayed adjust is followed again, and the
	// shadow applies its delta once per key.
	follow := reservation.AdjustParams{Shop: p.Shop, Item: p.Item, Location: p.Location, Delta: res.Delta, As: reservation.AsShadow, Key: p.Key}
	c := f.begin(ctx, plan, compare.OpAdjust, p.Shop, "", shadowName, func(sctx context.Context) compare.Outcome {
		if _, err := f.store(shadowName).Adjust(sctx, &follow); err != nil {
			return compare.Outcome{Err: err}
		}
		return compare.Outcome{Result: "adjusted"}
	}, nil)
	c.finish(a)
	return res, nil
}

// Get returns a reservation's hold from the mode's authority, or from the
// other store when only it has the hold (a reservation made before a flip).
func (f *Facade) Get(ctx context.Context, p *reservation.GetParams) (reservation.Hold, error) {
	_, plan := f.decide(ctx, p.Shop)
	h, err := f.store(plan.Authority).Get(ctx, p)
	if plan.Shadow && errors.Is(err, reservation.ErrNotFound) {
		if h2, err2 := f.store(other(plan.Authority)).Get(ctx, p); err2 == nil {
			return h2, nil
		}
	}
	return h, err
}

// Availability reads the mode's authority.
func (f *Facade) Availability(ctx context.Context, p *reservation.AvailabilityParams) (reservation.AvailabilityResult, error) {
	_, plan := f.decide(ctx, p.Shop)
	return f.store(plan.Authority).Availability(ctx, p)
}
