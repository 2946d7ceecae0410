package demo

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

	"github.com/seed31b0e981/reservoir/reservation"
)

// traffic is the demo's checkout load, sent through the HTTP API like a
// checkout service's: carts of 1 to 3 lines over many items with a few hot
// ones, reserve then claim (most), release (some) or abandon (a few, left
// to expire); stock reads; merchant restocks; and, every FlashEvery, a
// flash sale that drains one item in seconds. Its request rate is capped
// and it stops when its context ends; every request is bounded by the
// client's timeout.
type traffic struct {
	base    string
	client  *http.Client
	rate    int
	workers int
	p       *printer
	flash   time.Duration
	pick    []int // pod index per weight unit

	flashOn                                          atomic.Bool
	requests, reserved, insufficient, claimed        atomic.Int64
	released, abandoned, failed, rejected, restocked atomic.Int64
	flashSold, flashRefused                          atomic.Int64
	seq                                              atomic.Int64
}

func newTraffic(base, clientToken string, cfg Config, p *printer) *traffic {
	g := &traffic{
		base: base,
		client: &http.Client{Timeout: 10 * time.Second, Transport: bearer{token: clientToken,
			next: &http.Transport{MaxIdleConnsPerHost: cfg.Workers, MaxIdleConns: cfg.Workers}}},
		rate:    cfg.Rate,
		workers: cfg.Workers,
		p:       p,
		flash:   cfg.FlashEvery,
	}
	for i, ps := range pods {
		for range ps.weight {
			g.pick = append(g.pick, i)
		}
	}
	return g
}

// bearer sends every request with the demo client's token, and a body
// as JSON.
type bearer struct {
	token string
	next  http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	if r.Body != nil && r.Header.Get("Content-Type") == "" {
		r.Header.Set("Content-Type", "application/json")
	}
	return b.next.RoundTrip(r)
}

// run sends traffic until ctx ends.
func (g *traffic) run(ctx context.Context) {
	defer g.client.CloseIdleConnections()
	tick := time.NewTicker(time.Second / time.Duration(g.rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	for w := range g.workers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for ctx.Err() == nil {
				g.flow(ctx, rnd, tick.C)
			}
		})
	}
	wg.Go(func() { g.flashSales(ctx) })
	wg.Wait()
}

// send waits for the rate limiter, then makes one request and returns its
// status (0 when it failed).
func (g *traffic) send(ctx context.Context, tick <-chan time.Time, method, path string, body any) (int, []byte) {
	select {
	case <-tick:
	case <-ctx.Done():
		return 0, nil
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), method, g.base+path, rd)
	if err != nil {
		return 0, nil
	}
	req.Header.Set("Content-Type", "application/json")
	g.requests.Add(1)
	res, err := g.client.Do(req)
	if err != nil {
		g.failed.Add(1)
		return 0, nil
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<16))
	switch {
	case res.StatusCode >= 500:
		g.failed.Add(1)
	case res.StatusCode >= 400 && res.StatusCode != http.StatusConflict:
		g.rejected.Add(1)
	}
	return res.StatusCode, b
}

// RandomCart draws a checkout-like cart: 1 to 3 distinct items out of
// items, a line landing on one of the first hot items 35% of the time, 1 to
// 3 units each, locations 1 and 2 in a random preference order (or just
// one). The demo's traffic and the soak test share it.
func RandomCart(rnd *rand.Rand, items, hot int) []reservation.Line {
	n := 1 + rnd.IntN(3)
	seen := map[int64]bool{}
	var lines []reservation.Line
	for len(lines) < n {
		item := int64(hot + 1 + rnd.IntN(items-hot))
		if rnd.Float64() < 0.35 {
			item = int64(1 + rnd.IntN(hot))
		}
		if seen[item] {
			continue
		}
		seen[item] = true
		locs := [][]int64{{1, 2}, {2, 1}, {1}, {2}}[rnd.IntN(4)]
		lines = append(lines, reservation.Line{Item: item, Quantity: int64(1 + rnd.IntN(3)), Locations: locs})
	}
	return lines
}

// flow is one buyer: mostly a cart that is reserved, then claimed or
// released; sometimes a stock read or a merchant restock.
func (g *traffic) flow(ctx context.Context, rnd *rand.Rand, tick <-chan time.Time) {
	if g.flashOn.Load() && rnd.IntN(2) == 0 {
		g.flashBuyer(ctx, rnd, tick)
		return
	}
	ps := pods[g.pick[rnd.IntN(len(g.pick))]]
	shop := ps.shops[rnd.IntN(len(ps.shops))]
	switch r := rnd.Float64(); {
	case r < 0.08:
		g.send(ctx, tick, "GET", fmt.Sprintf("/v1/shops/%d/items/%d/availability", shop, 1+rnd.IntN(items)), nil)
		return
	case r < 0.11:
		item, loc := 1+rnd.IntN(items), locations[rnd.IntN(len(locations))]
		if code, _ := g.send(ctx, tick, "POST", fmt.Sprintf("/v1/shops/%d/items/%d/locations/%d/adjust", shop, item, loc),
			map[string]any{"delta": 5 + rnd.IntN(25)}); code == http.StatusOK {
			g.restocked.Add(1)
		}
		return
	}
	lines := RandomCart(rnd, items, hotItems)
	g.cart(ctx, rnd, tick, shop, lines)
}

// cart reserves lines, then claims (72%), releases (23%) or abandons the
// hold to expire (5%, with a short TTL).
func (g *traffic) cart(ctx context.Context, rnd *rand.Rand, tick <-chan time.Time, shop int64, lines []reservation.Line) bool {
	token := fmt.Sprintf("demo-%d", g.seq.Add(1))
	fate := rnd.Float64()
	ttl := 30000
	if fate >= 0.95 {
		ttl = 3000
	}
	code, _ := g.send(ctx, tick, "POST", fmt.Sprintf("/v1/shops/%d/reservations", shop), map[string]any{"token": token, "lines": lines, "ttl_ms": ttl})
	switch code {
	case http.StatusCreated:
		g.reserved.Add(1)
	case http.StatusConflict:
		g.insufficient.Add(1)
		return false
	default:
		return false
	}
	switch {
	case fate < 0.72:
		if code, _ := g.send(ctx, tick, "POST", fmt.Sprintf("/v1/shops/%d/reservations/%s/claim", shop, token), nil); code == http.StatusOK {
			g.claimed.Add(1)
		}
	case fate < 0.95:
		if code, _ := g.send(ctx, tick, "POST", fmt.Sprintf("/v1/shops/%d/reservations/%s/release", shop, token), nil); code == http.StatusOK {
			g.released.Add(1)
		}
	default:
		g.abandoned.Add(1)
	}
	return true
}

// flashBuyer goes for the flash sale item.
func (g *traffic) flashBuyer(ctx context.Context, rnd *rand.Rand, tick <-chan time.Time) {
	if g.cart(ctx, rnd, tick, flashShop, []reservation.Line{{Item: flashItem, Quantity: int64(1 + rnd.IntN(2)), Locations: []int64{1}}}) {
		g.flashSold.Add(1)
	} else {
		g.flashRefused.Add(1)
	}
}

// flashSales starts a flash sale after a third of FlashEvery, then every
// FlashEvery: the merchant puts flashUnits of one item on sale and half of
// the buyers rush it for 15 seconds.
func (g *traffic) flashSales(ctx context.Context) {
	wait := g.flash / 3
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = g.flash
		req, _ := http.NewRequestWithContext(ctx, "POST", fmt.Sprintf("%s/v1/shops/%d/items/%d/locations/1/adjust", g.base, flashShop, flashItem),
			bytes.NewReader([]byte(fmt.Sprintf(`{"available": %d}`, flashUnits))))
		res, err := g.client.Do(req)
		if err != nil {
			continue
		}
		res.Body.Close()
		sold, refused := g.flashSold.Load(), g.flashRefused.Load()
		g.p.say("flash sale: shop %d item %d, %d units, half of the buyers rush it for 15s", flashShop, flashItem, flashUnits)
		g.flashOn.Store(true)
		select {
		case <-ctx.Done():
			g.flashOn.Store(false)
			return
		case <-time.After(15 * time.Second):
		}
		g.flashOn.Store(false)
		g.p.say("flash sale over: %d carts got units, %d were refused (409 insufficient) once it sold out",
			g.flashSold.Load()-sold, g.flashRefused.Load()-refused)
	}
}

func (g *traffic) totals() string {
	return fmt.Sprintf("%d requests: %d reserved (%d insufficient), %d claimed, %d released, %d abandoned to expire, %d restocks, %d failed, %d rejected",
		g.requests.Load(), g.reserved.Load(), g.insufficient.Load(), g.claimed.Load(), g.released.Load(), g.abandoned.Load(),
		g.restocked.Load(), g.failed.Load(), g.rejected.Load())
}
