package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/internal/testbuf"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

const adminToken = "test-admin-token-0123456789"

// clientToken is the harness's checkout API client (roles checkout and
// inventory, every shop); do sends it on /v1 calls unless told otherwise.
const clientToken = "test-client-token-0123456789"

// anonymous, as do's token, sends no Authorization header at all.
const anonymous = "-"

// testClients accepts clientToken, plus the clients of extra (a clients
// file's entries).
func testClients(t testing.TB, extra string) *server.Clients {
	t.Helper()
	sum := sha256.Sum256([]byte(clientToken))
	c, err := server.ParseClients([]byte(fmt.Sprintf("[[clients]]\nname = \"test\"\ntoken_sha256 = \"%x\"\nroles = [\"checkout\", \"inventory\"]\n\n%s", sum, extra)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// podBundle is one test pod's servers.
type podBundle struct {
	db    *testdb.DB
	redis *testredis.Redis
}

// harness is a server on fresh databases and key prefixes: pod-a (shops
// 1001, 1002) and pod-b (shop 2001), a control database, a flags file.
type harness struct {
	t      *testing.T
	cell   *cell.Cell
	srv    *server.Server
	http   *httptest.Server
	flags  flagdoc.FlagsFile
	topo   *topology.Config
	pods   map[string]*podBundle
	ctl    *rollout.Controller
	logBuf *syncBuffer
}

type options struct {
	// modes per pod, written to the flags file before the server starts.
	modes map[string]authority.Mode
	// plan is a plan file's TOML; "" means no plan (no controller).
	plan string
	// noToken starts the server with the admin API disabled.
	noToken bool
	// noHTTP leaves the handler out of an httptest server.
	noHTTP bool
	// clients are extra clients file entries beside the harness's own.
	clients string
	// deadRedis names a pod whose Redis address answers nothing.
	deadRedis string
	// noRelay starts no relay (cell.Config.NoRelay): MySQL's changes stay
	// in the feed until a handoff drains them, so the relay lag grows.
	noRelay bool
	// operators is an operators file's content ("": none): the admin API
	// accepts its operators beside the shared adminToken.
	operators string
	// files are credentials files the server rereads (the clients file
	// replaces the harness's clients, the operators file operators).
	files server.CredentialFiles
	// sweep, with noRelay, starts each pod's handoff sweeper all the same
	// (as the cell does beside the relay): the fences follow every flags
	// change and the status can say a store decides.
	sweep bool
	// tracing starts the server with Config.Tracing (trace_test.go
	// installs the tracer provider).
	tracing bool
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer = testbuf.Buffer

// topologyFor builds a two-pod topology on fresh databases and prefixes.
func topologyFor(t testing.TB, dir string) (*topology.Config, map[string]*podBundle) {
	t.Helper()
	control := testdb.New(t)
	pods := map[string]*podBundle{}
	topo := &topology.Config{ControlDSN: control.DSN, FlagsFile: filepath.Join(dir, "flags.json"), DefaultRule: "pod:pod-a"}
	for _, p := range []struct {
		name  string
		shops []int64
	}{{"pod-a", []int64{1001, 1002}}, {"pod-b", []int64{2001}}} {
		b := &podBundle{db: testdb.New(t), redis: testredis.New(t)}
		pods[p.name] = b
		topo.Pods = append(topo.Pods, topology.Pod{Name: p.name, MySQLDSN: b.db.DSN, RedisAddr: testredis.Addr(t),
			RedisPrefix: b.redis.Prefix, Shops: p.shops})
	}
	*topo = topo.WithDefaults()
	if err := topo.Validate(); err != nil {
		t.Fatal(err)
	}
	return topo, pods
}

// writeFlags writes the flags file with modes per pod, through
// FlagsFile.Update as the controller does, so the flags carry a version
// (the epoch a handoff to the store they name needs: at version 0 a shop
// stays with Redis whatever the mode). Without modes it is the default
// file, at version 1.
func writeFlags(tb testing.TB, path string, modes map[string]authority.Mode) {
	tb.Helper()
	if _, _, err := (flagdoc.FlagsFile{Path: path}).Update(func(f *flagdoc.Flags) error {
		for pod, m := range modes {
			if err := f.SetMode(flagdoc.PodScope(pod), m); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
}

// openCell opens a cell on topo as the server tests run it: no reaper,
// fast flag polling and comparer flushes, a debug log kept in a buffer.
// The caller closes it.
func openCell(tb testing.TB, topo *topology.Config, edit ...func(*cell.Config)) (*cell.Cell, *prometheus.Registry, *slog.Logger, *syncBuffer) {
	tb.Helper()
	logBuf := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg := server.NewRegistry()
	cfg := cell.Config{
		Topology: topo, Registerer: reg, Logger: log, ReapInterval: -1, FlagPollInterval: 20 * time.Millisecond,
		Compare: compare.Config{FlushInterval: 100 * time.Millisecond, CleanupInterval: -1},
	}
	for _, e := range edit {
		e(&cfg)
	}
	c, err := cell.Open(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return c, reg, log, logBuf
}

func setup(t *testing.T, o options) *harness {
	t.Helper()
	dir := t.TempDir()
	topo, pods := topologyFor(t, dir)
	for i := range topo.Pods {
		if topo.Pods[i].Name == o.deadRedis {
			topo.Pods[i].RedisAddr = "127.0.0.1:1" // nothing listens on port 1
		}
	}
	writeFlags(t, topo.FlagsFile, o.modes)
	c, reg, log, logBuf := openCell(t, topo, func(c *cell.Config) { c.NoRelay = o.noRelay })
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("close cell: %v", err)
		}
	})
	h := &harness{t: t, cell: c, flags: flagdoc.FlagsFile{Path: topo.FlagsFile}, topo: topo, pods: pods, logBuf: logBuf}
	if o.noRelay && o.sweep {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, p := range c.Pods() {
			wg.Go(func() {
				_ = p.Mirror.RunSweeper(ctx, mirror.SweeperConfig{Wanted: p.Facade.Wanted, Version: c.Flags.AppliedVersion, Replica: "harness"})
			})
		}
		t.Cleanup(func() { cancel(); wg.Wait() }) // before the cell closes (cleanups run last first)
	}
	if o.plan != "" {
		path := filepath.Join(dir, "plan.toml")
		if err := os.WriteFile(path, []byte(o.plan), 0o644); err != nil {
			t.Fatal(err)
		}
		plan, err := rollout.LoadPlan(path)
		if err != nil {
			t.Fatal(err)
		}
		h.ctl, err = rollout.NewController(rollout.ControllerConfig{DB: c.Control, Flags: h.flags, Plan: plan, Stats: c.Comparer,
			Reconciler: c.Reconciler, Lag: c, Handoffs: c, InForce: c.Flags.InForce})
		if err != nil {
			t.Fatal(err)
		}
	}
	token := adminToken
	if o.noToken {
		token = ""
	}
	clients := testClients(t, o.clients)
	var (
		ops *server.Operators
		err error
	)
	if o.operators != "" {
		if ops, err = server.ParseOperators([]byte(o.operators)); err != nil {
			t.Fatal(err)
		}
	}
	if o.files.Clients != "" {
		if clients, err = server.LoadClients(o.files.Clients); err != nil {
			t.Fatal(err)
		}
	}
	if o.files.Operators != "" {
		if ops, err = server.LoadOperators(o.files.Operators); err != nil {
			t.Fatal(err)
		}
	}
	h.srv, err = server.New(server.Config{
		Cell: c, Controller: h.ctl, AdminToken: token, Registry: reg, Logger: log, Clients: clients,
		Operators: ops, CredentialFiles: o.files,
		Reconciler:     server.ReportFunc(c.Reconcile),
		SampleInterval: 100 * time.Millisecond, SeriesWindow: time.Second, RequestTimeout: 10 * time.Second,
		Tracing: o.tracing,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.srv.Close)
	if !o.noHTTP {
		h.http = httptest.NewServer(h.srv.Handler())
		t.Cleanup(h.http.Close)
	}
	return h
}

// response is an HTTP answer with its JSON body decoded.
type response struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// do sends a request; body may be a string (sent as is) or a value
// (encoded as JSON), sent as application/json unless headers say
// otherwise. token "" sends the harness client's token on /v1 calls and
// none elsewhere; anonymous sends none.
func (h *harness) do(method, path string, body any, token string, headers ...string) response {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, h.http.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if token == "" && strings.HasPrefix(path, "/v1/") {
		token = clientToken
	}
	if token != "" && token != anonymous {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := response{status: res.StatusCode, header: res.Header, raw: string(raw)}
	if ct := res.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/json") || strings.HasPrefix(ct, "application/problem+json") {
		_ = json.Unmarshal(raw, &r.body)
	}
	return r
}

func (h *harness) admin(method, path string, body any) response {
	h.t.Helper()
	return h.do(method, path, body, adminToken)
}

// stock sets available stock for item x location of a shop through the API.
func (h *harness) stock(shop, item, loc, available int64) {
	h.t.Helper()
	r := h.do("POST", pathf("/v1/shops/%d/items/%d/locations/%d/adjust", shop, item, loc), map[string]any{"available": available}, "")
	if r.status != 200 {
		h.t.Fatalf("adjust: %d %s", r.status, r.raw)
	}
}

// reserve places a one-line hold.
func (h *harness) reserve(shop int64, token string, item, qty int64) response {
	h.t.Helper()
	return h.do("POST", pathf("/v1/shops/%d/reservations", shop), map[string]any{
		"token": token, "ttl_ms": 60000,
		"lines": []map[string]any{{"item": item, "quantity": qty, "locations": []int64{1}}},
	}, "")
}

// waitHandoffs waits until every pod's handoff sweeper has reported the
// flags version this replica applies with no shop pending: until then
// the admin status says the handoffs are under way rather than which
// store decides. It returns that version.
func (h *harness) waitHandoffs() int64 {
	h.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, _ := h.cell.Flags.AppliedVersion(ctx)
		var behind []string
		for _, p := range h.cell.Pods() {
			r, ok, err := h.cell.Handoffs(ctx, p.Name)
			if err != nil || !ok || r.FlagsVersion != v || r.Pending > 0 {
				behind = append(behind, fmt.Sprintf("%s: %+v %v %v", p.Name, r, ok, err))
			}
		}
		if len(behind) == 0 {
			return v
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("the handoffs of flags version %d were not all reported done: %s", v, strings.Join(behind, "; "))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// flush writes this replica's compare stats, so /admin/stats has them.
func (h *harness) flush() {
	h.t.Helper()
	for _, p := range h.cell.Pods() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = p.Facade.Close(ctx) // waits for shadow calls in flight; the facade stays usable
		cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.cell.Comparer.Flush(ctx); err != nil {
		h.t.Fatal(err)
	}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func num(v any) float64 {
	f, _ := v.(float64)
	return f
}

func pathf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
