package dualwrite

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/reservation"
)

// shadowCall is a shadow operation in flight. Its outcome arrives on done.
type shadowCall struct {
	done chan compare.Outcome
	// skipped: no slot was free; done already holds the Skipped outcome and
	// after was not called.
	skipped bool
}

// startShadow runs op against the shadow store in its own goroutine, in a
// slot, under the shadow deadline, detached from the caller's cancellation
// (in shadow mode the caller returns first; the shadow must still finish).
// When every slot is busy it does not run op: the outcome says Skipped.
// A panic in op is recovered and reported as an outcome.
//
// after, when non-nil, runs in the same goroutine and slot once op is done
// and its outcome is on done; the facade uses it to compare and clean up
// without another goroutine. It is not called when the call is skipped.
//
// Shadow calls of one token run in the order they were started: a claim's
// comparison must not overtake the shadow reserve it looks for, which may
// still be running when the caller claims.
func (f *Facade) startShadow(ctx context.Context, key tokenKey, store reservation.Authority, op func(ctx context.Context) compare.Outcome, after func(compare.Outcome)) shadowCall {
	call := shadowCall{done: make(chan compare.Outcome, 1)}
	select {
	case f.slots <- struct{}{}:
	default:
		f.metrics.shadowSkipped.Inc()
		call.done <- compare.Outcome{Store: store, Skipped: true}
		call.skipped = true
		return call
	}
	prev, mine := f.order.enter(key)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer func() { <-f.slots }()
		defer f.order.leave(key, mine)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.ShadowTimeout)
		defer cancel()
		if prev != nil {
			select {
			case <-prev:
			case <-sctx.Done():
			}
		}
		out := runRecovered(sctx, store, op)
		if sctx.Err() != nil && (out.Err == nil || errors.Is(out.Err, context.DeadlineExceeded)) {
			out.TimedOut = true
		}
		if out.Panicked {
			f.metrics.shadowPanics.Inc()
		}
		call.done <- out
		if after != nil {
			after(out)
		}
	}()
	return call
}

func runRecovered(ctx context.Context, store reservation.Authority, op func(ctx context.Context) compare.Outcome) (out compare.Outcome) {
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			out = compare.Outcome{Store: store, Panicked: true, Err: fmt.Errorf("dualwrite: shadow %s panicked: %v", store, r)}
		}
		out.Store = store
		out.Latency = time.Since(start)
	}()
	return op(ctx)
}

// tokenKey identifies a reservation; the zero key (no token) is not ordered.
type tokenKey struct {
	shop  int64
	token string
}

// tokenOrder chains the shadow calls of each token: each call waits for the
// one started before it. It holds at most one entry per shadow call in
// flight, so it is bounded by the slots.
type tokenOrder struct {
	mu   sync.Mutex
	last map[tokenKey]chan struct{}
}

// enter registers a call for key and returns the channel of the call before
// it (nil if none) and this call's own channel, closed by leave.
func (o *tokenOrder) enter(key tokenKey) (prev, mine chan struct{}) {
	if key.token == "" {
		return nil, nil
	}
	mine = make(chan struct{})
	o.mu.Lock()
	defer o.mu.Unlock()
	prev = o.last[key]
	o.last[key] = mine
	return prev, mine
}

func (o *tokenOrder) leave(key tokenKey, mine chan struct{}) {
	if mine == nil {
		return
	}
	close(mine)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.last[key] == mine {
		delete(o.last, key)
	}
}
