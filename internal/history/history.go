// Package history records what callers of the reservation facade did and
// were told, and checks that record against a sequential model of one
// item (every location of it) with porcupine, the linearizability checker
// etcd's robustness tests use.
//
// Every call is recorded with its call and return time, its input and its
// answer. A call that got no answer (a timeout, a cut connection, any error
// that is not one of the reservation package's domain answers) is recorded
// as unknown: it may or may not have taken effect, at any time after it
// was called, and the model explores both. Calls are split by item: a cart
// of several lines becomes one operation per line, each checked in its
// item's partition, whose state holds every location of the item (a line
// may name several eligible locations, and the answer says which served
// it). A hold's TTL is recorded too: from its deadline on, the model lets
// the hold expire and its units come back.
//
// Every call is also recorded whole (Call: the full allocations, the
// hold's expiry, the server that answered), GETs included, for the reads
// check (CheckReads, reads.go): token by token, what a caller reads back
// and claims against the answer that acknowledged its reservation.
//
// It owns recording and checking only: it never calls a store on its own,
// and it knows nothing of modes, fences or faults. Its model is what the
// deciding store promises, whichever store that is:
//   - a token is absent until reserved, then held, and every state after
//     that is final: claimed, released, expired, or refused (its reserve
//     was answered insufficient). Those tombstones outlive any history, so
//     a token that left "held" never holds units again;
//   - reserve of an absent token holds the line only while unheld stock
//     covers it, and refuses it (insufficient, which refuses the token on
//     every item of its cart) only when some line is not covered: no
//     oversell, no undersell;
//   - a repeated reserve is answered from the token's state: its hold or
//     its refusal replayed, never a second hold, and never a hold for a
//     refused token (a delayed first attempt creates nothing);
//     "already_claimed", "released" or "expired" for the other tombstones;
//   - claim and release only of a held reservation, each at most once; a
//     repeated claim is answered as a replay, a claimed token is never
//     released, a released one never claimed. A claim of a token that
//     held is answered from its tombstone ("released", "expired"), never
//     "not_found", which only a token that never held anything gets;
//   - a hold past its deadline may still be claimed or released (no store
//     reaps the instant it expires); once an answer said it expired, it
//     stays expired.
package history

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Reservations is what the recorder wraps: the facade, or a single store.
type Reservations interface {
	Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error)
	Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error)
	Release(ctx context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error)
}

// Retrier is implemented by a target that retries a call inside one
// operation (an HTTP client resending after a 503 or a cut connection):
// Retried reports whether the answer of its last call came on a retry. The
// answer may then be a replay of the call's own first attempt ("already
// claimed" by itself, "nothing to release" because it released), which the
// model accepts as the call's effect.
type Retrier interface {
	Retried() bool
}

// Key is one item x location of one shop: one row of the ledger, stocked
// with Recorder.Stock.
type Key struct {
	Shop     int64 `json:"shop"`
	Item     int64 `json:"item"`
	Location int64 `json:"location"`
}

func (k Key) String() string {
	return fmt.Sprintf("shop %d item %d location %d", k.Shop, k.Item, k.Location)
}

// Part is one item of one shop, every location included: a partition of
// the history. Items are independent (a cart is all or nothing, but each
// line's answer is recorded, so each item's history stands alone);
// locations of one item are not, since a line may be served from any of
// its eligible locations.
type Part struct {
	Shop int64 `json:"shop"`
	Item int64 `json:"item"`
}

func (p Part) String() string { return fmt.Sprintf("shop %d item %d", p.Shop, p.Item) }

// Op is the kind of a recorded operation.
type Op string

// The operations.
const (
	// OpStock sets a partition's starting stock. The recorder adds it
	// before every other operation of its item (see Recorder.Stock).
	OpStock   Op = "stock"
	OpReserve Op = "reserve"
	OpClaim   Op = "claim"
	OpRelease Op = "release"
)

// DeadlineSlack is how much earlier than the call time plus the TTL a
// store may judge a hold expired: both stores keep expiries in whole
// milliseconds, truncated (up to 1 ms early), on their server's wall
// clock, which is not the recorder's monotonic clock. Seen in the model
// test: Redis answered "expired" 0.44 ms before call + TTL.
const DeadlineSlack = 5 * time.Millisecond

// Input is what a caller asked, as it concerns one item.
type Input struct {
	Op    Op     `json:"op"`
	Part  Part   `json:"part"`
	Token string `json:"token,omitempty"`
	// Location is the location stocked (stock).
	Location int64 `json:"location,omitempty"`
	// Locations are the line's eligible locations (reserve).
	Locations []int64 `json:"locations,omitempty"`
	// Quantity is the line's quantity (reserve) or the stock (stock).
	Quantity int64 `json:"quantity,omitempty"`
	// Deadline (reserve) is the call time plus the hold's TTL, less
	// DeadlineSlack, on the recorder's clock: the store's expiry is no
	// earlier, so from then on the hold may have expired and been reaped.
	// 0: no TTL was given (the store's default applies) and the model
	// never expires the hold.
	Deadline int64 `json:"deadline,omitempty"`
	// Return is the time of the answer (for a call without one: when it
	// returned, plus the recorder's UnknownHorizon). The model needs it to
	// know which holds may have expired by then.
	Return int64 `json:"return"`
}

// Results an Output may carry besides the domain errors' names.
const (
	ResultReserved     = "reserved"
	ResultInsufficient = "insufficient"
	ResultClaimed      = "claimed"
	ResultReleased     = "released"
	ResultNotReleased  = "not_released"
)

// The domain answers the model judges, named as reservation.AnswerName
// names them. answerReleased is also ResultReleased: Output.Err tells them
// apart.
var (
	answerNotFound       = reservation.AnswerName(reservation.ErrNotFound)
	answerExpired        = reservation.AnswerName(reservation.ErrExpired)
	answerReleased       = reservation.AnswerName(reservation.ErrReleased)
	answerAlreadyClaimed = reservation.AnswerName(reservation.ErrAlreadyClaimed)
)

// Output is what the caller was told, as it concerns one item.
type Output struct {
	// Result is the answer's kind, or the name of a domain error
	// ("not_found", "expired", "released", "already_claimed",
	// "token_conflict", "insufficient_stock", "invalid_input"; see
	// reservation.AnswerName). Empty when Unknown. "released" is both a
	// release that released and the error a claim or reserve of a
	// released token answers: Err is set only for the error.
	Result string `json:"result,omitempty"`
	// Replayed is the answer's Replayed flag (reserve, claim).
	Replayed bool `json:"replayed,omitempty"`
	// Short: an insufficient reserve listed this item's line as short.
	Short bool `json:"short,omitempty"`
	// Unheld is what the short line's answer said the best eligible
	// location could serve: evidence for a failing check, not checked.
	Unheld int64 `json:"unheld,omitempty"`
	// Location is where the answer's allocations put this item: 0 when
	// none, -1 when at more than one location (a split line, which the
	// model refuses).
	Location int64 `json:"location,omitempty"`
	// Quantity is what the answer's allocations put on this item.
	Quantity int64 `json:"quantity,omitempty"`
	// Unknown: no answer came; the call may have taken effect.
	Unknown bool `json:"unknown,omitempty"`
	// Retried: the answer came on a retry inside the call (see Retrier).
	Retried bool `json:"retried,omitempty"`
	// Err is the error's text: set exactly when the call returned an
	// error (a domain answer, or a failure when Unknown).
	Err string `json:"error,omitempty"`
}

// Entry is one recorded operation on one item. Return is math.MaxInt64 for
// an unknown outcome: its effect may land any time after the call.
type Entry struct {
	Client int    `json:"client"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	Input  Input  `json:"input"`
	Output Output `json:"output"`
}

// Answer names err when it is a domain answer and returns "" for a
// failure: a call that failed that way has an unknown outcome. See
// reservation.AnswerName.
func Answer(err error) string { return reservation.AnswerName(err) }

// Recorder records the operations of many concurrent callers. Safe for
// concurrent use.
type Recorder struct {
	start time.Time
	// UnknownHorizon bounds when a call without an answer may still take
	// effect, counted from when it returned: the servers give up on a
	// request within their own timeouts. The model lets such a call reap
	// holds that expire within it, not any hold at all. Default: 30s.
	UnknownHorizon time.Duration

	mu      sync.Mutex
	entries []Entry
	clients int
	stocked map[Key]bool
	// carts are the lines each token was reserved with: a claim or a
	// release is recorded on the items of its reservation.
	carts map[cartKey][]reservation.Line
	// calls are the calls recorded whole, for the reads check (reads.go).
	calls []Call
}

type cartKey struct {
	shop  int64
	token string
}

// New returns an empty recorder; its clock starts now.
func New() *Recorder {
	return &Recorder{start: time.Now(), UnknownHorizon: 30 * time.Second, stocked: map[Key]bool{}, carts: map[cartKey][]reservation.Line{}}
}

// stamp is the time now on the recorder's monotonic clock, in
// nanoseconds, starting at 1 so the stock operations (at 0) come before
// everything; and the same moment on the wall clock, which the stores'
// expiries are on (the reads check compares them).
func (r *Recorder) stamp() (int64, time.Time) {
	t := time.Now()
	return int64(t.Sub(r.start)) + 1, t
}

func (r *Recorder) newClient() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.clients
	r.clients++
	return id
}

// Stock records the stock an item x location starts with. Call it once per
// key, before traffic on its item; the model refuses an operation naming a
// location without it.
func (r *Recorder) Stock(k Key, available int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stocked[k] {
		panic(fmt.Sprintf("history: stock of %s recorded twice", k))
	}
	r.stocked[k] = true
	id := r.clients
	r.clients++
	r.entries = append(r.entries, Entry{Client: id, Call: 0, Return: 0,
		Input: Input{Op: OpStock, Part: Part{k.Shop, k.Item}, Location: k.Location, Quantity: available}})
}

// Entries returns a copy of what was recorded.
func (r *Recorder) Entries() []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.entries)
}

// add records one call, projected on each item it concerns. A call
// without an answer gets a client of its own: it stays open for ever, and
// the caller moved on to other calls.
func (r *Recorder) add(client int, target Reservations, call, ret int64, ins []Input, outs []Output) {
	retried := false
	if rt, ok := target.(Retrier); ok {
		retried = rt.Retried()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range ins {
		outs[i].Retried = retried
		e := Entry{Client: client, Call: call, Return: ret, Input: ins[i], Output: outs[i]}
		e.Input.Return = ret
		if outs[i].Unknown {
			// Open for ever for porcupine's ordering; for expiry, its
			// effect lands within the horizon.
			e.Client, e.Return = r.clients, math.MaxInt64
			e.Input.Return = ret + int64(r.UnknownHorizon)
			r.clients++
		}
		r.entries = append(r.entries, e)
	}
}

// Client is one caller's recording view of a Reservations: calls made
// through it are recorded under its client id. A Client must not be used by
// two goroutines at once (a caller makes one call at a time), which is what
// makes its operations a sequential history.
//
// A token must be reserved through the recorder (by any of its clients)
// before it is claimed or released through it: those are recorded on the
// items of the token's cart.
type Client struct {
	r      *Recorder
	id     int
	target Reservations
}

var _ Reservations = (*Client)(nil)

// Client returns a new caller recording its calls to target.
func (r *Recorder) Client(target Reservations) *Client {
	return &Client{r: r, id: r.newClient(), target: target}
}

// lineParts is the item of each line. A recorded cart names each item
// once: its lines are checked per item, and one token has one line there.
func lineParts(p *reservation.ReserveParams) ([]Part, error) {
	parts := make([]Part, len(p.Lines))
	for i, ln := range p.Lines {
		parts[i] = Part{p.Shop, ln.Item}
		if slices.Contains(parts[:i], parts[i]) {
			return nil, fmt.Errorf("history: line %d names item %d again; a recorded cart names each item once", i, ln.Item)
		}
	}
	return parts, nil
}

// Reserve calls target.Reserve and records one operation per line,
// whatever the answer: an insufficient answer refuses the token on every
// item of its cart, short or not, so every line's partition must see it. A
// recorded cart names each item once (an error is returned otherwise and
// nothing is called).
func (c *Client) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	parts, err := lineParts(p)
	if err != nil {
		return reservation.ReserveResult{}, err
	}
	c.r.mu.Lock()
	prev, seen := c.r.carts[cartKey{p.Shop, p.Token}]
	if !seen {
		c.r.carts[cartKey{p.Shop, p.Token}] = slices.Clone(p.Lines)
	}
	c.r.mu.Unlock()
	if seen && !sameLines(prev, p.Lines) {
		return reservation.ReserveResult{}, fmt.Errorf("history: token %q reserved again with other lines: the recorder keys claims by the first cart", p.Token)
	}
	call, callAt := c.r.stamp()
	res, err := c.target.Reserve(ctx, p)
	ret, retAt := c.r.stamp()
	ins := make([]Input, len(parts))
	outs := make([]Output, len(parts))
	for i, pt := range parts {
		ins[i] = Input{Op: OpReserve, Part: pt, Token: p.Token, Locations: p.Lines[i].Locations, Quantity: p.Lines[i].Quantity}
		if p.TTL > 0 {
			ins[i].Deadline = call + int64(p.TTL) - int64(DeadlineSlack)
		}
		outs[i] = errOutput(err)
		if err != nil {
			continue
		}
		outs[i].Result, outs[i].Replayed = string(res.Status), res.Replayed
		outs[i].Location, outs[i].Quantity = allocatedAt(res.Allocations, pt.Item)
		for _, s := range res.Short {
			if s.Item == pt.Item {
				outs[i].Short, outs[i].Unheld = true, s.Unheld
			}
		}
	}
	c.r.add(c.id, c.target, call, ret, ins, outs)
	rc := Call{Op: OpReserve, Shop: p.Shop, Token: p.Token, Call: call, Return: ret, CallAt: callAt, ReturnAt: retAt}
	if err == nil {
		rc.Result, rc.Replayed, rc.Allocations, rc.ExpiresAt = string(res.Status), res.Replayed, res.Allocations, res.ExpiresAt
	}
	c.r.addCall(c.id, c.target, rc, err)
	return res, err
}

// cart returns the items of a token's cart.
func (c *Client) cart(shop int64, token string) ([]Part, error) {
	c.r.mu.Lock()
	lines, ok := c.r.carts[cartKey{shop, token}]
	c.r.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("history: token %q of shop %d was never reserved through the recorder", token, shop)
	}
	return lineParts(&reservation.ReserveParams{Shop: shop, Lines: lines})
}

func sameLines(a, b []reservation.Line) bool {
	return slices.EqualFunc(a, b, func(x, y reservation.Line) bool {
		return x.Item == y.Item && x.Quantity == y.Quantity && slices.Equal(x.Locations, y.Locations)
	})
}

// Claim calls target.Claim and records one operation per item of the
// token's cart.
func (c *Client) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	parts, err := c.cart(p.Shop, p.Token)
	if err != nil {
		return reservation.ClaimResult{}, err
	}
	call, callAt := c.r.stamp()
	res, err := c.target.Claim(ctx, p)
	ret, retAt := c.r.stamp()
	ins := make([]Input, len(parts))
	outs := make([]Output, len(parts))
	for i, pt := range parts {
		ins[i] = Input{Op: OpClaim, Part: pt, Token: p.Token}
		outs[i] = errOutput(err)
		if err == nil {
			outs[i].Result, outs[i].Replayed = ResultClaimed, res.Replayed
			outs[i].Location, outs[i].Quantity = allocatedAt(res.Allocations, pt.Item)
		}
	}
	c.r.add(c.id, c.target, call, ret, ins, outs)
	rc := Call{Op: OpClaim, Shop: p.Shop, Token: p.Token, Call: call, Return: ret, CallAt: callAt, ReturnAt: retAt}
	if err == nil {
		rc.Result, rc.Replayed, rc.Allocations = ResultClaimed, res.Replayed, res.Allocations
	}
	c.r.addCall(c.id, c.target, rc, err)
	return res, err
}

// Release calls target.Release and records one operation per item of the
// token's cart.
func (c *Client) Release(ctx context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	parts, err := c.cart(p.Shop, p.Token)
	if err != nil {
		return reservation.ReleaseResult{}, err
	}
	call, callAt := c.r.stamp()
	res, err := c.target.Release(ctx, p)
	ret, retAt := c.r.stamp()
	ins := make([]Input, len(parts))
	outs := make([]Output, len(parts))
	for i, pt := range parts {
		ins[i] = Input{Op: OpRelease, Part: pt, Token: p.Token}
		outs[i] = errOutput(err)
		if err == nil {
			outs[i].Result = ResultNotReleased
			if res.Released {
				outs[i].Result = ResultReleased
			}
			outs[i].Location, outs[i].Quantity = allocatedAt(res.Allocations, pt.Item)
		}
	}
	c.r.add(c.id, c.target, call, ret, ins, outs)
	rc := Call{Op: OpRelease, Shop: p.Shop, Token: p.Token, Call: call, Return: ret, CallAt: callAt, ReturnAt: retAt}
	if err == nil {
		rc.Result, rc.Allocations = ResultNotReleased, res.Allocations
		if res.Released {
			rc.Result = ResultReleased
		}
	}
	c.r.addCall(c.id, c.target, rc, err)
	return res, err
}

func errOutput(err error) Output {
	if err == nil {
		return Output{}
	}
	text := err.Error()
	if text == "" {
		text = fmt.Sprintf("%T", err) // Err is how the model tells an error from a result
	}
	if name := Answer(err); name != "" {
		return Output{Result: name, Err: text}
	}
	return Output{Unknown: true, Err: text}
}

// allocatedAt is where as put item and how much: location 0 when nowhere,
// -1 when at several locations.
func allocatedAt(as []reservation.Allocation, item int64) (loc, qty int64) {
	for _, a := range as {
		if a.Item != item {
			continue
		}
		if loc != 0 && loc != a.Location {
			loc = -1
		} else if loc == 0 {
			loc = a.Location
		}
		qty += a.Quantity
	}
	return loc, qty
}

// Operations converts entries to porcupine's form.
func Operations(entries []Entry) []porcupine.Operation {
	ops := make([]porcupine.Operation, len(entries))
	for i, e := range entries {
		ops[i] = porcupine.Operation{ClientId: e.Client, Input: e.Input, Call: e.Call, Output: e.Output, Return: e.Return}
	}
	return ops
}
