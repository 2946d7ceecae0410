package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
)

// The median's interval: identical rounds leave nothing to resample, an
// odd sample's median is its middle value, an even one's the mean of its
// two middle values; the interval holds the median, sits inside the
// sample's range, and the fixed seed draws it again the same.
func TestMedianInterval(t *testing.T) {
	t.Parallel()
	same := medianInterval([]float64{1.05, 1.05, 1.05, 1.05, 1.05})
	if same != (Interval{1.05, 1.05, 1.05}) {
		t.Errorf("identical values: %+v, want the interval collapsed to 1.05", same)
	}
	if one := medianInterval([]float64{0.97}); one != (Interval{0.97, 0.97, 0.97}) {
		t.Errorf("one value: %+v, want no interval", one)
	}
	if none := medianInterval(nil); none != (Interval{}) {
		t.Errorf("no value: %+v", none)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median of 1..4 = %g, want 2.5", m)
	}
	xs := []float64{1.30, 0.90, 1.10, 0.95, 1.00, 1.05, 0.98, 1.02, 1.20, 0.99, 1.01, 0.97, 1.03, 1.04, 0.96, 1.08, 0.94, 1.06, 1.07, 0.93, 1.00}
	before := slices.Clone(xs)
	iv := medianInterval(xs)
	if iv.Median != 1.01 {
		t.Errorf("median %g, want 1.01 (the 11th of 21)", iv.Median)
	}
	if !(iv.Lo <= iv.Median && iv.Median <= iv.Hi) || iv.Lo < 0.90 || iv.Hi > 1.30 || iv.Lo == iv.Hi {
		t.Errorf("interval %+v: want around the median, inside the sample, not collapsed", iv)
	}
	if again := medianInterval(xs); again != iv {
		t.Errorf("the same sample drew %+v, then %+v: the seed is not fixed", iv, again)
	}
	if !slices.Equal(xs, before) {
		t.Error("medianInterval reordered its sample")
	}
}

// Round 1 runs a point's variants in order, round 2 in reverse, round 3
// in order again; the groups (same scenario, concurrency, latency) stay
// in the plan's order, and one round is the plan as it always was.
func TestRoundPlanAlternates(t *testing.T) {
	t.Parallel()
	sweeps := []Sweep{{Scenario: ScenarioUniform, Variants: []string{VariantRedis, VariantFacadeRedis, VariantPool},
		Concurrency: []int{16, 64}, Latencies: []time.Duration{time.Millisecond}}}
	if got := RoundPlan(sweeps, 1); !slices.Equal(got, Plan(sweeps)) {
		t.Errorf("one round = %v, want Plan's %v", got, Plan(sweeps))
	}
	var got []string
	for _, p := range RoundPlan(sweeps, 3) {
		got = append(got, p.String()+" r"+string(rune('0'+p.Round)))
	}
	want := []string{
		"uniform redis c=16 +1ms r1", "uniform facade-redis c=16 +1ms r1", "uniform pool c=16 +1ms r1",
		"uniform redis c=64 +1ms r1", "uniform facade-redis c=64 +1ms r1", "uniform pool c=64 +1ms r1",
		"uniform pool c=16 +1ms r2", "uniform facade-redis c=16 +1ms r2", "uniform redis c=16 +1ms r2",
		"uniform pool c=64 +1ms r2", "uniform facade-redis c=64 +1ms r2", "uniform redis c=64 +1ms r2",
		"uniform redis c=16 +1ms r3", "uniform facade-redis c=16 +1ms r3", "uniform pool c=16 +1ms r3",
		"uniform redis c=64 +1ms r3", "uniform facade-redis c=64 +1ms r3", "uniform pool c=64 +1ms r3",
	}
	if !slices.Equal(got, want) {
		t.Errorf("three rounds:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A pair that does not parse, names an unknown variant or one the run
// does not measure is refused, naming the pair; the preset is the four
// overhead pairs and the variants they need.
func TestPairsValidation(t *testing.T) {
	t.Parallel()
	pairs, err := ParsePairs([]string{PairsOverhead, "facade-redis/redis"})
	if err != nil || !slices.Equal(pairs, OverheadPairs()) {
		t.Fatalf("overhead preset (and a repeat of one of its pairs) = %v, %v; want the four", pairs, err)
	}
	if got, want := PairVariants(pairs), []string{VariantRedis, VariantPool, VariantFacadeRedis, VariantFacadeShadow, VariantFacadeMySQL, VariantFacadeMySQLOnly}; !slices.Equal(got, want) {
		t.Errorf("the preset's variants = %v, want %v", got, want)
	}
	for in, want := range map[string]string{
		"facade-redis":       `want VARIANT/BASELINE or overhead, got "facade-redis"`,
		"a/b/c":              `got "a/b/c"`,
		"facade-redis/nope":  `pair "facade-redis/nope": unknown variant "nope"`,
		"pool/pool":          `pair "pool/pool" compares a variant with itself`,
		"facade-redis/redis": "",
	} {
		_, err := ParsePairs([]string{in})
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("ParsePairs(%q) = %v, want %q", in, err, want)
		}
	}
	opts := Options{MySQLDSN: "x", RedisAddr: "y", Rounds: 2, Pairs: OverheadPairs()[:1],
		Sweeps: []Sweep{{Scenario: ScenarioUniform, Variants: []string{VariantFacadeRedis}, Concurrency: []int{2}, Latencies: []time.Duration{0}}}}
	err = opts.WithDefaults().Validate()
	if err == nil || !strings.Contains(err.Error(), `bench: Options.Pairs: pair "facade-redis/redis": variant "redis" is not among the variants run`) {
		t.Errorf("a pair whose baseline is not run: %v", err)
	}
	opts.Pairs, opts.Rounds = nil, maxRounds+1
	if err := opts.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "Options.Rounds must be between 1 and") {
		t.Errorf("rounds %d: %v", opts.Rounds, err)
	}
}

// A report from before rounds (no round, no pairs) still reads and
// renders; judged with the overhead pairs, each pair it has both sides
// of is one round without an interval, and a pair it lacks is left out.
func TestRenderOldReport(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join("..", "..", "docs", "bench", "uniform", "bench.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := ReadReport(f)
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil || !strings.Contains(md.String(), "| facade-redis | 16 | 1 | reserve |") || strings.Contains(md.String(), "Overhead") {
		t.Fatalf("old report (%v):\n%s", err, md.String())
	}
	rep.Rejudge(OverheadPairs())
	if len(rep.Overhead) == 0 {
		t.Fatal("no overhead rows from the old report's facade-redis and redis")
	}
	for _, o := range rep.Overhead {
		if o.Rounds != 1 || o.P99.Lo != o.P99.Median || o.P99.Median <= 0 || o.Throughput.Median <= 0 || !strings.Contains(o.Verdict, "one round") {
			t.Errorf("%s %s c=%d: %+v", o.Pair, o.Scenario, o.Concurrency, o)
		}
		if o.Pair == (Pair{VariantFacadeMySQLOnly, VariantPool}) {
			t.Errorf("a row for %s, which the old run did not measure", o.Pair)
		}
	}
	md.Reset()
	if err := rep.WriteMarkdown(&md); err != nil || !strings.Contains(md.String(), "#### Overhead") || !strings.Contains(md.String(), "| facade-redis / redis | uniform c=16 +1ms | reserve | 1 |") {
		t.Errorf("old report with pairs (%v):\n%s", err, md.String())
	}
}

// Two rounds of the Redis store and the facade in front of it: every
// (point, round) is measured and checked, the progress says the round,
// and the Overhead table has the pair over two rounds with ratios, in
// bench.json and again when that is read back.
func TestRunRounds(t *testing.T) {
	opts := Options{
		MySQLDSN:  testdb.ServerDSN(t),
		RedisAddr: testredis.Addr(t),
		Sweeps: []Sweep{{Scenario: ScenarioUniform, Variants: []string{VariantRedis, VariantFacadeRedis},
			Concurrency: []int{2}, Latencies: []time.Duration{0}}},
		Duration: 200 * time.Millisecond,
		Warmup:   50 * time.Millisecond,
		Rounds:   2,
		Pairs:    []Pair{{VariantFacadeRedis, VariantRedis}},
	}
	rep, progress := runWithProgress(t, opts, time.Minute)
	if len(rep.Results) != 4 {
		t.Fatalf("%d results, want 4 (two variants, two rounds)\n%s", len(rep.Results), progress.String())
	}
	var order []string
	for _, r := range rep.Results {
		order = append(order, r.Variant)
		if r.Error != "" || r.OK == 0 || r.Invariant != "ok" || r.Round < 1 || r.Round > 2 {
			t.Errorf("%s round %d: ok %d, invariant %q, error %q", r.Point, r.Round, r.OK, r.Invariant, r.Error)
		}
	}
	if want := []string{VariantRedis, VariantFacadeRedis, VariantFacadeRedis, VariantRedis}; !slices.Equal(order, want) {
		t.Errorf("ran %v, want %v", order, want)
	}
	if !strings.Contains(progress.String(), "round 2/2 uniform facade-redis c=2") {
		t.Errorf("progress does not say the round:\n%s", progress.String())
	}
	check := func(rep *Report) {
		t.Helper()
		if len(rep.Overhead) != 1 {
			t.Fatalf("overhead rows %+v, want one", rep.Overhead)
		}
		o := rep.Overhead[0]
		if o.Rounds != 2 || o.P99.Median <= 0 || o.P50.Median <= 0 || o.Throughput.Median <= 0 || o.Variant.OpsPerSec <= 0 || o.Baseline.P99ms <= 0 ||
			o.P99.Lo > o.P99.Median || o.P99.Hi < o.P99.Median || o.Verdict == "" {
			t.Errorf("overhead %+v", o)
		}
	}
	check(rep)
	var js, md bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	again, err := ReadReport(bytes.NewReader(js.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	check(again)
	if again.Overhead[0] != rep.Overhead[0] {
		t.Errorf("read back, the row changed: %+v, was %+v", again.Overhead[0], rep.Overhead[0])
	}
	if err := again.WriteMarkdown(&md); err != nil || !strings.Contains(md.String(), "| facade-redis / redis | uniform c=2 +0ms | reserve | 2 |") ||
		!strings.Contains(md.String(), "| redis (round 2) | 2 | 0 | reserve |") {
		t.Errorf("markdown (%v):\n%s", err, md.String())
	}
}

// The pairs judged on results made up: ratios are taken within a round
// (never across), a failed round and a third variant are left out, CPU
// per op is cores over throughput, and the verdict reads the medians and
// says where the intervals lie.
func TestOverheadsJudge(t *testing.T) {
	t.Parallel()
	res := func(v string, round int, p99, ops, mysqlCores float64) Result {
		return Result{Point: Point{Scenario: ScenarioUniform, Variant: v, Concurrency: 16, Round: round}, AddedRTTms: 1, Op: "reserve",
			P50ms: p99 / 2, P99ms: p99, OpsPerSec: ops, MySQLCores: mysqlCores, RedisCores: -1, LoadgenCores: 0.5, Invariant: "ok"}
	}
	results := []Result{
		res(VariantRedis, 1, 10, 1000, 0.1), res(VariantFacadeRedis, 1, 10.5, 950, 0.1), res(VariantPool, 1, 1, 1, 0),
		res(VariantFacadeRedis, 2, 30, 500, 0.1), res(VariantRedis, 2, 20, 500, 0.1),
		res(VariantRedis, 3, 10, 1000, 0.1), res(VariantFacadeRedis, 3, 11, 1000, 0.1),
	}
	failed := res(VariantRedis, 4, 10, 1000, 0.1)
	failed.Invariant = "VIOLATED: one unit invented"
	results = append(results, failed, res(VariantFacadeRedis, 4, 100, 1, 0.1))
	got := overheads(results, []Pair{{VariantFacadeRedis, VariantRedis}})
	if len(got) != 1 {
		t.Fatalf("rows %+v, want one", got)
	}
	o := got[0]
	// Per round: p99 ratios 1.05, 1.5 and 1.1 (median 1.1, met, its
	// interval reaching 1.5), throughput ratios 0.95, 1 and 1.
	if o.Rounds != 3 || o.P99.Median != 1.1 || o.P99.Hi != 1.5 || o.Throughput.Median != 1 || o.Throughput.Lo != 0.95 || o.Variant.P99ms != 11 || o.Baseline.OpsPerSec != 1000 {
		t.Errorf("row %+v", o)
	}
	if o.Variant.MySQLCPUus != 0.1*1e6/950 || o.Variant.RedisCPUus != -1 {
		t.Errorf("variant CPU: mysqld %g µs/op (want %g), redis %g (want -1: not measured)", o.Variant.MySQLCPUus, 0.1*1e6/950, o.Variant.RedisCPUus)
	}
	if !o.Met || o.Verdict != "met; p99 interval spans 1.10 (within noise), throughput interval above 0.90" {
		t.Errorf("verdict %v %q", o.Met, o.Verdict)
	}
	o.P99 = Interval{1.2, 1.15, 1.3}
	if met, v := overheadVerdict(o); met || !strings.Contains(v, "**MISSED**: p99 ratio 1.20 > 1.10") || !strings.Contains(v, "p99 interval above 1.10") {
		t.Errorf("a clear miss: %v %q", met, v)
	}
}

// The server CPU per reservation is a target of its own (issue 28, point
// 5): the pool's mysqld µs per reserve against the batched row's, at most
// 1.8x, judged per round and per added latency.
func TestServerCPUTarget(t *testing.T) {
	t.Parallel()
	res := func(v string, ops, mysqlCPUus float64) Result {
		return Result{Point: Point{Scenario: ScenarioHot, Variant: v, Concurrency: 64}, AddedRTTms: 1, Op: "reserve",
			OpsPerSec: ops, MySQLCPUus: mysqlCPUus, Invariant: "ok"}
	}
	judge := func(pool, row float64) (Target, bool) {
		rep := &Report{Results: []Result{res(VariantPool, 1000, pool), res(VariantRow, 2000, row)}}
		rep.finish()
		for _, tg := range rep.Targets {
			if strings.Contains(tg.Name, "mysqld CPU per reserve") {
				return tg, true
			}
		}
		return Target{}, false
	}
	if tg, ok := judge(720, 360); !ok || tg.Ratio != 2 || tg.Pass || tg.Want != "<= 1.80" || tg.Where != "hot c=64 +1ms" {
		t.Errorf("pool at 2x the row's server CPU: %+v (found %v), want a missed target at 2.00", tg, ok)
	}
	if tg, ok := judge(540, 360); !ok || !tg.Pass {
		t.Errorf("pool at 1.5x: %+v (found %v), want met", tg, ok)
	}
	if _, ok := judge(720, 0); ok {
		t.Error("a row whose server CPU was not measured: want no target")
	}
}
