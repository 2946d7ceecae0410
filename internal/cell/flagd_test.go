package cell_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/flagdtest"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
	"github.com/seed31b0e981/reservoir/rollout/flagsource"
)

// flagdFlags renders flags with pod-a in mode m at version v.
func flagdFlags(t *testing.T, m authority.Mode, v int64) string {
	t.Helper()
	f := flagdoc.NewFlags()
	f.Version = v
	if err := f.SetMode(flagdoc.PodScope("pod-a"), m); err != nil {
		t.Fatal(err)
	}
	data, err := f.Render()
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// A topology whose flags come from a flagd daemon (flags_source = "flagd")
// opens a cell that decides from the daemon's flags and follows its
// changes, and whose flag store refuses to change them, naming the daemon.
func TestCellFlagsFromFlagd(t *testing.T) {
	t.Parallel()
	daemon := flagdtest.New(t, flagdFlags(t, authority.ModeShadow, 1))
	text := "control_dsn = \"" + testdb.New(t).DSN + "\"\nflags_source = \"flagd\"\nflagd_addr = \"" + daemon.Addr() + "\"\n" +
		"[[pods]]\nname = \"pod-a\"\nmysql_dsn = \"" + testdb.New(t).DSN + "\"\nredis_addr = \"" + testredis.Addr(t) + "\"\n" +
		"redis_prefix = \"" + testredis.New(t).Prefix + "\"\nshops = [1]\n"
	topo, err := topology.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	c, err := cell.Open(context.Background(), cell.Config{Topology: topo, Registerer: prometheus.NewRegistry(), ReapInterval: -1, NoRelay: true})
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

	// The decision's version is the epoch of the daemon's version and the
	// kill switch document's (none yet: 0).
	if d, err := c.Flags.Decide(context.Background(), "pod-a", 1); err != nil || d.Mode != authority.ModeShadow || d.Version != 1<<flagdoc.KillVersionBits {
		t.Fatalf("the cell decides %+v, %v; want shadow at epoch 1<<%d, the daemon's version 1", d, err, flagdoc.KillVersionBits)
	}
	// It serves: a reservation through the pod's facade.
	ctx := context.Background()
	ten := int64(10)
	a := c.Pod("pod-a")
	if _, err := a.Facade.Adjust(ctx, &reservation.AdjustParams{Shop: 1, Item: 7, Location: 1, Available: &ten}); err != nil {
		t.Fatal(err)
	}
	res, err := a.Facade.Reserve(ctx, &reservation.ReserveParams{Shop: 1, Token: "t1", TTL: time.Minute,
		Lines: []reservation.Line{{Item: 7, Quantity: 4, Locations: []int64{1}}}})
	if err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve on flags from flagd: %+v %v", res, err)
	}

	daemon.Set(flagdFlags(t, authority.ModeMySQL, 2))
	eventually(t, "the daemon's version 2 applies", func() (bool, string) {
		d, err := c.Flags.Decide(context.Background(), "pod-a", 1)
		return err == nil && d.Mode == authority.ModeMySQL && d.Version == 2<<flagdoc.KillVersionBits, fmt.Sprintf("%+v, %v", d, err)
	})

	// reservoir writes no mode to the daemon: a mode change through the
	// cell's flag store is refused, naming the daemon.
	store := c.FlagStore()
	_, _, err = store.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.Global(), authority.ModeMySQL) })
	if !errors.Is(err, flagdoc.ErrModesExternal) || !strings.Contains(err.Error(), "the flagd daemon at "+daemon.Addr()) {
		t.Errorf("a mode change through the cell's flag store: %v; want ErrModesExternal naming the daemon", err)
	}
}

// With the modes from a flagd daemon, reservoir's own kill switch (the
// control database's kill switch document) wins over the daemon's mode,
// through the controller every kill takes (CLI, admin API, rollout auto);
// a mode change the daemon makes meanwhile moves the epoch but not the
// authority; the release gives the daemon's mode back; and no hold is
// lost across the two handoffs.
func TestKillSwitchWinsOverFlagd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	daemon := flagdtest.New(t, flagdFlags(t, authority.ModeMySQL, 1))
	text := "control_dsn = \"" + testdb.New(t).DSN + "\"\nflags_source = \"flagd\"\nflagd_addr = \"" + daemon.Addr() + "\"\n" +
		"[[pods]]\nname = \"pod-a\"\nmysql_dsn = \"" + testdb.New(t).DSN + "\"\nredis_addr = \"" + testredis.Addr(t) + "\"\n" +
		"redis_prefix = \"" + testredis.New(t).Prefix + "\"\nshops = [1]\n"
	topo, err := topology.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	c, err := cell.Open(ctx, cell.Config{Topology: topo, Registerer: prometheus.NewRegistry(), ReapInterval: -1})
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
	epoch := func(provider, kill int64) int64 {
		e, err := flagsource.Epoch(provider, kill)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	wantDecision := func(what string, mode authority.Mode, kill authority.Kill, version int64) {
		t.Helper()
		eventually(t, what, func() (bool, string) {
			d, err := c.Flags.Decide(ctx, "pod-a", 1)
			return err == nil && d.Mode == mode && d.Kill == kill && d.Version == version, fmt.Sprintf("%+v, %v", d, err)
		})
	}
	wantDecision("the daemon's mysql, no kill switch document yet", authority.ModeMySQL, authority.KillOff, epoch(1, 0))

	a := c.Pod("pod-a")
	ten := int64(10)
	if _, err := a.Facade.Adjust(ctx, &reservation.AdjustParams{Shop: 1, Item: 7, Location: 1, Available: &ten}); err != nil {
		t.Fatal(err)
	}
	reserve := func(token string, want reservation.Authority) {
		t.Helper()
		res, err := a.Facade.Reserve(ctx, &reservation.ReserveParams{Shop: 1, Token: token, TTL: time.Hour,
			Lines: []reservation.Line{{Item: 7, Quantity: 2, Locations: []int64{1}}}})
		if err != nil || res.Status != reservation.StatusReserved || res.Authority != want {
			t.Fatalf("reserve %s: %+v, %v; want reserved by %s", token, res, err, want)
		}
	}
	held := func(what string, tokens ...string) {
		t.Helper()
		for _, tok := range tokens {
			if h, err := a.Facade.Get(ctx, &reservation.GetParams{Shop: 1, Token: tok, AsDecider: true}); err != nil || len(h.Allocations) != 1 {
				t.Errorf("%s: GET %s: %+v, %v; want its hold", what, tok, h, err)
			}
		}
		av, err := a.Facade.Availability(ctx, &reservation.AvailabilityParams{Shop: 1, Item: 7, AsDecider: true})
		if want := int64(10 - 2*len(tokens)); err != nil || len(av.Locations) != 1 || av.Locations[0].Unheld != want {
			t.Errorf("%s: availability %+v, %v; want %d", what, av, err, want)
		}
	}
	reserve("before-kill", reservation.AuthorityMySQL)

	ctl, err := rollout.NewController(rollout.ControllerConfig{DB: c.Control, Flags: c.FlagStore(), Pods: topo.PodNames(),
		Reconciler: c.Reconciler, Lag: c, Stores: c, Modes: c.Modes(), ObeyWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.Kill(ctx, flagdoc.PodScope("pod-a"), authority.KillRedis, rollout.KillOptions{Actor: "alice", Reason: "MySQL p99 x3"}); err != nil {
		t.Fatalf("kill with the modes from flagd: %v", err)
	}
	wantDecision("the kill switch wins over the daemon's mysql", authority.ModeMySQL, authority.KillRedis, epoch(1, 1))
	if v, ok := c.Flags.AppliedVersion(ctx); !ok || v != epoch(1, 1) {
		t.Errorf("AppliedVersion %d, %v; want the epoch of 1 and 1 (what the heartbeat reports)", v, ok)
	}
	held("after the kill", "before-kill")
	reserve("during-kill", reservation.AuthorityRedis)

	// The daemon moves pod-a on (mysql_only, version 2): the epoch grows,
	// the kill switch still wins.
	daemon.Set(flagdFlags(t, authority.ModeMySQLOnly, 2))
	wantDecision("the daemon's change under the kill switch", authority.ModeMySQLOnly, authority.KillRedis, epoch(2, 1))
	reserve("daemon-changed", reservation.AuthorityRedis)
	held("under the kill switch", "before-kill", "during-kill", "daemon-changed")

	if err := ctl.Release(ctx, flagdoc.PodScope("pod-a"), rollout.KillOptions{Actor: "alice", Reason: "MySQL recovered"}); err != nil {
		t.Fatalf("release: %v", err)
	}
	wantDecision("released: the daemon's mode again", authority.ModeMySQLOnly, authority.KillOff, epoch(2, 2))
	reserve("after-release", reservation.AuthorityMySQL)
	held("after the release", "before-kill", "during-kill", "daemon-changed", "after-release")
	for _, tok := range []string{"before-kill", "during-kill", "daemon-changed", "after-release"} {
		if res, err := a.Facade.Claim(ctx, &reservation.ClaimParams{Shop: 1, Token: tok}); err != nil || res.Replayed {
			t.Errorf("claim %s: %+v, %v", tok, res, err)
		}
	}
	av, err := a.Facade.Availability(ctx, &reservation.AvailabilityParams{Shop: 1, Item: 7, AsDecider: true})
	if err != nil || len(av.Locations) != 1 || av.Locations[0].Unheld != 2 {
		t.Errorf("after four claims of 2 of 10: %+v, %v; want 2 unheld", av, err)
	}

	// The audit names the kill and the release, with the kill switch
	// document before and after.
	h, err := ctl.History(ctx, 10)
	if err != nil || len(h) != 2 || h[0].Action != "release" || h[1].Action != "kill" || h[1].Actor != "alice" {
		t.Errorf("history %+v, %v; want the kill and the release by alice", h, err)
	}
}
