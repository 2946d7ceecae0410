// Package history records what callers of the reservation facade did and
// were told, and checks that record against a sequential model of one
// item x location with porcupine, the linearizability checker etcd's
// robustness tests use.
//
// Every call is recorded with its call and return time, its input and its
// answer. A call that got no answer (a timeout, a cut connection, any error
// that is not one of the reservation package's domain answers) is recorded
// as unknown: it may or may not have taken effect, at any time after it
// was called, and the model explores both. Calls are split by item x
// location; a cart of several lines becomes one operation per line, each
// checked in its own partition.
//
// It owns recording and checking only: it never calls a store on its own,
// and it knows nothing of modes or faults. Its model is the authority's
// behaviour as DESIGN section 4 states it:
//   - reserve succeeds only while unheld stock covers the line, and it is
//     refused (insufficient) only when it does not: no oversell, no
//     undersell;
//   - a repeated reserve of a held token is answered from the hold
//     (replayed), never a second hold;
//   - claim and release only of a held reservation, each at most once; a
//     claimed token is never released, and a repeated claim is answered as
//     a replay.
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

// Key is one item x location of one shop: a partition of the history.
type Key struct {
	Shop     int64 `json:"shop"`
	Item     int64 `json:"item"`
	Location int64 `json:"location"`
}

func (k Key) String() string {
	return fmt.Sprintf("shop %d item %d location %d", k.Shop, k.Item, k.Location)
}

// Op is the kind of a recorded operation.
type Op string

// The operations.
const (
	// OpStock sets a partition's starting stock. The recorder adds it
	// before every other operation of its key (see Recorder.Stock).
	OpStock   Op = "stock"
	OpReserve Op = "reserve"
	OpClaim   Op = "claim"
	OpRelease Op = "release"
)

// Input is what a caller asked, as it concerns one key.
type Input struct {
	Op    Op     `json:"op"`
	Key   Key    `json:"key"`
	Token string `json:"token,omitempty"`
	// Quantity is the line's quantity (reserve) or the stock (stock).
	Quantity int64 `json:"quantity,omitempty"`
}

// Results an Output may carry besides the domain errors' names.
const (
	ResultReserved     = "reserved"
	ResultInsufficient = "insufficient"
	ResultClaimed      = "claimed"
	ResultReleased     = "released"
	ResultNotReleased  = "not_released"
)

// Output is what the caller was told, as it concerns one key.
type Output struct {
	// Result is the answer's kind, or the name of a domain error
	// ("not_found", "expired", "already_claimed", "token_conflict",
	// "insufficient_stock", "invalid_input"). Empty when Unknown.
	Result string `json:"result,omitempty"`
	// Replayed is the answer's Replayed flag (reserve, claim).
	Replayed bool `json:"replayed,omitempty"`
	// Short: an insufficient reserve listed this key's line as short.
	Short bool `json:"short,omitempty"`
	// Quantity is what the answer's allocations put at this key.
	Quantity int64 `json:"quantity,omitempty"`
	// Unknown: no answer came; the call may have taken effect.
	Unknown bool `json:"unknown,omitempty"`
	// Err is the error's text, for the record.
	Err string `json:"error,omitempty"`
}

// Entry is one recorded operation on one key. Return is math.MaxInt64 for
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

	mu      sync.Mutex
	entries []Entry
	clients int
	stocked map[Key]bool
	// carts are the lines each token was reserved with: a claim or a
	// release is recorded on the keys of its reservation.
	carts map[cartKey][]reservation.Line
}

type cartKey struct {
	shop  int64
	token string
}

// New returns an empty recorder; its clock starts now.
func New() *Recorder {
	return &Recorder{start: time.Now(), stocked: map[Key]bool{}, carts: map[cartKey][]reservation.Line{}}
}

// now is the recorder's monotonic clock, in nanoseconds, starting at 1 so
// the stock operations (at 0) come before everything.
func (r *Recorder) now() int64 { return int64(time.Since(r.start)) + 1 }

func (r *Recorder) newClient() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.clients
	r.clients++
	return id
}

// Stock records the stock a key starts with. Call it once per key, before
// traffic on that key; the model refuses operations on a key without it.
func (r *Recorder) Stock(k Key, available int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stocked[k] {
		panic(fmt.Sprintf("history: stock of %s recorded twice", k))
	}
	r.stocked[k] = true
	id := r.clients
	r.clients++
	r.entries = append(r.entries, Entry{Client: id, Call: 0, Return: 0, Input: Input{Op: OpStock, Key: k, Quantity: available}})
}

// Entries returns a copy of what was recorded.
func (r *Recorder) Entries() []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.entries)
}

// add records one call, projected on each key it concerns. A call without
// an answer gets a client of its own: it stays open for ever, and the
// caller moved on to other calls.
func (r *Recorder) add(client int, call, ret int64, ins []Input, outs []Output) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range ins {
		e := Entry{Client: client, Call: call, Return: ret, Input: ins[i], Output: outs[i]}
		if outs[i].Unknown {
			e.Client, e.Return = r.clients, math.MaxInt64
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
// keys of the token's cart.
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

// lineKeys is the key of each line: lines recorded must name exactly one
// location, so the partition a line falls in is known before the answer.
func lineKeys(p *reservation.ReserveParams) ([]Key, error) {
	keys := make([]Key, len(p.Lines))
	for i, ln := range p.Lines {
		if len(ln.Locations) != 1 {
			return nil, fmt.Errorf("history: line %d names %d locations; a recorded line must name exactly one", i, len(ln.Locations))
		}
		keys[i] = Key{p.Shop, ln.Item, ln.Locations[0]}
	}
	return keys, nil
}

// Reserve calls target.Reserve and records one operation per line. Lines
// must name exactly one location each (an error is returned otherwise and
// nothing is called).
func (c *Client) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	keys, err := lineKeys(p)
	if err != nil {
		return reservation.ReserveResult{}, err
	}
	c.r.mu.Lock()
	prev, seen := c.r.carts[cartKey{p.Shop, p.Token}]
	if !seen {
		c.r.carts[cartKey{p.Shop, p.Token}] = slices.Clone(p.Lines)
	}
	c.r.mu.Unlock()
	if seen && !sameKeys(prev, p.Lines) {
		return reservation.ReserveResult{}, fmt.Errorf("history: token %q reserved again with other lines: the recorder keys claims by the first cart", p.Token)
	}
	call := c.r.now()
	res, err := c.target.Reserve(ctx, p)
	ret := c.r.now()
	ins := make([]Input, len(keys))
	outs := make([]Output, len(keys))
	for i, k := range keys {
		ins[i] = Input{Op: OpReserve, Key: k, Token: p.Token, Quantity: p.Lines[i].Quantity}
		outs[i] = errOutput(err)
		if err != nil {
			continue
		}
		outs[i].Result, outs[i].Replayed = string(res.Status), res.Replayed
		outs[i].Quantity = quantityAt(res.Allocations, k)
		for _, s := range res.Short {
			outs[i].Short = outs[i].Short || s.Item == k.Item
		}
	}
	c.r.add(c.id, call, ret, ins, outs)
	return res, err
}

// cart returns the keys of a token's cart.
func (c *Client) cart(shop int64, token string) ([]Key, error) {
	c.r.mu.Lock()
	lines, ok := c.r.carts[cartKey{shop, token}]
	c.r.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("history: token %q of shop %d was never reserved through the recorder", token, shop)
	}
	return lineKeys(&reservation.ReserveParams{Shop: shop, Lines: lines})
}

func sameKeys(a, b []reservation.Line) bool {
	return slices.EqualFunc(a, b, func(x, y reservation.Line) bool {
		return x.Item == y.Item && x.Quantity == y.Quantity && slices.Equal(x.Locations, y.Locations)
	})
}

// Claim calls target.Claim and records one operation per key of the
// token's cart.
func (c *Client) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	keys, err := c.cart(p.Shop, p.Token)
	if err != nil {
		return reservation.ClaimResult{}, err
	}
	call := c.r.now()
	res, err := c.target.Claim(ctx, p)
	ret := c.r.now()
	ins := make([]Input, len(keys))
	outs := make([]Output, len(keys))
	for i, k := range keys {
		ins[i] = Input{Op: OpClaim, Key: k, Token: p.Token}
		outs[i] = errOutput(err)
		if err == nil {
			outs[i].Result, outs[i].Replayed = ResultClaimed, res.Replayed
			outs[i].Quantity = quantityAt(res.Allocations, k)
		}
	}
	c.r.add(c.id, call, ret, ins, outs)
	return res, err
}

// Release calls target.Release and records one operation per key of the
// token's cart.
func (c *Client) Release(ctx context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	keys, err := c.cart(p.Shop, p.Token)
	if err != nil {
		return reservation.ReleaseResult{}, err
	}
	call := c.r.now()
	res, err := c.target.Release(ctx, p)
	ret := c.r.now()
	ins := make([]Input, len(keys))
	outs := make([]Output, len(keys))
	for i, k := range keys {
		ins[i] = Input{Op: OpRelease, Key: k, Token: p.Token}
		outs[i] = errOutput(err)
		if err == nil {
			outs[i].Result = ResultNotReleased
			if res.Released {
				outs[i].Result = ResultReleased
			}
			outs[i].Quantity = quantityAt(res.Allocations, k)
		}
	}
	c.r.add(c.id, call, ret, ins, outs)
	return res, err
}

func errOutput(err error) Output {
	if err == nil {
		return Output{}
	}
	if name := Answer(err); name != "" {
		return Output{Result: name, Err: err.Error()}
	}
	return Output{Unknown: true, Err: err.Error()}
}

func quantityAt(as []reservation.Allocation, k Key) int64 {
	var n int64
	for _, a := range as {
		if a.Item == k.Item && a.Location == k.Location {
			n += a.Quantity
		}
	}
	return n
}

// Operations converts entries to porcupine's form.
func Operations(entries []Entry) []porcupine.Operation {
	ops := make([]porcupine.Operation, len(entries))
	for i, e := range entries {
		ops[i] = porcupine.Operation{ClientId: e.Client, Input: e.Input, Call: e.Call, Output: e.Output, Return: e.Return}
	}
	return ops
}
