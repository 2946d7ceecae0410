package dualwrite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
	"github.com/seed31b0e981/reservoir/rollout/flagsource"
)

// killAfterMySQL is the kill switch engaged over a shop MySQL decided,
// with the relay stopped so that only the handoff's drain can bring
// MySQL's decisions to Redis. Stock 5: MySQL holds 2 ("held") and sold 3
// ("sold"). It returns every rule the kill switch broke: an acknowledged
// hold MySQL made must be claimable through Redis, deducted once; a unit
// MySQL sold must not be sold again by Redis.
func killAfterMySQL(t *testing.T, o options) (problems []string) {
	t.Helper()
	o.mode, o.noRelay = authority.ModeRedis, true
	b := setup(t, o)
	ctx := context.Background()
	b.stock(t, 1, 1, 5) // Redis decides: its quantity moves at once
	_ = b.modes.SetMode(authority.ModeMySQL)
	if res := b.mustReserve(t, "held", line(1, 2)); res.Authority != reservation.AuthorityMySQL {
		t.Fatalf("reserve in mysql mode decided by %s", res.Authority)
	}
	b.mustReserve(t, "sold", line(1, 3))
	if c, err := b.claim(ctx, "sold"); err != nil || c.Outcome != reservation.OutcomeClaimed {
		t.Fatalf("claim in mysql mode: %+v %v", c, err)
	}
	b.drain(t)
	if _, err := b.rd.Get(ctx, &reservation.GetParams{Shop: shop, Token: "held"}); !errors.Is(err, reservation.ErrNotFound) {
		t.Fatalf("precondition: with the relay stopped Redis must not have MySQL's hold yet: %v", err)
	}

	_ = b.modes.SetKill(authority.KillRedis)
	epoch := b.modes.Version()
	c, err := b.claim(ctx, "held")
	if err != nil || c.Outcome != reservation.OutcomeClaimed || fmt.Sprint(c.Allocations) != "[{1 1 2}]" {
		problems = append(problems, fmt.Sprintf("the hold MySQL made was not claimed through Redis: %+v %v", c, err))
	}
	atRedis := reservation.Fence{Decider: reservation.AuthorityRedis, Epoch: epoch}
	if my, rd := b.fences(t); my != atRedis || rd != atRedis {
		problems = append(problems, fmt.Sprintf("fences after the kill switch: MySQL %s, Redis %s; want both %s", my, rd, atRedis))
	}
	res, err := b.reserve(ctx, "resell", time.Minute, line(1, 1))
	if err != nil || res.Status != reservation.StatusInsufficient {
		problems = append(problems, fmt.Sprintf("a unit MySQL sold was offered again by Redis: reserve %+v %v, want insufficient", res, err))
	}
	if l := b.ledger(t, 1, 1); l != 0 && len(problems) == 0 {
		problems = append(problems, fmt.Sprintf("ledger %d, want 0", l))
	}
	if n := b.db.Count(t, "reservation_claims"); n != 2 && c.Outcome == reservation.OutcomeClaimed {
		problems = append(problems, fmt.Sprintf("%d claim rows, want 2", n))
	}
	return problems
}

// The kill switch over a shop MySQL decides hands it back to Redis on the
// first call, with MySQL's change feed drained into Redis first: a hold
// MySQL made is claimable through Redis, and a unit MySQL sold is not sold
// again. Without the drain (the mirror's Disabled knob) the same run
// breaks both rules, so the checks can fail.
func TestKillSwitchHandsTheShopBackWithTheFeedDrained(t *testing.T) {
	t.Parallel()
	t.Run("drained", func(t *testing.T) {
		t.Parallel()
		for _, p := range killAfterMySQL(t, options{}) {
			t.Error(p)
		}
	})
	t.Run("not drained: the checks fail", func(t *testing.T) {
		t.Parallel()
		problems := killAfterMySQL(t, options{mirror: func(c *mirror.Config) { c.Disabled = true }})
		all := strings.Join(problems, "\n")
		t.Logf("without the drain:\n%s", all)
		for _, want := range []string{"not claimed through Redis", "offered again by Redis"} {
			if !strings.Contains(all, want) {
				t.Errorf("without the drain, no problem saying %q", want)
			}
		}
	})
}

// The kill switch redis_only (MySQL itself may be the problem) still hands
// the shop back through MySQL, drain included, when MySQL answers: nothing
// is forced and nothing is lost.
func TestKillSwitchRedisOnlyHandsOffNormallyWhenMySQLAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t, options{mode: authority.ModeMySQL, noRelay: true})
	b.stock(t, 1, 1, 10)
	b.mustReserve(t, "held", line(1, 2))
	_ = b.modes.SetKill(authority.KillRedisOnly)
	c, err := b.claim(context.Background(), "held")
	if err != nil || c.Outcome != reservation.OutcomeClaimed {
		t.Fatalf("claim under redis_only: %+v %v", c, err)
	}
	if n := b.counter(t, "reservoir_handoffs_total", map[string]string{"to": "redis", "result": "done"}); n != 1 {
		t.Errorf("handoffs to redis done: %v, want 1", n)
	}
	if n := b.counter(t, "reservoir_handoffs_total", map[string]string{"result": "forced"}); n != 0 {
		t.Errorf("%v forced handoffs with MySQL answering", n)
	}
	if l, u := b.ledger(t, 1, 1), b.unheld(t, b.rd, 1, 1); l != 8 || u != 8 {
		t.Errorf("ledger %d, Redis unheld %d; want both 8", l, u)
	}
}

// When MySQL does not answer, the kill switch redis_only lets Redis take
// the shop without it (forced, counted), while the plain kill switch
// answers ErrDeciderUnreachable and moves nothing: only redis_only may
// risk what the relay had not delivered.
func TestKillSwitchWithMySQLDown(t *testing.T) {
	t.Parallel()
	for _, kill := range []authority.Kill{authority.KillRedisOnly, authority.KillRedis} {
		t.Run(string(kill), func(t *testing.T) {
			t.Parallel()
			// The facade's mirror reaches a MySQL that is gone; the stores
			// (and a second mirror, for the setup) reach the real one.
			b := setup(t, options{mode: authority.ModeRedis, noRelay: true, mirror: func(c *mirror.Config) {
				c.MySQL = unreachableMySQL(t)
			}})
			b.stock(t, 1, 1, 10)
			ctx := context.Background()
			healthy, err := mirror.New(mirror.Config{Pod: pod, MySQL: b.my, Redis: b.rd, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			atMySQL := reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: b.modes.Version()}
			if f, err := healthy.Handoff(ctx, shop, reservation.AuthorityMySQL, atMySQL.Epoch, false); err != nil || f != atMySQL {
				t.Fatalf("hand the shop to MySQL: %s %v", f, err)
			}
			if _, err := b.my.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "held", Lines: line(1, 2), TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if err := healthy.Flush(ctx, shop); err != nil { // the relay is not behind
				t.Fatal(err)
			}

			_ = b.modes.SetKill(kill)
			res, err := b.reserve(ctx, "after", time.Minute, line(1, 1))
			my, rd := b.fences(t)
			t.Logf("reserve: %+v %v; fences MySQL %s, Redis %s", res, err, my, rd)
			forced := b.counter(t, "reservoir_handoffs_total", map[string]string{"to": "redis", "result": "forced"})
			if kill == authority.KillRedisOnly {
				if err != nil || res.Authority != reservation.AuthorityRedis {
					t.Errorf("reserve under redis_only with MySQL down: %+v %v, want decided by Redis", res, err)
				}
				if want := (reservation.Fence{Decider: reservation.AuthorityRedis, Epoch: b.modes.Version()}); rd != want {
					t.Errorf("Redis's fence %s, want %s", rd, want)
				}
				if forced != 1 {
					t.Errorf("forced handoffs counted: %v, want 1", forced)
				}
				if _, err := b.rd.Get(ctx, &reservation.GetParams{Shop: shop, Token: "held"}); err != nil {
					t.Errorf("the hold the relay had delivered is gone from Redis: %v", err)
				}
				return
			}
			if !errors.Is(err, dualwrite.ErrDeciderUnreachable) || res.Status != "" {
				t.Errorf("reserve under the kill switch with MySQL down: %+v %v, want ErrDeciderUnreachable", res, err)
			}
			if my != atMySQL || rd != atMySQL || forced != 0 {
				t.Errorf("fences MySQL %s, Redis %s, %v forced: want both still %s, nothing forced", my, rd, forced, atMySQL)
			}
		})
	}
}

// unreachableMySQL is a MySQL store whose database handle is closed.
func unreachableMySQL(t *testing.T) *mysqlstore.Store {
	t.Helper()
	db, err := sql.Open("mysql", "nobody@tcp(127.0.0.1:1)/none")
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := mysqlstore.New(mysqlstore.Config{DB: db, PoolCap: poolCap})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The kill switch is engaged, through the flags file, while 32 callers
// run in mysql mode on four replicas (each its own facade and its own
// flagd FlagSource on the one file): the time until every replica obeys
// is measured; every reserve started after that is decided by Redis;
// every acknowledged reservation is claimed exactly once, whichever
// replica and store claims it, and the ledger is deducted once per claim.
func TestKillSwitchUnderLoadAcrossReplicas(t *testing.T) {
	t.Parallel()
	b := setup(t, options{mode: authority.ModeMySQL})
	b.stock(t, 1, 1, 1_000_000)
	flags := flagdoc.FlagsFile{Path: filepath.Join(t.TempDir(), "flags.json")}
	start := flagdoc.NewFlags()
	start.Version = 1 // a version: the flags can hand the shop off
	if err := start.SetMode(flagdoc.PodScope(pod), authority.ModeMySQL); err != nil {
		t.Fatal(err)
	}
	if err := flags.Write(start); err != nil {
		t.Fatal(err)
	}
	const replicas = 4
	var facades []*dualwrite.Facade
	var sources []*flagsource.Source
	for range replicas {
		src, err := flagsource.New(context.Background(), flagsource.Config{Path: flags.Path, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { src.Close() })
		f, _ := b.replica(t, src)
		facades, sources = append(facades, f), append(sources, src)
	}

	type call struct {
		started   time.Time
		authority reservation.Authority
	}
	var mu sync.Mutex
	var calls []call
	var claimed, units atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			f := facades[w%replicas]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				token := fmt.Sprintf("k%d-%d", w, i)
				started := time.Now()
				res, err := f.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: token, Lines: line(1, 1), TTL: time.Minute})
				if err != nil || res.Status != reservation.StatusReserved {
					t.Errorf("reserve %s: %+v %v", token, res, err)
					return
				}
				mu.Lock()
				calls = append(calls, call{started, res.Authority})
				mu.Unlock()
				c, err := f.Claim(context.Background(), &reservation.ClaimParams{Shop: shop, Token: token})
				if err != nil || c.Replayed {
					t.Errorf("claim %s: %+v %v", token, c, err)
					return
				}
				claimed.Add(1)
				units.Add(reservation.TotalQuantity(c.Allocations))
			}
		})
	}
	// Traffic in mysql mode first: wait until MySQL has decided some.
	waitFor(t, "MySQL decides reserves", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range calls {
			if c.authority == reservation.AuthorityMySQL {
				n++
			}
		}
		return n >= 200, fmt.Sprintf("%d reserves decided by MySQL", n)
	})
	engaged := time.Now()
	if _, _, err := flags.Update(func(f *flagdoc.Flags) error {
		return f.EngageKill(flagdoc.PodScope(pod), authority.KillRedis, flagdoc.Attribution{Actor: "test", Reason: "drill under load"})
	}); err != nil {
		t.Fatal(err)
	}
	// Every replica's source, polled: when does each obey?
	obeyed := make([]time.Duration, replicas)
	for i, src := range sources {
		for {
			d, _ := src.Decide(context.Background(), pod, shop)
			if d.Kill == authority.KillRedis {
				obeyed[i] = time.Since(engaged)
				break
			}
			if time.Since(engaged) > 10*time.Second {
				t.Fatalf("replica %d never obeyed the kill switch", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	allObeyed := engaged.Add(slices.Max(obeyed))
	// Traffic after every replica obeyed: wait for some of it.
	waitFor(t, "reserves after the kill switch", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range calls {
			if c.started.After(allObeyed) {
				n++
			}
		}
		return n >= 200, fmt.Sprintf("%d reserves started after every replica obeyed", n)
	})
	close(stop)
	wg.Wait()
	t.Logf("kill switch propagation to %d replicas under 32 callers: %v (max %v)", replicas, obeyed, slices.Max(obeyed))

	var after, lateMySQL int
	for _, c := range calls {
		if c.started.After(allObeyed) {
			after++
			if c.authority != reservation.AuthorityRedis {
				lateMySQL++
			}
		}
	}
	if lateMySQL > 0 {
		t.Errorf("%d of %d reserves started after every replica obeyed were still decided by MySQL", lateMySQL, after)
	}
	if n := b.db.Count(t, "reservation_claims"); n != claimed.Load() {
		t.Errorf("claim rows %d, claims acknowledged %d", n, claimed.Load())
	}
	if l := b.ledger(t, 1, 1); l != 1_000_000-units.Load() {
		t.Errorf("ledger %d, want %d - %d claimed", l, 1_000_000, units.Load())
	}
	if slices.Max(obeyed) > 2*time.Second {
		t.Errorf("propagation %v: want well under a second on this machine", slices.Max(obeyed))
	}
}
