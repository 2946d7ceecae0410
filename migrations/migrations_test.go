package migrations_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/migrations"
)

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func check(t *testing.T, s *migrations.Set, db *sql.DB) migrations.State {
	t.Helper()
	st, err := s.Check(ctxFor(t), db)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// tables lists db's tables, ascending.
func tables(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out) // in Go's order: the server's collation sorts '_' apart
	return out
}

// The tables of each role, as the code uses them: mysqlstore (and the
// cell's pods) query the pod tables on each pod's database; compare and
// rollout query the control tables on the control database only (the
// cell hands them its Control pool).
var (
	podTables = []string{"available_units", "handoff_progress", "inventory_ledger", "pool_replenish_locks", "reservation_claims",
		"reservation_fences", "reservation_outbox", "reservations", "reserved_quantities", "stock_adjustments"}
	controlTables = []string{"compare_diffs", "compare_flushes", "compare_stats", "compare_traffic",
		"rollout_audit", "rollout_flags", "rollout_replicas", "rollout_state"}
)

// The versions of both sets are numbered together: 1..N without a gap, no
// number in both sets, each set ascending; the single set's versions
// (up to LegacyLatest) are all there.
func TestVersions(t *testing.T) {
	t.Parallel()
	var union []int64
	for _, s := range migrations.Sets() {
		vs := s.Versions()
		if len(vs) == 0 {
			t.Fatalf("%s set: no migration", s)
		}
		if !slices.IsSorted(vs) || s.Latest() != vs[len(vs)-1] {
			t.Errorf("%s set: versions %v, latest %d", s, vs, s.Latest())
		}
		for _, v := range vs {
			if s.Path(v) == "" {
				t.Errorf("%s set: version %d has no file", s, v)
			}
		}
		vs[0] = 99 // a copy: the set's list stays as it is
		if s.Versions()[0] == 99 {
			t.Errorf("%s set: Versions returned the set's own slice", s)
		}
		union = append(union, s.Versions()...)
	}
	slices.Sort(union)
	for i, v := range union {
		if v != int64(i+1) {
			t.Fatalf("versions of both sets %v: want 1..%d, each once", union, len(union))
		}
	}
	if union[len(union)-1] < migrations.LegacyLatest {
		t.Errorf("the sets end at %d, before the single set's last version %d", union[len(union)-1], migrations.LegacyLatest)
	}
	if migrations.Pod.Table() == migrations.Control.Table() || migrations.Pod.Table() == migrations.LegacyTable || migrations.Control.Table() == migrations.LegacyTable {
		t.Errorf("version tables %s, %s and the single set's %s must differ", migrations.Pod.Table(), migrations.Control.Table(), migrations.LegacyTable)
	}
	for name, want := range map[string][]*migrations.Set{"pod": {migrations.Pod}, "control": {migrations.Control}, "both": migrations.Sets()} {
		got, err := migrations.ParseSets(name)
		if err != nil || !slices.Equal(got, want) || migrations.SetsName(got) != name {
			t.Errorf("ParseSets(%q) = %v, %v (name %q)", name, got, err, migrations.SetsName(got))
		}
	}
	if _, err := migrations.ParseSets("all"); err == nil {
		t.Error(`ParseSets("all"): no error`)
	}
}

// Which tables the single set made for each role: the pod tables in the
// pod set, the control tables in the control set, none in both.
func TestClassification(t *testing.T) {
	t.Parallel()
	if got := migrations.Pod.LegacyTables(); !slices.Equal(got, podTables) {
		t.Errorf("pod set's tables %v, want %v", got, podTables)
	}
	if got := migrations.Control.LegacyTables(); !slices.Equal(got, controlTables) {
		t.Errorf("control set's tables %v, want %v", got, controlTables)
	}
}

// A database migrated fresh has its sets' tables and nothing else: a pod's
// database no rollout or compare table, the control database no pool
// table, one database of both roles every table; each set's version in
// its own table, and no goose_db_version.
func TestFresh(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		sets []*migrations.Set
		want []string
	}{
		{"pod", []*migrations.Set{migrations.Pod}, append(slices.Clone(podTables), migrations.Pod.Table())},
		{"control", []*migrations.Set{migrations.Control}, append(slices.Clone(controlTables), migrations.Control.Table())},
		{"both", migrations.Sets(), slices.Concat(podTables, controlTables, []string{migrations.Pod.Table(), migrations.Control.Table()})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.NewSets(t, c.sets...)
			slices.Sort(c.want)
			if got := tables(t, db.DB); !slices.Equal(got, c.want) {
				t.Errorf("tables %v, want %v", got, c.want)
			}
			for _, s := range migrations.Sets() {
				st := check(t, s, db.DB)
				if slices.Contains(c.sets, s) {
					if st.Behind() || st.Ahead() || st.Current != s.Latest() || st.Legacy != 0 {
						t.Errorf("%s set: %+v, want current at %d", s, st, s.Latest())
					}
				} else if !slices.Equal(st.Pending, s.Versions()) {
					t.Errorf("%s set on a database without it: %+v, want every version pending", s, st)
				}
			}
			// Again: nothing to do.
			res, err := migrations.Up(ctxFor(t), db.DB, c.sets...)
			if err != nil || len(res.Applied)+len(res.Adopted)+len(res.Leftovers) != 0 {
				t.Errorf("Up on a current database: %+v, %v; want nothing done", res, err)
			}
		})
	}
	if _, err := migrations.Up(ctxFor(t), testdb.NewSets(t).DB); err == nil {
		t.Error("Up with no set: no error")
	}
}

// Check walks a database through every state /readyz tells apart: never
// migrated, one migration behind, current, ahead (a newer binary's
// migration applied), and a version rolled back by goose's older API (a
// row with is_applied false). Each is shown as the state it is, so the
// check is seen failing on a schema that is behind, not only passing on
// one that is current. Each set is checked on its own version table.
func TestCheck(t *testing.T) {
	t.Parallel()
	for _, s := range migrations.Sets() {
		t.Run(s.Name(), func(t *testing.T) {
			t.Parallel()
			ctx := ctxFor(t)
			db := testdb.NewSets(t).DB
			latest := s.Latest()
			all := s.Versions()
			before := all[len(all)-2]

			st := check(t, s, db)
			if !st.Behind() || st.Ahead() || st.Current != 0 || st.Latest != latest || !slices.Equal(st.Pending, all) || st.Legacy != 0 {
				t.Fatalf("never migrated: %+v, want every version pending", st)
			}
			if got := tables(t, db); len(got) != 0 {
				t.Fatalf("Check created table(s) %v: it must only read", got)
			}

			p, err := s.Provider(db)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.UpTo(ctx, before); err != nil {
				t.Fatal(err)
			}
			st = check(t, s, db)
			if !st.Behind() || st.Current != before || !slices.Equal(st.Pending, []int64{latest}) || st.Ahead() {
				t.Fatalf("one behind: %+v, want current %d and %d pending", st, before, latest)
			}

			if _, err := migrations.Up(ctx, db, s); err != nil {
				t.Fatal(err)
			}
			st = check(t, s, db)
			if st.Behind() || st.Ahead() || st.Current != latest || len(st.Pending) != 0 {
				t.Fatalf("migrated: %+v, want current at %d", st, latest)
			}

			// A newer binary's migration (this one does not embed it).
			next := int64(1000)
			if _, err := db.ExecContext(ctx, "INSERT INTO "+s.Table()+" (version_id, is_applied) VALUES (?, TRUE)", next); err != nil {
				t.Fatal(err)
			}
			st = check(t, s, db)
			if st.Behind() || !st.Ahead() || st.Current != next || !slices.Equal(st.Unknown, []int64{next}) {
				t.Fatalf("ahead: %+v, want %d unknown and nothing pending", st, next)
			}

			// goose's older API records a rollback as a newer row with
			// is_applied false: the newest row of a version decides.
			if _, err := db.ExecContext(ctx, "INSERT INTO "+s.Table()+" (version_id, is_applied) VALUES (?, FALSE), (?, FALSE)", next, latest); err != nil {
				t.Fatal(err)
			}
			st = check(t, s, db)
			if !st.Behind() || st.Ahead() || !slices.Equal(st.Pending, []int64{latest}) || st.Current != before {
				t.Fatalf("rolled back: %+v, want %d pending, nothing unknown", st, latest)
			}
		})
	}
}

// A database the single set migrated, not yet adopted: each set is behind
// (every version pending), and Legacy says where the single set stands.
func TestCheckLegacy(t *testing.T) {
	t.Parallel()
	db := testdb.NewLegacy(t, migrations.LegacyLatest)
	for _, s := range migrations.Sets() {
		st := check(t, s, db.DB)
		if !st.Behind() || st.Current != 0 || st.Legacy != migrations.LegacyLatest || !slices.Equal(st.Pending, s.Versions()) {
			t.Errorf("%s set on a single-set database: %+v, want every version pending and legacy %d", s, st, migrations.LegacyLatest)
		}
	}
}

// A database that cannot be read is an error, not "behind": the caller
// reports it as unreadable instead of asking for a migration.
func TestCheckUnreadable(t *testing.T) {
	t.Parallel()
	db := testdb.NewSets(t)
	_ = db.Close()
	st, err := migrations.Pod.Check(context.Background(), db.DB)
	if err == nil {
		t.Fatalf("Check on a closed pool: %+v, want an error", st)
	}
	if st.Behind() || st.Ahead() {
		t.Errorf("Check's state with an error: %+v, want zero", st)
	}
}

// fill writes one row in table, every column that needs a value given
// one of its type: the test needs rows, not meaningful ones, in every
// table, including those a later migration adds.
func fill(t *testing.T, db *sql.DB, table string) {
	t.Helper()
	rows, err := db.Query(`SELECT column_name, data_type FROM information_schema.columns
  WHERE table_schema = DATABASE() AND table_name = ? AND is_nullable = 'NO' AND column_default IS NULL AND extra NOT LIKE '%auto_increment%'
  ORDER BY ordinal_position`, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var cols, marks []string
	var vals []any
	for rows.Next() {
		var col, typ string
		if err := rows.Scan(&col, &typ); err != nil {
			t.Fatal(err)
		}
		cols, marks = append(cols, col), append(marks, "?")
		switch {
		case strings.Contains(typ, "int"):
			vals = append(vals, 1)
		case typ == "datetime" || typ == "timestamp":
			vals = append(vals, "2024-05-06 07:08:09")
		default:
			vals = append(vals, "x")
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	q := fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", table, strings.Join(cols, ", "), strings.Join(marks, ", "))
	if _, err := db.Exec(q, vals...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// snapshot is each table's rows and checksum: what must not change.
func snapshot(t *testing.T, db *sql.DB, tables []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, tb := range tables {
		var n int64
		if err := db.QueryRow("SELECT COUNT(*) FROM " + tb).Scan(&n); err != nil {
			t.Fatalf("count %s: %v", tb, err)
		}
		var name string
		var sum sql.NullInt64
		if err := db.QueryRow("CHECKSUM TABLE "+tb).Scan(&name, &sum); err != nil {
			t.Fatalf("checksum %s: %v", tb, err)
		}
		out[tb] = fmt.Sprintf("%d rows, checksum %d", n, sum.Int64)
	}
	return out
}

func legacyVersions(s *migrations.Set) []int64 {
	var out []int64
	for _, v := range s.Versions() {
		if v <= migrations.LegacyLatest {
			out = append(out, v)
		}
	}
	return out
}

// postLegacyVersions are the set's versions after the single set's last.
func postLegacyVersions(s *migrations.Set) []int64 {
	var out []int64
	for _, v := range s.Versions() {
		if v > migrations.LegacyLatest {
			out = append(out, v)
		}
	}
	return out
}

// alteredAfterLegacy are the tables a migration after LegacyLatest adds a
// column to: their checksum changes with the column, so only their rows
// are counted (00011 adds reservation_outbox.trace).
var alteredAfterLegacy = []string{"reservation_outbox"}

// sameTable compares two snapshots of table tb: its rows and checksum, or
// only its rows when a later migration altered it.
func sameTable(tb, before, after string) bool {
	if slices.Contains(alteredAfterLegacy, tb) {
		b, _, _ := strings.Cut(before, ",")
		a, _, _ := strings.Cut(after, ",")
		return a == b
	}
	return before == after
}

func versionsOf(vs []migrations.Version, s *migrations.Set) []int64 {
	var out []int64
	for _, v := range vs {
		if v.Set == s {
			out = append(out, v.Version)
		}
	}
	return out
}

// The upgrade from the single set: a database at version 10 with rows in
// the pod tables, the control tables or both (every table, or one of the
// other role's), migrated as a pod's database, the control database, or
// both. Nothing of a role the database
// has is lost (every row, every checksum), nor of a role it does not have
// when those tables hold rows (kept, and reported); another role's empty
// tables are dropped. Each set's versions are adopted into its own table,
// goose_db_version stays as it was (older binaries read it during a
// rolling deploy), the sets check current, and running it again changes
// nothing.
func TestUpgradeFromSingleSet(t *testing.T) {
	t.Parallel()
	pod, control := migrations.Pod, migrations.Control
	cases := []struct {
		name      string
		sets      []*migrations.Set
		rowsIn    []string // the tables that get a row before the upgrade
		dropped   *migrations.Set
		keptSet   *migrations.Set
		wantGone  []string
		wantKept  []string // of the role the database does not have
		notEmpty  []string
		adoptedBy []*migrations.Set
	}{
		{name: "pod database", sets: []*migrations.Set{pod}, rowsIn: podTables,
			dropped: control, wantGone: controlTables, adoptedBy: []*migrations.Set{pod}},
		{name: "control database", sets: []*migrations.Set{control}, rowsIn: controlTables,
			dropped: pod, wantGone: podTables, adoptedBy: []*migrations.Set{control}},
		{name: "rows in both, migrated as both", sets: migrations.Sets(), rowsIn: slices.Concat(podTables, controlTables),
			adoptedBy: migrations.Sets()},
		{name: "rows in both, migrated as a pod's", sets: []*migrations.Set{pod}, rowsIn: slices.Concat(podTables, controlTables),
			keptSet: control, wantKept: controlTables, notEmpty: controlTables, adoptedBy: []*migrations.Set{pod}},
		{name: "rows in both, migrated as the control database", sets: []*migrations.Set{control}, rowsIn: slices.Concat(podTables, controlTables),
			keptSet: pod, wantKept: podTables, notEmpty: podTables, adoptedBy: []*migrations.Set{control}},
		{name: "one control row, migrated as a pod's", sets: []*migrations.Set{pod}, rowsIn: slices.Concat(podTables, []string{"rollout_audit"}),
			keptSet: control, wantKept: controlTables, notEmpty: []string{"rollout_audit"}, adoptedBy: []*migrations.Set{pod}},
		{name: "one pod row, migrated as the control database", sets: []*migrations.Set{control}, rowsIn: slices.Concat(controlTables, []string{"inventory_ledger"}),
			keptSet: pod, wantKept: podTables, notEmpty: []string{"inventory_ledger"}, adoptedBy: []*migrations.Set{control}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxFor(t)
			db := testdb.NewLegacy(t, migrations.LegacyLatest)
			for _, tb := range c.rowsIn {
				fill(t, db.DB, tb)
			}
			all := slices.Concat(podTables, controlTables)
			before := snapshot(t, db.DB, all)
			legacyBefore := snapshot(t, db.DB, []string{migrations.LegacyTable})

			res, err := migrations.Up(ctx, db.DB, c.sets...)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range migrations.Sets() {
				want := []int64(nil)
				if slices.Contains(c.sets, s) {
					want = postLegacyVersions(s)
				}
				if got := versionsOf(res.Applied, s); !slices.Equal(got, want) {
					t.Errorf("%s set applied %v, want %v: the single set at %d is every version of both sets up to it, and only the set's later versions apply", s, got, want, migrations.LegacyLatest)
				}
			}
			for _, s := range migrations.Sets() {
				want := []int64(nil)
				if slices.Contains(c.adoptedBy, s) {
					want = legacyVersions(s)
				}
				if got := versionsOf(res.Adopted, s); !slices.Equal(got, want) {
					t.Errorf("%s set adopted %v, want %v", s, got, want)
				}
			}
			switch {
			case c.dropped != nil:
				if len(res.Leftovers) != 1 || res.Leftovers[0].Set != c.dropped || !res.Leftovers[0].Dropped || !slices.Equal(res.Leftovers[0].Tables, c.wantGone) {
					t.Errorf("leftovers %+v, want the %s tables %v dropped", res.Leftovers, c.dropped, c.wantGone)
				}
			case c.keptSet != nil:
				if len(res.Leftovers) != 1 || res.Leftovers[0].Set != c.keptSet || res.Leftovers[0].Dropped ||
					!slices.Equal(res.Leftovers[0].Tables, c.wantKept) || !slices.Equal(res.Leftovers[0].NotEmpty, c.notEmpty) {
					t.Errorf("leftovers %+v, want the %s tables %v kept, %v not empty", res.Leftovers, c.keptSet, c.wantKept, c.notEmpty)
				}
			default:
				if len(res.Leftovers) != 0 {
					t.Errorf("leftovers %+v, want none", res.Leftovers)
				}
			}

			// Nothing lost: every table still there holds what it held;
			// only the dropped ones are gone, and they were empty.
			have := tables(t, db.DB)
			after := snapshot(t, db.DB, slices.DeleteFunc(slices.Clone(all), func(tb string) bool { return slices.Contains(c.wantGone, tb) }))
			for _, tb := range all {
				gone := !slices.Contains(have, tb)
				switch {
				case gone != slices.Contains(c.wantGone, tb):
					t.Errorf("table %s: gone %v, want %v", tb, gone, !gone)
				case gone && slices.Contains(c.rowsIn, tb):
					t.Errorf("table %s held a row and was dropped", tb)
				case !gone && !sameTable(tb, before[tb], after[tb]):
					t.Errorf("table %s: %s before the upgrade, %s after", tb, before[tb], after[tb])
				}
			}
			if got := snapshot(t, db.DB, []string{migrations.LegacyTable}); got[migrations.LegacyTable] != legacyBefore[migrations.LegacyTable] {
				t.Errorf("%s changed: %v, was %v", migrations.LegacyTable, got, legacyBefore)
			}
			for _, s := range c.sets {
				if st := check(t, s, db.DB); st.Behind() || st.Ahead() || st.Current != s.Latest() || st.Legacy != 0 {
					t.Errorf("%s set after the upgrade: %+v, want current", s, st)
				}
			}

			// Again: nothing adopted or applied; kept tables are reported
			// again, and still kept.
			again, err := migrations.Up(ctx, db.DB, c.sets...)
			if err != nil {
				t.Fatal(err)
			}
			if len(again.Applied)+len(again.Adopted) != 0 || len(again.Leftovers) != boolInt(c.keptSet != nil) {
				t.Errorf("Up again: %+v, want nothing done", again)
			}
			if got := snapshot(t, db.DB, slices.DeleteFunc(slices.Clone(all), func(tb string) bool { return slices.Contains(c.wantGone, tb) })); fmt.Sprint(got) != fmt.Sprint(after) {
				t.Errorf("Up again changed the tables: %v, was %v", got, after)
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A database of an older release (the single set at 6) with rows: each
// set adopts what the single set applied of it and goose applies the rest
// (7 and 8 to the control set, 9, 10 and 11 to the pod set), with every row
// kept.
func TestUpgradeFromOlderRelease(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	db := testdb.NewLegacy(t, 6)
	present := tables(t, db.DB)
	var filled []string
	for _, tb := range slices.Concat(podTables, controlTables) {
		if slices.Contains(present, tb) {
			fill(t, db.DB, tb)
			filled = append(filled, tb)
		}
	}
	res, err := migrations.Up(ctx, db.DB, migrations.Sets()...)
	if err != nil {
		t.Fatal(err)
	}
	if got := versionsOf(res.Adopted, migrations.Pod); !slices.Equal(got, []int64{1, 4, 5, 6}) {
		t.Errorf("pod set adopted %v, want 1, 4, 5, 6", got)
	}
	if got := versionsOf(res.Adopted, migrations.Control); !slices.Equal(got, []int64{2, 3}) {
		t.Errorf("control set adopted %v, want 2, 3", got)
	}
	if got := versionsOf(res.Applied, migrations.Pod); !slices.Equal(got, []int64{9, 10, 11}) {
		t.Errorf("pod set applied %v, want 9, 10, 11", got)
	}
	if got := versionsOf(res.Applied, migrations.Control); !slices.Equal(got, []int64{7, 8}) {
		t.Errorf("control set applied %v, want 7, 8", got)
	}
	for _, tb := range filled {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM " + tb).Scan(&n); err != nil || n != 1 {
			t.Errorf("table %s: %d rows (%v), want its 1", tb, n, err)
		}
	}
	want := slices.Concat(podTables, controlTables, []string{migrations.LegacyTable, migrations.Pod.Table(), migrations.Control.Table()})
	slices.Sort(want)
	if got := tables(t, db.DB); !slices.Equal(got, want) {
		t.Errorf("tables %v, want %v", got, want)
	}
}

// A database migrated as a pod's lost its empty control tables; made the
// control database later, it gets the control set from scratch, its pod
// tables untouched.
func TestUpgradeThenAnotherRole(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	db := testdb.NewLegacy(t, migrations.LegacyLatest)
	fill(t, db.DB, "inventory_ledger")
	if _, err := migrations.Up(ctx, db.DB, migrations.Pod); err != nil {
		t.Fatal(err)
	}
	res, err := migrations.Up(ctx, db.DB, migrations.Control)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Adopted) != 0 || !slices.Equal(versionsOf(res.Applied, migrations.Control), migrations.Control.Versions()) || len(res.Leftovers) != 0 {
		t.Errorf("the control set on a pod's database: %+v, want every control migration applied, nothing adopted or left", res)
	}
	if n := db.Count(t, "inventory_ledger"); n != 1 {
		t.Errorf("inventory_ledger: %d rows, want its 1", n)
	}
}

// What the upgrade refuses, changing nothing: a database missing some of
// the tables the single set recorded for the set it is to have, and a
// goose_db_version with versions the single set never had.
func TestUpgradeRefuses(t *testing.T) {
	t.Parallel()
	t.Run("some tables missing", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewLegacy(t, migrations.LegacyLatest)
		if _, err := db.Exec("DROP TABLE handoff_progress"); err != nil {
			t.Fatal(err)
		}
		before := tables(t, db.DB)
		_, err := migrations.Up(ctxFor(t), db.DB, migrations.Pod)
		if err == nil || !strings.Contains(err.Error(), "lacks handoff_progress") {
			t.Fatalf("Up with a pod table missing: %v, want an error naming it", err)
		}
		if got := tables(t, db.DB); !slices.Equal(got, before) {
			t.Errorf("tables %v after the refusal, were %v", got, before)
		}
	})
	t.Run("an unknown version", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewLegacy(t, migrations.LegacyLatest)
		if _, err := db.Exec("INSERT INTO goose_db_version (version_id, is_applied) VALUES (?, TRUE)", migrations.LegacyLatest+1); err != nil {
			t.Fatal(err)
		}
		before := tables(t, db.DB)
		_, err := migrations.Up(ctxFor(t), db.DB, migrations.Pod)
		if err == nil || !strings.Contains(err.Error(), "single set ended at") {
			t.Fatalf("Up with an unknown single-set version: %v, want an error", err)
		}
		if got := tables(t, db.DB); !slices.Equal(got, before) {
			t.Errorf("tables %v after the refusal, were %v", got, before)
		}
	})
}

// The emptiness check and the drop of another role's tables hold a write
// lock on them all: a row a session is writing meanwhile (a replica of an
// earlier release, on a database that is also the control database, the
// operator having named only the pod set) is waited for and seen, and
// the tables are kept. Without the lock the check would read the table
// empty before the writer commits, and drop the row with its table.
func TestLeftoversWaitForWriters(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	db := testdb.NewLegacy(t, migrations.LegacyLatest)
	writer, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = writer.Rollback() }()
	if _, err := writer.Exec("INSERT INTO rollout_audit (actor, action, scope, reason, before_flags, after_flags) VALUES ('ana', 'kill', 'global', 'drill', '', '')"); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		res migrations.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := migrations.Up(ctx, db.DB, migrations.Pod)
		done <- outcome{res, err}
	}()
	testdb.WaitStatement(t, db.DB, "migrate_leftovers") // blocked on the writer's table
	if err := writer.Commit(); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	if len(o.res.Leftovers) != 1 || o.res.Leftovers[0].Dropped || !slices.Equal(o.res.Leftovers[0].NotEmpty, []string{"rollout_audit"}) {
		t.Errorf("leftovers %+v, want the control tables kept for rollout_audit's row", o.res.Leftovers)
	}
	if n := db.Count(t, "rollout_audit"); n != 1 {
		t.Errorf("rollout_audit: %d rows, want the writer's 1", n)
	}
}
