package bench

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
)

// Pair is a ratio the report judges across rounds: Variant over Baseline,
// both measured at the same point of the same round.
type Pair struct {
	Variant  string `json:"variant"`
	Baseline string `json:"baseline"`
}

func (p Pair) String() string { return p.Variant + "/" + p.Baseline }

// PairsOverhead is the name of the preset ParsePairs expands to
// OverheadPairs.
const PairsOverhead = "overhead"

// OverheadPairs are issue 28's overhead comparisons (point 3, acceptance
// d): the checkout path in every mode against the store alone, or against
// the mode before it.
func OverheadPairs() []Pair {
	return []Pair{
		{VariantFacadeRedis, VariantRedis},
		{VariantFacadeShadow, VariantFacadeRedis},
		{VariantFacadeMySQL, VariantPool},
		{VariantFacadeMySQLOnly, VariantPool},
	}
}

// ParsePairs reads pairs written VARIANT/BASELINE, or the preset
// PairsOverhead, in any mix; a pair given twice counts once. Each name
// must be a known variant, and a pair's two names must differ (a variant
// runs once per round: it has no second measurement to compare with).
func ParsePairs(list []string) ([]Pair, error) {
	var out []Pair
	add := func(p Pair) {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for _, s := range list {
		if s == PairsOverhead {
			for _, p := range OverheadPairs() {
				add(p)
			}
			continue
		}
		v, b, ok := strings.Cut(s, "/")
		if !ok || v == "" || b == "" || strings.Contains(b, "/") {
			return nil, fmt.Errorf("want VARIANT/BASELINE or %s, got %q", PairsOverhead, s)
		}
		for _, name := range []string{v, b} {
			if !slices.Contains(Variants, name) {
				return nil, fmt.Errorf("pair %q: unknown variant %q (known: %s)", s, name, strings.Join(Variants, ", "))
			}
		}
		if v == b {
			return nil, fmt.Errorf("pair %q compares a variant with itself", s)
		}
		add(Pair{v, b})
	}
	return out, nil
}

// PairVariants lists the variants the pairs need, in the order the
// variants are listed (Variants): what a run of those pairs measures when
// no variants are named.
func PairVariants(pairs []Pair) []string {
	var out []string
	for _, p := range pairs {
		for _, v := range []string{p.Variant, p.Baseline} {
			if !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	slices.SortFunc(out, func(a, b string) int { return cmp.Compare(variantRank(a), variantRank(b)) })
	return out
}

// RoundPlan lists the points of a run of the given rounds in the order
// they run: the whole plan (Plan) once per round, round after round, each
// point with its round (1 to rounds). Within a round, the points that
// share scenario, concurrency and latency run one after another, in
// variant order in odd rounds and reversed in even ones, so that what
// runs first (a warmer machine, a drift over the round) favours each side
// of a pair equally often. One round is Plan itself, rounds left 0, as a
// run of one round has always been recorded.
func RoundPlan(sweeps []Sweep, rounds int) []Point {
	plan := Plan(sweeps)
	if rounds <= 1 {
		return plan
	}
	var out []Point
	for r := 1; r <= rounds; r++ {
		for start := 0; start < len(plan); {
			end := start + 1
			for end < len(plan) && sameGroup(plan[start], plan[end]) {
				end++
			}
			group := slices.Clone(plan[start:end])
			if r%2 == 0 {
				slices.Reverse(group)
			}
			for _, p := range group {
				p.Round = r
				out = append(out, p)
			}
			start = end
		}
	}
	return out
}

// sameGroup reports whether two points are measured side by side: same
// scenario, concurrency and added latency.
func sameGroup(a, b Point) bool {
	return a.Scenario == b.Scenario && a.Concurrency == b.Concurrency && a.Latency == b.Latency
}

// Interval is a median and its 95% interval.
type Interval struct {
	Median float64 `json:"median"`
	Lo     float64 `json:"lo"`
	Hi     float64 `json:"hi"`
}

// The bootstrap's resamples and seed. The seed is fixed so that rendering
// a bench.json again draws the same resamples and prints the same
// intervals.
const (
	bootstrapResamples = 10_000
	bootstrapSeed      = 28
)

// medianInterval returns the median of xs and a 95% percentile-bootstrap
// interval of it: the 2.5th and 97.5th percentiles of the medians of
// resamples of xs drawn with replacement. The rounds are few (20 or 30)
// and their ratios not normal (a slow round is a long tail), so the
// interval is read off resamples rather than from a formula that assumes
// a shape. One value (or none) has no interval: it collapses to the
// median.
func medianInterval(xs []float64) Interval {
	if len(xs) == 0 {
		return Interval{}
	}
	m := median(xs)
	if len(xs) == 1 {
		return Interval{m, m, m}
	}
	rng := rand.New(rand.NewPCG(bootstrapSeed, uint64(len(xs))))
	meds := make([]float64, bootstrapResamples)
	sample := make([]float64, len(xs))
	for i := range meds {
		for j := range sample {
			sample[j] = xs[rng.IntN(len(xs))]
		}
		meds[i] = median(sample)
	}
	slices.Sort(meds)
	lo := meds[int(math.Floor(0.025*bootstrapResamples))]
	hi := meds[int(math.Ceil(0.975*bootstrapResamples))-1]
	return Interval{m, lo, hi}
}

// median is the middle value of xs (the mean of the two middle ones for
// an even count; 0 for none); xs is left as it was.
func median[T ~int64 | ~float64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// The overhead targets (issue 28, acceptance d): a variant's p99 at most
// 1.1x its baseline's, its throughput at least 0.9x.
const (
	overheadMaxP99        = 1.10
	overheadMinThroughput = 0.90
)

// Side is one side of a pair at one point: medians over the rounds
// compared. A CPU figure is -1 where it was not measured.
type Side struct {
	Variant   string  `json:"variant"`
	P99ms     float64 `json:"p99_ms"`
	OpsPerSec float64 `json:"ops_per_sec"`
	// CPU microseconds per answer: cores x 1e6 / answers per second.
	MySQLCPUus   float64 `json:"mysqld_cpu_us_per_op"`
	RedisCPUus   float64 `json:"redis_cpu_us_per_op"`
	LoadgenCPUus float64 `json:"loadgen_cpu_us_per_op"`
}

// Overhead is a pair judged at one point over the rounds both sides
// answered in: per round, the variant's figure over the baseline's; here,
// the median of those ratios with its 95% bootstrap interval.
type Overhead struct {
	Pair        Pair   `json:"pair"`
	Scenario    string `json:"scenario"`
	Concurrency int    `json:"concurrency"`
	AddedRTTms  int64  `json:"added_rtt_ms"`
	Op          string `json:"op"`
	// Rounds is how many rounds gave a ratio: both sides answered, no
	// error, not interrupted.
	Rounds     int      `json:"rounds"`
	P99        Interval `json:"p99_ratio"`
	P50        Interval `json:"p50_ratio"`
	Throughput Interval `json:"throughput_ratio"`
	Variant    Side     `json:"variant"`
	Baseline   Side     `json:"baseline"`
	// Met is the targets met on the medians: p99 ratio <= 1.10 and
	// throughput ratio >= 0.90. Verdict says so in words, with what the
	// intervals add.
	Met     bool   `json:"met"`
	Verdict string `json:"verdict"`
}

// overheads judges the pairs on the results: one row per pair, scenario,
// added latency, concurrency and op both sides measured.
func overheads(results []Result, pairs []Pair) []Overhead {
	type key struct {
		scenario string
		l        int64
		c        int
		op       string
	}
	var keys []key
	// by variant, then key, then round.
	by := map[string]map[key]map[int]Result{}
	for _, r := range results {
		// A window cut short, or a point whose invariants broke, measured
		// something other than the variant at work.
		if r.Error != "" || r.Interrupted || r.Invariant != "ok" || r.Handoff != nil || r.KillFlood != nil {
			continue
		}
		k := key{r.Scenario, r.AddedRTTms, r.Concurrency, r.Op}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
		if by[r.Variant] == nil {
			by[r.Variant] = map[key]map[int]Result{}
		}
		if by[r.Variant][k] == nil {
			by[r.Variant][k] = map[int]Result{}
		}
		if _, dup := by[r.Variant][k][r.Round]; !dup {
			by[r.Variant][k][r.Round] = r
		}
	}
	// Within a pair: scenario in the order run, then latency,
	// concurrency, and reserve before claim.
	slices.SortStableFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.l, b.l), cmp.Compare(a.c, b.c), cmp.Compare(opRank(a.op), opRank(b.op)))
	})
	var scenarioOrder []string
	for _, r := range results {
		if !slices.Contains(scenarioOrder, r.Scenario) {
			scenarioOrder = append(scenarioOrder, r.Scenario)
		}
	}
	slices.SortStableFunc(keys, func(a, b key) int {
		return cmp.Compare(slices.Index(scenarioOrder, a.scenario), slices.Index(scenarioOrder, b.scenario))
	})
	var out []Overhead
	for _, p := range pairs {
		for _, k := range keys {
			vs, bs := by[p.Variant][k], by[p.Baseline][k]
			var p99, p50, thr []float64
			var sv, sb sideSamples
			for _, round := range sortedRounds(vs) {
				v := vs[round]
				bb, ok := bs[round]
				if !ok || v.P99ms <= 0 || bb.P99ms <= 0 || v.P50ms <= 0 || bb.P50ms <= 0 || v.OpsPerSec <= 0 || bb.OpsPerSec <= 0 {
					continue
				}
				p99 = append(p99, v.P99ms/bb.P99ms)
				p50 = append(p50, v.P50ms/bb.P50ms)
				thr = append(thr, v.OpsPerSec/bb.OpsPerSec)
				sv.add(v)
				sb.add(bb)
			}
			if len(p99) == 0 {
				continue
			}
			o := Overhead{Pair: p, Scenario: k.scenario, Concurrency: k.c, AddedRTTms: k.l, Op: k.op, Rounds: len(p99),
				P99: medianInterval(p99), P50: medianInterval(p50), Throughput: medianInterval(thr),
				Variant: sv.side(p.Variant), Baseline: sb.side(p.Baseline)}
			o.Met, o.Verdict = overheadVerdict(o)
			out = append(out, o)
		}
	}
	return out
}

func opRank(op string) int {
	if op == "reserve" {
		return 0
	}
	return 1
}

func sortedRounds(m map[int]Result) []int {
	var out []int
	for r := range m {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// sideSamples gathers one side's per-round figures.
type sideSamples struct {
	p99, ops, mysql, redis, gen []float64
}

func (s *sideSamples) add(r Result) {
	s.p99 = append(s.p99, r.P99ms)
	s.ops = append(s.ops, r.OpsPerSec)
	perOp := func(cores float64, into *[]float64) {
		if cores >= 0 && r.OpsPerSec > 0 {
			*into = append(*into, cores*1e6/r.OpsPerSec)
		}
	}
	perOp(r.MySQLCores, &s.mysql)
	perOp(r.RedisCores, &s.redis)
	perOp(r.LoadgenCores, &s.gen)
}

func (s *sideSamples) side(variant string) Side {
	orUnknown := func(xs []float64) float64 {
		if len(xs) == 0 {
			return -1
		}
		return median(xs)
	}
	return Side{Variant: variant, P99ms: median(s.p99), OpsPerSec: median(s.ops),
		MySQLCPUus: orUnknown(s.mysql), RedisCPUus: orUnknown(s.redis), LoadgenCPUus: orUnknown(s.gen)}
}

// overheadVerdict says whether the medians meet the targets, and what the
// intervals add: an interval on the wrong side of a bound is a miss the
// rounds cannot explain away; one across it is within the machine's
// noise either way.
func overheadVerdict(o Overhead) (bool, string) {
	p99Ok := o.P99.Median <= overheadMaxP99
	thrOk := o.Throughput.Median >= overheadMinThroughput
	var parts []string
	if !p99Ok {
		parts = append(parts, fmt.Sprintf("p99 ratio %.2f > %.2f", o.P99.Median, overheadMaxP99))
	}
	if !thrOk {
		parts = append(parts, fmt.Sprintf("throughput ratio %.2f < %.2f", o.Throughput.Median, overheadMinThroughput))
	}
	met := p99Ok && thrOk
	verdict := "met"
	if !met {
		verdict = "**MISSED**: " + strings.Join(parts, ", ")
	}
	if o.Rounds < 2 {
		return met, verdict + " (one round: no interval)"
	}
	var notes []string
	switch {
	case o.P99.Hi <= overheadMaxP99:
		notes = append(notes, fmt.Sprintf("p99 interval below %.2f", overheadMaxP99))
	case o.P99.Lo > overheadMaxP99:
		notes = append(notes, fmt.Sprintf("p99 interval above %.2f", overheadMaxP99))
	default:
		notes = append(notes, fmt.Sprintf("p99 interval spans %.2f (within noise)", overheadMaxP99))
	}
	switch {
	case o.Throughput.Lo >= overheadMinThroughput:
		notes = append(notes, fmt.Sprintf("throughput interval above %.2f", overheadMinThroughput))
	case o.Throughput.Hi < overheadMinThroughput:
		notes = append(notes, fmt.Sprintf("throughput interval below %.2f", overheadMinThroughput))
	default:
		notes = append(notes, fmt.Sprintf("throughput interval spans %.2f (within noise)", overheadMinThroughput))
	}
	return met, verdict + "; " + strings.Join(notes, ", ")
}

// overheadTable writes the Overhead section: one row per pair and point.
func (rep *Report) overheadTable(b *strings.Builder) {
	if len(rep.Overhead) == 0 {
		if len(rep.Pairs) > 0 {
			fmt.Fprintf(b, "#### Overhead\n\nNo pair (%s) was measured on both sides at any point.\n\n", pairList(rep.Pairs))
		}
		return
	}
	fmt.Fprintf(b, "#### Overhead\n\nPer round, the variant's figure over the baseline's, both from the same round "+
		"(in a round, the variants of a point run one after another, in reverse order every other round). "+
		"A ratio is the median over the rounds, with the 95%% percentile-bootstrap interval of that median "+
		"(%d resamples, a fixed seed). Targets: p99 ratio <= %.2f, throughput ratio >= %.2f; "+
		"\"met\" is the medians meeting both. p99 ms, ops/s and CPU µs per op (cores x 1e6 / ops/s: mysqld / redis / load generator) are medians over the rounds.\n\n",
		bootstrapResamples, overheadMaxP99, overheadMinThroughput)
	b.WriteString("| variant / baseline | where | op | rounds | p99 ratio (95%) | p50 ratio (95%) | throughput ratio (95%) | p99 ms | ops/s | µs/op variant | µs/op baseline | verdict |\n")
	b.WriteString("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, o := range rep.Overhead {
		fmt.Fprintf(b, "| %s / %s | %s c=%d +%dms | %s | %d | %s | %s | %s | %.2f / %.2f | %.0f / %.0f | %s | %s | %s |\n",
			o.Pair.Variant, o.Pair.Baseline, o.Scenario, o.Concurrency, o.AddedRTTms, o.Op, o.Rounds,
			intervalCell(o.P99, o.Rounds), intervalCell(o.P50, o.Rounds), intervalCell(o.Throughput, o.Rounds),
			o.Variant.P99ms, o.Baseline.P99ms, o.Variant.OpsPerSec, o.Baseline.OpsPerSec,
			cpuCell(o.Variant), cpuCell(o.Baseline), o.Verdict)
	}
	b.WriteString("\n")
}

func intervalCell(iv Interval, rounds int) string {
	if rounds < 2 {
		return fmt.Sprintf("%.2f", iv.Median)
	}
	return fmt.Sprintf("%.2f (%.2f-%.2f)", iv.Median, iv.Lo, iv.Hi)
}

func cpuCell(s Side) string {
	f := func(v float64) string {
		if v < 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f", v)
	}
	return f(s.MySQLCPUus) + " / " + f(s.RedisCPUus) + " / " + f(s.LoadgenCPUus)
}

func pairList(pairs []Pair) string {
	s := make([]string, len(pairs))
	for i, p := range pairs {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}
