package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Store is the legacy Redis reservation store. It implements
// reservation.Store; the ledger it claims against is Config.Ledger. It is
// safe for concurrent use.
type Store struct {
	client  redis.UniversalClient
	cfg     Config
	metrics *metrics

	// Test knobs, set only by this package's tests (export_test.go).
	//
	// afterDeduct runs in an authority Claim between the ledger deduction
	// and the Redis cleanup; an error it returns stands for a cleanup that
	// failed (a crash, a timeout, a network cut).
	afterDeduct func() error
	// skipTokenCheck makes the reserve script ignore an existing hold for
	// the token: the non-idempotent script the lost-reply test shows to
	// double-apply.
	skipTokenCheck bool
}

var _ reservation.Store = (*Store)(nil)

// opTTL is how long an adjust's idempotency marker lives: long past any
// client timeout, after which nothing can deliver the same call again.
const opTTL = 10 * time.Minute

// New returns a store on cfg.Client. It refuses a client that would resend
// commands (see Config.Client).
func New(cfg Config) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("redisstore: register metrics: %w", err)
	}
	return &Store{client: cfg.Client, cfg: cfg, metrics: m}, nil
}

// Name returns reservation.AuthorityRedis.
func (s *Store) Name() reservation.Authority { return reservation.AuthorityRedis }

// run runs a script and returns its reply, an array whose first element
// says what happened. An error means the script may or may not have run;
// every script is safe to run again.
func (s *Store) run(ctx context.Context, name string, script *redis.Script, keys []string, args ...any) ([]any, error) {
	start := time.Now()
	v, err := script.Run(ctx, s.client, keys, args...).Result()
	s.metrics.observe(name, start, err)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %s: %w", name, err)
	}
	reply, ok := v.([]any)
	if !ok || len(reply) == 0 {
		return nil, fmt.Errorf("redisstore: %s: unexpected reply %v", name, v)
	}
	return reply, nil
}

// Reserve holds every line of a cart or nothing, in one script: a line is
// served whole by the first of its locations, in the caller's order, whose
// quantity covers it. A repeated token returns the existing hold (Replayed)
// without a second decrement, which is also what makes a retry after a lost
// reply safe.
func (s *Store) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	if err := s.cfg.Limits.ValidateReserve(p); err != nil {
		return reservation.ReserveResult{}, err
	}
	authority := p.Authority
	if authority == "" {
		authority = reservation.AuthorityRedis
	}
	check := "1"
	if s.skipTokenCheck {
		check = "0"
	}
	k := s.shopKeys(p.Shop)
	args := []any{k.base, p.Token, p.TTL.Milliseconds(), string(authority), check, len(p.Lines)}
	for _, ln := range p.Lines {
		args = append(args, ln.Item, ln.Quantity, len(ln.Locations))
		for _, loc := range ln.Locations {
			args = append(args, loc)
		}
	}
	reply, err := s.run(ctx, "reserve", scriptReserve, []string{k.expiry(), k.hold(p.Token), k.claimed(p.Token)}, args...)
	if err != nil {
		return reservation.ReserveResult{}, err
	}
	switch reply[0] {
	case "claimed":
		return reservation.ReserveResult{}, fmt.Errorf("redisstore: reserve shop %d token %q: %w", p.Shop, p.Token, reservation.ErrAlreadyClaimed)
	case "existing":
		h, err := parseHold(at(reply, 1))
		if err != nil {
			return reservation.ReserveResult{}, err
		}
		if !reservation.SameLines(p.Lines, h.allocs) {
			return reservation.ReserveResult{}, fmt.Errorf("redisstore: reserve shop %d token %q holds %v: %w", p.Shop, p.Token, h.allocs, reservation.ErrTokenConflict)
		}
		return reservation.ReserveResult{
			Status:      reservation.StatusReserved,
			Allocations: h.allocs,
			ExpiresAt:   msTime(h.expiresMS),
			Authority:   h.authority,
			Replayed:    true,
		}, nil
	case "short":
		res := reservation.ReserveResult{Status: reservation.StatusInsufficient}
		for i := 1; i+2 < len(reply); i += 3 {
			item, err1 := toInt(reply[i])
			req, err2 := toInt(reply[i+1])
			best, err3 := toInt(reply[i+2])
			if err := cmp.Or(err1, err2, err3); err != nil {
				return reservation.ReserveResult{}, fmt.Errorf("redisstore: reserve: short line: %w", err)
			}
			res.Short = append(res.Short, reservation.ShortLine{Item: item, Requested: req, Unheld: best})
		}
		slices.SortFunc(res.Short, func(a, b reservation.ShortLine) int { return cmp.Compare(a.Item, b.Item) })
		return res, nil
	case "reserved":
		exp, err := toInt(at(reply, 1))
		if err != nil || len(reply) != 2+len(p.Lines) {
			return reservation.ReserveResult{}, fmt.Errorf("redisstore: reserve: unexpected reply %v", reply)
		}
		allocs := make([]reservation.Allocation, len(p.Lines))
		for i, ln := range p.Lines {
			loc, err := toInt(reply[2+i])
			if err != nil {
				return reservation.ReserveResult{}, fmt.Errorf("redisstore: reserve: location: %w", err)
			}
			allocs[i] = reservation.Allocation{Item: ln.Item, Location: loc, Quantity: ln.Quantity}
		}
		reservation.SortAllocations(allocs)
		return reservation.ReserveResult{
			Status:      reservation.StatusReserved,
			Allocations: allocs,
			ExpiresAt:   msTime(exp),
			Authority:   authority,
		}, nil
	}
	return reservation.ReserveResult{}, fmt.Errorf("redisstore: reserve: unexpected reply %v", reply)
}

// Release gives a hold's units back. Releasing nothing (already released,
// reaped, or never held) is not an error; releasing a claimed token is
// ErrAlreadyClaimed.
func (s *Store) Release(ctx context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	if err := s.cfg.Limits.ValidateRelease(p); err != nil {
		return reservation.ReleaseResult{}, err
	}
	k := s.shopKeys(p.Shop)
	reply, err := s.run(ctx, "release", scriptRelease, []string{k.expiry(), k.hold(p.Token), k.claimed(p.Token)}, k.base, p.Token)
	if err != nil {
		return reservation.ReleaseResult{}, err
	}
	switch reply[0] {
	case "none":
		return reservation.ReleaseResult{}, nil
	case "claimed":
		return reservation.ReleaseResult{}, fmt.Errorf("redisstore: release shop %d token %q: %w", p.Shop, p.Token, reservation.ErrAlreadyClaimed)
	case "released":
		h, err := parseHold(at(reply, 1))
		if err != nil {
			return reservation.ReleaseResult{}, err
		}
		return reservation.ReleaseResult{Released: true, Allocations: h.allocs}, nil
	}
	return reservation.ReleaseResult{}, fmt.Errorf("redisstore: release: unexpected reply %v", reply)
}

// Get returns the hold for a token, expired or not (an expired hold keeps
// its units until the reaper returns them).
func (s *Store) Get(ctx context.Context, p *reservation.GetParams) (reservation.Hold, error) {
	if err := s.cfg.Limits.ValidateGet(p); err != nil {
		return reservation.Hold{}, err
	}
	m, err := s.client.HGetAll(ctx, s.shopKeys(p.Shop).hold(p.Token)).Result()
	if err != nil {
		return reservation.Hold{}, fmt.Errorf("redisstore: get: %w", err)
	}
	if len(m) == 0 {
		return reservation.Hold{}, fmt.Errorf("redisstore: shop %d token %q: %w", p.Shop, p.Token, reservation.ErrNotFound)
	}
	flat := make([]any, 0, 2*len(m))
	for f, v := range m {
		flat = append(flat, f, v)
	}
	h, err := parseHold(flat)
	if err != nil {
		return reservation.Hold{}, err
	}
	return reservation.Hold{Shop: p.Shop, Token: p.Token, Allocations: h.allocs, ExpiresAt: msTime(h.expiresMS), Authority: h.authority}, nil
}

// Availability reads an item's quantity hash: every location the store
// knows, ascending, a negative quantity (ledger lowered below what is
// held) reported as 0.
func (s *Store) Availability(ctx context.Context, p *reservation.AvailabilityParams) (reservation.AvailabilityResult, error) {
	if err := s.cfg.Limits.ValidateAvailability(p); err != nil {
		return reservation.AvailabilityResult{}, err
	}
	m, err := s.client.HGetAll(ctx, s.shopKeys(p.Shop).qty(p.Item)).Result()
	if err != nil {
		return reservation.AvailabilityResult{}, fmt.Errorf("redisstore: availability: %w", err)
	}
	res := reservation.AvailabilityResult{Item: p.Item, Locations: make([]reservation.LocationAvailability, 0, len(m))}
	for f, v := range m {
		loc, err1 := strconv.ParseInt(f, 10, 64)
		q, err2 := strconv.ParseInt(v, 10, 64)
		if err := cmp.Or(err1, err2); err != nil {
			return reservation.AvailabilityResult{}, fmt.Errorf("redisstore: availability of item %d: field %q = %q: %w", p.Item, f, v, err)
		}
		res.Locations = append(res.Locations, reservation.LocationAvailability{Location: loc, Unheld: max(q, 0)})
	}
	slices.SortFunc(res.Locations, func(a, b reservation.LocationAvailability) int { return cmp.Compare(a.Location, b.Location) })
	return res, nil
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// at returns reply[i], or nil past its end.
func at(reply []any, i int) any {
	if i < len(reply) {
		return reply[i]
	}
	return nil
}

// toInt reads an integer reply or a decimal bulk string.
func toInt(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, fmt.Errorf("not an integer: %v (%T)", v, v)
}

func toString(v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	return "", fmt.Errorf("not a string: %v (%T)", v, v)
}
