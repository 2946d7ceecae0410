package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed31b0e981/reservoir/internal/demo"
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
// every acknowledged answer.
type traffic struct {
	bases  []string
	shops  []int64
	client *http.Client
	seq    atomic.Int64

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
	}
}

func (g *traffic) violate(format string, args ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.violations) < 50 {
		g.violations = append(g.violations, fmt.Sprintf(format, args...))
	}
}

// call sends one request, retrying transport errors and 5xx (every call is
// idempotent) for up to 10s. It returns 0 when no answer ever came.
func (g *traffic) call(base, method, path string, body any) (int, []byte) {
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
			return 0, nil
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := g.client.Do(req)
		if err == nil {
			out, rerr := io.ReadAll(io.LimitReader(res.Body, 1<<16))
			res.Body.Close()
			if rerr == nil && res.StatusCode < 500 {
				return res.StatusCode, out
			}
		}
		if time.Now().Add(backoff).After(deadline) {
			return 0, nil
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
			for ctx.Err() == nil {
				g.cart(rnd, base)
			}
		})
	}
	wg.Wait()
}

func (g *traffic) cart(rnd *rand.Rand, base string) {
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
	code, body := g.call(base, "POST", fmt.Sprintf("/v1/shops/%d/reservations", shop), map[string]any{"token": token, "lines": lines, "ttl_ms": ttl})
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
		code, body := g.call(cb, "POST", fmt.Sprintf("/v1/shops/%d/reservations/%s/claim", shop, token), nil)
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
		code, body := g.call(base, "POST", fmt.Sprintf("/v1/shops/%d/reservations/%s/release", shop, token), nil)
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
