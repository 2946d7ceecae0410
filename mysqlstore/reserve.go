package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// errTokenRace means another call with the same token inserted its hold
// first; the answer is that call's hold.
var errTokenRace = errors.New("mysqlstore: concurrent reserve of the same token")

// Reserve holds a cart's lines in one transaction.
//
// As authority (MySQL decides the shop) it first takes a shared lock on the
// shop's fence row, in the same round trip as the token's state (the
// idempotency check): a handoff waits for it, and a shop MySQL does not
// decide is refused with *reservation.NotDeciderError. Then each attempt
// selects, in one round trip, units for every line at the line's current
// location (a UNION ALL of SKIP LOCKED branches in (item, location)
// order), deletes them, inserts the hold lines, the reservation's row and
// the change Redis must follow. A line whose location came up short sends
// the reserver to that pool's replenisher (single flight: concurrent
// reservers wait for one refill), then back to the pool. A location is
// passed over only when the ledger itself has fewer unheld units than the
// line needs there, so an empty pool is never an answer: the answer is
// "insufficient" only when no eligible location has the stock, and it is
// recorded (the token is refused for good, so a delayed first attempt
// cannot hold anything later).
//
// As shadow (Redis decides; MySQL keeps its own hold to be compared) it
// writes no change for Redis and no refusal, and it is refused once MySQL
// decides the shop (see checkShadowFence).
func (s *Store) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	if err := s.cfg.Limits.ValidateReserve(p); err != nil {
		return reservation.ReserveResult{}, err
	}
	r := &reserveCall{s: s, p: p, authority: reservation.AuthorityRedis, lines: slices.Clone(p.Lines), deciding: p.As == reservation.AsAuthority}
	if r.deciding {
		r.authority = reservation.AuthorityMySQL // as shadow, Redis decides
	}
	// The global lock order: lines by item (items are unique in a cart).
	slices.SortFunc(r.lines, func(a, b reservation.Line) int { return cmp.Compare(a.Item, b.Item) })
	r.cursor = make([]int, len(r.lines))
	r.refilled = make([]uint64, len(r.lines))
	return r.run(ctx)
}

type reserveCall struct {
	s *Store
	p *reservation.ReserveParams
	// authority is recorded on the hold: the store that decided it.
	authority reservation.Authority
	// deciding: MySQL decides (p.As is AsAuthority).
	deciding bool
	lines    []reservation.Line // sorted by item
	cursor   []int              // per line: index of the location being tried
	// refilled is, per line, the pool's refill epoch in this store when
	// the attempt looked at the pool (see refills).
	refilled []uint64
}

func (r *reserveCall) loc(i int) int64 { return r.lines[i].Locations[r.cursor[i]] }

func (r *reserveCall) run(ctx context.Context) (reservation.ReserveResult, error) {
	backoff := r.s.cfg.RetryBase
	for attempt := 1; ; attempt++ {
		res, short, err := r.gatedAttempt(ctx)
		if errors.Is(err, errTokenRace) {
			continue
		}
		if err != nil || short == nil {
			return res, err
		}
		progressed, err := r.resolveShort(ctx, short)
		if err != nil {
			return reservation.ReserveResult{}, err
		}
		if slices.ContainsFunc(short, func(i int) bool { return r.cursor[i] == len(r.lines[i].Locations) }) {
			res, err := r.insufficient(ctx)
			if errors.Is(err, errTokenRace) {
				continue // another call with the token decided first: answer its decision
			}
			return res, err
		}
		if attempt >= r.s.cfg.ReserveAttempts {
			return reservation.ReserveResult{}, fmt.Errorf("mysqlstore: reserve shop %d token %q: pool still short after %d attempts: %w",
				r.p.Shop, r.p.Token, attempt, reservation.ErrContention)
		}
		r.s.metrics.shortRetries.Inc()
		if progressed {
			backoff = r.s.cfg.RetryBase
			continue
		}
		// Units are there but locked by other reservers: wait for them to
		// commit or roll back.
		select {
		case <-ctx.Done():
			return reservation.ReserveResult{}, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, r.s.cfg.RetryMax)
	}
}

// gatedAttempt runs an attempt once the pools of its lines let it in
// (see gates).
func (r *reserveCall) gatedAttempt(ctx context.Context) (reservation.ReserveResult, []int, error) {
	if r.s.cfg.PoolConcurrency < 1 {
		return r.attempt(ctx)
	}
	keys := make([]key, len(r.lines))
	for i := range r.lines {
		keys[i] = r.key(i)
	}
	leave, err := r.s.gates.enter(ctx, r.s.cfg.PoolConcurrency, keys)
	if err != nil {
		return reservation.ReserveResult{}, nil, err
	}
	defer leave()
	return r.attempt(ctx)
}

// attempt runs one reserve transaction. It returns the indexes of lines
// whose pool came up short (and then changes nothing), or the result.
//
// Batched, it is two round trips: BEGIN, the fence and the token's state
// (the idempotency check) and every line's units in the first; the
// writes with the COMMIT in the second. A line the first scan left short
// costs one more (see takeUnits), and so does a shadow write's second look
// at the fence (see checkShadowFence).
func (r *reserveCall) attempt(ctx context.Context) (res reservation.ReserveResult, short []int, err error) {
	err = r.s.inBatch(ctx, callerReserve, func(t *txn) error {
		res, short = reservation.ReserveResult{}, nil
		for i := range r.lines {
			r.refilled[i] = r.s.refills.epoch(r.key(i))
		}
		var fence fenceRow
		var st stateRow
		units, now, err := r.takeUnits(t, fenceAndState(sqlReserveExisting, r.p.Shop, r.p.Token, false, &fence, &st))
		if err != nil {
			return fmt.Errorf("mysqlstore: reserve: %w", err)
		}
		if found, err := r.existing(fence, st, &res); err != nil || found {
			return err // a replay: the commit releases the units' locks
		}
		for i, ln := range r.lines {
			if int64(len(units[i])) < ln.Quantity {
				short = append(short, i)
			}
		}
		if short != nil {
			return nil // the commit releases the row locks; nothing was written
		}
		if err := r.deleteUnits(t, units); err != nil {
			return err
		}
		// DATETIME(3) keeps milliseconds: truncate here so the answer
		// equals what is stored.
		expires := now.Add(r.p.TTL).Truncate(time.Millisecond)
		if hook := r.s.beforeHoldInsert; hook != nil {
			hook()
		}
		if err := r.write(t, expires); err != nil {
			return err
		}
		if !r.deciding {
			if err := r.s.checkShadowFence(t, callerReserve, r.p.Shop, r.p.Token, fence); err != nil {
				return err
			}
		}
		if hook := r.s.beforeReserveCommit; hook != nil {
			hook()
		}
		res = reservation.ReserveResult{
			Status:      reservation.StatusReserved,
			Allocations: r.allocations(),
			ExpiresAt:   expires,
			Authority:   r.authority,
		}
		return nil
	})
	switch mysqlErrno(err) {
	case errDupEntry:
		// Another call with the token inserted its hold or its row first.
		err = errTokenRace
	}
	if err != nil {
		return reservation.ReserveResult{}, nil, err
	}
	return res, short, nil
}

// existing judges the fence and the token's state read with the units: a
// deciding reserve in a shop MySQL does not decide is refused; a repeated
// token is answered from its state: its hold (Replayed), a conflict, its
// refusal (Replayed), or its tombstone.
func (r *reserveCall) existing(fence fenceRow, st stateRow, res *reservation.ReserveResult) (bool, error) {
	if r.deciding {
		if err := r.s.decides(r.p.Shop, fence); err != nil {
			return false, err
		}
	}
	if !st.found {
		return false, nil
	}
	switch st.state {
	case reservation.StateHeld:
		if !reservation.SameLines(r.p.Lines, st.allocs) {
			return false, fmt.Errorf("mysqlstore: reserve shop %d token %q holds %v: %w", r.p.Shop, r.p.Token, st.allocs, reservation.ErrTokenConflict)
		}
		*res = reservation.ReserveResult{
			Status:      reservation.StatusReserved,
			Allocations: st.allocs,
			ExpiresAt:   st.expiresAt,
			Authority:   r.authority,
			Replayed:    true,
		}
		return true, nil
	case reservation.StateRefused:
		r.s.metrics.tombstoneHits.WithLabelValues(string(st.state)).Inc()
		*res = reservation.ReserveResult{Status: reservation.StatusInsufficient, Short: st.short, Replayed: true}
		return true, nil
	}
	return false, r.s.tombstoneErr("reserve", r.p.Shop, r.p.Token, st)
}

// takeUnits locks up to each line's quantity of units at its current
// location, all lines in one round trip together with first (read by its
// own scan), and returns the database's clock.
//
// Every reserve of a pool used to scan it from its head (lowest unit id).
// Under concurrency each scan then walks over the units the other
// reservers hold (SKIP LOCKED skips them one by one), and over the units
// taken since the last purge: deleted rows stay in the index, delete-marked,
// until purge removes them, and all of them sit at the head, exactly where
// every scan starts. Both grow with concurrency, and the purge backlog
// grows with the load, so a busy pool got slower per reserve the busier it
// was. So each line's scan starts at a random unit id among the pool's
// newest PoolCap ids (the top is learnt from the pool's replenish lock row,
// read in the same statement, by the previous reserve of the pool), and a
// line it leaves short gets a second pass from the head up to that point:
// together the two passes see every unit once, so "short" means what it
// meant before. (Config.ScanFromHead keeps the old scan, for comparison.)
func (r *reserveCall) takeUnits(t *txn, first stmt) ([][]int64, time.Time, error) {
	units := make([][]int64, len(r.lines))
	var now time.Time
	scan := func(rows *sql.Rows) (err error) {
		now, err = r.scanUnits(rows, units)
		return err
	}
	if r.s.cfg.ScanFromHead {
		err := t.query(first, r.unitsFromHead(scan))
		return units, now, err
	}
	from := make([]int64, len(r.lines))
	all := make([]int, len(r.lines))
	// The pools' tops are read with the units when one is not known, and
	// otherwise once in topReadEvery reserves: this process's refills
	// teach it the top of the pools it refills (see replenish), so the
	// read is for other replicas' refills. A top read too rarely only
	// starts some scans lower than they could, never misses a unit (the
	// second pass covers the rest). Left out, the read is a statement
	// branch fewer to plan on every reserve (BENCHMARKS.md, issue 28).
	readTops := rand.IntN(topReadEvery) == 0
	for i := range r.lines {
		var known bool
		from[i], known = r.s.pivots.pick(r.key(i), r.s.cfg.PoolCap)
		readTops = readTops || !known
		all[i] = i
	}
	if err := t.query(first, r.unitsRange(units, all, from, nil, readTops, scan)); err != nil {
		return nil, time.Time{}, err
	}
	var wrap []int
	for i, ln := range r.lines {
		if int64(len(units[i])) < ln.Quantity && from[i] > 0 {
			wrap = append(wrap, i)
		}
	}
	if wrap != nil {
		firstNow := now
		err := t.query(r.unitsRange(units, wrap, nil, from, false, scan))
		if err != nil {
			return nil, time.Time{}, err
		}
		if !firstNow.IsZero() {
			now = firstNow
		}
	}
	return units, now, nil
}

func (r *reserveCall) key(i int) key { return key{r.p.Shop, r.lines[i].Item, r.loc(i)} }

// unitsRange selects, for each line i of lines, the units it still needs
// (beyond units[i]) with ids in [from[i], below[i]) (nil from: 0; nil
// below: no bound), read by scan. With tops it also reads each pool's top
// for the next reserve's starting point.
func (r *reserveCall) unitsRange(units [][]int64, lines []int, from, below []int64, tops bool, scan func(*sql.Rows) error) stmt {
	args := make([]any, 0, 11*len(lines))
	for _, i := range lines {
		lo, hi := int64(0), int64(math.MaxInt64)
		if from != nil {
			lo = from[i]
		}
		if below != nil {
			hi = below[i]
		}
		args = append(args, i, r.p.Shop, r.lines[i].Item, r.loc(i), lo, hi, r.lines[i].Quantity-int64(len(units[i])))
	}
	if tops {
		for _, i := range lines {
			args = append(args, -1-i, r.p.Shop, r.lines[i].Item, r.loc(i))
		}
	}
	return stmt{sql: reserveUnitsRangeQuery(len(lines), tops), args: args, scan: scan}
}

// unitsFromHead selects each line's units from its pool's head
// (Config.ScanFromHead), read by scan.
func (r *reserveCall) unitsFromHead(scan func(*sql.Rows) error) stmt {
	args := make([]any, 0, 5*len(r.lines))
	for i, ln := range r.lines {
		args = append(args, i, r.p.Shop, ln.Item, r.loc(i), ln.Quantity)
	}
	return stmt{sql: reserveUnitsQuery(len(r.lines)), args: args, scan: scan}
}

// scanUnits adds the rows of a units statement to units (line number,
// unit id, the database's clock); a negative line number is a pool's top.
func (r *reserveCall) scanUnits(rows *sql.Rows, units [][]int64) (time.Time, error) {
	var now sql.NullTime
	for rows.Next() {
		var lineNo int
		var id int64
		if err := rows.Scan(&lineNo, &id, &now); err != nil {
			return time.Time{}, err
		}
		if lineNo < 0 {
			r.s.pivots.learn(r.key(-1-lineNo), id)
			continue
		}
		units[lineNo] = append(units[lineNo], id)
	}
	return now.Time, rows.Err()
}

// pivotSlots is the size of a store's table of pool tops: past it, pools
// share slots, and a pool whose slot another took scans from its head
// until its next reserve learns the top again.
const pivotSlots = 4096

// pivots remembers the top unit id (next_unit_id) of recently reserved
// pools, in a fixed table indexed by a hash of the pool's key, so that its
// memory does not grow with the catalog. The zero value is ready.
type pivots struct {
	slots [pivotSlots]struct {
		mu   sync.Mutex
		k    key
		next int64
	}
}

// slotOf is where a pool's entry lives in a table of pivotSlots.
func slotOf(k key) int {
	h := uint64(k.shop)*0x9E3779B97F4A7C15 ^ uint64(k.item)*0xC2B2AE3D27D4EB4F ^ uint64(k.loc)*0x165667B19E3779F9
	h ^= h >> 31
	return int(h % pivotSlots)
}

func (p *pivots) learn(k key, next int64) {
	s := &p.slots[slotOf(k)]
	s.mu.Lock()
	s.k, s.next = k, next
	s.mu.Unlock()
}

// pick returns where a scan of k's pool starts: a random unit id among
// the window newest ids below the pool's top, or 0 (the head) when the top
// is not known; and whether it is known.
func (p *pivots) pick(k key, window int64) (int64, bool) {
	s := &p.slots[slotOf(k)]
	s.mu.Lock()
	next, ok := s.next, s.k == k
	s.mu.Unlock()
	if !ok || next <= 1 {
		return 0, ok
	}
	return max(0, next-1-rand.Int64N(window)), true
}

// topReadEvery is how often, one reserve in so many, a reserve reads the
// top of pools whose top it knows.
const topReadEvery = 16

// deleteUnits removes the taken units. It runs before the holds are
// inserted: every transaction touches units before holds, so reserve and
// claim never lock the two tables in opposite orders.
//
// The delete is not checked by count (sqlExpectRows, as claim and deduct
// check theirs): every unit it names was locked FOR UPDATE by this
// transaction's select, so no other transaction can have deleted it, and
// the lines name distinct pools (validation refuses an item twice) and
// each line's passes scan disjoint ranges, so no unit is named twice. The
// check was a statement of its own, the reserve's tenth: a parse, a
// subquery to plan and a reply packet on every reserve, about 7% of the
// server's CPU per reserve (BENCHMARKS.md, issue 28).
func (r *reserveCall) deleteUnits(t *txn, units [][]int64) error {
	counts := make([]int, len(units))
	args := make([]any, 0, 3*len(units))
	for i, us := range units {
		counts[i] = len(us)
		args = append(args, r.p.Shop, r.lines[i].Item, r.loc(i))
		for _, u := range us {
			args = append(args, u)
		}
	}
	if err := t.exec(reserveDeleteQuery(counts), args...); err != nil {
		return fmt.Errorf("mysqlstore: reserve: delete units: %w", err)
	}
	return nil
}

// write adds the hold lines, the reservation's row and, deciding, the
// change Redis must follow. A duplicate key (the token's row or lines)
// means another call with the token got there first.
func (r *reserveCall) write(t *txn, expires time.Time) error {
	args := make([]any, 0, 7*len(r.lines))
	for i, ln := range r.lines {
		args = append(args, r.p.Shop, r.p.Token, ln.Item, r.loc(i), ln.Quantity, expires, string(r.authority))
	}
	if err := t.exec(insertHoldsQuery(callerReserve, len(r.lines)), args...); err != nil {
		return fmt.Errorf("mysqlstore: reserve: insert holds: %w", err)
	}
	if err := r.s.insertState(t, callerReserve, r.p.Shop, r.p.Token, reservation.StateHeld, r.authority, r.allocations(), nil, expires); err != nil {
		return err
	}
	if r.deciding {
		return r.s.feedStateCart(t, callerReserve, r.p.Shop, r.p.Token, r.p.Lines, r.p.Compare)
	}
	return nil
}

func (r *reserveCall) allocations() []reservation.Allocation {
	out := make([]reservation.Allocation, len(r.lines))
	for i, ln := range r.lines {
		out[i] = reservation.Allocation{Item: ln.Item, Location: r.loc(i), Quantity: ln.Quantity}
	}
	reservation.SortAllocations(out)
	return out
}

// resolveShort replenishes each short line's pool and moves a line to its
// next location when the ledger cannot cover it where it is. It reports
// whether anything changed (units added or a location passed over).
func (r *reserveCall) resolveShort(ctx context.Context, short []int) (bool, error) {
	progressed := false
	for _, i := range short {
		ln := r.lines[i]
		snap, added, joined, err := r.s.refill(ctx, r.key(i), r.refilled[i])
		if err != nil {
			return false, err
		}
		if added > 0 || joined {
			progressed = true
		}
		if joined {
			continue // another reserver's refill added units: try them
		}
		if snap.unheld() < ln.Quantity {
			r.cursor[i]++
			progressed = true
			if r.cursor[i] == len(ln.Locations) {
				return progressed, nil
			}
		}
	}
	return progressed, nil
}

// insufficient builds the all-or-nothing refusal: every line that no
// eligible location can cover, with the best that one could. Deciding, it
// records the refusal, with the change Redis must follow, so the token is
// refused for good (a delayed first attempt must not hold anything after
// the caller was told nothing is held); errTokenRace when another call
// with the token decided first.
func (r *reserveCall) insufficient(ctx context.Context) (reservation.ReserveResult, error) {
	res := reservation.ReserveResult{Status: reservation.StatusInsufficient}
	if err := r.shortLines(ctx, &res); err != nil {
		return reservation.ReserveResult{}, err
	}
	if !r.deciding {
		return res, nil
	}
	err := r.s.inBatch(ctx, callerRefuse, func(t *txn) error {
		fence, st, err := readFenceAndState(t, tag(callerRefuse)+sqlFenceAndState, r.p.Shop, r.p.Token, false)
		if err != nil {
			return fmt.Errorf("mysqlstore: refuse: %w", err)
		}
		if err := r.s.decides(r.p.Shop, fence); err != nil {
			return err
		}
		if st.found {
			return errTokenRace
		}
		if err := r.s.insertState(t, callerRefuse, r.p.Shop, r.p.Token, reservation.StateRefused, reservation.AuthorityMySQL, nil, res.Short, time.Time{}); err != nil {
			return err
		}
		return r.s.feedStateCart(t, callerRefuse, r.p.Shop, r.p.Token, r.p.Lines, r.p.Compare)
	})
	if mysqlErrno(err) == errDupEntry {
		err = errTokenRace
	}
	if err != nil {
		return reservation.ReserveResult{}, err
	}
	return res, nil
}

// shortLines fills res.Short: the lines no eligible location covers.
func (r *reserveCall) shortLines(ctx context.Context, res *reservation.ReserveResult) error {
	c, err := r.s.acquire(ctx, callerReserve)
	if err != nil {
		return err
	}
	defer c.release()
	for _, ln := range r.lines {
		args := []any{r.p.Shop, ln.Item}
		for _, l := range ln.Locations {
			args = append(args, l)
		}
		rows, err := c.QueryContext(ctx, reserveUnheldQuery(len(ln.Locations)), args...)
		if err != nil {
			return fmt.Errorf("mysqlstore: reserve: unheld: %w", err)
		}
		var best int64
		for rows.Next() {
			var loc, unheld int64
			if err := rows.Scan(&loc, &unheld); err != nil {
				rows.Close()
				return err
			}
			best = max(best, unheld)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if best < ln.Quantity {
			res.Short = append(res.Short, reservation.ShortLine{Item: ln.Item, Requested: ln.Quantity, Unheld: max(best, 0)})
		}
	}
	if res.Short == nil {
		// Stock came back between the decision and this read (a release,
		// an adjust): report the line that ran out of locations anyway,
		// since nothing was held.
		for i, ln := range r.lines {
			if r.cursor[i] == len(ln.Locations) {
				res.Short = append(res.Short, reservation.ShortLine{Item: ln.Item, Requested: ln.Quantity})
			}
		}
	}
	return nil
}

// refill replenishes a pool a reserver found short, or joins a refill of
// it by another reserver of this store (see refills). seen is the pool's
// refill epoch when the reserver looked at the pool.
func (s *Store) refill(ctx context.Context, k key, seen uint64) (snap snapshot, added int64, joined bool, err error) {
	if s.cfg.SeparateRefills {
		snap, added, err = s.replenish(ctx, k)
		return snap, added, false, err
	}
	return s.refills.do(ctx, k, seen, s.replenish)
}

// refills coalesces the refills of a pool within this store, the way the
// replenish lock row's generation does across stores, but without a
// connection per waiter.
//
// Measured before (reservoir bench, variant pool-before): when a hot pool
// ran dry, every reserver that found it short queued on its lock row, each
// holding a connection and then, one at a time, the lock row, only to find
// the refill done ("joined"); at 64 callers and 1 ms that was a third of
// all connection time and the p99.
//
// Now a reserver that finds a pool short joins the refill in flight, if
// any, and waits for it holding no connection; it also counts as joined
// when a refill that added units landed after it looked at the pool (its
// epoch moved). Either way it goes back to the pool. Otherwise it runs the
// replenish itself, whose snapshot, read under the lock row after the
// reserver found the pool short, alone decides whether the line moves on
// to its next location or is refused: joining never answers for a
// reserver. The zero value is ready.
type refills struct {
	mu       sync.Mutex
	inFlight map[key]*refill
	// epochs counts, per slot of the pool's hash (shared, like pivots),
	// the refills that added units. A collision costs a reserver one more
	// look at its pool, no more.
	epochs [pivotSlots]atomic.Uint64
}

type refill struct {
	done  chan struct{}
	added int64
	// waiters is how many reservers joined it (under refills.mu): the
	// join leaves no other trace, and its test must know they all wait.
	waiters int
}

func (f *refills) epoch(k key) uint64 { return f.epochs[slotOf(k)].Load() }

// do runs replenish for k, or joins a refill of k.
func (f *refills) do(ctx context.Context, k key, seen uint64, replenish func(context.Context, key) (snapshot, int64, error)) (snap snapshot, added int64, joined bool, err error) {
	f.mu.Lock()
	if f.epoch(k) != seen {
		f.mu.Unlock()
		return snapshot{}, 0, true, nil
	}
	if fl, ok := f.inFlight[k]; ok {
		fl.waiters++
		f.mu.Unlock()
		select {
		case <-fl.done:
		case <-ctx.Done():
			return snapshot{}, 0, false, ctx.Err()
		}
		if fl.added > 0 {
			return snapshot{}, fl.added, true, nil
		}
		snap, added, err = replenish(ctx, k)
		return snap, added, false, err
	}
	if f.inFlight == nil {
		f.inFlight = map[key]*refill{}
	}
	fl := &refill{done: make(chan struct{})}
	f.inFlight[k] = fl
	f.mu.Unlock()
	snap, added, err = replenish(ctx, k)
	f.mu.Lock()
	if err == nil && added > 0 {
		fl.added = added
		f.epochs[slotOf(k)].Add(1)
	}
	delete(f.inFlight, k)
	f.mu.Unlock()
	close(fl.done)
	return snap, added, false, err
}
