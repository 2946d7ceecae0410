package deploy_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// The curl commands of README.md and docs/, sent to a served example: a
// replica with the pods the example topologies name, on fresh databases,
// its checkout and admin listeners apart as `reservoir serve` runs them
// (and one listener for both, as the demo runs it). Each call goes to the
// listener its port names, with its method, headers and body, the
// variables it uses set (a token to the admin token or a client's, by the
// path), and must succeed (2xx), in the order the pages give them.
func TestDocCommandsAgainstAServedExample(t *testing.T) {
	env := newDocEnv(t, thisRepo.root)
	var calls []docCall
	for _, rel := range docPages(t, thisRepo.root) {
		b, err := os.ReadFile(filepath.Join(thisRepo.root, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, commandProblems(rel, string(b), env).calls...)
	}
	if len(calls) < 4 {
		t.Fatalf("only %d curl calls found: the scan is broken", len(calls))
	}

	const adminToken, clientToken = "docs-admin-token-0123456789", "docs-client-token-0123456789"
	dir := t.TempDir()
	topo := &topology.Config{ControlDSN: testdb.New(t).DSN, FlagsFile: filepath.Join(dir, "flags.json"), DefaultRule: "modulo"}
	pods := slices.Sorted(func(yield func(string) bool) {
		for p := range env.pods {
			if !yield(p) {
				return
			}
		}
	})
	for _, name := range pods {
		topo.Pods = append(topo.Pods, topology.Pod{Name: name, MySQLDSN: testdb.New(t).DSN, RedisAddr: testredis.Addr(t),
			RedisPrefix: testredis.New(t).Prefix})
	}
	*topo = topo.WithDefaults()
	if err := topo.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := (flagdoc.FlagsFile{Path: topo.FlagsFile}).Update(func(*flagdoc.Flags) error { return nil }); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := server.NewRegistry()
	c, err := cell.Open(context.Background(), cell.Config{Topology: topo, Registerer: reg, Logger: log, ReapInterval: -1, Heartbeat: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("close the cell: %v", err)
		}
	})
	clients, err := server.ParseClients(fmt.Appendf(nil, "[[clients]]\nname = \"docs\"\ntoken_sha256 = \"%x\"\nroles = [\"checkout\", \"inventory\"]\n",
		sha256.Sum256([]byte(clientToken))))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Cell: c, AdminToken: adminToken, Clients: clients, Registry: reg, Logger: log,
		Reconciler: server.ReportFunc(c.Reconcile)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	apiLn, adminLn := listen(), listen()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, apiLn, adminLn) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("serve: %v", err)
		}
	})
	both := httptest.NewServer(srv.Handler())
	t.Cleanup(both.Close)
	base := map[string]string{"checkout": "http://" + apiLn.Addr().String(), "admin": "http://" + adminLn.Addr().String(), "both": both.URL}

	// Ready first, as an operator would wait for it.
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(base["admin"] + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			err = fmt.Errorf("%s: %s", resp.Status, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the served example is not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	vars := regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)
	for _, call := range calls {
		token := adminToken
		if strings.HasPrefix(call.target, "/v1/") {
			token = clientToken
		}
		expand := func(s string) string {
			return vars.ReplaceAllStringFunc(s, func(string) string { return token })
		}
		var body io.Reader
		if call.hasBody {
			body = strings.NewReader(call.body)
		}
		req, err := http.NewRequest(call.method, base[call.listener]+expand(call.target), body)
		if err != nil {
			t.Errorf("%s: %v", call.where, err)
			continue
		}
		for _, h := range call.headers {
			k, v, _ := strings.Cut(h, ":")
			req.Header.Set(strings.TrimSpace(k), expand(strings.TrimSpace(v)))
		}
		if call.hasBody && req.Header.Get("Content-Type") == "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded") // what curl -d sends
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("%s: %s %s: %v", call.where, call.method, call.target, err)
			continue
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Errorf("%s: %s %s on the %s listener: %s %s", call.where, call.method, call.target, call.listener, resp.Status, answer)
		} else {
			t.Logf("%s: %s %s on the %s listener: %s", call.where, call.method, call.target, call.listener, resp.Status)
		}
	}
}
