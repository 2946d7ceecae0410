package history

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// status is where a token stands on one item. A token that was never
// reserved, or whose hold was released or reaped, is absent: it may be
// reserved (again) and a claim of it is not_found.
type status uint8

const (
	held status = iota + 1
	claimed
)

type tokenState struct {
	status status
	loc    int64 // the location serving the token's line
	qty    int64
	// deadline is when the hold may have expired (Input.Deadline); 0:
	// never.
	deadline int64
}

// stock is one location's free units: neither held nor claimed.
type stock struct {
	loc, free int64
}

// state is one item's state: each stocked location's free units, and each
// token's hold or claim. States are never modified once built: porcupine
// keeps and compares them while it searches.
type state struct {
	stock  []stock // sorted by location
	tokens map[string]tokenState
	// sum is the XOR of the tokens' hashes, kept as tokens change so that
	// Hash is O(locations).
	sum uint64
}

func tokenHash(token string, t tokenState) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00%d\x00%d", token, t.status, t.loc, t.qty, t.deadline)
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

// expirable says whether a held token's hold may have expired (and been
// reaped) by time at.
func expirable(t tokenState, at int64) bool {
	return t.status == held && t.deadline > 0 && t.deadline < at
}

// take returns s with t's units at t.loc held by token, or false when
// t.loc has not enough free units even after reaping every hold there
// that may have expired by at.
//
// Expiry is explored lazily: a hold stays until an answer needs its units.
// Reaping later is always possible when reaping earlier was (the deadline
// has passed for every later moment too), so deferring it loses nothing.
// When a reserve needs units, the holds that may have expired are reaped
// oldest deadline first, as the stores' reapers do, and only as many as
// the reserve needs: reaping more would make a later refusal look like an
// undersell. Taking the oldest is only wrong for a hold that is claimed or
// released afterwards within a store's answer time of its deadline.
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
		if other.loc == t.loc && expirable(other, at) {
			due = append(due, tok)
		}
	}
	slices.SortFunc(due, func(a, b string) int {
		return cmp.Or(cmp.Compare(s.tokens[a].deadline, s.tokens[b].deadline), strings.Compare(a, b))
	})
	n := s.clone()
	for _, tok := range due {
		if free >= t.qty {
			break
		}
		other := s.tokens[tok]
		n.set(tok, tokenState{})
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
	var free, holds, claims []string
	for _, st := range s.stock {
		free = append(free, fmt.Sprintf("@%d:%d", st.loc, st.free))
	}
	for _, tok := range slices.Sorted(maps.Keys(s.tokens)) {
		t := s.tokens[tok]
		if t.status == held {
			holds = append(holds, fmt.Sprintf("%s:%d@%d", tok, t.qty, t.loc))
		} else {
			claims = append(claims, fmt.Sprintf("%s:%d@%d", tok, t.qty, t.loc))
		}
	}
	return fmt.Sprintf("free [%s]; held [%s]; claimed [%s]", strings.Join(free, " "), strings.Join(holds, " "), strings.Join(claims, " "))
}

// step is the sequential specification of one item: every state the item
// can be in after the operation, given its answer (none: the answer is
// impossible). An unknown answer has several futures: the call took
// effect (for a reserve, at any eligible location that can serve it), or
// it did not.
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
		fresh := t.status == 0
		for _, loc := range in.Locations {
			if _, ok := s.free(loc); !ok {
				return nil // a location without recorded stock cannot be judged
			}
		}
		if out.Unknown {
			next := []state{s}
			if fresh {
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
				// attempt: it held the cart then.
				if n, ok := s.take(in.Token, tokenState{held, out.Location, in.Quantity, in.Deadline}, in.Return); ok {
					return []state{n}
				}
			}
		case ResultInsufficient:
			// All or nothing: a short cart holds nothing. A held token
			// is answered from its hold, a claimed one is refused, so
			// "insufficient" means the token had nothing. This line
			// may be short only if no eligible location's free stock
			// could cover it (no undersell: holds that may have expired
			// but were not reaped yet still count as held); another
			// line's shortage says nothing here.
			if !fresh {
				return nil
			}
			if !out.Short {
				return []state{s}
			}
			for _, loc := range in.Locations {
				if free, _ := s.free(loc); free >= in.Quantity {
					return nil
				}
			}
			return []state{s}
		case "already_claimed":
			if t.status == claimed {
				return []state{s}
			}
		}
		return nil
	case OpClaim:
		// A claim moves units from held to claimed: free does not change.
		if out.Unknown {
			if t.status == held {
				c := t
				c.status, c.deadline = claimed, 0
				return []state{s, s.with(in.Token, c, t.loc, 0)}
			}
			return []state{s}
		}
		switch out.Result {
		case ResultClaimed:
			switch {
			case out.Quantity != t.qty || out.Location != t.loc:
				return nil // deducted something other than the hold
			case out.Replayed && t.status == claimed:
				return []state{s}
			case (!out.Replayed || out.Retried) && t.status == held:
				// A retried call's replay may answer its own first
				// attempt: it claimed then.
				c := t
				c.status, c.deadline = claimed, 0
				return []state{s.with(in.Token, c, t.loc, 0)}
			}
		case "not_found", "expired":
			// An expired hold is refused whether or not it was reaped
			// yet; the model reaps it when its units are needed.
			if t.status == 0 || expirable(t, in.Return) {
				return []state{s}
			}
		}
		return nil
	case OpRelease:
		if out.Unknown {
			if t.status == held {
				return []state{s, s.with(in.Token, tokenState{}, t.loc, t.qty)}
			}
			return []state{s}
		}
		switch out.Result {
		case ResultReleased:
			if t.status == held && out.Quantity == t.qty && out.Location == t.loc {
				return []state{s.with(in.Token, tokenState{}, t.loc, t.qty)}
			}
		case ResultNotReleased:
			switch {
			case t.status == 0 || expirable(t, in.Return):
				return []state{s}
			case out.Retried && t.status == held:
				// The call's first attempt released it.
				return []state{s.with(in.Token, tokenState{}, t.loc, t.qty)}
			}
		case "already_claimed":
			if t.status == claimed {
				return []state{s}
			}
		}
		return nil
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
