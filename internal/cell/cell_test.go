package cell_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
	"github.com/seed31b0e981/reservoir/rollout/flagsource"
)

// setup opens a cell of two pods sharing one Redis server (told apart by
// prefix), both in shadow mode, with a fast reaper and relays that poll
// often.
func setup(t *testing.T) (*cell.Cell, *prometheus.Registry, map[string]*testredis.Redis) {
	t.Helper()
	dir := t.TempDir()
	flags := flagdoc.FlagsFile{Path: filepath.Join(dir, "flags.json")}
	if _, _, err := flags.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.Global(), authority.ModeShadow) }); err != nil {
		t.Fatal(err)
	}
	prefixes := map[string]*testredis.Redis{"pod-a": testredis.New(t), "pod-b": testredis.New(t)}
	topo := &topology.Config{ControlDSN: testdb.New(t).DSN, FlagsFile: flags.Path, Pods: []topology.Pod{
		{Name: "pod-a", MySQLDSN: testdb.New(t).DSN, RedisAddr: testredis.Addr(t), RedisPrefix: prefixes["pod-a"].Prefix, Shops: []int64{1}},
		{Name: "pod-b", MySQLDSN: testdb.New(t).DSN, RedisAddr: testredis.Addr(t), RedisPrefix: prefixes["pod-b"].Prefix, Shops: []int64{2}, PoolCap: 50},
	}}
	*topo = topo.WithDefaults()
	reg := prometheus.NewRegistry()
	// A shadow deadline of seconds: the test reads MySQL's shadow hold,
	// which the default 250ms can miss on a loaded machine (CI under the
	// race detector saw it: shadow_timeout, then not_found).
	c, err := cell.Open(context.Background(), cell.Config{Topology: topo, Registerer: reg, ReapInterval: 100 * time.Millisecond,
		FlagPollInterval: 50 * time.Millisecond, MirrorPoll: 5 * time.Millisecond, ShadowTimeout: 5 * time.Second})
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

// A cell routes shops to pods, gives each pod its own Redis client (one
// pod's stuck calls cannot take another's connections), keeps
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
	if a.RedisClient == b.RedisClient {
		t.Error("two pods on one Redis server share a client: one pod's stuck calls could take the other's connections")
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
	// The reaper returns the hold's units in both stores once it expires,
	// and each keeps an expired tombstone of it.
	eventually(t, "the expired hold is reaped in both stores", func() (bool, string) {
		avR, errR := a.Redis.Availability(ctx, &reservation.AvailabilityParams{Shop: 1, Item: 7})
		avM, errM := a.MySQL.Availability(ctx, &reservation.AvailabilityParams{Shop: 1, Item: 7})
		return errR == nil && errM == nil && avR.At(1) == 10 && avM.At(1) == 10,
			fmt.Sprintf("redis offers %d (%v), mysql %d (%v), want 10 each", avR.At(1), errR, avM.At(1), errM)
	})
	for _, st := range []reservation.Store{a.Redis, a.MySQL} {
		if _, err := st.Get(ctx, &reservation.GetParams{Shop: 1, Token: "short"}); !errors.Is(err, reservation.ErrExpired) {
			t.Errorf("%s answers %v for the reaped hold, want expired (its tombstone)", st.Name(), err)
		}
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

// eventually waits up to 10s for cond, checking it every 10ms, and fails
// the test with what cond last said if it never holds.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s: %s", what, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lagZero waits until the pod's relay lag is 0 changes.
func lagZero(t *testing.T, c *cell.Cell, pod string) {
	t.Helper()
	eventually(t, "the relay lag of "+pod+" drops to 0", func() (bool, string) {
		n, oldest, err := c.Lag(context.Background(), pod)
		return err == nil && n == 0 && oldest == 0, fmt.Sprintf("%d changes, oldest %s, %v", n, oldest, err)
	})
}

// applied sums the cell's reservoir_mirror_applied_total of pod and kind.
func applied(t *testing.T, reg *prometheus.Registry, pod, kind string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "reservoir_mirror_applied_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["reservoir_pod"] == pod && labels["kind"] == kind {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// The cell runs each pod's relay: once the flags give pod-a's shops to
// MySQL, a reserve through the facade hands the shop off and MySQL
// decides it, and the hold reaches Redis through the change feed without
// anyone asking; the relay lag then drops to 0 and the pod reconciles
// clean. pod-b, on Redis, is not touched.
func TestCellRelaysMySQLDecisions(t *testing.T) {
	t.Parallel()
	c, reg, _ := setup(t)
	ctx := context.Background()
	a := c.Pod("pod-a")
	ten := int64(10)
	if _, err := a.Facade.Adjust(ctx, &reservation.AdjustParams{Shop: 1, Item: 9, Location: 1, Available: &ten}); err != nil {
		t.Fatal(err)
	}
	flags := flagdoc.FlagsFile{Path: c.Topology.FlagsFile}
	_, after, err := flags.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.PodScope("pod-a"), authority.ModeMySQL) })
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cell sees pod-a in mysql mode", func() (bool, string) {
		d, err := c.Flags.Decide(ctx, "pod-a", 1)
		return err == nil && d.Mode == authority.ModeMySQL && d.Version == after.Version, fmt.Sprintf("%+v %v", d, err)
	})

	res, err := a.Facade.Reserve(ctx, &reservation.ReserveParams{Shop: 1, Token: "relayed", TTL: time.Minute,
		Lines: []reservation.Line{{Item: 9, Quantity: 3, Locations: []int64{1}}}})
	if err != nil || res.Status != reservation.StatusReserved || res.Authority != reservation.AuthorityMySQL {
		t.Fatalf("reserve through the facade: %+v %v; want MySQL deciding", res, err)
	}
	want := reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: after.Version}
	if f, err := a.MySQL.Fence(ctx, 1); err != nil || f != want {
		t.Fatalf("MySQL's fence of shop 1: %s %v, want %s", f, err, want)
	}
	eventually(t, "the hold reaches Redis", func() (bool, string) {
		h, err := a.Redis.Get(ctx, &reservation.GetParams{Shop: 1, Token: "relayed"})
		return err == nil && h.Quantity() == 3 && h.Authority == reservation.AuthorityMySQL, fmt.Sprintf("%+v %v", h, err)
	})
	lagZero(t, c, "pod-a")
	if av, err := a.Redis.Availability(ctx, &reservation.AvailabilityParams{Shop: 1, Item: 9}); err != nil || av.At(1) != 7 {
		t.Errorf("Redis offers %d (%v), want 7: the relayed hold took its units", av.At(1), err)
	}
	if applied(t, reg, "pod-a", "state") == 0 {
		t.Error("reservoir_mirror_applied_total{kind=state} of pod-a did not count the relayed hold")
	}
	rep, err := c.Reconcile(ctx, "pod-a")
	if err != nil || !rep.Clean {
		t.Errorf("reconcile after the relay: %+v %v", rep, err)
	}
	if _, _, err := c.Lag(ctx, "pod-x"); err == nil {
		t.Error("the lag of an unknown pod: no error")
	}
}

// A legacy claim whose Redis half was lost (the ledger deducted 4 for a
// cart, no Redis step followed) is finished by the relay: the ledger's
// deduction is in the feed, and Redis takes it out of its quantity, once.
func TestCellRelaysLostClaims(t *testing.T) {
	t.Parallel()
	c, reg, _ := setup(t)
	ctx := context.Background()
	a := c.Pod("pod-a")
	ten := int64(10)
	if _, err := a.Facade.Adjust(ctx, &reservation.AdjustParams{Shop: 1, Item: 8, Location: 1, Available: &ten}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.MySQL.Deduct(ctx, &reservation.DeductParams{Shop: 1, Token: "lost-half", Allocations: []reservation.Allocation{{Item: 8, Location: 1, Quantity: 4}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Redis follows the ledger's claim", func() (bool, string) {
		av, err := a.Redis.Availability(ctx, &reservation.AvailabilityParams{Shop: 1, Item: 8})
		return err == nil && av.At(1) == 6, fmt.Sprintf("Redis offers %d (%v), want 6", av.At(1), err)
	})
	// With the feed empty nothing more can move Redis: the claim was
	// applied once (the adjust's change, delivered too, moved nothing:
	// the facade's Adjust had applied it).
	lagZero(t, c, "pod-a")
	if av, _ := a.Redis.Availability(ctx, &reservation.AvailabilityParams{Shop: 1, Item: 8}); av.At(1) != 6 {
		t.Errorf("Redis offers %d once the feed is empty, want 6", av.At(1))
	}
	if _, err := a.Redis.Get(ctx, &reservation.GetParams{Shop: 1, Token: "lost-half"}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
		t.Errorf("Redis's answer for the claimed token: %v, want already claimed (its tombstone)", err)
	}
	if applied(t, reg, "pod-a", "state") == 0 {
		t.Error("reservoir_mirror_applied_total{kind=state} of pod-a did not count the claim")
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
	if d, err := c.Flags.Decide(ctx, "pod-a", 1); !errors.Is(err, flagsource.ErrFlagsNotLoaded) || d != authority.RedisSafe {
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
