package bench

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/reservation"
)

// A tiny run end to end: the unit pool on the hot item straight to the
// servers, and the claim storm through the latency proxy. Each point must
// answer calls and pass its invariant check, and the run must leave neither
// its database nor its Redis keys behind.
func TestRunTiny(t *testing.T) {
	opts := Options{
		MySQLDSN:  testdb.ServerDSN(t),
		RedisAddr: testredis.Addr(t),
		Sweeps: []Sweep{
			{Scenario: ScenarioHot, Variants: []string{VariantPool}, Concurrency: []int{2}, Latencies: []time.Duration{0}},
			{Scenario: ScenarioClaim, Variants: []string{VariantPool}, Concurrency: []int{2}, Latencies: []time.Duration{time.Millisecond}},
		},
		Duration: time.Second,
		Warmup:   100 * time.Millisecond,
	}
	rep, progress := runWithProgress(t, opts, 60*time.Second)
	if len(rep.Results) != 3 {
		t.Fatalf("%d results, want 3 (hot reserve, claim reserve, claim claim)", len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.Error != "" || r.OK == 0 || r.OpsPerSec <= 0 || r.Invariant != "ok" {
			t.Errorf("%s %s: ok %d, %.0f/s, invariant %q, error %q, errors %v", r.Point, r.Op, r.OK, r.OpsPerSec, r.Invariant, r.Error, r.ErrorSamples)
		}
		// A reserve is two round trips (its reads; its writes with the
		// COMMIT), a claim as many shared with the claims of its group.
		if r.MySQLRoundTripsPerOp < 1 || r.ConnMsPerOp <= 0 {
			t.Errorf("%s %s: %.1f round trips and %.2f conn-ms per call: the counters did not count", r.Point, r.Op, r.MySQLRoundTripsPerOp, r.ConnMsPerOp)
		}
	}
	if claim := rep.Results[2]; claim.AddedRTTms != 1 || claim.MySQLRTTms < 1 {
		t.Errorf("claim window: added %dms, measured RTT %.2fms: the proxy added no latency", claim.AddedRTTms, claim.MySQLRTTms)
	}
	if !slices.ContainsFunc(rep.Targets, func(t Target) bool { return strings.Contains(t.Name, "claims vs reserves") }) {
		t.Errorf("targets %v: the claim ratio is missing", rep.Targets)
	}
	var md, js, svg bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil || !strings.Contains(md.String(), "| pool | 2 | 0 | reserve |") {
		t.Errorf("markdown (%v):\n%s", err, md.String())
	}
	if err := rep.WriteJSON(&js); err != nil || !strings.Contains(js.String(), `"ops_per_sec"`) {
		t.Errorf("json (%v)", err)
	}
	if err := rep.WriteSVG(&svg, ScenarioHot); err != nil || !strings.HasPrefix(svg.String(), "<svg") {
		t.Errorf("svg (%v)", err)
	}

	// Cleaned up: the run's database and keys are gone.
	db := testdb.New(t)
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", rep.Env.Database).Scan(&n); err != nil || n != 0 {
		t.Errorf("database %s: %d left (%v)", rep.Env.Database, n, err)
	}
	r := testredis.New(t)
	if keys, err := r.Client.Keys(context.Background(), rep.Env.RedisPrefix+"*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("redis prefix %s: %d keys left (%v)", rep.Env.RedisPrefix, len(keys), err)
	}
	if strings.Contains(progress.String(), "FAILED") {
		t.Errorf("progress:\n%s", progress.String())
	}
}

func TestPlanAndNarrow(t *testing.T) {
	t.Parallel()
	full := Plan(DefaultSweeps())
	if len(full) < 80 || len(full) > 150 {
		t.Errorf("the full plan has %d points; keep it under 150 (about fifteen minutes)", len(full))
	}
	quick := Plan(QuickSweeps())
	if len(quick) > 40 {
		t.Errorf("the quick plan has %d points; keep it near 30 (about two minutes)", len(quick))
	}
	got := Plan(Narrow(DefaultSweeps(), []string{ScenarioClaim}, []string{VariantPool, VariantRow}, []int{8}, []time.Duration{0}))
	if len(got) != 1 || got[0] != (Point{Scenario: ScenarioClaim, Variant: VariantPool, Concurrency: 8}) {
		t.Errorf("narrowed claim plan = %v, want one pool point at c=8 (the row has no ledger to claim)", got)
	}
	if err := (Options{MySQLDSN: "x", RedisAddr: "y", Sweeps: []Sweep{{Scenario: "nope"}}}).WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), `unknown scenario "nope"`) {
		t.Errorf("validate unknown scenario: %v", err)
	}
}

// Every facade variant runs end to end next to the Redis store: answers
// calls, no errors, invariants hold. In mysql (and mysql_only) mode the facade finds the
// shop handed to MySQL at its flags' version and Redis follows through the
// relay the point runs.
func TestRunFacades(t *testing.T) {
	opts := Options{
		MySQLDSN:  testdb.ServerDSN(t),
		RedisAddr: testredis.Addr(t),
		Sweeps: []Sweep{{Scenario: ScenarioHot, Variants: []string{VariantRedis, VariantFacadeRedis, VariantFacadeShadow, VariantFacadeMySQL,
			VariantFacadeMySQLOnly, VariantFacadeMySQLOnlyNoFeed}, Concurrency: []int{2}, Latencies: []time.Duration{0}}},
		Duration: 500 * time.Millisecond,
		Warmup:   100 * time.Millisecond,
	}
	rep, _ := runWithProgress(t, opts, 2*time.Minute)
	if len(rep.Results) != 6 {
		t.Fatalf("%d results, want 6", len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.Error != "" || r.OK == 0 || r.Invariant != "ok" || len(r.Errors) != 0 {
			t.Errorf("%s %s: ok %d, invariant %q, error %q, errors %v", r.Point, r.Op, r.OK, r.Invariant, r.Error, r.ErrorSamples)
		}
	}
}

// The facade in mysql mode, with its relay running: the setup hands the
// shop to MySQL; every hold MySQL decides through the facade reaches
// Redis without anyone delivering it; closing the target stops the relay.
func TestFacadeMySQLRelays(t *testing.T) {
	opts := Options{MySQLDSN: testdb.ServerDSN(t), RedisAddr: testredis.Addr(t), Sweeps: []Sweep{}}.WithDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := openServers(ctx, opts, []time.Duration{0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	sc := scenarios[ScenarioHot]
	env := &pointEnv{path: srv.paths[0], prefix: srv.prefix, poolCap: opts.PoolCap, concurrency: 2}
	tgt, err := newTarget(VariantFacadeMySQL, env)
	if err != nil {
		t.Fatal(err)
	}
	ft := tgt.(*facadeTarget)
	const shop = 1
	if err := tgt.setup(ctx, shop, sc); err != nil {
		t.Fatal(err)
	}
	tokens := []string{"x1", "x2", "x3"}
	for i, tok := range tokens {
		ok, err := tgt.reserve(ctx, shop, tok, []reservation.Line{line(int64(i + 1))})
		if err != nil || !ok {
			t.Fatalf("reserve %s: %v %v", tok, ok, err)
		}
		if h, err := ft.my.Get(ctx, &reservation.GetParams{Shop: shop, Token: tok}); err != nil || h.Authority != reservation.AuthorityMySQL {
			t.Fatalf("MySQL's hold %s: %+v %v; want MySQL deciding", tok, h, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, tok := range tokens {
		for {
			_, err := ft.rd.Get(ctx, &reservation.GetParams{Shop: shop, Token: tok})
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("hold %s never reached Redis: %v", tok, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := tgt.close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ft.relay.done:
	default:
		t.Error("close returned with the relay still running")
	}
}

// Every variant with a batched and an unbatched shape runs both ways on
// the claim storm (the baselines on the drain, which runs them out of
// stock, so the batched baseline's short path is taken too): answers,
// no errors, invariants hold, and the batched shape takes fewer round
// trips per call than its unbatched twin.
func TestBatchedAndUnbatched(t *testing.T) {
	var claimers, baselines []string
	for _, v := range []string{VariantPool, VariantRedis} {
		claimers = append(claimers, v, v+Unbatched)
	}
	for _, v := range []string{VariantRow, VariantBuckets} {
		baselines = append(baselines, v, v+Unbatched)
	}
	opts := Options{
		MySQLDSN:  testdb.ServerDSN(t),
		RedisAddr: testredis.Addr(t),
		Sweeps: []Sweep{
			{Scenario: ScenarioClaim, Variants: claimers, Concurrency: []int{2}, Latencies: []time.Duration{0}},
			{Scenario: ScenarioDrain, Variants: baselines, Concurrency: []int{4}, Latencies: []time.Duration{0}},
		},
		Duration: 500 * time.Millisecond,
		Warmup:   50 * time.Millisecond,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	rep, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	rt := map[string]float64{}
	for _, r := range rep.Results {
		if r.Error != "" || r.OK == 0 || r.Invariant != "ok" || len(r.Errors) != 0 {
			t.Errorf("%s %s: ok %d, invariant %q, error %q, errors %v", r.Point, r.Op, r.OK, r.Invariant, r.Error, r.ErrorSamples)
		}
		rt[r.Variant+" "+r.Op] = r.MySQLRoundTripsPerOp
	}
	for k, n := range rt {
		if base, ok := strings.CutSuffix(k, Unbatched+" reserve"); ok {
			k = base + " reserve"
		} else if base, ok := strings.CutSuffix(k, Unbatched+" claim"); ok {
			k = base + " claim"
		} else {
			continue
		}
		if n > 0 && rt[k] >= n {
			t.Errorf("%s: %.1f MySQL round trips per call batched, %.1f unbatched: batching saved nothing", k, rt[k], n)
		}
	}
}

// Open-loop: a caller's calls are due at its share of the rate, and a
// call that is due while the one before it still runs is handed its due
// time, not now, so the wait counts in its latency. Closed-loop hands now.
func TestScheduleOpenLoop(t *testing.T) {
	var stop atomic.Bool
	ctx := context.Background()
	closed := &schedule{}
	if at, ok := closed.next(ctx, &stop); !ok || time.Since(at) > time.Second {
		t.Fatalf("closed-loop next = %v, %v; want now", at, ok)
	}
	// 4 callers sharing 400 calls/s: each calls every 10ms.
	every := 10 * time.Millisecond
	start := time.Now()
	s := &schedule{every: every, at: start}
	first, _ := s.next(ctx, &stop)
	second, _ := s.next(ctx, &stop)
	if !first.Equal(start) || second.Sub(first) != every {
		t.Fatalf("due times %v and %v after start %v; want start and start+%v", first, second, start, every)
	}
	if waited := time.Since(start); waited < every {
		t.Fatalf("the second call started %v after the first was due; want at least %v", waited, every)
	}
	time.Sleep(3 * every) // the caller was slow: its next calls are late
	late, _ := s.next(ctx, &stop)
	if late != start.Add(2*every) {
		t.Fatalf("a late call is due %v; want its scheduled %v (the wait counts)", late.Sub(start), 2*every)
	}
	stop.Store(true)
	s.at = time.Now().Add(time.Hour)
	if _, ok := s.next(ctx, &stop); ok {
		t.Fatal("a stopped window still handed out a call")
	}
}

// The handoff scenario's plumbing, on a shop of 300 reservations (above
// mirror.Config.CopyInline, so each handoff to MySQL copies in the
// background while the probes follow Redis): three switches, each with
// its fence move seen, the new decider answering, no probe call failing,
// and the stores holding what was acknowledged.
func TestRunHandoff(t *testing.T) {
	opts := Options{
		MySQLDSN:  testdb.ServerDSN(t),
		RedisAddr: testredis.Addr(t),
		Sweeps: []Sweep{{Scenario: ScenarioHandoff, Variants: []string{VariantFacadeShadow}, Concurrency: []int{2},
			Latencies: []time.Duration{0}, Sizes: []int{300}}},
		Duration: 300 * time.Millisecond,
		Warmup:   100 * time.Millisecond,
	}
	rep, progress := runWithProgress(t, opts, time.Minute)
	if len(rep.Results) != 3 {
		t.Fatalf("%d results, want 3 (advance, kill, release)\n%s", len(rep.Results), progress.String())
	}
	for i, r := range rep.Results {
		h := r.Handoff
		if want := handoffSwitches[i]; r.Op != want.op || h == nil || h.To != string(want.to) {
			t.Fatalf("result %d: %s %+v, want %s to %s", i, r.Op, h, want.op, want.to)
		}
		if r.Error != "" || r.Invariant != "ok" || len(r.Errors) != 0 || r.OK == 0 {
			t.Errorf("%s: error %q, invariant %q, errors %v, ok %d\n%s", r.Op, r.Error, r.Invariant, r.ErrorSamples, r.OK, progress.String())
		}
		// The new decider may answer a probe a moment before the mover
		// hears its own last round trip back: the undecided window is not
		// always longer than the move.
		if h.MoveMs <= 0 || h.UndecidedMs <= 0 || h.CopyMs < 0 || h.ShopSize < 300 || h.FlagsVersion != int64(i+2) || h.Slowest == "" {
			t.Errorf("%s: figures %+v", r.Op, h)
		}
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil || !strings.Contains(md.String(), "| facade-shadow | 2 | 0 | 300 | advance (mode shadow -> mysql) | mysql | 2 |") {
		t.Errorf("markdown (%v):\n%s", err, md.String())
	}
	if !slices.ContainsFunc(rep.Targets, func(t Target) bool { return strings.Contains(t.Name, "undecided window") }) {
		t.Errorf("targets %v: the undecided window is missing", rep.Targets)
	}
}

func TestHandoffPlan(t *testing.T) {
	t.Parallel()
	sweeps := Narrow(DefaultSweeps(), []string{ScenarioHandoff}, nil, []int{3}, nil)
	got := Plan(sweeps)
	if len(got) != len(DefaultHandoffSizes) || got[0] != (Point{Scenario: ScenarioHandoff, Variant: VariantFacadeShadow, Concurrency: 3, Size: 1000}) {
		t.Errorf("handoff plan = %v", got)
	}
	if got := Plan(WithSizes(sweeps, []int{50, 500})); len(got) != 2 || got[1].Size != 500 || got[1].String() != "handoff facade-shadow c=3 +0ms n=500" {
		t.Errorf("handoff plan with sizes = %v", got)
	}
	if full := Plan(DefaultSweeps()); slices.ContainsFunc(full, func(p Point) bool { return p.Scenario == ScenarioHandoff }) {
		t.Error("the full run has handoff points; it runs only when asked for")
	}
	bad := Options{MySQLDSN: "x", RedisAddr: "y", Sweeps: []Sweep{{Scenario: ScenarioHandoff, Variants: []string{VariantPool}, Concurrency: []int{1}, Sizes: []int{1}}}}
	err := bad.WithDefaults().Validate()
	if err == nil || !strings.Contains(err.Error(), "its variant is facade-shadow") || !strings.Contains(err.Error(), "between 2 and") {
		t.Errorf("validate a handoff sweep with the pool and size 1: %v", err)
	}
}

// runWithProgress runs opts within timeout, failing the test with the
// progress lines when the run fails; it returns the report and the
// progress, for the test's own checks.
func runWithProgress(t *testing.T, opts Options, timeout time.Duration) (*Report, *bytes.Buffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var progress bytes.Buffer
	opts.Progress = &progress
	rep, err := Run(ctx, opts)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	return rep, &progress
}
