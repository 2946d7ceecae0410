package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/migrations"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// A replica whose flags file cannot be read when it starts does not know
// which store decides a shop (docs/ownership.md, section 7): it starts
// all the same, is not ready (/readyz 503, saying why), and answers every
// reservation call 503 flags_unavailable, touching no store. Once a valid
// file is renamed into place it loads it, becomes ready and serves.
func TestFlagsNotLoadedNotReady(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	topo, pods := topologyFor(t, dir)
	// A symlink loop: unreadable (ELOOP) even for root, and a rename over
	// it replaces the link.
	if err := os.Symlink(filepath.Base(topo.FlagsFile), topo.FlagsFile); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(topo.FlagsFile); err == nil {
		t.Fatal("the flags file is readable: the test would prove nothing")
	}
	c, reg, log, logBuf := openCell(t, topo)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	srv, err := server.New(server.Config{Cell: c, AdminToken: adminToken, InsecureNoAuth: true, Registry: reg, Logger: log, SampleInterval: 100 * time.Millisecond, SeriesWindow: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	h := &harness{t: t, cell: c, srv: srv, http: hs, topo: topo, pods: pods, logBuf: logBuf, flags: flagdoc.FlagsFile{Path: topo.FlagsFile}}

	r := h.do("GET", "/readyz", nil, "")
	if r.status != http.StatusServiceUnavailable || r.body["ready"] != false || r.body["flags_loaded"] != false ||
		!strings.Contains(r.raw, "flags_not_loaded") || strings.Count(r.raw, `"ok":true`) != 3 {
		t.Fatalf("readyz without flags: %d %s", r.status, r.raw)
	}
	if want := `flags_not_loaded: this replica has no valid flags in force from the flags file (flags_source = \"file\", flags_file): the file cannot be read; ` +
		`it answers every reservation call 503 flags_unavailable until a valid file is in place (it watches the file)`; !strings.Contains(r.raw, want) {
		t.Errorf("readyz without flags does not say %s:\n%s", want, r.raw)
	}
	for _, call := range []struct{ method, path string }{
		{"POST", "/v1/shops/1001/reservations"},
		{"POST", "/v1/shops/1001/reservations/t1/claim"},
		{"POST", "/v1/shops/1001/reservations/t1/release"},
		{"GET", "/v1/shops/1001/items/7/availability"},
	} {
		var body any
		if strings.HasSuffix(call.path, "/reservations") {
			body = map[string]any{"token": "t1", "lines": []map[string]any{{"item": 7, "quantity": 1, "locations": []int64{1}}}}
		}
		r := h.do(call.method, call.path, body, "")
		if r.status != http.StatusServiceUnavailable || str(r.body["error"]) != "flags_unavailable" || r.header.Get("Retry-After") == "" {
			t.Errorf("%s %s without flags: %d %s", call.method, call.path, r.status, r.raw)
		}
		if why := problemOf(r, http.StatusServiceUnavailable, "flags_unavailable"); why != "" {
			t.Errorf("%s %s without flags: %s", call.method, call.path, why)
		}
	}
	for name, p := range pods {
		if keys := p.redis.Keys(t); len(keys) != 0 {
			t.Errorf("pod %s: Redis was written without flags: %v", name, keys)
		}
	}
	st := h.admin("GET", "/admin/rollout/status", nil)
	if st.status != 200 || st.body["flags_loaded"] != false || !strings.Contains(st.raw, `"authority":"none"`) {
		t.Errorf("status without flags: %d %s", st.status, trim(st.raw))
	}
	if m := h.do("GET", "/metrics", nil, ""); !strings.Contains(m.raw, "reservoir_rollout_flags_loaded 0") ||
		!strings.Contains(m.raw, `reservoir_dualwrite_flags_unavailable_total{reservoir_pod="pod-a"} 4`) ||
		!strings.Contains(m.raw, `reservoir_rollout_mode{mode="redis",reservoir_pod="pod-a"} 0`) {
		t.Error("the metrics do not say the flags are unavailable")
	}

	// A valid file renamed into place: loaded, ready, served.
	tmp := filepath.Join(dir, "flags.json.new")
	writeFlags(t, tmp, map[string]authority.Mode{"pod-a": authority.ModeShadow})
	if err := os.Rename(tmp, topo.FlagsFile); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r = h.do("GET", "/readyz", nil, ""); r.status != http.StatusOK; r = h.do("GET", "/readyz", nil, "") {
		if time.Now().After(deadline) {
			t.Fatalf("readyz after a valid file was renamed into place: %d %s", r.status, r.raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r.body["flags_loaded"] != true || r.body["not_ready"] != nil {
		t.Errorf("readyz once loaded: %s", r.raw)
	}
	h.stock(1001, 7, 1, 5)
	if r := h.reserve(1001, "t1", 7, 1); r.status != http.StatusCreated || str(r.body["authority"]) != "redis" {
		t.Fatalf("reserve once the flags loaded: %d %s", r.status, r.raw)
	}
}

// /readyz's flags_not_loaded names the flags source in use and what is
// wrong with it, in the topology's terms. Before, it said "no valid flags
// file ... (it watches the file)" whatever the source: with flags_source
// = "database" that sent the operator looking for a file that does not
// exist, when the control database was the wrong one.
func TestFlagsNotLoadedNamesTheSource(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		control func(t *testing.T) string // the control DSN
		want    []string
	}{
		{"no flags document yet", func(t *testing.T) string { return testdb.New(t).DSN },
			[]string{"holds no flags document yet", "reservoir rollout --topology FILE init"}},
		{"a pod's database as the control database", func(t *testing.T) string { return testdb.NewSets(t, migrations.Pod).DSN },
			[]string{"has no rollout_flags table: control_dsn names another database, or it is not migrated"}},
		{"a control database that does not exist", func(t *testing.T) string {
			cfg, err := mysql.ParseDSN(testdb.New(t).DSN)
			if err != nil {
				t.Fatal(err)
			}
			cfg.DBName += "_missing"
			return cfg.FormatDSN()
		}, []string{"the control database fails its ping (", "check control_dsn"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topo, _ := topologyFor(t, t.TempDir())
			topo.FlagsSource, topo.FlagsFile, topo.ControlDSN = topology.FlagsFromDatabase, "", tc.control(t)
			c, reg, log, _ := openCell(t, topo)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = c.Close(ctx)
			})
			srv, err := server.New(server.Config{Cell: c, AdminToken: adminToken, InsecureNoAuth: true, Registry: reg, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Close)
			hs := httptest.NewServer(srv.Handler())
			t.Cleanup(hs.Close)
			h := &harness{t: t, cell: c, srv: srv, http: hs, topo: topo}
			r := h.do("GET", "/readyz", nil, "")
			v := readyView(t, r)
			reason := ""
			for _, s := range v.NotReady {
				if strings.HasPrefix(s, "flags_not_loaded: ") {
					reason = s
				}
			}
			want := append([]string{`from the control database's flags document (flags_source = "database")`, "it polls the control database"}, tc.want...)
			for _, w := range want {
				if !strings.Contains(reason, w) {
					t.Errorf("flags_not_loaded does not say %q:\n%s", w, reason)
				}
			}
			for _, wrong := range []string{"flags file", "watches the file"} {
				if strings.Contains(reason, wrong) {
					t.Errorf("flags_not_loaded says %q under flags_source = \"database\":\n%s", wrong, reason)
				}
			}
		})
	}
}
