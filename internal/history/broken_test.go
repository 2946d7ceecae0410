package history_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/internal/history"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
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
	var authority reservation.Store = my
	if wrap != nil {
		authority = wrap(my)
	}
	f, err := dualwrite.New(dualwrite.Config{Pod: "pod-h", Redis: rd, MySQL: authority, Modes: rollout.NewStatic(rollout.ModeMySQL),
		ShadowTimeout: 2 * time.Second, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = f.Close(ctx)
	})
	return f
}

// checkout runs carts of one unit of item 1 from several callers: each
// reserves, then claims (repeating the claim once, as a checkout retrying
// a timed-out call would) or, every third cart, releases.
func checkout(t *testing.T, f *dualwrite.Facade, stock int64, carts int) *history.Recorder {
	t.Helper()
	ctx := context.Background()
	if _, err := f.Adjust(ctx, &reservation.AdjustParams{Shop: shop, Item: 1, Location: 1, Available: &stock}); err != nil {
		t.Fatal(err)
	}
	_ = f.Close(ctx)
	rec := history.New()
	rec.Stock(history.Key{Shop: shop, Item: 1, Location: 1}, stock)
	var wg sync.WaitGroup
	for w := range 4 {
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
	return rec
}

// The checker passes the real stores' histories and fails the broken ones,
// writing each failing history as porcupine's HTML and as JSON.
func TestBrokenStoresFailTheCheck(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		wrap  func(*mysqlstore.Store) reservation.Store
		stock int64
		want  porcupine.CheckResult
	}{
		{"real stores", nil, 12, porcupine.Ok},
		{"claim skips the claims row", func(my *mysqlstore.Store) reservation.Store { return skipClaimGuard{my, my} }, 100, porcupine.Illegal},
		{"release gives nothing back", func(my *mysqlstore.Store) reservation.Store { return phantomRelease{my} }, 12, porcupine.Illegal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := checkout(t, pod(t, tc.wrap), tc.stock, 8)
			dir := history.ArtifactDir(t)
			res, err := history.Check(rec.Entries(), history.CheckOptions{Dir: dir, Name: "history"})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s", res)
			if res.Outcome != tc.want {
				t.Fatalf("check: %s, want %s", res.Outcome, tc.want)
			}
			if tc.want == porcupine.Illegal {
				for _, p := range []string{res.HTML, res.JSON} {
					if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
						t.Errorf("artifact %s: %v", p, err)
					}
				}
			}
		})
	}
}
