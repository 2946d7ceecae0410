package cell_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
)

// setup opens a cell of two pods sharing one Redis server (told apart by
// prefix), both in shadow mode, with a fast reaper.
func setup(t *testing.T) (*cell.Cell, *prometheus.Registry, map[string]*testredis.Redis) {
	t.Helper()
	dir := t.TempDir()
	flags := rollout.FlagsFile{Path: filepath.Join(dir, "flags.json")}
	if _, _, err := flags.Update(func(f *rollout.Flags) error { return f.SetMode(rollout.Global(), rollout.ModeShadow) }); err != nil {
		t.Fatal(err)
	}
	prefixes := map[string]*testredis.Redis{"pod-a": testredis.New(t), "pod-b": testredis.New(t)}
	topo := &topology.Config{ControlDSN: testdb.New(t).DSN, FlagsFile: flags.Path, Pods: []topology.Pod{
		{Name: "pod-a", MySQLDSN: testdb.New(t).DSN, RedisAddr: testredis.Addr(t), RedisPrefix: prefixes["pod-a"].Prefix, Shops: []int64{1}},
		{Name: "pod-b", MySQLDSN: testdb.New(t).DSN, RedisAddr: testredis.Addr(t), RedisPrefix: prefixes["pod-b"].Prefix, Shops: []int64{2}, PoolCap: 50},
	}}
	*topo = topo.WithDefaults()
	reg := prometheus.NewRegistry()
	c, err := cell.Open(context.Background(), cell.Config{Topology: topo, Registerer: reg, ReapInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return c, reg, prefixes
}

// A cell routes shops to pods, shares one Redis client per server, keeps
// every pod's store metrics apart by a pod label on one registry, limits
// input to the pod's pool cap, and reaps expired holds in both stores.
func TestCell(t *testing.T) {
	t.Parallel()
	c, reg, _ := setup(t)
	ctx := context.Background()
	a, b := c.Pod("pod-a"), c.Pod("pod-b")
	if p, err := c.PodOf(2); err != nil || p != b {
		t.Fatalf("PodOf(2) = %v, %v", p, err)
	}
	if a.RedisClient != b.RedisClient {
		t.Error("two pods on one Redis server have two clients")
	}
	if b.Limits.MaxQuantity != 50 || a.Limits.MaxQuantity != 1000 {
		t.Errorf("limits follow the pool cap: pod-a %d, pod-b %d", a.Limits.MaxQuantity, b.Limits.MaxQuantity)
	}
	for _, h := range c.Ping(ctx) {
		if !h.OK {
			t.Errorf("ping: %+v", h)
		}
	}

	ten := int64(10)
	if _, err := a.Facade.Adjust(ctx, &reservation.AdjustParams{Shop: 1, Item: 7, Location: 1, Available: &ten}); err != nil {
		t.Fatal(err)
	}
	res, err := a.Facade.Reserve(ctx, &reservation.ReserveParams{Shop: 1, Token: "short", TTL: time.Second,
		Lines: []reservation.Line{{Item: 7, Quantity: 4, Locations: []int64{1}}}})
	if err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	// The reaper returns the hold in both stores once it expires.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, errR := a.Redis.Get(ctx, &reservation.GetParams{Shop: 1, Token: "short"})
		_, errM := a.MySQL.Get(ctx, &reservation.GetParams{Shop: 1, Token: "short"})
		if errors.Is(errR, reservation.ErrNotFound) && errors.Is(errM, reservation.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the expired hold was not reaped: redis %v, mysql %v", errR, errM)
		}
		time.Sleep(50 * time.Millisecond)
	}
	av, err := a.Facade.Availability(ctx, &reservation.AvailabilityParams{Shop: 1, Item: 7})
	if err != nil || av.At(1) != 10 {
		t.Fatalf("availability after the reaper: %+v %v", av, err)
	}
	rep, err := c.Reconcile(ctx, "pod-a")
	if err != nil || !rep.Clean {
		t.Errorf("reconcile: %+v %v", rep, err)
	}

	// One registry, every pod's metrics apart.
	n, err := testutil.GatherAndCount(reg, "reservoir_redis_script_seconds", cell.StoreCallMetric, "reservoir_dualwrite_shadow_skipped_total")
	if err != nil || n == 0 {
		t.Fatalf("metrics: %d %v", n, err)
	}
	mfs, _ := reg.Gather()
	var labelled bool
	for _, mf := range mfs {
		if mf.GetName() == cell.StoreCallMetric {
			for _, m := range mf.GetMetric() {
				labelled = labelled || strings.Contains(m.String(), `value:"pod-a"`)
			}
		}
	}
	if !labelled {
		t.Error("store call metrics carry no pod label")
	}
}

// The reaper also runs each pod's claim follower: a claim whose Redis half
// was lost while Redis never held the cart is settled in Redis within a
// few ticks, once (the cell's registry counts it).
func TestCellFollowsLostClaims(t *testing.T) {
	t.Parallel()
	c, reg, _ := setup(t)
	ctx := context.Background()
	a := c.Pod("pod-a")
	ten := int64(10)
	if _, err := a.Facade.Adjust(ctx, &reservation.AdjustParams{Shop: 1, Item: 8, Location: 1, Available: &ten}); err != nil {
		t.Fatal(err)
	}
	// The MySQL ledger deducts 4 for a cart Redis never saw, and no Redis
	// settle follows.
	if _, err := a.MySQL.Deduct(ctx, &reservation.DeductParams{Shop: 1, Token: "lost-half", Allocations: []reservation.Allocation{{Item: 8, Location: 1, Quantity: 4}}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		av, err := a.Redis.Availability(ctx, &reservation.AvailabilityParams{Shop: 1, Item: 8})
		if err != nil {
			t.Fatal(err)
		}
		if av.At(1) == 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis still offers %d, want 6: the follower did not settle the claim", av.At(1))
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // a few more ticks: nothing more happens
	if av, _ := a.Redis.Availability(ctx, &reservation.AvailabilityParams{Shop: 1, Item: 8}); av.At(1) != 6 {
		t.Errorf("Redis offers %d after more ticks, want 6", av.At(1))
	}
	if n, err := testutil.GatherAndCount(reg, "reservoir_redis_follow_settled_total"); err != nil || n == 0 {
		t.Errorf("follow_settled not exported: %d %v", n, err)
	}
}

// Close is bounded and idempotent.
func TestCellCloseTwice(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := c.Flags.Decide(ctx, "pod-a", 1); !errors.Is(err, rollout.ErrFlagsNotLoaded) || d != rollout.RedisSafe {
		t.Errorf("after close the flag source answers %+v, %v", d, err)
	}
}

// Open refuses a config without a topology, naming the field.
func TestOpenValidates(t *testing.T) {
	t.Parallel()
	if _, err := cell.Open(context.Background(), cell.Config{}); err == nil || !strings.Contains(err.Error(), "Topology") {
		t.Fatalf("Open without a topology: %v", err)
	}
}
