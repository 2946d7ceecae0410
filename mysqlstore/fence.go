package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Handoffs (docs/ownership.md, section 3), MySQL's side of them.

// Fence returns the shop's fence (NoFence when it has none).
func (s *Store) Fence(ctx context.Context, shop int64) (reservation.Fence, error) {
	if shop <= 0 {
		return reservation.Fence{}, &reservation.ValidationError{Field: "shop", Reason: fmt.Sprintf("must be a positive id, got %d", shop)}
	}
	c, err := s.acquire(ctx, callerRead)
	if err != nil {
		return reservation.Fence{}, err
	}
	defer c.release()
	var d string
	var e int64
	err = c.QueryRowContext(ctx, sqlFenceRead, shop).Scan(&d, &e)
	if isNoRows(err) {
		return reservation.NoFence, nil
	}
	if err != nil {
		return reservation.Fence{}, fmt.Errorf("mysqlstore: fence of shop %d: %w", shop, err)
	}
	return reservation.Fence{Decider: reservation.Authority(d), Epoch: e}, nil
}

// fenceSlots is how many rows hold one shop's fence. They always say the
// same (every change sets them all); a deciding transaction locks one of
// them shared (fenceSlot), a handoff all of them for update. With one row,
// every reserver of a busy shop queued on one record's lock list: measured
// at 64 callers on one shop (reservoir bench, facade-mysql), its shared
// locks alone cost about a tenth of the throughput.
const fenceSlots = 8

// fenceSlot is the fence slot a token's transactions lock: the same for
// every transaction of the token, spread over the slots across tokens.
func fenceSlot(token string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(token))
	return int(h.Sum32() % fenceSlots)
}

// lockFence creates the shop's fence slot rows if they are missing and
// locks every one for update: it waits for every transaction of the shop
// holding one shared (the deciding ones), and holds off new ones until the
// caller commits.
func lockFence(ctx context.Context, tx *sql.Tx, shop int64) (reservation.Fence, error) {
	f, _, err := lockFenceCopying(ctx, tx, shop)
	return f, err
}

// lockFenceCopying is lockFence that also returns the copy under way into
// the shop (0: none; see copy.go).
func lockFenceCopying(ctx context.Context, tx *sql.Tx, shop int64) (reservation.Fence, int64, error) {
	args := make([]any, 0, 2*fenceSlots)
	for slot := range fenceSlots {
		args = append(args, shop, slot)
	}
	if _, err := tx.ExecContext(ctx, fenceEnsureQuery(), args...); err != nil {
		return reservation.Fence{}, 0, fmt.Errorf("mysqlstore: handoff: lock fence of shop %d: %w", shop, err)
	}
	rows, err := tx.QueryContext(ctx, sqlFenceLock, shop)
	if err != nil {
		return reservation.Fence{}, 0, fmt.Errorf("mysqlstore: handoff: read fence of shop %d: %w", shop, err)
	}
	defer rows.Close()
	var f reservation.Fence
	var copying int64
	n := 0
	for rows.Next() {
		var d string
		var e, c int64
		if err := rows.Scan(&d, &e, &c); err != nil {
			return reservation.Fence{}, 0, err
		}
		if n == 0 || e > f.Epoch {
			f = reservation.Fence{Decider: reservation.Authority(d), Epoch: e}
		}
		copying = max(copying, c)
		n++
	}
	if err := rows.Err(); err != nil {
		return reservation.Fence{}, 0, err
	}
	if n != fenceSlots {
		return reservation.Fence{}, 0, fmt.Errorf("mysqlstore: handoff: shop %d has %d fence slots, want %d", shop, n, fenceSlots)
	}
	return f, copying, nil
}

// Yield is the first step of a handoff to Redis at epoch: unless the
// shop's fence already has an epoch of at least epoch, it sets it to
// redis@epoch and records a fence change in the feed, in one transaction
// that waits for MySQL's deciding transactions of the shop in flight. From
// its commit on MySQL decides nothing for the shop; every change MySQL
// made as decider is in the feed before the fence change, so Redis, which
// sets its own fence when it applies that change, holds everything by then.
// It returns the fence after (which names MySQL if a newer handoff gave
// the shop back to it).
func (s *Store) Yield(ctx context.Context, shop, epoch int64) (reservation.Fence, error) {
	if shop <= 0 || epoch <= 0 {
		return reservation.Fence{}, &reservation.ValidationError{Field: "shop, epoch", Reason: fmt.Sprintf("must be positive, got %d and %d", shop, epoch)}
	}
	var out reservation.Fence
	changed := false
	err := s.inTx(ctx, callerHandoff, func(tx *sql.Tx) error {
		changed = false
		cur, err := lockFence(ctx, tx, shop)
		if err != nil {
			return err
		}
		out = cur
		if cur.Epoch >= epoch {
			return nil
		}
		out = reservation.Fence{Decider: reservation.AuthorityRedis, Epoch: epoch}
		if _, err := tx.ExecContext(ctx, sqlFenceSet, string(out.Decider), out.Epoch, shop); err != nil {
			return fmt.Errorf("mysqlstore: yield shop %d: %w", shop, err)
		}
		if _, err := tx.ExecContext(ctx, sqlFeedFence, shop, string(out.Decider), out.Epoch); err != nil {
			return fmt.Errorf("mysqlstore: yield shop %d: record the fence for Redis: %w", shop, err)
		}
		changed = true
		return nil
	})
	if err != nil {
		return reservation.Fence{}, err
	}
	s.countHandoff("yield", changed)
	if changed {
		s.metrics.feedWritten.WithLabelValues(string(reservation.ChangeFence)).Inc()
	}
	return out, nil
}

func (s *Store) countHandoff(kind string, changed bool) {
	result := "unchanged"
	if changed {
		result = "changed"
	}
	s.metrics.handoffs.WithLabelValues(kind, result).Inc()
}

// TakeOver is the last step of a handoff to MySQL at epoch, after Redis
// set its own fence to mysql@epoch and snap was read from it: unless the
// shop's fence already has an epoch of at least epoch, it makes MySQL's
// reservations of the shop exactly snap's (see copyIn) and sets the fence
// to mysql@epoch, in one transaction that locks the fence row and every
// reservation row of the shop first. It returns the fence after.
func (s *Store) TakeOver(ctx context.Context, snap *reservation.Snapshot, epoch int64) (reservation.Fence, error) {
	if err := s.validSnapshot(snap); err != nil {
		return reservation.Fence{}, err
	}
	if snap.Tokens != nil {
		return reservation.Fence{}, &reservation.ValidationError{Field: "snapshot.tokens", Reason: "a takeover copies the whole shop: a partial snapshot needs the copy it is part of (Copier.TakeOver)"}
	}
	if epoch <= 0 {
		return reservation.Fence{}, &reservation.ValidationError{Field: "epoch", Reason: fmt.Sprintf("must be positive, got %d", epoch)}
	}
	var out reservation.Fence
	changed := false
	err := s.inTx(ctx, callerHandoff, func(tx *sql.Tx) error {
		changed = false
		cur, err := lockFence(ctx, tx, snap.Shop)
		if err != nil {
			return err
		}
		out = cur
		if cur.Epoch >= epoch {
			return nil
		}
		if err := s.copyIn(ctx, tx, callerHandoff, snap); err != nil {
			return err
		}
		out = reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: epoch}
		if _, err := tx.ExecContext(ctx, sqlFenceSet, string(out.Decider), out.Epoch, snap.Shop); err != nil {
			return fmt.Errorf("mysqlstore: take over shop %d: %w", snap.Shop, err)
		}
		changed = true
		return nil
	})
	if err != nil {
		return reservation.Fence{}, err
	}
	s.countHandoff("take_over", changed)
	return out, nil
}

// Repair makes this store's copy of a shop Redis decides exactly snap (see
// copyIn), without changing the fence: reconciliation's repair of MySQL,
// and what a release of the kill switch no longer needs (a handoff copies
// the state in itself). It refuses (*reservation.NotDeciderError) a shop
// MySQL decides: there MySQL is the truth.
func (s *Store) Repair(ctx context.Context, snap *reservation.Snapshot) error {
	if err := s.validSnapshot(snap); err != nil {
		return err
	}
	return s.inTx(ctx, callerReconcile, func(tx *sql.Tx) error {
		cur, err := lockFence(ctx, tx, snap.Shop)
		if err != nil {
			return err
		}
		if cur.Decider == reservation.AuthorityMySQL {
			return &reservation.NotDeciderError{Shop: snap.Shop, Store: reservation.AuthorityRedis, Fence: cur}
		}
		return s.copyIn(ctx, tx, callerReconcile, snap)
	})
}

func (s *Store) validSnapshot(snap *reservation.Snapshot) error {
	switch {
	case snap == nil:
		return &reservation.ValidationError{Field: "snapshot", Reason: "missing"}
	case snap.Shop <= 0:
		return &reservation.ValidationError{Field: "snapshot.shop", Reason: fmt.Sprintf("must be a positive id, got %d", snap.Shop)}
	}
	for i, h := range snap.Holds {
		if err := s.cfg.Limits.ValidateDeduct(&reservation.DeductParams{Shop: snap.Shop, Token: h.Token, Allocations: h.Allocations}); err != nil {
			return &reservation.ValidationError{Field: fmt.Sprintf("snapshot.holds[%d]", i), Reason: err.Error()}
		}
	}
	for i, t := range snap.Tombstones {
		if !t.State.Terminal() {
			return &reservation.ValidationError{Field: fmt.Sprintf("snapshot.tombstones[%d].state", i), Reason: fmt.Sprintf("not a terminal state: %q", t.State)}
		}
	}
	if snap.Tokens == nil {
		return nil
	}
	// A partial snapshot speaks only of its tokens: a hold or tombstone of
	// another token is a caller's mistake, not something to copy.
	covered := make(map[string]bool, len(snap.Tokens))
	for i, t := range snap.Tokens {
		if err := reservation.DefaultLimits.ValidateGet(&reservation.GetParams{Shop: snap.Shop, Token: t}); err != nil {
			return &reservation.ValidationError{Field: fmt.Sprintf("snapshot.tokens[%d]", i), Reason: err.Error()}
		}
		covered[t] = true
	}
	for i, h := range snap.Holds {
		if !covered[h.Token] {
			return &reservation.ValidationError{Field: fmt.Sprintf("snapshot.holds[%d].token", i), Reason: fmt.Sprintf("%q is not among the partial snapshot's tokens", h.Token)}
		}
	}
	for i, t := range snap.Tombstones {
		if !covered[t.Token] {
			return &reservation.ValidationError{Field: fmt.Sprintf("snapshot.tombstones[%d].token", i), Reason: fmt.Sprintf("%q is not among the partial snapshot's tokens", t.Token)}
		}
	}
	return nil
}

// copyBatch bounds the rows of one statement of copyIn.
const copyBatch = 200

// copyIn makes the shop's reservations exactly snap's, inside tx (which
// holds the shop's fence row): every reservation row of the shop is locked;
// each of snap's holds replaces what MySQL has for its token (its own
// shadow hold, another allocation, a tombstone of its own), except a token
// the ledger claimed, which stays claimed; each tombstone is recorded; a
// MySQL hold snap knows nothing of is dropped (its reserve was never
// acknowledged by the store that decided); and the new holds' units are
// taken out of their pools, so that pool + held stays within the ledger.
// The ledger itself is never changed.
//
// A partial snapshot (snap.Tokens set) does the same for its tokens only:
// only their rows are locked, only their holds dropped.
func (s *Store) copyIn(ctx context.Context, tx *sql.Tx, caller string, snap *reservation.Snapshot) error {
	shop := snap.Shop
	have := map[string]stateRow{}
	if snap.Tokens == nil {
		if err := lockStates(ctx, tx, have, sqlShopStatesLock, shop); err != nil {
			return err
		}
	} else {
		for chunk := range slices.Chunk(snap.Tokens, copyBatch) {
			args := make([]any, 0, 1+len(chunk))
			args = append(args, shop)
			for _, t := range chunk {
				args = append(args, t)
			}
			if err := lockStates(ctx, tx, have, tokenStatesLockQuery(caller, len(chunk)), args...); err != nil {
				return err
			}
		}
	}
	if hook := s.afterCopyLock; hook != nil {
		hook()
	}

	type upsert struct {
		token     string
		state     reservation.State
		by        reservation.Authority
		allocs    []reservation.Allocation
		short     []reservation.ShortLine
		expiresAt time.Time
	}
	var put []upsert
	var newHolds []reservation.Hold
	var unlocked []string        // new holds' tokens that had no row to lock
	replace := map[string]bool{} // tokens whose hold lines are deleted first
	known := map[string]bool{}
	for _, h := range snap.Holds {
		known[h.Token] = true
		cur := have[h.Token]
		if cur.state == reservation.StateClaimed {
			continue // the ledger's claim is the truth
		}
		if !h.Authority.Valid() {
			h.Authority = reservation.AuthorityRedis
		}
		allocs := reservation.SortedAllocations(h.Allocations)
		if cur.state == reservation.StateHeld && slices.Equal(cur.allocs, allocs) {
			put = append(put, upsert{h.Token, reservation.StateHeld, h.Authority, cur.allocs, nil, h.ExpiresAt})
			continue
		}
		replace[h.Token] = true
		put = append(put, upsert{h.Token, reservation.StateHeld, h.Authority, allocs, nil, h.ExpiresAt})
		newHolds = append(newHolds, h)
		if !cur.found {
			unlocked = append(unlocked, h.Token)
		}
	}
	for _, t := range snap.Tombstones {
		known[t.Token] = true
		cur := have[t.Token]
		if cur.state == reservation.StateClaimed || (cur.found && cur.state == t.State) {
			continue
		}
		if cur.state == reservation.StateHeld {
			replace[t.Token] = true
		}
		put = append(put, upsert{t.Token, t.State, reservation.AuthorityRedis, reservation.SortedAllocations(t.Allocations), t.Short, t.ExpiresAt})
	}
	var drop []string
	for token, cur := range have {
		if !known[token] && cur.state == reservation.StateHeld {
			drop = append(drop, token)
		}
	}
	slices.Sort(drop)

	// Hold lines out (replaced and dropped), reservation rows of dropped
	// tokens out, then the new rows and lines in.
	gone := append(slices.Sorted(maps.Keys(replace)), drop...)
	for chunk := range slices.Chunk(gone, copyBatch) {
		if err := execTokens(ctx, tx, caller, sqlShopHoldsDeletePrefix, shop, chunk); err != nil {
			return fmt.Errorf("mysqlstore: copy in shop %d: delete hold lines: %w", shop, err)
		}
	}
	for chunk := range slices.Chunk(drop, copyBatch) {
		if err := execTokens(ctx, tx, caller, sqlStatesDeletePrefix, shop, chunk); err != nil {
			return fmt.Errorf("mysqlstore: copy in shop %d: drop unknown holds: %w", shop, err)
		}
	}
	for chunk := range slices.Chunk(put, copyBatch) {
		args := make([]any, 0, 7*len(chunk))
		for _, u := range chunk {
			var exp any // a refusal has no hold expiry: the database's now
			if !u.expiresAt.IsZero() {
				exp = u.expiresAt.UTC()
			}
			args = append(args, shop, u.token, string(u.state), string(u.by), reservation.EncodeAllocations(u.allocs),
				reservation.EncodeShort(u.short), exp)
		}
		if _, err := tx.ExecContext(ctx, stateUpsertQuery(caller, len(chunk)), args...); err != nil {
			return fmt.Errorf("mysqlstore: copy in shop %d: record reservations: %w", shop, err)
		}
	}
	// A token that had no row when the rows were locked may have been
	// claimed since (a legacy claim's Deduct): the upsert kept the claim,
	// and its hold is not copied. The rows are written, so locked, now.
	claimedSince, err := claimedAmong(ctx, tx, caller, shop, unlocked)
	if err != nil {
		return err
	}
	newHolds = slices.DeleteFunc(newHolds, func(h reservation.Hold) bool { return claimedSince[h.Token] })
	take := map[key]int64{} // units the new holds hold, per pool
	for _, h := range newHolds {
		for _, a := range h.Allocations {
			take[key{shop, a.Item, a.Location}] += a.Quantity
		}
	}
	var lines []any
	n := 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		if _, err := tx.ExecContext(ctx, insertHoldsQuery(caller, n), lines...); err != nil {
			return fmt.Errorf("mysqlstore: copy in shop %d: insert hold lines: %w", shop, err)
		}
		lines, n = lines[:0], 0
		return nil
	}
	for _, h := range newHolds {
		for _, a := range h.Allocations {
			lines = append(lines, shop, h.Token, a.Item, a.Location, a.Quantity, h.ExpiresAt.UTC(), string(h.Authority))
			if n++; n == copyBatch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	// The new holds' units leave their pools, as a reserve's would: the
	// pool stays within the ledger. With pool + held <= available before,
	// taking min(new units, pool) is at least the excess the new holds
	// make (replaced and dropped holds only lower held), and it costs a
	// pool's lock and a bounded delete, not a count of the item's holds:
	// a cut-over's time must not grow with the shop. A pool left short
	// is refilled by the next reserve that needs it.
	keys := slices.SortedFunc(maps.Keys(take), func(a, b key) int {
		return cmp.Or(cmp.Compare(a.item, b.item), cmp.Compare(a.loc, b.loc))
	})
	for _, k := range keys {
		if _, _, ok, err := lockPool(ctx, tx, caller, k); err != nil || !ok {
			if err != nil {
				return err
			}
			continue // the ledger never had the item there: no pool
		}
		if _, err := tx.ExecContext(ctx, tag(caller)+sqlPoolTrim, k.shop, k.item, k.loc, take[k]); err != nil {
			return fmt.Errorf("mysqlstore: %s: take %d units out of %s: %w", caller, take[k], k, err)
		}
	}
	return nil
}

// claimedAmong returns which of tokens' reservation rows are claimed.
func claimedAmong(ctx context.Context, tx *sql.Tx, caller string, shop int64, tokens []string) (map[string]bool, error) {
	claimed := map[string]bool{}
	for chunk := range slices.Chunk(tokens, copyBatch) {
		args := make([]any, 0, 1+len(chunk))
		args = append(args, shop)
		for _, t := range chunk {
			args = append(args, t)
		}
		rows, err := tx.QueryContext(ctx, tokensInQuery(caller, sqlClaimedAmongPrefix, len(chunk)), args...)
		if err != nil {
			return nil, fmt.Errorf("mysqlstore: copy in shop %d: claims landed meanwhile: %w", shop, err)
		}
		for rows.Next() {
			var t string
			if err := rows.Scan(&t); err != nil {
				rows.Close()
				return nil, err
			}
			claimed[t] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return claimed, nil
}

// lockStates reads (and locks) reservation rows into have.
func lockStates(ctx context.Context, tx *sql.Tx, have map[string]stateRow, query string, args ...any) error {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("mysqlstore: copy in shop %v: lock reservations: %w", args[0], err)
	}
	defer rows.Close()
	for rows.Next() {
		var token, state, allocs string
		if err := rows.Scan(&token, &state, &allocs); err != nil {
			return err
		}
		st := stateRow{found: true, state: reservation.State(state)}
		if st.allocs, err = reservation.DecodeAllocations(allocs); err != nil {
			return err
		}
		have[token] = st
	}
	return rows.Err()
}

func execTokens(ctx context.Context, tx *sql.Tx, caller, prefix string, shop int64, tokens []string) error {
	args := make([]any, 0, 1+len(tokens))
	args = append(args, shop)
	for _, t := range tokens {
		args = append(args, t)
	}
	_, err := tx.ExecContext(ctx, tokensInQuery(caller, prefix, len(tokens)), args...)
	return err
}
