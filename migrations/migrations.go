// Package migrations holds reservoir's versioned SQL schema, embedded in the
// binary and applied with goose, and the check of a database against it.
// It owns the schema and nothing else: no queries of the stores live here.
//
// The schema is two migration sets, one per role a database plays:
//
//   - Pod (pod/*.sql): a pod's database, what its stores use: the ledger,
//     the unit pool, holds, claims, replenish locks, keyed adjusts, fences,
//     reservation states and tombstones, the change feed (outbox) and the
//     handoff progress.
//   - Control (control/*.sql): the control database, what the fleet
//     shares: the comparer's diffs, stats, flushes and traffic, and the
//     rollout's state, audit, flags document and replica heartbeats.
//
// Each set keeps its own goose version table (Set.Table), so a database
// records only the set it has, and a database that is both (one database
// for everything, as tests and small setups have it) has both tables.
// Versions are numbered across the two sets: a number names one migration,
// in one set, and a new migration takes the next free number.
//
// Up also moves a database from the single set of earlier releases (every
// table in every database, versions 1 to LegacyLatest in goose_db_version)
// to the sets it is given: see Up and docs/deploy.md.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
)

//go:embed pod/*.sql control/*.sql
var files embed.FS

// Set is one migration set: the schema of one role a database plays.
type Set struct {
	name  string
	table string
	fsys  fs.FS
	// versions are the set's migrations, ascending; paths their files.
	versions []int64
	paths    map[int64]string
	// created are the tables each version up to LegacyLatest creates: what
	// a database migrated with the single set has of this set.
	created map[int64][]string
	store   database.Store
}

var (
	// Pod is the schema of a pod's database (goose version table
	// goose_pod_version).
	Pod = newSet("pod", "goose_pod_version")
	// Control is the schema of the control database (goose version table
	// goose_control_version).
	Control = newSet("control", "goose_control_version")
)

// all are the sets, in the order Up applies them.
var all = []*Set{Pod, Control}

// LegacyTable is goose's default version table, where releases before the
// split recorded the single set. Up reads it to adopt such a database and
// never writes or drops it: binaries of those releases read it for their
// readiness during a rolling deploy.
const LegacyTable = goose.DefaultTablename

// LegacyLatest is the last version of the single set: every version up to
// it is in one of the two sets, with the same number and the same SQL.
const LegacyLatest = 10

// createTable finds the tables a migration's SQL creates.
var createTable = regexp.MustCompile("(?mi)^\\s*CREATE\\s+TABLE\\s+(?:IF\\s+NOT\\s+EXISTS\\s+)?`?(\\w+)`?")

// newSet reads the set's embedded files. It panics on a file goose could
// not number: the embedded files are constant, and this package's tests
// load them.
func newSet(name, table string) *Set {
	sub, err := fs.Sub(files, name)
	if err != nil {
		panic(fmt.Sprintf("migrations: %s: %v", name, err))
	}
	names, err := fs.Glob(sub, "*.sql")
	if err != nil {
		panic(fmt.Sprintf("migrations: %s: list embedded files: %v", name, err)) // a constant pattern: cannot fail
	}
	st, err := database.NewStore(database.DialectMySQL, table)
	if err != nil {
		panic(fmt.Sprintf("migrations: %s: %v", name, err))
	}
	s := &Set{name: name, table: table, fsys: sub, paths: map[int64]string{}, created: map[int64][]string{}, store: st}
	for _, n := range names {
		v, err := goose.NumericComponent(n)
		if err != nil {
			panic(fmt.Sprintf("migrations: embedded file %s/%s: %v", name, n, err))
		}
		s.versions = append(s.versions, v)
		s.paths[v] = n
		if v <= LegacyLatest {
			b, err := fs.ReadFile(sub, n)
			if err != nil {
				panic(fmt.Sprintf("migrations: embedded file %s/%s: %v", name, n, err))
			}
			for _, m := range createTable.FindAllStringSubmatch(string(b), -1) {
				s.created[v] = append(s.created[v], m[1])
			}
		}
	}
	slices.Sort(s.versions)
	return s
}

// Name is "pod" or "control".
func (s *Set) Name() string { return s.name }

// String is the set's name.
func (s *Set) String() string { return s.name }

// Table is the goose version table the set's applied versions are recorded
// in.
func (s *Set) Table() string { return s.table }

// FS is the set's migration files.
func (s *Set) FS() fs.FS { return s.fsys }

// Versions returns the versions of the set's migrations embedded in this
// binary, ascending.
func (s *Set) Versions() []int64 { return slices.Clone(s.versions) }

// Latest returns the set's highest embedded version.
func (s *Set) Latest() int64 { return s.versions[len(s.versions)-1] }

// Path returns the name of a version's file in FS ("00001_unit_pool.sql"),
// or "" when the set has no such version.
func (s *Set) Path(version int64) string { return s.paths[version] }

// LegacyTables returns the tables the set's migrations up to LegacyLatest
// create, ascending: what a database migrated with the single set holds
// of this set.
func (s *Set) LegacyTables() []string {
	var out []string
	for _, ts := range s.created {
		out = append(out, ts...)
	}
	slices.Sort(out)
	return out
}

// Provider returns a goose provider of the set for db (MySQL or MariaDB),
// on the set's version table. It is goose alone: Up, not the provider,
// adopts a database migrated with the single set.
func (s *Set) Provider(db *sql.DB) (*goose.Provider, error) {
	p, err := goose.NewProvider(goose.DialectMySQL, db, s.fsys, goose.WithTableName(s.table))
	if err != nil {
		return nil, fmt.Errorf("migrations: %s set: %w", s.name, err)
	}
	return p, nil
}

// Sets returns both sets, pod first.
func Sets() []*Set { return slices.Clone(all) }

// ParseSets reads the name of a database's sets: "pod", "control" or
// "both".
func ParseSets(name string) ([]*Set, error) {
	switch name {
	case "pod":
		return []*Set{Pod}, nil
	case "control":
		return []*Set{Control}, nil
	case "both":
		return Sets(), nil
	}
	return nil, fmt.Errorf("migrations: no set %q: pod, control or both", name)
}

// SetsName is the name ParseSets reads for sets.
func SetsName(sets []*Set) string {
	sets = normalise(sets)
	if len(sets) == len(all) {
		return "both"
	}
	names := make([]string, len(sets))
	for i, s := range sets {
		names[i] = s.name
	}
	return strings.Join(names, ",")
}

// normalise returns sets without duplicates, in the order of all.
func normalise(sets []*Set) []*Set {
	var out []*Set
	for _, s := range all {
		if slices.Contains(sets, s) {
			out = append(out, s)
		}
	}
	return out
}

// Version is one migration of one set.
type Version struct {
	// Set is the set it belongs to.
	Set *Set
	// Version is its number.
	Version int64
}

// Leftover is the tables the single set made in a database for a role it
// does not have (the control tables of a pod's database, the pod tables of
// the control database), and what Up did with them.
type Leftover struct {
	// Set is the set the tables belong to.
	Set *Set
	// Tables are the ones the database had, ascending.
	Tables []string
	// Dropped is true when every one of them was empty and Up dropped them
	// all. False: NotEmpty holds rows, and every table is kept.
	Dropped bool
	// NotEmpty are the tables that hold rows (none when Dropped).
	NotEmpty []string
}

// Result is what Up did to a database.
type Result struct {
	// Adopted are the versions Up recorded in a set's version table from
	// goose_db_version: those of a database migrated with the single set,
	// whose tables it already has.
	Adopted []Version
	// Applied are the migrations goose applied, set by set, ascending.
	Applied []Version
	// Leftovers are the single set's tables of the roles the database does
	// not have, one entry per set that left some.
	Leftovers []Leftover
}

// Up migrates db as a database holding sets (Pod, Control or both) and
// returns what it did; a Result with what was done before an error comes
// with the error.
//
// A database migrated with the single set of earlier releases (versions
// in goose_db_version, every table there) is adopted first, for each set
// whose version table records nothing yet:
//
//   - For each set in sets: the legacy versions of the set are recorded in
//     the set's table, when the tables they created are all there (none:
//     the set is migrated as on an empty database; some only: an error
//     naming the missing ones, and nothing recorded).
//   - For each set not in sets: its tables are dropped if every one of
//     them is empty, under a write lock on them all, so no row written
//     meanwhile is lost; if one holds a row, all are kept and reported in
//     Result.Leftovers. A set whose version table records versions is
//     never touched: the database has that role too.
//
// goose_db_version itself stays as it is. Then goose applies each set's
// pending migrations on its own version table.
func Up(ctx context.Context, db *sql.DB, sets ...*Set) (Result, error) {
	var res Result
	sets = normalise(sets)
	if len(sets) == 0 {
		return res, errors.New("migrations: Up needs a set: Pod, Control or both")
	}
	if err := adopt(ctx, db, sets, &res); err != nil {
		return res, err
	}
	for _, s := range sets {
		p, err := s.Provider(db)
		if err != nil {
			return res, err
		}
		applied, err := p.Up(ctx)
		for _, r := range applied {
			if r.Error == nil {
				res.Applied = append(res.Applied, Version{Set: s, Version: r.Source.Version})
			}
		}
		if err != nil {
			return res, fmt.Errorf("migrations: %s set: up: %w", s.name, err)
		}
	}
	return res, nil
}

// State is a database's schema compared with one set's migrations embedded
// in this binary.
type State struct {
	// Current is the set's highest version the database has applied (0:
	// none, or no version table at all).
	Current int64
	// Latest is the set's highest version this binary embeds.
	Latest int64
	// Pending are the set's embedded versions the database has not
	// applied, ascending. While there is one the schema is behind the
	// binary: `reservoir migrate` applies them.
	Pending []int64
	// Unknown are the versions the set's table records that this binary
	// does not embed, ascending: a newer binary migrated it (the schema is
	// ahead). An older binary keeps working against a newer schema during
	// a rolling deploy, so this is worth a warning, not an outage.
	Unknown []int64
	// Legacy is the highest version goose_db_version records when the
	// set's own table records none: the database was migrated with the
	// single set of an earlier release, and `reservoir migrate` has not
	// adopted it yet. 0 otherwise.
	Legacy int64
}

// Behind reports whether the database lacks a migration this binary needs.
func (s State) Behind() bool { return len(s.Pending) > 0 }

// Ahead reports whether the database has a migration this binary does not
// know.
func (s State) Ahead() bool { return len(s.Unknown) > 0 }

// errNoSuchTable is MySQL's ER_NO_SUCH_TABLE.
const errNoSuchTable = 1146

// applied reads a goose version table with goose's own query, so the
// check and `reservoir migrate` never disagree on what is applied. It
// returns the versions applied (never 0, the row goose writes when it
// creates the table) and whether the table exists.
func applied(ctx context.Context, db database.DBTxConn, st database.Store) (map[int64]bool, bool, error) {
	rows, err := st.ListMigrations(ctx, db)
	var my *mysql.MySQLError
	if errors.As(err, &my) && my.Number == errNoSuchTable {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("migrations: read %s: %w", st.Tablename(), err)
	}
	// Rows come newest first; a version's newest row says whether it is
	// applied (goose's older API recorded a rollback as a row with
	// is_applied false instead of deleting the version's row).
	out := map[int64]bool{}
	seen := map[int64]bool{}
	for _, r := range rows {
		if r.Version == 0 || seen[r.Version] {
			continue
		}
		seen[r.Version] = true
		if r.IsApplied {
			out[r.Version] = true
		}
	}
	return out, true, nil
}

// legacyStore reads goose_db_version.
var legacyStore = func() database.Store {
	st, err := database.NewStore(database.DialectMySQL, LegacyTable)
	if err != nil {
		panic(fmt.Sprintf("migrations: %v", err)) // constant arguments
	}
	return st
}()

// Check compares what db has applied of the set with the set's embedded
// migrations. It only reads (goose's version table of the set, and
// goose_db_version when that one records nothing): unlike a goose
// Provider, it never creates a table, so a readiness probe can call it
// with a user that may not run DDL. A database that was never migrated
// (no version table) has every migration of the set pending. It returns
// the query's error otherwise (no connection, no SELECT right on the
// table, ctx done), and a zero State with it.
func (s *Set) Check(ctx context.Context, db database.DBTxConn) (State, error) {
	done, _, err := applied(ctx, db, s.store)
	if err != nil {
		return State{}, err
	}
	st := State{Latest: s.Latest()}
	if len(done) == 0 {
		legacy, _, err := applied(ctx, db, legacyStore)
		if err != nil {
			return State{}, err
		}
		for v := range legacy {
			st.Legacy = max(st.Legacy, v)
		}
	}
	embedded := map[int64]bool{}
	for _, v := range s.versions {
		embedded[v] = true
		if !done[v] {
			st.Pending = append(st.Pending, v)
		}
	}
	for v := range done {
		st.Current = max(st.Current, v)
		if !embedded[v] {
			st.Unknown = append(st.Unknown, v)
		}
	}
	slices.Sort(st.Unknown)
	return st, nil
}
