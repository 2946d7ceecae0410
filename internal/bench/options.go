package bench

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Variant names. VariantPoolBefore is the unit pool as it was before this
// benchmark's fixes (mysqlstore.Config.ScanFromHead and SeparateRefills);
// VariantPoolHeadScan has only the first, to tell the two apart.
// VariantFacadeMySQLNoFeed is VariantFacadeMySQL without the change feed
// (mysqlstore.Config.NoFeed, no relay): it is unsafe to serve and exists
// to tell what Redis's mirror costs the MySQL-mode facade (which, without
// a relay, asks Redis itself to compare reserves).
// VariantPoolNoFeed is the pool without the change feed (no outbox row
// per decision): what the feed's row costs the pool's server CPU.
// VariantFacadeMySQLOnly is the facade in mode mysql_only, which compares
// nothing; VariantFacadeMySQLOnlyNoFeed is it without the feed: the
// facade that neither mirrors nor compares.
//
// A variant with the suffix Unbatched is its namesake sending one statement
// per round trip, as the store did before it sent each transaction in
// multi-statement batches (mysqlstore.Config.Unbatched; for the row and
// buckets baselines, their statement-by-statement transaction), and each
// claim in a transaction of its own (mysqlstore.Config.GroupSize 1) and no bound on a pool's concurrent reserves (PoolConcurrency -1):
// before and after, side by side in one run. A variant with the suffix
// Alone is batched but does not combine legacy claims, and one with the
// suffix Ungated does not bound a pool's reserves: what each adds on its
// own.
const (
	VariantRedis        = "redis"
	VariantPool         = "pool"
	VariantPoolBefore   = "pool-before"
	VariantPoolHeadScan = "pool-headscan"
	VariantRow          = "row"
	VariantBuckets      = "buckets"
	VariantFacadeRedis  = "facade-redis"
	VariantFacadeShadow = "facade-shadow"
	VariantFacadeMySQL  = "facade-mysql"

	VariantPoolNoFeed            = "pool-nofeed"
	VariantFacadeMySQLNoFeed     = "facade-mysql-nofeed"
	VariantFacadeMySQLOnly       = "facade-mysql-only"
	VariantFacadeMySQLOnlyNoFeed = "facade-mysql-only-nofeed"

	Unbatched = "-unbatched"
	Alone     = "-alone"
	Ungated   = "-ungated"
	// Inline is the legacy claim cleaning Redis up on its path before it
	// answers (redisstore.Config.InlineClaimCleanup), as it did before
	// Redis followed its claims through the change feed alone.
	Inline = "-inline"
)

// legacyClaiming are the variants with an Inline twin: their claims are
// the legacy claim.
var legacyClaiming = []string{VariantRedis, VariantFacadeRedis, VariantFacadeShadow}

// combining are the variants with an Alone twin: their claims are
// combined (the pool's, and the legacy claim's Deduct).
var combining = []string{VariantPool, VariantRedis, VariantFacadeRedis, VariantFacadeShadow, VariantFacadeMySQL}

// batchable are the variants that have an Unbatched twin.
var batchable = []string{VariantRedis, VariantPool, VariantRow, VariantBuckets, VariantFacadeRedis, VariantFacadeShadow, VariantFacadeMySQL}

// Variants lists every variant.
var Variants = append([]string{VariantRedis, VariantPool, VariantPoolBefore, VariantPoolHeadScan, VariantRow, VariantBuckets,
	VariantPoolNoFeed, VariantFacadeRedis, VariantFacadeShadow, VariantFacadeMySQL, VariantFacadeMySQLNoFeed,
	VariantFacadeMySQLOnly, VariantFacadeMySQLOnlyNoFeed}, unbatchedVariants()...)

func unbatchedVariants() []string {
	var out []string
	for _, v := range batchable {
		out = append(out, v+Unbatched)
	}
	for _, v := range combining {
		out = append(out, v+Alone)
	}
	for _, v := range legacyClaiming {
		out = append(out, v+Inline)
	}
	return append(out, VariantPool+Ungated, VariantFacadeMySQL+Ungated)
}

// isBaseline reports whether v is the row or buckets baseline (which has
// no ledger to claim against).
func isBaseline(v string) bool {
	v = strings.TrimSuffix(v, Unbatched)
	return v == VariantRow || v == VariantBuckets
}

// Sweep is one scenario's part of a run: every variant at every concurrency
// at every added latency.
type Sweep struct {
	Scenario    string
	Variants    []string
	Concurrency []int
	Latencies   []time.Duration
	// Sizes are the handoff scenario's shop sizes (reservations loaded
	// before the switches), one point each; other scenarios have none.
	Sizes []int
}

// DefaultHandoffSizes are the handoff scenario's shop sizes.
var DefaultHandoffSizes = []int{1000, 10_000, 100_000}

// OnDemandSweeps are the sweeps no preset runs, only a run that names
// their scenario (--scenarios handoff): the handoff scenario loads up to
// 100,000 reservations per point, minutes the presets do not spend.
// Its concurrency is the probe callers, its variant the facade it starts
// as (in shadow mode).
//
// The killflood scenario starts `reservoir serve` processes and floods
// them: its variant is the serve binary's label (VariantServe, this
// executable, or one of Options.ServeBinaries), its concurrency the
// attacking connections.
func OnDemandSweeps() []Sweep {
	return []Sweep{{Scenario: ScenarioHandoff, Variants: []string{VariantFacadeShadow}, Concurrency: []int{4},
		Latencies: []time.Duration{0}, Sizes: slices.Clone(DefaultHandoffSizes)},
		{Scenario: ScenarioKillFlood, Variants: []string{VariantServe}, Concurrency: []int{DefaultKillFloodConns},
			Latencies: []time.Duration{0}}}
}

// WithSizes returns sweeps with the handoff scenario's sizes replaced by
// sizes (when given): the command line's --handoff-sizes.
func WithSizes(sweeps []Sweep, sizes []int) []Sweep {
	out := slices.Clone(sweeps)
	for i := range out {
		if out[i].Scenario == ScenarioHandoff && len(sizes) > 0 {
			out[i].Sizes = slices.Clone(sizes)
		}
	}
	return out
}

var bothLatencies = []time.Duration{0, time.Millisecond}

// DefaultSweeps is the full run: about 150 points, under fifteen minutes
// on two cores with the default duration. The unbatched twins run next to
// their namesakes: before and after in one run.
func DefaultSweeps() []Sweep {
	stores := []string{VariantRedis, VariantPool, VariantRow, VariantBuckets}
	twins := []string{VariantPool, VariantPool + Unbatched, VariantRow, VariantRow + Unbatched, VariantBuckets, VariantBuckets + Unbatched}
	return []Sweep{
		{ScenarioHot, append([]string{VariantRedis, VariantPoolBefore}, twins...), []int{1, 4, 16, 64, 128}, bothLatencies, nil},
		{ScenarioUniform, append(slices.Clone(stores), VariantFacadeRedis, VariantFacadeShadow, VariantFacadeMySQL, VariantFacadeMySQLNoFeed),
			[]int{16, 64}, bothLatencies, nil},
		{ScenarioDrain, stores, []int{64}, bothLatencies, nil},
		{ScenarioCarts, stores, []int{64}, bothLatencies, nil},
		{ScenarioClaim, []string{VariantPool, VariantPool + Unbatched, VariantRedis, VariantRedis + Alone, VariantRedis + Unbatched,
			VariantFacadeShadow, VariantFacadeShadow + Alone, VariantFacadeShadow + Unbatched, VariantFacadeMySQL, VariantFacadeMySQL + Unbatched},
			[]int{64}, bothLatencies, nil},
	}
}

// QuickSweeps is `make bench`: every scenario and every ratio of the issue's
// targets, with fewer points, in about two minutes.
func QuickSweeps() []Sweep {
	ms := []time.Duration{time.Millisecond}
	return []Sweep{
		{ScenarioHot, []string{VariantRedis, VariantPool, VariantRow, VariantBuckets}, []int{1, 16, 64}, bothLatencies, nil},
		{ScenarioUniform, []string{VariantRedis, VariantPool, VariantFacadeRedis, VariantFacadeShadow, VariantFacadeMySQL, VariantFacadeMySQLNoFeed},
			[]int{16}, ms, nil},
		{ScenarioDrain, []string{VariantPool, VariantRow}, []int{64}, ms, nil},
		{ScenarioCarts, []string{VariantPool, VariantRow}, []int{16}, ms, nil},
		{ScenarioClaim, []string{VariantPool, VariantRedis, VariantFacadeShadow, VariantFacadeMySQL}, []int{64}, ms, nil},
	}
}

// Options configure a run. Run applies WithDefaults, then Validate.
type Options struct {
	// MySQLDSN is the server's DSN without a database, over TCP (the added
	// latency is a TCP proxy), e.g. root@tcp(127.0.0.1:33306)/. Required.
	MySQLDSN string
	// RedisAddr is the standalone Redis server, host:port. Required.
	RedisAddr string
	// Sweeps are the points to run, in order. Default: DefaultSweeps().
	Sweeps []Sweep
	// Duration is each point's measured window. A drain point ends when the
	// stock is gone; a claim point has a reserve window and a claim window.
	// Default: 3s.
	Duration time.Duration
	// Warmup runs before each window, unmeasured: connections open, pools
	// and caches settle. Default: 500ms.
	Warmup time.Duration
	// Flush, when set ("0", "1" or "2"), is the server's
	// innodb_flush_log_at_trx_commit for the run; the old value is put back
	// at the end. Default: "" (leave it).
	Flush string
	// Buckets is the number of rows per item of the buckets baseline.
	// Default: 16.
	Buckets int
	// PoolCap is the unit pool's cap (mysqlstore.Config.PoolCap) where the
	// scenario does not set its own. Default: 1000.
	PoolCap int64
	// Progress receives a line as each point starts and ends. Default: none.
	Progress io.Writer
	// Keep leaves the database and the Redis keys in place for inspection.
	Keep bool
	// Split pins MariaDB and Redis to the first half of the CPUs and this
	// process (load generator and the store or facade under test) to the
	// rest, standing in for application and databases on separate
	// machines; the affinities are put back at the end. Linux only, with
	// both servers on this machine. Default: false.
	Split bool
	// Rate, when positive, makes the reserve windows open-loop: calls
	// start on a fixed schedule of Rate per second in all (each of the
	// point's callers takes every Concurrency-th slot, so Concurrency
	// bounds the calls in flight), and a call's latency runs from its
	// scheduled start, so a call that starts late because the one before
	// it was slow counts its wait (no coordinated omission). Closed-loop
	// (the default, 0) measures latency at saturation, where any extra
	// CPU is queueing; open-loop measures it at a given traffic.
	Rate float64
	// KillFloodSwitches is the kill switch engage+release pairs of each
	// killflood point (each pair is two measured changes). Default: 20.
	KillFloodSwitches int
	// KillFloodTarget is which replicas' checkout listeners a killflood
	// point floods: KillFloodFirst (the first replica's, the one whose
	// admin API the changes go through; the other is the unflooded
	// reference) or KillFloodBoth (the connections spread over both).
	// Default: KillFloodFirst.
	KillFloodTarget string
	// KillFloodAdmin is which replica's admin API a killflood point's
	// changes go through: KillFloodAdminFlooded (the first, whose
	// checkout listener is flooded) or KillFloodAdminSpare (the second,
	// which takes no checkout traffic: an admin endpoint kept out of the
	// checkout Service). Spare needs KillFloodTarget first. Default:
	// KillFloodAdminFlooded.
	KillFloodAdmin string
	// ServeBinaries are reservoir binaries for the killflood scenario's
	// replicas, by variant label: two builds side by side in one run
	// (--serve before=/tmp/reservoir-old,after=/tmp/reservoir). The
	// variant VariantServe is this executable unless given here.
	ServeBinaries map[string]string
	// KillFloodControlDSN is a MySQL server, without a database, for the
	// killflood scenario's control database (the replicas' control_dsn:
	// the flags, their heartbeats, the audit, the comparer's stats): the
	// run creates, migrates and drops a database of its own there, and
	// the point's database probe times that server. It stands in for a
	// control plane whose database does not share the checkout's
	// MariaDB. Default "": the run's own database, beside the pod's
	// tables on Options.MySQLDSN's server.
	KillFloodControlDSN string
	// KillFloodNice is the killflood attackers' CPU priority (nice(1)):
	// on a machine they share with the replicas they flood, a positive
	// value stands in for machines of their own, where the CPU they use
	// is not the replicas'. 0: the bench's own priority. Default: 0.
	KillFloodNice int
	// Rounds is how many times the run measures every point of the plan
	// (RoundPlan: round after round, the order of a point's variants
	// reversed every other round). Each (point, round) is a point of its
	// own: a fresh shop, its own invariant check. Default: 1.
	Rounds int
	// Pairs are the ratios the report judges across the rounds (its
	// Overhead table): each variant over its baseline, round by round.
	// Both must be among the sweeps' variants. With one round, each ratio
	// is that round's, without an interval. Default: none.
	Pairs []Pair
	// FloodBinary is the binary the killflood attackers run as
	// (`FloodBinary bench` with FloodEnv set). Default: this executable.
	FloodBinary string
}

// WithDefaults returns o with zero fields set to their defaults.
func (o Options) WithDefaults() Options {
	if o.Sweeps == nil {
		o.Sweeps = DefaultSweeps()
	}
	if o.Duration == 0 {
		o.Duration = 3 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = 500 * time.Millisecond
	}
	if o.Buckets == 0 {
		o.Buckets = 16
	}
	if o.PoolCap == 0 {
		o.PoolCap = 1000
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.KillFloodSwitches == 0 {
		o.KillFloodSwitches = DefaultKillFloodSwitches
	}
	if o.KillFloodTarget == "" {
		o.KillFloodTarget = KillFloodFirst
	}
	if o.KillFloodAdmin == "" {
		o.KillFloodAdmin = KillFloodAdminFlooded
	}
	if o.Rounds == 0 {
		o.Rounds = 1
	}
	return o
}

// Validate reports an option that cannot work, naming it.
func (o Options) Validate() error {
	var errs []error
	if o.MySQLDSN == "" {
		errs = append(errs, errors.New("bench: Options.MySQLDSN is required (the server, without a database)"))
	}
	if o.RedisAddr == "" {
		errs = append(errs, errors.New("bench: Options.RedisAddr is required"))
	}
	if o.Duration < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("bench: Options.Duration must be at least 100ms, got %s", o.Duration))
	}
	if o.Rate < 0 || o.Rate > 1e6 {
		errs = append(errs, fmt.Errorf("bench: Options.Rate must be between 0 (closed-loop) and 1e6 calls/s, got %g", o.Rate))
	}
	if o.Warmup < 0 {
		errs = append(errs, fmt.Errorf("bench: Options.Warmup must not be negative, got %s", o.Warmup))
	}
	if o.Flush != "" && o.Flush != "0" && o.Flush != "1" && o.Flush != "2" {
		errs = append(errs, fmt.Errorf("bench: Options.Flush must be 0, 1, 2 or empty, got %q", o.Flush))
	}
	if o.Buckets < 1 || o.Buckets > 1024 {
		errs = append(errs, fmt.Errorf("bench: Options.Buckets must be between 1 and 1024, got %d", o.Buckets))
	}
	if o.PoolCap < 1 || o.PoolCap > 100000 {
		errs = append(errs, fmt.Errorf("bench: Options.PoolCap must be between 1 and 100000, got %d", o.PoolCap))
	}
	if len(o.Sweeps) == 0 {
		errs = append(errs, errors.New("bench: Options.Sweeps is empty: nothing to run"))
	}
	if o.KillFloodSwitches < 1 || o.KillFloodSwitches > 1000 {
		errs = append(errs, fmt.Errorf("bench: Options.KillFloodSwitches must be between 1 and 1000, got %d", o.KillFloodSwitches))
	}
	if o.KillFloodNice < -20 || o.KillFloodNice > 19 {
		errs = append(errs, fmt.Errorf("bench: Options.KillFloodNice must be between -20 and 19 (nice(1)), got %d", o.KillFloodNice))
	}
	if o.KillFloodControlDSN != "" {
		if cfg, err := mysql.ParseDSN(o.KillFloodControlDSN); err != nil {
			errs = append(errs, fmt.Errorf("bench: Options.KillFloodControlDSN: %w", err))
		} else if cfg.DBName != "" {
			errs = append(errs, fmt.Errorf("bench: Options.KillFloodControlDSN names database %q: give the server only; the run creates its own database", cfg.DBName))
		}
	}
	if o.KillFloodTarget != KillFloodFirst && o.KillFloodTarget != KillFloodBoth {
		errs = append(errs, fmt.Errorf("bench: Options.KillFloodTarget must be %q or %q, got %q", KillFloodFirst, KillFloodBoth, o.KillFloodTarget))
	}
	switch {
	case o.KillFloodAdmin != KillFloodAdminFlooded && o.KillFloodAdmin != KillFloodAdminSpare:
		errs = append(errs, fmt.Errorf("bench: Options.KillFloodAdmin must be %q or %q, got %q", KillFloodAdminFlooded, KillFloodAdminSpare, o.KillFloodAdmin))
	case o.KillFloodAdmin == KillFloodAdminSpare && o.KillFloodTarget == KillFloodBoth:
		errs = append(errs, fmt.Errorf("bench: Options.KillFloodAdmin %q needs Options.KillFloodTarget %q: with %q every replica is flooded and none is spare",
			KillFloodAdminSpare, KillFloodFirst, KillFloodBoth))
	}
	if o.Rounds < 1 || o.Rounds > maxRounds {
		errs = append(errs, fmt.Errorf("bench: Options.Rounds must be between 1 and %d, got %d", maxRounds, o.Rounds))
	}
	var run []string
	for _, s := range o.Sweeps {
		run = append(run, s.Variants...)
	}
	for _, p := range o.Pairs {
		for _, v := range []string{p.Variant, p.Baseline} {
			if !slices.Contains(run, v) {
				errs = append(errs, fmt.Errorf("bench: Options.Pairs: pair %q: variant %q is not among the variants run (--variants)", p.String(), v))
			}
		}
		if p.Variant == p.Baseline {
			errs = append(errs, fmt.Errorf("bench: Options.Pairs: pair %q compares a variant with itself", p.String()))
		}
	}
	for label, path := range o.ServeBinaries {
		if label == "" || path == "" {
			errs = append(errs, fmt.Errorf("bench: Options.ServeBinaries: a label and a path are required, got %q=%q", label, path))
		}
	}
	for i, s := range o.Sweeps {
		if _, ok := scenarios[s.Scenario]; !ok {
			errs = append(errs, fmt.Errorf("bench: Options.Sweeps[%d]: unknown scenario %q (known: %s)", i, s.Scenario, strings.Join(ScenarioNames(), ", ")))
		}
		for _, v := range s.Variants {
			if s.Scenario == ScenarioKillFlood {
				if !o.killFloodVariant(v) {
					errs = append(errs, fmt.Errorf("bench: Options.Sweeps[%d]: the killflood scenario's variant is a serve binary's label: %s (this executable) or one given with --serve LABEL=PATH, got %q",
						i, VariantServe, v))
				}
				continue
			}
			if !slices.Contains(Variants, v) {
				errs = append(errs, fmt.Errorf("bench: Options.Sweeps[%d]: unknown variant %q (known: %s)", i, v, strings.Join(Variants, ", ")))
			}
			if s.Scenario == ScenarioClaim && isBaseline(v) {
				errs = append(errs, fmt.Errorf("bench: Options.Sweeps[%d]: the %s baseline has no ledger to claim against", i, v))
			}
			if s.Scenario == ScenarioHandoff && !handoffVariant(v) {
				errs = append(errs, fmt.Errorf("bench: Options.Sweeps[%d]: the handoff scenario starts with the facade in shadow mode: its variant is %s (or %s, %s), got %q",
					i, VariantFacadeShadow, VariantFacadeShadow+Unbatched, VariantFacadeShadow+Alone, v))
			}
		}
		switch {
		case s.Scenario == ScenarioHandoff && len(s.Sizes) == 0:
			errs = append(errs, fmt.Errorf("bench: Options.Sweeps[%d]: the handoff scenario needs at least one shop size", i))
		case s.Scenario != ScenarioHandoff && len(s.Sizes) > 0:
			errs = append(errs, fmt.Errorf("bench: Options.Sweeps[%d]: only the handoff scenario takes shop sizes", i))
		}
		for _, n := range s.Sizes {
			if n < 2 || n > maxHandoffSize {
				errs = append(errs, fmt.Errorf("bench: Options.Sweeps[%d]: a handoff shop size must be between 2 and %d reservations, got %d", i, maxHandoffSize, n))
			}
		}
		for _, c := range s.Concurrency {
			if s.Scenario == ScenarioKillFlood {
				if c < 1 || c > 20000 {
					errs = append(errs, fmt.Errorf("bench: Options.Sweeps[%d]: the killflood scenario's connections must be between 1 and 20000, got %d", i, c))
				}
				continue
			}
			if c < 1 || c > 1024 {
				errs = append(errs, fmt.Errorf("bench: Options.Sweeps[%d]: concurrency must be between 1 and 1024, got %d", i, c))
			}
		}
		for _, l := range s.Latencies {
			if s.Scenario == ScenarioKillFlood && l != 0 {
				errs = append(errs, fmt.Errorf("bench: Options.Sweeps[%d]: %w, got %s", i, errKillFloodLatency, l))
			}
			if l < 0 || l%time.Millisecond != 0 || l > time.Second {
				errs = append(errs, fmt.Errorf("bench: Options.Sweeps[%d]: added latency must be whole milliseconds up to 1s (toxiproxy's unit), got %s", i, l))
			}
		}
	}
	return errors.Join(errs...)
}

// maxRounds bounds Options.Rounds: a typo's thousand rounds would run
// for days.
const maxRounds = 1000

// Point is one measurement.
type Point struct {
	Scenario    string        `json:"scenario"`
	Variant     string        `json:"variant"`
	Concurrency int           `json:"concurrency"`
	Latency     time.Duration `json:"-"`
	// Size is a handoff point's shop size (reservations); 0 otherwise.
	Size int `json:"size,omitempty"`
	// Round is the point's round, 1 to Options.Rounds, in a run of more
	// than one round; 0 in a run of one (as every run before rounds).
	Round int `json:"round,omitempty"`
}

func (p Point) String() string {
	s := fmt.Sprintf("%s %s c=%d +%s", p.Scenario, p.Variant, p.Concurrency, latencyLabel(p.Latency))
	if p.Size > 0 {
		s += " n=" + strconv.Itoa(p.Size)
	}
	return s
}

func latencyLabel(l time.Duration) string {
	return strconv.FormatInt(l.Milliseconds(), 10) + "ms"
}

// Plan lists the points of the sweeps in the order they run: per sweep, per
// latency, per concurrency, every variant in turn, so that variants compared
// with each other run next to each other in time (the machine is shared).
func Plan(sweeps []Sweep) []Point {
	var out []Point
	for _, s := range sweeps {
		for _, l := range s.Latencies {
			for _, c := range s.Concurrency {
				for _, v := range s.Variants {
					if len(s.Sizes) == 0 {
						out = append(out, Point{Scenario: s.Scenario, Variant: v, Concurrency: c, Latency: l})
					}
					for _, n := range s.Sizes {
						out = append(out, Point{Scenario: s.Scenario, Variant: v, Concurrency: c, Latency: l, Size: n})
					}
				}
			}
		}
	}
	return out
}

// Narrow returns sweeps restricted to the given scenarios and with the
// variants, concurrency and latencies replaced where given: the command
// line's way to run part of a preset.
func Narrow(sweeps []Sweep, scenarioNames, variants []string, concurrency []int, latencies []time.Duration) []Sweep {
	var out []Sweep
	for _, s := range sweeps {
		if len(scenarioNames) > 0 && !slices.Contains(scenarioNames, s.Scenario) {
			continue
		}
		if len(variants) > 0 {
			s.Variants = slices.DeleteFunc(slices.Clone(variants), func(v string) bool {
				return s.Scenario == ScenarioClaim && isBaseline(v)
			})
		}
		if len(concurrency) > 0 {
			s.Concurrency = concurrency
		}
		if len(latencies) > 0 {
			s.Latencies = latencies
		}
		if len(s.Variants) > 0 {
			out = append(out, s)
		}
	}
	// A scenario asked for that no preset sweep has runs with the defaults
	// of the full run (or, for one the full run leaves out, its own).
	for _, name := range scenarioNames {
		if !slices.ContainsFunc(out, func(s Sweep) bool { return s.Scenario == name }) {
			for _, d := range append(DefaultSweeps(), OnDemandSweeps()...) {
				if d.Scenario == name {
					out = append(out, Narrow([]Sweep{d}, nil, variants, concurrency, latencies)...)
				}
			}
		}
	}
	return out
}
