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
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
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

	if d, err := c.Flags.Decide(context.Background(), "pod-a", 1); err != nil || d.Mode != authority.ModeShadow || d.Version != 1 {
		t.Fatalf("the cell decides %+v, %v; want shadow at version 1, the daemon's", d, err)
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
		return err == nil && d.Mode == authority.ModeMySQL && d.Version == 2, fmt.Sprintf("%+v, %v", d, err)
	})

	store := c.FlagStore()
	_, _, err = store.Update(func(f *flagdoc.Flags) error {
		return f.EngageKill(flagdoc.Global(), authority.KillRedis, flagdoc.Attribution{Reason: "test"})
	})
	if !errors.Is(err, flagdoc.ErrFlagsExternal) || !strings.Contains(err.Error(), "the flagd daemon at "+daemon.Addr()) {
		t.Errorf("a change through the cell's flag store: %v; want ErrFlagsExternal naming the daemon", err)
	}
}
