package history

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// The reads check (issue 24). The porcupine model judges what the
// deciding calls did to stock; it never sees a GET, and it judges a
// claim's answer one item at a time, by location and quantity. The reads
// check judges the whole answers a caller reads back about its own
// reservation, token by token, against the answer that acknowledged the
// reservation: a GET of a live reservation must return that hold, and a
// claim must deduct exactly it.
//
// Every call made through a Client is also recorded whole, as a Call
// (Recorder.Calls); CheckReads judges them.

// OpGet is a read of a token's reservation (Client.Get). It is recorded as
// a Call only: reads change no stock, so the porcupine model has nothing to
// learn from them.
const OpGet Op = "get"

// ResultHeld is the Result of a GET that returned a hold.
const ResultHeld = "held"

// Getter is a target that reads reservations back: the facade, a store.
type Getter interface {
	Get(ctx context.Context, p *reservation.GetParams) (reservation.Hold, error)
}

// Router is implemented by a target that sends each call to one of several
// servers (a replica of the pod): Via names the one that gave its last
// call's answer, and whatever else helps to read a failing check (the
// replica's flags). It is evidence only: nothing is judged by it.
type Router interface {
	Via() string
}

// TokenKey is one reservation: a token of a shop.
type TokenKey struct {
	Shop  int64  `json:"shop"`
	Token string `json:"token"`
}

func (k TokenKey) String() string { return fmt.Sprintf("shop %d token %s", k.Shop, k.Token) }

// Call is one call on one token as its caller saw it, whole: not split by
// item, with the full allocations and the hold's expiry.
type Call struct {
	Client int    `json:"client"`
	Op     Op     `json:"op"`
	Shop   int64  `json:"shop"`
	Token  string `json:"token"`
	// Call and Return are on the recorder's clock (as Entry's); CallAt and
	// ReturnAt are the same moments on the wall clock, which the stores'
	// expiries are on.
	Call     int64     `json:"call"`
	Return   int64     `json:"return"`
	CallAt   time.Time `json:"call_at"`
	ReturnAt time.Time `json:"return_at"`
	// Result is the answer's kind (reserved, insufficient, claimed,
	// released, not_released, held) or the name of a domain error, as in
	// Output. Empty when Unknown.
	Result   string `json:"result,omitempty"`
	Replayed bool   `json:"replayed,omitempty"`
	// Allocations are the answer's: a reserve's or a GET's hold, what a
	// claim deducted or a release gave back.
	Allocations []reservation.Allocation `json:"allocations,omitempty"`
	// ExpiresAt is the hold's expiry, as the store answered it (reserved,
	// held).
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Unknown: no answer came; the call may have taken effect.
	Unknown bool `json:"unknown,omitempty"`
	// Retried: the answer came on a retry inside the call (see Retrier).
	Retried bool `json:"retried,omitempty"`
	// Via is where the answer came from (see Router).
	Via string `json:"via,omitempty"`
	// Err is the error's text, set exactly when the call returned one.
	Err string `json:"error,omitempty"`
}

func (c Call) key() TokenKey { return TokenKey{c.Shop, c.Token} }

// Calls returns a copy of every call recorded whole, in the order they
// returned.
func (r *Recorder) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// addCall records one call whole.
func (r *Recorder) addCall(client int, target any, c Call, err error) {
	c.Client = client
	if err != nil {
		out := errOutput(err)
		c.Result, c.Unknown, c.Err = out.Result, out.Unknown, out.Err
	}
	if rt, ok := target.(Retrier); ok {
		c.Retried = rt.Retried()
	}
	if rt, ok := target.(Router); ok {
		c.Via = rt.Via()
	}
	c.Allocations = slices.Clone(c.Allocations)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
}

// Get calls the target's Get (it must be a Getter) and records the call
// whole. A GET may name any token, reserved through the recorder or not.
func (c *Client) Get(ctx context.Context, p *reservation.GetParams) (reservation.Hold, error) {
	g, ok := c.target.(Getter)
	if !ok {
		return reservation.Hold{}, fmt.Errorf("history: %T cannot read reservations (no Get)", c.target)
	}
	call, callAt := c.r.stamp()
	h, err := g.Get(ctx, p)
	ret, retAt := c.r.stamp()
	rc := Call{Op: OpGet, Shop: p.Shop, Token: p.Token, Call: call, Return: ret, CallAt: callAt, ReturnAt: retAt}
	if err == nil {
		rc.Result, rc.Allocations, rc.ExpiresAt = ResultHeld, h.Allocations, h.ExpiresAt
	}
	c.r.addCall(c.id, c.target, rc, err)
	return h, err
}

// DefaultReadsMargin is ReadsOptions.Margin's default.
const DefaultReadsMargin = 300 * time.Millisecond

// ReadsOptions qualify CheckReads.
type ReadsOptions struct {
	// Margin: a GET answered later than the acknowledged expiry less
	// Margin is not held to the hold: the stores judge expiry on their
	// servers' clocks and reap on their own schedule, the recorder reads
	// its own. Default DefaultReadsMargin.
	Margin time.Duration
}

// ReadsResult is what CheckReads found.
type ReadsResult struct {
	// Gets is the number of GETs recorded; Unknown of them got no answer
	// (not judged).
	Gets, Unknown int
	// AfterReserve is the number of answered GETs of a token sent after
	// its reserve was acknowledged: each is judged never to answer
	// not_found. Held of them came while the hold had to be live (before
	// any claim or release was sent, and before its expiry less the
	// margin): each must return the acknowledged hold. Claimed of them
	// were sent after an acknowledged claim: each must answer
	// already_claimed.
	AfterReserve, Held, Claimed int
	// Claims is the number of claims answered claimed that were judged
	// against their acknowledged reserve.
	Claims int
	// Acked is each token's acknowledged hold: the first answer that said
	// reserved (a replay too), with its allocations and expiry.
	Acked map[TokenKey]reservation.Hold
	// Violations say what was wrong, one line each.
	Violations []string
}

func (r ReadsResult) String() string {
	return fmt.Sprintf("%d GETs (%d without an answer), %d after an acknowledged reserve (never not_found): %d held to the acknowledged hold, %d to its acknowledged claim; %d claims held to their acknowledged reserve; %d violation(s)",
		r.Gets, r.Unknown, r.AfterReserve, r.Held, r.Claimed, r.Claims, len(r.Violations))
}

// CheckReads judges the recorded calls token by token. For a token whose
// reserve was acknowledged (the first answer "reserved", a replay too,
// whichever call gave it: a call that got no answer is no
// acknowledgement, and a later answer for the token still is):
//   - a GET sent after the acknowledgement never answers not_found: the
//     token holds, or its tombstone answers;
//   - a GET sent after the acknowledgement and answered before any claim
//     or release of the token was sent, and before the acknowledged
//     expiry less the margin, answers held with exactly the acknowledged
//     allocations and the acknowledged expiry, to the millisecond (both
//     stores keep expiries in whole milliseconds and copy them across
//     unchanged, so a hold that is the reservation has exactly its
//     expiry; another one, such as a shadow hold, has its own);
//   - a GET sent after an acknowledged claim answers already_claimed;
//   - a claim answered claimed carries exactly the acknowledged
//     allocations.
//
// GETs without an answer are not judged.
func CheckReads(calls []Call, o ReadsOptions) ReadsResult {
	if o.Margin == 0 {
		o.Margin = DefaultReadsMargin
	}
	res := ReadsResult{Acked: map[TokenKey]reservation.Hold{}}
	byToken := map[TokenKey][]Call{}
	for _, c := range calls {
		byToken[c.key()] = append(byToken[c.key()], c)
		if c.Op == OpGet {
			res.Gets++
			if c.Unknown {
				res.Unknown++
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(byToken), func(a, b TokenKey) int {
		return cmp.Or(cmp.Compare(a.Shop, b.Shop), cmp.Compare(a.Token, b.Token))
	}) {
		checkToken(&res, k, byToken[k], o)
	}
	return res
}

func checkToken(res *ReadsResult, k TokenKey, calls []Call, o ReadsOptions) {
	slices.SortStableFunc(calls, func(a, b Call) int { return cmp.Compare(a.Return, b.Return) })
	var ack, claimAck *Call
	sent := int64(math.MaxInt64) // when the first claim or release was sent
	for i := range calls {
		c := &calls[i]
		switch c.Op {
		case OpReserve:
			if ack == nil && !c.Unknown && c.Result == ResultReserved {
				ack = c
			}
		case OpClaim, OpRelease:
			sent = min(sent, c.Call)
			if c.Op == OpClaim && claimAck == nil && !c.Unknown && c.Result == ResultClaimed {
				claimAck = c
			}
		}
	}
	if ack == nil {
		return
	}
	res.Acked[k] = reservation.Hold{Shop: k.Shop, Token: k.Token, Allocations: reservation.SortedAllocations(ack.Allocations), ExpiresAt: ack.ExpiresAt}
	bad := func(c Call, format string, args ...any) {
		res.Violations = append(res.Violations, fmt.Sprintf("reads: %s: the %s said %s, but %s (the reservation was acknowledged %s)",
			k, describeCallTimes(c), describeAnswer(c), fmt.Sprintf(format, args...), describeAck(*ack)))
	}
	for _, c := range calls {
		switch {
		case c.Op == OpClaim && !c.Unknown && c.Result == ResultClaimed:
			res.Claims++
			if !SameAllocations(c.Allocations, ack.Allocations) {
				bad(c, "a claim deducts exactly the acknowledged allocations")
			}
		case c.Op != OpGet || c.Unknown || c.Call <= ack.Return:
		default:
			res.AfterReserve++
			held := c.Return < sent && c.ReturnAt.Before(ack.ExpiresAt.Add(-o.Margin))
			switch {
			case claimAck != nil && c.Call > claimAck.Return:
				res.Claimed++
				if c.Result != answerAlreadyClaimed {
					bad(c, "it was sent after the claim was acknowledged (%s): it must answer %s", describeCallTimes(*claimAck), answerAlreadyClaimed)
				}
			case held:
				res.Held++
				switch {
				case c.Result != ResultHeld:
					bad(c, "the hold was live (%s before its expiry, no claim or release sent): it must answer held", ack.ExpiresAt.Sub(c.ReturnAt).Round(time.Millisecond))
				case !SameAllocations(c.Allocations, ack.Allocations) || c.ExpiresAt.UnixMilli() != ack.ExpiresAt.UnixMilli():
					bad(c, "the hold was live (%s before its expiry, no claim or release sent): it must answer the acknowledged hold", ack.ExpiresAt.Sub(c.ReturnAt).Round(time.Millisecond))
				}
			}
			if c.Result == answerNotFound && !(claimAck != nil && c.Call > claimAck.Return) && !held {
				bad(c, "a token that held answers from its hold or its tombstone, never %s", answerNotFound)
			}
		}
	}
}

// SameAllocations reports whether a and b put the same quantity on every
// item x location (in any order, however split into entries).
func SameAllocations(a, b []reservation.Allocation) bool {
	sum := func(as []reservation.Allocation) map[[2]int64]int64 {
		m := map[[2]int64]int64{}
		for _, x := range as {
			m[[2]int64{x.Item, x.Location}] += x.Quantity
		}
		maps.DeleteFunc(m, func(_ [2]int64, q int64) bool { return q == 0 })
		return m
	}
	return maps.Equal(sum(a), sum(b))
}

// FormatAllocations is allocations as "[item 7 location 1 x2, ...]",
// sorted.
func FormatAllocations(as []reservation.Allocation) string {
	parts := make([]string, 0, len(as))
	for _, a := range reservation.SortedAllocations(as) {
		parts = append(parts, fmt.Sprintf("item %d location %d x%d", a.Item, a.Location, a.Quantity))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// describeCallTimes is a call's kind, times and route: "GET sent at
// 12.345s and answered at 12.350s via pod-a/2 (flags v6 of v7)".
func describeCallTimes(c Call) string {
	op := strings.ToUpper(string(c.Op))
	if c.Op != OpGet {
		op = string(c.Op)
	}
	s := fmt.Sprintf("%s sent at %s and answered at %s", op, clock(c.Call), clock(c.Return))
	if c.Retried {
		s += " on a retry"
	}
	if c.Via != "" {
		s += " via " + c.Via
	}
	return s
}

// describeAnswer is what a call was told.
func describeAnswer(c Call) string {
	switch c.Result {
	case ResultHeld, ResultReserved:
		s := fmt.Sprintf("%s %s until %s", c.Result, FormatAllocations(c.Allocations), wall(c.ExpiresAt))
		if c.Replayed {
			s += " (replayed)"
		}
		return s
	case ResultClaimed:
		return fmt.Sprintf("%s %s", c.Result, FormatAllocations(c.Allocations))
	}
	if c.Err != "" {
		return fmt.Sprintf("%s (%s)", c.Result, c.Err)
	}
	return c.Result
}

// describeAck is the acknowledging answer and its call.
func describeAck(ack Call) string {
	return fmt.Sprintf("%s by the %s", describeAnswer(ack), describeCallTimes(ack))
}

// clock is a time on the recorder's clock, in seconds since it started.
func clock(t int64) string { return fmt.Sprintf("%.3fs", time.Duration(t).Seconds()) }

// wall is a store's expiry as "15:04:05.000" (UTC).
func wall(t time.Time) string {
	if t.IsZero() {
		return "(no expiry)"
	}
	return t.UTC().Format("15:04:05.000")
}
