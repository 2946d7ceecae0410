package cell_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/open-feature/go-sdk/openfeature/memprovider"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/flagdtest"
	"github.com/seed31b0e981/reservoir/internal/ofreptest"
	"github.com/seed31b0e981/reservoir/internal/testcert"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// openWithFlags opens a one-pod cell (pod-a, shop 1) whose topology's
// flags lines are flags, closed at cleanup.
func openWithFlags(t *testing.T, flags string) *cell.Cell {
	t.Helper()
	text := "control_dsn = \"" + testdb.New(t).DSN + "\"\n" + flags +
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
	return c
}

// A topology on an OFREP service (flags_source = "ofrep", its token from
// the variable ofrep_token_env names) opens a cell that decides from the
// service's answers, serves, and follows a change at the next call.
func TestCellFlagsFromOFREP(t *testing.T) {
	t.Setenv("RESERVOIR_TEST_OFREP_TOKEN", "cell-test-token")
	svc := ofreptest.New(t, flagdFlags(t, authority.ModeShadow, 1), ofreptest.WithToken("cell-test-token"))
	c := openWithFlags(t, "flags_source = \"ofrep\"\nofrep_url = \""+svc.URL()+"\"\nofrep_token_env = \"RESERVOIR_TEST_OFREP_TOKEN\"\n")
	if d, err := c.Flags.Decide(context.Background(), "pod-a", 1); err != nil || d.Mode != authority.ModeShadow || d.Version != 1<<flagdoc.KillVersionBits {
		t.Fatalf("the cell decides %+v, %v; want shadow at epoch 1<<KillVersionBits: the service's version 1, no kill switch document", d, err)
	}
	ctx := context.Background()
	ten := int64(10)
	a := c.Pod("pod-a")
	if _, err := a.Facade.Adjust(ctx, &reservation.AdjustParams{Shop: 1, Item: 7, Location: 1, Available: &ten}); err != nil {
		t.Fatal(err)
	}
	res, err := a.Facade.Reserve(ctx, &reservation.ReserveParams{Shop: 1, Token: "t1", TTL: time.Minute,
		Lines: []reservation.Line{{Item: 7, Quantity: 4, Locations: []int64{1}}}})
	if err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve on flags from OFREP: %+v %v", res, err)
	}
	svc.Set(flagdFlags(t, authority.ModeMySQL, 2))
	if d, err := c.Flags.Decide(context.Background(), "pod-a", 1); err != nil || d.Mode != authority.ModeMySQL || d.Version != 2<<flagdoc.KillVersionBits {
		t.Fatalf("after the change the cell decides %+v, %v; want mysql at version 2", d, err)
	}
}

// flags_source = "flagd" with flagd_tls, flagd_ca_file and flagd_selector
// reaches a TLS daemon and follows the selected source only.
func TestCellFlagsFromFlagdTLSSelector(t *testing.T) {
	t.Parallel()
	certs := testcert.New(t)
	daemon := flagdtest.NewTLS(t, flagdFlags(t, authority.ModeRedis, 1), certs.Server)
	daemon.SetSource("reservoir", flagdFlags(t, authority.ModeShadow, 3))
	c := openWithFlags(t, "flags_source = \"flagd\"\nflagd_addr = \""+daemon.Addr()+"\"\nflagd_tls = true\n"+
		"flagd_ca_file = \""+certs.CAFile+"\"\nflagd_selector = \"reservoir\"\n")
	if d, err := c.Flags.Decide(context.Background(), "pod-a", 1); err != nil || d.Mode != authority.ModeShadow || d.Version != 3<<flagdoc.KillVersionBits {
		t.Fatalf("the cell decides %+v, %v; want shadow at epoch 3<<KillVersionBits: the selected source's version 3, no kill switch document", d, err)
	}
	daemon.SetSource("reservoir", flagdFlags(t, authority.ModeMySQL, 4))
	eventually(t, "the selected source's version 4 applies", func() (bool, string) {
		d, err := c.Flags.Decide(context.Background(), "pod-a", 1)
		return err == nil && d.Mode == authority.ModeMySQL && d.Version == 4<<flagdoc.KillVersionBits, fmt.Sprintf("%+v, %v", d, err)
	})
}

// A provider is taken only with flags_source = "provider", and that
// source only with a provider; both refusals say what to do.
func TestCellProviderMatchesTheTopology(t *testing.T) {
	t.Parallel()
	parse := func(flags string) *topology.Config {
		topo, err := topology.Parse([]byte("control_dsn = \"root@tcp(127.0.0.1:1)/c\"\n" + flags +
			"[[pods]]\nname = \"pod-a\"\nmysql_dsn = \"root@tcp(127.0.0.1:1)/a\"\nredis_addr = \"127.0.0.1:1\"\n"))
		if err != nil {
			t.Fatal(err)
		}
		return topo
	}
	p := memprovider.NewInMemoryProvider(nil)
	for _, tc := range []struct {
		cfg  cell.Config
		want string
	}{
		{cell.Config{Topology: parse("flags_source = \"provider\"\n")}, `flags_source = "provider" but this program supplies no OpenFeature provider`},
		{cell.Config{Topology: parse("flags_file = \"f.json\"\n"), Provider: p}, `supplies an OpenFeature provider (InMemoryProvider) but the topology says flags_source = "file"`},
	} {
		if err := tc.cfg.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v; want %q", err, tc.want)
		}
	}
	if err := (cell.Config{Topology: parse("flags_source = \"provider\"\n"), Provider: p}).WithDefaults().Validate(); err != nil {
		t.Errorf("a provider with flags_source = \"provider\": %v", err)
	}
}
