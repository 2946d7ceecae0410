package server_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/migrations"
)

// schemaDB is a database of its own, migrated with one set up to a version
// the test chooses (testdb's have both sets at the latest).
type schemaDB struct {
	dsn string
	db  *sql.DB
	set *migrations.Set
}

// newSchemaDB creates a database with set migrated up to version (goose
// UpTo) and drops it when the test ends.
func newSchemaDB(t *testing.T, set *migrations.Set, version int64) *schemaDB {
	t.Helper()
	d := testdb.NewSets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := set.Provider(d.DB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, version); err != nil {
		t.Fatalf("migrate %s's %s set up to %d: %v", d.Name, set, version, err)
	}
	return &schemaDB{dsn: d.DSN, db: d.DB, set: set}
}

// before is the set's version before its latest.
func before(set *migrations.Set) int64 {
	vs := set.Versions()
	return vs[len(vs)-2]
}

// up applies every migration of the set, as `reservoir migrate up` does.
func (d *schemaDB) up(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := migrations.Up(ctx, d.db, d.set); err != nil {
		t.Fatal(err)
	}
}

// schemaHarness is a server on topologyFor's two pods whose databases the
// test may swap for ones of its own before the cell opens.
func schemaHarness(t *testing.T, swap map[string]string) (*harness, *server.Server) {
	t.Helper()
	topo, _ := topologyFor(t, t.TempDir())
	for name, dsn := range swap {
		if name == "control" {
			topo.ControlDSN = dsn
			continue
		}
		for i := range topo.Pods {
			if topo.Pods[i].Name == name {
				topo.Pods[i].MySQLDSN = dsn
			}
		}
	}
	writeFlags(t, topo.FlagsFile, nil)
	c, reg, log, logBuf := openCell(t, topo)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx) // a pod behind makes its relay fail: not what is tested here
	})
	srv, err := server.New(server.Config{Cell: c, AdminToken: adminToken, Registry: reg, Logger: log, InsecureNoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &harness{t: t, cell: c, srv: srv, http: hs, topo: topo, logBuf: logBuf}, srv
}

func readyView(t *testing.T, r response) wire.Ready {
	t.Helper()
	var v wire.Ready
	if err := json.Unmarshal([]byte(r.raw), &v); err != nil {
		t.Fatalf("readyz: %d %s: %v", r.status, r.raw, err)
	}
	return v
}

func schemaOf(v wire.Ready, pod string) wire.SchemaHealth {
	for _, s := range v.Schema {
		if s.Pod == pod {
			return s
		}
	}
	return wire.SchemaHealth{}
}

// A pod's database and the control database one migration behind the
// binary: /readyz answers 503 naming each and `reservoir migrate`, and
// no DSN; it stays 503 while one of them is behind, and turns 200 once
// both are migrated, without a restart. CheckSchema (serve's check at
// start) says the same.
func TestReadyzSchemaBehind(t *testing.T) {
	t.Parallel()
	podA, control := newSchemaDB(t, migrations.Pod, before(migrations.Pod)), newSchemaDB(t, migrations.Control, before(migrations.Control))
	h, srv := schemaHarness(t, map[string]string{"pod-a": podA.dsn, "control": control.dsn})

	r := h.do("GET", "/readyz", nil, "")
	v := readyView(t, r)
	if r.status != http.StatusServiceUnavailable || v.Ready {
		t.Fatalf("readyz with two databases behind: %d %s", r.status, r.raw)
	}
	reasons := strings.Join(v.NotReady, "\n")
	for _, want := range []string{"schema_behind: pod pod-a's database is at pod migration", "schema_behind: the control database is at control migration",
		"reservoir migrate --topology FILE up", "reservoir migrate --set pod --dsn DSN up", "reservoir migrate --set control --dsn DSN up",
		"mysql_dsn of pod pod-a", "control_dsn"} {
		if !strings.Contains(reasons, want) {
			t.Errorf("readyz's reasons do not say %q:\n%s", want, reasons)
		}
	}
	if strings.Contains(reasons, "pod-b") {
		t.Errorf("readyz blames pod-b, which is current:\n%s", reasons)
	}
	for _, leak := range []string{podA.dsn, control.dsn, "127.0.0.1", "root@"} {
		if strings.Contains(r.raw, leak) {
			t.Errorf("readyz without a token contains %q: %s", leak, r.raw)
		}
	}
	for pod, want := range map[string]string{"control": "behind", "pod-a": "behind", "pod-b": "current"} {
		set := migrations.Pod
		if pod == "control" {
			set = migrations.Control
		}
		s := schemaOf(v, pod)
		if s.State != want || s.Set != set.Name() || s.Latest != set.Latest() {
			t.Errorf("readyz schema of %s: %+v, want %s against the %s set, latest %d", pod, s, want, set, set.Latest())
		}
		if want == "behind" && (s.Version != before(set) || len(s.Pending) != 1 || s.Pending[0] != set.Latest()) {
			t.Errorf("readyz schema of %s: %+v, want version %d and %d pending", pod, s, before(set), set.Latest())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.CheckSchema(ctx); err == nil || !strings.Contains(err.Error(), "reservoir migrate") {
		t.Errorf("CheckSchema with two databases behind: %v, want an error naming reservoir migrate", err)
	}
	if !strings.Contains(h.logBuf.String(), "schema behind this binary") {
		t.Error("no log line says the schema is behind")
	}

	// Poll /readyz until cond holds (an observable answer, not a guessed
	// delay): a check that found a database behind is trusted for 2s only.
	waitFor := func(cond func(response) bool) response {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			r := h.do("GET", "/readyz", nil, "")
			if cond(r) || time.Now().After(deadline) {
				return r
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	podA.up(t)
	r = waitFor(func(r response) bool { return !strings.Contains(r.raw, "pod pod-a's database") })
	if r.status != http.StatusServiceUnavailable || strings.Contains(r.raw, "pod pod-a's database") || !strings.Contains(r.raw, "the control database") {
		t.Fatalf("readyz with only the control database behind: %d %s", r.status, r.raw)
	}
	control.up(t)
	r = waitFor(func(r response) bool { return r.status == http.StatusOK })
	if v := readyView(t, r); r.status != http.StatusOK || !v.Ready || len(v.NotReady) != 0 {
		t.Fatalf("readyz after migrating both: %d %s", r.status, r.raw)
	}
	if err := srv.CheckSchema(ctx); err != nil {
		t.Errorf("CheckSchema after migrating both: %v", err)
	}
}

// A database ahead of the binary (a newer binary migrated it, as during a
// rolling deploy) leaves the replica ready, says "ahead" in /readyz and
// warns in the log once.
func TestReadyzSchemaAhead(t *testing.T) {
	t.Parallel()
	latest, next := migrations.Pod.Latest(), int64(1000) // a version of a newer binary
	podB := newSchemaDB(t, migrations.Pod, latest)
	if _, err := podB.db.Exec("INSERT INTO goose_pod_version (version_id, is_applied) VALUES (?, TRUE)", next); err != nil {
		t.Fatal(err)
	}
	h, srv := schemaHarness(t, map[string]string{"pod-b": podB.dsn})

	r := h.do("GET", "/readyz", nil, "")
	v := readyView(t, r)
	if r.status != http.StatusOK || !v.Ready {
		t.Fatalf("readyz with a schema ahead: %d %s, want 200", r.status, r.raw)
	}
	if s := schemaOf(v, "pod-b"); s.State != "ahead" || s.Version != next || len(s.Unknown) != 1 || s.Unknown[0] != next || s.Latest != latest {
		t.Errorf("readyz schema of pod-b: %+v, want ahead at %d", s, next)
	}
	if s := schemaOf(v, "pod-a"); s.State != "current" {
		t.Errorf("readyz schema of pod-a: %+v, want current", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.CheckSchema(ctx); err != nil {
		t.Errorf("CheckSchema with a schema ahead: %v, want nil (a warning only)", err)
	}
	if n := strings.Count(h.logBuf.String(), "schema ahead of this binary"); n != 1 {
		t.Errorf("the schema ahead was warned about %d times over two checks, want once:\n%s", n, h.logBuf.String())
	}
}

// Each database is checked against the set of its role, and only that
// one: the control database holding only the control set and pods only
// the pod set are current; a pod's database migrated by a release before
// the split (goose_db_version) is behind, and /readyz says so and what to
// run, until `reservoir migrate` adopts it.
func TestReadyzEachDatabaseItsSet(t *testing.T) {
	t.Parallel()
	control := testdb.NewSets(t, migrations.Control)
	podA := testdb.NewSets(t, migrations.Pod)
	podB := testdb.NewLegacy(t, migrations.LegacyLatest)
	h, _ := schemaHarness(t, map[string]string{"control": control.DSN, "pod-a": podA.DSN, "pod-b": podB.DSN})

	r := h.do("GET", "/readyz", nil, "")
	v := readyView(t, r)
	if r.status != http.StatusServiceUnavailable || len(v.NotReady) != 1 ||
		!strings.Contains(v.NotReady[0], "schema_behind: pod pod-b's database was migrated by a release before the split of the migration sets (goose_db_version at 00010)") ||
		!strings.Contains(v.NotReady[0], "reservoir migrate --set pod --dsn DSN up") {
		t.Fatalf("readyz with pod-b's database from before the split: %d %s", r.status, r.raw)
	}
	for pod, want := range map[string]string{"control": "current", "pod-a": "current", "pod-b": "behind"} {
		if s := schemaOf(v, pod); s.State != want {
			t.Errorf("readyz schema of %s: %+v, want %s", pod, s, want)
		}
	}
	if s := schemaOf(v, "pod-b"); s.Legacy != migrations.LegacyLatest || s.Set != "pod" {
		t.Errorf("readyz schema of pod-b: %+v, want legacy %d against the pod set", s, migrations.LegacyLatest)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := migrations.Up(ctx, podB.DB, migrations.Pod); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for r = h.do("GET", "/readyz", nil, ""); r.status != http.StatusOK && time.Now().Before(deadline); r = h.do("GET", "/readyz", nil, "") {
		time.Sleep(50 * time.Millisecond)
	}
	if r.status != http.StatusOK {
		t.Fatalf("readyz after adopting pod-b's database: %d %s", r.status, r.raw)
	}
}
