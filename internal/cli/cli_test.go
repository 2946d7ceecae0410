package cli

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/migrations"
)

func run(t *testing.T, args ...string) (code int, out, errOut string) {
	t.Helper()
	var o, e bytes.Buffer
	code = Main(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

func TestUsage(t *testing.T) {
	if code, out, _ := run(t, "help"); code != 0 || !strings.Contains(out, "migrate") {
		t.Errorf("help: code %d, out %q", code, out)
	}
	if code, _, errOut := run(t, "nope"); code != 2 || !strings.Contains(errOut, `unknown command "nope"`) {
		t.Errorf("unknown command: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := run(t, "migrate", "sideways"); code != 2 || !strings.Contains(errOut, `unknown action "sideways" (actions: up, status)`) {
		t.Errorf("bad migrate action: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := run(t, "migrate", "--dsn", "", "up"); code != 2 || !strings.Contains(errOut, "give --dsn DSN with --set pod|control|both, or --topology FILE") {
		t.Errorf("missing dsn: code %d, stderr %q", code, errOut)
	}
}

// migrate's usage errors name the flag to give or drop.
func TestMigrateUsage(t *testing.T) {
	t.Setenv("RESERVOIR_TOPOLOGY", "")
	t.Setenv("RESERVOIR_DSN", "")
	topo := filepath.Join(t.TempDir(), "topology.toml")
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"migrate", "up"}, nil, "no database: give --topology FILE (every database it names) or --dsn DSN with --set pod|control|both"},
		{[]string{"migrate", "--dsn", "root@/x", "up"}, nil, "--set is required with --dsn: pod (a pod's mysql_dsn), control (the control_dsn) or both"},
		{[]string{"migrate", "--dsn", "root@/x", "--set", "pods", "up"}, nil, `--set must be pod, control or both, got "pods"; did you mean "pod"?`},
		{[]string{"migrate", "--topology", topo, "--set", "pod", "up"}, nil, "--set is for --dsn: with --topology each database gets the set of its role"},
		{[]string{"migrate", "--topology", topo, "--tls-ca", "ca.pem", "up"}, nil, "--tls-ca is for --dsn"},
		{[]string{"migrate", "--topology", topo, "--dsn", "root@/x", "up"}, nil, "give --topology or --dsn, not both"},
		{[]string{"migrate", "up"}, map[string]string{"RESERVOIR_TOPOLOGY": topo, "RESERVOIR_DSN": "root@/x"}, "RESERVOIR_TOPOLOGY and RESERVOIR_DSN are both set"},
		// A flag on the command line wins over the other's variable.
		{[]string{"migrate", "--dsn", "root@/x", "up"}, map[string]string{"RESERVOIR_TOPOLOGY": topo}, "--set is required with --dsn"},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		code, _, errOut := run(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, "reservoir migrate -h") {
			t.Errorf("%v with %v: code %d, stderr %q, want 2 and %q", c.args, c.env, code, errOut, c.want)
		}
		for k := range c.env {
			t.Setenv(k, "")
		}
	}
	code, out, _ := run(t, "migrate", "-h")
	for _, want := range []string{"--topology FILE", "--dsn DSN", "--set SET", "pod (a pod's mysql_dsn), control (the control_dsn) or both", "the pod set", "the control set"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("migrate -h: code %d, no %q in:\n%s", code, want, out)
		}
	}
}

func TestMigrate(t *testing.T) {
	db := testdb.New(t) // already migrated with both sets: migrate up must be a no-op
	code, out, errOut := run(t, "migrate", "--dsn", db.DSN, "--set", "both", "up")
	if code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("migrate up: code %d, out %q, err %q", code, out, errOut)
	}
	code, out, errOut = run(t, "migrate", "--dsn", db.DSN, "--set", "both", "status")
	if code != 0 || !strings.Contains(out, "00001  applied   pod/00001_unit_pool.sql") || !strings.Contains(out, "00002  applied   control/00002_compare.sql") ||
		strings.Contains(out, "pending") {
		t.Fatalf("migrate status: code %d, out %q, err %q", code, out, errOut)
	}
}

func TestMigrateCreatesDatabase(t *testing.T) {
	db := testdb.New(t)
	name := db.Name + "_fresh"
	t.Cleanup(func() { _, _ = db.Exec("DROP DATABASE IF EXISTS " + name) })
	dsn := testdb.ServerDSN(t) + name
	code, out, errOut := run(t, "migrate", "--dsn", dsn, "--set", "pod", "--create", "up")
	if code != 0 || !strings.Contains(out, "applied migration 00001 (pod)") || strings.Contains(out, "(control)") {
		t.Fatalf("migrate --set pod --create up: code %d, out %q, err %q", code, out, errOut)
	}
	// status reads only: the control set on a pod's database is pending,
	// and no table of it is created by asking.
	code, out, errOut = run(t, "migrate", "--dsn", dsn, "--set", "control", "status")
	if code != 0 || !strings.Contains(out, "00002  pending   control/00002_compare.sql") {
		t.Fatalf("migrate --set control status: code %d, out %q, err %q", code, out, errOut)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ? AND (table_name LIKE 'rollout%' OR table_name LIKE 'compare%' OR table_name = ?)",
		name, migrations.Control.Table()).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d control table(s) in a pod's database (%v), want none", n, err)
	}
}

// tablesOf lists a database's tables, ascending.
func tablesOf(t *testing.T, db *sql.DB, name string) []string {
	t.Helper()
	rows, err := db.Query("SELECT table_name FROM information_schema.tables WHERE table_schema = ?", name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// writeMigrateTopology writes a topology of the control database and
// pods (name -> DSN), the Redis addresses placeholders: migrate opens
// only the databases.
func writeMigrateTopology(t *testing.T, control string, pods ...[2]string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "control_dsn = %q\nflags_file = %q\n", control, filepath.Join(t.TempDir(), "flags.json"))
	for _, p := range pods {
		fmt.Fprintf(&b, "\n[[pods]]\nname = %q\nmysql_dsn = %q\nredis_addr = \"127.0.0.1:1\"\nredis_prefix = %q\n", p[0], p[1], p[0]+":")
	}
	path := filepath.Join(t.TempDir(), "topology.toml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// migrate --topology migrates every database it names with the set of
// its role: the control database the control set, each pod's database the
// pod set, and a database that is both (pod-b's DSN names the control
// database, with other parameters) both. Each line says which database.
func TestMigrateTopology(t *testing.T) {
	admin := testdb.New(t)
	control, podA := admin.Name+"_control", admin.Name+"_pod_a"
	t.Cleanup(func() {
		_, _ = admin.Exec("DROP DATABASE IF EXISTS " + control)
		_, _ = admin.Exec("DROP DATABASE IF EXISTS " + podA)
	})
	server := testdb.ServerDSN(t)
	topo := writeMigrateTopology(t, server+control, [2]string{"pod-a", server + podA}, [2]string{"pod-b", server + control + "?timeout=5s"})
	code, out, errOut := run(t, "migrate", "--topology", topo, "--create", "up")
	if code != 0 {
		t.Fatalf("migrate --topology up: code %d, out %q, err %q", code, out, errOut)
	}
	for _, want := range []string{
		"the control database and pod pod-b's database: applied migration 00001 (pod)\n",
		"the control database and pod pod-b's database: applied migration 00002 (control)\n",
		"pod pod-a's database: applied migration 00010 (pod)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("migrate --topology up: no %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "pod pod-a's database: applied migration 00002") || strings.Contains(out, control) || strings.Contains(out, "root@") {
		t.Errorf("migrate --topology up: a control migration on pod-a, or a DSN:\n%s", out)
	}
	if strings.Index(out, "the control database") > strings.Index(out, "pod pod-a's database") {
		t.Errorf("the control database was not migrated first:\n%s", out)
	}
	podTables := append(migrations.Pod.LegacyTables(), migrations.Pod.Table())
	both := append(slices.Clone(podTables), append(migrations.Control.LegacyTables(), migrations.Control.Table())...)
	slices.Sort(podTables)
	slices.Sort(both)
	if got := tablesOf(t, admin.DB, podA); !slices.Equal(got, podTables) {
		t.Errorf("pod-a's tables %v, want %v", got, podTables)
	}
	if got := tablesOf(t, admin.DB, control); !slices.Equal(got, both) {
		t.Errorf("the control database's (and pod-b's) tables %v, want %v", got, both)
	}
	code, out, errOut = run(t, "migrate", "--topology", topo, "up")
	if code != 0 || strings.Count(out, "schema is up to date") != 2 {
		t.Errorf("migrate --topology up again: code %d, out %q, err %q", code, out, errOut)
	}
	code, out, errOut = run(t, "migrate", "--topology", topo, "status")
	if code != 0 || strings.Contains(out, "pending") || !strings.Contains(out, "pod pod-a's database: pod set (goose_pod_version):") ||
		strings.Contains(out, "pod pod-a's database: control set") {
		t.Errorf("migrate --topology status: code %d, out %q, err %q", code, out, errOut)
	}
}

// An existing deployment, every database migrated by a release before
// the split (the single set at 10, goose_db_version): migrate --topology
// up adopts each database's versions into its sets' tables, drops the
// other role's tables where they are empty (pod-a's control tables),
// keeps every row, and keeps every table of a database with both roles.
func TestMigrateTopologyUpgrade(t *testing.T) {
	control, podA := testdb.NewLegacy(t, migrations.LegacyLatest), testdb.NewLegacy(t, migrations.LegacyLatest)
	for _, q := range []string{
		"INSERT INTO rollout_audit (actor, action, scope, reason, before_flags, after_flags) VALUES ('ana', 'kill', 'global', 'drill', '', '')",
		"INSERT INTO inventory_ledger (shop_id, inventory_item_id, location_id, available) VALUES (2, 1, 1, 5)", // pod-b's, here too
	} {
		if _, err := control.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := podA.Exec("INSERT INTO inventory_ledger (shop_id, inventory_item_id, location_id, available) VALUES (1, 1, 1, 7)"); err != nil {
		t.Fatal(err)
	}
	topo := writeMigrateTopology(t, control.DSN, [2]string{"pod-a", podA.DSN}, [2]string{"pod-b", control.DSN})
	code, out, errOut := run(t, "migrate", "--topology", topo, "up")
	if code != 0 {
		t.Fatalf("migrate --topology up: code %d, out %q, err %q", code, out, errOut)
	}
	for _, want := range []string{
		"the control database and pod pod-b's database: adopted the pod migrations 00001, 00004, 00005, 00006, 00009, 00010 from goose_db_version",
		"the control database and pod pod-b's database: adopted the control migrations 00002, 00003, 00007, 00008 from goose_db_version",
		"pod pod-a's database: adopted the pod migrations 00001, 00004, 00005, 00006, 00009, 00010",
		"pod pod-a's database: dropped the control tables a release before the split made here, all empty: compare_diffs, ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("migrate --topology up: no %q in:\n%s", want, out)
		}
	}
	if n := control.Count(t, "rollout_audit") + control.Count(t, "inventory_ledger"); n != 2 {
		t.Errorf("the control database (and pod-b's) holds %d of its 2 rows", n)
	}
	if n := podA.Count(t, "inventory_ledger"); n != 1 {
		t.Errorf("pod-a's ledger holds %d of its 1 row", n)
	}
	for _, tb := range migrations.Control.LegacyTables() {
		if slices.Contains(tablesOf(t, podA.DB, podA.Name), tb) {
			t.Errorf("pod-a's database still has the control table %s", tb)
		}
	}
}

// migrate --tls-ca verifies the server against the CA, as the topology's
// mysql_tls_ca does: through a user that the server only accepts over TLS
// it reads the status; without the flag the same DSN is refused.
func TestMigrateOverTLS(t *testing.T) {
	db := testdb.New(t)
	cfg, err := mysql.ParseDSN(os.Getenv(testdb.EnvTLSDSN))
	if err != nil || os.Getenv(testdb.EnvTLSDSN) == "" {
		t.Fatalf("%s: %q %v (start the servers with scripts/services)", testdb.EnvTLSDSN, os.Getenv(testdb.EnvTLSDSN), err)
	}
	cfg.DBName = db.Name
	dsn := cfg.FormatDSN()
	code, out, errOut := run(t, "migrate", "--dsn", dsn, "--set", "both", "--tls-ca", os.Getenv(testdb.EnvTLSCA), "status")
	if code != 0 || !strings.Contains(out, "applied") {
		t.Fatalf("migrate --tls-ca status: code %d, out %q, err %q", code, out, errOut)
	}
	if code, _, errOut := run(t, "migrate", "--dsn", dsn, "--set", "both", "status"); code == 0 || !strings.Contains(errOut, "Access denied") {
		t.Errorf("migrate without --tls-ca through a TLS-only user: code %d, err %q", code, errOut)
	}
}
