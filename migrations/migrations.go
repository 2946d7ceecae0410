// Package migrations holds reservoir's versioned SQL schema, embedded in the
// binary and applied with goose, and the check of a database against it
// (Check: which embedded migrations it lacks, which it has that the binary
// does not know). It owns the schema and nothing else: no queries of the
// stores live here, and it reads goose's version table only through goose.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"

	"github.com/go-sql-driver/mysql"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
)

//go:embed *.sql
var files embed.FS

// FS is the migration files.
var FS fs.FS = files

// Provider returns a goose provider for db (MySQL or MariaDB).
func Provider(db *sql.DB) (*goose.Provider, error) {
	p, err := goose.NewProvider(goose.DialectMySQL, db, files)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}

// Up applies every pending migration and returns the versions applied.
func Up(ctx context.Context, db *sql.DB) ([]int64, error) {
	p, err := Provider(db)
	if err != nil {
		return nil, err
	}
	res, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: up: %w", err)
	}
	applied := make([]int64, 0, len(res))
	for _, r := range res {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}

// versions are the embedded migrations' versions, ascending, read once
// from the file names as goose reads them (NNNNN_name.sql).
var versions = sync.OnceValue(func() []int64 {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		panic(fmt.Sprintf("migrations: list embedded files: %v", err)) // a constant pattern: cannot fail
	}
	out := make([]int64, 0, len(names))
	for _, n := range names {
		v, err := goose.NumericComponent(n)
		if err != nil {
			panic(fmt.Sprintf("migrations: embedded file %s: %v", n, err)) // caught by this package's tests
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return out
})

// Versions returns the versions of the migrations embedded in this binary,
// ascending: the schema it was built for.
func Versions() []int64 { return slices.Clone(versions()) }

// Latest returns the highest embedded version: a database is current when
// it has applied every version up to it.
func Latest() int64 {
	v := versions()
	return v[len(v)-1]
}

// State is a database's schema compared with the migrations embedded in
// this binary.
type State struct {
	// Current is the highest version the database has applied (0: none,
	// or no version table at all).
	Current int64
	// Latest is the highest version this binary embeds (Latest()).
	Latest int64
	// Pending are the embedded versions the database has not applied,
	// ascending. While there is one the schema is behind the binary:
	// `reservoir migrate --dsn DSN up` applies them.
	Pending []int64
	// Unknown are the versions the database has applied that this binary
	// does not embed, ascending: a newer binary migrated it (the schema is
	// ahead). An older binary keeps working against a newer schema during
	// a rolling deploy, so this is worth a warning, not an outage.
	Unknown []int64
}

// Behind reports whether the database lacks a migration this binary needs.
func (s State) Behind() bool { return len(s.Pending) > 0 }

// Ahead reports whether the database has a migration this binary does not
// know.
func (s State) Ahead() bool { return len(s.Unknown) > 0 }

// store reads goose's version table with goose's own query, so this check
// and `reservoir migrate` can never disagree on what is applied.
var store = sync.OnceValues(func() (database.Store, error) {
	return database.NewStore(database.DialectMySQL, goose.DefaultTablename)
})

// errNoSuchTable is MySQL's ER_NO_SUCH_TABLE.
const errNoSuchTable = 1146

// Check compares what db has applied with the embedded migrations. It only
// reads (one query on goose's version table): unlike a goose Provider, it
// never creates the version table, so a readiness probe can call it with
// a user that may not run DDL. A database that was never migrated (no
// version table) has every migration pending. It returns the query's error
// otherwise (no connection, no SELECT right on the table, ctx done), and
// a zero State with it.
func Check(ctx context.Context, db database.DBTxConn) (State, error) {
	st, err := store()
	if err != nil {
		return State{}, fmt.Errorf("migrations: %w", err)
	}
	rows, err := st.ListMigrations(ctx, db)
	var my *mysql.MySQLError
	if errors.As(err, &my) && my.Number == errNoSuchTable {
		rows, err = nil, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("migrations: read %s: %w", goose.DefaultTablename, err)
	}
	// Rows come newest first; a version's newest row says whether it is
	// applied (goose's older API recorded a rollback as a row with
	// is_applied false instead of deleting the version's row).
	applied := map[int64]bool{}
	seen := map[int64]bool{}
	for _, r := range rows {
		if r.Version == 0 || seen[r.Version] {
			continue // 0 is the row goose writes when it creates the table
		}
		seen[r.Version] = true
		if r.IsApplied {
			applied[r.Version] = true
		}
	}
	s := State{Latest: Latest()}
	embedded := map[int64]bool{}
	for _, v := range versions() {
		embedded[v] = true
		if !applied[v] {
			s.Pending = append(s.Pending, v)
		}
	}
	for v := range applied {
		s.Current = max(s.Current, v)
		if !embedded[v] {
			s.Unknown = append(s.Unknown, v)
		}
	}
	slices.Sort(s.Unknown)
	return s, nil
}
