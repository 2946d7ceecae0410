package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// live is a pod under steady traffic: a serving cell (relay, reaper,
// flags followed within milliseconds) whose facade takes reserves,
// claims, releases and restocks from a few workers, and an operator's
// cell on the same topology (no relay, no reaper), as `reservoir
// reconcile` and `reservoir rollout` open it.
type live struct {
	serve, op *cell.Cell
	flags     flagdoc.FlagsFile
	redis     *testredis.Redis
	// calls counts the facade calls that returned, each once it did.
	calls  atomic.Int64
	failed atomic.Int64
	stop   func()
}

var liveShops = []int64{1, 2, 3}

func startLive(t *testing.T, mode authority.Mode) *live {
	t.Helper()
	l := &live{redis: testredis.New(t), flags: flagdoc.FlagsFile{Path: filepath.Join(t.TempDir(), "flags.json")}}
	if _, _, err := l.flags.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.Global(), mode) }); err != nil {
		t.Fatal(err)
	}
	topo := &topology.Config{ControlDSN: testdb.New(t).DSN, FlagsFile: l.flags.Path, Pods: []topology.Pod{
		{Name: "pod-a", MySQLDSN: testdb.New(t).DSN, RedisAddr: testredis.Addr(t), RedisPrefix: l.redis.Prefix, Shops: liveShops},
	}}
	*topo = topo.WithDefaults()
	var err error
	if l.serve, err = cell.Open(context.Background(), cell.Config{Topology: topo, ReapInterval: 100 * time.Millisecond,
		FlagPollInterval: 10 * time.Millisecond, Logger: quietLog}); err != nil {
		t.Fatal(err)
	}
	if l.op, err = cell.Open(context.Background(), cell.Config{Topology: topo, ReapInterval: -1, NoRelay: true, Logger: quietLog}); err != nil {
		t.Fatal(err)
	}
	f := l.serve.Pod("pod-a").Facade
	ctx, cancel := context.WithCancel(context.Background())
	for _, shop := range liveShops {
		for item := int64(1); item <= 3; item++ {
			n := int64(1_000_000)
			if _, err := f.Adjust(ctx, &reservation.AdjustParams{Shop: shop, Item: item, Location: 1, Available: &n}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 16))
			for i := 0; ctx.Err() == nil; i++ {
				shop := liveShops[rng.IntN(len(liveShops))]
				token := fmt.Sprintf("w%d-%d", w, i)
				res, err := f.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: token, TTL: time.Second,
					Lines: []reservation.Line{{Item: int64(1 + rng.IntN(3)), Quantity: int64(1 + rng.IntN(3)), Locations: []int64{1}}}})
				l.calls.Add(1)
				if err != nil || res.Status != reservation.StatusReserved {
					if ctx.Err() == nil && l.failed.Add(1) == 1 {
						t.Logf("reserve: %+v %v", res, err)
					}
					continue
				}
				switch n := rng.IntN(10); {
				case n < 5:
					_, err = f.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token})
					l.calls.Add(1)
				case n < 9:
					_, err = f.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: token})
					l.calls.Add(1)
				default: // left to expire: the reaper's traffic
				}
				if rng.IntN(20) == 0 && err == nil {
					_, err = f.Adjust(ctx, &reservation.AdjustParams{Shop: shop, Item: 1, Location: 1, Delta: 1})
					l.calls.Add(1)
				}
				if err != nil && ctx.Err() == nil && l.failed.Add(1) == 1 {
					t.Logf("a claim, release or adjust: %v", err)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	l.stop = sync.OnceFunc(func() {
		cancel()
		wg.Wait()
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		_ = l.op.Close(cctx)
		_ = l.serve.Close(cctx)
	})
	t.Cleanup(l.stop)
	// Traffic flows, and every shop has been handed to the store its mode
	// names (a handoff on its first call).
	deadline := time.Now().Add(10 * time.Second)
	for l.calls.Load() < 200 {
		if time.Now().After(deadline) {
			t.Fatalf("traffic: %d calls in 10s", l.calls.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return l
}

// during runs check and returns how many calls of the traffic returned
// while it ran (counted from just before it starts to just after it
// ends): calls the pod served while the check was under way.
func (l *live) during(check func()) int64 {
	from := l.calls.Load()
	check()
	return l.calls.Load() - from
}

// busy says the traffic went on while a check ran: it served calls
// meanwhile (served, from during), and none failed. How many depends on
// the machine and on how long the check took (a few under -race on two
// busy cores), so one is enough: none means the traffic stopped, and the
// test would show nothing.
func (l *live) busy(t *testing.T, what string, served int64) {
	t.Helper()
	if served == 0 {
		t.Fatalf("no call returned while %s ran: the traffic stopped, the test shows nothing", what)
	}
	t.Logf("%d calls returned while %s ran", served, what)
	if f := l.failed.Load(); f > 0 {
		t.Errorf("%d calls failed", f)
	}
}

// Under steady traffic on a pod running mysql_only (MySQL decides, Redis
// follows through the relay, whose backlog is never empty), the
// reconciler is clean run after run; a Redis damaged behind the relay's
// back is drift, and --repair converges while the traffic goes on: the
// run reports everything repaired and the next look is clean.
func TestCleanAndRepairUnderTraffic(t *testing.T) {
	t.Parallel()
	l := startLive(t, authority.ModeMySQLOnly)
	ctx := context.Background()
	rc := l.op.Reconciler
	// Ten runs at least, and as many more as it takes for a hundred calls
	// to have returned while they ran.
	var served int64
	deadline := time.Now().Add(time.Minute)
	for i := 0; i < 10 || served < 100; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls returned during %d runs of Clean in a minute: the traffic stopped", served, i)
		}
		served += l.during(func() {
			ok, summary, err := rc.Clean(ctx, "pod-a")
			if err != nil || !ok {
				t.Fatalf("Clean #%d under traffic: %v %s %v", i, ok, summary, err)
			}
		})
	}
	l.busy(t, "the runs of Clean", served)

	// Planted: Redis loses a shop's quantities (a partial flush).
	keys, err := l.redis.Client.Keys(ctx, l.redis.Prefix+"{shop:2}:qty:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("Redis's quantities of shop 2: %v %v", keys, err)
	}
	if err := l.redis.Client.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, summary, err := rc.Clean(ctx, "pod-a"); err != nil || ok {
		t.Fatalf("Clean with shop 2's quantities lost: %v %s %v; want drift", ok, summary, err)
	}
	l.busy(t, "the repair and the look after it", l.during(func() {
		rep, err := rc.Run(ctx, "pod-a", optionsRepair)
		if err != nil {
			t.Fatal(err)
		}
		t.Log(rep.Summary())
		if rep.Drift() == 0 || rep.Left != 0 {
			t.Errorf("repair under traffic: %s; want drift, all repaired", rep.Summary())
			for _, f := range rep.Findings {
				t.Log(f)
			}
		}
		if ok, summary, err := rc.Clean(ctx, "pod-a"); err != nil || !ok {
			t.Errorf("Clean after the repair, traffic running: %v %s %v", ok, summary, err)
		}
	}))
}

// `advance` out of mysql_only checks that Redis holds what MySQL decided
// (the relay keeps up, the reconciler is clean) and passes under steady
// traffic; the same check refuses a Redis that lost a shop's quantities,
// naming the command that repairs it, and passes once it ran.
func TestAdvanceUnderTraffic(t *testing.T) {
	t.Parallel()
	l := startLive(t, authority.ModeRedis)
	plan, err := rollout.ParsePlan([]byte(`pods = ["pod-a"]
[[stages]]
name = "mysql_only pod-a"
mode = "mysql_only"
pods = ["pod-a"]
[[stages]]
name = "mysql pod-a"
mode = "mysql"
pods = ["pod-a"]
[[stages]]
name = "mysql_only pod-a again"
mode = "mysql_only"
pods = ["pod-a"]
`))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := rollout.NewController(rollout.ControllerConfig{DB: l.op.Control, Flags: l.flags, Plan: plan, Pods: []string{"pod-a"},
		Stats: l.op.Comparer, Reconciler: l.op.Reconciler, Lag: l.op, Propagation: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	advance := func() error {
		_, err := ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "test", Reason: "nothing is compared in mysql_only", Override: true, ConfirmMySQLOnly: true})
		return err
	}
	if err := advance(); err != nil {
		t.Fatal(err)
	}
	waitHandedOff(t, l, reservation.AuthorityMySQL)

	l.busy(t, "the advance out of mysql_only", l.during(func() {
		if err := advance(); err != nil {
			t.Fatalf("advance out of mysql_only under traffic: %v", err)
		}
	}))

	if err := advance(); err != nil {
		t.Fatal(err)
	}
	waitHandedOff(t, l, reservation.AuthorityMySQL)
	keys, err := l.redis.Client.Keys(ctx, l.redis.Prefix+"{shop:3}:qty:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("Redis's quantities of shop 3: %v %v", keys, err)
	}
	if err := l.redis.Client.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	// The plan is complete; a kill switch leaves mysql_only the same way.
	err = ctl.Kill(ctx, flagdoc.Scope{Kind: flagdoc.ScopePod, Pod: "pod-a"}, authority.KillRedis, rollout.KillOptions{Actor: "test", Reason: "drill"})
	if !errors.Is(err, rollout.ErrKillRefused) {
		t.Fatalf("kill over mysql_only with shop 3's quantities lost in Redis: %v; want refused", err)
	}
	t.Log(err)
	if rep, err := l.op.Reconciler.Run(ctx, "pod-a", optionsRepair); err != nil || rep.Left != 0 {
		t.Fatalf("repair: %s %v", rep.Summary(), err)
	}
	l.busy(t, "the kill after the repair", l.during(func() {
		if err := ctl.Kill(ctx, flagdoc.Scope{Kind: flagdoc.ScopePod, Pod: "pod-a"}, authority.KillRedis, rollout.KillOptions{Actor: "test", Reason: "drill"}); err != nil {
			t.Fatalf("kill over mysql_only after the repair, under traffic: %v", err)
		}
	}))
}

// waitHandedOff waits until every shop's fences name to in both stores.
func waitHandedOff(t *testing.T, l *live, to reservation.Authority) {
	t.Helper()
	p := l.op.Pod("pod-a")
	deadline := time.Now().Add(10 * time.Second)
	for {
		done := true
		for _, shop := range liveShops {
			mf, err1 := p.MySQL.Fence(context.Background(), shop)
			rf, err2 := p.Redis.Fence(context.Background(), shop)
			done = done && err1 == nil && err2 == nil && mf.Decider == to && rf.Decider == to
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shops were not handed to %s within 10s", to)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
