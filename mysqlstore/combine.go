package mysqlstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/seed31b0e981/reservoir/reservation"
)

// A hot item's claims all end in an UPDATE of its ledger row. One
// transaction per claim passes them through that row's lock one at a
// time, each holding it for its commit, and with the binary log on
// (sync_binlog=1, as MySQL 8 defaults) the commit is two fsyncs. So
// concurrent claims of a store share transactions: a combiner takes the
// calls waiting into one group, one transaction of two batched round
// trips, which deducts each item x location once for the whole group and
// commits once, and each call keeps its own claims row and answer.

// combined is one call waiting for its group.
type combined interface {
	// tok is the reservation the call is about: a group has one call per
	// token (two calls of one token would block each other in one
	// transaction).
	tok() tokenKey
	// caller is the caller's context: the call runs only while it waits.
	caller() context.Context
	// finish ends the call with err, or with the answer set on it.
	finish(err error)
}

type tokenKey struct {
	shop  int64
	token string
}

// combiner runs concurrent calls in groups: the first call starts a
// leader, which takes up to max waiting calls into a group, runs it, and
// goes on while calls wait. A group in flight is two round trips and a
// commit long; the calls that arrive meanwhile make the next group, so
// under load a group is about as large as the callers waiting, and a
// call under no load runs alone without waiting.
//
// A call runs only while its caller waits, as it would alone: a call whose
// caller gave up before its group formed is dropped, and a group is
// cancelled as soon as any of its callers gives up (the others get that
// unknown outcome too, and retry). So nothing lands after its caller was
// told the outcome is unknown and moved on (a legacy claim's grace,
// redisstore's ClaimGrace, relies on that).
//
// When a group fails for one call's reason (perCall: a token claimed
// before, a ledger row that cannot give, a shop MySQL does not decide as
// the call needs), it rolls back and each call runs alone, so every call
// gets the answer it would have had alone. The zero value is ready.
type combiner[C combined] struct {
	mu      sync.Mutex
	waiting []C
	leaders int
	// oneLeader makes groups go one at a time (tests that shape groups).
	oneLeader bool
}

// combineLeaders is how many groups of one combiner may be in flight at
// once. Two: while one group's writes and COMMIT travel, the next group's
// reads do, and its ledger UPDATE waits for the first's lock for server
// time only.
const combineLeaders = 2

// groupRun is what a combiner does with a group: alone runs one call by
// itself (and finishes it); group runs several in one transaction and sets
// their answers without finishing them; observe sees each group's size.
type groupRun[C combined] struct {
	max     int
	alone   func(C)
	group   func(ctx context.Context, calls []C) error
	observe func(n int)
	// before, when set, runs before each group is sent (tests).
	before func(n int)
}

func (g *combiner[C]) add(c C, r *groupRun[C]) {
	g.mu.Lock()
	g.waiting = append(g.waiting, c)
	most := combineLeaders
	if g.oneLeader {
		most = 1
	}
	if g.leaders >= most {
		g.mu.Unlock()
		return
	}
	g.leaders++
	g.mu.Unlock()
	go g.lead(r)
}

// lead runs groups until no call waits.
func (g *combiner[C]) lead(r *groupRun[C]) {
	for {
		g.mu.Lock()
		group, rest := takeGroup(g.waiting, r.max)
		g.waiting = rest
		if len(group) == 0 {
			g.leaders--
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		group = slices.DeleteFunc(group, func(c C) bool {
			if err := c.caller().Err(); err != nil {
				c.finish(err)
				return true
			}
			return false
		})
		if len(group) == 0 {
			continue
		}
		if r.before != nil {
			r.before(len(group))
		}
		r.observe(len(group))
		if len(group) == 1 {
			r.alone(group[0])
			continue
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		stops := make([]func() bool, len(group))
		var traced []trace.Link // the callers' spans, when they are traced
		for i, c := range group {
			stops[i] = context.AfterFunc(c.caller(), func() {
				cancel(fmt.Errorf("mysqlstore: a caller of the group gave up: %w", context.Cause(c.caller())))
			})
			if sc := trace.SpanContextFromContext(c.caller()); sc.IsValid() {
				traced = append(traced, trace.Link{SpanContext: sc})
			}
		}
		ctx, span := startGroupSpan(ctx, traced, len(group))
		err := r.group(ctx, group)
		endSpan(span, err)
		for _, stop := range stops {
			stop()
		}
		cancel(nil)
		switch {
		case err == nil:
			for _, c := range group {
				c.finish(nil)
			}
		case perCall(err):
			for _, c := range group {
				go r.alone(c)
			}
		default:
			for _, c := range group {
				c.finish(err)
			}
		}
	}
}

// takeGroup takes up to n calls, in order, one per token; the others stay.
func takeGroup[C combined](waiting []C, n int) (group, rest []C) {
	seen := map[tokenKey]bool{}
	for _, c := range waiting {
		k := c.tok()
		if len(group) < n && !seen[k] {
			seen[k] = true
			group = append(group, c)
			continue
		}
		rest = append(rest, c)
	}
	return group, rest
}

// perCall reports whether a group's error may be one call's alone.
func perCall(err error) bool {
	var nd *reservation.NotDeciderError
	return errors.As(err, &nd) || mysqlErrno(err) == errDupEntry || mysqlErrno(err) == errExpectRows
}

// submit runs c: alone, without waiting, when groups are off (GroupSize
// 1), else in a group, waiting for it (done closes when c is finished) or
// for the caller to give up.
func (g *combiner[C]) submit(c C, r *groupRun[C], done <-chan struct{}) error {
	if r.max <= 1 {
		r.alone(c)
		return nil
	}
	g.add(c, r)
	select {
	case <-done:
		return nil
	case <-c.caller().Done():
		// The call may still land with its group if that group was sent
		// before the caller gave up: the caller's outcome is unknown, as
		// after any timeout, and a retry is safe.
		return c.caller().Err()
	}
}

// deductSums adds to t one guarded deduction of the ledger per item x
// location of sums (what a group takes there), in (shop, item, location)
// order, and returns that order. A row that cannot give fails the
// transaction (errExpectRows) before its COMMIT.
func (s *Store) deductSums(t *txn, caller string, sums map[key]int64) ([]key, error) {
	keys := slices.SortedFunc(maps.Keys(sums), func(a, b key) int {
		return cmp.Or(cmp.Compare(a.shop, b.shop), cmp.Compare(a.item, b.item), cmp.Compare(a.loc, b.loc))
	})
	if s.unorderedLedger {
		rand.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	}
	for _, k := range keys {
		if err := t.exec(tag(caller)+sqlLedgerDeduct, sums[k], k.shop, k.item, k.loc, sums[k]); err != nil {
			return nil, fmt.Errorf("mysqlstore: %s: deduct ledger: %w", caller, err)
		}
		if err := t.exec(tag(caller)+sqlExpectRows, 1); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// feedStates adds to t the records that Redis must follow the new states
// of tokens ((shop, token) pairs).
func (s *Store) feedStates(t *txn, caller string, tokens []any) error {
	if s.cfg.NoFeed || len(tokens) == 0 {
		return nil
	}
	if err := t.exec(feedStatesQuery(caller, len(tokens)/2), tokens...); err != nil {
		return fmt.Errorf("mysqlstore: %s: record the changes for Redis: %w", caller, err)
	}
	n := float64(len(tokens) / 2)
	t.afterCommit(func() { s.metrics.feedWritten.WithLabelValues(string(reservation.ChangeState)).Add(n) })
	return nil
}

// groupSlots are the distinct fence slots of a group's tokens, as
// arguments of groupFencesQuery.
func groupSlots[C combined](group []C) (args []any, n int) {
	seen := map[[2]int64]bool{}
	for _, c := range group {
		k := c.tok()
		sl := [2]int64{k.shop, int64(fenceSlot(k.token))}
		if !seen[sl] {
			seen[sl] = true
			args = append(args, sl[0], sl[1])
		}
	}
	return args, len(seen)
}

// deleteHolds adds to t the removal of the hold lines of tokens ((shop,
// token) pairs), one statement per token.
func deleteHolds(t *txn, caller string, tokens []any) error {
	for i := 0; i < len(tokens); i += 2 {
		if err := t.exec(tag(caller)+sqlHoldsDelete, tokens[i], tokens[i+1]); err != nil {
			return fmt.Errorf("mysqlstore: %s: delete holds: %w", caller, err)
		}
	}
	return nil
}
