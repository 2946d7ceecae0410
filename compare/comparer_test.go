package compare_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/reservation"
)

type bundle struct {
	db  *testdb.DB
	c   *compare.Comparer
	reg *prometheus.Registry
}

// quiet discards the comparer's logs.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newComparer builds a comparer on db with a fresh registry; the stats
// flusher and cleanup stay out of the way unless cfg asks for them.
func newComparer(t *testing.T, db *sql.DB, cfg compare.Config) (*compare.Comparer, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.DB, cfg.Registerer = db, reg
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = time.Hour
	}
	if cfg.CleanupInterval == 0 {
		cfg.CleanupInterval = -1
	}
	c, err := compare.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return c, reg
}

func setup(t *testing.T, cfg compare.Config) bundle {
	t.Helper()
	db := testdb.New(t)
	c, reg := newComparer(t, db.DB, cfg)
	return bundle{db: db, c: c, reg: reg}
}

// metric returns the value of a counter (or a histogram's count) with the
// given labels, 0 when absent.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == kv[i] && lp.GetValue() == kv[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Observations of each kind, with latencies.
func matchObs(pod, mode string, at time.Time) compare.Observation {
	return compare.Observation{Op: compare.OpReserve, Pod: pod, Mode: mode, Shop: 42, Token: "tok-match", At: at,
		Authority: compare.Outcome{Store: redis, Result: "reserved", Allocations: []reservation.Allocation{a1}, Latency: time.Millisecond},
		Shadow:    compare.Outcome{Store: mysql, Result: "reserved", Allocations: []reservation.Allocation{a1}, Latency: 3 * time.Millisecond}}
}

func mismatchObs(pod, mode string, at time.Time, i int) compare.Observation {
	return compare.Observation{Op: compare.OpReserve, Pod: pod, Mode: mode, Shop: 42, Token: fmt.Sprint("tok-", i), At: at,
		Authority: compare.Outcome{Store: redis, Result: "reserved", Allocations: []reservation.Allocation{a1, a2}, Latency: 2 * time.Millisecond},
		Shadow: compare.Outcome{Store: mysql, Result: "insufficient", Latency: 6 * time.Millisecond,
			Short: []reservation.ShortLine{short(1, 10, 1)}}}
}

func TestObserveCountsOnRegistry(t *testing.T) {
	t.Parallel()
	var logged atomic.Int64
	logger := slog.New(countingHandler{&logged})
	b := setup(t, compare.Config{LogRate: 0.001, LogBurst: 5, Logger: logger})
	now := time.Now()
	for range 3 {
		b.c.Observe(matchObs("p1", "shadow", now))
	}
	for i := range 100 {
		b.c.Observe(mismatchObs("p2", "mysql", now, i))
	}
	skip := matchObs("p1", "shadow", now)
	skip.Shadow = compare.Outcome{Store: mysql, Skipped: true}
	b.c.Observe(skip)

	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"reservoir_compare_observations_total", []string{"op", "reserve", "class", "match", "reservoir_pod", "p1", "mode", "shadow"}, 3},
		{"reservoir_compare_observations_total", []string{"class", "outcome_mismatch", "reservoir_pod", "p2", "mode", "mysql"}, 100},
		{"reservoir_compare_observations_total", []string{"class", "shadow_skipped", "reservoir_pod", "p1"}, 1},
		{"reservoir_compare_latency_seconds", []string{"store", "redis", "side", "authority", "op", "reserve", "mode", "shadow"}, 4},
		// The skipped shadow is not timed.
		{"reservoir_compare_latency_seconds", []string{"store", "mysql", "side", "shadow", "mode", "shadow"}, 3},
		{"reservoir_compare_latency_seconds", []string{"store", "mysql", "side", "shadow", "mode", "mysql"}, 100},
		// 101 non-matches: 10+1 tokens, the rest rate-limited.
		{"reservoir_compare_diffs_dropped_total", []string{"reason", "rate_limited"}, 90},
		{"reservoir_compare_logs_suppressed_total", nil, 96},
	} {
		if got := metric(t, b.reg, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if n := logged.Load(); n != 5 {
		t.Errorf("logged %d records, want the burst of 5", n)
	}
	// No metric carries the shop.
	mfs, _ := b.reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if strings.Contains(lp.GetName(), "shop") || lp.GetValue() == "42" {
					t.Errorf("%s has a shop label %s=%s", mf.GetName(), lp.GetName(), lp.GetValue())
				}
			}
		}
	}
}

type countingHandler struct{ n *atomic.Int64 }

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(context.Context, slog.Record) error {
	h.n.Add(1)
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// 1000 mismatches at 10 per second with a burst of 10: about 10 records are
// written (the test takes well under a second), the rest counted as
// rate-limited; the records hold both sides in full and a new comparer on
// the same database (a restart) reads them back.
func TestDiffsCappedAndSurviveRestart(t *testing.T) {
	t.Parallel()
	b := setup(t, compare.Config{DiffRate: 10, DiffBurst: 10})
	ctx := ctxT(t)
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	start := time.Now()
	for i := range 1000 {
		o := mismatchObs("p1", "shadow", at, i)
		o.Authority.Err = nil
		if i%2 == 1 { // the other pod
			o.Pod = "p2"
		}
		b.c.Observe(o)
	}
	elapsed := time.Since(start)
	if err := b.c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	written := metric(t, b.reg, "reservoir_compare_diffs_written_total")
	limited := metric(t, b.reg, "reservoir_compare_diffs_dropped_total", "reason", "rate_limited")
	// The bucket refills 10/s: allow for the time the loop took.
	maxWritten := 10 + 10*elapsed.Seconds() + 1
	t.Logf("1000 mismatches in %s: %v written, %v rate-limited", elapsed, written, limited)
	if written < 10 || written > maxWritten || written+limited != 1000 {
		t.Fatalf("written %v (want 10..%.0f), rate-limited %v, sum must be 1000", written, maxWritten, limited)
	}
	if n := b.db.Count(t, "compare_diffs"); float64(n) != written {
		t.Fatalf("compare_diffs has %d rows, metric says %v written", n, written)
	}
	if err := b.c.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Restart: a new comparer, new registry, same database.
	c2, _ := newComparer(t, b.db.DB, compare.Config{})
	all, err := c2.RecentDiffs(ctx, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := c2.RecentDiffs(ctx, "p1", 100)
	if err != nil {
		t.Fatal(err)
	}
	if float64(len(all)) != written || len(p1) == 0 || len(p1) >= len(all) {
		t.Fatalf("recent diffs: %d of every pod (want %v), %d of p1", len(all), written, len(p1))
	}
	r := p1[0]
	want := mismatchObs("p1", "shadow", at, 0)
	if r.ID == 0 || r.Pod != "p1" || r.Mode != "shadow" || r.Op != compare.OpReserve || r.Class != compare.ClassOutcomeMismatch ||
		r.Shop != 42 || !strings.HasPrefix(r.Token, "tok-") || !r.At.Equal(at) {
		t.Errorf("record header %+v", r)
	}
	if fmt.Sprint(r.Authority) != fmt.Sprint(compare.OutcomeRecord{Store: redis, Result: "reserved", Allocations: want.Authority.Allocations, Latency: 2 * time.Millisecond}) {
		t.Errorf("authority side %+v", r.Authority)
	}
	if fmt.Sprint(r.Shadow) != fmt.Sprint(compare.OutcomeRecord{Store: mysql, Result: "insufficient", Short: want.Shadow.Short, Latency: 6 * time.Millisecond}) {
		t.Errorf("shadow side %+v", r.Shadow)
	}
	if got, _ := c2.RecentDiffs(ctx, "p1", 2); len(got) != 2 || got[0].ID != p1[0].ID {
		t.Errorf("limit 2: %d records", len(got))
	}
}

// The error text and the shadow's fault flags are kept.
func TestDiffRecordKeepsErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, compare.Config{})
	ctx := ctxT(t)
	o := matchObs("p1", "shadow", time.Now())
	o.Shadow = compare.Outcome{Store: mysql, Panicked: true, Err: errors.New("panic: " + strings.Repeat("x", 5000)), Latency: time.Second}
	b.c.Observe(o)
	if err := b.c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rs, err := b.c.RecentDiffs(ctx, "p1", 0)
	if err != nil || len(rs) != 1 {
		t.Fatalf("%d records, %v", len(rs), err)
	}
	if s := rs[0].Shadow; !s.Panicked || len(s.Error) != 1024 || !strings.HasPrefix(s.Error, "panic: xxx") || s.Latency != time.Second {
		t.Errorf("shadow side: panicked %v, error of %d bytes, latency %s", s.Panicked, len(s.Error), s.Latency)
	}
}

// Records older than Retention go, in batches; younger ones stay. Stats
// windows older than StatsRetention go too.
func TestRetentionCleanup(t *testing.T) {
	t.Parallel()
	b := setup(t, compare.Config{DiffRate: 1e6, DiffBurst: 1e6, Retention: time.Hour, StatsRetention: 2 * time.Hour, CleanupBatch: 7})
	ctx := ctxT(t)
	now := time.Now()
	for i := range 30 {
		b.c.Observe(mismatchObs("p1", "shadow", now.Add(-3*time.Hour), i)) // both tables: old
	}
	for i := range 20 {
		b.c.Observe(mismatchObs("p1", "shadow", now.Add(-90*time.Minute), i)) // old diffs, live stats
	}
	for i := range 5 {
		b.c.Observe(mismatchObs("p1", "shadow", now.Add(-time.Minute), i))
	}
	if err := b.c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.db.Count(t, "compare_diffs"); n != 55 {
		t.Fatalf("compare_diffs has %d rows before cleanup, want 55", n)
	}
	got, err := b.c.Cleanup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Diffs != 50 || got.Stats != 1 {
		t.Errorf("Cleanup = %+v, want 50 diffs and 1 stats window", got)
	}
	if n := b.db.Count(t, "compare_diffs"); n != 5 {
		t.Errorf("compare_diffs has %d rows after cleanup, want 5", n)
	}
	if n := b.db.Count(t, "compare_stats"); n != 2 {
		t.Errorf("compare_stats has %d rows after cleanup, want 2", n)
	}
	if n := metric(t, b.reg, "reservoir_compare_cleanup_rows_total", "table", "compare_diffs"); n != 50 {
		t.Errorf("cleanup metric %v", n)
	}
	// The background cleanup runs the same code: a comparer with a short
	// interval empties what is due.
	for i := range 3 {
		b.c.Observe(mismatchObs("p1", "shadow", now.Add(-2*time.Hour), i))
	}
	if err := b.c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	bg, _ := newComparer(t, b.db.DB, compare.Config{Retention: time.Hour, CleanupInterval: 100 * time.Millisecond})
	deadline := time.Now().Add(5 * time.Second)
	for b.db.Count(t, "compare_diffs") != 5 {
		if time.Now().After(deadline) {
			t.Fatalf("background cleanup left %d rows", b.db.Count(t, "compare_diffs"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = bg
}

// Two replicas observe the same pod; each flushes its own increments and
// Totals sums them. Calibration observations stay apart and subtract.
func TestTotalsAcrossReplicas(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := ctxT(t)
	r1, _ := newComparer(t, db.DB, compare.Config{})
	r2, _ := newComparer(t, db.DB, compare.Config{FlushInterval: 20 * time.Millisecond}) // flushes by itself
	since := time.Now().Add(-time.Hour)
	now := time.Now()
	prev := now.Add(-5 * time.Minute) // another window

	var wg sync.WaitGroup
	for _, r := range []*compare.Comparer{r1, r2} {
		wg.Go(func() {
			for i := range 90 {
				r.Observe(matchObs("p1", "shadow", now))
				if i < 5 {
					r.Observe(mismatchObs("p1", "shadow", prev, i))
				}
				if i < 10 {
					o := matchObs("p1", "shadow", now)
					o.Op = compare.OpClaim
					o.Shadow = compare.Outcome{Store: mysql, Err: errConn, Latency: 9 * time.Millisecond}
					o.Authority.Result, o.Shadow.Result = "claimed", ""
					r.Observe(o)
				}
				// Calibration: MySQL against itself, 2% outcome noise.
				c := matchObs("p1", compare.ModeCalibration, now)
				c.Authority.Store = mysql
				if i%50 == 0 {
					c.Shadow.Result, c.Shadow.Allocations = "insufficient", nil
					c.Shadow.Short = []reservation.ShortLine{short(1, 10, 1)}
				}
				r.Observe(c)
				r.Observe(matchObs("p2", "shadow", now)) // another pod
			}
		})
	}
	wg.Wait()
	for _, r := range []*compare.Comparer{r1, r2} {
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tot, err := r1.Totals(ctx, "p1", since)
	if err != nil {
		t.Fatal(err)
	}
	live, cal := tot.Live(), tot.Calibration()
	t.Logf("live: %+v", live)
	if tot.Observations != 2*(90+5+10+90) || live.Observations != 2*(90+5+10) || cal.Observations != 180 {
		t.Fatalf("observations: total %d, live %d, calibration %d", tot.Observations, live.Observations, cal.Observations)
	}
	if got := live.ByOp[compare.OpReserve][compare.ClassMatch]; got != 180 {
		t.Errorf("reserve matches = %d, want 180", got)
	}
	if got := live.ByOp[compare.OpClaim][compare.ClassShadowError]; got != 20 {
		t.Errorf("claim shadow errors = %d, want 20", got)
	}
	if got := live.ByClass[compare.ClassOutcomeMismatch]; got != 10 {
		t.Errorf("outcome mismatches = %d, want 10", got)
	}
	approx := func(name string, got, want float64) {
		t.Helper()
		if d := got - want; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	approx("live outcome rate", live.Rate(compare.ClassOutcomeMismatch), 10.0/210)
	approx("mismatch rate", live.MismatchRate, 10.0/210)
	approx("shadow error rate", live.ShadowErrorRate, 20.0/210)
	approx("calibration outcome rate", cal.Rate(compare.ClassOutcomeMismatch), 4.0/180)
	approx("excess over noise", live.Excess(compare.ClassOutcomeMismatch, cal), 10.0/210-4.0/180)
	if live.Excess(compare.ClassShadowError, cal) != live.ShadowErrorRate {
		t.Errorf("excess of a class calibration never saw should be its rate")
	}
	// Latency: authority 1ms (match, claim) or 2ms (mismatch); shadow 3, 9 or 6 ms.
	a, s := live.Latency[compare.SideAuthority], live.Latency[compare.SideShadow]
	wantA := (180*1 + 10*2 + 20*1) * time.Millisecond / 210
	wantS := (180*3 + 10*6 + 20*9) * time.Millisecond / 210
	if a.Count != 210 || s.Count != 210 || a.Mean != wantA || s.Mean != wantS || s.Max != 9*time.Millisecond {
		t.Errorf("latency authority %+v (mean want %s), shadow %+v (mean want %s)", a, wantA, s, wantS)
	}
	approx("latency ratio", live.LatencyRatio, float64(wantS)/float64(wantA))
	if l := live.OpLatency[compare.OpClaim][compare.SideShadow]; l.Count != 20 || l.Mean != 9*time.Millisecond {
		t.Errorf("claim shadow latency %+v", l)
	}

	// Every pod; and a window after everything sees nothing.
	all, err := r2.Totals(ctx, "", since)
	if err != nil || all.Observations != tot.Observations+180 {
		t.Errorf("every pod: %d observations, %v", all.Observations, err)
	}
	later, err := r2.Totals(ctx, "p1", now.Add(2*time.Minute))
	if err != nil || later.Observations != 0 || later.Live().Rate(compare.ClassMatch) != 0 {
		t.Errorf("later: %+v, %v", later, err)
	}
	// The window holding since counts whole; the one before does not.
	part, err := r2.Totals(ctx, "p1", prev.Add(time.Minute))
	if err != nil || part.Live().ByClass[compare.ClassOutcomeMismatch] != 0 || part.Live().Observations != 200 {
		t.Errorf("since after the mismatch window: %+v, %v", part.Live().ByClass, err)
	}
}

// Observe never waits on the database: 10k observations against a closed
// pool take milliseconds; what could not be written is counted, and Close
// returns promptly.
func TestObserveNeverBlocksOnDeadDB(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	dead, err := sql.Open("mysql", db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	dead.Close()
	c, reg := newComparer(t, dead, compare.Config{DiffRate: 1e6, DiffBurst: 1e6, DiffQueue: 64, FlushInterval: 10 * time.Millisecond})
	start := time.Now()
	for i := range 10_000 {
		c.Observe(mismatchObs("p1", "shadow", start, i))
	}
	elapsed := time.Since(start)
	t.Logf("10k observations in %s", elapsed)
	if elapsed > 2*time.Second {
		t.Errorf("10k observations took %s", elapsed)
	}
	ctx := ctxT(t)
	if err := c.Flush(ctx); err == nil {
		t.Errorf("Flush on a closed pool succeeded")
	}
	closeStart := time.Now()
	if err := c.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
	if d := time.Since(closeStart); d > time.Second {
		t.Errorf("close took %s", d)
	}
	failed := metric(t, reg, "reservoir_compare_diffs_dropped_total", "reason", "write_failed")
	full := metric(t, reg, "reservoir_compare_diffs_dropped_total", "reason", "queue_full")
	t.Logf("write_failed %v, queue_full %v", failed, full)
	if failed+full != 10_000 || metric(t, reg, "reservoir_compare_diffs_written_total") != 0 {
		t.Errorf("dropped %v + %v, want every one of 10000", failed, full)
	}
	if metric(t, reg, "reservoir_compare_stats_flushes_total", "result", "error") == 0 {
		t.Errorf("no failed stats flush counted")
	}
	if metric(t, reg, "reservoir_compare_observations_total") != 10_000 {
		t.Errorf("observations not counted")
	}
	// After Close: still classified and counted, nothing kept.
	c.Observe(mismatchObs("p1", "shadow", time.Now(), 0))
	if metric(t, reg, "reservoir_compare_observations_total", "class", "outcome_mismatch") != 10_001 ||
		metric(t, reg, "reservoir_compare_diffs_dropped_total", "reason", "closed") != 1 {
		t.Errorf("Observe after Close not counted as observed and dropped")
	}
}

// A database that hangs (tables locked by another session): Observe stays
// fast, the queue overflows into drops, Close gives up at its deadline, and
// the stats a failed flush kept are written once the database is back.
func TestSlowDBNeverBlocksAndStatsAreKept(t *testing.T) {
	t.Parallel()
	b := setup(t, compare.Config{DiffRate: 1e6, DiffBurst: 1e6, DiffQueue: 16, WriteTimeout: 300 * time.Millisecond})
	ctx := ctxT(t)
	lock, err := b.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(ctx, "LOCK TABLES compare_diffs WRITE, compare_stats WRITE"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	start := time.Now()
	for i := range 10_000 {
		b.c.Observe(mismatchObs("p1", "shadow", now, i))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("10k observations on a hung database took %s", d)
	}
	if full := metric(t, b.reg, "reservoir_compare_diffs_dropped_total", "reason", "queue_full"); full < 9000 {
		t.Errorf("queue_full drops = %v, want most of 10000 (queue of 16)", full)
	}
	fctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = b.c.Flush(fctx)
	cancel()
	if err == nil {
		t.Fatalf("Flush with tables locked succeeded")
	}
	if _, err := lock.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	if err := b.c.Flush(ctx); err != nil {
		t.Fatalf("Flush after unlock: %v", err)
	}
	tot, err := b.c.Totals(ctx, "p1", now)
	if err != nil {
		t.Fatal(err)
	}
	if got := tot.Mode("shadow").ByClass[compare.ClassOutcomeMismatch]; got != 10_000 {
		t.Errorf("after a failed flush and a good one, Totals counts %d, want 10000", got)
	}

	// Close waits for its deadline at most, even with the writer stuck.
	c2, _ := newComparer(t, b.db.DB, compare.Config{DiffRate: 1e6, DiffBurst: 1e6, WriteTimeout: time.Minute})
	if _, err := lock.ExecContext(ctx, "LOCK TABLES compare_diffs WRITE"); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		c2.Observe(mismatchObs("p1", "shadow", now, i))
	}
	testdb.WaitStatement(t, b.db.DB, "compare_diff") // the writer is waiting on the table lock
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	closeStart := time.Now()
	err = c2.Close(cctx)
	d := time.Since(closeStart)
	if _, uerr := lock.ExecContext(ctx, "UNLOCK TABLES"); uerr != nil {
		t.Fatal(uerr)
	}
	if !errors.Is(err, context.DeadlineExceeded) || d > time.Second {
		t.Errorf("Close on a hung database: %v after %s, want a deadline error after about 200ms", err, d)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	db := &sql.DB{}
	for _, c := range []struct {
		cfg   compare.Config
		field string
	}{
		{compare.Config{}, "Config.DB"},
		{compare.Config{DB: db, FlushInterval: time.Millisecond}, "Config.FlushInterval"},
		{compare.Config{DB: db, Window: 1500 * time.Millisecond}, "Config.Window"},
		{compare.Config{DB: db, DiffRate: -1}, "Config.DiffRate"},
		{compare.Config{DB: db, DiffBurst: -1}, "Config.DiffBurst"},
		{compare.Config{DB: db, DiffQueue: -1}, "Config.DiffQueue"},
		{compare.Config{DB: db, DiffBatch: 5000}, "Config.DiffBatch"},
		{compare.Config{DB: db, Retention: time.Second}, "Config.Retention"},
		{compare.Config{DB: db, StatsRetention: time.Second}, "Config.StatsRetention"},
		{compare.Config{DB: db, CleanupInterval: time.Millisecond}, "Config.CleanupInterval"},
		{compare.Config{DB: db, Rules: compare.Rules{RaceFraction: 2}}, "Config.Rules.RaceFraction"},
		{compare.Config{DB: db, MaxPendingStats: -1}, "Config.MaxPendingStats"},
	} {
		_, err := compare.New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("New(%+v) = %v, want an error naming %s", c.cfg, err, c.field)
		}
	}
	def := compare.Config{}.WithDefaults()
	if def.FlushInterval != 5*time.Second || def.Window != time.Minute || def.DiffRate != 10 || def.Retention != 7*24*time.Hour ||
		def.Rules != compare.DefaultRules || def.Registerer == nil || def.Logger == nil {
		t.Errorf("defaults: %+v", def)
	}
	// Metrics go to the registry given, so two comparers on one registry clash.
	reg := prometheus.NewRegistry()
	c1, err := compare.New(compare.Config{DB: db, Registerer: reg, CleanupInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close(context.Background())
	if _, err := compare.New(compare.Config{DB: db, Registerer: reg}); err == nil {
		t.Errorf("second comparer on one registry: no error")
	}
}

// The facade's Observer interface (dualwrite.Observer) has this shape.
var _ interface{ Observe(compare.Observation) } = (*compare.Comparer)(nil)
