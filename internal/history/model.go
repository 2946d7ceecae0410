package history

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// status is where a token stands on one key. A token that was never
// reserved, or whose hold was released, is absent: it may be reserved
// (again) and a claim of it is not_found.
type status uint8

const (
	held status = iota + 1
	claimed
)

type tokenState struct {
	status status
	qty    int64
}

// state is one key's state: what is free (stock neither held nor claimed)
// and each token's hold or claim. States are never modified once built:
// porcupine keeps and compares them while it searches.
type state struct {
	stocked bool
	free    int64
	tokens  map[string]tokenState
	// sum is the XOR of the tokens' hashes, kept as tokens change so that
	// Hash is O(1).
	sum uint64
}

func tokenHash(token string, t tokenState) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%d\x00%d", token, t.status, t.qty)
	return h.Sum64()
}

// with returns a copy of s where token has state t (zero: absent) and free
// changed by dfree.
func (s state) with(token string, t tokenState, dfree int64) state {
	n := state{stocked: true, free: s.free + dfree, tokens: maps.Clone(s.tokens), sum: s.sum}
	if n.tokens == nil {
		n.tokens = map[string]tokenState{}
	}
	if old, ok := n.tokens[token]; ok {
		n.sum ^= tokenHash(token, old)
		delete(n.tokens, token)
	}
	if t.status != 0 {
		n.tokens[token] = t
		n.sum ^= tokenHash(token, t)
	}
	return n
}

func (s state) equal(o state) bool {
	return s.stocked == o.stocked && s.free == o.free && s.sum == o.sum && maps.Equal(s.tokens, o.tokens)
}

func (s state) String() string {
	if !s.stocked {
		return "no stock recorded"
	}
	var holds, claims []string
	for _, tok := range slices.Sorted(maps.Keys(s.tokens)) {
		t := s.tokens[tok]
		if t.status == held {
			holds = append(holds, fmt.Sprintf("%s:%d", tok, t.qty))
		} else {
			claims = append(claims, fmt.Sprintf("%s:%d", tok, t.qty))
		}
	}
	return fmt.Sprintf("free %d; held [%s]; claimed [%s]", s.free, strings.Join(holds, " "), strings.Join(claims, " "))
}

// step is the sequential specification of one key: every state the key
// can be in after the operation, given its answer (none: the answer is
// impossible). An unknown answer has two futures: the call took effect,
// or it did not.
func step(s state, in Input, out Output) []state {
	if in.Op == OpStock {
		if s.stocked {
			return nil
		}
		return []state{{stocked: true, free: in.Quantity}}
	}
	if !s.stocked {
		return nil
	}
	t := s.tokens[in.Token]
	switch in.Op {
	case OpReserve:
		fresh := t.status == 0 && s.free >= in.Quantity
		if out.Unknown {
			if fresh {
				return []state{s, s.with(in.Token, tokenState{held, in.Quantity}, -in.Quantity)}
			}
			return []state{s}
		}
		switch out.Result {
		case ResultReserved:
			switch {
			case out.Quantity != in.Quantity:
				return nil // allocated a different quantity here
			case out.Replayed && t.status == held && t.qty == in.Quantity:
				return []state{s}
			case !out.Replayed && fresh:
				return []state{s.with(in.Token, tokenState{held, in.Quantity}, -in.Quantity)}
			}
		case ResultInsufficient:
			// All or nothing: a short cart holds nothing. A held token
			// is answered from its hold, a claimed one is refused, so
			// "insufficient" means the token had nothing. This line
			// may be short only if free stock could not cover it (no
			// undersell); another line's shortage says nothing here.
			if t.status == 0 && (!out.Short || s.free < in.Quantity) {
				return []state{s}
			}
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
				return []state{s, s.with(in.Token, tokenState{claimed, t.qty}, 0)}
			}
			return []state{s}
		}
		switch out.Result {
		case ResultClaimed:
			switch {
			case out.Quantity != t.qty:
				return nil // deducted something other than the hold
			case out.Replayed && t.status == claimed:
				return []state{s}
			case !out.Replayed && t.status == held:
				return []state{s.with(in.Token, tokenState{claimed, t.qty}, 0)}
			}
		case "not_found":
			if t.status == 0 {
				return []state{s}
			}
		}
		return nil
	case OpRelease:
		if out.Unknown {
			if t.status == held {
				return []state{s, s.with(in.Token, tokenState{}, t.qty)}
			}
			return []state{s}
		}
		switch out.Result {
		case ResultReleased:
			if t.status == held && out.Quantity == t.qty {
				return []state{s.with(in.Token, tokenState{}, t.qty)}
			}
		case ResultNotReleased:
			if t.status == 0 {
				return []state{s}
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

// Model is the porcupine model of the authority, partitioned by key. Each
// partition starts unstocked; its stock operation (Recorder.Stock) comes
// first and sets it.
func Model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[Key][]porcupine.Operation{}
			for _, op := range ops {
				k := op.Input.(Input).Key
				byKey[k] = append(byKey[k], op)
			}
			keys := slices.SortedFunc(maps.Keys(byKey), func(a, b Key) int {
				return strings.Compare(a.String(), b.String())
			})
			out := make([][]porcupine.Operation, len(keys))
			for i, k := range keys {
				out[i] = byKey[k]
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
			return st.sum ^ uint64(st.free)*0x9e3779b97f4a7c15
		},
		DescribeOperation: func(in, out any) string { return describe(in.(Input), out.(Output)) },
		DescribeState:     func(s any) string { return s.(state).String() },
	}
	return nm.ToModel()
}

func describe(in Input, out Output) string {
	switch in.Op {
	case OpStock:
		return fmt.Sprintf("stock(%d)", in.Quantity)
	case OpReserve:
		return fmt.Sprintf("reserve(%s, %d) -> %s", in.Token, in.Quantity, describeOutput(out))
	}
	return fmt.Sprintf("%s(%s) -> %s", in.Op, in.Token, describeOutput(out))
}

func describeOutput(out Output) string {
	if out.Unknown {
		return "unknown (" + out.Err + ")"
	}
	s := out.Result
	if out.Quantity != 0 {
		s += fmt.Sprintf(" %d", out.Quantity)
	}
	if out.Replayed {
		s += " replayed"
	}
	if out.Short {
		s += " short"
	}
	return s
}
