package faulttest

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/internal/history"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// Error kinds a caller can see. The retryable ones are what a fault may
// surface as: the caller cannot know the outcome and repeats the call,
// which every operation makes safe. An "answer" is a domain error (the
// store decided something). "unclear" is anything else: a fault must never
// surface that way.
const (
	kindTimeout      = "timeout"
	kindConn         = "conn"
	kindContention   = "contention"
	kindPartialClaim = "partial_claim"
	kindUnclear      = "unclear"
)

func retryable(kind string) bool {
	return kind == kindTimeout || kind == kindConn || kind == kindContention || kind == kindPartialClaim
}

// errKind classifies a caller's error.
func errKind(err error) string {
	var partial *redisstore.PartialClaimError
	var ne net.Error
	switch {
	case history.Answer(err) != "":
		return "answer:" + history.Answer(err)
	case errors.As(err, &partial):
		return kindPartialClaim
	case errors.Is(err, reservation.ErrContention):
		return kindContention
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout(), errors.Is(err, redis.ErrPoolTimeout):
		return kindTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, mysql.ErrInvalidConn),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed), errors.As(err, &ne):
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

func (r *run) violate(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.violations) < 50 {
		r.violations = append(r.violations, fmt.Sprintf(format, args...))
	}
}

// traffic runs the callers from r.start until the traffic phase ends and
// every caller has an answer for its cart (or its settle deadline passed).
func (r *run) traffic() {
	tm := r.c.t
	end := r.start.Add(tm.traffic)
	settleEnd := end.Add(tm.settle)
	var wg sync.WaitGroup
	for w := range tm.workers {
		wg.Go(func() {
			c := r.rec.Client(r.c.facade)
			rng := rand.New(rand.NewPCG(uint64(w), uint64(r.start.UnixNano())))
			for i := 0; time.Now().Before(end); i++ {
				r.cart(c, rng, fmt.Sprintf("w%d-%d", w, i), settleEnd)
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

// cart is one checkout: reserve, then claim (payment succeeded) or release
// (it failed). Every call that gets no answer is repeated with the same
// token until it does or its deadline passes: what a checkout service does,
// and what the stores' idempotency exists for. A claim is never given up
// for a release: once payment succeeded, the reservation must be claimed.
func (r *run) cart(c *history.Client, rng *rand.Rand, token string, settleEnd time.Time) {
	f := &fate{lines: lines(rng)}
	r.mu.Lock()
	r.fates[token] = f
	r.mu.Unlock()
	p := &reservation.ReserveParams{Shop: shop, Token: token, Lines: f.lines, TTL: r.c.t.ttl}
	var res reservation.ReserveResult
	first := time.Now()
	answered, retried, err := r.retry("reserve", token, settleEnd, func(ctx context.Context) error {
		r.mu.Lock()
		r.lastReserve = time.Now()
		r.mu.Unlock()
		start := time.Now()
		var err error
		res, err = c.Reserve(ctx, p)
		r.trace(token, "reserve", start, res.Status, res.Replayed, err)
		return err
	})
	switch {
	case !answered:
		r.mu.Lock()
		f.unresolved = "reserve"
		r.mu.Unlock()
		return
	case err != nil:
		r.violate("reserve %s: answered %v", token, err)
		return
	case res.Status != reservation.StatusReserved:
		return
	}
	r.mu.Lock()
	f.acked = true
	if retried && res.Replayed {
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
	if rng.IntN(10) < 3 {
		r.release(c, token, f, deadline)
		return
	}
	r.claim(c, rng, token, f, deadline)
}

func (r *run) claim(c *history.Client, rng *rand.Rand, token string, f *fate, deadline time.Time) {
	var res reservation.ClaimResult
	claim := func(ctx context.Context) error {
		start := time.Now()
		var err error
		res, err = c.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token})
		r.trace(token, "claim", start, res.Outcome, res.Replayed, err)
		return err
	}
	answered, retried, err := r.retry("claim", token, deadline, claim)
	switch {
	case !answered:
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
	if retried && res.Replayed {
		r.applied++
	}
	r.mu.Unlock()
	if rng.IntN(5) == 0 {
		// A checkout that retries a claim it already got an answer for:
		// the answer must be the same claim, replayed, never a second
		// deduction.
		if answered, err := r.call("claim", token, deadline, claim); answered && (err != nil || !res.Replayed) {
			r.violate("claim %s again: %+v %v, want replayed", token, res, err)
		}
	}
}

func (r *run) release(c *history.Client, token string, f *fate, deadline time.Time) {
	answered, err := r.call("release", token, deadline, func(ctx context.Context) error {
		start := time.Now()
		res, err := c.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: token})
		r.trace(token, "release", start, releaseAnswer(res), false, err)
		return err
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case !answered:
		f.unresolved = "release"
	case err != nil:
		r.violations = append(r.violations, fmt.Sprintf("release %s: acknowledged reservation answered %v", token, err))
	default:
		f.released = true
	}
}

// call runs fn until it returns nil or a domain answer, or until deadline
// passes with only retryable errors. It reports whether the caller got an
// answer, and the last error.
func (r *run) call(op, token string, deadline time.Time, fn func(ctx context.Context) error) (answered bool, err error) {
	answered, _, err = r.retry(op, token, deadline, fn)
	return answered, err
}

// retry is call, also reporting whether an attempt failed first.
func (r *run) retry(op, token string, deadline time.Time, fn func(ctx context.Context) error) (answered, retried bool, err error) {
	for attempt := 0; ; attempt++ {
		retried = attempt > 0
		ctx, cancel := context.WithTimeout(context.Background(), r.c.t.op)
		start := time.Now()
		err = fn(ctx)
		took := time.Since(start)
		cancel()
		kind := ""
		if err != nil {
			kind = errKind(err)
		}
		r.note(op, token, kind, err, start, took)
		if err == nil || strings.HasPrefix(kind, "answer:") {
			return true, retried, err
		}
		if time.Now().After(deadline) {
			return false, retried, err
		}
		// Back off a little, with jitter, as a checkout client would.
		time.Sleep(time.Duration(20+rand.IntN(40)) * time.Millisecond)
	}
}

func (r *run) note(op, token, kind string, err error, start time.Time, took time.Duration) {
	tm := r.c.t
	since := start.Sub(r.start)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[op]++
	if since >= tm.faultAt && since < tm.healAt {
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
	if since+took >= tm.faultAt && since <= tm.healAt {
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
	acked, claimed, released := 0, 0, 0
	for _, f := range r.fates {
		if f.acked {
			acked++
		}
		if f.claimed {
			claimed++
		}
		if f.released {
			released++
		}
	}
	return fmt.Sprintf("carts %d (acked %d, claimed %d, released %d); calls reserve %d claim %d release %d; errors during fault %d, after heal %d: [%s]; failed calls found applied on retry %d; slowest answer: reserve %s, claim %s, release %s",
		len(r.fates), acked, claimed, released, r.calls["reserve"], r.calls["claim"], r.calls["release"], r.faultErrs, r.healedErrs, strings.Join(errs, ", "), r.applied,
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
