package dualwrite

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// call is one compared operation: the decider runs in the caller's
// goroutine, the shadow in a slot; whoever finishes last hands both
// outcomes to the observer.
type call struct {
	f        *Facade
	plan     authority.Route
	obs      compare.Observation
	authDone chan compare.Outcome
	shadow   shadowCall
	// finished is set by finish (in the caller's goroutine).
	finished bool
	// failuresOnly: the relay compares this call's answer (a reserve
	// MySQL decides in mysql mode); the facade observes only a failure of
	// the decider, which leaves no change for the relay to compare.
	failuresOnly bool
}

// compared starts the shadow side of a compared call, when the mode
// compares (plan.Shadow): shadowFn asks the store that does not decide
// what it would do. cleanup, when non-nil, runs in the shadow's slot once
// both sides are known. It returns nil when nothing is compared.
func (f *Facade) compared(ctx context.Context, plan authority.Route, op compare.Op, shop int64, token string,
	shadowFn func(ctx context.Context, shadow reservation.Store) compare.Outcome, cleanup func(a, s compare.Outcome)) *call {
	if !plan.Shadow {
		return nil
	}
	shadowName := other(plan.Authority)
	shadow := f.store(shadowName)
	c := &call{
		f:        f,
		plan:     plan,
		obs:      compare.Observation{Op: op, Pod: f.cfg.Pod, Shop: shop, Token: token, Mode: f.modeLabel(plan), At: time.Now()},
		authDone: make(chan compare.Outcome, 1),
	}
	c.obs.Switched = f.switched.since(shop)
	c.shadow = f.startShadow(ctx, tokenKey{shop, token}, shadowName,
		func(sctx context.Context) compare.Outcome {
			sctx, span := f.startSpan(sctx, "dualwrite.shadow."+string(op), op, shop)
			if span != nil {
				span.SetAttributes(attribute.String(attrStore, string(shadowName)))
			}
			out := shadowFn(sctx, shadow)
			endSpan(span, out.Err)
			if errors.Is(out.Err, reservation.ErrNotDecider) {
				// The shadow store keeps nothing of its own for the shop
				// now: it is being handed the shop (Redis's state is
				// copied in) or already decides it. It had nothing to
				// compare: skipped, not a fault of the shadow.
				f.metrics.shadowSkipped.Inc()
				return compare.Outcome{Skipped: true}
			}
			return out
		},
		func(s compare.Outcome) {
			a := <-c.authDone
			if a.Store == "" {
				return // the call went to another decider: nothing to compare
			}
			if cleanup != nil && !s.Skipped {
				cleanup(a, s)
			}
			c.observe(a, s)
		})
	return c
}

// failuresOnly is the comparison of a call whose answers the relay
// compares (see call.failuresOnly).
func (f *Facade) failuresOnly(plan authority.Route, op compare.Op, shop int64, token string) *call {
	return &call{f: f, plan: plan, failuresOnly: true,
		obs: compare.Observation{Op: op, Pod: f.cfg.Pod, Shop: shop, Token: token, Mode: f.modeLabel(plan), At: time.Now()}}
}

// finish records the decider's outcome; the shadow compares when it is
// done (the caller never waits for it). decider is the store that
// answered: when it is not the one the flags named (the call followed a
// fence), the two sides are not the pair the mode compares, and nothing is
// observed.
func (c *call) finish(decider reservation.Authority, a compare.Outcome) {
	if c == nil {
		return
	}
	c.finished = true
	if c.failuresOnly {
		if decider == c.plan.Authority && a.Err != nil {
			a.Store = decider
			c.observe(a, compare.Outcome{Store: other(decider)}) // the shadow not asked: authority_error
		}
		return
	}
	if decider != c.plan.Authority {
		a.Store = ""
	} else {
		a.Store = decider
	}
	if c.shadow.skipped {
		if a.Store != "" {
			c.observe(a, <-c.shadow.done)
		}
		return
	}
	c.authDone <- a
}

// abandon tells the shadow side, when finish was never called (the
// decider panicked), that there is nothing to compare: the shadow waits
// for the decider's outcome in its slot, and would otherwise hold it for
// ever. Every compared call defers it.
func (c *call) abandon() {
	if c != nil && !c.finished {
		c.finish("", compare.Outcome{})
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
func (f *Facade) modeLabel(plan authority.Route) string {
	if f.cfg.Calibration {
		return compare.ModeCalibration + "_" + string(plan.Effective)
	}
	return string(plan.Effective)
}

// Reserve places the hold with the shop's decider. While the mode
// compares, the other store is asked what it would do: MySQL keeps a
// shadow hold of its own (released again if Redis, deciding, held nothing
// for the cart), concurrently; Redis only evaluates the cart, and where
// the relay runs (Mirror.Evaluates) it is the relay that asks, as it
// applies MySQL's decision: the facade makes no Redis call at all.
func (f *Facade) Reserve(ctx context.Context, p *reservation.ReserveParams) (_ reservation.ReserveResult, err error) {
	ctx, span := f.startSpan(ctx, "dualwrite.reserve", compare.OpReserve, p.Shop)
	defer func() { endSpan(span, err) }()
	d, plan, err := f.decide(ctx, p.Shop)
	if err != nil {
		return reservation.ReserveResult{}, err
	}
	f.noteRoute(ctx, plan)
	f.served(plan, compare.OpReserve)
	q := *p
	q.As, q.Authority, q.Compare = reservation.AsAuthority, "", ""
	var c *call
	if f.relayCompares(plan) {
		q.Compare = f.modeLabel(plan)
		c = f.failuresOnly(plan, compare.OpReserve, p.Shop, p.Token)
	} else {
		// The shadow runs after Reserve may have returned: it gets a copy
		// of the cart, since the caller may reuse its slices.
		sq := *p
		sq.As, sq.Authority, sq.Compare, sq.Lines = reservation.AsShadow, plan.Authority, "", cloneLines(p.Lines)
		c = f.compared(ctx, plan, compare.OpReserve, p.Shop, p.Token,
			func(sctx context.Context, shadow reservation.Store) compare.Outcome {
				return reserveOutcome(shadow.Reserve(sctx, &sq))
			},
			func(a, s compare.Outcome) {
				if shadowHoldsAlone(a, s) {
					f.releaseShadow(ctx, p.Shop, p.Token)
				}
			})
	}
	defer c.abandon()
	return decideOne(ctx, f, p.Shop, d, plan, c,
		func(s reservation.Store) (reservation.ReserveResult, error) { return s.Reserve(ctx, &q) },
		reserveOutcome, func(r reservation.ReserveResult) bool { return !r.Replayed })
}

// relayCompares says whether the relay, not the facade, compares a
// reserve on plan: MySQL decides, the mode compares with Redis, and the
// relay evaluates carts. The relay asks Redis against the state every
// earlier change left, the state MySQL decided from, which a call beside
// MySQL's would not see while the relay lags (docs/compare.md says when it
// cannot and does not ask); and the comparison costs Redis one script in
// a pipeline the relay sends anyway, instead of a call of its own. A
// calibration facade's stores are not the pair.
func (f *Facade) relayCompares(plan authority.Route) bool {
	return plan.Shadow && plan.Authority == reservation.AuthorityMySQL && !f.cfg.Calibration && f.cfg.Mirror.Evaluates()
}

// decideOne has the shop's decider make one call, gives its answer (and
// how long it took) to the comparison c, and wakes the relay when MySQL
// decided something new (changed), so Redis follows within milliseconds.
func decideOne[R any](ctx context.Context, f *Facade, shop int64, d authority.Decision, plan authority.Route, c *call,
	op func(reservation.Store) (R, error), outcome func(R, error) compare.Outcome, changed func(R) bool) (R, error) {
	start := time.Now()
	var res R
	decider, err := f.decided(ctx, shop, d, plan, func(s reservation.Store) error {
		var e error
		res, e = op(s)
		return e
	})
	a := outcome(res, err)
	a.Latency = time.Since(start)
	noteDecider(ctx, decider)
	c.finish(decider, a)
	if err != nil {
		var zero R
		return zero, err
	}
	if decider == reservation.AuthorityMySQL && changed(res) {
		f.cfg.Mirror.Push()
	}
	return res, nil
}

// followsOnly is the plan for comparing a claim or a release: only where
// Redis decides and MySQL keeps shadow holds. Where MySQL decides, Redis's
// copy of a reservation arrives through the relay, and asking it at once
// would mostly measure the relay's lag (a claim right after its reserve
// would find nothing yet); reserves are still compared there.
func followsOnly(plan authority.Route) authority.Route {
	if plan.Authority == reservation.AuthorityMySQL {
		plan.Shadow = false
	}
	return plan
}

func cloneLines(lines []reservation.Line) []reservation.Line {
	out := make([]reservation.Line, len(lines))
	for i, ln := range lines {
		out[i] = ln
		out[i].Locations = slices.Clone(ln.Locations)
	}
	return out
}

// shadowHoldsAlone says whether MySQL's shadow holds a cart Redis, which
// decided, did not hold: Redis refused it. The shadow hold holds no real
// buyer's stock; it is released so that the comparisons that follow are
// not skewed by it (a handoff to MySQL would drop it anyway: MySQL takes
// Redis's state over).
func shadowHoldsAlone(a, s compare.Outcome) bool {
	return s.Store == reservation.AuthorityMySQL && a.Err == nil && a.Result == compare.ResultInsufficient &&
		s.Err == nil && s.Result == compare.ResultReserved
}

// releaseShadow releases MySQL's shadow hold of a cart, once, best effort.
func (f *Facade) releaseShadow(ctx context.Context, shop int64, token string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.ShadowTimeout)
	defer cancel()
	res, err := f.cfg.MySQL.Release(rctx, &reservation.ReleaseParams{Shop: shop, Token: token, As: reservation.AsShadow})
	if err == nil && res.Released {
		f.metrics.shadowCleaned.Inc()
	}
}

func reserveOutcome(res reservation.ReserveResult, err error) compare.Outcome {
	if err != nil {
		return compare.Outcome{Err: err}
	}
	return compare.Outcome{Result: string(res.Status), Allocations: res.Allocations, Short: res.Short}
}

// Claim makes a reservation permanent: the shop's decider claims it
// (deducting the ledger exactly once). While the mode compares, the other
// store is asked what a claim would find there; it changes nothing. (The
// shadow calls of one token run in order, so that question comes after
// the shadow of the token's reserve, without the caller waiting for it.)
func (f *Facade) Claim(ctx context.Context, p *reservation.ClaimParams) (_ reservation.ClaimResult, err error) {
	ctx, span := f.startSpan(ctx, "dualwrite.claim", compare.OpClaim, p.Shop)
	defer func() { endSpan(span, err) }()
	d, plan, err := f.decide(ctx, p.Shop)
	if err != nil {
		return reservation.ClaimResult{}, err
	}
	f.noteRoute(ctx, plan)
	f.served(plan, compare.OpClaim)
	q := reservation.ClaimParams{Shop: p.Shop, Token: p.Token, As: reservation.AsAuthority}
	sq := reservation.ClaimParams{Shop: p.Shop, Token: p.Token, As: reservation.AsShadow}
	c := f.compared(ctx, followsOnly(plan), compare.OpClaim, p.Shop, p.Token,
		func(sctx context.Context, shadow reservation.Store) compare.Outcome {
			return claimOutcome(shadow.Claim(sctx, &sq))
		}, nil)
	defer c.abandon()
	return decideOne(ctx, f, p.Shop, d, plan, c,
		func(s reservation.Store) (reservation.ClaimResult, error) { return s.Claim(ctx, &q) },
		claimOutcome, func(r reservation.ClaimResult) bool { return !r.Replayed })
}

func claimOutcome(res reservation.ClaimResult, err error) compare.Outcome {
	if err != nil {
		return compare.Outcome{Err: err}
	}
	return compare.Outcome{Result: string(res.Outcome), Allocations: res.Allocations}
}

// Release gives a reservation back through the shop's decider. While the
// mode compares, MySQL releases its shadow hold too (Redis only says what
// it would release).
func (f *Facade) Release(ctx context.Context, p *reservation.ReleaseParams) (_ reservation.ReleaseResult, err error) {
	ctx, span := f.startSpan(ctx, "dualwrite.release", compare.OpRelease, p.Shop)
	defer func() { endSpan(span, err) }()
	d, plan, err := f.decide(ctx, p.Shop)
	if err != nil {
		return reservation.ReleaseResult{}, err
	}
	f.noteRoute(ctx, plan)
	f.served(plan, compare.OpRelease)
	q := reservation.ReleaseParams{Shop: p.Shop, Token: p.Token, As: reservation.AsAuthority}
	sq := reservation.ReleaseParams{Shop: p.Shop, Token: p.Token, As: reservation.AsShadow}
	c := f.compared(ctx, followsOnly(plan), compare.OpRelease, p.Shop, p.Token,
		func(sctx context.Context, shadow reservation.Store) compare.Outcome {
			return releaseOutcome(shadow.Release(sctx, &sq))
		}, nil)
	defer c.abandon()
	return decideOne(ctx, f, p.Shop, d, plan, c,
		func(s reservation.Store) (reservation.ReleaseResult, error) { return s.Release(ctx, &q) },
		releaseOutcome, func(r reservation.ReleaseResult) bool { return r.Released })
}

func releaseOutcome(res reservation.ReleaseResult, err error) compare.Outcome {
	switch {
	case err != nil:
		return compare.Outcome{Err: err}
	case res.Released:
		return compare.Outcome{Result: compare.ResultReleased, Allocations: res.Allocations}
	default:
		return compare.Outcome{Result: compare.ResultNotReleased}
	}
}

// Adjust applies a merchant's stock change to the ledger. Both stores
// change the one ledger, which records the change for Redis to follow;
// through Redis (where the flags say Redis decides) Redis's own quantity
// also moves before the answer, so the next reserve there sees it.
func (f *Facade) Adjust(ctx context.Context, p *reservation.AdjustParams) (_ reservation.AdjustResult, err error) {
	ctx, span := f.startSpan(ctx, "dualwrite.adjust", compare.OpAdjust, p.Shop)
	defer func() { endSpan(span, err) }()
	_, plan, err := f.decide(ctx, p.Shop)
	if err != nil {
		return reservation.AdjustResult{}, err
	}
	f.noteRoute(ctx, plan)
	noteDecider(ctx, plan.Authority)
	f.served(plan, compare.OpAdjust)
	q := *p
	q.As = reservation.AsAuthority
	res, err := f.store(plan.Authority).Adjust(ctx, &q)
	if err != nil {
		return reservation.AdjustResult{}, err
	}
	if plan.Authority == reservation.AuthorityMySQL && res.ChangeID != 0 {
		// Redis follows the ledger through the relay; delivering the
		// shop's changes now (bounded, best effort: the relay delivers
		// them anyway) keeps a stale replica that sends the next reserve
		// to Redis from refusing units the merchant just added.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.ShadowTimeout)
		_ = f.cfg.Mirror.Flush(fctx, p.Shop)
		cancel()
	}
	return res, nil
}

// Get returns a reservation's hold as the shop's decider holds it. The
// read goes through the fences like a decision (AsDecider): the store the
// flags name answers only if it decides the shop; otherwise the facade
// follows the fence, or hands the shop off when its flags are newer, as
// for any call. So a caller never reads a follower's copy (which lags the
// decider by the relay) or MySQL's shadow hold (its own allocation, made
// only to be compared) as if it were the reservation.
func (f *Facade) Get(ctx context.Context, p *reservation.GetParams) (_ reservation.Hold, err error) {
	ctx, span := f.startSpan(ctx, "dualwrite.get", "get", p.Shop)
	defer func() { endSpan(span, err) }()
	q := *p
	q.AsDecider = true
	return readDecided(ctx, f, p.Shop, func(s reservation.Store) (reservation.Hold, error) { return s.Get(ctx, &q) })
}

// Availability reads what a buyer could reserve now from the shop's
// decider, through the fences as Get does.
func (f *Facade) Availability(ctx context.Context, p *reservation.AvailabilityParams) (_ reservation.AvailabilityResult, err error) {
	ctx, span := f.startSpan(ctx, "dualwrite.availability", "availability", p.Shop)
	defer func() { endSpan(span, err) }()
	q := *p
	q.AsDecider = true
	return readDecided(ctx, f, p.Shop, func(s reservation.Store) (reservation.AvailabilityResult, error) { return s.Availability(ctx, &q) })
}

// readDecided has the shop's decider answer a read (asked AsDecider, so a
// store that does not decide refuses and the fences route it on).
func readDecided[R any](ctx context.Context, f *Facade, shop int64, read func(reservation.Store) (R, error)) (R, error) {
	var res R
	d, plan, err := f.decide(ctx, shop)
	if err != nil {
		return res, err
	}
	f.noteRoute(ctx, plan)
	decider, err := f.decided(ctx, shop, d, plan, func(s reservation.Store) error {
		var e error
		res, e = read(s)
		return e
	})
	noteDecider(ctx, decider)
	if err != nil {
		var zero R
		return zero, err
	}
	return res, nil
}
