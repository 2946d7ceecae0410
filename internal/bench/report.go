package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Result is one window of one point: the reserve window, or a claim
// point's claim window.
type Result struct {
	Point
	// AddedRTTms is the latency the proxy added to each round trip.
	AddedRTTms int64 `json:"added_rtt_ms"`
	// Op is "reserve" or "claim".
	Op string `json:"op"`
	// Seconds is the window's length.
	Seconds float64 `json:"seconds"`
	// OK are calls that reserved (claimed); Refused are insufficient
	// answers. Both are answers; errors are not.
	OK      int64 `json:"ok"`
	Refused int64 `json:"refused"`
	// OpsPerSec is answers per second.
	OpsPerSec float64 `json:"ops_per_sec"`
	// Latency percentiles of the answers, in milliseconds.
	P50ms  float64 `json:"p50_ms"`
	P99ms  float64 `json:"p99_ms"`
	P999ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`
	// Errors by kind, with one message of each.
	Errors       map[string]int64  `json:"errors"`
	ErrorSamples map[string]string `json:"error_samples,omitempty"`
	// Deadlocks and LockWaitTimeouts were met (and retried); Retries
	// counts every retry: those, and a reserve going back to a short pool.
	Deadlocks        int64 `json:"deadlocks"`
	LockWaitTimeouts int64 `json:"lock_wait_timeouts"`
	Retries          int64 `json:"retries"`
	// Refills are replenish transactions that added units.
	Refills     int64 `json:"refills"`
	RefillUnits int64 `json:"refill_units"`
	// ShadowSkipped: facade shadow calls not run (slots full).
	ShadowSkipped int64 `json:"shadow_skipped"`
	// Server-wide counters per call (the server is shared: other clients'
	// work counts too). FsyncsPerOp counts log fsyncs.
	FsyncsPerOp       float64 `json:"fsyncs_per_op"`
	RowLockWaits      int64   `json:"row_lock_waits"`
	RowLockWaitMs     int64   `json:"row_lock_wait_ms"`
	LockRequestsPerOp float64 `json:"lock_requests_per_op"`
	RowsReadPerOp     float64 `json:"rows_read_per_op"`
	HistoryListLength int64   `json:"history_list_length"`
	// Round trips per call, counted as requests written on each server's
	// connections.
	MySQLRoundTripsPerOp float64 `json:"mysql_round_trips_per_op"`
	RedisRoundTripsPerOp float64 `json:"redis_round_trips_per_op"`
	// Time per call spent waiting for answers (request written to answer
	// read): round trips plus server time, queueing included.
	MySQLWaitMsPerOp float64 `json:"mysql_wait_ms_per_op"`
	RedisWaitMsPerOp float64 `json:"redis_wait_ms_per_op"`
	// ConnMsPerOp is MySQL connection hold time per call, by caller and in
	// total: by Little's law, ops/s x this is the connections in use.
	ConnMsPerOp         float64            `json:"conn_ms_per_op"`
	ConnMsPerOpByCaller map[string]float64 `json:"conn_ms_per_op_by_caller,omitempty"`
	// CPU in cores (CPU seconds per second) and microseconds per call:
	// mariadbd, redis-server, and this process (load generator and proxy).
	MySQLCores   float64 `json:"mysqld_cores"`
	RedisCores   float64 `json:"redis_cores"`
	LoadgenCores float64 `json:"loadgen_cores"`
	MySQLCPUus   float64 `json:"mysqld_cpu_us_per_op"`
	RedisCPUus   float64 `json:"redis_cpu_us_per_op"`
	LoadgenCPUus float64 `json:"loadgen_cpu_us_per_op"`
	// The path measured idle before the run: a no-op statement, a PING,
	// and the COMMIT of a one-row update.
	MySQLRTTms float64 `json:"mysql_rtt_ms"`
	RedisRTTms float64 `json:"redis_rtt_ms"`
	CommitMs   float64 `json:"commit_ms"`
	// LoadAvg is the machine's 1-minute load average as the window closed:
	// the servers, the load generator and anything else running.
	LoadAvg float64 `json:"load_avg"`
	// Handoff is a handoff point's switch (Op names it: advance, kill,
	// release) and its figures. Its window runs from the flags change to
	// the end of the watch; the latency percentiles are the waits of
	// every probe call (reserve or release) that started in it, errors
	// included.
	Handoff *HandoffStats `json:"handoff,omitempty"`
	// KillFlood is a killflood point's changes and flood (Op is
	// "killswitch"). OK counts the changes answered 200; the latency
	// percentiles are the admin calls' answer times.
	KillFlood *KillFloodStats `json:"killflood,omitempty"`
	// Invariant is "ok" or what the check found.
	Invariant   string `json:"invariant"`
	Interrupted bool   `json:"interrupted,omitempty"`
	Error       string `json:"error,omitempty"`
}

func (r *Result) fill(lat []time.Duration, before, after snapshot, srv *servers) {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return ms(lat[min(len(lat)-1, int(p*float64(len(lat))))])
	}
	r.P50ms, r.P99ms, r.P999ms = pct(0.50), pct(0.99), pct(0.999)
	if len(lat) > 0 {
		r.MaxMs = ms(lat[len(lat)-1])
	}
	var errs int64
	for _, n := range r.Errors {
		errs += n
	}
	calls := float64(r.OK + r.Refused + errs)
	if r.Seconds > 0 {
		r.OpsPerSec = float64(r.OK+r.Refused) / r.Seconds
	}
	per := func(d float64) float64 {
		if calls == 0 {
			return 0
		}
		return d / calls
	}
	delta := func(name string) int64 { return after.status[name] - before.status[name] }
	r.FsyncsPerOp = per(float64(delta(srv.fsyncVar)))
	r.RowLockWaits = delta("Innodb_row_lock_waits")
	r.RowLockWaitMs = delta("Innodb_row_lock_time")
	r.RowsReadPerOp = per(float64(delta("Innodb_rows_read")))
	r.HistoryListLength = after.status["Innodb_history_list_length"]
	if before.lockRequests >= 0 && after.lockRequests >= 0 {
		r.LockRequestsPerOp = per(float64(after.lockRequests - before.lockRequests))
	}
	r.MySQLRoundTripsPerOp = per(float64(after.mysqlWrites - before.mysqlWrites))
	r.RedisRoundTripsPerOp = per(float64(after.redisWrites - before.redisWrites))
	r.MySQLWaitMsPerOp = per(float64(after.mysqlWaitNs-before.mysqlWaitNs) / 1e6)
	r.RedisWaitMsPerOp = per(float64(after.redisWaitNs-before.redisWaitNs) / 1e6)
	b, a := before.tgt, after.tgt
	r.Deadlocks = a.deadlocks - b.deadlocks
	r.LockWaitTimeouts = a.lockWaits - b.lockWaits
	r.Retries = a.retries - b.retries
	r.Refills = a.refills - b.refills
	r.RefillUnits = a.refillUnits - b.refillUnits
	r.ShadowSkipped = a.shadowSkipped - b.shadowSkipped
	r.ConnMsPerOpByCaller = map[string]float64{}
	for caller, h := range a.hold {
		d := h.seconds - b.hold[caller].seconds
		if d <= 0 {
			continue
		}
		r.ConnMsPerOpByCaller[caller] = per(d * 1000)
		r.ConnMsPerOp += per(d * 1000)
	}
	cores := func(b, a time.Duration) (float64, float64) {
		if b < 0 || a < 0 || r.Seconds == 0 {
			return -1, -1
		}
		d := (a - b).Seconds()
		return d / r.Seconds, per(d * 1e6)
	}
	r.MySQLCores, r.MySQLCPUus = cores(before.mysqlCPU, after.mysqlCPU)
	r.RedisCores, r.RedisCPUus = cores(before.redisCPU, after.redisCPU)
	r.LoadgenCores, r.LoadgenCPUus = cores(before.selfCPU, after.selfCPU)
	r.LoadAvg = after.loadAvg
}

func (r Result) errorCount() int64 {
	var n int64
	for _, v := range r.Errors {
		n += v
	}
	return n
}

// progress is the result in one line for the progress output.
func (r Result) progress() string {
	if r.Error != "" {
		return "FAILED: " + r.Error
	}
	s := fmt.Sprintf("%s %.0f/s p99 %.1fms", r.Op, r.OpsPerSec, r.P99ms)
	if h := r.Handoff; h != nil {
		s = fmt.Sprintf("%s: undecided %.1fms, waits p99 %.1fms max %.1fms", r.Op, h.UndecidedMs, r.P99ms, r.MaxMs)
	}
	if kf := r.KillFlood; kf != nil {
		s = fmt.Sprintf("%d changes: obey p50/p99/max %s ms, answer %s ms; flood %d opened, %.0f%% shed", kf.Changes, kf.Obey, kf.Answer, kf.Flood.Opened, 100*kf.ShedRate)
	}
	if n := r.errorCount(); n > 0 {
		s += fmt.Sprintf(" errors %d", n)
	}
	if r.Invariant != "ok" {
		s += " invariant " + r.Invariant
	}
	if r.Interrupted {
		s += " (interrupted)"
	}
	return s
}

// Env describes where and how a run ran.
type Env struct {
	GoVersion    string `json:"go_version"`
	CPUs         int    `json:"cpus"`
	LoadAvg      string `json:"load_avg_at_start"`
	MySQLVersion string `json:"mysql_version"`
	RedisVersion string `json:"redis_version"`
	Flush        string `json:"innodb_flush_log_at_trx_commit"`
	// Binlog is the server's binary log: "off", or "ROW, sync_binlog=1".
	Binlog string `json:"binlog"`
	// Split is how the run was pinned to cores (Options.Split), or "".
	Split string `json:"split,omitempty"`
	// Rate is the reserve windows' offered load (Options.Rate), 0 for
	// closed-loop.
	Rate         float64 `json:"rate_per_second,omitempty"`
	FsyncCounter string  `json:"fsync_counter"`
	LockCounter  bool    `json:"lock_requests_counter"`
	DurationS    float64 `json:"window_seconds"`
	WarmupS      float64 `json:"warmup_seconds"`
	Buckets      int     `json:"buckets"`
	PoolCap      int64   `json:"pool_cap"`
	// Database and RedisPrefix are the run's own, removed at its end
	// unless Options.Keep.
	Database    string `json:"database"`
	RedisPrefix string `json:"redis_prefix"`
	// ControlServer is the server of the killflood scenario's control
	// database when it has one of its own (Options.KillFloodControlDSN),
	// as host:port, its version and flush setting; "" when the run's
	// database is the control database.
	ControlServer string `json:"control_server,omitempty"`
}

// Report is a run's results and the ratios against the targets.
type Report struct {
	Started   time.Time         `json:"started"`
	Seconds   float64           `json:"seconds"`
	Env       Env               `json:"env"`
	Scenarios map[string]string `json:"scenarios"`
	Results   []Result          `json:"results"`
	Targets   []Target          `json:"targets"`
	// Rounds is Options.Rounds of a run of more than one round (0 for
	// one), and Pairs its Options.Pairs: what Overhead is judged from.
	Rounds int    `json:"rounds,omitempty"`
	Pairs  []Pair `json:"pairs,omitempty"`
	// Overhead is the pairs judged over the rounds (recomputed from
	// Results and Pairs when a report is read).
	Overhead    []Overhead `json:"overhead,omitempty"`
	Interrupted bool       `json:"interrupted,omitempty"`
}

func newReport(ctx context.Context, opts Options, srv *servers, started time.Time) *Report {
	rep := &Report{Started: started.UTC(), Scenarios: map[string]string{}}
	for _, s := range opts.Sweeps {
		rep.Scenarios[s.Scenario] = ScenarioAbout(s.Scenario)
	}
	e := &rep.Env
	e.GoVersion, e.CPUs = runtime.Version(), runtime.NumCPU()
	if b, err := os.ReadFile("/proc/loadavg"); err == nil && len(strings.Fields(string(b))) >= 3 {
		e.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	_ = srv.admin.QueryRowContext(ctx, "SELECT VERSION()").Scan(&e.MySQLVersion)
	_ = srv.admin.QueryRowContext(ctx, sqlFlushRead).Scan(&e.Flush)
	var logBin int
	var format string
	var sync int
	e.Binlog = "unknown"
	if srv.admin.QueryRowContext(ctx, sqlBinlogRead).Scan(&logBin, &format, &sync) == nil {
		e.Binlog = "off"
		if logBin == 1 {
			e.Binlog = fmt.Sprintf("%s, sync_binlog=%d", format, sync)
		}
	}
	e.Split, e.Rate = srv.split, opts.Rate
	if info, err := srv.redisDirect.Info(ctx, "server").Result(); err == nil {
		for l := range strings.SplitSeq(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
				e.RedisVersion = v
			}
		}
	}
	e.FsyncCounter, e.LockCounter = srv.fsyncVar, srv.lockRequests
	e.DurationS, e.WarmupS = opts.Duration.Seconds(), opts.Warmup.Seconds()
	e.Buckets, e.PoolCap = opts.Buckets, opts.PoolCap
	e.Database, e.RedisPrefix = srv.dbName, srv.prefix
	if srv.controlAdmin != nil {
		var version, flush string
		_ = srv.controlAdmin.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version)
		_ = srv.controlAdmin.QueryRowContext(ctx, sqlFlushRead).Scan(&flush)
		e.ControlServer = fmt.Sprintf("%s (%s, innodb_flush_log_at_trx_commit=%s), database %s", srv.controlAddr, version, flush, srv.controlName)
	}
	return rep
}

// Target is one of the targets, judged on this run.
type Target struct {
	Name   string  `json:"name"`
	Where  string  `json:"where"`
	Ratio  float64 `json:"ratio"`
	Want   string  `json:"want"`
	Pass   bool    `json:"pass"`
	Detail string  `json:"detail"`
}

// find returns the result of a point's window, if the run has it.
func (rep *Report) find(scenario, variant string, c int, addedMs int64, op string) (Result, bool) {
	for _, r := range rep.Results {
		if r.Scenario == scenario && r.Variant == variant && r.Concurrency == c && r.AddedRTTms == addedMs && r.Op == op && r.Error == "" {
			return r, true
		}
	}
	return Result{}, false
}

func (rep *Report) latencies() []int64 {
	var out []int64
	for _, r := range rep.Results {
		if !slices.Contains(out, r.AddedRTTms) {
			out = append(out, r.AddedRTTms)
		}
	}
	slices.Sort(out)
	return out
}

// finish judges the targets on the results present, round by round (a
// ratio compares two results of one round, never across rounds), and the
// pairs over all rounds.
func (rep *Report) finish() {
	rep.Targets = nil
	var rounds []int
	for _, r := range rep.Results {
		if !slices.Contains(rounds, r.Round) {
			rounds = append(rounds, r.Round)
		}
	}
	slices.Sort(rounds)
	for _, round := range rounds {
		one := &Report{Results: slices.DeleteFunc(slices.Clone(rep.Results), func(r Result) bool { return r.Round != round })}
		one.judge()
		for _, t := range one.Targets {
			if round > 0 {
				t.Where += fmt.Sprintf(" round %d", round)
			}
			rep.Targets = append(rep.Targets, t)
		}
	}
	rep.Overhead = overheads(rep.Results, rep.Pairs)
}

// judge judges the targets on the results present, all of one round.
func (rep *Report) judge() {
	add := func(t Target, ratio, bound float64, atLeast bool) {
		t.Ratio = ratio
		if atLeast {
			t.Want, t.Pass = fmt.Sprintf(">= %.2f", bound), ratio >= bound
		} else {
			t.Want, t.Pass = fmt.Sprintf("<= %.2f", bound), ratio <= bound
		}
		rep.Targets = append(rep.Targets, t)
	}
	for _, l := range rep.latencies() {
		at := fmt.Sprintf("+%dms", l)
		// Hot item, 64 callers: the pool against the single row, each
		// batched or not, >= 2x, with the server CPU per reservation.
		for _, v := range []string{VariantPool, VariantPool + Unbatched, VariantPoolBefore, VariantPoolHeadScan} {
			p, ok1 := rep.find(ScenarioHot, v, 64, l, "reserve")
			for _, rv := range []string{VariantRow, VariantRow + Unbatched} {
				row, ok2 := rep.find(ScenarioHot, rv, 64, l, "reserve")
				if ok1 && ok2 && row.OpsPerSec > 0 {
					add(Target{Name: v + " vs " + rv + ", hot item", Where: "hot c=64 " + at,
						Detail: fmt.Sprintf("%s %.0f/s (mysqld %.0f µs/op), %s %.0f/s (mysqld %.0f µs/op)",
							v, p.OpsPerSec, p.MySQLCPUus, rv, row.OpsPerSec, row.MySQLCPUus)}, p.OpsPerSec/row.OpsPerSec, 2, true)
				}
			}
		}
		// The server CPU per reservation, the pool against the batched
		// row (issue 28, point 5): at most 1.8x.
		if p, ok := rep.find(ScenarioHot, VariantPool, 64, l, "reserve"); ok && p.MySQLCPUus > 0 {
			if row, ok := rep.find(ScenarioHot, VariantRow, 64, l, "reserve"); ok && row.MySQLCPUus > 0 {
				add(Target{Name: "pool mysqld CPU per reserve vs row's", Where: "hot c=64 " + at,
					Detail: fmt.Sprintf("pool %.0f µs/op, row %.0f µs/op", p.MySQLCPUus, row.MySQLCPUus)}, p.MySQLCPUus/row.MySQLCPUus, 1.8, false)
			}
		}
		// No collapse: pool at 64 and 128 >= 0.85x its best at lower
		// concurrency.
		for _, v := range []string{VariantPool, VariantPool + Unbatched, VariantPoolBefore, VariantPoolHeadScan} {
			var best Result
			for _, r := range rep.Results {
				if r.Scenario == ScenarioHot && r.Variant == v && r.AddedRTTms == l && r.Concurrency < 64 && r.Error == "" && r.OpsPerSec > best.OpsPerSec {
					best = r
				}
			}
			for _, c := range []int{64, 128} {
				high, ok := rep.find(ScenarioHot, v, c, l, "reserve")
				if ok && best.OpsPerSec > 0 {
					add(Target{Name: fmt.Sprintf("%s at %d callers vs its best below 64", v, c), Where: "hot " + at,
						Detail: fmt.Sprintf("c=%d %.0f/s, best c=%d %.0f/s", c, high.OpsPerSec, best.Concurrency, best.OpsPerSec)}, high.OpsPerSec/best.OpsPerSec, 0.85, true)
				}
			}
		}
		// Round trips: a reserve in at most 3, a claim in at most 2.
		for _, r := range rep.Results {
			if r.Error != "" || r.OK == 0 || r.AddedRTTms != l || r.Concurrency != 64 {
				continue
			}
			if r.Variant != VariantPool && r.Variant != VariantPool+Unbatched {
				continue
			}
			bound := 3.0
			if r.Op == "claim" {
				bound = 2
			}
			add(Target{Name: fmt.Sprintf("%s MySQL round trips per %s", r.Variant, r.Op), Where: fmt.Sprintf("%s c=%d %s", r.Scenario, r.Concurrency, at),
				Detail: fmt.Sprintf("%.2f round trips per call", r.MySQLRoundTripsPerOp)}, r.MySQLRoundTripsPerOp, bound, false)
		}
		// Claim storm: claims/s >= 0.8x reserves/s, same point.
		for _, r := range rep.Results {
			if r.Scenario != ScenarioClaim || r.Op != "claim" || r.AddedRTTms != l || r.Error != "" {
				continue
			}
			res, ok := rep.find(ScenarioClaim, r.Variant, r.Concurrency, l, "reserve")
			if ok && res.OpsPerSec > 0 {
				add(Target{Name: r.Variant + " claims vs reserves", Where: fmt.Sprintf("claim c=%d %s", r.Concurrency, at),
					Detail: fmt.Sprintf("claims %.0f/s, reserves %.0f/s", r.OpsPerSec, res.OpsPerSec)}, r.OpsPerSec/res.OpsPerSec, 0.8, true)
			}
		}
		// Facade latency: shadow p99 <= 1.1x redis; mysql p99 <= 1.1x the
		// slower store's.
		for _, r := range rep.Results {
			if r.Variant != VariantFacadeShadow || r.AddedRTTms != l || r.Error != "" {
				continue
			}
			base, ok := rep.find(r.Scenario, VariantFacadeRedis, r.Concurrency, l, r.Op)
			if ok && base.P99ms > 0 {
				add(Target{Name: "facade shadow p99 vs facade redis p99", Where: fmt.Sprintf("%s c=%d %s", r.Scenario, r.Concurrency, at),
					Detail: fmt.Sprintf("shadow %.2fms, redis %.2fms (redis store alone %s)", r.P99ms, base.P99ms, p99Of(rep, r.Scenario, VariantRedis, r.Concurrency, l))},
					r.P99ms/base.P99ms, 1.1, false)
			}
		}
		for _, r := range rep.Results {
			if r.Variant != VariantFacadeMySQL || r.AddedRTTms != l || r.Error != "" {
				continue
			}
			pool, ok := rep.find(r.Scenario, VariantPool, r.Concurrency, l, r.Op)
			if ok && pool.P99ms > 0 {
				add(Target{Name: "facade mysql p99 vs the pool's p99", Where: fmt.Sprintf("%s c=%d %s", r.Scenario, r.Concurrency, at),
					Detail: fmt.Sprintf("facade mysql %.2fms, pool %.2fms (redis store alone %s)", r.P99ms, pool.P99ms, p99Of(rep, r.Scenario, VariantRedis, r.Concurrency, l))},
					r.P99ms/pool.P99ms, 1.1, false)
			}
			// What Redis's mirror (the change feed and its relay) adds
			// to the MySQL-mode facade.
			bare, ok := rep.find(r.Scenario, VariantFacadeMySQLNoFeed, r.Concurrency, l, r.Op)
			if ok && bare.P99ms > 0 {
				add(Target{Name: "facade mysql p99 vs the same without the mirror", Where: fmt.Sprintf("%s c=%d %s", r.Scenario, r.Concurrency, at),
					Detail: fmt.Sprintf("with the mirror %.2fms, without %.2fms", r.P99ms, bare.P99ms)}, r.P99ms/bare.P99ms, 1.1, false)
			}
		}
		rep.handoffTargets(l, add)
		rep.killFloodTargets(l, add)
		// Connection-seconds per reservation at 16 callers <= 1.5x (round
		// trips x RTT + commit): little idle time inside a transaction.
		// Judged where the network dominates (+1ms and more).
		if l == 0 {
			continue
		}
		for _, r := range rep.Results {
			if !strings.HasPrefix(r.Variant, VariantPool) || r.Op != "reserve" || r.AddedRTTms != l || r.Error != "" || r.OK == 0 {
				continue
			}
			if (r.Scenario != ScenarioHot && r.Scenario != ScenarioUniform) || r.Concurrency != 16 {
				continue
			}
			ideal := r.MySQLRoundTripsPerOp*r.MySQLRTTms + max(0, r.CommitMs-r.MySQLRTTms)
			add(Target{Name: r.Variant + " connection time per reserve vs round trips x RTT + commit", Where: fmt.Sprintf("%s c=%d %s", r.Scenario, r.Concurrency, at),
				Detail: fmt.Sprintf("%.2f conn-ms/op (%.2f waiting for answers); %.2f round trips x %.2fms + commit %.2fms = %.2fms",
					r.ConnMsPerOp, r.MySQLWaitMsPerOp, r.MySQLRoundTripsPerOp, r.MySQLRTTms, max(0, r.CommitMs-r.MySQLRTTms), ideal)},
				r.ConnMsPerOp/ideal, 1.5, false)
		}
	}
}

func p99Of(rep *Report, scenario, variant string, c int, l int64) string {
	if r, ok := rep.find(scenario, variant, c, l, "reserve"); ok {
		return fmt.Sprintf("%.2fms", r.P99ms)
	}
	return "not run"
}

// ReadReport reads a report WriteJSON wrote and judges its targets and
// pairs again, with this version's rules: to render an earlier run anew.
// A report from before rounds reads as a run of one round.
func ReadReport(r io.Reader) (*Report, error) {
	var rep Report
	if err := json.NewDecoder(r).Decode(&rep); err != nil {
		return nil, fmt.Errorf("bench: read report: %w", err)
	}
	rep.finish()
	return &rep, nil
}

// Rejudge replaces the report's pairs and judges them again: the pairs
// of an earlier run's render that its run did not name (or named
// differently).
func (rep *Report) Rejudge(pairs []Pair) {
	rep.Pairs = pairs
	rep.finish()
}

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteMarkdown writes the targets and one table per scenario.
func (rep *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	e := rep.Env
	fmt.Fprintf(&b, "Run of %s, %.0f s: %s, %d CPUs (load average at start %s), %s, Redis %s, innodb_flush_log_at_trx_commit=%s, binary log %s, %gs windows after %gs warmup, pool cap %d, %d buckets.",
		rep.Started.Format(time.RFC3339), rep.Seconds, e.GoVersion, e.CPUs, e.LoadAvg, e.MySQLVersion, e.RedisVersion, e.Flush, e.Binlog, e.DurationS, e.WarmupS, e.PoolCap, e.Buckets)
	if e.Split != "" {
		fmt.Fprintf(&b, " Split: %s.", e.Split)
	}
	if e.ControlServer != "" {
		fmt.Fprintf(&b, " The killflood control database on a server of its own: %s.", e.ControlServer)
	}
	if e.Rate > 0 {
		fmt.Fprintf(&b, " Open-loop reserves: %g calls/s offered per point, latency from each call's scheduled start.", e.Rate)
	}
	if rep.Interrupted {
		b.WriteString(" **Interrupted: partial results.**")
	}
	if rep.Rounds > 1 {
		fmt.Fprintf(&b, " %d rounds: every point measured once per round; the targets below are judged round by round.", rep.Rounds)
	}
	b.WriteString("\n\n")
	rep.overheadTable(&b)
	if len(rep.Targets) > 0 {
		b.WriteString("| target | where | ratio | want | | numbers |\n|---|---|--:|--:|---|---|\n")
		for _, t := range rep.Targets {
			mark := "pass"
			if !t.Pass {
				mark = "**MISS**"
			}
			fmt.Fprintf(&b, "| %s | %s | %.2f | %s | %s | %s |\n", t.Name, t.Where, t.Ratio, t.Want, mark, t.Detail)
		}
		b.WriteString("\n")
	}
	var names []string
	for _, r := range rep.Results {
		if !slices.Contains(names, r.Scenario) {
			names = append(names, r.Scenario)
		}
	}
	for _, sc := range names {
		fmt.Fprintf(&b, "#### %s\n\n%s.\n\n", sc, rep.Scenarios[sc])
		if sc == ScenarioHandoff {
			rep.handoffTable(&b)
			continue
		}
		if sc == ScenarioKillFlood {
			rep.killFloodTable(&b)
			continue
		}
		b.WriteString("| variant | c | +rtt | op | ops/s | p50 ms | p99 ms | p99.9 ms | errors | deadlocks | retries | refills | fsync/op | mysql rt/op | redis rt/op | conn-ms/op | mysql wait ms/op | lock req/op | cores mysqld/redis/gen | load | invariant |\n")
		b.WriteString("|---|--:|--:|---|--:|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|---|\n")
		rs := slices.Clone(rep.Results)
		rs = slices.DeleteFunc(rs, func(r Result) bool { return r.Scenario != sc })
		slices.SortStableFunc(rs, func(a, b Result) int {
			return cmp.Or(cmp.Compare(a.AddedRTTms, b.AddedRTTms), cmp.Compare(variantRank(a.Variant), variantRank(b.Variant)),
				cmp.Compare(a.Concurrency, b.Concurrency), cmp.Compare(a.Round, b.Round))
		})
		for _, r := range rs {
			variant := r.Variant
			if r.Round > 0 {
				variant += fmt.Sprintf(" (round %d)", r.Round)
			}
			if r.Error != "" {
				fmt.Fprintf(&b, "| %s | %d | %d | %s | failed: %s |\n", variant, r.Concurrency, r.AddedRTTms, r.Op, mdEscape(r.Error))
				continue
			}
			inv := r.Invariant
			if inv != "ok" {
				inv = "**" + mdEscape(inv) + "**"
			}
			if r.Interrupted {
				inv += " (interrupted)"
			}
			fmt.Fprintf(&b, "| %s | %d | %d | %s | %.0f | %.2f | %.2f | %.2f | %s | %d | %d | %d | %.2f | %.1f | %.1f | %.2f | %.2f | %.1f | %s | %.1f | %s |\n",
				variant, r.Concurrency, r.AddedRTTms, r.Op, r.OpsPerSec, r.P50ms, r.P99ms, r.P999ms, errorsCell(r),
				r.Deadlocks, r.Retries, r.Refills, r.FsyncsPerOp, r.MySQLRoundTripsPerOp, r.RedisRoundTripsPerOp, r.ConnMsPerOp,
				r.MySQLWaitMsPerOp, r.LockRequestsPerOp, coresCell(r), r.LoadAvg, inv)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func variantRank(v string) int {
	if i := slices.Index(Variants, v); i >= 0 {
		return i
	}
	return len(Variants)
}

func errorsCell(r Result) string {
	if len(r.Errors) == 0 {
		return "0"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.Errors)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, r.Errors[k]))
	}
	return strings.Join(parts, ", ")
}

func coresCell(r Result) string {
	f := func(v float64) string {
		if v < 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", v)
	}
	return f(r.MySQLCores) + "/" + f(r.RedisCores) + "/" + f(r.LoadgenCores)
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
