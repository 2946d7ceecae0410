package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/reservation"
)

// ResyncSource is what Drift, Resync, the reaper and the claim follower
// read from the MySQL store besides the ledger. mysqlstore.Store
// implements it.
type ResyncSource interface {
	// Holds lists a shop's holds, one per token, expired ones included.
	Holds(ctx context.Context, shop int64) ([]reservation.Hold, error)
	// Claims returns, for each of tokens that the ledger has deducted, the
	// allocations it was deducted by; other tokens are absent.
	Claims(ctx context.Context, shop int64, tokens []string) (map[string][]reservation.Allocation, error)
	// ClaimsSince lists the claims of shop (0: every shop) recorded at or
	// after since and at least lag ago (the ledger's clock), oldest first,
	// at most limit of them.
	ClaimsSince(ctx context.Context, shop int64, since time.Time, lag time.Duration, limit int) ([]reservation.Claimed, error)
}

// ErrNoSource is returned by Drift and Resync when Config.Source is nil.
var ErrNoSource = errors.New("redisstore: Config.Source is not set: Drift and Resync need the MySQL store's holds and claims")

// DriftParams are the arguments of Drift.
type DriftParams struct {
	// Shop is the shop to check (positive).
	Shop int64
	// HoldsFrom names the store whose holds are the truth (required):
	// reservation.AuthorityRedis where Redis is the authority (modes redis
	// and shadow): Redis's own holds count, only leftovers of claims are
	// findings. reservation.AuthorityMySQL where MySQL is or was the
	// authority (mysql, mysql_only, before a kill switch): Redis must hold
	// exactly what MySQL holds.
	HoldsFrom reservation.Authority
}

// ResyncParams are the arguments of Resync.
type ResyncParams struct {
	// Shops to rebuild, e.g. every shop of a pod (at least one, each
	// positive). The store cannot list a pod's shops: Redis only knows the
	// shops it has seen.
	Shops []int64
	// HoldsFrom names the store whose holds Redis keeps (required; see
	// DriftParams.HoldsFrom). With reservation.AuthorityMySQL every Redis
	// hold is replaced by MySQL's; with reservation.AuthorityRedis Redis
	// keeps its own holds, minus leftovers of claims.
	HoldsFrom reservation.Authority
}

// ResyncResult is the answer of Resync.
type ResyncResult struct {
	// Shops is the number of shops rebuilt.
	Shops int
	// Holds is the number of holds Redis has after the rebuild.
	Holds int
	// Dropped is the number of Redis holds removed: leftovers of claims,
	// index entries without a hold, and (from MySQL) holds MySQL lacks.
	Dropped int
}

// DriftKind classifies a Drift finding.
type DriftKind string

const (
	// DriftLeftoverHold: a Redis hold for a token the ledger has deducted:
	// a legacy claim whose cleanup never ran (WindowAfterDeduct, or a crash
	// in it). Its units are held for nobody (undersell); once it expires
	// the reaper would give back units the ledger no longer has
	// (oversell). Retrying the claim or Resync removes it without giving
	// units back.
	DriftLeftoverHold DriftKind = "leftover_hold"
	// DriftOrphanIndex: the expiry index names a token that has no hold.
	DriftOrphanIndex DriftKind = "orphan_index"
	// DriftMissingHold: MySQL holds the token, Redis does not (HoldsFrom
	// mysql only).
	DriftMissingHold DriftKind = "missing_hold"
	// DriftExtraHold: Redis holds a token MySQL does not, and the ledger
	// has not deducted it (HoldsFrom mysql only).
	DriftExtraHold DriftKind = "extra_hold"
	// DriftHoldMismatch: both hold the token at different allocations
	// (HoldsFrom mysql only). Expiries are not compared: each store sets
	// them by its own clock.
	DriftHoldMismatch DriftKind = "hold_mismatch"
	// DriftQuantity: a Redis quantity differs from the ledger's available
	// minus what the true holds hold there.
	DriftQuantity DriftKind = "quantity"
	// DriftMissingQuantity: the ledger has an item x location Redis has no
	// quantity for (Availability does not list it; Reserve cannot use it).
	DriftMissingQuantity DriftKind = "missing_quantity"
	// DriftExtraQuantity: Redis has a quantity for an item x location that
	// neither the ledger nor any hold names.
	DriftExtraQuantity DriftKind = "extra_quantity"
)

// Drift is one difference between Redis and what the ledger and the true
// holds say Redis should be.
type Drift struct {
	Kind DriftKind
	Shop int64
	// Token is set for hold findings.
	Token string
	// Allocations are the Redis hold's (leftover, extra, mismatch) or
	// MySQL's (missing).
	Allocations []reservation.Allocation
	// Item and Location are set for quantity findings.
	Item, Location int64
	// Have is the Redis quantity, Want what it should be (0 when the
	// field is absent or should be).
	Have, Want int64
}

// String is the finding for a person: kind, where, and the numbers.
func (d Drift) String() string {
	if d.Token != "" {
		return fmt.Sprintf("%s: shop %d token %q %v", d.Kind, d.Shop, d.Token, d.Allocations)
	}
	return fmt.Sprintf("%s: shop %d item %d location %d: redis %d, want %d", d.Kind, d.Shop, d.Item, d.Location, d.Have, d.Want)
}

// cell is one item x location of a shop.
type cell struct{ item, loc int64 }

func validHoldsFrom(a reservation.Authority) error {
	if !a.Valid() {
		return &reservation.ValidationError{Field: "holds_from", Reason: fmt.Sprintf("must be %q or %q, got %q", reservation.AuthorityRedis, reservation.AuthorityMySQL, a)}
	}
	return nil
}

// Drift compares a shop's Redis state with the ledger, the ledger's claims
// and (HoldsFrom mysql) MySQL's holds, and reports every difference, sorted.
// Redis is read in one atomic step, but the ledger and MySQL at other
// moments: under traffic a finding may be a passing state, so check again
// before acting on it.
func (s *Store) Drift(ctx context.Context, p *DriftParams) ([]Drift, error) {
	if p == nil || p.Shop <= 0 {
		return nil, &reservation.ValidationError{Field: "shop", Reason: "must be a positive id"}
	}
	if err := validHoldsFrom(p.HoldsFrom); err != nil {
		return nil, err
	}
	if s.cfg.Source == nil {
		return nil, ErrNoSource
	}
	shop := p.Shop
	ledger, err := s.cfg.Ledger.Stock(ctx, &reservation.StockParams{Shop: shop})
	if err != nil {
		return nil, fmt.Errorf("redisstore: drift: ledger: %w", err)
	}
	var mysqlHolds []reservation.Hold
	if p.HoldsFrom == reservation.AuthorityMySQL {
		if mysqlHolds, err = s.cfg.Source.Holds(ctx, shop); err != nil {
			return nil, fmt.Errorf("redisstore: drift: mysql holds: %w", err)
		}
	}
	snap, err := s.snapshot(ctx, shop, ledger, mysqlHolds)
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

	var out []Drift
	var truth [][]reservation.Allocation
	inRedis := map[string]holdRecord{}
	for _, h := range snap.holds {
		switch _, claimed := claims[h.token]; {
		case len(h.rec.allocs) == 0:
			out = append(out, Drift{Kind: DriftOrphanIndex, Shop: shop, Token: h.token})
		case claimed:
			out = append(out, Drift{Kind: DriftLeftoverHold, Shop: shop, Token: h.token, Allocations: h.rec.allocs})
		default:
			inRedis[h.token] = h.rec
			if p.HoldsFrom == reservation.AuthorityRedis {
				truth = append(truth, h.rec.allocs)
			}
		}
	}
	if p.HoldsFrom == reservation.AuthorityMySQL {
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
				out = append(out, Drift{Kind: DriftMissingHold, Shop: shop, Token: h.Token, Allocations: h.Allocations})
			case !sameAllocs(r.allocs, sorted(h.Allocations)):
				out = append(out, Drift{Kind: DriftHoldMismatch, Shop: shop, Token: h.Token, Allocations: r.allocs})
			}
		}
		for token, r := range inRedis {
			if !inMySQL[token] {
				out = append(out, Drift{Kind: DriftExtraHold, Shop: shop, Token: token, Allocations: r.allocs})
			}
		}
	}

	want := wantQuantities(ledger, truth)
	for c, w := range want {
		have, ok := snap.qty[c]
		switch {
		case !ok:
			out = append(out, Drift{Kind: DriftMissingQuantity, Shop: shop, Item: c.item, Location: c.loc, Want: w})
		case have != w:
			out = append(out, Drift{Kind: DriftQuantity, Shop: shop, Item: c.item, Location: c.loc, Have: have, Want: w})
		}
	}
	for c, have := range snap.qty {
		if _, ok := want[c]; !ok {
			out = append(out, Drift{Kind: DriftExtraQuantity, Shop: shop, Item: c.item, Location: c.loc, Have: have})
		}
	}
	slices.SortFunc(out, func(a, b Drift) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Token, b.Token), cmp.Compare(a.Item, b.Item), cmp.Compare(a.Location, b.Location))
	})
	return out, nil
}

// wantQuantities is what every Redis quantity should be: the ledger's
// available minus what the true holds hold there. A held item x location
// the ledger lacks should be at minus what is held, so that returning the
// hold brings it to the ledger's zero.
func wantQuantities(ledger []reservation.StockLevel, holds [][]reservation.Allocation) map[cell]int64 {
	want := make(map[cell]int64, len(ledger))
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

func sorted(as []reservation.Allocation) []reservation.Allocation {
	out := slices.Clone(as)
	reservation.SortAllocations(out)
	return out
}

type snapHold struct {
	token string
	rec   holdRecord
}

type snapshot struct {
	holds []snapHold
	qty   map[cell]int64
}

// snapshot reads a shop's holds and the quantities of every item the ledger,
// the given holds or a Redis hold names.
func (s *Store) snapshot(ctx context.Context, shop int64, ledger []reservation.StockLevel, holds []reservation.Hold) (snapshot, error) {
	k := s.shopKeys(shop)
	args := []any{k.base}
	for _, l := range ledger {
		args = append(args, l.Item)
	}
	for _, h := range holds {
		for _, a := range h.Allocations {
			args = append(args, a.Item)
		}
	}
	reply, err := s.run(ctx, "snapshot", scriptSnapshot, []string{k.expiry()}, args...)
	if err != nil {
		return snapshot{}, err
	}
	bad := func(what any) (snapshot, error) {
		return snapshot{}, fmt.Errorf("redisstore: snapshot of shop %d: unexpected %v", shop, what)
	}
	hs, ok1 := at(reply, 0).([]any)
	qs, ok2 := at(reply, 1).([]any)
	if !ok1 || !ok2 {
		return bad(reply)
	}
	snap := snapshot{qty: map[cell]int64{}}
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
			return snapshot{}, err
		}
		snap.holds = append(snap.holds, snapHold{token: token, rec: rec})
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
			snap.qty[cell{item, loc}] = q
		}
	}
	return snap, nil
}

// Resync rebuilds the Redis state of each shop from the ledger, the
// ledger's claims and, with HoldsFrom mysql, MySQL's holds: holds (see
// ResyncParams.HoldsFrom), the claimed marker of every claimed token it
// finds, and every quantity as the ledger's available minus what the kept
// holds hold. It is what repairs Drift, and what makes a kill switch from
// mysql_only possible: resync the scope, then flip.
//
// Each shop is rewritten by one script, so no Redis write of the shop
// interleaves with it; with HoldsFrom redis the script itself decides
// which holds stay, from the state it sees. The ledger and MySQL are read
// before it, though: a ledger change or a MySQL hold that lands between
// those reads and the script is missed (the next Drift shows it, and a
// second Resync fixes it). Run it on a quiet scope where you can, and
// check Drift after.
func (s *Store) Resync(ctx context.Context, p *ResyncParams) (ResyncResult, error) {
	if p == nil || len(p.Shops) == 0 {
		return ResyncResult{}, &reservation.ValidationError{Field: "shops", Reason: "name at least one shop"}
	}
	for i, shop := range p.Shops {
		if shop <= 0 {
			return ResyncResult{}, &reservation.ValidationError{Field: fmt.Sprintf("shops[%d]", i), Reason: fmt.Sprintf("must be a positive id, got %d", shop)}
		}
	}
	if err := validHoldsFrom(p.HoldsFrom); err != nil {
		return ResyncResult{}, err
	}
	if s.cfg.Source == nil {
		return ResyncResult{}, ErrNoSource
	}
	var res ResyncResult
	for _, shop := range p.Shops {
		kept, dropped, err := s.resyncShop(ctx, shop, p.HoldsFrom)
		if err != nil {
			return res, fmt.Errorf("redisstore: resync shop %d (after %d shops): %w", shop, res.Shops, err)
		}
		res.Shops++
		res.Holds += kept
		res.Dropped += dropped
	}
	return res, nil
}

func (s *Store) resyncShop(ctx context.Context, shop int64, from reservation.Authority) (kept, dropped int, err error) {
	k := s.shopKeys(shop)
	// Before the ledger is read: its quantities will include these claims,
	// so the claim follower must not settle them again.
	if err := s.markRecentClaims(ctx, shop); err != nil {
		return 0, 0, fmt.Errorf("mark recent claims: %w", err)
	}
	ledger, err := s.cfg.Ledger.Stock(ctx, &reservation.StockParams{Shop: shop})
	if err != nil {
		return 0, 0, fmt.Errorf("ledger: %w", err)
	}
	var mysqlHolds []reservation.Hold
	if from == reservation.AuthorityMySQL {
		if mysqlHolds, err = s.cfg.Source.Holds(ctx, shop); err != nil {
			return 0, 0, fmt.Errorf("mysql holds: %w", err)
		}
	}
	tokens, err := s.client.ZRange(ctx, k.expiry(), 0, -1).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("redis holds: %w", err)
	}
	for _, h := range mysqlHolds {
		tokens = append(tokens, h.Token)
	}
	claims, err := s.cfg.Source.Claims(ctx, shop, tokens)
	if err != nil {
		return 0, 0, fmt.Errorf("claims: %w", err)
	}
	if err := s.client.SAdd(ctx, s.shopsKey(), shop).Err(); err != nil {
		return 0, 0, fmt.Errorf("register shop: %w", err)
	}

	args := []any{k.base, s.cfg.ClaimedTTL.Milliseconds(), string(from), len(ledger)}
	for _, l := range ledger {
		args = append(args, l.Item, l.Location, l.Available)
	}
	args = append(args, len(claims))
	for token, allocs := range claims {
		args = append(args, token, encodeAllocs(sorted(allocs)))
	}
	if from == reservation.AuthorityMySQL {
		args = append(args, len(mysqlHolds))
		for _, h := range mysqlHolds {
			args = append(args, h.Token, h.ExpiresAt.UnixMilli(), string(h.Authority), encodeAllocs(h.Allocations))
		}
	}
	reply, err := s.run(ctx, "resync", scriptResync, []string{k.expiry()}, args...)
	if err != nil {
		return 0, 0, err
	}
	n1, err1 := toInt(at(reply, 0))
	n2, err2 := toInt(at(reply, 1))
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("unexpected reply %v", reply)
	}
	return int(n1), int(n2), nil
}

// markRecentClaims sets the claimed marker of every claim of shop within
// the claim follower's reach (FollowWindow, and a margin), keeping markers
// that exist. Resync calls it before it reads the ledger: the quantities it
// rebuilds include those claims, and a claim without its marker would be
// settled again by FollowClaims, taking its units out twice. A claim that
// commits between this read and the ledger read is in the quantities
// without a marker: the follower takes it out a second time, and Redis
// offers that much too little until the next Resync (the safe direction).
func (s *Store) markRecentClaims(ctx context.Context, shop int64) error {
	k := s.shopKeys(shop)
	since := time.Now().Add(-FollowWindow - followMargin)
	for {
		claims, err := s.cfg.Source.ClaimsSince(ctx, shop, since, 0, DefaultFollowLimit)
		if err != nil {
			return err
		}
		if len(claims) == 0 {
			return nil
		}
		_, err = s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, c := range claims {
				pipe.SetNX(ctx, k.claimed(c.Token), encodeAllocs(sorted(c.Allocations)), s.cfg.ClaimedTTL)
			}
			return nil
		})
		if err != nil {
			return err
		}
		last := claims[len(claims)-1].At
		if len(claims) < DefaultFollowLimit || !last.After(since) {
			return nil
		}
		since = last
	}
}
