package faulttest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/internal/history"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// Error kinds a caller can see. The retryable ones are what a fault may
// surface as: the caller cannot know the outcome and repeats the call,
// which every operation makes safe. An "answer" is a domain error (the
// store decided something). "unclear" is anything else: a fault must never
// surface that way.
const (
	kindTimeout    = "timeout"
	kindConn       = "conn"
	kindContention = "contention"
	// kindUnreachable: the shop's decider could not be settled (a handoff
	// did not finish): dualwrite.ErrDeciderUnreachable.
	kindUnreachable = "decider_unreachable"
	// kindInProgress: a release met a legacy claim under way.
	kindInProgress = "claim_in_progress"
	kindUnclear    = "unclear"
)

func retryable(kind string) bool {
	switch kind {
	case kindTimeout, kindConn, kindContention, kindUnreachable, kindInProgress:
		return true
	}
	return false
}

// errKind classifies a caller's error.
func errKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, dualwrite.ErrDeciderUnreachable):
		return kindUnreachable
	case history.Answer(err) != "":
		return "answer:" + history.Answer(err)
	case errors.Is(err, reservation.ErrContention):
		return kindContention
	case errors.Is(err, reservation.ErrClaimInProgress):
		return kindInProgress
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout(), errors.Is(err, redis.ErrPoolTimeout):
		return kindTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, mysql.ErrInvalidConn),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed), errors.As(err, &ne),
		// database/sql's answer when a transaction's connection was cut
		// under it (the lost-reply proxy closed it mid-batch).
		errors.Is(err, sql.ErrConnDone):
		return kindConn
	}
	return kindUnclear
}

// fate is what became of one cart, as its caller was told.
type fate struct {
	lines []reservation.Line
	// acked: a reserve answered reserved.
	acked bool
	// claimed: a claim answered claimed, with these allocations.
	claimed bool
	allocs  []reservation.Allocation
	// released: a release answered (released or not: the hold is gone).
	released bool
	// abandoned: the checkout never came back (neither claim nor
	// release): the hold expires.
	abandoned bool
	// refused: the reserve was answered insufficient.
	refused bool
	// slow: acknowledged before the middle of the fault window (the kill
	// switch), claimed after it.
	slow bool
	// unresolved names the call that got no answer before its deadline.
	unresolved string
}

// run is one cell's traffic and what it saw.
type run struct {
	c     *cell
	rec   *history.Recorder
	start time.Time

	mu    sync.Mutex
	fates map[string]*fate
	// calls counts calls per op; errs errors per "op:kind" and per phase.
	calls map[string]int
	errs  map[string]int
	// faultErrs counts errors during the fault window, healedErrs after;
	// faultCalls counts calls per op started inside the window.
	faultErrs, healedErrs int
	faultCalls            map[string]int
	// faultFrom and faultTo are when the fault was in force and when
	// healing returned, from the traffic's start (0: not yet). They may
	// fall later than timings.faultAt and healAt: the mysql column's fault
	// waits for the first handoff, and a killed server's restart takes
	// time.
	faultFrom, faultTo time.Duration
	// applied counts calls repeated after an error whose answer showed the
	// failed attempt had taken effect (a replayed reserve or claim): lost
	// replies that idempotency absorbed.
	applied int
	// unclear keeps a few unclear errors' texts; samples the first error
	// of each "op:kind".
	unclear      []string
	samples      map[string]string
	sampleTokens map[string]string
	// violations are broken rules seen by callers.
	violations []string
	// lastReserve is the latest reserve call: the last hold expires by
	// lastReserve + ttl.
	lastReserve time.Time
	// maxLatency is the slowest answered call per op.
	maxLatency map[string]time.Duration
	// calls keeps each token's calls and answers, to explain a failure.
	trails map[string][]string
}

func newRun(c *cell) *run {
	r := &run{c: c, rec: history.New(), start: time.Now(), fates: map[string]*fate{}, calls: map[string]int{}, errs: map[string]int{},
		maxLatency: map[string]time.Duration{}, samples: map[string]string{}, sampleTokens: map[string]string{}, trails: map[string][]string{}, faultCalls: map[string]int{}}
	for item, n := range c.t.stock {
		r.rec.Stock(history.Key{Shop: shop, Item: item, Location: 1}, n)
	}
	return r
}

// takeViolations returns the violations noted so far and forgets them.
func (r *run) takeViolations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.violations
	r.violations = nil
	return v
}

func (r *run) violate(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.violations) < 50 {
		r.violations = append(r.violations, fmt.Sprintf(format, args...))
	}
}

// traffic runs the callers from r.start until the traffic phase ends and
// every caller has an answer for its cart (or its settle deadline passed).
// The kill column's kill switch is engaged at timings.killAt.
func (r *run) traffic(t testing.TB) {
	tm := r.c.t
	end := r.start.Add(tm.traffic)
	settleEnd := end.Add(tm.settle)
	var wg sync.WaitGroup
	if r.c.mode.kill != authority.KillOff {
		wg.Go(func() {
			time.Sleep(time.Until(r.start.Add(tm.killAt)))
			r.c.engageKill(t)
		})
	}
	for w := range tm.workers {
		wg.Go(func() {
			c := r.newCaller()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(r.start.UnixNano())))
			for i := 0; time.Now().Before(end); i++ {
				r.cart(c, rng, fmt.Sprintf("w%d-%d", w, i), settleEnd, i == 0)
				time.Sleep(tm.think)
			}
		})
	}
	wg.Wait()
}

// lines picks a cart: one line most of the time, sometimes two; one
// location per line, so each line falls in one history partition.
func lines(rng *rand.Rand) []reservation.Line {
	first := 1 + rng.Int64N(items)
	out := []reservation.Line{{Item: first, Quantity: 1 + rng.Int64N(3), Locations: []int64{1}}}
	if rng.IntN(5) == 0 {
		second := 1 + (first % items)
		out = append(out, reservation.Line{Item: second, Quantity: 1 + rng.Int64N(2), Locations: []int64{1}})
	}
	return out
}

// retrier is a checkout client's view of the facade: a call that gets no
// answer (a retryable error) is repeated with the same token, after a
// short jittered pause, until it is answered or the deadline of its
// context passes; each attempt has its own deadline (timings.op). What a
// checkout service does, and what the stores' idempotency exists for.
// The history records each call as one operation, from its first attempt
// to its answer, whose answer may replay its own earlier attempt
// (history.Retrier): one operation per call, not one of unknown outcome
// per failed attempt, keeps the history's search small. A retrier serves
// one caller at a time.
type retrier struct {
	r       *run
	retried bool
}

var _ history.Retrier = (*retrier)(nil)

// Retried implements history.Retrier.
func (t *retrier) Retried() bool { return t.retried }

// do runs the attempts of one call and returns the last one's error.
func (t *retrier) do(ctx context.Context, op, token string, attempt func(ctx context.Context) error) error {
	deadline, _ := ctx.Deadline()
	t.retried = false
	for n := 0; ; n++ {
		t.retried = n > 0
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.r.c.t.op)
		start := time.Now()
		err := attempt(actx)
		took := time.Since(start)
		cancel()
		kind := ""
		if err != nil {
			kind = errKind(err)
		}
		t.r.note(op, token, kind, err, start, took)
		if answered(err) || time.Now().After(deadline) {
			return err
		}
		// Back off a little, with jitter, as a checkout client would.
		time.Sleep(time.Duration(20+rand.IntN(40)) * time.Millisecond)
	}
}

// answered reports whether a call's error is an answer: none, or a domain
// answer.
func answered(err error) bool { return err == nil || strings.HasPrefix(errKind(err), "answer:") }

func (t *retrier) Reserve(ctx context.Context, p *reservation.ReserveParams) (res reservation.ReserveResult, err error) {
	err = t.do(ctx, "reserve", p.Token, func(ctx context.Context) error {
		t.r.mu.Lock()
		t.r.lastReserve = time.Now()
		t.r.mu.Unlock()
		start := time.Now()
		var err error
		res, err = t.r.c.facade.Reserve(ctx, p)
		t.r.trace(p.Token, "reserve", start, res.Status, res.Replayed, err)
		return err
	})
	return res, err
}

func (t *retrier) Claim(ctx context.Context, p *reservation.ClaimParams) (res reservation.ClaimResult, err error) {
	err = t.do(ctx, "claim", p.Token, func(ctx context.Context) error {
		start := time.Now()
		var err error
		res, err = t.r.c.facade.Claim(ctx, p)
		t.r.trace(p.Token, "claim", start, res.Outcome, res.Replayed, err)
		return err
	})
	return res, err
}

func (t *retrier) Release(ctx context.Context, p *reservation.ReleaseParams) (res reservation.ReleaseResult, err error) {
	err = t.do(ctx, "release", p.Token, func(ctx context.Context) error {
		start := time.Now()
		var err error
		res, err = t.r.c.facade.Release(ctx, p)
		t.r.trace(p.Token, "release", start, releaseAnswer(res), false, err)
		return err
	})
	return res, err
}

// caller is one checkout client: its retrier, recorded.
type caller struct {
	*history.Client
	t *retrier
}

func (r *run) newCaller() caller {
	t := &retrier{r: r}
	return caller{Client: r.rec.Client(t), t: t}
}

// until is a context whose deadline is when a caller gives a call up.
func until(deadline time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.Background(), deadline)
}

// cart is one checkout: reserve, then claim (payment succeeded), release
// (it failed) or nothing (the buyer left: the hold expires). A call that
// gets no answer is repeated (see retrier). A claim is never given up for
// a release: once payment succeeded, the reservation must be claimed.
//
// A slow cart's payment takes until the middle of the fault window (when
// the kill column engages its kill switch), and then succeeds: its hold,
// acknowledged before, is claimed across the fault (and the kill switch).
func (r *run) cart(c caller, rng *rand.Rand, token string, settleEnd time.Time, slow bool) {
	f := &fate{lines: lines(rng)}
	r.mu.Lock()
	r.fates[token] = f
	r.mu.Unlock()
	p := &reservation.ReserveParams{Shop: shop, Token: token, Lines: f.lines, TTL: r.c.t.ttl}
	first := time.Now()
	ctx, cancel := until(settleEnd)
	res, err := c.Reserve(ctx, p)
	cancel()
	switch {
	case !answered(err):
		r.mu.Lock()
		f.unresolved = "reserve"
		r.mu.Unlock()
		return
	case err != nil:
		r.violate("reserve %s: answered %v", token, err)
		return
	case res.Status != reservation.StatusReserved:
		r.mu.Lock()
		f.refused = true
		r.mu.Unlock()
		return
	}
	r.mu.Lock()
	f.acked = true
	if c.t.Retried() && res.Replayed {
		r.applied++
	}
	r.mu.Unlock()
	// The hold is honoured until it expires: the last attempt must start
	// early enough to end (a call's deadline later) before the TTL that
	// the store's clock started a little after our first call.
	deadline := first.Add(r.c.t.ttl - r.c.t.op - 500*time.Millisecond)
	if settleEnd.Before(deadline) {
		deadline = settleEnd
	}
	if slow {
		time.Sleep(time.Until(r.start.Add(r.c.t.killAt + 50*time.Millisecond)))
		r.mu.Lock()
		f.slow = true
		r.mu.Unlock()
		r.claim(c, rng, token, f, deadline)
		return
	}
	switch n := rng.IntN(20); {
	case n < 2:
		r.mu.Lock()
		f.abandoned = true
		r.mu.Unlock()
	case n < 7:
		r.release(c, token, f, deadline)
	default:
		r.claim(c, rng, token, f, deadline)
	}
}

func (r *run) claim(c caller, rng *rand.Rand, token string, f *fate, deadline time.Time) {
	ctx, cancel := until(deadline)
	defer cancel()
	res, err := c.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token})
	switch {
	case !answered(err):
		r.mu.Lock()
		f.unresolved = "claim"
		r.mu.Unlock()
		r.violate("claim %s: no answer by %s: an acknowledged reservation could not be claimed after healing", token, deadline.Sub(r.start).Round(time.Millisecond))
		return
	case err != nil:
		// A domain answer to the claim of an acknowledged, unexpired
		// reservation: it was lost (not_found, expired) or refused.
		r.violate("claim %s: acknowledged reservation answered %v", token, err)
		return
	}
	r.mu.Lock()
	f.claimed, f.allocs = true, res.Allocations
	if c.t.Retried() && res.Replayed {
		r.applied++
	}
	r.mu.Unlock()
	if rng.IntN(5) == 0 {
		// A checkout that retries a claim it already got an answer for:
		// the answer must be the same claim, replayed, never a second
		// deduction.
		again, err := c.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token})
		if answered(err) && (err != nil || !again.Replayed) {
			r.violate("claim %s again: %+v %v, want replayed", token, again, err)
		}
	}
}

func (r *run) release(c caller, token string, f *fate, deadline time.Time) {
	ctx, cancel := until(deadline)
	defer cancel()
	_, err := c.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: token})
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case !answered(err):
		f.unresolved = "release"
	case err != nil:
		r.violations = append(r.violations, fmt.Sprintf("release %s: acknowledged reservation answered %v", token, err))
	default:
		f.released = true
	}
}

// faultInjected and faultHealed mark the fault's real bounds.
func (r *run) faultInjected() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faultFrom = time.Since(r.start)
}

func (r *run) faultHealed() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faultTo = time.Since(r.start)
}

// faultWindowLocked is the fault's window so far, from the traffic's
// start: none (ok false) before the fault is in force, open-ended while it
// is being healed.
func (r *run) faultWindowLocked() (from, to time.Duration, ok bool) {
	if r.faultFrom == 0 {
		return 0, 0, false
	}
	to = r.faultTo
	if to == 0 {
		to = time.Duration(math.MaxInt64)
	}
	return r.faultFrom, to, true
}

func (r *run) note(op, token, kind string, err error, start time.Time, took time.Duration) {
	since := start.Sub(r.start)
	r.mu.Lock()
	defer r.mu.Unlock()
	from, to, faulted := r.faultWindowLocked()
	r.calls[op]++
	if faulted && since >= from && since < to {
		r.faultCalls[op]++
	}
	if err == nil || strings.HasPrefix(kind, "answer:") {
		r.maxLatency[op] = max(r.maxLatency[op], took)
	}
	if err == nil {
		return
	}
	r.errs[op+":"+kind]++
	if _, ok := r.samples[op+":"+kind]; !ok {
		r.samples[op+":"+kind] = token + ": " + err.Error()
		r.sampleTokens[op+":"+kind] = token
	}
	if strings.HasPrefix(kind, "answer:") {
		return
	}
	if faulted && since+took >= from && since <= to {
		r.faultErrs++
	} else {
		r.healedErrs++
	}
	if kind == kindUnclear && len(r.unclear) < 5 {
		r.unclear = append(r.unclear, fmt.Sprintf("%s: %v", op, err))
	}
}

// summary is the run's calls and errors in one line, sorted.
func (r *run) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []string
	for k, n := range r.errs {
		errs = append(errs, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(errs)
	acked, claimed, released, abandoned, slow := 0, 0, 0, 0, 0
	for _, f := range r.fates {
		if f.slow && f.claimed {
			slow++
		}
		if f.acked {
			acked++
		}
		if f.claimed {
			claimed++
		}
		if f.released {
			released++
		}
		if f.abandoned {
			abandoned++
		}
	}
	// The window, where it was not the planned one.
	healed := ""
	if late := 50 * time.Millisecond; r.faultFrom > r.c.t.faultAt+late || r.faultTo > r.c.t.healAt+late {
		healed = fmt.Sprintf(" (%s-%s)", r.faultFrom.Round(10*time.Millisecond), r.faultTo.Round(10*time.Millisecond))
	}
	return fmt.Sprintf("carts %d (acked %d, claimed %d (%d across the fault), released %d, abandoned %d); calls reserve %d claim %d release %d; errors during fault%s %d, after heal %d: [%s]; failed calls found applied on retry %d; slowest answer: reserve %s, claim %s, release %s",
		len(r.fates), acked, claimed, slow, released, abandoned, r.calls["reserve"], r.calls["claim"], r.calls["release"], healed, r.faultErrs, r.healedErrs, strings.Join(errs, ", "), r.applied,
		r.maxLatency["reserve"].Round(time.Millisecond), r.maxLatency["claim"].Round(time.Millisecond), r.maxLatency["release"].Round(time.Millisecond))
}

// trace keeps one call of a token: when it started (from the traffic's
// start), how long it took, and its answer.
func (r *run) trace(token, op string, start time.Time, answer any, replayed bool, err error) {
	line := fmt.Sprintf("%s at %s (%s): %v", op, start.Sub(r.start).Round(time.Millisecond), time.Since(start).Round(time.Millisecond), answer)
	if replayed {
		line += " replayed"
	}
	if err != nil {
		line += " error " + err.Error()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trails[token] = append(r.trails[token], line)
}

// trail is a token's calls, one per line.
func (r *run) trail(token string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return "\n\t" + strings.Join(r.trails[token], "\n\t")
}

func releaseAnswer(res reservation.ReleaseResult) string {
	if res.Released {
		return "released"
	}
	return "not released"
}
