//go:build !nobench

// The benchmark, `reservoir bench`, is linked only into a build without
// the nobench tag: it pulls in internal/bench and internal/faults
// (toxiproxy, gorilla/mux, zerolog), which serve never runs. The container
// image is built with -tags nobench (the Dockerfile), and bench_nobench.go
// stands in for this file there.

package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/internal/bench"
)

// benchOptionFlags names bench.Options' fields in msg by their flags.
func benchOptionFlags(msg string) string {
	msg = regexp.MustCompile(`bench: Options\.Sweeps(\[\d+\])?`).ReplaceAllString(msg, "--scenarios and --variants")
	return strings.NewReplacer(
		"bench: Options.MySQLDSN", "--mysql-dsn", "bench: Options.RedisAddr", "--redis-addr", "bench: Options.Duration", "--duration",
		"bench: Options.Rate", "--rate", "bench: Options.Warmup", "--warmup", "bench: Options.Flush", "--flush", "bench: Options.Buckets", "--buckets",
		"bench: Options.PoolCap", "--pool-cap", "bench: Options.KillFloodSwitches", "--killflood-switches", "bench: Options.KillFloodNice", "--killflood-nice",
		"bench: Options.KillFloodTarget", "--killflood-target", "bench: Options.KillFloodAdmin", "--killflood-admin", "bench: Options.KillFloodControlDSN", "--killflood-control-dsn", "bench: Options.ServeBinaries", "--serve",
		"bench: Options.Rounds", "--rounds", "bench: Options.Pairs", "--pairs", "bench: ", "",
		"Options.KillFloodTarget", "--killflood-target", // named in another field's error
	).Replace(msg)
}

func runBench(ctx context.Context, args []string, out, errOut io.Writer) error {
	if spec := os.Getenv(bench.FloodEnv); spec != "" {
		// The attackers of a killflood point: the bench runs this binary
		// again, in a process of its own.
		return bench.RunFlood(ctx, spec, os.Stdin, out)
	}
	fs := newFlags("bench", "bench [--quick] [--scenarios LIST] [--variants LIST] [--concurrency LIST] [--latency LIST] [--duration D] [--handoff-sizes LIST] [--killflood-switches N] [--killflood-target first|both] [--killflood-admin flooded|spare] [--killflood-nice N] [--killflood-control-dsn DSN] [--serve LABEL=PATH,...] [--flush 0|1|2|keep] [--split] [--rate N] [--rounds N] [--pairs LIST|overhead] [--out DIR] [--cpuprofile FILE] [--plan] | bench --render FILE [--pairs LIST|overhead] [--out DIR]", out)
	mysqlDSN := envString(fs, "mysql-dsn", "RESERVOIR_MYSQL_DSN",
		"the MySQL server's `DSN`, without a database; the run creates and drops its own database")
	redisAddr := envString(fs, "redis-addr", "RESERVOIR_REDIS_ADDR",
		"the standalone Redis server, `HOST:PORT`; the run uses and deletes its own key prefix")
	quick := fs.Bool("quick", false, "the quick preset (about two minutes): fewer points, 1.5s windows")
	scenarioList := fs.String("scenarios", "", "run only these scenarios, a comma-separated `LIST`: "+strings.Join(bench.ScenarioNames(), ","))
	variantList := fs.String("variants", "", "run these variants in every scenario, a comma-separated `LIST`: "+strings.Join(bench.Variants, ","))
	concurrencyList := fs.String("concurrency", "", "callers per point, a comma-separated `LIST` replacing each scenario's sweep, e.g. 1,4,16,64,128")
	latencyList := fs.String("latency", "", "round trip added between the load generator and each server, a comma-separated `LIST` of whole ms, e.g. 0,1ms")
	duration := fs.Duration("duration", 0, "measured window per point (default 3s; 1.5s with --quick); the handoff scenario watches each switch this long after the new decider's first answer")
	handoffSizes := fs.String("handoff-sizes", "", "the handoff scenario's shop sizes, a comma-separated `LIST` of reservations loaded before its switches (default "+
		joinInts(bench.DefaultHandoffSizes)+"); the handoff scenario runs only when --scenarios names it")
	killSwitches := fs.Int("killflood-switches", bench.DefaultKillFloodSwitches, "the killflood scenario's kill switch engage+release `N` pairs per point (2N measured changes)")
	killTarget := fs.String("killflood-target", bench.KillFloodFirst, "the killflood scenario floods the `first` replica's checkout listener (the one the kill switch goes through) or `both` replicas'")
	killAdmin := fs.String("killflood-admin", bench.KillFloodAdminFlooded, "the killflood scenario's kill switch changes go through the `flooded` first replica's admin API, or the spare second one's (it takes no checkout traffic; needs --killflood-target first)")
	killNice := fs.Int("killflood-nice", 0, "the killflood attackers' CPU priority, `N` for nice(1) (19: the lowest, standing in for attackers on machines of their own); 0: the bench's")
	killControl := fs.String("killflood-control-dsn", "", "a MySQL server's `DSN`, without a database, for the killflood scenario's control database (the replicas' flags, heartbeats, audit and comparer stats): "+
		"the run creates, migrates and drops its own database there, and times that server with its database probe; default: the run's own database, beside the pod's")
	serveList := fs.String("serve", "", "the killflood scenario's serve binaries, a comma-separated `LIST` of LABEL=PATH; each LABEL is a variant (--variants), e.g. before=/tmp/reservoir-old,after=bin/reservoir; "+
		"the variant "+bench.VariantServe+" is this binary")
	warmup := fs.Duration("warmup", 0, "unmeasured warmup before each window (default 500ms; 300ms with --quick)")
	flush := fs.String("flush", "1", "innodb_flush_log_at_trx_commit for the run: `MODE` 0, 1 or 2 (restored afterwards), or keep")
	buckets := fs.Int("buckets", 16, "rows per item of the buckets baseline")
	poolCap := fs.Int64("pool-cap", 1000, "the unit pool's cap (scenarios may set their own)")
	outDir := fs.String("out", "docs/bench", "the `DIR` for bench.json, bench.md and the charts (empty: none)")
	keep := fs.Bool("keep", false, "keep the run's database and Redis keys")
	split := fs.Bool("split", false, "pin MariaDB and Redis to the first half of the CPUs and the bench (load generator and the store or facade) to the rest, as if on separate machines (Linux, servers on this machine)")
	planOnly := fs.Bool("plan", false, "print the points that would run, and exit")
	rate := fs.Float64("rate", 0, "open-loop reserves: `N` calls/s offered per point, spread over its callers (which bound the calls in flight), latency from each call's scheduled start; 0 is closed-loop, every caller calling again at once")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (load generator, stores, facades, relays) to `FILE`, for go tool pprof")
	rounds := fs.Int("rounds", 1, "measure every point `N` times, round after round, the order of a point's variants reversed every other round; "+
		"each (point, round) has a fresh shop and its own invariant check")
	pairList := fs.String("pairs", "", "the ratios to judge over the rounds (bench.md's Overhead table), a comma-separated `LIST` of VARIANT/BASELINE, or "+
		bench.PairsOverhead+" for issue 28's four ("+overheadPairs()+"); without --variants, the variants the pairs need; "+
		"with one round, each ratio is that round's, without an interval")
	render := fs.String("render", "", "render an earlier run's bench.json `FILE` again (markdown to stdout, files to --out) instead of running")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *rounds < 1 {
		return usagef("--rounds must be at least 1, got %d", *rounds)
	}
	pairs, err := bench.ParsePairs(splitList(*pairList))
	if err != nil {
		return usagef("--pairs: %v", err)
	}
	if *render != "" {
		return renderBench(*render, *outDir, pairs, out, errOut)
	}
	opts := bench.Options{MySQLDSN: *mysqlDSN, RedisAddr: *redisAddr, Buckets: *buckets, PoolCap: *poolCap,
		Keep: *keep, Split: *split, Rate: *rate, Progress: errOut, Duration: *duration, Warmup: *warmup,
		KillFloodSwitches: *killSwitches, KillFloodTarget: *killTarget, KillFloodAdmin: *killAdmin, KillFloodNice: *killNice, KillFloodControlDSN: *killControl, Rounds: *rounds, Pairs: pairs}
	if *serveList != "" {
		opts.ServeBinaries = map[string]string{}
		for _, f := range splitList(*serveList) {
			label, path, ok := strings.Cut(f, "=")
			if !ok || label == "" || path == "" {
				return usagef("--serve: want LABEL=PATH, got %q", f)
			}
			opts.ServeBinaries[label] = path
		}
	}
	sweeps := bench.DefaultSweeps()
	if *quick {
		sweeps = bench.QuickSweeps()
		if opts.Duration == 0 {
			opts.Duration = 1500 * time.Millisecond
		}
		if opts.Warmup == 0 {
			opts.Warmup = 300 * time.Millisecond
		}
	}
	cs, err := parseInts(*concurrencyList)
	if err != nil {
		return usagef("--concurrency: %v", err)
	}
	ls, err := parseLatencies(*latencyList)
	if err != nil {
		return usagef("--latency: %v", err)
	}
	sizes, err := parseInts(*handoffSizes)
	if err != nil {
		return usagef("--handoff-sizes: %v", err)
	}
	variants := splitList(*variantList)
	if len(variants) == 0 {
		variants = bench.PairVariants(pairs)
	}
	opts.Sweeps = bench.WithSizes(bench.Narrow(sweeps, splitList(*scenarioList), variants, cs, ls), sizes)
	switch *flush {
	case "keep":
	case "0", "1", "2":
		opts.Flush = *flush
	default:
		return oneOf("flush", *flush, "0", "1", "2", "keep")
	}
	// The options' own check, with the servers filled in (their absence
	// is said below, after --plan, which needs none): a value out of
	// range is bad usage, named by its flag.
	check := opts
	check.MySQLDSN, check.RedisAddr = cmp.Or(check.MySQLDSN, "-"), cmp.Or(check.RedisAddr, "-")
	if err := check.WithDefaults().Validate(); err != nil {
		return usagef("%s", benchOptionFlags(err.Error()))
	}
	if *planOnly {
		for i, p := range bench.RoundPlan(opts.Sweeps, opts.Rounds) {
			round := ""
			if p.Round > 0 {
				round = fmt.Sprintf("round %d/%d  ", p.Round, opts.Rounds)
			}
			fmt.Fprintf(out, "%3d  %s%s\n", i+1, round, p)
		}
		return nil
	}
	if opts.MySQLDSN == "" || opts.RedisAddr == "" {
		return usagef(`--mysql-dsn and --redis-addr are required (or eval "$(scripts/services env)")`)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	rep, runErr := bench.Run(ctx, opts)
	if rep == nil {
		return runErr
	}
	if err := rep.WriteMarkdown(out); err != nil {
		return err
	}
	if *outDir != "" {
		if err := writeBenchFiles(*outDir, rep); err != nil {
			return errors.Join(runErr, err)
		}
		fmt.Fprintf(errOut, "bench: wrote %s\n", *outDir)
	}
	return runErr
}

// renderBench writes an earlier run's report again from its bench.json,
// with pairs, when given, judged in place of the run's own.
func renderBench(file, outDir string, pairs []bench.Pair, out, errOut io.Writer) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("--render: %w", err)
	}
	rep, err := bench.ReadReport(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("--render %s: %w", file, err)
	}
	if len(pairs) > 0 {
		rep.Rejudge(pairs)
	}
	if err := rep.WriteMarkdown(out); err != nil {
		return err
	}
	if outDir == "" {
		return nil
	}
	if err := writeBenchFiles(outDir, rep); err != nil {
		return err
	}
	fmt.Fprintf(errOut, "bench: wrote %s\n", outDir)
	return nil
}

func writeBenchFiles(dir string, rep *bench.Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	write := func(name string, fn func(io.Writer) error) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	if err := write("bench.json", rep.WriteJSON); err != nil {
		return err
	}
	if err := write("bench.md", rep.WriteMarkdown); err != nil {
		return err
	}
	for _, sc := range rep.ChartScenarios() {
		if err := write("chart-"+sc+".svg", func(w io.Writer) error { return rep.WriteSVG(w, sc) }); err != nil {
			return err
		}
	}
	return nil
}

// overheadPairs lists bench.OverheadPairs for the help.
func overheadPairs() string {
	var s []string
	for _, p := range bench.OverheadPairs() {
		s = append(s, p.String())
	}
	return strings.Join(s, ",")
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// parseLatencies reads "0,1ms" or "0,1": a bare number is milliseconds.
func parseLatencies(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range splitList(s) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, time.Duration(n)*time.Millisecond)
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}
