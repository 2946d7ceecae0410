package reservation

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// State is where a reservation stands in a store. A reservation is held
// until it reaches one of the terminal states; a terminal state is kept as
// a tombstone (see Tombstone) for longer than any hold lives.
type State string

const (
	// StateHeld: the units are held for the token until it expires.
	StateHeld State = "held"
	// StateClaimed: the ledger was deducted (exactly once).
	StateClaimed State = "claimed"
	// StateReleased: the hold was given back by a release.
	StateReleased State = "released"
	// StateExpired: the hold expired and its units went back.
	StateExpired State = "expired"
	// StateRefused: the reserve was answered "insufficient"; the token
	// never held anything and cannot hold anything now.
	StateRefused State = "refused"
)

// Valid reports whether s is one of the states.
func (s State) Valid() bool {
	switch s {
	case StateHeld, StateClaimed, StateReleased, StateExpired, StateRefused:
		return true
	}
	return false
}

// Terminal reports whether s is a final state (kept as a tombstone).
func (s State) Terminal() bool { return s.Valid() && s != StateHeld }

// TombstoneErr is what a call on a token in state s gets from its
// tombstone: claimed ErrAlreadyClaimed, released ErrReleased, expired
// ErrExpired, and refused (or anything else) ErrNotFound: the token never
// held anything.
func (s State) TombstoneErr() error {
	switch s {
	case StateClaimed:
		return ErrAlreadyClaimed
	case StateReleased:
		return ErrReleased
	case StateExpired:
		return ErrExpired
	}
	return ErrNotFound
}

// DefaultTombstoneTTL is how long a tombstone is kept unless a store is
// configured otherwise: the longest hold (DefaultLimits.MaxTTL) plus a
// margin for calls delayed in flight.
const DefaultTombstoneTTL = time.Hour + 10*time.Minute

// Fence says which store decides a shop's reservations, and since which
// epoch (the flags version that made it so). Both stores keep one per
// shop; a store without one reads it as NoFence. docs/ownership.md
// explains how fences move.
type Fence struct {
	// Decider is the only store that places, claims, releases or expires
	// the shop's reservations.
	Decider Authority `json:"decider"`
	// Epoch orders fences: a handoff at epoch e changes a fence only when
	// its epoch is lower than e.
	Epoch int64 `json:"epoch"`
}

// NoFence is the fence of a shop nobody handed off: Redis decides, as it
// did before the migration.
var NoFence = Fence{Decider: AuthorityRedis, Epoch: 0}

// String returns "redis@3" style text.
func (f Fence) String() string { return fmt.Sprintf("%s@%d", f.Decider, f.Epoch) }

// ParseFence reads the String form back.
func ParseFence(s string) (Fence, error) {
	d, e, ok := strings.Cut(s, "@")
	n, err := strconv.ParseInt(e, 10, 64)
	f := Fence{Decider: Authority(d), Epoch: n}
	if !ok || err != nil || !f.Decider.Valid() || n < 0 {
		return Fence{}, fmt.Errorf("reservation: bad fence %q", s)
	}
	return f, nil
}

// ErrNotDecider is matched by every *NotDeciderError.
var ErrNotDecider = errors.New("reservation: this store does not decide the shop's reservations")

// NotDeciderError is the answer of a store asked to decide (reserve, claim,
// release as authority) for a shop whose fence names the other store.
// Nothing changed. It is not a domain answer: the facade routes by it
// (docs/ownership.md, section 2) and a caller never sees it.
type NotDeciderError struct {
	Shop int64
	// Store is the store that refused.
	Store Authority
	// Fence is the fence it holds for the shop.
	Fence Fence
}

func (e *NotDeciderError) Error() string {
	return fmt.Sprintf("reservation: %s does not decide shop %d (fence %s)", e.Store, e.Shop, e.Fence)
}

// Is makes errors.Is(err, ErrNotDecider) true.
func (e *NotDeciderError) Is(target error) bool { return target == ErrNotDecider }

// Tombstone is a reservation in a terminal state, as a store keeps it.
type Tombstone struct {
	Token string
	State State
	// Allocations: what was held (released, expired) or deducted
	// (claimed); none for refused.
	Allocations []Allocation
	// ExpiresAt is when the hold expired or would have (zero for
	// refused).
	ExpiresAt time.Time
	// Short are the lines a refused reserve could not serve.
	Short []ShortLine
}

// ChangeKind is the kind of a Change.
type ChangeKind string

const (
	// ChangeState: a reservation's state changed in MySQL (see
	// Change.State).
	ChangeState ChangeKind = "state"
	// ChangeAdjust: the ledger moved by a delta.
	ChangeAdjust ChangeKind = "adjust"
	// ChangeFence: MySQL handed a shop to Redis.
	ChangeFence ChangeKind = "fence"
)

// Change is one entry of MySQL's change feed (its transactional outbox):
// what Redis must follow. The relay (package mirror) delivers changes in
// order and Redis applies each idempotently.
type Change struct {
	// ID is the change's position in the feed. An adjust is applied once
	// per ID.
	ID   int64
	Kind ChangeKind
	Shop int64

	// ChangeState: the reservation's state as MySQL holds it when the
	// change is read (not when it was written: applying the latest state
	// is what makes redelivery harmless). A state of "" means MySQL no
	// longer has the reservation (its tombstone was forgotten): nothing
	// to apply.
	Token       string
	State       State
	Allocations []Allocation
	ExpiresAt   time.Time
	Short       []ShortLine
	// StateSince is when the reservation reached State (the database's
	// clock), and Written when this change was written: a change read
	// behind a later transition of its reservation has StateSince after
	// Written. The relay uses them to tell which carts it can still ask
	// Redis about (see Cart).
	StateSince, Written time.Time

	// ChangeAdjust: the ledger row and the delta applied to it.
	Item, Location, Delta int64

	// ChangeFence: the fence MySQL set.
	Fence Fence

	// Cart is set on the change a reserve MySQL decided with
	// ReserveParams.Compare: the cart as asked, in the caller's order, so
	// that the relay asks Redis what it would have decided, against the
	// state the changes before this one left, before applying MySQL's
	// decision. CartLabel is the label the comparison counts under.
	Cart      []Line
	CartLabel string

	// Trace is the W3C traceparent of the call that wrote the change,
	// when tracing recorded that call ("" otherwise): the relay's span
	// applying the change links to it. It never changes what is applied.
	Trace string
}

// Snapshot is a shop's reservation state in one store: its fence, holds
// and tombstones. A handoff from Redis to MySQL moves it across.
type Snapshot struct {
	Shop       int64
	Fence      Fence
	Holds      []Hold
	Tombstones []Tombstone
	// Tokens, when not nil, makes the snapshot partial: it covers only
	// these tokens (one of them with neither a hold nor a tombstone here
	// has none in the store) and says nothing of the shop's others. Nil:
	// the snapshot is the whole shop. A copy ahead of a handoff moves a
	// shop across in partial snapshots (docs/ownership.md, section 3).
	Tokens []string
}

// EncodeCart is the compact text form of a cart's lines, in their order,
// that the change feed keeps: "item:quantity:location|location,...".
func EncodeCart(lines []Line) string {
	var b strings.Builder
	for i, ln := range lines {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d:", ln.Item, ln.Quantity)
		for k, loc := range ln.Locations {
			if k > 0 {
				b.WriteByte('|')
			}
			b.WriteString(strconv.FormatInt(loc, 10))
		}
	}
	return b.String()
}

// DecodeCart reads EncodeCart's form back ("" is no cart).
func DecodeCart(s string) ([]Line, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]Line, 0, len(parts))
	for _, p := range parts {
		ln, err := decodeCartLine(p)
		if err != nil {
			return nil, fmt.Errorf("reservation: cart %q: bad line %q: %w", s, p, err)
		}
		out = append(out, ln)
	}
	return out, nil
}

func decodeCartLine(p string) (Line, error) {
	f := strings.Split(p, ":")
	if len(f) != 3 || f[2] == "" {
		return Line{}, errors.New("want item:quantity:locations, the locations split by |")
	}
	item, err1 := strconv.ParseInt(f[0], 10, 64)
	qty, err2 := strconv.ParseInt(f[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Line{}, err
	}
	ln := Line{Item: item, Quantity: qty}
	for _, loc := range strings.Split(f[2], "|") {
		v, err := strconv.ParseInt(loc, 10, 64)
		if err != nil {
			return Line{}, err
		}
		ln.Locations = append(ln.Locations, v)
	}
	return ln, nil
}

// EncodeAllocations is the compact text form both stores use for a list of
// allocations: "item:location:quantity,...".
func EncodeAllocations(as []Allocation) string {
	var b strings.Builder
	for i, a := range as {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d:%d", a.Item, a.Location, a.Quantity)
	}
	return b.String()
}

// DecodeAllocations reads EncodeAllocations's form back, sorted.
func DecodeAllocations(s string) ([]Allocation, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]Allocation, 0, len(parts))
	for _, p := range parts {
		n, err := triple(p)
		if err != nil {
			return nil, fmt.Errorf("reservation: allocations %q: %w", s, err)
		}
		out = append(out, Allocation{Item: n[0], Location: n[1], Quantity: n[2]})
	}
	SortAllocations(out)
	return out, nil
}

// EncodeShort is the same text form for short lines:
// "item:requested:unheld,...".
func EncodeShort(ss []ShortLine) string {
	var b strings.Builder
	for i, s := range ss {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d:%d", s.Item, s.Requested, s.Unheld)
	}
	return b.String()
}

// DecodeShort reads EncodeShort's form back.
func DecodeShort(s string) ([]ShortLine, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]ShortLine, 0, len(parts))
	for _, p := range parts {
		n, err := triple(p)
		if err != nil {
			return nil, fmt.Errorf("reservation: short lines %q: %w", s, err)
		}
		out = append(out, ShortLine{Item: n[0], Requested: n[1], Unheld: n[2]})
	}
	return out, nil
}

func triple(p string) ([3]int64, error) {
	var n [3]int64
	f := strings.Split(p, ":")
	if len(f) != 3 {
		return n, fmt.Errorf("bad entry %q", p)
	}
	for i, x := range f {
		v, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return n, fmt.Errorf("bad entry %q: %w", p, err)
		}
		n[i] = v
	}
	return n, nil
}

// HandoffProgress is how far the handoffs a flags version asked for have
// come in one pod: what the fences say beside what the flags say. The
// pod's handoff sweeper (package mirror) writes it; status, the dashboard
// and the admin API show it.
type HandoffProgress struct {
	// FlagsVersion is the flags version the sweep worked to.
	FlagsVersion int64
	// Shops is how many shops that version moved to another decider.
	Shops int64
	// Done is how many of them are handed off (both fences agree with
	// the flags).
	Done int64
	// Pending is how many are still to hand off.
	Pending int64
	// Failed is how many of the pending failed at their last try.
	Failed int64
	// OldestPending is since when the oldest pending shop has waited
	// (zero when none is pending).
	OldestPending time.Time
	// Started is when the sweep first saw the version; Finished when its
	// last shop was handed off (zero while some are pending).
	Started  time.Time
	Finished time.Time
	// Updated is when the report was written.
	Updated time.Time
	// Replica ran the sweep.
	Replica string
	// LastError is the last handoff failure of the sweep ("" when none).
	LastError string
}

// Summary says it in a few words, as of now: "handed off 1,204/1,204
// shops in 380ms" or "3 of 1,204 shops pending, oldest 2s".
func (p HandoffProgress) Summary(now time.Time) string {
	switch {
	case p.Pending == 0 && p.Shops == 0:
		return fmt.Sprintf("no shop to hand off at flags version %d", p.FlagsVersion)
	case p.Pending == 0:
		return fmt.Sprintf("handed off %s/%s shops in %s", thousands(p.Done), thousands(p.Shops), p.Finished.Sub(p.Started).Round(time.Millisecond))
	}
	s := fmt.Sprintf("%s of %s shops pending, oldest %s", thousands(p.Pending), thousands(max(p.Shops, p.Pending)), now.Sub(p.OldestPending).Round(100*time.Millisecond))
	if p.Failed > 0 {
		s += fmt.Sprintf(" (%d failed at the last try: %s)", p.Failed, p.LastError)
	}
	return s
}

// thousands writes n with commas between groups of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return "-" + thousands(-n)
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
