// Package testdb gives each test its own migrated database on the shared
// MariaDB/MySQL server that scripts/services starts, so tests run in
// parallel without seeing each other's rows; over plain TCP (New) or over
// verified TLS as a user the server accepts only over TLS (NewTLS).
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seed31b0e981/reservoir/internal/testtier"
	"github.com/seed31b0e981/reservoir/internal/tlsclient"
	"github.com/seed31b0e981/reservoir/migrations"
	"github.com/seed31b0e981/reservoir/mysqlstore"
)

// EnvDSN names the variable holding the server's DSN, without a database
// (e.g. root@tcp(127.0.0.1:33306)/). scripts/services prints it.
const EnvDSN = "RESERVOIR_MYSQL_DSN"

// EnvTLSDSN names the variable holding a DSN, without a database, of a user
// the server refuses without TLS (REQUIRE SSL). scripts/services prints it
// when its MariaDB serves TLS.
const EnvTLSDSN = "RESERVOIR_MYSQL_TLS_DSN"

// EnvTLSCA names the variable holding the CA file (PEM) that signed the
// servers' certificates. scripts/services prints it.
const EnvTLSCA = "RESERVOIR_TLS_CA"

// EnvKeep, when "1", keeps test databases for inspection.
const EnvKeep = "RESERVOIR_KEEP_DB"

var (
	adminOnce sync.Once
	admin     *sql.DB
	adminErr  error
)

// ServerDSN returns the server DSN or fails the test with what to run.
// Integration tests never skip silently: a missing server is a failure.
// Under -short the test skips, saying it needs MariaDB (testtier).
func ServerDSN(t testing.TB) string {
	t.Helper()
	testtier.Needs(t, "MariaDB ("+EnvDSN+")")
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		t.Fatalf("%s is not set: start the servers with `eval \"$(scripts/services start)\"` or run `make test`", EnvDSN)
	}
	return dsn
}

// TLSServerDSN returns the TLS user's DSN, set to verify the server against
// the CA of EnvTLSCA (tlsclient.MySQLDSN), or fails the test with what to
// run. Like ServerDSN, it never skips, but under -short.
func TLSServerDSN(t testing.TB) string {
	t.Helper()
	testtier.Needs(t, "MariaDB over TLS ("+EnvTLSDSN+", "+EnvTLSCA+")")
	dsn, ca := os.Getenv(EnvTLSDSN), os.Getenv(EnvTLSCA)
	if dsn == "" || ca == "" {
		t.Fatalf("%s or %s is not set: start the servers with `eval \"$(scripts/services start)\"` or run `make test`; "+
			"a MariaDB started by an older scripts/services serves no TLS: restart it with `scripts/services stop mysql` first", EnvTLSDSN, EnvTLSCA)
	}
	full, err := tlsclient.MySQLDSN(dsn, ca)
	if err != nil {
		t.Fatalf("%s with %s: %v", EnvTLSDSN, EnvTLSCA, err)
	}
	return full
}

func adminDB(t testing.TB) *sql.DB {
	t.Helper()
	dsn := ServerDSN(t)
	adminOnce.Do(func() {
		admin, adminErr = sql.Open("mysql", dsn)
		if adminErr == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			adminErr = admin.PingContext(ctx)
		}
	})
	if adminErr != nil {
		t.Fatalf("connect to %s: %v", dsn, adminErr)
	}
	return admin
}

// DB is a fresh, migrated database.
type DB struct {
	// Name is the database's name.
	Name string
	// DSN opens it, with the settings mysqlstore.DSN adds.
	DSN string
	// DB is a pool on it, closed at cleanup.
	*sql.DB
}

// New creates a database, applies both migration sets (it is a pod's
// database and the control database at once; NewSets chooses) and drops it
// when the test ends (unless RESERVOIR_KEEP_DB=1).
func New(t testing.TB) *DB {
	t.Helper()
	return newOn(t, ServerDSN(t))
}

// NewTLS is New with the database opened as the TLS user over TLS verified
// against the test CA (TLSServerDSN): every statement of the test, the
// migrations included, goes over TLS, or the server refuses it. The
// database is created and dropped over the plain admin connection.
func NewTLS(t testing.TB) *DB {
	t.Helper()
	return newOn(t, TLSServerDSN(t))
}

// newOn creates a database through the admin connection and opens it on
// server.
func newOn(t testing.TB, server string) *DB {
	t.Helper()
	return newMigrated(t, server, upBoth)
}

// newMigrated is newOn with the migration of the new database given.
func newMigrated(t testing.TB, server string, migrate func(context.Context, *sql.DB) error) *DB {
	t.Helper()
	d, drop, err := create(adminDB(t), server, migrate)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if os.Getenv(EnvKeep) == "1" {
			t.Logf("kept database %s", d.Name)
			_ = d.Close()
			return
		}
		drop()
	})
	return d
}

// ForExample is New for runnable examples, which have no *testing.T: it
// panics on failure and returns the cleanup to defer.
func ForExample() (*DB, func()) {
	server := os.Getenv(EnvDSN)
	if server == "" {
		panic(EnvDSN + " is not set: start the servers with `eval \"$(scripts/services start)\"`")
	}
	admin, err := sql.Open("mysql", server)
	if err != nil {
		panic(err)
	}
	d, drop, err := create(admin, server, upBoth)
	if err != nil {
		panic(err)
	}
	return d, func() { drop(); _ = admin.Close() }
}

// upBoth applies both migration sets.
func upBoth(ctx context.Context, db *sql.DB) error {
	_, err := migrations.Up(ctx, db, migrations.Sets()...)
	return err
}

// create makes a database through admin, then opens it on server (the
// server DSN with its user and TLS settings) and migrates it; drop closes
// and drops it.
func create(admin *sql.DB, server string, migrate func(context.Context, *sql.DB) error) (_ *DB, drop func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "rsv_test_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil { //sqlcheck:ok a database name cannot be a parameter; this one is random hex
		return nil, nil, fmt.Errorf("create database %s: %w", name, err)
	}
	var db *sql.DB
	// cleanup, not drop: an error return sets drop to nil before the
	// deferred call below runs.
	cleanup := func() {
		if db != nil {
			_ = db.Close()
		}
		_, _ = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name) //sqlcheck:ok the name made above
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	cfg, err := mysql.ParseDSN(server)
	if err != nil {
		return nil, nil, fmt.Errorf("parse the server DSN: %w", err)
	}
	cfg.DBName = name
	dsn, err := mysqlstore.DSN(cfg.FormatDSN())
	if err != nil {
		return nil, nil, err
	}
	if db, err = mysqlstore.Open(dsn); err != nil {
		return nil, nil, err
	}
	db.SetMaxOpenConns(200)
	if err := migrate(ctx, db); err != nil {
		return nil, nil, fmt.Errorf("migrate %s: %w", name, err)
	}
	return &DB{Name: name, DSN: dsn, DB: db}, cleanup, nil
}

// Count returns SELECT COUNT(*) of a table (a constant name from the test).
func (d *DB) Count(t testing.TB, table string) int64 {
	t.Helper()
	var n int64
	if err := d.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil { //sqlcheck:ok a table name cannot be a parameter; tests pass constants
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// String names the database.
func (d *DB) String() string { return fmt.Sprintf("database %s", d.Name) }

// WaitStatement waits (up to 10 s) until a statement tagged
// /*caller='caller'*/ runs on db's database in another session, as the
// processlist shows it (MariaDB and MySQL 8 alike): the observable sign
// that a call is inside the database, blocked on a lock the test holds.
// Tests synchronise on it instead of sleeping. (InnoDB's lock-wait view
// is not enough: MariaDB takes a unique-key FOR UPDATE lock in the
// optimizer and does not list that wait, and a table lock is no InnoDB
// wait at all.)
func WaitStatement(t testing.TB, db *sql.DB, caller string) {
	t.Helper()
	const q = `SELECT COUNT(*) FROM information_schema.PROCESSLIST
  WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND COMMAND = 'Query' AND INFO LIKE ?`
	for deadline := time.Now().Add(10 * time.Second); ; {
		var n int
		if err := db.QueryRow(q, "/*caller='"+caller+"'*/%").Scan(&n); err != nil {
			t.Fatalf("read the processlist: %v", err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s statement ran within 10 s", caller)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
