package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/seed31b0e981/reservoir/internal/testdb"
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
	if code, _, errOut := run(t, "migrate", "--dsn", "", "up"); code != 2 || !strings.Contains(errOut, "give --dsn DSN or set RESERVOIR_DSN") {
		t.Errorf("missing dsn: code %d, stderr %q", code, errOut)
	}
}

func TestMigrate(t *testing.T) {
	db := testdb.New(t) // already migrated: migrate up must be a no-op
	code, out, errOut := run(t, "migrate", "--dsn", db.DSN, "up")
	if code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("migrate up: code %d, out %q, err %q", code, out, errOut)
	}
	code, out, errOut = run(t, "migrate", "--dsn", db.DSN, "status")
	if code != 0 || !strings.Contains(out, "00001") || !strings.Contains(out, "applied") {
		t.Fatalf("migrate status: code %d, out %q, err %q", code, out, errOut)
	}
}

func TestMigrateCreatesDatabase(t *testing.T) {
	db := testdb.New(t)
	name := db.Name + "_fresh"
	t.Cleanup(func() { _, _ = db.Exec("DROP DATABASE IF EXISTS " + name) })
	dsn := testdb.ServerDSN(t) + name
	code, out, errOut := run(t, "migrate", "--dsn", dsn, "--create", "up")
	if code != 0 || !strings.Contains(out, "applied migration 00001") {
		t.Fatalf("migrate --create up: code %d, out %q, err %q", code, out, errOut)
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
	code, out, errOut := run(t, "migrate", "--dsn", dsn, "--tls-ca", os.Getenv(testdb.EnvTLSCA), "status")
	if code != 0 || !strings.Contains(out, "applied") {
		t.Fatalf("migrate --tls-ca status: code %d, out %q, err %q", code, out, errOut)
	}
	if code, _, errOut := run(t, "migrate", "--dsn", dsn, "status"); code == 0 || !strings.Contains(errOut, "Access denied") {
		t.Errorf("migrate without --tls-ca through a TLS-only user: code %d, err %q", code, errOut)
	}
}
