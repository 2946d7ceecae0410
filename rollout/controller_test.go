package rollout_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

const planText = `
pods = ["pod-a", "pod-b"]

[[stages]]
name = "shadow pod-a"
mode = "shadow"
pods = ["pod-a"]
[stages.gates]
min_observations = 100
min_duration = "1m"

[[stages]]
name = "mysql pod-a"
mode = "mysql"
pods = ["pod-a"]
[stages.gates]
min_observations = 100
min_duration = "1m"
max_rates = { outcome_mismatch = 0.01 }

[[stages]]
name = "mysql_only everywhere"
mode = "mysql_only"
pods = ["pod-a", "pod-b"]
`

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fakeReconciler answers Clean with a fixed verdict (or error) and
// records the pods it was asked about.
type fakeReconciler struct {
	clean bool
	err   error

	mu      sync.Mutex
	checked []string
}

func (f *fakeReconciler) Clean(_ context.Context, pod string) (bool, string, error) {
	f.mu.Lock()
	f.checked = append(f.checked, pod)
	f.mu.Unlock()
	switch {
	case f.err != nil:
		return false, "", f.err
	case f.clean:
		return true, "no drift", nil
	}
	return false, "1 drift finding(s) (redis:missing_hold 1)", nil
}

var (
	_ rollout.Reconciler = (*fakeReconciler)(nil)
	_ rollout.LagReader  = fakeLag{}
)

// calls returns the pods checked since the last call, and forgets them.
func (f *fakeReconciler) calls() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := strings.Join(f.checked, ", ")
	f.checked = nil
	return r
}

// fakeLag reports a fixed relay lag per pod (an error for pods in fail).
type fakeLag struct {
	changes map[string]int64
	oldest  map[string]time.Duration
	fail    map[string]error
}

func (f fakeLag) Lag(_ context.Context, pod string) (int64, time.Duration, error) {
	if err := f.fail[pod]; err != nil {
		return 0, 0, err
	}
	return f.changes[pod], f.oldest[pod], nil
}

type ctlBundle struct {
	ctl   *rollout.Controller
	cmp   *compare.Comparer
	db    *testdb.DB
	plan  *rollout.Plan
	flags flagdoc.FlagsFile
	clk   *clock
	rc    *fakeReconciler
}

func setupController(t *testing.T, clean bool) *ctlBundle {
	t.Helper()
	db := testdb.New(t)
	plan, err := rollout.ParsePlan([]byte(planText))
	if err != nil {
		t.Fatal(err)
	}
	ff := flagdoc.FlagsFile{Path: filepath.Join(t.TempDir(), "flags.json")}
	if err := ff.Write(flagdoc.NewFlags()); err != nil {
		t.Fatal(err)
	}
	cmp, err := compare.New(compare.Config{DB: db.DB, Registerer: prometheus.NewRegistry(), FlushInterval: time.Hour, CleanupInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmp.Close(context.Background()) })
	// The clock starts half way through a comparer window (one minute), so
	// a stage applied now counts from the next window, 30 s later.
	start := time.Now().UTC().Truncate(time.Minute).Add(30 * time.Second)
	b := &ctlBundle{cmp: cmp, db: db, plan: plan, flags: ff, clk: &clock{now: start}, rc: &fakeReconciler{clean: clean}}
	b.ctl = b.controller(t, func(c *rollout.ControllerConfig) { c.Reconciler = b.rc })
	return b
}

// controller builds another controller on the bundle's database, flags,
// plan, stats and clock, with cfg changed by edit (e.g. another
// reconciler, a lag reader).
func (b *ctlBundle) controller(t *testing.T, edit func(*rollout.ControllerConfig)) *rollout.Controller {
	t.Helper()
	cfg := rollout.ControllerConfig{DB: b.db.DB, Flags: b.flags, Plan: b.plan, Stats: b.cmp, Now: b.clk.Now, Propagation: 10 * time.Millisecond,
		ObeyWait: -1} // no replica reports in these tests
	if edit != nil {
		edit(&cfg)
	}
	ctl, err := rollout.NewController(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ctl
}

// setMode sets a pod's mode in the flags file directly (not audited).
func (b *ctlBundle) setMode(t *testing.T, pod string, m authority.Mode) {
	t.Helper()
	if _, _, err := b.flags.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.PodScope(pod), m) }); err != nil {
		t.Fatal(err)
	}
}

// decision reads the flags file's decision for a shop of pod.
func (b *ctlBundle) decision(t *testing.T, pod string) authority.Decision {
	t.Helper()
	f, err := b.flags.Read()
	if err != nil {
		t.Fatal(err)
	}
	return f.Resolve(pod, 1)
}

// nextWindow moves the clock one second into the comparer's next window
// (its windows are a minute wide): the first a stage applied now counts.
func (b *ctlBundle) nextWindow() {
	now := b.clk.Now()
	b.clk.Add(now.Truncate(time.Minute).Add(time.Minute + time.Second).Sub(now))
}

// observe feeds n observations of pod, mismatches of them outcome
// mismatches, into the comparer and flushes them to the stats table.
func (b *ctlBundle) observe(t *testing.T, pod, mode string, n, mismatches int) {
	t.Helper()
	for i := range n {
		shadow := compare.Outcome{Store: reservation.AuthorityRedis, Result: compare.ResultReserved, Latency: time.Millisecond}
		if i < mismatches {
			shadow.Result = compare.ResultInsufficient
			shadow.Short = []reservation.ShortLine{{Item: 1, Requested: 5, Unheld: 0}}
		}
		b.cmp.Observe(compare.Observation{Op: compare.OpReserve, Pod: pod, Shop: 1, Token: "t", Mode: mode, At: b.clk.Now(),
			Authority: compare.Outcome{Store: reservation.AuthorityMySQL, Result: compare.ResultReserved, Latency: time.Millisecond},
			Shadow:    shadow})
	}
	if err := b.cmp.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// c. advance refuses when a gate fails or has no data, naming the gate
// with its numbers; the dry run prints exactly the flags change (golden).
func TestAdvanceIsGated(t *testing.T) {
	b := setupController(t, true)
	ctx := context.Background()
	if _, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{}); err == nil || !strings.Contains(err.Error(), "actor") {
		t.Fatalf("advance without an actor: %v", err)
	}
	// The first stage needs no evidence; its dry run is the golden diff.
	var dry bytes.Buffer
	if _, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", DryRun: true, Out: &dry}); err != nil {
		t.Fatal(err)
	}
	golden(t, "advance-dry-run.golden", strings.ReplaceAll(dry.String(), b.flags.Path, "FLAGS"))
	if f, _ := b.flags.Read(); f.Resolve("pod-a", 1).Mode != authority.ModeRedis {
		t.Fatal("the dry run changed the flags")
	}
	if _, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", Reason: "start"}); err != nil {
		t.Fatal(err)
	}
	if f, _ := b.flags.Read(); f.Resolve("pod-a", 1).Mode != authority.ModeShadow {
		t.Fatal("stage 0 not applied")
	}
	// No data: refused, and the error says which gate and the numbers.
	_, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana"})
	if !errors.Is(err, rollout.ErrGatesFail) || !strings.Contains(err.Error(), "min_observations not yet: 0 observations on [pod-a], need 100") {
		t.Fatalf("advance with no data: %v", err)
	}
	// Enough data, too early.
	b.nextWindow() // the first window the stage counts
	b.observe(t, "pod-a", "shadow", 150, 0)
	_, err = b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana"})
	if !errors.Is(err, rollout.ErrGatesFail) || !strings.Contains(err.Error(), "min_duration") || strings.Contains(err.Error(), "min_observations") {
		t.Fatalf("advance too early: %v", err)
	}
	b.clk.Add(2 * time.Minute)
	st, err := b.ctl.Status(ctx)
	if err != nil || !st.Ready {
		t.Fatalf("status after data and time: ready=%v %v: %+v", st.Ready, err, st.Gates)
	}
	if _, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", Reason: "gates pass"}); err != nil {
		t.Fatal(err)
	}
	if f, _ := b.flags.Read(); f.Resolve("pod-a", 1).Mode != authority.ModeMySQL || f.Resolve("pod-b", 1).Mode != authority.ModeRedis {
		t.Fatal("stage 1 not applied to pod-a alone")
	}
	// mysql_only needs confirmation, even with passing gates.
	b.nextWindow() // the first window the stage counts
	b.observe(t, "pod-a", "mysql", 150, 0)
	b.clk.Add(2 * time.Minute)
	if _, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana"}); err == nil || !strings.Contains(err.Error(), "confirm") {
		t.Fatalf("advance into mysql_only without confirmation: %v", err)
	}
	// An override needs a reason.
	if _, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", Override: true}); err == nil || !strings.Contains(err.Error(), "reason") {
		t.Fatalf("override without reason: %v", err)
	}
}

// Advancing into a stage where MySQL decides needs no reconcile: each
// shop's handoff copies Redis's state into MySQL as MySQL takes it over
// (docs/ownership.md). The reconciler is not asked, whatever it would say,
// and a controller without one advances too.
func TestAdvanceIntoMySQLNeedsNoReconcile(t *testing.T) {
	ctx := context.Background()
	for _, withReconciler := range []bool{true, false} {
		b := setupController(t, false) // a reconciler that would report drift
		ctl := b.ctl
		if !withReconciler {
			ctl = b.controller(t, nil)
		}
		if _, err := ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana"}); err != nil {
			t.Fatal(err)
		}
		b.nextWindow() // the first window the stage counts
		b.observe(t, "pod-a", "shadow", 150, 0)
		b.clk.Add(2 * time.Minute)
		if _, err := ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", Reason: "gates pass"}); err != nil {
			t.Fatalf("reconciler %v: advance into mysql: %v", withReconciler, err)
		}
		if d := b.decision(t, "pod-a"); d.Mode != authority.ModeMySQL || d.Route().Authority != reservation.AuthorityMySQL {
			t.Fatalf("reconciler %v: pod-a after the advance: %+v", withReconciler, d)
		}
		// mysql_only, confirmed: no reconcile either.
		b.nextWindow() // the first window the stage counts
		b.observe(t, "pod-a", "mysql", 150, 0)
		b.clk.Add(2 * time.Minute)
		if _, err := ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", Reason: "gates pass", ConfirmMySQLOnly: true}); err != nil {
			t.Fatalf("reconciler %v: advance into mysql_only: %v", withReconciler, err)
		}
		if d := b.decision(t, "pod-b"); d.Mode != authority.ModeMySQLOnly {
			t.Fatalf("reconciler %v: pod-b after the advance: %+v", withReconciler, d)
		}
		if got := b.rc.calls(); got != "" {
			t.Errorf("advancing asked the reconciler about %q; it must not", got)
		}
	}
}

// d. The automatic controller engages the kill switch for the stage's
// pods when injected mismatches break a gate in a MySQL-authority stage;
// e. history lists every change with its actor and reason.
func TestAutoKillsOnBrokenGateAndHistoryRecordsIt(t *testing.T) {
	b := setupController(t, true)
	ctx := context.Background()
	a, err := b.ctl.AutoStep(ctx, "auto")
	if err != nil || a.Did != "advanced" {
		t.Fatalf("first auto step: %+v %v", a, err)
	}
	b.nextWindow() // the first window the stage counts
	b.observe(t, "pod-a", "shadow", 120, 0)
	b.clk.Add(2 * time.Minute)
	if a, err = b.ctl.AutoStep(ctx, "auto"); err != nil || a.Did != "advanced" {
		t.Fatalf("second auto step: %+v %v", a, err)
	}
	// In the mysql stage, 5% outcome mismatches against a 1% ceiling.
	b.nextWindow() // the first window the stage counts
	b.observe(t, "pod-a", "mysql", 200, 10)
	a, err = b.ctl.AutoStep(ctx, "auto")
	if err != nil || a.Did != "killed" || !strings.Contains(a.Why, "max_rate:outcome_mismatch") {
		t.Fatalf("auto step with mismatches: %+v %v", a, err)
	}
	f, _ := b.flags.Read()
	if d := f.Resolve("pod-a", 1); d.Kill != authority.KillRedis || d.Route().Authority != reservation.AuthorityRedis {
		t.Errorf("pod-a after auto kill: %+v", d)
	}
	if d := f.Resolve("pod-b", 1); d.Kill != authority.KillOff {
		t.Errorf("pod-b must be untouched: %+v", d)
	}
	// The gate still breaks, and the switch already holds pod-a: the next
	// turns engage nothing more.
	if a, err = b.ctl.AutoStep(ctx, "auto"); err != nil || a.Did != "none" || !strings.Contains(a.Why, "already holds pod-a") {
		t.Errorf("auto step with pod-a already killed: %+v %v, want none", a, err)
	}
	if err := b.ctl.Release(ctx, flagdoc.PodScope("pod-a"), rollout.KillOptions{Actor: "ana", Reason: "fixed the pool cap"}); err != nil {
		t.Fatal(err)
	}
	// The release starts the stage's window again, at the comparer's next
	// window: the incident's mismatches no longer count, and the switch is
	// not engaged again.
	if a, err = b.ctl.AutoStep(ctx, "auto"); err != nil || a.Did != "none" || !strings.HasPrefix(a.Why, "waiting") {
		t.Errorf("auto step after the release: %+v %v, want waiting", a, err)
	}
	b.nextWindow() // the first window the stage counts
	b.observe(t, "pod-a", "mysql", 200, 0)
	if st, err := b.ctl.Status(ctx); err != nil || st.Evidence.Observations != 200 {
		t.Errorf("evidence after the release: %+v %v, want the 200 observations since it", st.Evidence, err)
	}
	// pod-a runs mysql: neither the kill (mysql, not mysql_only) nor the
	// release needed a check.
	if got := b.rc.calls(); got != "" {
		t.Errorf("the reconciler was asked about %q; no step here needs it", got)
	}
	hs, err := b.ctl.History(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range hs {
		got = append(got, h.Actor+" "+h.Action+" "+h.Scope)
		if h.Reason == "" || h.Before == "" || h.After == "" {
			t.Errorf("history entry without reason or flags: %+v", h)
		}
	}
	want := []string{"ana release pod:pod-a", "auto kill pod:pod-a", "auto advance pod-a", "auto advance pod-a"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("history %q, want %q", got, want)
	}
}

// An automatic step that does nothing says why, for the operator watching
// it: mid-plan it names the gates it waits for (never "the plan is
// complete", which would read as a finished rollout), and after the last
// stage it says the plan is complete (not an empty list of gates).
func TestAutoStepSaysWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	b := setupController(t, true)
	ctx := context.Background()
	if a, err := b.ctl.AutoStep(ctx, "auto"); err != nil || a.Did != "advanced" {
		t.Fatalf("first auto step: %+v %v", a, err)
	}
	// Stage "shadow pod-a" just began: no observations, no time in it.
	a, err := b.ctl.AutoStep(ctx, "auto")
	if err != nil || a.Did != "none" || !strings.HasPrefix(a.Why, "waiting: ") ||
		!strings.Contains(a.Why, "min_observations") || !strings.Contains(a.Why, "min_duration") || strings.Contains(a.Why, "complete") {
		t.Errorf("auto step with the gates failing: %+v %v; want it waiting on min_observations and min_duration", a, err)
	}
	b.nextWindow() // the first window the stage counts
	b.observe(t, "pod-a", "shadow", 150, 0)
	b.clk.Add(2 * time.Minute)
	if a, err := b.ctl.AutoStep(ctx, "auto"); err != nil || a.Did != "advanced" {
		t.Fatalf("auto step into mysql: %+v %v", a, err)
	}
	b.nextWindow() // the first window the stage counts
	b.observe(t, "pod-a", "mysql", 150, 0)
	b.clk.Add(2 * time.Minute)
	if _, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", Reason: "gates pass", ConfirmMySQLOnly: true}); err != nil {
		t.Fatalf("advance into the last stage: %v", err)
	}
	a, err = b.ctl.AutoStep(ctx, "auto")
	if err != nil || a.Did != "none" || a.Why != "waiting: the plan is complete" {
		t.Errorf("auto step after the last stage: %+v %v; want none, the plan is complete", a, err)
	}
}

// A kill over a scope running mysql_only is checked first: the relay keeps
// Redis following MySQL there too, but if Redis lost data the handoff's
// drain cannot bring it back. Drift refuses the kill, naming the repair;
// a clean check lets it through; Resynced skips the check (the only way
// without a reconciler). Nothing is written or audited when refused.
func TestKillOverMySQLOnlyIsChecked(t *testing.T) {
	ctx := context.Background()
	kill := rollout.KillOptions{Actor: "ana", Reason: "incident"}
	refused := func(t *testing.T, b *ctlBundle, err error, want ...string) {
		t.Helper()
		if err == nil {
			t.Fatal("the kill was accepted")
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("refusal %q does not say %q", err, w)
			}
		}
		if d := b.decision(t, "pod-b"); d.Kill != authority.KillOff {
			t.Errorf("refused, yet pod-b's switch is %s", d.Kill)
		}
		if hs, err := b.ctl.History(ctx, 10); err != nil || len(hs) != 0 {
			t.Errorf("refused, yet audited: %+v %v", hs, err)
		}
	}

	t.Run("drift", func(t *testing.T) {
		b := setupController(t, false)
		b.setMode(t, "pod-b", authority.ModeMySQLOnly)
		err := b.ctl.Kill(ctx, flagdoc.PodScope("pod-b"), authority.KillRedis, kill)
		refused(t, b, err, "reservoir reconcile --pod pod-b --repair", "redis:missing_hold")
		// A global switch checks the pods that run mysql_only, no other.
		err = b.ctl.Kill(ctx, flagdoc.Global(), authority.KillRedisOnly, kill)
		refused(t, b, err, "reservoir reconcile --pod pod-b --repair")
		if got := b.rc.calls(); got != "pod-b, pod-b" {
			t.Errorf("checked %q, want pod-b twice", got)
		}
		// pod-a does not run mysql_only: its kill is not checked.
		if err := b.ctl.Kill(ctx, flagdoc.PodScope("pod-a"), authority.KillRedis, kill); err != nil {
			t.Fatal(err)
		}
		if got := b.rc.calls(); got != "" {
			t.Errorf("a kill of pod-a (redis mode) checked %q", got)
		}
	})

	t.Run("clean", func(t *testing.T) {
		b := setupController(t, true)
		b.setMode(t, "pod-b", authority.ModeMySQLOnly)
		if err := b.ctl.Kill(ctx, flagdoc.PodScope("pod-b"), authority.KillRedis, kill); err != nil {
			t.Fatal(err)
		}
		if got := b.rc.calls(); got != "pod-b" {
			t.Errorf("checked %q, want pod-b", got)
		}
		if d := b.decision(t, "pod-b"); d.Kill != authority.KillRedis || d.Route().Authority != reservation.AuthorityRedis {
			t.Errorf("pod-b after the kill: %+v", d)
		}
	})

	t.Run("check fails", func(t *testing.T) {
		b := setupController(t, true)
		b.setMode(t, "pod-b", authority.ModeMySQLOnly)
		rc := &fakeReconciler{err: errors.New("redis unreachable")}
		ctl := b.controller(t, func(c *rollout.ControllerConfig) { c.Reconciler = rc })
		err := ctl.Kill(ctx, flagdoc.PodScope("pod-b"), authority.KillRedis, kill)
		refused(t, b, err, "check pod pod-b", "redis unreachable")
	})

	t.Run("no reconciler", func(t *testing.T) {
		b := setupController(t, true)
		b.setMode(t, "pod-b", authority.ModeMySQLOnly)
		ctl := b.controller(t, nil)
		err := ctl.Kill(ctx, flagdoc.PodScope("pod-b"), authority.KillRedis, kill)
		refused(t, b, err, "no reconciler", "--resynced")
		resynced := kill
		resynced.Resynced = true
		if err := ctl.Kill(ctx, flagdoc.PodScope("pod-b"), authority.KillRedis, resynced); err != nil {
			t.Fatalf("kill with Resynced and no reconciler: %v", err)
		}
		if d := b.decision(t, "pod-b"); d.Kill != authority.KillRedis {
			t.Errorf("pod-b after the kill: %+v", d)
		}
	})

	t.Run("resynced skips the check", func(t *testing.T) {
		b := setupController(t, false)
		b.setMode(t, "pod-b", authority.ModeMySQLOnly)
		if err := b.ctl.Kill(ctx, flagdoc.PodScope("pod-b"), authority.KillRedis, rollout.KillOptions{Actor: "ana", Reason: "incident", Resynced: true}); err != nil {
			t.Fatal(err)
		}
		if got := b.rc.calls(); got != "" {
			t.Errorf("checked %q despite Resynced", got)
		}
		if err := b.ctl.Kill(ctx, flagdoc.Global(), authority.KillRedis, rollout.KillOptions{Actor: "ana"}); err == nil {
			t.Fatal("a kill without a reason was accepted")
		}
	})
}

// The kill switch reports the relay lag of every pod it covers at the
// moment it switches: what the handoffs' drains still have to deliver
// (and what a forced handoff would lose). It goes to Out and into the
// audit's reason. A lag that cannot be read is reported as unknown and
// does not hold the kill back.
func TestKillReportsRelayLag(t *testing.T) {
	ctx := context.Background()
	b := setupController(t, true)
	lag := fakeLag{
		changes: map[string]int64{"pod-a": 3, "pod-b": 0},
		oldest:  map[string]time.Duration{"pod-a": 1500 * time.Millisecond},
	}
	ctl := b.controller(t, func(c *rollout.ControllerConfig) { c.Reconciler, c.Lag = b.rc, lag })

	var out bytes.Buffer
	if err := ctl.Kill(ctx, flagdoc.Global(), authority.KillRedis, rollout.KillOptions{Actor: "ana", Reason: "drill", Out: &out}); err != nil {
		t.Fatal(err)
	}
	want := "relay lag at the switch: pod-a 3 change(s), oldest 1.5s; pod-b 0 change(s), oldest 0s"
	if !strings.Contains(out.String(), want) {
		t.Errorf("out %q, want %q", out.String(), want)
	}
	hs, err := ctl.History(ctx, 1)
	if err != nil || len(hs) != 1 || hs[0].Action != "kill" || !strings.HasPrefix(hs[0].Reason, "drill") || !strings.Contains(hs[0].Reason, want) {
		t.Fatalf("audit %+v %v: the reason does not carry %q", hs, err, want)
	}
	if err := ctl.Release(ctx, flagdoc.Global(), rollout.KillOptions{Actor: "ana", Reason: "drill over"}); err != nil {
		t.Fatal(err)
	}

	// A pod's switch reports that pod only; an unreadable lag is unknown.
	lag.fail = map[string]error{"pod-b": errors.New("mysql down")}
	ctl = b.controller(t, func(c *rollout.ControllerConfig) { c.Reconciler, c.Lag = b.rc, lag })
	out.Reset()
	if err := ctl.Kill(ctx, flagdoc.PodScope("pod-b"), authority.KillRedisOnly, rollout.KillOptions{Actor: "ana", Reason: "mysql down", Out: &out}); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "relay lag at the switch: pod-b unknown (mysql down)\n"; got != want {
		t.Errorf("out %q, want %q", got, want)
	}
	if d := b.decision(t, "pod-b"); d.Kill != authority.KillRedisOnly {
		t.Errorf("pod-b after the kill: %+v", d)
	}
	if hs, err := ctl.History(ctx, 1); err != nil || len(hs) != 1 || !strings.Contains(hs[0].Reason, "pod-b unknown (mysql down)") {
		t.Errorf("audit %+v %v: the reason does not say the lag is unknown", hs, err)
	}

	// Without a lag reader the kill reports nothing and still works.
	out.Reset()
	if err := b.ctl.Kill(ctx, flagdoc.PodScope("pod-a"), authority.KillRedis, rollout.KillOptions{Actor: "ana", Reason: "no lag", Out: &out}); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Errorf("out %q without a lag reader", out.String())
	}
}

// lagFirst is a FlagStore whose Read answers only once the kill switch
// has asked for the relay lag (asked closed), or fails after a while.
type lagFirst struct {
	flagdoc.FlagsFile
	asked chan struct{}
}

func (l lagFirst) Read() (*flagdoc.Flags, error) {
	select {
	case <-l.asked:
		return l.FlagsFile.Read()
	case <-time.After(3 * time.Second):
		return nil, errors.New("the flags were read before the relay lag was asked for: the reads run one after another")
	}
}

// askedLag is a LagReader that says when it is asked.
type askedLag struct {
	asked chan struct{}
	once  *sync.Once
}

func (a askedLag) Lag(context.Context, string) (int64, time.Duration, error) {
	a.once.Do(func() { close(a.asked) })
	return 0, 0, nil
}

// A kill switch reads what it decides on side by side: under a flood of
// the checkout listener each round trip waits behind the flood, so the
// operator should wait for the slowest read, not for their sum. Here the
// flags cannot be read until the relay lag was asked for: read one after
// the other (the flags first, as the checks need them), the kill fails.
// Each written change, and only a written one, tells the flag source of
// the process (Wrote), so that this replica obeys it at once.
func TestKillReadsSideBySideAndSaysItWrote(t *testing.T) {
	ctx := context.Background()
	b := setupController(t, true)
	asked := make(chan struct{})
	wrote := 0
	ctl := b.controller(t, func(c *rollout.ControllerConfig) {
		c.Flags = lagFirst{FlagsFile: b.flags, asked: asked}
		c.Lag = askedLag{asked: asked, once: &sync.Once{}}
		c.Wrote = func() { wrote++ }
	})
	if err := ctl.Kill(ctx, flagdoc.PodScope("pod-a"), authority.KillRedis, rollout.KillOptions{Actor: "ana", Reason: "drill", DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if wrote != 0 {
		t.Errorf("a dry run told the flag source %d time(s) that it wrote", wrote)
	}
	if err := ctl.Kill(ctx, flagdoc.PodScope("pod-a"), authority.KillRedis, rollout.KillOptions{Actor: "ana", Reason: "drill"}); err != nil {
		t.Fatal(err)
	}
	if d := b.decision(t, "pod-a"); d.Kill != authority.KillRedis {
		t.Fatalf("pod-a after the kill: %+v", d)
	}
	if err := ctl.Release(ctx, flagdoc.PodScope("pod-a"), rollout.KillOptions{Actor: "ana", Reason: "drill over"}); err != nil {
		t.Fatal(err)
	}
	if wrote != 2 {
		t.Errorf("a kill and a release told the flag source %d time(s) that they wrote, want 2", wrote)
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	// -update is defined by the package's internal tests (flags_test.go).
	if f := flag.Lookup("update"); f != nil && f.Value.String() == "true" {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// A release repairs nothing and checks nothing: where the mode gives MySQL
// the decisions again, each shop's handoff copies Redis's state into MySQL
// as it takes over (docs/ownership.md). So it works without a reconciler
// and with one that fails, for a pod's, a shop's and a global redis_only
// switch, each in one audited change; its dry run prints only the diff.
func TestReleaseNeedsNoRepair(t *testing.T) {
	ctx := context.Background()
	kill := rollout.KillOptions{Actor: "ana", Reason: "drill"}
	failing := &fakeReconciler{err: errors.New("redis unreachable")}
	for _, tc := range []struct {
		name string
		rc   rollout.Reconciler
	}{{"no reconciler", nil}, {"failing reconciler", failing}} {
		t.Run(tc.name, func(t *testing.T) {
			b := setupController(t, true)
			b.setMode(t, "pod-a", authority.ModeMySQL)
			ctl := b.controller(t, func(c *rollout.ControllerConfig) { c.Reconciler = tc.rc })
			for _, sc := range []struct {
				scope flagdoc.Scope
				state authority.Kill
			}{
				{flagdoc.PodScope("pod-a"), authority.KillRedis},
				{flagdoc.ShopScope(7), authority.KillRedis},
				{flagdoc.Global(), authority.KillRedisOnly},
			} {
				if err := ctl.Kill(ctx, sc.scope, sc.state, kill); err != nil {
					t.Fatalf("kill %s: %v", sc.scope, err)
				}
				var out bytes.Buffer
				dry := kill
				dry.DryRun, dry.Out = true, &out
				if err := ctl.Release(ctx, sc.scope, dry); err != nil {
					t.Fatalf("dry-run release of %s: %v", sc.scope, err)
				}
				if !strings.HasPrefix(out.String(), "--- ") || strings.Contains(out.String(), "repair") {
					t.Errorf("dry-run release of %s printed more than the diff:\n%s", sc.scope, out.String())
				}
				before, err := b.flags.Read()
				if err != nil {
					t.Fatal(err)
				}
				if err := ctl.Release(ctx, sc.scope, kill); err != nil {
					t.Fatalf("release of %s: %v", sc.scope, err)
				}
				after, err := b.flags.Read()
				if err != nil {
					t.Fatal(err)
				}
				if d := after.Resolve("pod-a", 7); d.Kill != authority.KillOff || after.Version != before.Version+1 {
					t.Errorf("release of %s: switch %s, version %d -> %d; want off, in one version", sc.scope, d.Kill, before.Version, after.Version)
				}
				hs, err := ctl.History(ctx, 2)
				if err != nil || len(hs) != 2 || hs[0].Action != "release" || hs[1].Action != "kill" || hs[0].Scope != sc.scope.String() {
					t.Errorf("history of the release of %s: %+v %v; want the kill, then the release", sc.scope, hs, err)
				}
			}
			if d := b.decision(t, "pod-a"); d.Kill != authority.KillOff || d.Route().Authority != reservation.AuthorityMySQL {
				t.Errorf("pod-a after the releases: %+v, want MySQL deciding again", d)
			}
		})
	}
	if got := failing.calls(); got != "" {
		t.Errorf("a release asked the reconciler about %q", got)
	}
}

// Every change the controller writes is the next version of the flags:
// advance, kill and release each add one (a release of redis_only too: it
// is one change, with nothing to repair first), a dry run adds none and
// shows the version it would write.
func TestControllerBumpsTheVersion(t *testing.T) {
	b := setupController(t, true)
	ctx := context.Background()
	last := int64(1) // the first document (NewFlags)
	step := func(what string, n int64, do func() error) {
		t.Helper()
		if err := do(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		f, err := b.flags.Read()
		if err != nil {
			t.Fatal(err)
		}
		st, err := b.ctl.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if f.Version != last+n || st.FlagsVersion != f.Version {
			t.Errorf("%s: flags version %d (status says %d), want %d", what, f.Version, st.FlagsVersion, last+n)
		}
		if d := f.Resolve("pod-a", 1); d.Version != f.Version {
			t.Errorf("%s: the decision carries version %d, the flags %d", what, d.Version, f.Version)
		}
		last = f.Version
	}
	var dry bytes.Buffer
	step("dry-run advance", 0, func() error {
		_, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", DryRun: true, Out: &dry})
		return err
	})
	if !strings.Contains(dry.String(), `+         "version": 2`) {
		t.Errorf("the dry run does not show the version it would write:\n%s", dry.String())
	}
	step("advance", 1, func() error {
		_, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", Reason: "start"})
		return err
	})
	kill := rollout.KillOptions{Actor: "ana", Reason: "drill"}
	step("kill pod-a", 1, func() error { return b.ctl.Kill(ctx, flagdoc.PodScope("pod-a"), authority.KillRedis, kill) })
	step("kill pod-a again: nothing changes", 0, func() error { return b.ctl.Kill(ctx, flagdoc.PodScope("pod-a"), authority.KillRedis, kill) })
	step("release pod-a", 1, func() error { return b.ctl.Release(ctx, flagdoc.PodScope("pod-a"), kill) })
	step("release pod-a again", 0, func() error { return b.ctl.Release(ctx, flagdoc.PodScope("pod-a"), kill) })
	step("kill everything redis_only", 1, func() error { return b.ctl.Kill(ctx, flagdoc.Global(), authority.KillRedisOnly, kill) })
	// Its dry run shows the version the release would write: one on.
	dry.Reset()
	dryKill := kill
	dryKill.DryRun, dryKill.Out = true, &dry
	step("dry-run release of redis_only", 0, func() error { return b.ctl.Release(ctx, flagdoc.Global(), dryKill) })
	if want := fmt.Sprintf(`+         "version": %d`, last+1); !strings.Contains(dry.String(), want) {
		t.Errorf("the dry run of a redis_only release does not show version %d:\n%s", last+1, dry.String())
	}
	step("release redis_only", 1, func() error { return b.ctl.Release(ctx, flagdoc.Global(), kill) })

	// The audit trail shows each version's file.
	hs, err := b.ctl.History(ctx, 1)
	if err != nil || len(hs) != 1 || !strings.Contains(hs[0].After, fmt.Sprintf(`"version": %d`, last)) {
		t.Errorf("the last audit entry does not hold version %d: %+v %v", last, hs, err)
	}
}

// An advance confirmed from a dry run names the flags version it was shown
// (FromVersion): once the flags moved on (another operator advanced, or
// engaged a kill switch), it writes nothing, rather than apply a stage the
// operator never saw.
func TestAdvanceFromVersion(t *testing.T) {
	b := setupController(t, true)
	ctx := context.Background()
	st, err := b.ctl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	shown := st.FlagsVersion
	b.setMode(t, "pod-b", authority.ModeShadow) // someone else's change
	_, err = b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", FromVersion: &shown})
	if !errors.Is(err, flagdoc.ErrFlagsChanged) {
		t.Fatalf("advance from version %d after another change: %v, want ErrFlagsChanged", shown, err)
	}
	if d := b.decision(t, "pod-a"); d.Mode != authority.ModeRedis {
		t.Fatalf("the refused advance wrote the flags: pod-a %s", d.Mode)
	}
	st, err = b.ctl.Status(ctx)
	if err != nil || st.Stage != -1 {
		t.Fatalf("stage after the refusal: %d, %v", st.Stage, err)
	}
	if _, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", FromVersion: &st.FlagsVersion}); err != nil {
		t.Fatalf("advance from the current version: %v", err)
	}
	if d := b.decision(t, "pod-a"); d.Mode != authority.ModeShadow {
		t.Fatalf("pod-a after the advance: %s", d.Mode)
	}
	if b.ctl.Plan() != b.plan {
		t.Error("Plan() is not the controller's plan")
	}
}

// fakeHandoffs answers a fixed handoff report per pod (none for a pod
// without one; an error for pods in fail).
type fakeHandoffs struct {
	reports map[string]reservation.HandoffProgress
	fail    map[string]error
}

func (f fakeHandoffs) Handoffs(_ context.Context, pod string) (reservation.HandoffProgress, bool, error) {
	if err := f.fail[pod]; err != nil {
		return reservation.HandoffProgress{}, false, err
	}
	p, ok := f.reports[pod]
	return p, ok, nil
}

var _ rollout.HandoffReader = fakeHandoffs{}

// Status reports each pod's handoffs beside its flags (issue 24 point
// 3): the report as read, none before a sweep, and a report that cannot
// be read as an error of that pod, not of the status.
func TestStatusReportsHandoffs(t *testing.T) {
	ctx := context.Background()
	b := setupController(t, true)
	if st, err := b.ctl.Status(ctx); err != nil || st.Pods[0].Handoffs != nil || st.Pods[0].HandoffsError != "" {
		t.Fatalf("without a reader: %+v %v", st.Pods, err)
	}
	now := b.clk.Now()
	report := reservation.HandoffProgress{FlagsVersion: 1, Shops: 3, Done: 1, Pending: 2, OldestPending: now.Add(-2 * time.Second), Started: now.Add(-3 * time.Second), Updated: now}
	ctl := b.controller(t, func(c *rollout.ControllerConfig) {
		c.Handoffs = fakeHandoffs{reports: map[string]reservation.HandoffProgress{"pod-a": report}, fail: map[string]error{"pod-b": errors.New("pod-b's mysql is down")}}
	})
	st, err := ctl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, bp := st.Pods[0], st.Pods[1]
	if a.Pod != "pod-a" || a.Handoffs == nil || *a.Handoffs != report || a.HandoffsError != "" {
		t.Errorf("pod-a: %+v", a)
	}
	if bp.Pod != "pod-b" || bp.Handoffs != nil || bp.HandoffsError != "pod-b's mysql is down" {
		t.Errorf("pod-b: %+v", bp)
	}
	if state, line := rollout.JudgeHandoffs(a.Handoffs, a.HandoffsError, st.FlagsVersion, now); state != rollout.HandoffsPending || line != "2 of 3 shops pending, oldest 2s (flags version 1)" {
		t.Errorf("pod-a judged: %s %q", state, line)
	}
	if state, line := rollout.JudgeHandoffs(bp.Handoffs, bp.HandoffsError, st.FlagsVersion, now); state != rollout.HandoffsUnknown || line != "unknown: pod-b's mysql is down" {
		t.Errorf("pod-b judged: %s %q", state, line)
	}
}

// JudgeHandoffs says "done" only for a report of the version judged with
// no shop pending; it words each case in one line.
func TestJudgeHandoffs(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(v, shops, pending int64) *reservation.HandoffProgress {
		p := &reservation.HandoffProgress{FlagsVersion: v, Shops: shops, Done: shops - pending, Pending: pending, Started: now.Add(-time.Second), Updated: now}
		if pending > 0 {
			p.OldestPending = now.Add(-1500 * time.Millisecond)
		} else {
			p.Finished = now.Add(-time.Second + 45*time.Millisecond)
		}
		return p
	}
	for _, c := range []struct {
		p     *reservation.HandoffProgress
		err   string
		state rollout.HandoffState
		line  string
	}{
		{at(12, 1204, 0), "", rollout.HandoffsDone, "handed off 1,204/1,204 shops in 45ms (flags version 12)"},
		{at(12, 0, 0), "", rollout.HandoffsDone, "no shop to hand off (flags version 12)"},
		{at(12, 1204, 3), "", rollout.HandoffsPending, "3 of 1,204 shops pending, oldest 1.5s (flags version 12)"},
		{at(11, 3, 0), "", rollout.HandoffsNotReported, "no report for flags version 12 yet (last: version 11, handed off 3/3 shops in 45ms)"},
		{at(11, 0, 0), "", rollout.HandoffsNotReported, "no report for flags version 12 yet (last: version 11, no shop to hand off)"},
		{nil, "", rollout.HandoffsNotReported, "no report for flags version 12 yet (no sweep of the pod has reported)"},
		{at(13, 2, 1), "", rollout.HandoffsNewer, "reported for flags version 13, newer than version 12: 1 of 2 shops pending, oldest 1.5s"},
		{nil, "timeout", rollout.HandoffsUnknown, "unknown: timeout"},
	} {
		if state, line := rollout.JudgeHandoffs(c.p, c.err, 12, now); state != c.state || line != c.line {
			t.Errorf("%+v %q: %s %q, want %s %q", c.p, c.err, state, line, c.state, c.line)
		}
	}
}

// fakeStores answers Reachable from a set of down (pod, store) pairs, and
// records what it was asked.
type fakeStores struct {
	down  map[string]bool // "pod-a redis"
	asked []string
}

func (f *fakeStores) Reachable(_ context.Context, pod string, store reservation.Authority) error {
	k := pod + " " + string(store)
	f.asked = append(f.asked, k)
	if f.down[k] {
		return errors.New("no answer to a ping within 1s")
	}
	return nil
}

// A kill or release that would move a pod's shops to a store that does
// not answer is refused, saying which store and what to do, and the flags
// stay; the store a switch leaves is never asked about, nor are pods it
// does not move.
func TestSwitchToAStoreThatDoesNotAnswerIsRefused(t *testing.T) {
	ctx := context.Background()
	b := setupController(t, true)
	b.setMode(t, "pod-a", authority.ModeMySQL)
	stores := &fakeStores{down: map[string]bool{"pod-a redis": true}}
	ctl := b.controller(t, func(c *rollout.ControllerConfig) { c.Reconciler, c.Stores = b.rc, stores })
	o := rollout.KillOptions{Actor: "ana", Reason: "drill"}

	err := ctl.Kill(ctx, flagdoc.PodScope("pod-a"), authority.KillRedis, o)
	if !errors.Is(err, rollout.ErrKillRefused) || !strings.Contains(err.Error(), "pod pod-a's redis cannot take its shops now (no answer to a ping within 1s)") ||
		!strings.Contains(err.Error(), "mysql keeps deciding") {
		t.Fatalf("kill to a Redis that does not answer: %v, want refused, naming the store and who keeps deciding", err)
	}
	if d := b.decision(t, "pod-a"); d.Kill != authority.KillOff {
		t.Fatalf("the flags changed after a refused kill: %+v", d)
	}
	if got := strings.Join(stores.asked, ","); got != "pod-a redis" {
		t.Errorf("asked %q, want pod-a's redis only (pod-b is not moved: it is in redis mode)", got)
	}

	// Redis answers: the kill goes through. MySQL goes down: the release
	// (back to MySQL) is refused, the kill stays engaged.
	stores.down = map[string]bool{"pod-a mysql": true}
	if err := ctl.Kill(ctx, flagdoc.PodScope("pod-a"), authority.KillRedis, o); err != nil {
		t.Fatal(err)
	}
	err = ctl.Release(ctx, flagdoc.PodScope("pod-a"), rollout.KillOptions{Actor: "ana", Reason: "over"})
	if !errors.Is(err, rollout.ErrKillRefused) || !strings.Contains(err.Error(), "release over pod:pod-a: pod pod-a's mysql cannot take its shops now") {
		t.Fatalf("release to a MySQL that does not answer: %v, want refused", err)
	}
	if d := b.decision(t, "pod-a"); d.Kill != authority.KillRedis {
		t.Fatalf("the kill switch after a refused release: %+v, want still engaged", d)
	}
	stores.down = nil
	if err := ctl.Release(ctx, flagdoc.PodScope("pod-a"), rollout.KillOptions{Actor: "ana", Reason: "over"}); err != nil {
		t.Fatal(err)
	}
}

// Issue 27, observation 2: right after an advance to mysql the gates said
// "in force for 3s" and counted 329 observations, the whole one-minute
// bucket the advance fell in, shadow traffic included. The evidence of a
// stage counts only the comparer's whole windows that start at or after
// the stage was applied: calls before it in the same window (the stage
// before's shadow traffic) and after it (in the window it began in) do
// not count; those of the next window do.
func TestEvidenceStartsAtTheFirstWholeWindow(t *testing.T) {
	b := setupController(t, true)
	ctx := context.Background()
	if _, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana"}); err != nil {
		t.Fatal(err)
	}
	b.nextWindow()
	b.observe(t, "pod-a", "shadow", 150, 0)
	b.clk.Add(2 * time.Minute)
	// Shadow traffic in the window the advance falls in, 20 s before it.
	window := b.clk.Now().Truncate(time.Minute)
	b.clk.Add(window.Add(10 * time.Second).Sub(b.clk.Now()))
	b.observe(t, "pod-a", "shadow", 277, 0)
	b.clk.Add(20 * time.Second)
	if _, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", Reason: "gates pass"}); err != nil {
		t.Fatal(err)
	}
	advanced := b.clk.Now()
	// And mysql traffic after it, in the same window.
	b.clk.Add(3 * time.Second)
	b.observe(t, "pod-a", "mysql", 52, 0)
	st, err := b.ctl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := window.Add(time.Minute)
	if st.Evidence.Observations != 0 || !st.Evidence.Since.Equal(next) {
		t.Errorf("3 s after the advance at %s: %d observations counted from %s; want 0, counted from the next window, %s",
			advanced.Format(time.TimeOnly), st.Evidence.Observations, st.Evidence.Since.Format(time.TimeOnly), next.Format(time.TimeOnly))
	}
	if !st.CountingFrom.Equal(next) || !st.Since.Equal(advanced) {
		t.Errorf("status: since %s, counting from %s; want %s and %s", st.Since, st.CountingFrom, advanced, next)
	}
	for _, g := range st.Gates {
		if g.Gate == "min_observations" && g.Pass {
			t.Errorf("min_observations passes 3 s into the stage: %s", g.Why)
		}
	}
	// The next window counts.
	b.nextWindow()
	b.observe(t, "pod-a", "mysql", 40, 0)
	if st, err = b.ctl.Status(ctx); err != nil || st.Evidence.Observations != 40 {
		t.Errorf("in the stage's first whole window: %d observations, %v; want the 40 made in it", st.Evidence.Observations, err)
	}
}

// A release that covers the stage in force starts its gates again as an
// advance starts them: min_duration from the release (never negative: a
// release used to write the start of the next window, ahead of the clock,
// and the stage said "in force for -24s"), the evidence from the next
// whole window. A kill does not restart them (docs/rollout.md).
func TestReleaseStartsTheGatesAgain(t *testing.T) {
	b := setupController(t, true)
	ctx := context.Background()
	if _, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana"}); err != nil {
		t.Fatal(err)
	}
	applied := b.clk.Now()
	b.nextWindow()
	b.observe(t, "pod-a", "shadow", 150, 10)
	b.clk.Add(5 * time.Second)
	if err := b.ctl.Kill(ctx, flagdoc.PodScope("pod-a"), authority.KillRedis, rollout.KillOptions{Actor: "ana", Reason: "mismatches"}); err != nil {
		t.Fatal(err)
	}
	if st, err := b.ctl.Status(ctx); err != nil || !st.Since.Equal(applied) {
		t.Errorf("after the kill: since %s, %v; want it kept, %s", st.Since, err, applied)
	}
	b.clk.Add(7 * time.Second)
	if err := b.ctl.Release(ctx, flagdoc.PodScope("pod-a"), rollout.KillOptions{Actor: "ana", Reason: "fixed"}); err != nil {
		t.Fatal(err)
	}
	released := b.clk.Now()
	b.clk.Add(2 * time.Second)
	st, err := b.ctl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Since.Equal(released) || st.Evidence.Observations != 0 {
		t.Errorf("after the release at %s: since %s, %d observations; want since the release, none counted", released, st.Since, st.Evidence.Observations)
	}
	for _, g := range st.Gates {
		if g.Gate == "min_duration" && (g.Value != 2 || g.Why != "in force for 2s, need 1m0s") {
			t.Errorf("min_duration 2 s after the release: value %v, %q; want 2 and %q", g.Value, g.Why, "in force for 2s, need 1m0s")
		}
	}
}

// The evidence is the windows the replicas wrote that start at or after
// the stage was applied, whatever width of window the reader counts in: a
// CLI (one-minute windows) and the replicas of a demo (five-second ones)
// judge a stage on the same calls, and say the same counting_from once a
// window is written.
func TestEvidenceIsTheWritersWindows(t *testing.T) {
	b := setupController(t, true)
	ctx := context.Background()
	fine, err := compare.New(compare.Config{DB: b.db.DB, Registerer: prometheus.NewRegistry(), Window: 5 * time.Second, FlushInterval: time.Hour, CleanupInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fine.Close(context.Background()) })
	b.clk.Add(2 * time.Second)
	if _, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana"}); err != nil {
		t.Fatal(err)
	}
	applied := b.clk.Now() // 32 s into a minute, in the five-second window from 30 s
	observe := func(at time.Time, n int) {
		t.Helper()
		for range n {
			fine.Observe(compare.Observation{Op: compare.OpReserve, Pod: "pod-a", Shop: 1, Token: "t", Mode: "shadow", At: at,
				Authority: compare.Outcome{Store: reservation.AuthorityRedis, Result: compare.ResultReserved},
				Shadow:    compare.Outcome{Store: reservation.AuthorityMySQL, Result: compare.ResultReserved}})
		}
		if err := fine.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	observe(applied.Add(-1*time.Second), 7) // before the stage, in its five-second window
	observe(applied.Add(2*time.Second), 11) // after it, in the same window
	st, err := b.ctl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next := applied.Truncate(time.Minute).Add(time.Minute); st.Evidence.Observations != 0 || !st.CountingFrom.Equal(next) {
		t.Errorf("before any whole window: %d observations, counting from %s; want 0, from the reader's next window %s", st.Evidence.Observations, st.CountingFrom, next)
	}
	observe(applied.Add(4*time.Second), 13) // the next five-second window, from 35 s
	st, err = b.ctl.Status(ctx)
	if next := applied.Add(3 * time.Second); err != nil || st.Evidence.Observations != 13 || !st.CountingFrom.Equal(next) || !st.Evidence.Since.Equal(next) {
		t.Errorf("after the first whole five-second window: %d observations, counting from %s, %v; want 13, from %s", st.Evidence.Observations, st.CountingFrom, err, next)
	}
}

// With the modes served by a source reservoir does not write
// (ControllerConfig.Modes, the flags store a KillTable), the automatic
// controller follows the source: an advance is refused until the source
// answers the next stage's mode, then records the stage without writing
// anything to the source; a gate that breaks in a stage giving MySQL the
// decisions engages reservoir's own kill switch, which the replicas apply
// over the source (flagsource.Config.Kills); a mode change through the
// store is refused.
func TestAutoKillsBesideAnExternalModeSource(t *testing.T) {
	t.Parallel()
	b := setupController(t, true)
	ctx := context.Background()
	modes := authority.NewStatic(authority.ModeRedis)
	kills := flagdoc.KillTable{DB: b.db.DB, Modes: "the test's provider"}
	ctl := b.controller(t, func(c *rollout.ControllerConfig) { c.Flags, c.Modes, c.Reconciler = kills, modes, b.rc })

	a, err := ctl.AutoStep(ctx, "auto")
	if err != nil || a.Did != "none" || !strings.Contains(a.Why, "pod-a answers redis") || !strings.Contains(a.Why, "change the modes where they are served") {
		t.Fatalf("auto step before the source moved: %+v, %v; want none, naming what the source answers", a, err)
	}
	if err := modes.SetPodMode("pod-a", authority.ModeShadow); err != nil {
		t.Fatal(err)
	}
	if a, err = ctl.AutoStep(ctx, "auto"); err != nil || a.Did != "advanced" {
		t.Fatalf("auto step once the source answers shadow: %+v, %v", a, err)
	}
	b.nextWindow()
	b.observe(t, "pod-a", "shadow", 120, 0)
	b.clk.Add(2 * time.Minute)
	if err := modes.SetPodMode("pod-a", authority.ModeMySQL); err != nil {
		t.Fatal(err)
	}
	if a, err = ctl.AutoStep(ctx, "auto"); err != nil || a.Did != "advanced" {
		t.Fatalf("auto step into mysql: %+v, %v", a, err)
	}
	b.nextWindow()
	b.observe(t, "pod-a", "mysql", 200, 10)
	if a, err = ctl.AutoStep(ctx, "auto"); err != nil || a.Did != "killed" {
		t.Fatalf("auto step with mismatches: %+v, %v; want killed", a, err)
	}
	f, err := kills.Read()
	if err != nil || f.KillAt(flagdoc.PodScope("pod-a")).State != authority.KillRedis || f.Version != 1 {
		t.Errorf("the kill switch document after the automatic kill: %+v, %v; want pod-a at redis, version 1", f, err)
	}
	if _, _, err := kills.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.PodScope("pod-b"), authority.ModeShadow) }); !errors.Is(err, flagdoc.ErrModesExternal) {
		t.Errorf("a mode change through the kill switch document: %v; want ErrModesExternal", err)
	}
	h, err := ctl.History(ctx, 10)
	if err != nil || len(h) != 3 || h[0].Action != "kill" || h[1].Action != "advance" || h[2].Action != "advance" {
		t.Errorf("history %+v, %v; want two advances and the kill", h, err)
	}
}
