package controldb_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"go/build"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/controldb"
	"github.com/seed31b0e981/reservoir/internal/testdb"
)

// recorder is a Querier that notes every statement it sends, so a test
// can check that each is tagged with its caller.
type recorder struct {
	q       controldb.Querier
	mu      sync.Mutex
	queries []string
}

func (r *recorder) note(query string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queries = append(r.queries, query)
}

func (r *recorder) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	r.note(query)
	return r.q.ExecContext(ctx, query, args...)
}

func (r *recorder) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	r.note(query)
	return r.q.QueryContext(ctx, query, args...)
}

func (r *recorder) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	r.note(query)
	return r.q.QueryRowContext(ctx, query, args...)
}

var _ controldb.Querier = (*recorder)(nil)

// setup returns a fresh migrated database and a recorder in front of it.
// When the test ends, every statement the recorder sent must begin with a
// caller tag (the form internal/testdb.WaitStatement and the processlist
// match) naming one of callers.
func setup(t *testing.T, callers ...string) (*testdb.DB, *recorder) {
	t.Helper()
	t.Parallel()
	db := testdb.New(t)
	rec := &recorder{q: db.DB}
	t.Cleanup(func() {
		if len(rec.queries) == 0 {
			t.Error("no statement was sent")
		}
		for _, q := range rec.queries {
			caller, ok := strings.CutPrefix(q, "/*caller='")
			caller, _, found := strings.Cut(caller, "'*/ ")
			if !ok || !found || !slices.Contains(callers, caller) {
				t.Errorf("statement not tagged with one of %q: %.80s", callers, q)
			}
		}
	})
	return db, rec
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// controldb is the leaf it claims to be: the standard library and the
// MySQL driver, never a package of this module.
func TestImportsOnlyTheStandardLibraryAndTheDriver(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		first, _, _ := strings.Cut(imp, "/")
		if strings.Contains(first, ".") && imp != "github.com/go-sql-driver/mysql" {
			t.Errorf("controldb imports %s", imp)
		}
	}
}

func TestFlagsRow(t *testing.T) {
	db, q := setup(t, "flags", "bench")
	c := ctx(t)
	for name, read := range map[string]func() error{
		"ReadFlags":    func() error { _, _, err := controldb.ReadFlags(c, q, controldb.FlagsDoc); return err },
		"PollFlags":    func() error { _, _, err := controldb.PollFlags(c, q, controldb.FlagsDoc, -1, -1); return err },
		"FlagsWritten": func() error { _, _, err := controldb.FlagsWritten(c, q, controldb.FlagsDoc); return err },
	} {
		if err := read(); !errors.Is(err, sql.ErrNoRows) {
			t.Errorf("%s before any document: %v, want sql.ErrNoRows", name, err)
		}
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 678901000, time.UTC)
	if err := controldb.InsertFlags(c, q, controldb.FlagsDoc, 1, `{"v":1}`, at); err != nil {
		t.Fatal(err)
	}
	if err := controldb.InsertFlags(c, q, controldb.FlagsDoc, 1, `{"v":1}`, at); !controldb.IsDuplicate(err) {
		t.Fatalf("second InsertFlags: %v, want a duplicate key", err)
	}
	if v, doc, err := controldb.ReadFlags(c, q, controldb.FlagsDoc); err != nil || v != 1 || doc != `{"v":1}` {
		t.Fatalf("ReadFlags = %d, %q, %v", v, doc, err)
	}

	// A change under the row's lock, in a transaction.
	tx, err := db.BeginTx(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	txq := &recorder{q: tx}
	if v, doc, err := controldb.LockFlags(c, txq, controldb.FlagsDoc); err != nil || v != 1 || doc != `{"v":1}` {
		t.Fatalf("LockFlags = %d, %q, %v", v, doc, err)
	}
	if err := controldb.UpdateFlags(c, txq, controldb.FlagsDoc, 2, `{"v":2}`, at.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	q.queries = append(q.queries, txq.queries...)

	if v, doc, err := controldb.PollFlags(c, q, controldb.FlagsDoc, 2, -1); err != nil || v != 2 || doc.Valid {
		t.Errorf("PollFlags at the version in force = %d, %v, %v: want 2 and no document", v, doc, err)
	}
	if v, doc, err := controldb.PollFlags(c, q, controldb.FlagsDoc, 1, 2); err != nil || v != 2 || doc.Valid {
		t.Errorf("PollFlags at the version refused = %d, %v, %v: want 2 and no document", v, doc, err)
	}
	if v, doc, err := controldb.PollFlags(c, q, controldb.FlagsDoc, 1, -1); err != nil || v != 2 || doc.String != `{"v":2}` {
		t.Errorf("PollFlags at a new version = %d, %v, %v: want 2 and its document", v, doc, err)
	}
	if v, written, err := controldb.FlagsWritten(c, q, controldb.FlagsDoc); err != nil || v != 2 || !written.Equal(at.Add(time.Second)) {
		t.Errorf("FlagsWritten = %d, %s, %v: want 2 at %s", v, written, err, at.Add(time.Second))
	}
}

func TestStateAndAudit(t *testing.T) {
	_, q := setup(t, "rollout")
	c := ctx(t)
	if _, _, err := controldb.ReadState(c, q); !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("ReadState before any stage: %v, want sql.ErrNoRows", err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for stage := range 3 {
		if err := controldb.WriteState(c, q, stage, t0.Add(time.Duration(stage)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if stage, since, err := controldb.ReadState(c, q); err != nil || stage != 2 || !since.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("ReadState = %d, %s, %v: want the last written", stage, since, err)
	}

	for i, after := range []string{"flags-1", "", "flags-3"} {
		r := controldb.AuditRow{At: t0.Add(time.Duration(i) * time.Second), Actor: "ops", Action: fmt.Sprint("action-", i), Scope: "global",
			Reason: "test", Stage: sql.NullInt64{Int64: int64(i), Valid: true}, Before: "before", After: after}
		if err := controldb.InsertAudit(c, q, r); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := controldb.ListAudit(c, q, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Action != "action-2" || rows[1].Action != "action-1" || rows[0].ID <= rows[1].ID {
		t.Fatalf("ListAudit(2) = %+v, want the two newest, newest first", rows)
	}
	if r := rows[1]; r.Actor != "ops" || r.Scope != "global" || r.Reason != "test" || r.Stage.Int64 != 1 || !r.Stage.Valid ||
		r.Before != "before" || r.After != "" || !r.At.Equal(t0.Add(time.Second)) {
		t.Errorf("ListAudit row = %+v, want what was inserted", r)
	}
	flags, err := controldb.ListAuditFlags(c, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(flags) != 2 || flags[0].After != "flags-3" || flags[1].After != "flags-1" {
		t.Errorf("ListAuditFlags = %+v, want the rows with flags, newest first", flags)
	}
}

func TestReplicas(t *testing.T) {
	db, q := setup(t, "heartbeat", "rollout")
	c := ctx(t)
	if v, err := controldb.AppliedHighest(c, q); err != nil || v != 0 {
		t.Fatalf("AppliedHighest with no replica = %d, %v, want 0", v, err)
	}
	for _, hb := range []struct {
		id      string
		applied int64
	}{{"a", 3}, {"b", 5}, {"a", 4}} {
		if err := controldb.Heartbeat(c, q, hb.id, "pod-a,pod-b", hb.applied); err != nil {
			t.Fatal(err)
		}
	}
	live, err := controldb.LiveReplicas(c, q, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 2 || live[0].ID != "a" || live[0].AppliedVersion != 4 || live[0].Pods != "pod-a,pod-b" || live[1].ID != "b" ||
		live[0].SeenAgo < 0 || live[0].SeenAgo > time.Minute || live[0].AppliedAt.IsZero() {
		t.Fatalf("LiveReplicas = %+v, want a at 4 and b at 5, by id", live)
	}
	if v, err := controldb.AppliedHighest(c, q); err != nil || v != 5 {
		t.Errorf("AppliedHighest = %d, %v, want 5", v, err)
	}
	if err := controldb.DeleteReplica(c, q, "b"); err != nil {
		t.Fatal(err)
	}
	// a was last seen two hours ago: live within a minute no more, and
	// forgotten past an hour.
	if _, err := db.ExecContext(c, `UPDATE rollout_replicas SET last_seen = UTC_TIMESTAMP(6) - INTERVAL 2 HOUR WHERE replica_id = 'a'`); err != nil {
		t.Fatal(err)
	}
	if live, err := controldb.LiveReplicas(c, q, time.Minute); err != nil || len(live) != 0 {
		t.Errorf("LiveReplicas = %+v, %v, want none", live, err)
	}
	if err := controldb.ForgetReplicas(c, q, 3*time.Hour); err != nil || db.Count(t, "rollout_replicas") != 1 {
		t.Errorf("ForgetReplicas(3h) forgot a replica seen 2h ago (%v)", err)
	}
	if err := controldb.ForgetReplicas(c, q, time.Hour); err != nil || db.Count(t, "rollout_replicas") != 0 {
		t.Errorf("ForgetReplicas(1h) kept a replica seen 2h ago (%v)", err)
	}
}

func TestDiffs(t *testing.T) {
	db, q := setup(t, "compare_diff", "compare_read", "compare_cleanup")
	c := ctx(t)
	if err := controldb.InsertDiffs(c, q, nil); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6000000, time.UTC)
	var rows []controldb.DiffRow
	for i, pod := range []string{"pod-a", "pod-b", "pod-a"} {
		rows = append(rows, controldb.DiffRow{Pod: pod, ObservedAt: t0.Add(time.Duration(i) * time.Hour), Mode: "shadow", Op: "reserve",
			Class: "outcome_mismatch", ShopID: int64(i), Token: fmt.Sprint("t", i), AuthorityStore: "redis", ShadowStore: "mysql",
			Authority: `{"store":"redis"}`, Shadow: `{"store":"mysql"}`})
	}
	if err := controldb.InsertDiffs(c, q, rows); err != nil {
		t.Fatal(err)
	}
	all, err := controldb.RecentDiffs(c, q, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || all[0].Token != "t2" || all[2].Token != "t0" {
		t.Fatalf("RecentDiffs of every pod = %+v, want three, newest first", all)
	}
	got, want := all[2], rows[0]
	got.ID, want.AuthorityStore, want.ShadowStore = 0, "", ""
	if !got.ObservedAt.Equal(want.ObservedAt) {
		t.Errorf("observed_at %s, want %s", got.ObservedAt, want.ObservedAt)
	}
	got.ObservedAt = want.ObservedAt
	if got != want {
		t.Errorf("RecentDiffs row = %+v, want %+v", got, want)
	}
	if a, err := controldb.RecentDiffs(c, q, "pod-a", 1); err != nil || len(a) != 1 || a[0].Token != "t2" {
		t.Errorf("RecentDiffs(pod-a, 1) = %+v, %v, want t2", a, err)
	}
	// Retention, in batches of 1: the two oldest, one at a time.
	for i, want := range []int64{1, 1, 0} {
		if n, err := controldb.DeleteDiffsBefore(c, q, t0.Add(90*time.Minute), 1); err != nil || n != want {
			t.Fatalf("DeleteDiffsBefore, batch %d: %d, %v, want %d", i, n, err, want)
		}
	}
	if n := db.Count(t, "compare_diffs"); n != 1 {
		t.Errorf("%d diff rows left, want 1", n)
	}
}

func TestStatsAndTraffic(t *testing.T) {
	db, q := setup(t, "compare_flush", "compare_totals", "compare_traffic", "compare_cleanup")
	c := ctx(t)
	if err := controldb.InsertFlush(c, q, []byte("flush-1")); err != nil {
		t.Fatal(err)
	}
	if err := controldb.InsertFlush(c, q, []byte("flush-1")); !controldb.IsDuplicate(err) {
		t.Fatalf("second InsertFlush: %v, want a duplicate key", err)
	}
	w0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	// 501 rows: two statements of at most 500.
	var stats []controldb.StatsRow
	for i := range 501 {
		stats = append(stats, controldb.StatsRow{Pod: "pod-a", WindowStart: w0.Add(time.Duration(i) * time.Minute), Mode: "shadow", Op: "reserve",
			Class: "match", N: 2, AuthorityN: 2, AuthorityUsSum: 30, AuthorityUsMax: 20, ShadowN: 1, ShadowUsSum: 5, ShadowUsMax: int64(i)})
	}
	before := len(q.queries)
	for range 2 { // increments: twice is twice the counts, the same maxima
		if err := controldb.UpsertStats(c, q, stats); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(q.queries) - before; n != 4 {
		t.Errorf("two UpsertStats of 501 rows sent %d statements, want 4", n)
	}
	sums, err := controldb.SumStats(c, q, "pod-a", w0.Add(500*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := controldb.StatsSum{Mode: "shadow", Op: "reserve", Class: "match", N: 4, AuthorityN: 4, AuthorityUsSum: 60, AuthorityUsMax: 20,
		ShadowN: 2, ShadowUsSum: 10, ShadowUsMax: 500, First: w0.Add(500 * time.Minute)}
	if len(sums) != 1 || !sums[0].First.Equal(want.First) {
		t.Fatalf("SumStats of the last window = %+v, want %+v", sums, want)
	}
	sum := sums[0]
	sum.First = want.First // compared with Equal above
	if sum != want {
		t.Errorf("SumStats of the last window = %+v, want %+v", sums, want)
	}
	if sums, err := controldb.SumStats(c, q, "", w0.Add(time.Second)); err != nil || len(sums) != 1 || sums[0].N != 2000 || !sums[0].First.Equal(w0.Add(time.Minute)) {
		t.Errorf("SumStats of every pod from a second into the first window = %+v, %v, want n 2000 from the second window", sums, err)
	}
	if sums, err := controldb.SumStats(c, q, "pod-b", w0); err != nil || len(sums) != 0 {
		t.Errorf("SumStats of a pod with none = %+v, %v", sums, err)
	}

	traffic := []controldb.TrafficRow{
		{Pod: "pod-a", WindowStart: w0, Mode: "redis", Op: "reserve", N: 3},
		{Pod: "pod-a", WindowStart: w0, Mode: "redis", Op: "claim", N: 4},
		{Pod: "pod-b", WindowStart: w0.Add(time.Hour), Mode: "mysql", Op: "reserve", N: 5},
	}
	if err := controldb.UpsertTraffic(c, q, traffic); err != nil {
		t.Fatal(err)
	}
	if err := controldb.UpsertTraffic(c, q, traffic[:1]); err != nil {
		t.Fatal(err)
	}
	got, err := controldb.SumTraffic(c, q, w0)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(a, b controldb.TrafficSum) int { return strings.Compare(a.Pod, b.Pod) })
	if wantT := []controldb.TrafficSum{{Pod: "pod-a", Mode: "redis", N: 10}, {Pod: "pod-b", Mode: "mysql", N: 5}}; !slices.Equal(got, wantT) {
		t.Errorf("SumTraffic = %+v, want %+v", got, wantT)
	}

	// Retention: windows that started before the cut go, in batches.
	cut := w0.Add(300 * time.Minute)
	var deleted int64
	for {
		n, err := controldb.DeleteStatsBefore(c, q, cut, 100)
		if err != nil {
			t.Fatal(err)
		}
		deleted += n
		if n < 100 {
			break
		}
	}
	if deleted != 300 || db.Count(t, "compare_stats") != 201 {
		t.Errorf("DeleteStatsBefore deleted %d, left %d; want 300 and 201", deleted, db.Count(t, "compare_stats"))
	}
	if n, err := controldb.DeleteTrafficBefore(c, q, w0.Add(time.Minute), 10); err != nil || n != 2 {
		t.Errorf("DeleteTrafficBefore = %d, %v, want pod-a's 2 rows", n, err)
	}
	if n, err := controldb.DeleteFlushesBefore(c, q, time.Now().UTC().Add(time.Hour), 10); err != nil || n != 1 {
		t.Errorf("DeleteFlushesBefore = %d, %v, want the 1 flush id", n, err)
	}
}
