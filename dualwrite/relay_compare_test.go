package dualwrite_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// reserveCounter is a store that counts the reserves the facade sends it.
type reserveCounter struct {
	reservation.Store
	n atomic.Int64
}

func (c *reserveCounter) Reserve(ctx context.Context, p *reservation.ReserveParams) (reservation.ReserveResult, error) {
	c.n.Add(1)
	return c.Store.Reserve(ctx, p)
}

// In mysql mode with a relay that evaluates carts, the facade never calls
// Redis for a reserve: the relay asks Redis about each cart just before
// applying MySQL's decision, against the state MySQL decided from, and the
// comparer gets the pair (Relayed). Redis's answer is its own: where its
// quantity disagrees with the ledger, the observation shows it.
func TestRelayComparesReservesInMySQLMode(t *testing.T) {
	t.Parallel()
	rd, ref := &reserveCounter{}, &recorderRef{}
	b := setup(t, options{mode: authority.ModeMySQL,
		wrapRedis: func(s reservation.Store) reservation.Store { rd.Store = s; return rd },
		mirror:    func(c *mirror.Config) { c.Evaluated = compare.ObserveRelayed(pod, ref) }})
	ref.rec.Store(b.rec)
	if !b.m.Evaluates() {
		t.Fatal("a running mirror with Evaluated set does not evaluate")
	}
	b.stock(t, 1, 1, 1)
	b.stock(t, 2, 1, 5)
	before := rd.n.Load()

	if r := b.mustReserve(t, "a", line(1, 1)); r.Status != reservation.StatusReserved {
		t.Fatalf("a: %+v", r)
	}
	if r, err := b.reserve(context.Background(), "b", time.Minute, line(1, 1)); err != nil || r.Status != reservation.StatusInsufficient {
		t.Fatalf("b: %+v %v, want insufficient (stock 1)", r, err)
	}
	// Redis drifts to 0 behind the mirror's back, far from a stock-out
	// race (4 asked, none there): MySQL holds item 2, Redis would not.
	key := b.r.Prefix + "{shop:" + strconv.FormatInt(shop, 10) + "}:qty:2"
	if err := b.r.Client.HSet(context.Background(), key, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if r := b.mustReserve(t, "c", line(2, 4)); r.Status != reservation.StatusReserved {
		t.Fatalf("c: %+v", r)
	}
	waitFor(t, "three relayed observations", func() (bool, string) {
		n := b.rec.count()
		return n >= 3, strconv.Itoa(n)
	})
	if n := rd.n.Load() - before; n != 0 {
		t.Errorf("the facade sent Redis %d reserves in mysql mode; the relay asks it", n)
	}
	byToken := b.rec.byToken(compare.OpReserve)
	for _, tc := range []struct {
		token         string
		mysql, redis  string
		class         compare.Class
		redisLocation int64
	}{
		{"a", compare.ResultReserved, compare.ResultReserved, compare.ClassMatch, 1},
		// b's cart was asked about after a's hold was applied: Redis, like
		// MySQL, had nothing left.
		{"b", compare.ResultInsufficient, compare.ResultInsufficient, compare.ClassMatch, 0},
		{"c", compare.ResultReserved, compare.ResultInsufficient, compare.ClassOutcomeMismatch, 0},
	} {
		o, ok := byToken[tc.token]
		if !ok {
			t.Errorf("%s: not observed", tc.token)
			continue
		}
		if !o.Relayed || o.Mode != string(authority.ModeMySQL) || o.Op != compare.OpReserve || o.Pod != pod {
			t.Errorf("%s: %+v, want a relayed reserve of pod %s in mode mysql", tc.token, o, pod)
		}
		if o.Authority.Store != reservation.AuthorityMySQL || o.Shadow.Store != reservation.AuthorityRedis {
			t.Errorf("%s: stores %s / %s, want mysql / redis", tc.token, o.Authority.Store, o.Shadow.Store)
		}
		if o.Authority.Result != tc.mysql || o.Shadow.Result != tc.redis {
			t.Errorf("%s: MySQL %q, Redis %q; want %q, %q", tc.token, o.Authority.Result, o.Shadow.Result, tc.mysql, tc.redis)
		}
		if tc.redisLocation != 0 && (len(o.Shadow.Allocations) != 1 || o.Shadow.Allocations[0].Location != tc.redisLocation) {
			t.Errorf("%s: Redis's allocations %v", tc.token, o.Shadow.Allocations)
		}
		if c := compare.Classify(o, compare.DefaultRules); c != tc.class {
			t.Errorf("%s: class %s, want %s", tc.token, c, tc.class)
		}
	}
	if n := b.counter(t, "reservoir_mirror_carts_evaluated_total", nil); n != 3 {
		t.Errorf("carts evaluated: %v, want 3", n)
	}
}

// Without a relay that evaluates (the feed disabled, or no Evaluated),
// the facade asks Redis itself, beside MySQL's decision, as before.
func TestFacadeComparesReservesWithoutAnEvaluatingRelay(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]func(*mirror.Config){
		"no callback": nil,
		"feed off": func(c *mirror.Config) {
			c.Evaluated = func(reservation.Change, reservation.ReserveResult, error) {
				t.Error("a disabled relay evaluated a cart")
			}
			c.Disabled = true
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rd := &reserveCounter{}
			b := setup(t, options{mode: authority.ModeMySQL, mirror: cfg,
				wrapRedis: func(s reservation.Store) reservation.Store { rd.Store = s; return rd }})
			if b.m.Evaluates() {
				t.Fatal("Evaluates() is true")
			}
			b.stock(t, 1, 1, 3)
			b.mustReserve(t, "a", line(1, 1))
			b.drain(t)
			if n := rd.n.Load(); n != 1 {
				t.Errorf("the facade sent Redis %d reserves, want 1 (its own comparison)", n)
			}
			if n := b.rec.count(); n != 1 {
				t.Fatalf("%d observations, want 1", n)
			}
			// (With the feed off Redis never got the stock: what it said
			// does not matter here, who asked does.)
			if o := b.rec.obs[0]; o.Relayed || o.Shadow.Store != reservation.AuthorityRedis || o.Shadow.Latency == 0 {
				t.Errorf("observation %+v: want the facade's own call to Redis", o)
			}
		})
	}
}

// recorderRef lets the mirror's callback, built before setup makes the
// bundle's recorder, reach it.
type recorderRef struct{ rec atomic.Pointer[recorder] }

func (r *recorderRef) Observe(o compare.Observation) {
	if rec := r.rec.Load(); rec != nil {
		rec.Observe(o)
	}
}

// Where the relay compares reserves, a reserve MySQL fails to decide
// leaves no change for it: the facade observes that failure itself
// (authority_error), and only that.
func TestRelayedModeObservesAuthorityFailures(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	boom := errors.New("connection lost")
	ref := &recorderRef{}
	b := setup(t, options{mode: authority.ModeMySQL,
		wrapMySQL: func(s reservation.Store) reservation.Store {
			return faulty{Store: s, fault: func(_ context.Context, op string, as reservation.Role) error {
				if op == "reserve" && as == reservation.AsAuthority && failing.Load() {
					return boom
				}
				return nil
			}}
		},
		mirror: func(c *mirror.Config) { c.Evaluated = compare.ObserveRelayed(pod, ref) }})
	ref.rec.Store(b.rec)
	b.stock(t, 1, 1, 5)
	b.mustReserve(t, "ok", line(1, 1))
	failing.Store(true)
	if _, err := b.reserve(context.Background(), "failed", time.Minute, line(1, 1)); !errors.Is(err, boom) {
		t.Fatalf("reserve: %v, want the injected failure", err)
	}
	waitFor(t, "two observations", func() (bool, string) {
		n := b.rec.count()
		return n >= 2, strconv.Itoa(n)
	})
	b.drain(t)
	b.rec.mu.Lock()
	defer b.rec.mu.Unlock()
	if len(b.rec.obs) != 2 {
		t.Fatalf("%d observations, want 2: %+v", len(b.rec.obs), b.rec.obs)
	}
	for _, o := range b.rec.obs {
		class := compare.Classify(o, compare.DefaultRules)
		switch o.Token {
		case "ok":
			if !o.Relayed || class != compare.ClassMatch {
				t.Errorf("ok: relayed %v, class %s; want the relay's match", o.Relayed, class)
			}
		case "failed":
			if o.Relayed || class != compare.ClassAuthorityError || !errors.Is(o.Authority.Err, boom) || o.Mode != string(authority.ModeMySQL) {
				t.Errorf("failed: %+v, class %s; want the facade's authority_error in mode mysql", o, class)
			}
		default:
			t.Errorf("unexpected observation %+v", o)
		}
	}
}
