package migrations_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"slices"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/migrations"
	"github.com/seed31b0e981/reservoir/mysqlstore"
)

// emptyDB creates a database with no table at all (testdb's are migrated
// already) and drops it when the test ends.
func emptyDB(t *testing.T) *sql.DB {
	t.Helper()
	server := testdb.ServerDSN(t)
	admin, err := sql.Open("mysql", server)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "rsv_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(server)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = name
	db, err := mysqlstore.Open(cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = db.Close()
		_, _ = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name)
	})
	return db
}

func check(t *testing.T, db *sql.DB) migrations.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := migrations.Check(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// The embedded versions are what `reservoir migrate` applies: ascending,
// distinct, numbered from 1 without a gap.
func TestVersions(t *testing.T) {
	t.Parallel()
	vs := migrations.Versions()
	if len(vs) == 0 {
		t.Fatal("no embedded migration")
	}
	for i, v := range vs {
		if v != int64(i+1) {
			t.Fatalf("versions %v: want 1..%d without a gap", vs, len(vs))
		}
	}
	if migrations.Latest() != vs[len(vs)-1] {
		t.Errorf("Latest() = %d, want %d", migrations.Latest(), vs[len(vs)-1])
	}
	vs[0] = 99 // a copy: the package's list stays as it is
	if migrations.Versions()[0] != 1 {
		t.Error("Versions returned the package's own slice")
	}
}

// Check walks a database through every state /readyz tells apart: never
// migrated, one migration behind, current, ahead (a newer binary's
// migration applied), and a version rolled back by goose's older API (a
// row with is_applied false). Each is shown as the state it is, so the
// check is seen failing on a schema that is behind, not only passing on
// one that is current.
func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := emptyDB(t)
	latest := migrations.Latest()
	all := migrations.Versions()

	st := check(t, db)
	if !st.Behind() || st.Ahead() || st.Current != 0 || st.Latest != latest || !slices.Equal(st.Pending, all) {
		t.Fatalf("never migrated: %+v, want every version pending", st)
	}
	var tables int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatalf("Check created %d table(s): it must only read", tables)
	}

	p, err := migrations.Provider(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, latest-1); err != nil {
		t.Fatal(err)
	}
	st = check(t, db)
	if !st.Behind() || st.Current != latest-1 || !slices.Equal(st.Pending, []int64{latest}) || st.Ahead() {
		t.Fatalf("one behind: %+v, want current %d and %d pending", st, latest-1, latest)
	}

	if _, err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	st = check(t, db)
	if st.Behind() || st.Ahead() || st.Current != latest || len(st.Pending) != 0 {
		t.Fatalf("migrated: %+v, want current at %d", st, latest)
	}

	// A newer binary's migration (this one does not embed it).
	if _, err := db.ExecContext(ctx, "INSERT INTO goose_db_version (version_id, is_applied) VALUES (?, TRUE)", latest+1); err != nil {
		t.Fatal(err)
	}
	st = check(t, db)
	if st.Behind() || !st.Ahead() || st.Current != latest+1 || !slices.Equal(st.Unknown, []int64{latest + 1}) {
		t.Fatalf("ahead: %+v, want %d unknown and nothing pending", st, latest+1)
	}

	// goose's older API records a rollback as a newer row with is_applied
	// false: the newest row of a version decides.
	if _, err := db.ExecContext(ctx, "INSERT INTO goose_db_version (version_id, is_applied) VALUES (?, FALSE), (?, FALSE)", latest+1, latest); err != nil {
		t.Fatal(err)
	}
	st = check(t, db)
	if !st.Behind() || st.Ahead() || !slices.Equal(st.Pending, []int64{latest}) || st.Current != latest-1 {
		t.Fatalf("rolled back: %+v, want %d pending, nothing unknown", st, latest)
	}
}

// A database that cannot be read is an error, not "behind": the caller
// reports it as unreadable instead of asking for a migration.
func TestCheckUnreadable(t *testing.T) {
	t.Parallel()
	db := emptyDB(t)
	_ = db.Close()
	st, err := migrations.Check(context.Background(), db)
	if err == nil {
		t.Fatalf("Check on a closed pool: %+v, want an error", st)
	}
	if st.Behind() || st.Ahead() {
		t.Errorf("Check's state with an error: %+v, want zero", st)
	}
}
