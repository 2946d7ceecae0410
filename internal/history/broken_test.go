package history_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/internal/history"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

const shop = 3

// skipClaimGuard is a deliberately broken MySQL store: it skips the claims
// row's guard. A claim the real store answers as a replay (its claims row
// says the token was claimed already) is deducted from the ledger again
// and answered as a fresh claim: the bug the claims row exists to prevent.
type skipClaimGuard struct {
	reservation.Store
	ledger reservation.Ledger
}

func (s skipClaimGuard) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, p)
	if err != nil || !res.Replayed || p.As != reservation.AsAuthority {
		return res, err
	}
	for _, a := range res.Allocations {
		if _, err := s.ledger.AdjustStock(ctx, &reservation.AdjustParams{Shop: p.Shop, Item: a.Item, Location: a.Location, Delta: -a.Quantity}); err != nil {
			return reservation.ClaimResult{}, err
		}
	}
	res.Replayed = false
	return res, nil
}

// phantomRelease is a deliberately broken store whose Release answers
// "released" without giving the units back: they leak, and buyers are
// refused while the ledger has stock nobody holds.
type phantomRelease struct{ reservation.Store }

func (s phantomRelease) Release(ctx context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	h, err := s.Store.Get(ctx, &reservation.GetParams{Shop: p.Shop, Token: p.Token})
	if err != nil {
		return reservation.ReleaseResult{}, err
	}
	return reservation.ReleaseResult{Released: true, Allocations: h.Allocations}, nil
}

// The broken stores below each forget one kind of tombstone, as the
// stores did before tombstones existed, and answer what such a store
// answers. Each acts on the deciding calls only (As: authority).

// forgetTombstones is a deliberately broken store that forgets the
// tombstone of a refused token (refused) or of a released one (released):
// a later reserve of the token is decided again as if it were new (here:
// under a token of its own, which the token's later calls follow), so a
// delayed or repeated first attempt holds units after the caller was told
// no, or after it gave them back.
type forgetTombstones struct {
	reservation.Store
	refused, released bool

	mu     sync.Mutex
	forgot map[string]bool   // the tokens whose tombstone is forgotten
	alias  map[string]string // the token each is decided under since
}

// token is the token a call on token is are decided under: its alias once a
// reserve decided it again. Only a reserve makes the alias, so a claim or
// a release of the forgotten token before that still meets its tombstone.
func (s *forgetTombstones) token(token string, reserve bool) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if reserve && s.forgot[token] && s.alias[token] == "" {
		s.alias[token] = token + "-again"
	}
	if a := s.alias[token]; a != "" {
		return a
	}
	return token
}

func (s *forgetTombstones) forget(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.alias[token] == "" {
		s.forgot[token] = true
	}
}

func (s *forgetTombstones) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	if p.As != reservation.AsAuthority {
		return s.Store.Reserve(ctx, p)
	}
	q := *p
	q.Token = s.token(p.Token, true)
	res, err := s.Store.Reserve(ctx, &q)
	if err == nil && s.refused && res.Status == reservation.StatusInsufficient {
		s.forget(p.Token)
	}
	return res, err
}

func (s *forgetTombstones) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	if p.As != reservation.AsAuthority {
		return s.Store.Claim(ctx, p)
	}
	q := *p
	q.Token = s.token(p.Token, false)
	return s.Store.Claim(ctx, &q)
}

func (s *forgetTombstones) Release(ctx context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	if p.As != reservation.AsAuthority {
		return s.Store.Release(ctx, p)
	}
	q := *p
	q.Token = s.token(p.Token, false)
	res, err := s.Store.Release(ctx, &q)
	if err == nil && s.released && res.Released {
		s.forget(p.Token)
	}
	return res, err
}

// claimReleased is a deliberately broken store that serves a claim it
// refuses as released (or, without tombstones, as not found) from the
// hold it saw reserved: the earlier facade's "not found here, so ask the
// other store". A claim succeeds after an acknowledged release.
type claimReleased struct {
	reservation.Store

	mu    sync.Mutex
	holds map[string][]reservation.Allocation
}

func (s *claimReleased) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	res, err := s.Store.Reserve(ctx, p)
	if err == nil && res.Status == reservation.StatusReserved && p.As == reservation.AsAuthority {
		s.mu.Lock()
		s.holds[p.Token] = res.Allocations
		s.mu.Unlock()
	}
	return res, err
}

func (s *claimReleased) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, p)
	if p.As != reservation.AsAuthority || !errors.Is(err, reservation.ErrReleased) && !errors.Is(err, reservation.ErrNotFound) {
		return res, err
	}
	s.mu.Lock()
	hold, ok := s.holds[p.Token]
	s.mu.Unlock()
	if !ok {
		return res, err
	}
	return reservation.ClaimResult{Outcome: reservation.OutcomeClaimed, Allocations: hold}, nil
}

// lostTombstone is a deliberately broken store whose claim of a token
// that held answers not found once the hold is gone (released or
// expired), as the stores did before tombstones: a checkout told "not
// found" cannot tell a lost hold from one it never had.
type lostTombstone struct{ reservation.Store }

func (s lostTombstone) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, p)
	if p.As == reservation.AsAuthority && (errors.Is(err, reservation.ErrReleased) || errors.Is(err, reservation.ErrExpired)) {
		return reservation.ClaimResult{}, fmt.Errorf("lost tombstone: %w", reservation.ErrNotFound)
	}
	return res, err
}

// releaseClaimed is a deliberately broken store whose release of a claimed
// token answers that it released the claim's units, as a store that lost
// the claim's tombstone would.
type releaseClaimed struct {
	reservation.Store

	mu     sync.Mutex
	claims map[string][]reservation.Allocation
}

func (s *releaseClaimed) Claim(ctx context.Context, p *reservation.ClaimParams) (reservation.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, p)
	if err == nil && p.As == reservation.AsAuthority {
		s.mu.Lock()
		s.claims[p.Token] = res.Allocations
		s.mu.Unlock()
	}
	return res, err
}

func (s *releaseClaimed) Release(ctx context.Context, p *reservation.ReleaseParams) (reservation.ReleaseResult, error) {
	res, err := s.Store.Release(ctx, p)
	if p.As != reservation.AsAuthority || !errors.Is(err, reservation.ErrAlreadyClaimed) {
		return res, err
	}
	s.mu.Lock()
	claim, ok := s.claims[p.Token]
	s.mu.Unlock()
	if !ok {
		return res, err
	}
	return reservation.ReleaseResult{Released: true, Allocations: claim}, nil
}

// pod is a facade in mysql mode over fresh stores, its MySQL store
// replaced by wrap's version.
func pod(t *testing.T, wrap func(my *mysqlstore.Store) reservation.Store) *dualwrite.Facade {
	t.Helper()
	db, r := testdb.New(t), testredis.New(t)
	my, err := mysqlstore.New(mysqlstore.Config{DB: db.DB, PoolCap: 50})
	if err != nil {
		t.Fatal(err)
	}
	rd, err := redisstore.New(redisstore.Config{Client: r.Client, Prefix: r.Prefix, Ledger: my, Source: my, Limits: reservation.Limits{MaxQuantity: 50}})
	if err != nil {
		t.Fatal(err)
	}
	var decider reservation.Store = my
	if wrap != nil {
		decider = wrap(my)
	}
	// Redis follows MySQL through the mirror, as in production.
	mr, err := mirror.New(mirror.Config{Pod: "pod-h", MySQL: my, Redis: rd, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	f, err := dualwrite.New(dualwrite.Config{Pod: "pod-h", Redis: rd, MySQL: decider, Modes: authority.NewStatic(authority.ModeMySQL),
		Mirror: mr, ShadowTimeout: 2 * time.Second, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	relay, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = mr.Run(relay)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = f.Close(ctx)
		stop()
		<-done
	})
	return f
}

// facade is what the workloads drive: the pod's facade.
type facade interface {
	history.Reservations
	Adjust(ctx context.Context, p *reservation.AdjustParams) (reservation.AdjustResult, error)
	// Close waits for the calls the facade still makes in the background.
	Close(ctx context.Context) error
}

var _ facade = (*dualwrite.Facade)(nil)

// stock sets an item's stock at location 1 in the stores and the record.
func stock(t *testing.T, f facade, rec *history.Recorder, item, n int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := f.Adjust(ctx, &reservation.AdjustParams{Shop: shop, Item: item, Location: 1, Available: &n}); err != nil {
		t.Fatal(err)
	}
	_ = f.Close(ctx)
	rec.Stock(history.Key{Shop: shop, Item: item, Location: 1}, n)
}

// workers is how many callers each workload runs at once.
const workers = 4

// checkout runs carts of one unit of item 1 from several callers: each
// reserves, then claims (repeating the claim once, as a checkout retrying
// a timed-out call would) or, every third cart, releases.
func checkout(t *testing.T, f facade, rec *history.Recorder, stockN int64, carts int) {
	t.Helper()
	ctx := context.Background()
	stock(t, f, rec, 1, stockN)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			c := rec.Client(f)
			for i := range carts {
				token := fmt.Sprintf("w%d-%d", w, i)
				res, err := c.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: token, TTL: time.Minute,
					Lines: []reservation.Line{{Item: 1, Quantity: 1, Locations: []int64{1}}}})
				if err != nil || res.Status != reservation.StatusReserved {
					continue
				}
				if i%3 == 2 {
					_, _ = c.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: token})
					continue
				}
				for range 2 {
					_, _ = c.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token})
				}
			}
		})
	}
	wg.Wait()
}

// Items of the tombstones workload: worker w's own, and its hold that
// expires.
func tombstoneItem(w int) int64 { return 10 + int64(w) }
func expiryItem(w int) int64    { return 20 + int64(w) }

// tombstones asks every kind of tombstone every question, from several
// callers, each on an item of its own so that its answers are certain.
// Each round, on the caller's item:
//   - "a" holds every free unit, "r" is refused, a is released; then r is
//     reserved again (its refusal, replayed), a is claimed and reserved
//     (released) and released (nothing);
//   - "b" is claimed, claimed again (replayed), released and reserved
//     (already claimed);
//   - r is claimed (not found) and released (nothing).
//
// And once, on a second item: "e" holds it with the shortest TTL, and once
// it expired, is claimed, reserved (expired) and released (nothing).
func tombstones(t *testing.T, f facade, rec *history.Recorder, rounds int) {
	t.Helper()
	ctx := context.Background()
	const ttl = time.Second // reservation.DefaultLimits' MinTTL
	for w := range workers {
		stock(t, f, rec, tombstoneItem(w), int64(rounds)+1)
		stock(t, f, rec, expiryItem(w), 1)
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			c := rec.Client(f)
			line := func(item, qty int64) []reservation.Line {
				return []reservation.Line{{Item: item, Quantity: qty, Locations: []int64{1}}}
			}
			reserve := func(token string, lines []reservation.Line, ttl time.Duration) {
				_, _ = c.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: token, TTL: ttl, Lines: lines})
			}
			claim := func(token string) { _, _ = c.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token}) }
			release := func(token string) { _, _ = c.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: token}) }

			e := fmt.Sprintf("e%d", w)
			expires := time.Now().Add(ttl)
			reserve(e, line(expiryItem(w), 1), ttl)
			for i := range rounds {
				a, r, b := fmt.Sprintf("a%d-%d", w, i), fmt.Sprintf("r%d-%d", w, i), fmt.Sprintf("b%d-%d", w, i)
				free := int64(rounds - i + 1) // each round claims one unit
				reserve(a, line(tombstoneItem(w), free), time.Minute)
				reserve(r, line(tombstoneItem(w), 1), time.Minute)
				release(a)
				reserve(r, line(tombstoneItem(w), 1), time.Minute)
				claim(a)
				reserve(a, line(tombstoneItem(w), free), time.Minute)
				release(a)

				reserve(b, line(tombstoneItem(w), 1), time.Minute)
				claim(b)
				claim(b)
				release(b)
				reserve(b, line(tombstoneItem(w), 1), time.Minute)

				claim(r)
				release(r)
			}
			// Waiting for the hold's TTL to pass on the stores' clocks
			// (which started it after expires was taken) is the point
			// here, not a synchronisation.
			time.Sleep(time.Until(expires.Add(500 * time.Millisecond)))
			claim(e)
			reserve(e, line(expiryItem(w), 1), ttl)
			release(e)
		})
	}
	wg.Wait()
}

// The checker passes the real stores' histories and fails the broken ones,
// writing each failing history as porcupine's HTML and as JSON. Both
// workloads run in every case; a broken store must fail the check on the
// items of the workload that exposes its bug (checkout: item 1;
// tombstones: the others).
func TestBrokenStoresFailTheCheck(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		wrap  func(*mysqlstore.Store) reservation.Store
		stock int64
		want  porcupine.CheckResult
		// tombstones: the bug shows on the tombstones workload's items.
		tombstones bool
	}{
		{"real stores", nil, 12, porcupine.Ok, false},
		{"claim skips the claims row", func(my *mysqlstore.Store) reservation.Store { return skipClaimGuard{my, my} }, 100, porcupine.Illegal, false},
		{"release gives nothing back", func(my *mysqlstore.Store) reservation.Store { return phantomRelease{my} }, 12, porcupine.Illegal, false},
		{"claim succeeds after an acknowledged release", func(my *mysqlstore.Store) reservation.Store {
			return &claimReleased{Store: my, holds: map[string][]reservation.Allocation{}}
		}, 12, porcupine.Illegal, true},
		{"late claim answers not found", func(my *mysqlstore.Store) reservation.Store { return lostTombstone{my} }, 12, porcupine.Illegal, true},
		{"refused token reserved", func(my *mysqlstore.Store) reservation.Store {
			return &forgetTombstones{Store: my, refused: true, forgot: map[string]bool{}, alias: map[string]string{}}
		}, 12, porcupine.Illegal, true},
		{"released token reserved again", func(my *mysqlstore.Store) reservation.Store {
			return &forgetTombstones{Store: my, released: true, forgot: map[string]bool{}, alias: map[string]string{}}
		}, 12, porcupine.Illegal, true},
		{"release after claim answers released", func(my *mysqlstore.Store) reservation.Store {
			return &releaseClaimed{Store: my, claims: map[string][]reservation.Allocation{}}
		}, 12, porcupine.Illegal, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := pod(t, tc.wrap)
			rec := history.New()
			checkout(t, f, rec, tc.stock, 8)
			tombstones(t, f, rec, 3)
			dir := history.ArtifactDir(t)
			res, err := history.Check(rec.Entries(), history.CheckOptions{Dir: dir, Name: "history"})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s", res)
			if res.Outcome != tc.want {
				t.Fatalf("check: %s, want %s", res.Outcome, tc.want)
			}
			if tc.want != porcupine.Illegal {
				return
			}
			for _, p := range []string{res.HTML, res.JSON} {
				if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
					t.Errorf("artifact %s: %v", p, err)
				}
			}
			if !slices.ContainsFunc(res.Failed, func(p history.Part) bool { return (p.Item != 1) == tc.tombstones }) {
				t.Errorf("failed on %v, none of them an item of the workload that shows the bug", res.Failed)
			}
		})
	}
}
