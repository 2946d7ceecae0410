package cli

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testredis"
)

// newOperator makes an operator in the operators file at path, through
// `reservoir operators new --append`, and returns their token.
func newOperator(t *testing.T, path, name, role string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"operators", "new", "--name", name, "--role", role, "--append", path}, &out, &errOut); code != 0 {
		t.Fatalf("operators new: exit %d: %s", code, errOut.String())
	}
	return strings.TrimSpace(out.String())
}

// serve --operators: each operator's token opens the admin API to their
// role, and an operator added to the file while serve runs can call it
// without a restart (serve watches the file's directory).
func TestServeOperatorsReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clients, operators := filepath.Join(dir, "clients.toml"), filepath.Join(dir, "operators.toml")
	newClient(t, clients, "reload-test")
	viewer := newOperator(t, operators, "val", "viewer")
	topo := onePodTopology(t, dir, filepath.Join(dir, "flags.json"), testredis.New(t))

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	out, errOut := &serveOutput{}, &serveOutput{}
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"serve", "--topology", topo, "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
			"--clients", clients, "--operators", operators, "--log-level", "info"}, out, errOut)
	}()
	out.waitFor(t, listeningRE, 30*time.Second)
	admin := out.waitFor(t, adminRE, time.Second)

	if code, body := apiCall(t, "GET", admin+"/admin/rollout/history", viewer, nil); code != http.StatusOK {
		t.Fatalf("history as a viewer: %d %v", code, body)
	}
	kill := map[string]any{"scope": "pod:pod-a", "reason": "test"}
	if code, body := apiCall(t, "POST", admin+"/admin/killswitch", viewer, kill); code != http.StatusForbidden || body["role_needed"] != "operator" {
		t.Fatalf("kill switch as a viewer: %d %v", code, body)
	}
	time.Sleep(100 * time.Millisecond) // the watch is on by now
	carol := newOperator(t, operators, "carol", "admin")
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _ := apiCall(t, "GET", admin+"/admin/rollout/history", carol, nil)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("carol, added while serve runs: still %d\n%s", code, errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	logs := errOut.String()
	if !strings.Contains(logs, "admin identities reloaded") || strings.Contains(logs, carol) || strings.Contains(logs, viewer) {
		t.Errorf("the log does not say the operators were reloaded, or shows a token:\n%s", logs)
	}
	stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited %d:\n%s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
}
