package history

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// status is where a token stands on one item. A token that was never
// reserved is absent (the zero status): it may be reserved, and a claim of
// it is not_found. Every other status but held is terminal: the store
// keeps it as a tombstone for longer than any history runs, so the token
// never holds anything again.
type status uint8

const (
	// held: the token holds qty units at loc until deadline.
	held status = iota + 1
	// claimed: the hold's qty units at loc left the ledger, exactly once.
	claimed
	// released: a release gave the hold's units back.
	released
	// expiring: an answer said the hold expired (a claim, a release or a
	// reserve past its deadline), so it is answered as expired from then
	// on; its qty units at loc may still be held until a reaper (or a
	// reserve that needs them) takes them back.
	expiring
	// expired: the hold expired and its units are free again.
	expired
	// refused: a reserve was answered insufficient; the token never held
	// anything and never will.
	refused
)

var statusNames = [...]string{"absent", "held", "claimed", "released", "expiring", "expired", "refused"}

func (st status) String() string {
	if int(st) < len(statusNames) {
		return statusNames[st]
	}
	return fmt.Sprintf("status(%d)", st)
}

// tokenState is a token's status on one item. loc and qty are set for a
// status that holds or deducted units (held, expiring, claimed) and zero
// otherwise, so that tombstones of one kind compare equal.
type tokenState struct {
	status status
	loc    int64 // the location serving the token's line
	qty    int64
	// deadline is when the hold may have expired (Input.Deadline); 0:
	// never. Kept while the units are held (held, expiring).
	deadline int64
}

// stock is one location's free units: neither held nor claimed.
type stock struct {
	loc, free int64
}

// state is one item's state: each stocked location's free units, and each
// token's hold, claim or tombstone. States are never modified once built:
// porcupine keeps and compares them while it searches.
type state struct {
	stock  []stock // sorted by location
	tokens map[string]tokenState
	// sum is the XOR of the tokens' hashes, kept as tokens change so that
	// Hash is O(locations).
	sum uint64
}

// tokenHash hashes a token and every field of its state: states that
// differ in any field must hash differently (with high probability), or
// porcupine's cache would merge them.
func tokenHash(token string, t tokenState) uint64 {
	var b [1 + 3*8]byte
	b[0] = byte(t.status)
	binary.LittleEndian.PutUint64(b[1:], uint64(t.loc))
	binary.LittleEndian.PutUint64(b[9:], uint64(t.qty))
	binary.LittleEndian.PutUint64(b[17:], uint64(t.deadline))
	h := fnv.New64a()
	h.Write([]byte(token))
	h.Write([]byte{0})
	h.Write(b[:])
	return h.Sum64()
}

// free returns a location's free units and whether it was stocked.
func (s state) free(loc int64) (int64, bool) {
	for _, st := range s.stock {
		if st.loc == loc {
			return st.free, true
		}
	}
	return 0, false
}

// clone returns a copy of s that may be changed.
func (s state) clone() state {
	n := state{stock: slices.Clone(s.stock), tokens: maps.Clone(s.tokens), sum: s.sum}
	if n.tokens == nil {
		n.tokens = map[string]tokenState{}
	}
	return n
}

// addFree changes a location's free units by d (the location is stocked).
func (s *state) addFree(loc, d int64) {
	for i := range s.stock {
		if s.stock[i].loc == loc {
			s.stock[i].free += d
			return
		}
	}
	panic(fmt.Sprintf("history: location %d is not stocked", loc))
}

// set gives token the state t (zero: absent).
func (s *state) set(token string, t tokenState) {
	if old, ok := s.tokens[token]; ok {
		s.sum ^= tokenHash(token, old)
		delete(s.tokens, token)
	}
	if t.status != 0 {
		s.tokens[token] = t
		s.sum ^= tokenHash(token, t)
	}
}

// with returns a copy of s where token has state t and loc's free units
// changed by dfree.
func (s state) with(token string, t tokenState, loc, dfree int64) state {
	n := s.clone()
	n.set(token, t)
	if dfree != 0 {
		n.addFree(loc, dfree)
	}
	return n
}

// The transitions of a token that the answers make. t is the token's
// current state.

// claim: the hold's units leave the ledger; free does not change.
func (s state) claim(token string, t tokenState) state {
	return s.with(token, tokenState{status: claimed, loc: t.loc, qty: t.qty}, 0, 0)
}

// release: the hold's units are free again.
func (s state) release(token string, t tokenState) state {
	return s.with(token, tokenState{status: released}, t.loc, t.qty)
}

// expire: the hold is answered as expired from now on; its units come
// back when a reserve needs them (see take).
func (s state) expire(token string, t tokenState) state {
	t.status = expiring
	return s.with(token, t, 0, 0)
}

// refuse: the token is refused for good.
func (s state) refuse(token string) state {
	return s.with(token, tokenState{status: refused}, 0, 0)
}

// expirable says whether a held token's hold may have expired (and been
// reaped) by time at.
func expirable(t tokenState, at int64) bool {
	return t.status == held && t.deadline > 0 && t.deadline < at
}

// reapable says whether a token's units may have gone back by time at: a
// hold that may have expired, or one an answer already said expired (its
// deadline had passed when the store said so, and passing stays passed).
func reapable(t tokenState, at int64) bool {
	return t.status == expiring || expirable(t, at)
}

// reapOrder ranks the holds take may reap: those answered as expired
// first.
func reapOrder(t tokenState) int {
	if t.status == expiring {
		return 0
	}
	return 1
}

// take returns s with t's units at t.loc held by token, or false when
// t.loc has not enough free units even after reaping every hold there
// that may have expired by at. A reaped hold is expired: its tombstone
// stays.
//
// Expiry is explored lazily: a hold stays until an answer needs its units.
// Reaping later is always possible when reaping earlier was (the deadline
// has passed for every later moment too), so deferring it loses nothing.
// When a reserve needs units, the holds that may have expired are reaped
// as the stores' reapers do, and only as many as the reserve needs:
// reaping more would make a later refusal look like an undersell. Holds
// already answered as expired go first (nothing can claim or release them
// any more, so reaping them is never wrong), then the others, oldest
// deadline first. Taking the oldest is only wrong for a hold that is
// claimed or released afterwards within a store's answer time of its
// deadline.
func (s state) take(token string, t tokenState, at int64) (state, bool) {
	free, ok := s.free(t.loc)
	if !ok {
		return state{}, false
	}
	if free >= t.qty {
		return s.with(token, t, t.loc, -t.qty), true
	}
	var due []string
	for tok, other := range s.tokens {
		if other.loc == t.loc && reapable(other, at) {
			due = append(due, tok)
		}
	}
	slices.SortFunc(due, func(a, b string) int {
		ta, tb := s.tokens[a], s.tokens[b]
		return cmp.Or(cmp.Compare(reapOrder(ta), reapOrder(tb)), cmp.Compare(ta.deadline, tb.deadline), strings.Compare(a, b))
	})
	n := s.clone()
	for _, tok := range due {
		if free >= t.qty {
			break
		}
		other := s.tokens[tok]
		n.set(tok, tokenState{status: expired})
		n.addFree(other.loc, other.qty)
		free += other.qty
	}
	if free < t.qty {
		return state{}, false
	}
	n.set(token, t)
	n.addFree(t.loc, -t.qty)
	return n, true
}

func (s state) equal(o state) bool {
	return s.sum == o.sum && slices.Equal(s.stock, o.stock) && maps.Equal(s.tokens, o.tokens)
}

func (s state) String() string {
	if len(s.stock) == 0 {
		return "no stock recorded"
	}
	parts := []string{}
	var free []string
	for _, st := range s.stock {
		free = append(free, fmt.Sprintf("@%d:%d", st.loc, st.free))
	}
	parts = append(parts, fmt.Sprintf("free [%s]", strings.Join(free, " ")))
	byStatus := map[status][]string{}
	for _, tok := range slices.Sorted(maps.Keys(s.tokens)) {
		t := s.tokens[tok]
		if t.qty != 0 {
			tok = fmt.Sprintf("%s:%d@%d", tok, t.qty, t.loc)
		}
		byStatus[t.status] = append(byStatus[t.status], tok)
	}
	for st := held; st <= refused; st++ {
		if toks := byStatus[st]; len(toks) > 0 || st <= claimed {
			parts = append(parts, fmt.Sprintf("%s [%s]", st, strings.Join(toks, " ")))
		}
	}
	return strings.Join(parts, "; ")
}

// step is the sequential specification of one item: every state the item
// can be in after the operation, given its answer (none: the answer is
// impossible). An unknown answer has several futures: the call took
// effect (for a reserve: it held, at any eligible location that can serve
// it, or it was refused), or it did not.
func step(s state, in Input, out Output) []state {
	if in.Op == OpStock {
		if _, ok := s.free(in.Location); ok {
			return nil
		}
		n := s.clone()
		n.stock = append(n.stock, stock{in.Location, in.Quantity})
		slices.SortFunc(n.stock, func(a, b stock) int { return cmp.Compare(a.loc, b.loc) })
		return []state{n}
	}
	t := s.tokens[in.Token]
	switch in.Op {
	case OpReserve:
		return stepReserve(s, t, in, out)
	case OpClaim:
		return stepClaim(s, t, in, out)
	case OpRelease:
		return stepRelease(s, t, in, out)
	}
	return nil
}

func stepReserve(s state, t tokenState, in Input, out Output) []state {
	fresh := t.status == 0
	for _, loc := range in.Locations {
		if _, ok := s.free(loc); !ok {
			return nil // a location without recorded stock cannot be judged
		}
	}
	if out.Unknown {
		// Only an absent token can change: any other is answered from
		// its hold or tombstone.
		next := []state{s}
		if fresh {
			// Refused, by this line or another line of the cart.
			next = append(next, s.refuse(in.Token))
			for _, loc := range in.Locations {
				if n, ok := s.take(in.Token, tokenState{held, loc, in.Quantity, in.Deadline}, in.Return); ok {
					next = append(next, n)
				}
			}
		}
		return next
	}
	switch out.Result {
	case ResultReserved:
		switch {
		case out.Quantity != in.Quantity || !slices.Contains(in.Locations, out.Location):
			return nil // another quantity, an ineligible location, or a split line
		case out.Replayed && t.status == held && t.qty == in.Quantity && t.loc == out.Location:
			return []state{s}
		case (!out.Replayed || out.Retried) && fresh:
			// A retried call's replay may answer its own first
			// attempt: it held the cart then. A refused token is not
			// fresh: a delayed first attempt creates nothing.
			if n, ok := s.take(in.Token, tokenState{held, out.Location, in.Quantity, in.Deadline}, in.Return); ok {
				return []state{n}
			}
		}
	case ResultInsufficient:
		switch {
		case t.status == refused:
			// The first answer, replayed (whether or not it says so):
			// what it said about stock was true then, not now.
			return []state{s}
		case !fresh:
			// A held token is answered from its hold, any other from
			// its tombstone.
			return nil
		case out.Replayed && !out.Retried:
			return nil // a replay of a refusal nobody was given
		}
		// All or nothing: a short cart holds nothing, and the whole
		// token is refused, on every item of the cart (each line is
		// recorded). This line may be short only if no eligible
		// location's free stock could cover it (no undersell: holds
		// that may have expired but were not reaped yet still count
		// as held); another line's shortage says nothing here.
		if out.Short {
			for _, loc := range in.Locations {
				if free, _ := s.free(loc); free >= in.Quantity {
					return nil
				}
			}
		}
		return []state{s.refuse(in.Token)}
	case answerAlreadyClaimed:
		if t.status == claimed {
			return []state{s}
		}
	case answerReleased:
		if t.status == released {
			return []state{s}
		}
	case answerExpired:
		return answeredExpired(s, t, in)
	}
	return nil
}

// answeredExpired is the state after an answer "expired" (to a reserve or
// a claim): the token's hold expired, or a hold past its deadline does
// now.
func answeredExpired(s state, t tokenState, in Input) []state {
	switch {
	case t.status == expired || t.status == expiring:
		return []state{s}
	case expirable(t, in.Return):
		return []state{s.expire(in.Token, t)}
	}
	return nil
}

func stepClaim(s state, t tokenState, in Input, out Output) []state {
	if out.Unknown {
		if t.status == held {
			return []state{s, s.claim(in.Token, t)}
		}
		return []state{s}
	}
	switch out.Result {
	case ResultClaimed:
		switch {
		case t.status != held && t.status != claimed:
			// Never held, refused, or past its hold: a claim after an
			// acknowledged release or expiry is a sale of units that
			// went back.
			return nil
		case out.Quantity != t.qty || out.Location != t.loc:
			return nil // deducted something other than the hold
		case out.Replayed && t.status == claimed:
			return []state{s}
		case (!out.Replayed || out.Retried) && t.status == held:
			// A hold past its deadline may still be claimed: the store
			// judged it live when it took its locks. A retried call's
			// replay may answer its own first attempt: it claimed then.
			return []state{s.claim(in.Token, t)}
		}
	case answerNotFound:
		// Only a token that never held anything: a hold's tombstone
		// answers for it.
		if t.status == 0 || t.status == refused {
			return []state{s}
		}
	case answerExpired:
		// An expired hold is refused whether or not it was reaped yet;
		// the model reaps it when its units are needed.
		return answeredExpired(s, t, in)
	case answerReleased:
		if t.status == released {
			return []state{s}
		}
	}
	return nil
}

func stepRelease(s state, t tokenState, in Input, out Output) []state {
	if out.Unknown {
		if t.status == held {
			return []state{s, s.release(in.Token, t)}
		}
		return []state{s}
	}
	switch out.Result {
	case ResultReleased:
		// Err tells the answer "released" (the error ErrReleased, which
		// a release never answers) from a release that released.
		if out.Err == "" && t.status == held && out.Quantity == t.qty && out.Location == t.loc {
			return []state{s.release(in.Token, t)}
		}
	case ResultNotReleased:
		switch t.status {
		case 0, refused, released, expiring, expired:
			return []state{s}
		case held:
			var next []state
			if expirable(t, in.Return) {
				// The store found it expired.
				next = append(next, s.expire(in.Token, t))
			}
			if out.Retried {
				// The call's first attempt released it.
				next = append(next, s.release(in.Token, t))
			}
			return next
		}
	case answerAlreadyClaimed:
		if t.status == claimed {
			return []state{s}
		}
	}
	return nil
}

// Model is the porcupine model of the authority, partitioned by item. Each
// partition starts with no location stocked; its stock operations
// (Recorder.Stock) come first and set them.
func Model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
			byPart := map[Part][]porcupine.Operation{}
			for _, op := range ops {
				p := op.Input.(Input).Part
				byPart[p] = append(byPart[p], op)
			}
			parts := slices.SortedFunc(maps.Keys(byPart), comparePart)
			out := make([][]porcupine.Operation, len(parts))
			for i, p := range parts {
				out[i] = byPart[p]
			}
			return out
		},
		Init: func() []any { return []any{state{}} },
		Step: func(s, in, out any) []any {
			next := step(s.(state), in.(Input), out.(Output))
			res := make([]any, len(next))
			for i, n := range next {
				res[i] = n
			}
			return res
		},
		Equal: func(a, b any) bool { return a.(state).equal(b.(state)) },
		Hash: func(s any) uint64 {
			st := s.(state)
			h := st.sum
			for _, x := range st.stock {
				h ^= uint64(x.free)*0x9e3779b97f4a7c15 + uint64(x.loc)
			}
			return h
		},
		DescribeOperation: func(in, out any) string { return describe(in.(Input), out.(Output)) },
		DescribeState:     func(s any) string { return s.(state).String() },
	}
	return nm.ToModel()
}

func comparePart(a, b Part) int {
	return cmp.Or(cmp.Compare(a.Shop, b.Shop), cmp.Compare(a.Item, b.Item))
}

func describe(in Input, out Output) string {
	switch in.Op {
	case OpStock:
		return fmt.Sprintf("stock(@%d, %d)", in.Location, in.Quantity)
	case OpReserve:
		return fmt.Sprintf("reserve(%s, %d @%v) -> %s", in.Token, in.Quantity, in.Locations, describeOutput(out))
	}
	return fmt.Sprintf("%s(%s) -> %s", in.Op, in.Token, describeOutput(out))
}

func describeOutput(out Output) string {
	if out.Unknown {
		return "unknown (" + out.Err + ")"
	}
	s := out.Result
	if out.Quantity != 0 {
		s += fmt.Sprintf(" %d@%d", out.Quantity, out.Location)
	}
	if out.Replayed {
		s += " replayed"
	}
	if out.Short {
		s += fmt.Sprintf(" short (unheld %d)", out.Unheld)
	}
	if out.Retried {
		s += " (retried)"
	}
	return s
}
