package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed31b0e981/reservoir/internal/demo"
	"github.com/seed31b0e981/reservoir/internal/history"
	"github.com/seed31b0e981/reservoir/reservation"
)

// Stock: every shop has items 1..items at each location; the first hotItems
// have more stock and get a third of the cart lines; the last scarceItems
// have almost none, so carts are refused from the start.
const (
	items       = 30
	hotItems    = 3
	scarceItems = 3
	hotStock    = 1500
	coldStock   = 120
	scarceStock = 3
	ttl         = 6 * time.Second         // a cart's hold
	abandonTL   = 1500 * time.Millisecond // an abandoned cart's hold
	// callBudget bounds the retries of one call: past it the call's
	// outcome stays unknown.
	callBudget = 10 * time.Second
	// cutPerMille of the calls have their first attempt cut a few
	// milliseconds after it is sent (a client timeout: the server may
	// have done it); impatientPerMille give up after one attempt (the
	// outcome stays unknown when it did not answer).
	cutPerMille       = 40
	impatientPerMille = 40
	// clockMargin absorbs the difference between this process's clock
	// and the stores' (one host) when judging whether a hold had expired.
	clockMargin = 250 * time.Millisecond
)

var locations = []int64{1, 2}

type allocation struct {
	Item     int64 `json:"item"`
	Location int64 `json:"location"`
	Quantity int64 `json:"quantity"`
}

// cartKey names an item x location of a shop.
type cartKey struct{ shop, item, loc int64 }

// claimRecord is what the clients were told about the claims of one
// token.
type claimRecord struct {
	acked   bool         // a claim was answered 200
	unknown bool         // a claim got no answer after every retry
	allocs  []allocation // what the acknowledged answer said was deducted
}

// traffic drives carts through the HTTP API of the replicas and records
// every answer: in rec, for the porcupine check, and in claims, for the
// ledger's accounting.
type traffic struct {
	shops  []int64
	client *http.Client
	seq    atomic.Int64
	rec    *history.Recorder

	basesMu sync.Mutex
	bases   []string // replica i's base URL; a restarted replica gets a new one

	// doubt is the base URL of the replica that starts unable to read its
	// flags; doubtOver is set just before its flags become readable, so
	// an answer from it seen while doubtOver is false was given while it
	// could not read them.
	doubt     string
	doubtOver atomic.Bool

	mu     sync.Mutex
	claims map[string]*claimRecord // by "shop/token"
	// violations are answers the client contract forbids.
	violations []string
	// answers counts every attempt's answer, by "op status error".
	answers map[string]int
	// doubtAnswers counts the doubt replica's answers while it could not
	// read its flags, by "op status error".
	doubtAnswers map[string]int
	// unanswered counts the attempts that got no answer, by base URL.
	unanswered map[string]int

	requests, retries, cut, gaveUp                                           atomic.Int64
	reserved, insufficient, claimed, released, abandoned, unknown, rejected  atomic.Int64
	refusalsReplayed, holdsReplayed, lateExpired, releasedAfter, claimedThen atomic.Int64
}

func newTraffic(bases []string, shops []int64) *traffic {
	return &traffic{
		bases:        slices.Clone(bases),
		shops:        shops,
		client:       &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxIdleConns: 256}},
		claims:       map[string]*claimRecord{},
		answers:      map[string]int{},
		doubtAnswers: map[string]int{},
		unanswered:   map[string]int{},
		rec:          history.New(),
	}
}

// base is replica i's URL (i modulo the replicas).
func (g *traffic) base(i int) string {
	g.basesMu.Lock()
	defer g.basesMu.Unlock()
	return g.bases[i%len(g.bases)]
}

// replace points replica i at its new URL (after a restart).
func (g *traffic) replace(i int, base string) {
	g.basesMu.Lock()
	defer g.basesMu.Unlock()
	g.bases[i] = base
}

func (g *traffic) replicas() int {
	g.basesMu.Lock()
	defer g.basesMu.Unlock()
	return len(g.bases)
}

// api is one worker's view of the reservation API as
// history.Reservations, so that its calls are recorded: a 2xx answer
// becomes a result, a domain error (404 not_found, 409 released,
// already_claimed, token_conflict, insufficient_stock, 410 expired, 400
// invalid_input) its reservation error, and no answer after every retry
// an error without a domain name, which the recorder takes as an unknown
// outcome. Every 503 (unavailable, flags_unavailable, claim_in_progress,
// contention, overloaded) and every cut connection is retried inside the
// call, on the next replica, with the same token: the retries of one call
// are one operation, from the first attempt to the last answer. Not safe
// for concurrent use.
type api struct {
	g *traffic
	// first is the replica the next call is sent to first.
	first int
	// how qualifies the next call's attempts.
	how attempts
	// code and body are the last answer's (code 0: none came).
	code int
	body []byte
	// retried: the last call was sent more than once.
	retried bool
}

var (
	_ history.Reservations = (*api)(nil)
	_ history.Retrier      = (*api)(nil)
)

// Retried reports whether the last call was sent more than once.
func (a *api) Retried() bool { return a.retried }

// errNoAnswer is a call that never got an answer.
var errNoAnswer = errors.New("soak: no answer after every retry")

func (a *api) do(op, method, path string, body any) {
	a.code, a.body, a.retried = a.g.call(op, a.first, a.how, method, path, body)
}

// errorCode is the "error" of an error answer's body.
func errorCode(body []byte) string {
	var p struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(body, &p)
	return p.Error
}

// failure turns an error answer into an error: a domain answer's
// sentinel, or (no answer, or an answer the contract does not name)
// an error the recorder takes as an unknown outcome.
func (a *api) failure() error {
	if a.code == 0 {
		return errNoAnswer
	}
	if err := reservation.AnswerError(errorCode(a.body)); err != nil {
		return fmt.Errorf("soak: %d %s: %w", a.code, a.body, err)
	}
	return fmt.Errorf("soak: %d %s", a.code, a.body)
}

func (a *api) Reserve(_ context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	a.do("reserve", "POST", fmt.Sprintf("/v1/shops/%d/reservations", p.Shop),
		map[string]any{"token": p.Token, "lines": p.Lines, "ttl_ms": p.TTL.Milliseconds()})
	var res struct {
		Error       string                   `json:"error"`
		Short       []reservation.ShortLine  `json:"short"`
		Allocations []reservation.Allocation `json:"allocations"`
		Replayed    bool                     `json:"replayed"`
	}
	switch a.code {
	case http.StatusCreated, http.StatusOK:
		if err := json.Unmarshal(a.body, &res); err != nil {
			return reservation.ReserveResult{}, fmt.Errorf("soak: reserve answer %s: %w", a.body, err)
		}
		return reservation.ReserveResult{Status: reservation.StatusReserved, Allocations: res.Allocations, Replayed: res.Replayed}, nil
	case http.StatusConflict:
		if err := json.Unmarshal(a.body, &res); err == nil && res.Error == "insufficient" {
			return reservation.ReserveResult{Status: reservation.StatusInsufficient, Short: res.Short, Replayed: res.Replayed}, nil
		}
	}
	return reservation.ReserveResult{}, a.failure()
}

func (a *api) Claim(_ context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	a.do("claim", "POST", fmt.Sprintf("/v1/shops/%d/reservations/%s/claim", p.Shop, p.Token), nil)
	if a.code != http.StatusOK {
		return reservation.ClaimResult{}, a.failure()
	}
	var res struct {
		Outcome     reservation.ClaimOutcome `json:"outcome"`
		Allocations []reservation.Allocation `json:"allocations"`
		Replayed    bool                     `json:"replayed"`
	}
	if err := json.Unmarshal(a.body, &res); err != nil {
		return reservation.ClaimResult{}, fmt.Errorf("soak: claim answer %s: %w", a.body, err)
	}
	return reservation.ClaimResult{Outcome: res.Outcome, Allocations: res.Allocations, Replayed: res.Replayed}, nil
}

func (a *api) Release(_ context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	a.do("release", "POST", fmt.Sprintf("/v1/shops/%d/reservations/%s/release", p.Shop, p.Token), nil)
	if a.code != http.StatusOK {
		return reservation.ReleaseResult{}, a.failure()
	}
	var res struct {
		Released    bool                     `json:"released"`
		Allocations []reservation.Allocation `json:"allocations"`
	}
	if err := json.Unmarshal(a.body, &res); err != nil {
		return reservation.ReleaseResult{}, fmt.Errorf("soak: release answer %s: %w", a.body, err)
	}
	return reservation.ReleaseResult{Released: res.Released, Allocations: res.Allocations}, nil
}

// answer says what a's last call got, for a violation's message.
func (a *api) answer() string {
	if a.code == 0 {
		return "no answer"
	}
	return fmt.Sprintf("%d %s", a.code, bytes.TrimSpace(a.body))
}

func (g *traffic) violate(format string, args ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.violations) < 50 {
		g.violations = append(g.violations, fmt.Sprintf(format, args...))
	}
}

// attempts qualifies how a call is sent.
type attempts struct {
	// cut, when set, gives up on the first attempt's answer that long
	// after sending it: the server may have done the call all the same.
	cut time.Duration
	// once: no retry; without an answer the outcome stays unknown.
	once bool
}

// pick chooses how a call is sent: mostly patiently, now and then with
// its first attempt cut, or given up after one attempt.
func pick(rnd *rand.Rand) attempts {
	var how attempts
	if rnd.IntN(1000) < cutPerMille {
		how.cut = time.Duration(rnd.Int64N(int64(4 * time.Millisecond)))
	}
	how.once = rnd.IntN(1000) < impatientPerMille
	return how
}

// call sends one request to replica first; on a cut connection or a 5xx
// it sends the same request again (every call is idempotent on its
// token) to the next replica, backing off, for up to callBudget. It
// returns 0 when no answer ever came, and whether it sent the request
// more than once.
func (g *traffic) call(op string, first int, how attempts, method, path string, body any) (code int, answer []byte, retried bool) {
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	deadline := time.Now().Add(callBudget)
	backoff := 25 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			g.retries.Add(1)
		}
		g.requests.Add(1)
		base := g.base(first + attempt)
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if attempt == 0 && how.cut > 0 {
			ctx, cancel = context.WithTimeout(ctx, how.cut)
			g.cut.Add(1)
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(b))
		if err != nil {
			cancel()
			return 0, nil, attempt > 0
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+apiToken)
		code, answer = 0, nil
		if res, err := g.client.Do(req); err == nil {
			out, rerr := io.ReadAll(io.LimitReader(res.Body, 1<<16))
			res.Body.Close()
			if rerr == nil {
				code, answer = res.StatusCode, out
			}
		}
		cancel()
		g.tally(op, base, code, answer)
		if code != 0 && code < 500 {
			return code, answer, attempt > 0
		}
		if how.once {
			g.gaveUp.Add(1)
			return 0, nil, false
		}
		if time.Now().Add(backoff).After(deadline) {
			return 0, nil, true
		}
		time.Sleep(backoff) // a client's backoff before its retry
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// tally counts one attempt's answer (after it arrived).
func (g *traffic) tally(op, base string, code int, body []byte) {
	key := op + " transport_error"
	if code != 0 {
		key = fmt.Sprintf("%s %d", op, code)
		if code >= 400 {
			key += " " + errorCode(body)
		}
	}
	// A cut attempt got no answer to judge.
	doubt := code != 0 && base == g.doubt && !g.doubtOver.Load()
	g.mu.Lock()
	g.answers[key]++
	if doubt {
		g.doubtAnswers[key]++
	}
	if code == 0 {
		g.unanswered[base]++
	}
	g.mu.Unlock()
	if code >= 500 && code != http.StatusServiceUnavailable {
		g.violate("%s via %s: %d %s (only 503 says the outcome is unknown)", op, base, code, bytes.TrimSpace(body))
	}
}

// claimAnswer records what a claim of shop/token (id) was told.
func (g *traffic) claimAnswer(id string, res reservation.ClaimResult, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.claims[id]
	if c == nil {
		c = &claimRecord{}
		g.claims[id] = c
	}
	switch {
	case err == nil:
		c.acked = true
		c.allocs = c.allocs[:0]
		for _, al := range res.Allocations {
			c.allocs = append(c.allocs, allocation{al.Item, al.Location, al.Quantity})
		}
	case reservation.AnswerName(err) == "":
		c.unknown = true
	}
}

// run sends carts from workers clients until ctx ends; worker w sends
// each call to replica w mod replicas first, so every replica serves
// every shop (and the doubt replica gets its share while it cannot).
func (g *traffic) run(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			a := &api{g: g}
			c := g.rec.Client(a)
			for ctx.Err() == nil {
				g.cart(ctx, rnd, w%g.replicas(), a, c)
			}
		})
	}
	wg.Wait()
}

// pause waits d (a buyer paying, or coming back) unless ctx ends first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// noAnswer: the call's outcome is unknown (no answer after every retry,
// or an answer the contract does not name, which is also a violation).
func (g *traffic) noAnswer(what string, a *api, err error) bool {
	if err == nil || reservation.AnswerName(err) != "" {
		return false
	}
	g.unknown.Add(1)
	if !errors.Is(err, errNoAnswer) {
		g.violate("%s: %s (not an answer of the client contract)", what, a.answer())
	}
	return true
}

// cart is one buyer's cart through a, recorded by c: a reserve, then a
// claim, a release or nothing (abandoned: the hold expires), with the
// late and repeated calls a real client makes.
func (g *traffic) cart(ctx context.Context, rnd *rand.Rand, home int, a *api, c *history.Client) {
	bg := context.Background() // a call under way is finished, not cut
	shop := g.shops[rnd.IntN(len(g.shops))]
	token := fmt.Sprintf("soak-%d", g.seq.Add(1))
	id := fmt.Sprintf("%d/%s", shop, token)
	abandon := rnd.IntN(100) < 12
	hold := ttl
	if abandon {
		hold = abandonTL
	}
	rp := &reservation.ReserveParams{Shop: shop, Token: token, Lines: demo.RandomCart(rnd, items, hotItems), TTL: hold}
	other := func() int { return rnd.IntN(g.replicas()) }

	a.first, a.how = home, pick(rnd)
	sent := time.Now()
	res, err := c.Reserve(bg, rp)
	answered := time.Now()
	switch {
	case g.noAnswer("reserve "+id, a, err):
		return
	case err != nil:
		g.rejected.Add(1)
		g.violate("reserve %s (a new token): %s", id, a.answer())
		return
	case res.Status == reservation.StatusInsufficient:
		g.insufficient.Add(1)
		if rnd.IntN(4) == 0 {
			// The buyer tries the spent token again: the refusal,
			// replayed, whatever the stock now.
			a.first, a.how = other(), pick(rnd)
			res, err := c.Reserve(bg, rp)
			switch {
			case g.noAnswer("repeated reserve "+id, a, err):
			case err == nil && res.Status == reservation.StatusInsufficient && res.Replayed:
				g.refusalsReplayed.Add(1)
			default:
				g.violate("repeated reserve of %s, refused before: want 409 insufficient replayed, got %s", id, a.answer())
			}
		}
		return
	}
	g.reserved.Add(1)
	// The store's clock started the hold between sent and answered.
	expiresFrom, expiresBy := sent.Add(hold), answered.Add(hold)

	// Paying takes a moment; now and then a few seconds.
	wait := time.Duration(rnd.Int64N(int64(200 * time.Millisecond)))
	if !abandon && rnd.IntN(8) == 0 {
		wait = time.Second + time.Duration(rnd.Int64N(int64(hold/3)))
	}
	if !pause(ctx, wait) {
		g.abandoned.Add(1)
		return
	}
	if rnd.IntN(20) == 0 {
		// A repeated reserve (a double click): the hold, replayed.
		a.first, a.how = other(), pick(rnd)
		again, err := c.Reserve(bg, rp)
		switch {
		case g.noAnswer("repeated reserve "+id, a, err):
		case err == nil && again.Status == reservation.StatusReserved && again.Replayed && sameAllocations(res.Allocations, again.Allocations):
			g.holdsReplayed.Add(1)
		case time.Now().Before(expiresFrom.Add(-clockMargin)):
			g.violate("repeated reserve of %s within its hold: want 200 replayed with %v, got %s", id, res.Allocations, a.answer())
		}
	}

	switch {
	case abandon:
		g.abandoned.Add(1)
		if rnd.IntN(2) == 1 {
			return
		}
		// A late claim of the abandoned cart, once its hold has expired:
		// 410 expired; never 404 (the token held), never a sale.
		if !pause(ctx, time.Until(expiresBy.Add(750*time.Millisecond))) {
			return
		}
		a.first, a.how = other(), pick(rnd)
		cres, err := c.Claim(bg, &reservation.ClaimParams{Shop: shop, Token: token})
		g.claimAnswer(id, cres, err)
		switch {
		case g.noAnswer("late claim "+id, a, err):
		case reservation.AnswerName(err) == "expired":
			g.lateExpired.Add(1)
		default:
			g.violate("late claim of %s (its hold expired by %s): want 410 expired, got %s", id, expiresBy.Format("15:04:05.000"), a.answer())
		}
	case rnd.IntN(100) < 68:
		// Payment captured: claim, through another replica half the time.
		if rnd.IntN(2) == 0 {
			a.first, a.how = other(), pick(rnd)
		} else {
			a.first, a.how = home, pick(rnd)
		}
		cres, err := c.Claim(bg, &reservation.ClaimParams{Shop: shop, Token: token})
		done := time.Now()
		g.claimAnswer(id, cres, err)
		switch {
		case g.noAnswer("claim "+id, a, err):
			return
		case err != nil:
			g.rejected.Add(1)
			// An acknowledged hold is claimable until it expires.
			if done.Before(expiresFrom.Add(-clockMargin)) {
				g.violate("claim of %s answered %s after the reserve, within its %s hold: %s", id, done.Sub(sent).Round(time.Millisecond), hold, a.answer())
			}
			return
		case cres.Outcome != reservation.OutcomeClaimed:
			g.violate("claim of %s: 200 with outcome %q", id, cres.Outcome)
		}
		g.claimed.Add(1)
		if rnd.IntN(8) == 0 {
			// A release after the claim (a payment flow that lost
			// track): 409 already_claimed, nothing goes back.
			a.first, a.how = other(), pick(rnd)
			_, err := c.Release(bg, &reservation.ReleaseParams{Shop: shop, Token: token})
			switch {
			case g.noAnswer("release after claim "+id, a, err):
			case reservation.AnswerName(err) == "already_claimed":
				g.claimedThen.Add(1)
			default:
				g.violate("release of %s after its acknowledged claim: want 409 already_claimed, got %s", id, a.answer())
			}
		}
	default:
		// Payment failed: release.
		a.first, a.how = home, pick(rnd)
		rres, err := c.Release(bg, &reservation.ReleaseParams{Shop: shop, Token: token})
		done := time.Now()
		switch {
		case g.noAnswer("release "+id, a, err):
			return
		case err != nil:
			g.rejected.Add(1)
			g.violate("release of %s: %s", id, a.answer())
			return
		case !rres.Released && !a.retried && done.Before(expiresFrom.Add(-clockMargin)):
			g.violate("release of %s within its hold found nothing to release: %s", id, a.answer())
		}
		g.released.Add(1)
		if rnd.IntN(4) == 0 {
			// A claim after the release (a late payment callback):
			// 409 released; never a sale.
			a.first, a.how = other(), pick(rnd)
			cres, err := c.Claim(bg, &reservation.ClaimParams{Shop: shop, Token: token})
			g.claimAnswer(id, cres, err)
			switch {
			case g.noAnswer("claim after release "+id, a, err):
			case reservation.AnswerName(err) == "released":
				g.releasedAfter.Add(1)
			default:
				g.violate("claim of %s after its acknowledged release: want 409 released, got %s", id, a.answer())
			}
		}
	}
}

func sameAllocations(a, b []reservation.Allocation) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	reservation.SortAllocations(a)
	reservation.SortAllocations(b)
	return slices.Equal(a, b)
}

func (g *traffic) summary() string {
	g.mu.Lock()
	byCode := map[string]float64{}
	for k, n := range g.answers {
		_, rest, _ := strings.Cut(k, " ")
		if strings.HasPrefix(rest, "5") || strings.HasPrefix(rest, "transport") {
			byCode[rest] += float64(n)
		}
	}
	g.mu.Unlock()
	return fmt.Sprintf("%d requests (%d retries; %d first attempts cut, %d calls given up after one attempt; failed attempts: %s): %d reserved, %d insufficient, %d claimed, %d released, %d abandoned; "+
		"%d refusals replayed, %d holds replayed, %d late claims answered 410 expired, %d claims after a release answered 409 released, "+
		"%d releases after a claim answered 409 already_claimed; %d calls without an answer, %d refused",
		g.requests.Load(), g.retries.Load(), g.cut.Load(), g.gaveUp.Load(), sortedJoin(byCode), g.reserved.Load(), g.insufficient.Load(), g.claimed.Load(), g.released.Load(), g.abandoned.Load(),
		g.refusalsReplayed.Load(), g.holdsReplayed.Load(), g.lateExpired.Load(), g.releasedAfter.Load(), g.claimedThen.Load(),
		g.unknown.Load(), g.rejected.Load())
}

// unansweredBy is how many attempts sent to base got no answer.
func (g *traffic) unansweredBy(base string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.unanswered[base]
}

// doubtTally is what the doubt replica answered while it could not read
// its flags, by "op status error".
func (g *traffic) doubtTally() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.doubtAnswers)
}
