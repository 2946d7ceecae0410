package mirror_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/reservation"
)

// In-memory stores that keep the contracts of mirror.MySQL and
// mirror.Redis (roles.go), so that a test can drive the protocol through
// the roles alone and put a fault exactly between two of its steps, where
// the real servers only fail when they fail. They model what the protocol
// relies on and nothing more: fences, holds and tombstones, MySQL's feed
// and copy mark, Redis's copy log. Stock and pools are left out: a hold
// here is its token and its allocations, and the checks compare them.

var (
	_ mirror.MySQL = (*fakeMySQL)(nil)
	_ mirror.Redis = (*fakeRedis)(nil)
)

// errFault is the failure a test plants.
var errFault = errors.New("planted fault")

// rec is one reservation in a fake store: a hold (StateHeld) or a
// tombstone.
type rec struct {
	state  reservation.State
	allocs []reservation.Allocation
	by     reservation.Authority
}

// shopRecs is a shop's reservations by token.
type shopRecs map[string]rec

func (r shopRecs) snapshot(shop int64, f reservation.Fence, tokens []string) reservation.Snapshot {
	snap := reservation.Snapshot{Shop: shop, Fence: f, Tokens: tokens}
	if tokens == nil {
		tokens = slices.Sorted(maps.Keys(r))
	}
	for _, t := range tokens {
		x, ok := r[t]
		switch {
		case !ok:
		case x.state == reservation.StateHeld:
			snap.Holds = append(snap.Holds, reservation.Hold{Shop: shop, Token: t, Allocations: x.allocs, Authority: x.by})
		default:
			snap.Tombstones = append(snap.Tombstones, reservation.Tombstone{Token: t, State: x.state, Allocations: x.allocs})
		}
	}
	return snap
}

// write makes the tokens snap covers exactly snap's (all of the shop's
// for a whole snapshot).
func (r shopRecs) write(snap *reservation.Snapshot) {
	covered := snap.Tokens
	if covered == nil {
		covered = slices.Collect(maps.Keys(r))
	}
	for _, t := range covered {
		delete(r, t)
	}
	for _, h := range snap.Holds {
		r[h.Token] = rec{state: reservation.StateHeld, allocs: h.Allocations, by: h.Authority}
	}
	for _, t := range snap.Tombstones {
		r[t.Token] = rec{state: t.State, allocs: t.Allocations}
	}
}

// render is a shop's reservations for a comparison: one line per token,
// sorted.
func (r shopRecs) render() []string {
	var out []string
	for _, t := range slices.Sorted(maps.Keys(r)) {
		out = append(out, fmt.Sprintf("%s %s %v", t, r[t].state, r[t].allocs))
	}
	return out
}

// fakeMySQL is a pod's MySQL: fences with their copy mark, reservations,
// the change feed, named leases and the sweeper's report.
type fakeMySQL struct {
	mu       sync.Mutex
	fences   map[int64]reservation.Fence
	copying  map[int64]int64
	recs     map[int64]shopRecs
	feed     []reservation.Change
	lastID   int64
	leases   map[string]bool
	progress *reservation.HandoffProgress

	// Faults: failTakeOver fails that many copy cut-overs (Copier.TakeOver)
	// before they write anything; failDone that many deletes of delivered
	// changes, after the changes were applied (a lost reply).
	failTakeOver, failDone int
}

func newFakeMySQL() *fakeMySQL {
	return &fakeMySQL{fences: map[int64]reservation.Fence{}, copying: map[int64]int64{}, recs: map[int64]shopRecs{}, leases: map[string]bool{}}
}

func (s *fakeMySQL) fence(shop int64) reservation.Fence {
	if f, ok := s.fences[shop]; ok {
		return f
	}
	return reservation.NoFence
}

func (s *fakeMySQL) shop(shop int64) shopRecs {
	if s.recs[shop] == nil {
		s.recs[shop] = shopRecs{}
	}
	return s.recs[shop]
}

// decide places a hold (allocs) or a terminal state of token as the
// decider, recording the change in the feed in the same step, as a
// deciding transaction does; NotDeciderError when MySQL does not decide.
func (s *fakeMySQL) decide(shop int64, token string, st reservation.State, allocs ...reservation.Allocation) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.fence(shop); f.Decider != reservation.AuthorityMySQL {
		return &reservation.NotDeciderError{Shop: shop, Store: reservation.AuthorityMySQL, Fence: f}
	}
	r := s.shop(shop)
	if st != reservation.StateHeld {
		allocs = r[token].allocs
	}
	r[token] = rec{state: st, allocs: allocs, by: reservation.AuthorityMySQL}
	s.lastID++
	s.feed = append(s.feed, reservation.Change{ID: s.lastID, Kind: reservation.ChangeState, Shop: shop, Token: token})
	return nil
}

func (s *fakeMySQL) state(shop int64) (reservation.Fence, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fence(shop), s.shop(shop).render()
}

func (s *fakeMySQL) Fence(_ context.Context, shop int64) (reservation.Fence, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fence(shop), nil
}

// Yield moves the fence to Redis, ends a copy, and records the fence
// change last in the feed: every change MySQL decided is before it.
func (s *fakeMySQL) Yield(_ context.Context, shop, epoch int64) (reservation.Fence, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.fence(shop); f.Epoch >= epoch {
		return f, nil
	}
	f := reservation.Fence{Decider: reservation.AuthorityRedis, Epoch: epoch}
	s.fences[shop], s.copying[shop] = f, 0
	s.lastID++
	s.feed = append(s.feed, reservation.Change{ID: s.lastID, Kind: reservation.ChangeFence, Shop: shop, Fence: f})
	return f, nil
}

func (s *fakeMySQL) TakeOver(_ context.Context, snap *reservation.Snapshot, epoch int64) (reservation.Fence, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.fence(snap.Shop); f.Epoch >= epoch {
		return f, nil
	}
	s.shop(snap.Shop).write(snap)
	f := reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: epoch}
	s.fences[snap.Shop], s.copying[snap.Shop] = f, 0
	return f, nil
}

func (s *fakeMySQL) BeginCopy(ctx context.Context, shop, id int64, from reservation.Fence) (reservation.Copier, reservation.Fence, error) {
	name := fmt.Sprintf("copy:%d", shop)
	l, _ := s.TryLease(ctx, name)
	if l == nil {
		return nil, reservation.Fence{}, reservation.ErrCopyBusy
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fence(shop)
	if f.Decider == reservation.AuthorityMySQL && f.Epoch >= from.Epoch {
		l.Release()
		return nil, f, nil
	}
	s.copying[shop] = id
	return &fakeCopier{s: s, lease: l, shop: shop, id: id}, f, nil
}

// pendingLocked returns the feed's changes that keep, up to limit, each
// state change with its reservation's current state.
func (s *fakeMySQL) pendingLocked(keep func(reservation.Change) bool, limit int) []reservation.Change {
	var out []reservation.Change
	for _, c := range s.feed {
		if len(out) == limit {
			break
		}
		if !keep(c) {
			continue
		}
		if c.Kind == reservation.ChangeState {
			x := s.shop(c.Shop)[c.Token]
			c.State, c.Allocations = x.state, x.allocs
		}
		out = append(out, c)
	}
	return out
}

func (s *fakeMySQL) Pending(_ context.Context, shop int64, limit int) ([]reservation.Change, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pendingLocked(func(c reservation.Change) bool { return shop == 0 || c.Shop == shop }, limit), nil
}

func (s *fakeMySQL) PendingExcept(_ context.Context, skip []int64, limit int) ([]reservation.Change, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pendingLocked(func(c reservation.Change) bool { return !slices.Contains(skip, c.Shop) }, limit), nil
}

func (s *fakeMySQL) Done(_ context.Context, ids []int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(ids) > 0 && s.failDone > 0 {
		s.failDone--
		return fmt.Errorf("delete delivered changes: %w", errFault)
	}
	s.feed = slices.DeleteFunc(s.feed, func(c reservation.Change) bool { return slices.Contains(ids, c.ID) })
	return nil
}

func (s *fakeMySQL) Backlog(context.Context) (int64, time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.feed)), 0, nil
}

// CopyShop holds the shop still (the lock) while write runs, as the real
// store holds its fence rows.
func (s *fakeMySQL) CopyShop(ctx context.Context, shop int64, write func(ctx context.Context, c *reservation.ShopCopy) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cp := &reservation.ShopCopy{Snapshot: s.shop(shop).snapshot(shop, s.fence(shop), nil)}
	for _, c := range s.feed {
		if c.Shop == shop {
			cp.Covered = append(cp.Covered, c.ID)
		}
	}
	if err := write(ctx, cp); err != nil {
		return err
	}
	s.feed = slices.DeleteFunc(s.feed, func(c reservation.Change) bool { return slices.Contains(cp.Covered, c.ID) })
	return nil
}

func (s *fakeMySQL) TryLease(_ context.Context, name string) (reservation.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases[name] {
		return nil, nil
	}
	s.leases[name] = true
	return &fakeLease{s: s, name: name}, nil
}

func (s *fakeMySQL) Shops(context.Context) ([]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.recs)), nil
}

func (s *fakeMySQL) Fences(context.Context) (map[int64]reservation.FenceState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int64]reservation.FenceState{}
	for shop, f := range s.fences {
		out[shop] = reservation.FenceState{Fence: f, Copying: s.copying[shop]}
	}
	return out, nil
}

func (s *fakeMySQL) SaveHandoffProgress(_ context.Context, p reservation.HandoffProgress) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.progress = &p
	return nil
}

func (s *fakeMySQL) LoadHandoffProgress(context.Context) (reservation.HandoffProgress, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.progress == nil {
		return reservation.HandoffProgress{}, false, nil
	}
	return *s.progress, true, nil
}

type fakeLease struct {
	s    *fakeMySQL
	name string
}

func (l *fakeLease) Held(context.Context) bool {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.s.leases[l.name]
}

func (l *fakeLease) Release() {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	delete(l.s.leases, l.name)
}

// fakeCopier writes a copy's parts while the shop is marked with it.
type fakeCopier struct {
	s     *fakeMySQL
	lease reservation.Lease
	shop  int64
	id    int64
}

func (c *fakeCopier) Held(_ context.Context, each func(page []string) error) error {
	c.s.mu.Lock()
	var held []string
	for t, x := range c.s.shop(c.shop) {
		if x.state == reservation.StateHeld {
			held = append(held, t)
		}
	}
	c.s.mu.Unlock()
	slices.Sort(held)
	return each(held)
}

func (c *fakeCopier) Copy(_ context.Context, part *reservation.Snapshot) error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.s.copying[c.shop] != c.id || c.s.fence(c.shop).Decider == reservation.AuthorityMySQL {
		return reservation.ErrCopyLost
	}
	c.s.shop(c.shop).write(part)
	return nil
}

func (c *fakeCopier) TakeOver(_ context.Context, last *reservation.Snapshot, epoch int64) (reservation.Fence, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.s.failTakeOver > 0 {
		c.s.failTakeOver--
		return reservation.Fence{}, fmt.Errorf("take over shop %d: %w", c.shop, errFault)
	}
	if f := c.s.fence(c.shop); f.Epoch >= epoch {
		return f, nil
	}
	if c.s.copying[c.shop] != c.id {
		return reservation.Fence{}, reservation.ErrCopyLost
	}
	c.s.shop(c.shop).write(last)
	f := reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: epoch}
	c.s.fences[c.shop], c.s.copying[c.shop] = f, 0
	return f, nil
}

func (c *fakeCopier) Refill(context.Context, func(time.Duration) error) (int64, error) { return 0, nil }

func (c *fakeCopier) Close() { c.lease.Release() }

// fakeRedis is a pod's Redis: fences, reservations, the copy log while a
// copy is on, and the shops taken by force.
type fakeRedis struct {
	mu     sync.Mutex
	fences map[int64]reservation.Fence
	recs   map[int64]shopRecs
	logs   map[int64]*copyLog
	copies int64
	forced map[int64]bool

	// failApply fails the state change of a token that many times, before
	// Redis applies it (a timeout, a full slot).
	failApply map[string]int
	// down fails every apply before it applies anything, and every read
	// of the shops taken by force: the server does not answer.
	down bool
	// forcedReads counts the reads of the shops taken by force.
	forcedReads int
}

// copyLog is a shop's change log while a copy is on: each token at the
// position of its last change.
type copyLog struct {
	id, seq int64
	pos     map[string]int64
}

func newFakeRedis() *fakeRedis {
	return &fakeRedis{fences: map[int64]reservation.Fence{}, recs: map[int64]shopRecs{}, logs: map[int64]*copyLog{},
		forced: map[int64]bool{}, failApply: map[string]int{}}
}

func (s *fakeRedis) fence(shop int64) reservation.Fence {
	if f, ok := s.fences[shop]; ok {
		return f
	}
	return reservation.NoFence
}

func (s *fakeRedis) shop(shop int64) shopRecs {
	if s.recs[shop] == nil {
		s.recs[shop] = shopRecs{}
	}
	return s.recs[shop]
}

// decide places a hold (allocs) or a terminal state of token as the
// decider, logging the token while a copy is on, as the deciding scripts
// do; NotDeciderError when Redis does not decide.
func (s *fakeRedis) decide(shop int64, token string, st reservation.State, allocs ...reservation.Allocation) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.fence(shop); f.Decider != reservation.AuthorityRedis {
		return &reservation.NotDeciderError{Shop: shop, Store: reservation.AuthorityRedis, Fence: f}
	}
	r := s.shop(shop)
	if st != reservation.StateHeld {
		allocs = r[token].allocs
	}
	r[token] = rec{state: st, allocs: allocs, by: reservation.AuthorityRedis}
	if l := s.logs[shop]; l != nil {
		l.seq++
		l.pos[token] = l.seq
	}
	return nil
}

func (s *fakeRedis) state(shop int64) (reservation.Fence, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fence(shop), s.shop(shop).render()
}

func (s *fakeRedis) Fence(_ context.Context, shop int64) (reservation.Fence, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fence(shop), nil
}

func (s *fakeRedis) raise(shop int64, to reservation.Fence) reservation.Fence {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fence(shop).Epoch < to.Epoch {
		s.fences[shop] = to
	}
	return s.fence(shop)
}

func (s *fakeRedis) Yield(_ context.Context, shop, epoch int64) (reservation.Fence, error) {
	return s.raise(shop, reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: epoch}), nil
}

func (s *fakeRedis) Force(_ context.Context, shop, epoch int64) (reservation.Fence, error) {
	return s.raise(shop, reservation.Fence{Decider: reservation.AuthorityRedis, Epoch: epoch}), nil
}

func (s *fakeRedis) NoteForced(_ context.Context, shop int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forced[shop] = true
	return nil
}

func (s *fakeRedis) Forced(context.Context) ([]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forcedReads++
	if s.down {
		return nil, fmt.Errorf("shops taken by force: dial: %w", errFault)
	}
	return slices.Sorted(maps.Keys(s.forced)), nil
}

func (s *fakeRedis) FencedOff(_ context.Context, shop int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.forced, shop)
	return nil
}

// ApplyEvaluating applies changes in order and stops at the first that
// fails; every change is idempotent (a hold is created only where the
// token has nothing, a terminal state replaces a hold), and a fence
// change only raises the fence.
func (s *fakeRedis) ApplyEvaluating(_ context.Context, changes []reservation.Change, _ reservation.Evaluated) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return 0, fmt.Errorf("apply: dial: %w", errFault)
	}
	for i, c := range changes {
		switch c.Kind {
		case reservation.ChangeState:
			if s.failApply[c.Token] > 0 {
				s.failApply[c.Token]--
				return i, fmt.Errorf("apply change %d (token %s): %w", c.ID, c.Token, errFault)
			}
			r := s.shop(c.Shop)
			_, had := r[c.Token]
			switch {
			case c.State == "":
			case c.State == reservation.StateHeld && !had:
				r[c.Token] = rec{state: c.State, allocs: c.Allocations, by: reservation.AuthorityMySQL}
			case c.State.Terminal():
				r[c.Token] = rec{state: c.State, allocs: c.Allocations}
			}
		case reservation.ChangeFence:
			if s.fence(c.Shop).Epoch < c.Fence.Epoch {
				s.fences[c.Shop] = c.Fence
			}
		}
	}
	return len(changes), nil
}

func (s *fakeRedis) Rewrite(_ context.Context, snap reservation.Snapshot, _ []reservation.StockLevel, _ []int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.fence(snap.Shop); f.Epoch > snap.Fence.Epoch {
		return &reservation.NewerFenceError{Shop: snap.Shop, Fence: f, Snapshot: snap.Fence}
	}
	s.recs[snap.Shop] = shopRecs{}
	s.shop(snap.Shop).write(&snap)
	s.fences[snap.Shop] = snap.Fence
	return nil
}

func (s *fakeRedis) StartCopy(_ context.Context, shop int64) (reservation.CopyLog, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.fence(shop); f.Decider != reservation.AuthorityRedis {
		return reservation.CopyLog{}, &reservation.NotDeciderError{Shop: shop, Store: reservation.AuthorityRedis, Fence: f}
	}
	l := s.logs[shop]
	if l == nil {
		s.copies++
		l = &copyLog{id: s.copies, pos: map[string]int64{}}
		s.logs[shop] = l
	}
	return reservation.CopyLog{ID: l.id, Seq: l.seq, Size: int64(len(s.shop(shop)))}, nil
}

func (s *fakeRedis) Changed(_ context.Context, shop, id, after int64, limit int) ([]string, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.logs[shop]
	if l == nil || l.id != id {
		return nil, 0, reservation.ErrCopyLost
	}
	var tokens []string
	for t, p := range l.pos {
		if p > after {
			tokens = append(tokens, t)
		}
	}
	slices.SortFunc(tokens, func(a, b string) int { return int(l.pos[a] - l.pos[b]) })
	upto := l.seq
	if len(tokens) > limit {
		tokens = tokens[:limit]
		upto = l.pos[tokens[limit-1]]
	}
	return tokens, upto, nil
}

func (s *fakeRedis) EndCopy(_ context.Context, shop, id int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.logs[shop]; l != nil && l.id == id {
		delete(s.logs, shop)
	}
	return nil
}

func (s *fakeRedis) Tokens(_ context.Context, shop int64, each func(page []string) error) error {
	s.mu.Lock()
	tokens := slices.Sorted(maps.Keys(s.shop(shop)))
	s.mu.Unlock()
	return each(tokens)
}

func (s *fakeRedis) Records(_ context.Context, shop int64, tokens []string) (reservation.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tokens == nil {
		tokens = []string{}
	}
	return s.shop(shop).snapshot(shop, s.fence(shop), tokens), nil
}

func (s *fakeRedis) Snapshot(_ context.Context, shop int64) (reservation.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shop(shop).snapshot(shop, s.fence(shop), nil), nil
}

func (s *fakeRedis) Shops(context.Context) ([]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.recs)), nil
}

func (s *fakeRedis) Fences(_ context.Context, shops []int64) (map[int64]reservation.Fence, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int64]reservation.Fence{}
	for _, shop := range shops {
		out[shop] = s.fence(shop)
	}
	return out, nil
}
