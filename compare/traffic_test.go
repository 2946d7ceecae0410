package compare_test

import (
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/internal/testdb"
)

// Every call a facade takes is traffic, compared or not: two replicas'
// Served counts of two pods, in modes where nothing is compared (redis,
// mysql_only) and where everything is (shadow), add up per pod and per
// mode in compare_traffic; the observations (Totals) are untouched; a
// window after them counts nothing; a comparer closed counts no more.
func TestTrafficEveryModeAcrossReplicas(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := ctxT(t)
	r1, _ := newComparer(t, db.DB, compare.Config{})
	r2, _ := newComparer(t, db.DB, compare.Config{FlushInterval: 20 * time.Millisecond}) // flushes by itself
	since := time.Now().Add(-time.Minute)
	for _, r := range []*compare.Comparer{r1, r2} {
		for range 30 {
			r.Served("busy", "redis", compare.OpReserve)
			r.Served("busy", "redis", compare.OpClaim)
		}
		for range 5 {
			r.Served("quiet", "redis", compare.OpReserve)
			r.Served("quiet", "mysql_only", compare.OpRelease)
		}
		r.Served("quiet", "shadow", compare.OpAdjust)
	}
	for _, r := range []*compare.Comparer{r1, r2} {
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := r1.Traffic(ctx, since)
	if err != nil {
		t.Fatal(err)
	}
	if b := tr["busy"]; b.Calls != 120 || b.ByMode["redis"] != 120 {
		t.Errorf("busy: %+v, want 120 calls in redis mode", b)
	}
	if q := tr["quiet"]; q.Calls != 22 || q.ByMode["redis"] != 10 || q.ByMode["mysql_only"] != 10 || q.ByMode["shadow"] != 2 {
		t.Errorf("quiet: %+v, want 22 calls: redis 10, mysql_only 10, shadow 2", q)
	}
	if _, ok := tr["idle"]; ok || len(tr) != 2 {
		t.Errorf("traffic %+v: want the two pods that took calls", tr)
	}
	if tot, err := r1.Totals(ctx, "", since); err != nil || tot.Observations != 0 {
		t.Errorf("traffic counted as observations: %d, %v", tot.Observations, err)
	}
	if later, err := r1.Traffic(ctx, time.Now().Add(2*time.Minute)); err != nil || len(later) != 0 {
		t.Errorf("a window after every call: %+v, %v", later, err)
	}

	if err := r1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r1.Served("busy", "redis", compare.OpReserve)
	if err := r1.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if tr, err := r2.Traffic(ctx, since); err != nil || tr["busy"].Calls != 120 {
		t.Errorf("after Close: busy %+v, %v; want 120 still", tr["busy"], err)
	}
}

// Traffic rows are kept as long as the stats, and cleaned up with them.
func TestTrafficRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, compare.Config{StatsRetention: time.Hour, Window: time.Minute})
	ctx := ctxT(t)
	old := time.Now().UTC().Add(-3 * time.Hour).Truncate(time.Minute)
	if _, err := b.db.Exec("INSERT INTO compare_traffic (pod, window_start, mode, op, n) VALUES ('p', ?, 'redis', 'reserve', 7)", old); err != nil {
		t.Fatal(err)
	}
	b.c.Served("p", "redis", compare.OpReserve)
	if err := b.c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := b.c.Cleanup(ctx)
	if err != nil || res.Traffic != 1 {
		t.Fatalf("cleanup: %+v %v; want the old traffic row", res, err)
	}
	if tr, err := b.c.Traffic(ctx, old); err != nil || tr["p"].Calls != 1 {
		t.Errorf("after cleanup: %+v %v; want the recent call only", tr, err)
	}
}
