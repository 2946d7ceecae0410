package reservoirmain_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/open-feature/go-sdk/openfeature"
	"github.com/open-feature/go-sdk/openfeature/memprovider"

	"github.com/seed31b0e981/reservoir/internal/testbuf"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/reservoirmain"
)

// memFlags is reservoir's two flags in the SDK's in-memory provider, at
// version: pod-a in mode, the kill switch at kill everywhere.
func memFlags(version int64, mode, kill string) map[string]memprovider.InMemoryFlag {
	flag := func(key, def string, pick func(pod string) string) memprovider.InMemoryFlag {
		eval := func(_ memprovider.InMemoryFlag, ec openfeature.FlattenedContext) (any, openfeature.ProviderResolutionDetail) {
			pod, _ := ec["pod"].(string)
			v := pick(pod)
			return v, openfeature.ProviderResolutionDetail{Variant: v, Reason: openfeature.TargetingMatchReason,
				FlagMetadata: openfeature.FlagMetadata{"version": version}}
		}
		return memprovider.InMemoryFlag{Key: key, State: memprovider.Enabled, DefaultVariant: def,
			Variants: map[string]any{def: def}, ContextEvaluator: &eval}
	}
	return map[string]memprovider.InMemoryFlag{
		"reservations.mode": flag("reservations.mode", "redis", func(pod string) string {
			if pod == "pod-a" {
				return mode
			}
			return "redis"
		}),
		"reservations.kill_switch": flag("reservations.kill_switch", "off", func(string) string { return kill }),
	}
}

// A program that supplies its provider through WithFlagsProvider needs
// only a short main; its topology says flags_source = "provider".
func ExampleWithFlagsProvider() {
	provider := func(ctx context.Context, t reservoirmain.Topology) (openfeature.FeatureProvider, error) {
		// A vendor's provider, configured from the environment; the SDK's
		// in-memory one stands in for it here.
		return memprovider.NewInMemoryProvider(memFlags(1, "redis", "off")), nil
	}
	os.Exit(reservoirmain.Main(os.Args[1:], reservoirmain.WithFlagsProvider(provider)))
}

// topologyFile writes a one-pod topology (pod-a, shop 1001) with the
// given flags lines on the test servers.
func topologyFile(t *testing.T, flags string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "topology.toml")
	text := fmt.Sprintf("control_dsn = %q\n%s[[pods]]\nname = \"pod-a\"\nmysql_dsn = %q\nredis_addr = %q\nredis_prefix = %q\nshops = [1001]\n",
		testdb.New(t).DSN, flags, testdb.New(t).DSN, testredis.Addr(t), testredis.New(t).Prefix)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var (
	listeningRE = regexp.MustCompile(`listening on (http://[0-9.:]+)`)
	adminRE     = regexp.MustCompile(`admin on (http://[0-9.:]+)`)
)

func waitFor(t *testing.T, out *testbuf.Buffer, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s in the output after 30s:\n%s", re, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func post(t *testing.T, url string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	res, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

// serve, run through the public package with a program's provider, is
// ready, decides from the provider, and follows its change (here the kill
// switch, at the next version) at the next call.
func TestServeWithAProgramsProvider(t *testing.T) {
	t.Parallel()
	topo := topologyFile(t, "flags_source = \"provider\"\n")
	provider := memprovider.NewInMemoryProvider(memFlags(1, "mysql", "off"))
	var told reservoirmain.Topology
	fn := func(_ context.Context, t reservoirmain.Topology) (openfeature.FeatureProvider, error) {
		told = t
		return provider, nil
	}
	ctx, stop := context.WithCancel(context.Background())
	out, errOut := &testbuf.Buffer{}, &testbuf.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- reservoirmain.Run(ctx, []string{"serve", "--topology", topo, "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
			"--insecure-no-auth", "--log-level", "warn", "--shutdown-timeout", "5s"}, out, errOut, reservoirmain.WithFlagsProvider(fn))
	}()
	t.Cleanup(func() {
		stop()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d:\n%s", code, errOut)
		}
	})
	base, admin := waitFor(t, out, listeningRE), waitFor(t, out, adminRE)
	if told.File != topo || strings.Join(told.Pods, ",") != "pod-a" {
		t.Errorf("the provider function was told %+v; want the file %s and pod-a", told, topo)
	}
	res, err := http.Get(admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("readyz: %d\n%s", res.StatusCode, errOut)
	}
	if code, body := post(t, base+"/v1/shops/1001/items/7/locations/1/adjust", map[string]any{"available": 10}); code != 200 {
		t.Fatalf("adjust: %d %v", code, body)
	}
	reserve := func(tok string) string {
		t.Helper()
		code, body := post(t, base+"/v1/shops/1001/reservations", map[string]any{
			"token": tok, "lines": []map[string]any{{"item": 7, "quantity": 1, "locations": []int64{1}}}})
		if code != 201 {
			t.Fatalf("reserve %s: %d %v", tok, code, body)
		}
		return body["authority"].(string)
	}
	if got := reserve("r1"); got != "mysql" {
		t.Fatalf("with pod-a on mysql the reservation was decided by %s", got)
	}
	provider.UpdateFlags(memFlags(2, "mysql", "redis"))
	if got := reserve("r2"); got != "redis" {
		t.Fatalf("after the kill switch at version 2 the reservation was decided by %s", got)
	}

	// The operator commands of the same program open the same provider.
	var rout, rerr bytes.Buffer
	calls := 0
	count := func(ctx context.Context, t reservoirmain.Topology) (openfeature.FeatureProvider, error) {
		calls++
		return memprovider.NewInMemoryProvider(memFlags(2, "mysql", "redis")), nil
	}
	if code := reservoirmain.Run(context.Background(), []string{"reconcile", "--topology", topo}, &rout, &rerr, reservoirmain.WithFlagsProvider(count)); code != 0 || calls != 1 {
		t.Errorf("reconcile with the program's provider: exit %d, provider built %d times:\n%s%s", code, calls, rout.String(), rerr.String())
	}
}

// The shipped binary (no provider) refuses a topology that asks for one,
// and a program with a provider refuses a topology naming another
// source; both before connecting to anything, saying what to do.
func TestProviderAndTopologyMustAgree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, flags string) string {
		path := filepath.Join(dir, name)
		text := "control_dsn = \"root@tcp(127.0.0.1:1)/c\"\n" + flags + "[[pods]]\nname = \"pod-a\"\nmysql_dsn = \"root@tcp(127.0.0.1:1)/a\"\nredis_addr = \"127.0.0.1:1\"\n"
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	provider := reservoirmain.WithFlagsProvider(func(context.Context, reservoirmain.Topology) (openfeature.FeatureProvider, error) {
		return memprovider.NewInMemoryProvider(nil), nil
	})
	for _, tc := range []struct {
		topo string
		opts []reservoirmain.Option
		want string
	}{
		{write("provider.toml", "flags_source = \"provider\"\n"), nil,
			`flags_source = "provider" but this program supplies no OpenFeature provider: the shipped reservoir binary has none`},
		{write("file.toml", "flags_file = \"flags.json\"\n"), []reservoirmain.Option{provider},
			`this program supplies its own OpenFeature provider, but topology ` + filepath.Join(dir, "file.toml") + ` says flags_source = "file"`},
	} {
		var out, errOut bytes.Buffer
		code := reservoirmain.Run(context.Background(), []string{"serve", "--topology", tc.topo, "--insecure-no-auth", "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"},
			&out, &errOut, tc.opts...)
		if code != 1 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%s: exit %d, %q; want 1 and %q", tc.topo, code, errOut.String(), tc.want)
		}
	}
}
