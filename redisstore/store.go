package redisstore

import (
	"cmp"
	"context"
	"errors"
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

// changeTTL is how long the marker of an applied change-feed adjust lives:
// far longer than the relay takes to deliver a change, or than a
// merchant's retry of the same adjust (which the ledger answers with the
// same change id).
const changeTTL = 24 * time.Hour

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
	return s.runAs(ctx, name, false, script, keys, args...)
}

// runRO runs a script read-only (EVALSHA_RO): the server refuses any
// write it attempts. Shadow calls and reads go this way.
func (s *Store) runRO(ctx context.Context, name string, script *redis.Script, keys []string, args ...any) ([]any, error) {
	return s.runAs(ctx, name, true, script, keys, args...)
}

func (s *Store) runAs(ctx context.Context, name string, readOnly bool, script *redis.Script, keys []string, args ...any) (_ []any, err error) {
	ctx, span := startSpan(ctx, name)
	defer func() { endSpan(span, err) }()
	start := time.Now()
	var v any
	if readOnly {
		v, err = script.RunRO(ctx, s.client, keys, args...).Result()
	} else {
		v, err = script.Run(ctx, s.client, keys, args...).Result()
	}
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

// mode is the script mode of a role.
func mode(as reservation.Role) string {
	if as == reservation.AsShadow {
		return modeShadow
	}
	return modeDecide
}

// validRole refuses a role that is neither authority nor shadow.
func validRole(as reservation.Role) error {
	if as != reservation.AsAuthority && as != reservation.AsShadow {
		return &reservation.ValidationError{Field: "as", Reason: fmt.Sprintf("unknown role %d", as)}
	}
	return nil
}

// notDecider turns a script's {"fence", fence} reply into the refusal.
func (s *Store) notDecider(op string, shop int64, fence any) error {
	str, _ := fence.(string)
	f, err := reservation.ParseFence(str)
	if err != nil {
		return fmt.Errorf("redisstore: %s shop %d: fence: %w", op, shop, err)
	}
	s.metrics.notDecider.WithLabelValues(op).Inc()
	return &reservation.NotDeciderError{Shop: shop, Store: reservation.AuthorityRedis, Fence: f}
}

// tombstone reads a script's {"tomb", tombstone} reply and counts the hit:
// the call is answered from the tombstone.
func (s *Store) tombstone(op, token string, v any) (reservation.Tombstone, error) {
	str, err := toString(v)
	if err != nil {
		return reservation.Tombstone{}, fmt.Errorf("redisstore: %s: tombstone: %w", op, err)
	}
	t, err := decodeTomb(token, str)
	if err != nil {
		return reservation.Tombstone{}, err
	}
	s.metrics.tombstoneHits.WithLabelValues(op, string(t.State)).Inc()
	return t, nil
}

// tombErr is the answer a tombstone gives a call that needs a hold:
// claimed ErrAlreadyClaimed, released ErrReleased, expired ErrExpired,
// refused ErrNotFound (the token never held anything).
func tombErr(op string, shop int64, token string, state reservation.State) error {
	return fmt.Errorf("redisstore: %s shop %d token %q (%s): %w", op, shop, token, state, state.TombstoneErr())
}

// Reserve holds every line of a cart or nothing, in one script: a line is
// served whole by the first of its locations, in the caller's order, whose
// quantity covers it.
//
// As authority the script first checks the shop's fence (another decider:
// *reservation.NotDeciderError, nothing written), then the token's
// tombstone: claimed answers ErrAlreadyClaimed, released ErrReleased,
// expired ErrExpired, refused the first refusal again (Replayed). A token
// that holds a hold answers it (Replayed), or ErrTokenConflict for other
// lines; this is also what makes a retry after a lost reply safe. A cart
// that cannot be served leaves a refused tombstone, so a delayed first
// attempt of it creates nothing later.
//
// As shadow it answers what Redis would decide now, by the same script in
// read-only mode, without the fence check and without writing anything.
func (s *Store) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	if err := s.cfg.Limits.ValidateReserve(p); err != nil {
		return reservation.ReserveResult{}, err
	}
	if err := validRole(p.As); err != nil {
		return reservation.ReserveResult{}, err
	}
	authority := p.Authority
	if authority == "" {
		authority = reservation.AuthorityRedis
	}
	keys, args := s.reserveArgs(p, authority)
	var reply []any
	var err error
	if p.As == reservation.AsShadow {
		reply, err = s.runRO(ctx, "reserve_shadow", scriptReserve, keys, args...)
	} else {
		reply, err = s.run(ctx, "reserve", scriptReserve, keys, args...)
	}
	if err != nil {
		return reservation.ReserveResult{}, err
	}
	if reply[0] == "existing" {
		// A repeat of a reserve whose hold a legacy claim marked: the
		// claim may have been answered (see Claim), and then so is this.
		h, err := parseHold(at(reply, 1))
		if err != nil {
			return reservation.ReserveResult{}, err
		}
		if claimed, err := s.finishClaimed(ctx, "reserve", p.Shop, p.Token, h.claimingMS != 0, p.As == reservation.AsAuthority); err != nil || claimed {
			return reservation.ReserveResult{}, cmp.Or(err, tombErr("reserve", p.Shop, p.Token, reservation.StateClaimed))
		}
	}
	return s.reserveAnswer(p, authority, reply)
}

// reserveArgs are the keys and arguments of scriptReserve for p.
func (s *Store) reserveArgs(p *reservation.ReserveParams, authority reservation.Authority) ([]string, []any) {
	check := "1"
	if s.skipTokenCheck {
		check = "0"
	}
	k := s.shopKeys(p.Shop)
	args := []any{k.base, p.Token, p.TTL.Milliseconds(), string(authority), check, mode(p.As), s.cfg.TombstoneTTL.Milliseconds(), len(p.Lines)}
	for _, ln := range p.Lines {
		args = append(args, ln.Item, ln.Quantity, len(ln.Locations))
		for _, loc := range ln.Locations {
			args = append(args, loc)
		}
	}
	return []string{k.expiry(), k.hold(p.Token), k.tomb(p.Token), k.fence()}, args
}

// reserveAnswer reads scriptReserve's reply to p.
func (s *Store) reserveAnswer(p *reservation.ReserveParams, authority reservation.Authority, reply []any) (reservation.ReserveResult, error) {
	switch reply[0] {
	case "fence":
		return reservation.ReserveResult{}, s.notDecider("reserve", p.Shop, at(reply, 1))
	case "tomb":
		t, err := s.tombstone("reserve", p.Token, at(reply, 1))
		if err != nil {
			return reservation.ReserveResult{}, err
		}
		if t.State == reservation.StateRefused {
			return reservation.ReserveResult{Status: reservation.StatusInsufficient, Short: sortedShort(t.Short), Replayed: true}, nil
		}
		return reservation.ReserveResult{}, tombErr("reserve", p.Shop, p.Token, t.State)
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
		res.Short = sortedShort(res.Short)
		if p.As == reservation.AsAuthority {
			s.metrics.tombstonesWritten.WithLabelValues(string(reservation.StateRefused)).Inc()
		}
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

func sortedShort(ss []reservation.ShortLine) []reservation.ShortLine {
	slices.SortFunc(ss, func(a, b reservation.ShortLine) int { return cmp.Compare(a.Item, b.Item) })
	return ss
}

// resolveAttempts bounds how often Release asks the ledger about a
// claiming hold in one call: each answer is acted on by a script that
// re-checks the stamp, and a claim attempt that stamps the hold again in
// between starts a new grace.
const resolveAttempts = 3

// Release gives a hold's units back and leaves a released tombstone.
// Releasing nothing (already released, expired, refused, or never held)
// is not an error (Released false); releasing a claimed token is
// ErrAlreadyClaimed.
//
// As authority the script checks the fence first
// (*reservation.NotDeciderError, nothing changed). A hold whose legacy
// claim started less than Config.ClaimGrace ago answers
// reservation.ErrClaimInProgress and stays: the ledger may be deducting
// it. Older, the claim is resolved first by asking the ledger
// (Config.Source.Claims): claimed, the hold is settled as the claim's own
// cleanup would have done and the answer is ErrAlreadyClaimed; not
// claimed, the hold is released. Without a Source a claiming hold cannot
// be resolved and Release keeps answering ErrClaimInProgress (the reaper
// expires it).
//
// As shadow it writes nothing: Released true with the allocations when
// Redis holds the token, ErrAlreadyClaimed for a claimed tombstone, else
// Released false.
func (s *Store) Release(ctx context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	if err := s.cfg.Limits.ValidateRelease(p); err != nil {
		return reservation.ReleaseResult{}, err
	}
	if err := validRole(p.As); err != nil {
		return reservation.ReleaseResult{}, err
	}
	k := s.shopKeys(p.Shop)
	keys := []string{k.hold(p.Token), k.tomb(p.Token), k.fence()}
	resolved := ""
	for range resolveAttempts {
		args := []any{k.base, p.Token, mode(p.As), s.cfg.TombstoneTTL.Milliseconds(), s.cfg.ClaimGrace.Milliseconds(), resolved}
		var reply []any
		var err error
		if p.As == reservation.AsShadow {
			reply, err = s.runRO(ctx, "release_shadow", scriptRelease, keys, args...)
		} else {
			reply, err = s.run(ctx, "release", scriptRelease, keys, args...)
		}
		if err != nil {
			return reservation.ReleaseResult{}, err
		}
		switch reply[0] {
		case "fence":
			return reservation.ReleaseResult{}, s.notDecider("release", p.Shop, at(reply, 1))
		case "none":
			return reservation.ReleaseResult{}, nil
		case "tomb":
			t, err := s.tombstone("release", p.Token, at(reply, 1))
			if err != nil {
				return reservation.ReleaseResult{}, err
			}
			if t.State == reservation.StateClaimed {
				return reservation.ReleaseResult{}, tombErr("release", p.Shop, p.Token, t.State)
			}
			return reservation.ReleaseResult{}, nil
		case "released":
			h, err := parseHold(at(reply, 1))
			if err != nil {
				return reservation.ReleaseResult{}, err
			}
			if p.As == reservation.AsAuthority {
				s.metrics.tombstonesWritten.WithLabelValues(string(reservation.StateReleased)).Inc()
			} else if claimed, err := s.finishClaimed(ctx, "release_shadow", p.Shop, p.Token, h.claimingMS != 0, false); err != nil || claimed {
				// What the claimed tombstone Redis is about to follow
				// will answer (see Claim).
				return reservation.ReleaseResult{}, cmp.Or(err, tombErr("release", p.Shop, p.Token, reservation.StateClaimed))
			}
			return reservation.ReleaseResult{Released: true, Allocations: h.allocs}, nil
		case "in_progress":
			// The claim may have been answered already (its cleanup is
			// off the caller's path): the ledger says.
			// A ledger that cannot be read leaves the answer it always
			// was: the claim may be under way, retry.
			if claimed, err := s.finishClaimed(ctx, "release", p.Shop, p.Token, true, p.As == reservation.AsAuthority); err == nil && claimed {
				return reservation.ReleaseResult{}, tombErr("release", p.Shop, p.Token, reservation.StateClaimed)
			}
			return reservation.ReleaseResult{}, s.claimInProgress(p)
		case "resolve":
			stamp, err := toString(at(reply, 1))
			if err != nil {
				return reservation.ReleaseResult{}, fmt.Errorf("redisstore: release: claiming stamp: %w", err)
			}
			if s.cfg.Source == nil {
				return reservation.ReleaseResult{}, s.claimInProgress(p)
			}
			deducted, claimed, err := s.ledgerClaim(ctx, p.Shop, p.Token)
			if err != nil {
				return reservation.ReleaseResult{}, fmt.Errorf("redisstore: release shop %d token %q: a claim started at %s: %w", p.Shop, p.Token, stamp, err)
			}
			if claimed {
				if _, err := s.settle(ctx, "release_settle", p.Shop, p.Token, deducted); err != nil {
					return reservation.ReleaseResult{}, err
				}
				return reservation.ReleaseResult{}, tombErr("release", p.Shop, p.Token, reservation.StateClaimed)
			}
			resolved = stamp // the ledger has no claim: release, if nobody stamped it again
			continue
		}
		return reservation.ReleaseResult{}, fmt.Errorf("redisstore: release: unexpected reply %v", reply)
	}
	return reservation.ReleaseResult{}, s.claimInProgress(p)
}

func (s *Store) claimInProgress(p *reservation.ReleaseParams) error {
	s.metrics.claimInProgress.Inc()
	return fmt.Errorf("redisstore: release shop %d token %q: %w", p.Shop, p.Token, reservation.ErrClaimInProgress)
}

// ledgerClaim asks the ledger (Config.Source, which must be set) whether
// it has recorded a claim of the token, and by what allocations.
func (s *Store) ledgerClaim(ctx context.Context, shop int64, token string) ([]reservation.Allocation, bool, error) {
	claims, err := s.cfg.Source.Claims(ctx, shop, []string{token})
	if err != nil {
		return nil, false, fmt.Errorf("look up the ledger's claim: %w", err)
	}
	deducted, ok := claims[token]
	return deducted, ok, nil
}

// Get returns the hold for a token, expired or not (an expired hold keeps
// its units until the reaper returns them), or the answer its tombstone
// gives: ErrAlreadyClaimed, ErrReleased, ErrExpired, or ErrNotFound for a
// refused token. No hold and no tombstone: ErrNotFound. With p.AsDecider
// the script reads the shop's fence first, atomically with the hold: a
// shop Redis does not decide answers *reservation.NotDeciderError.
func (s *Store) Get(ctx context.Context, p *reservation.GetParams) (reservation.Hold, error) {
	if err := s.cfg.Limits.ValidateGet(p); err != nil {
		return reservation.Hold{}, err
	}
	k := s.shopKeys(p.Shop)
	reply, err := s.runRO(ctx, "get", scriptGet, []string{k.hold(p.Token), k.tomb(p.Token), k.fence()}, readMode(p.AsDecider))
	if err != nil {
		return reservation.Hold{}, err
	}
	switch reply[0] {
	case "fence":
		return reservation.Hold{}, s.notDecider("get", p.Shop, at(reply, 1))
	case "hold":
		h, err := parseHold(at(reply, 1))
		if err != nil {
			return reservation.Hold{}, err
		}
		if claimed, err := s.finishClaimed(ctx, "get", p.Shop, p.Token, h.claimingMS != 0, p.AsDecider); err != nil || claimed {
			return reservation.Hold{}, cmp.Or(err, tombErr("get", p.Shop, p.Token, reservation.StateClaimed))
		}
		return h.hold(p.Shop, p.Token), nil
	case "tomb":
		t, err := s.tombstone("get", p.Token, at(reply, 1))
		if err != nil {
			return reservation.Hold{}, err
		}
		return reservation.Hold{}, tombErr("get", p.Shop, p.Token, t.State)
	case "none":
		return reservation.Hold{}, fmt.Errorf("redisstore: get shop %d token %q: %w", p.Shop, p.Token, reservation.ErrNotFound)
	}
	return reservation.Hold{}, fmt.Errorf("redisstore: get: unexpected reply %v", reply)
}

// readMode is the script mode of a read: "decide" when it must come from
// the shop's decider (the fence is checked), "shadow" otherwise.
func readMode(asDecider bool) string {
	if asDecider {
		return modeDecide
	}
	return modeShadow
}

// Availability reads an item's quantity hash: every location the store
// knows, ascending, a negative quantity (ledger lowered below what is
// held) reported as 0. With p.AsDecider the shop's fence is read in the
// same script: a shop Redis does not decide answers
// *reservation.NotDeciderError.
func (s *Store) Availability(ctx context.Context, p *reservation.AvailabilityParams) (reservation.AvailabilityResult, error) {
	if err := s.cfg.Limits.ValidateAvailability(p); err != nil {
		return reservation.AvailabilityResult{}, err
	}
	k := s.shopKeys(p.Shop)
	reply, err := s.runRO(ctx, "availability", scriptAvailability, []string{k.qty(p.Item), k.fence()}, readMode(p.AsDecider))
	if err != nil {
		return reservation.AvailabilityResult{}, err
	}
	if reply[0] == "fence" {
		return reservation.AvailabilityResult{}, s.notDecider("availability", p.Shop, at(reply, 1))
	}
	flat, ok := at(reply, 1).([]any)
	if reply[0] != "qty" || !ok || len(flat)%2 != 0 {
		return reservation.AvailabilityResult{}, fmt.Errorf("redisstore: availability: unexpected reply %v", reply)
	}
	res := reservation.AvailabilityResult{Item: p.Item, Locations: make([]reservation.LocationAvailability, 0, len(flat)/2)}
	for i := 0; i < len(flat); i += 2 {
		f, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
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

// isNotDecider reports whether err is a refusal by a store that does not
// decide the shop.
func isNotDecider(err error) bool { return errors.Is(err, reservation.ErrNotDecider) }
