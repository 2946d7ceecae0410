package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Deduct is the legacy claim's ledger step, for a reservation Redis
// decided: it subtracts the allocations exactly once per (shop, token),
// the claims row's primary key being the guard. In the same transaction it
// records the reservation as claimed (removing this store's shadow hold of
// it), trims the pools the allocations touch by what the deduction takes
// from them beyond that hold (the allocations come from another store, so
// the projection pool + held <= available must hold even if this store's
// hold was elsewhere or absent), and records the change in the feed, so
// Redis follows the claim even if the legacy claim's own Redis step is
// lost.
//
// It refuses (*reservation.NotDeciderError, nothing changed) when MySQL
// decides the shop: a handoff to MySQL overtook the legacy claim after
// Redis checked its hold, and MySQL, which now holds the reservation, must
// decide the claim. The fence is read after the reservation's row is
// locked (see checkShadowFence for why that order closes the race).
//
// Concurrent Deducts share transactions (see deducts): in `redis` mode
// every payment of a flash sale deducts the same ledger row, and one
// transaction per claim would serialise them on that row's lock and
// commit. Each keeps its own claims row and answer.
func (s *Store) Deduct(ctx context.Context, p *reservation.DeductParams) (reservation.DeductResult, error) {
	if err := s.cfg.Limits.ValidateDeduct(p); err != nil {
		return reservation.DeductResult{}, err
	}
	allocs := slices.Clone(p.Allocations)
	reservation.SortAllocations(allocs)
	d := &deduct{ctx: ctx, shop: p.Shop, token: p.Token, allocs: allocs, done: make(chan struct{})}
	if s.cfg.DeductGroup <= 1 {
		s.deductAlone(d)
		return d.res, d.err
	}
	s.deducts.add(s, d)
	select {
	case <-d.done:
		return d.res, d.err
	case <-ctx.Done():
		// The deduct may still commit with its group: the caller's
		// outcome is unknown, as after any timeout, and a retry is safe.
		return reservation.DeductResult{}, ctx.Err()
	}
}

// deduct is one Deduct call waiting for its group.
type deduct struct {
	ctx    context.Context // the caller's
	shop   int64
	token  string
	allocs []reservation.Allocation // sorted
	done   chan struct{}
	res    reservation.DeductResult
	err    error
}

// deducts combines concurrent Deducts: the first starts a leader, which
// takes up to Config.DeductGroup waiting calls (one per token) into one
// transaction, answers them, and goes on while calls wait. A group in
// flight is a round trip and a commit long; the calls that arrive
// meanwhile make the next group, so under load a group is about as large
// as the callers waiting, and under no load a call runs alone without
// waiting. When anything in a group fails for one call's reason (a token
// claimed before, a ledger row that cannot give, a shop MySQL decides),
// the group is rolled back and each call runs alone, so every call gets
// the answer it would have had alone. The zero value is ready.
type deducts struct {
	mu      sync.Mutex
	waiting []*deduct
	leaders int
	// oneLeader makes groups go one at a time (tests that shape groups).
	oneLeader bool
}

func (g *deducts) maxLeaders() int {
	if g.oneLeader {
		return 1
	}
	return deductLeaders
}

// deductLeaders is how many groups may be in flight at once. Two: while
// one group's writes and COMMIT travel, the next group's reads do, and
// its ledger UPDATE waits for the first's lock for server time only.
const deductLeaders = 2

func (g *deducts) add(s *Store, d *deduct) {
	g.mu.Lock()
	g.waiting = append(g.waiting, d)
	if g.leaders >= g.maxLeaders() {
		g.mu.Unlock()
		return
	}
	g.leaders++
	g.mu.Unlock()
	go g.lead(s)
}

// lead runs groups until no call waits.
//
// A call runs only while its caller waits, as it would alone: a call whose
// caller gave up before its group formed is dropped, and a group is
// cancelled as soon as any of its callers gives up (the others get that
// unknown outcome too, and retry). So no deduct lands after its caller
// was told the outcome is unknown and moved on: a legacy claim's grace
// (redisstore's ClaimGrace) relies on that.
func (g *deducts) lead(s *Store) {
	for {
		g.mu.Lock()
		group, rest := takeGroup(g.waiting, s.cfg.DeductGroup)
		g.waiting = rest
		if len(group) == 0 {
			g.leaders--
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		group = slices.DeleteFunc(group, func(d *deduct) bool {
			if err := d.ctx.Err(); err != nil {
				d.err = err
				close(d.done)
				return true
			}
			return false
		})
		if len(group) == 0 {
			continue
		}
		if hook := s.beforeDeductGroup; hook != nil {
			hook(len(group))
		}
		s.metrics.deductGroup.Observe(float64(len(group)))
		if len(group) == 1 {
			s.deductAlone(group[0])
			continue
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		stops := make([]func() bool, len(group))
		for i, d := range group {
			stops[i] = context.AfterFunc(d.ctx, func() {
				cancel(fmt.Errorf("mysqlstore: deduct: a caller of the group gave up: %w", context.Cause(d.ctx)))
			})
		}
		err := s.deductGroup(ctx, group)
		for _, stop := range stops {
			stop()
		}
		cancel(nil)
		if err == nil {
			for _, d := range group {
				d.res = reservation.DeductResult{Applied: true, Allocations: d.allocs}
				close(d.done)
			}
			continue
		}
		if !perCall(err) {
			for _, d := range group {
				d.err = err
				close(d.done)
			}
			continue
		}
		// One call's reason: each runs alone, for its own answer.
		for _, d := range group {
			go s.deductAlone(d)
		}
	}
}

// takeGroup takes up to n calls, in order, one per token; the others stay.
func takeGroup(waiting []*deduct, n int) (group, rest []*deduct) {
	type tok struct {
		shop  int64
		token string
	}
	seen := map[tok]bool{}
	for _, d := range waiting {
		k := tok{d.shop, d.token}
		if len(group) < n && !seen[k] {
			seen[k] = true
			group = append(group, d)
			continue
		}
		rest = append(rest, d)
	}
	return group, rest
}

// perCall reports whether a group's error may be one call's alone.
func perCall(err error) bool {
	var nd *reservation.NotDeciderError
	return errors.As(err, &nd) || mysqlErrno(err) == errDupEntry || mysqlErrno(err) == errExpectRows
}

// deductAlone runs d as a group of one and turns the errors that belong to
// it into its answer.
func (s *Store) deductAlone(d *deduct) {
	defer close(d.done)
	ctx := d.ctx
	err := s.deductGroup(ctx, []*deduct{d})
	switch mysqlErrno(err) {
	case errDupEntry:
		// Deducted before: the answer is that deduction.
		prev, _, rerr := readClaim(ctx, s.db, callerDeduct, d.shop, d.token)
		d.res, d.err = reservation.DeductResult{Allocations: prev}, rerr
		return
	case errExpectRows:
		err = fmt.Errorf("mysqlstore: deduct shop %d token %q: the ledger cannot give %s: %w",
			d.shop, d.token, reservation.EncodeAllocations(d.allocs), reservation.ErrInsufficientStock)
	}
	if err != nil {
		d.err = err
		return
	}
	d.res = reservation.DeductResult{Applied: true, Allocations: d.allocs}
}

// deductGroup deducts every call of group in one transaction, two round
// trips batched: the claims rows first (their primary keys make each
// deduction happen once, and a repeat stops there, before the hot
// ledger rows), the reservations' rows, this store's hold lines of them
// (locked) and the shops' fence slots in the first; the writes with the
// COMMIT in the second. The hot ledger rows are written in that last
// batch only, once per item x location whatever the group's size, so
// their locks are held for server time. It takes no replenish lock row: a
// refill reads the ledger row with a shared lock (see replenish), so it
// sees all of a deduct or none of it. It fills in no answers (deductAlone
// and lead do).
func (s *Store) deductGroup(ctx context.Context, group []*deduct) error {
	return s.inBatch(ctx, callerDeduct, func(t *txn) error {
		claims := make([]any, 0, 3*len(group))
		states := make([]any, 0, 3*len(group))
		tokens := make([]any, 0, 2*len(group))
		type slot struct {
			shop int64
			slot int
		}
		var slots []slot
		for _, d := range group {
			doc, err := json.Marshal(d.allocs)
			if err != nil {
				return err
			}
			claims = append(claims, d.shop, d.token, string(doc))
			states = append(states, d.shop, d.token, reservation.EncodeAllocations(d.allocs))
			tokens = append(tokens, d.shop, d.token)
			if sl := (slot{d.shop, fenceSlot(d.token)}); !slices.Contains(slots, sl) {
				slots = append(slots, sl)
			}
		}
		fenceArgs := make([]any, 0, 2*len(slots))
		for _, sl := range slots {
			fenceArgs = append(fenceArgs, sl.shop, sl.slot)
		}
		if err := t.exec(deductClaimsQuery(len(group)), claims...); err != nil {
			return err
		}
		if err := t.exec(deductStatesQuery(len(group)), states...); err != nil {
			return fmt.Errorf("mysqlstore: deduct: record the claims: %w", err)
		}
		type holdKey struct {
			shop      int64
			token     string
			item, loc int64
		}
		type tok struct {
			shop  int64
			token string
		}
		held := map[holdKey]int64{}
		holding := map[tok]bool{}
		var holders []any // (shop, token) of the calls this store holds something for
		var refused error
		err := t.query(func(i int, rows *sql.Rows) error {
			for rows.Next() {
				if i == 0 {
					var k holdKey
					var q int64
					if err := rows.Scan(&k.shop, &k.token, &k.item, &k.loc, &q); err != nil {
						return err
					}
					if tk := (tok{k.shop, k.token}); !holding[tk] {
						holding[tk] = true
						holders = append(holders, k.shop, k.token)
					}
					held[k] += q
					continue
				}
				var shop, epoch int64
				var decider string
				if err := rows.Scan(&shop, &decider, &epoch); err != nil {
					return err
				}
				if d := reservation.Authority(decider); d == reservation.AuthorityMySQL && refused == nil {
					refused = &reservation.NotDeciderError{Shop: shop, Store: reservation.AuthorityMySQL, Fence: reservation.Fence{Decider: d, Epoch: epoch}}
				}
			}
			return nil
		}, stmt{deductHoldsQuery(len(group)), tokens}, stmt{deductFencesQuery(len(slots)), fenceArgs})
		if err != nil {
			return fmt.Errorf("mysqlstore: deduct: %w", err)
		}
		if refused != nil {
			// See checkShadowFence: the fence slots were read after the
			// reservations' rows were locked.
			s.metrics.notDecider.Inc()
			return refused
		}
		if len(holders) > 0 {
			if err := t.exec(deductHoldsDeleteQuery(len(holders)/2), holders...); err != nil {
				return fmt.Errorf("mysqlstore: deduct: settle this store's holds: %w", err)
			}
		}
		// Per item x location: what the group deducts there, and what it
		// takes from the pool: pool + held <= available held before; each
		// call removes its hold there from held and its quantity from
		// available, so taking the difference from the pool keeps it. (It
		// may take more than the slack required, which is safe: the next
		// reserve refills.)
		deduct, trim := map[key]int64{}, map[key]int64{}
		for _, d := range group {
			for _, a := range d.allocs {
				k := key{d.shop, a.Item, a.Location}
				deduct[k] += a.Quantity
				trim[k] += max(0, a.Quantity-held[holdKey{d.shop, d.token, a.Item, a.Location}])
			}
		}
		keys := slices.SortedFunc(func(yield func(key) bool) {
			for k := range deduct {
				if !yield(k) {
					return
				}
			}
		}, func(a, b key) int {
			return cmp.Or(cmp.Compare(a.shop, b.shop), cmp.Compare(a.item, b.item), cmp.Compare(a.loc, b.loc))
		})
		for _, k := range keys {
			if err := t.exec(tag(callerDeduct)+sqlLedgerDeduct, deduct[k], k.shop, k.item, k.loc, deduct[k]); err != nil {
				return fmt.Errorf("mysqlstore: deduct: %w", err)
			}
			if err := t.exec(tag(callerDeduct)+sqlExpectRows, 1); err != nil {
				return err
			}
		}
		for _, k := range keys {
			if trim[k] > 0 {
				if err := t.exec(tag(callerDeduct)+sqlPoolTrim, k.shop, k.item, k.loc, trim[k]); err != nil {
					return fmt.Errorf("mysqlstore: deduct: trim %s: %w", k, err)
				}
			}
		}
		if !s.cfg.NoFeed {
			if err := t.exec(feedStatesQuery(callerDeduct, len(group)), tokens...); err != nil {
				return fmt.Errorf("mysqlstore: deduct: record the changes for Redis: %w", err)
			}
		}
		t.afterCommit(func() {
			s.metrics.tombstones.WithLabelValues(string(reservation.StateClaimed)).Add(float64(len(group)))
			if !s.cfg.NoFeed {
				s.metrics.feedWritten.WithLabelValues(string(reservation.ChangeState)).Add(float64(len(group)))
			}
		})
		return nil
	})
}
