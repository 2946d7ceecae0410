package reservoirmain_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/open-feature/go-sdk/openfeature"
	"github.com/open-feature/go-sdk/openfeature/memprovider"

	"github.com/seed31b0e981/reservoir/internal/ofreptest"
	"github.com/seed31b0e981/reservoir/internal/testbuf"
	"github.com/seed31b0e981/reservoir/reservoirmain"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// The kill switch is reservoir's own whatever serves the modes: with the
// flags from an OFREP service (the shipped binary) and from a program's
// provider (through this package), a kill engaged through the CLI and
// one engaged through the admin API each send pod-a's reservations to
// Redis while the source keeps answering mysql, and each release gives
// them back to MySQL, the source's mode.
func TestKillSwitchWinsOverOFREPAndAProvider(t *testing.T) {
	t.Parallel()
	mysqlDoc := func() string {
		f := flagdoc.NewFlags()
		if err := f.SetMode(flagdoc.PodScope("pod-a"), authority.ModeMySQL); err != nil {
			t.Fatal(err)
		}
		doc, err := f.Render()
		if err != nil {
			t.Fatal(err)
		}
		return string(doc)
	}
	for _, tc := range []struct {
		name  string
		flags func(t *testing.T) (string, []reservoirmain.Option)
	}{
		{"ofrep", func(t *testing.T) (string, []reservoirmain.Option) {
			svc := ofreptest.New(t, mysqlDoc())
			return fmt.Sprintf("flags_source = \"ofrep\"\nofrep_url = %q\n", svc.URL()), nil
		}},
		{"provider", func(t *testing.T) (string, []reservoirmain.Option) {
			fn := func(context.Context, reservoirmain.Topology) (openfeature.FeatureProvider, error) {
				return memprovider.NewInMemoryProvider(memFlags(1, "mysql", "off")), nil
			}
			return "flags_source = \"provider\"\n", []reservoirmain.Option{reservoirmain.WithFlagsProvider(fn)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			flags, opts := tc.flags(t)
			topo := topologyFile(t, flags)
			token := "kill-switch-test-admin-token"
			tokenFile := filepath.Join(t.TempDir(), "admin-token")
			if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(context.Background())
			out, errOut := &testbuf.Buffer{}, &testbuf.Buffer{}
			done := make(chan int, 1)
			go func() {
				done <- reservoirmain.Run(ctx, []string{"serve", "--topology", topo, "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
					"--insecure-no-auth", "--admin-token-file", tokenFile, "--log-level", "warn", "--shutdown-timeout", "5s"}, out, errOut, opts...)
			}()
			t.Cleanup(func() {
				stop()
				if code := <-done; code != 0 {
					t.Errorf("serve exited %d:\n%s", code, errOut)
				}
			})
			base, admin := waitFor(t, out, listeningRE), waitFor(t, out, adminRE)
			if code, body := post(t, base+"/v1/shops/1001/items/7/locations/1/adjust", map[string]any{"available": 1000}); code != 200 {
				t.Fatalf("adjust: %d %v", code, body)
			}
			n := 0
			// decides waits until a new reservation of pod-a is decided by
			// want.
			decides := func(what, want string) {
				t.Helper()
				deadline := time.Now().Add(10 * time.Second)
				for {
					n++
					code, body := post(t, base+"/v1/shops/1001/reservations", map[string]any{
						"token": fmt.Sprintf("t%d", n), "lines": []map[string]any{{"item": 7, "quantity": 1, "locations": []int64{1}}}})
					if code == 201 && body["authority"] == want {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: a reservation answered %d %v; want one decided by %s\n%s", what, code, body, want, errOut)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			// cli runs a rollout command, which waits for the fleet (the
			// serve above, whose heartbeat reports the epoch: the command
			// compares the kill switch document's bits of it).
			cli := func(args ...string) {
				t.Helper()
				var o, e bytes.Buffer
				if code := reservoirmain.Run(context.Background(), append([]string{"rollout", "--topology", topo, "--actor", "ana"}, args...), &o, &e, opts...); code != 0 {
					t.Fatalf("rollout %v: exit %d\n%s%s", args, code, o.String(), e.String())
				}
				if !strings.Contains(o.String(), "obeyed by 1/1 replicas") {
					t.Errorf("rollout %v does not say the replica obeyed:\n%s%s", args, o.String(), e.String())
				}
			}
			adminCall := func(method string, body any) {
				t.Helper()
				b, _ := json.Marshal(body)
				req, err := http.NewRequest(method, admin+"/admin/killswitch", bytes.NewReader(b))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != 200 {
					t.Fatalf("%s /admin/killswitch: %d", method, res.StatusCode)
				}
			}

			decides("the source's mode", "mysql")
			cli("kill", "--scope", "pod:pod-a", "--state", "redis", "--reason", "from the CLI")
			decides("killed through the CLI", "redis")
			cli("release", "--scope", "pod:pod-a", "--reason", "CLI release")
			decides("released through the CLI", "mysql")
			adminCall("POST", map[string]any{"scope": "pod:pod-a", "state": "redis", "reason": "from the admin API"})
			decides("killed through the admin API", "redis")
			adminCall("DELETE", map[string]any{"scope": "pod:pod-a", "reason": "admin API release"})
			decides("released through the admin API", "mysql")
		})
	}
}
