package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed31b0e981/reservoir/internal/demo"
	"github.com/seed31b0e981/reservoir/internal/history"
	"github.com/seed31b0e981/reservoir/reservation"
)

// Stock: every shop has items 1..items at each location; the first hotItems
// have more stock and get a third of the cart lines.
const (
	items     = 30
	hotItems  = 3
	hotStock  = 1500
	coldStock = 120
	ttlMs     = 8000 // a cart's hold
	abandonMs = 1500 // an abandoned cart's hold
)

var locations = []int64{1, 2}

type allocation struct {
	Item     int64 `json:"item"`
	Location int64 `json:"location"`
	Quantity int64 `json:"quantity"`
}

// cartKey names an item x location of a shop.
type cartKey struct{ shop, item, loc int64 }

// fate is what the client side knows of one token.
type fate struct {
	shop       int64
	reservedAt time.Time
	reserved   bool // a 200/201 was received
	reserveUnk bool // no answer after every retry
	claimed    bool // a 200 claim was received
	claimUnk   bool // no answer after every retry
	claimAlloc []allocation
	released   bool
}

// traffic drives carts through the HTTP API of several replicas and records
// every acknowledged answer: in fates, for the ledger and claims-table
// accounting, and in rec, for the porcupine check.
type traffic struct {
	bases  []string
	shops  []int64
	client *http.Client
	seq    atomic.Int64
	rec    *history.Recorder

	mu    sync.Mutex
	fates map[string]*fate
	// violations are answers the design forbids (e.g. an acknowledged,
	// unexpired hold that cannot be claimed).
	violations []string

	requests, retries, reserved, insufficient, claimed, released, abandoned atomic.Int64
	unknown, rejected                                                       atomic.Int64
}

func newTraffic(bases []string, shops []int64) *traffic {
	return &traffic{
		bases:  bases,
		shops:  shops,
		client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32, MaxIdleConns: 128}},
		fates:  map[string]*fate{},
		rec:    history.New(),
	}
}

// api is one worker's view of the reservation API as
// history.Reservations, so that its calls are recorded: a 2xx answer
// becomes a result, a domain error (404, 409, 410) its reservation error,
// and no answer after every retry an error without a domain name, which
// the recorder takes as an unknown outcome. The retries of one call (call
// retries transport errors and 5xx for up to 10s) are one operation, from
// the first attempt to the last answer. Not safe for concurrent use.
type api struct {
	g *traffic
	// base is the replica the next call goes to.
	base string
	// code and body are the last answer's, for the traffic's bookkeeping.
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

// to sends the next call to base and forgets the last answer.
func (a *api) to(base string) {
	a.base, a.code, a.body, a.retried = base, 0, nil, false
}

func (a *api) do(method, path string, body any) {
	a.code, a.body, a.retried = a.g.call(a.base, method, path, body)
}

// failure turns an error answer into an error.
func (a *api) failure() error {
	if a.code == 0 {
		return errNoAnswer
	}
	var p struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(a.body, &p)
	if err := reservation.AnswerError(p.Error); err != nil {
		return fmt.Errorf("soak: %d %s: %w", a.code, a.body, err)
	}
	return fmt.Errorf("soak: %d %s", a.code, a.body)
}

func (a *api) Reserve(_ context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	a.do("POST", fmt.Sprintf("/v1/shops/%d/reservations", p.Shop),
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
			return reservation.ReserveResult{Status: reservation.StatusInsufficient, Short: res.Short}, nil
		}
	}
	return reservation.ReserveResult{}, a.failure()
}

func (a *api) Claim(_ context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	a.do("POST", fmt.Sprintf("/v1/shops/%d/reservations/%s/claim", p.Shop, p.Token), nil)
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
	a.do("POST", fmt.Sprintf("/v1/shops/%d/reservations/%s/release", p.Shop, p.Token), nil)
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

func (g *traffic) violate(format string, args ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.violations) < 50 {
		g.violations = append(g.violations, fmt.Sprintf(format, args...))
	}
}

// call sends one request, retrying transport errors and 5xx (every call is
// idempotent) for up to 10s. It returns 0 when no answer ever came, and
// whether it sent the request more than once.
func (g *traffic) call(base, method, path string, body any) (code int, answer []byte, retried bool) {
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	deadline := time.Now().Add(10 * time.Second)
	backoff := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			g.retries.Add(1)
		}
		g.requests.Add(1)
		req, err := http.NewRequest(method, base+path, bytes.NewReader(b))
		if err != nil {
			return 0, nil, attempt > 0
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := g.client.Do(req)
		if err == nil {
			out, rerr := io.ReadAll(io.LimitReader(res.Body, 1<<16))
			res.Body.Close()
			if rerr == nil && res.StatusCode < 500 {
				return res.StatusCode, out, attempt > 0
			}
		}
		if time.Now().Add(backoff).After(deadline) {
			return 0, nil, true
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// run sends carts from workers clients until ctx ends; worker w talks to
// replica w mod len(bases), so every replica serves every shop.
func (g *traffic) run(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			base := g.bases[w%len(g.bases)]
			a := &api{g: g}
			c := g.rec.Client(a)
			for ctx.Err() == nil {
				g.cart(rnd, base, a, c)
			}
		})
	}
	wg.Wait()
}

// cart is one buyer's cart through a, recorded by c.
func (g *traffic) cart(rnd *rand.Rand, base string, a *api, c *history.Client) {
	ctx := context.Background()
	shop := g.shops[rnd.IntN(len(g.shops))]
	lines := demo.RandomCart(rnd, items, hotItems)
	token := fmt.Sprintf("soak-%d", g.seq.Add(1))
	f := &fate{shop: shop}
	g.mu.Lock()
	g.fates[token] = f
	g.mu.Unlock()

	r := rnd.Float64()
	ttl := ttlMs
	if r >= 0.95 {
		ttl = abandonMs
	}
	start := time.Now()
	a.to(base)
	if _, err := c.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: token, Lines: lines, TTL: time.Duration(ttl) * time.Millisecond}); a.code == 0 && !errors.Is(err, errNoAnswer) {
		g.violate("reserve %s: not sent: %v", token, err)
		return
	}
	code, body := a.code, a.body
	g.mu.Lock()
	switch code {
	case http.StatusCreated, http.StatusOK:
		f.reserved, f.reservedAt = true, start
	case 0:
		f.reserveUnk = true
	}
	g.mu.Unlock()
	switch code {
	case http.StatusCreated, http.StatusOK:
		g.reserved.Add(1)
	case http.StatusConflict:
		g.insufficient.Add(1)
		return
	case 0:
		g.unknown.Add(1)
		return
	default:
		g.rejected.Add(1)
		g.violate("reserve %s via %s: %d %s", token, base, code, body)
		return
	}
	switch {
	case r < 0.72:
		// Claims go through another replica half of the time.
		cb := base
		if rnd.IntN(2) == 0 {
			cb = g.bases[rnd.IntN(len(g.bases))]
		}
		a.to(cb)
		_, _ = c.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token}) // a.code says what came back
		code, body := a.code, a.body
		switch code {
		case http.StatusOK:
			var res struct {
				Outcome     string       `json:"outcome"`
				Allocations []allocation `json:"allocations"`
			}
			if err := json.Unmarshal(body, &res); err != nil || res.Outcome != "claimed" {
				g.violate("claim %s: 200 with %s (%v)", token, body, err)
			}
			g.mu.Lock()
			f.claimed, f.claimAlloc = true, res.Allocations
			g.mu.Unlock()
			g.claimed.Add(1)
		case 0:
			g.mu.Lock()
			f.claimUnk = true
			g.mu.Unlock()
			g.unknown.Add(1)
		default:
			// Invariant 3: an acknowledged hold can be claimed until it
			// expires. A refusal well inside the TTL is a violation.
			if time.Since(start) < time.Duration(ttl)*time.Millisecond-time.Second {
				g.violate("invariant 3: claim %s via %s %s after the reserve: %d %s", token, cb, time.Since(start).Round(time.Millisecond), code, body)
			}
			g.rejected.Add(1)
		}
	case r < 0.95:
		a.to(base)
		_, _ = c.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: token}) // a.code says what came back
		code, body := a.code, a.body
		switch code {
		case http.StatusOK:
			g.mu.Lock()
			f.released = true
			g.mu.Unlock()
			g.released.Add(1)
		case 0:
			g.unknown.Add(1)
		default:
			g.rejected.Add(1)
			g.violate("release %s: %d %s", token, code, body)
		}
	default:
		g.abandoned.Add(1)
	}
}

func (g *traffic) summary() string {
	return fmt.Sprintf("%d requests (%d retries): %d reserved, %d insufficient, %d claimed, %d released, %d abandoned, %d without an answer, %d rejected",
		g.requests.Load(), g.retries.Load(), g.reserved.Load(), g.insufficient.Load(), g.claimed.Load(), g.released.Load(),
		g.abandoned.Load(), g.unknown.Load(), g.rejected.Load())
}
