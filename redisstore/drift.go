package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Source is what the store reads from the MySQL store besides the ledger:
// MySQL's holds, and the claims its ledger recorded. mysqlstore.Store
// implements it.
type Source interface {
	// Holds lists a shop's holds as MySQL keeps them, one per token,
	// expired ones the reaper has not returned included (they still hold
	// their units), each with its allocations. Drift compares Redis with
	// them for a shop MySQL decides.
	Holds(ctx context.Context, shop int64) ([]reservation.Hold, error)
	// Claims returns, for each of tokens whose claim the ledger recorded
	// (Ledger.Deduct, or MySQL's own claim), the allocations it was
	// deducted by; other tokens are absent. It must read committed state:
	// Claim, Release and Reap act on its answer (a claim that finishes a
	// lost cleanup, a claiming hold settled or released).
	Claims(ctx context.Context, shop int64, tokens []string) (map[string][]reservation.Allocation, error)
}

// ErrNoSource is returned by Drift when Config.Source is nil.
var ErrNoSource = errors.New("redisstore: Config.Source is not set: Drift needs the MySQL store's holds and claims")

// cell is one item x location of a shop.
type cell struct{ item, loc int64 }

// Drift compares a shop's Redis state with what it should be and reports
// every difference, sorted. The true holds are the decider's, as Redis's
// fence names it: Redis's own (only leftovers of claims and orphan index
// entries are findings) when Redis decides; MySQL's when MySQL decides,
// which Redis must mirror exactly. Every quantity must be the ledger's
// available minus what the true holds hold there.
//
// Redis is read in one atomic step, the ledger and MySQL at other moments:
// under traffic, or during a handoff (when the two fences disagree), a
// finding may be a passing state, so check again before acting on it.
func (s *Store) Drift(ctx context.Context, p *reservation.DriftParams) ([]reservation.RedisDrift, error) {
	if p == nil {
		return nil, &reservation.ValidationError{Field: "params", Reason: "missing"}
	}
	if err := validShop("shop", p.Shop); err != nil {
		return nil, err
	}
	if s.cfg.Source == nil {
		return nil, ErrNoSource
	}
	shop := p.Shop
	fence, err := s.Fence(ctx, shop)
	if err != nil {
		return nil, err
	}
	ledger, err := s.cfg.Ledger.Stock(ctx, &reservation.StockParams{Shop: shop})
	if err != nil {
		return nil, fmt.Errorf("redisstore: drift: ledger: %w", err)
	}
	mysqlDecides := fence.Decider == reservation.AuthorityMySQL
	var mysqlHolds []reservation.Hold
	if mysqlDecides {
		if mysqlHolds, err = s.cfg.Source.Holds(ctx, shop); err != nil {
			return nil, fmt.Errorf("redisstore: drift: mysql holds: %w", err)
		}
	}
	snap, err := s.driftSnapshot(ctx, shop, ledger, mysqlHolds)
	if err != nil {
		return nil, err
	}
	tokens := make([]string, 0, len(snap.holds)+len(mysqlHolds))
	for _, h := range snap.holds {
		tokens = append(tokens, h.token)
	}
	for _, h := range mysqlHolds {
		tokens = append(tokens, h.Token)
	}
	claims, err := s.cfg.Source.Claims(ctx, shop, tokens)
	if err != nil {
		return nil, fmt.Errorf("redisstore: drift: claims: %w", err)
	}

	var out []reservation.RedisDrift
	var truth [][]reservation.Allocation
	inRedis := map[string]holdRecord{}
	for _, h := range snap.holds {
		switch _, claimed := claims[h.token]; {
		case len(h.rec.allocs) == 0:
			out = append(out, reservation.RedisDrift{Kind: reservation.DriftOrphanIndex, Shop: shop, Token: h.token})
		case claimed:
			out = append(out, reservation.RedisDrift{Kind: reservation.DriftLeftoverHold, Shop: shop, Token: h.token, Allocations: h.rec.allocs})
		default:
			inRedis[h.token] = h.rec
			if !mysqlDecides {
				truth = append(truth, h.rec.allocs)
			}
		}
	}
	if mysqlDecides {
		inMySQL := map[string]bool{}
		for _, h := range mysqlHolds {
			if _, claimed := claims[h.Token]; claimed {
				continue
			}
			inMySQL[h.Token] = true
			truth = append(truth, h.Allocations)
			r, ok := inRedis[h.Token]
			switch {
			case !ok:
				out = append(out, reservation.RedisDrift{Kind: reservation.DriftMissingHold, Shop: shop, Token: h.Token, Allocations: reservation.SortedAllocations(h.Allocations)})
			case !sameAllocs(r.allocs, reservation.SortedAllocations(h.Allocations)):
				out = append(out, reservation.RedisDrift{Kind: reservation.DriftHoldMismatch, Shop: shop, Token: h.Token, Allocations: r.allocs})
			}
		}
		for token, r := range inRedis {
			if !inMySQL[token] {
				out = append(out, reservation.RedisDrift{Kind: reservation.DriftExtraHold, Shop: shop, Token: token, Allocations: r.allocs})
			}
		}
	}

	want := wantQuantities(ledger, truth)
	for c, w := range want {
		have, ok := snap.qty[c]
		switch {
		case !ok:
			out = append(out, reservation.RedisDrift{Kind: reservation.DriftMissingQuantity, Shop: shop, Item: c.item, Location: c.loc, Want: w})
		case have != w:
			out = append(out, reservation.RedisDrift{Kind: reservation.DriftQuantity, Shop: shop, Item: c.item, Location: c.loc, Have: have, Want: w})
		}
	}
	for c, have := range snap.qty {
		if _, ok := want[c]; !ok {
			out = append(out, reservation.RedisDrift{Kind: reservation.DriftExtraQuantity, Shop: shop, Item: c.item, Location: c.loc, Have: have})
		}
	}
	slices.SortFunc(out, func(a, b reservation.RedisDrift) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Token, b.Token), cmp.Compare(a.Item, b.Item), cmp.Compare(a.Location, b.Location))
	})
	return out, nil
}

// wantQuantities is the ledger's available minus what holds hold, per
// item x location any of them names.
func wantQuantities(ledger []reservation.StockLevel, holds [][]reservation.Allocation) map[cell]int64 {
	want := map[cell]int64{}
	for _, l := range ledger {
		want[cell{l.Item, l.Location}] += l.Available
	}
	for _, allocs := range holds {
		for _, a := range allocs {
			want[cell{a.Item, a.Location}] -= a.Quantity
		}
	}
	return want
}

// driftState is a shop's holds and quantities, read in one step.
type driftState struct {
	holds []driftHold
	qty   map[cell]int64
}

type driftHold struct {
	token string
	rec   holdRecord
}

// driftSnapshot reads the shop's holds and the quantities of every item
// the ledger, MySQL's holds or Redis's holds name.
func (s *Store) driftSnapshot(ctx context.Context, shop int64, ledger []reservation.StockLevel, mysqlHolds []reservation.Hold) (driftState, error) {
	k := s.shopKeys(shop)
	args := []any{k.base}
	for _, l := range ledger {
		args = append(args, l.Item)
	}
	for _, h := range mysqlHolds {
		for _, a := range h.Allocations {
			args = append(args, a.Item)
		}
	}
	reply, err := s.runRO(ctx, "drift", scriptDrift, []string{k.expiry()}, args...)
	if err != nil {
		return driftState{}, err
	}
	bad := func(what any) (driftState, error) {
		return driftState{}, fmt.Errorf("redisstore: drift of shop %d: unexpected %v", shop, what)
	}
	hs, ok1 := at(reply, 0).([]any)
	qs, ok2 := at(reply, 1).([]any)
	if !ok1 || !ok2 {
		return bad(reply)
	}
	st := driftState{qty: map[cell]int64{}}
	for _, v := range hs {
		e, ok := v.([]any)
		if !ok || len(e) != 3 {
			return bad(v)
		}
		token, err := toString(e[0])
		if err != nil {
			return bad(v)
		}
		rec, err := parseHold(e[2])
		if err != nil {
			return driftState{}, err
		}
		st.holds = append(st.holds, driftHold{token: token, rec: rec})
	}
	for _, v := range qs {
		e, ok := v.([]any)
		if !ok || len(e) != 2 {
			return bad(v)
		}
		item, err := toInt(e[0])
		flat, ok := e[1].([]any)
		if err != nil || !ok {
			return bad(v)
		}
		for i := 0; i+1 < len(flat); i += 2 {
			loc, err1 := toInt(flat[i])
			q, err2 := toInt(flat[i+1])
			if err1 != nil || err2 != nil {
				return bad(flat)
			}
			st.qty[cell{item, loc}] = q
		}
	}
	return st, nil
}
