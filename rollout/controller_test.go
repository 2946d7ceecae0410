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

type fakeReconciler struct {
	clean bool
	// repairs records RepairFrom calls as "pod<-authority".
	mu      sync.Mutex
	repairs []string
}

func (f *fakeReconciler) Clean(context.Context, string) (bool, string, error) {
	if f.clean {
		return true, "no drift", nil
	}
	return false, "redis:quantity 3", nil
}

func (f *fakeReconciler) RepairFrom(_ context.Context, pod string, a reservation.Authority, shops []int64) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := pod + "<-" + string(a)
	if shops != nil {
		r += fmt.Sprint(shops)
	}
	f.repairs = append(f.repairs, r)
	return "no drift", nil
}

type ctlBundle struct {
	ctl   *rollout.Controller
	cmp   *compare.Comparer
	flags rollout.FlagsFile
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
	ff := rollout.FlagsFile{Path: filepath.Join(t.TempDir(), "flags.json")}
	if err := ff.Write(rollout.NewFlags()); err != nil {
		t.Fatal(err)
	}
	cmp, err := compare.New(compare.Config{DB: db.DB, Registerer: prometheus.NewRegistry(), FlushInterval: time.Hour, CleanupInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmp.Close(context.Background()) })
	clk := &clock{now: time.Now().UTC()}
	rc := &fakeReconciler{clean: clean}
	ctl, err := rollout.NewController(rollout.ControllerConfig{DB: db.DB, Flags: ff, Plan: plan, Stats: cmp,
		Reconciler: rc, Now: clk.Now, Propagation: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return &ctlBundle{ctl: ctl, cmp: cmp, flags: ff, clk: clk, rc: rc}
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
	if f, _ := b.flags.Read(); f.Resolve("pod-a", 1).Mode != rollout.ModeRedis {
		t.Fatal("the dry run changed the flags")
	}
	if _, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", Reason: "start"}); err != nil {
		t.Fatal(err)
	}
	if f, _ := b.flags.Read(); f.Resolve("pod-a", 1).Mode != rollout.ModeShadow {
		t.Fatal("stage 0 not applied")
	}
	// No data: refused, and the error says which gate and the numbers.
	_, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana"})
	if !errors.Is(err, rollout.ErrGatesFail) || !strings.Contains(err.Error(), "min_observations: 0 observations on [pod-a], need 100") {
		t.Fatalf("advance with no data: %v", err)
	}
	// Enough data, too early.
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
	if f, _ := b.flags.Read(); f.Resolve("pod-a", 1).Mode != rollout.ModeMySQL || f.Resolve("pod-b", 1).Mode != rollout.ModeRedis {
		t.Fatal("stage 1 not applied to pod-a alone")
	}
	// mysql_only needs confirmation, even with passing gates.
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

// Before MySQL becomes an authority the pod must be reconciled.
func TestAdvanceRefusesUnreconciledPod(t *testing.T) {
	b := setupController(t, false)
	ctx := context.Background()
	if _, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana"}); err != nil {
		t.Fatal(err)
	}
	b.observe(t, "pod-a", "shadow", 150, 0)
	b.clk.Add(2 * time.Minute)
	_, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana"})
	if err == nil || !strings.Contains(err.Error(), "reservoir reconcile --pod pod-a --repair") {
		t.Fatalf("advance into mysql with drift: %v", err)
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
	b.observe(t, "pod-a", "shadow", 120, 0)
	b.clk.Add(2 * time.Minute)
	if a, err = b.ctl.AutoStep(ctx, "auto"); err != nil || a.Did != "advanced" {
		t.Fatalf("second auto step: %+v %v", a, err)
	}
	// In the mysql stage, 5% outcome mismatches against a 1% ceiling.
	b.observe(t, "pod-a", "mysql", 200, 10)
	a, err = b.ctl.AutoStep(ctx, "auto")
	if err != nil || a.Did != "killed" || !strings.Contains(a.Why, "max_rate:outcome_mismatch") {
		t.Fatalf("auto step with mismatches: %+v %v", a, err)
	}
	f, _ := b.flags.Read()
	if d := f.Resolve("pod-a", 1); d.Kill != rollout.KillRedis || d.Route().Authority != reservation.AuthorityRedis {
		t.Errorf("pod-a after auto kill: %+v", d)
	}
	if d := f.Resolve("pod-b", 1); d.Kill != rollout.KillOff {
		t.Errorf("pod-b must be untouched: %+v", d)
	}
	if err := b.ctl.Release(ctx, rollout.PodScope("pod-a"), rollout.KillOptions{Actor: "ana", Reason: "fixed the pool cap"}); err != nil {
		t.Fatal(err)
	}
	// pod-a runs mysql: the release repaired MySQL from Redis first.
	if got := strings.Join(b.rc.repairs, ", "); got != "pod-a<-redis" {
		t.Errorf("repairs before the release: %q, want pod-a<-redis", got)
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

// A kill over a mysql_only scope is refused until Redis is resynced.
func TestKillOverMySQLOnlyNeedsResync(t *testing.T) {
	b := setupController(t, true)
	ctx := context.Background()
	if _, _, err := b.flags.Update(func(f *rollout.Flags) error { return f.SetMode(rollout.PodScope("pod-b"), rollout.ModeMySQLOnly) }); err != nil {
		t.Fatal(err)
	}
	err := b.ctl.Kill(ctx, rollout.PodScope("pod-b"), rollout.KillRedis, rollout.KillOptions{Actor: "ana", Reason: "incident"})
	if err == nil || !strings.Contains(err.Error(), "reservoir reconcile --pod pod-b --repair") {
		t.Fatalf("kill over mysql_only: %v", err)
	}
	if err := b.ctl.Kill(ctx, rollout.PodScope("pod-b"), rollout.KillRedis, rollout.KillOptions{Actor: "ana", Reason: "incident", Resynced: true}); err != nil {
		t.Fatal(err)
	}
	if err := b.ctl.Kill(ctx, rollout.Global(), rollout.KillRedis, rollout.KillOptions{Actor: "ana"}); err == nil {
		t.Fatal("a kill without a reason was accepted")
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

// failingReconciler cannot repair.
type failingReconciler struct{ fakeReconciler }

func (*failingReconciler) RepairFrom(context.Context, string, reservation.Authority, []int64) (string, error) {
	return "", errors.New("redis unreachable")
}

// A release repairs MySQL from Redis first, on what the switch covered:
// every pod under it, or only the scope's shop; a redis_only switch is
// first turned into a redis one (dual writes). If the repair fails, or
// nothing can repair, the switch stays engaged.
func TestReleaseRepairsMySQLFirst(t *testing.T) {
	ctx := context.Background()
	kill := rollout.KillOptions{Actor: "ana", Reason: "drill"}
	engaged := func(t *testing.T, ff rollout.FlagsFile, pod string) bool {
		t.Helper()
		f, err := ff.Read()
		if err != nil {
			t.Fatal(err)
		}
		return f.Resolve(pod, 1).Kill != rollout.KillOff
	}
	setMode := func(t *testing.T, ff rollout.FlagsFile, pod string, m rollout.Mode) {
		t.Helper()
		if _, _, err := ff.Update(func(f *rollout.Flags) error { return f.SetMode(rollout.PodScope(pod), m) }); err != nil {
			t.Fatal(err)
		}
	}
	repairs := func(b *ctlBundle) string {
		b.rc.mu.Lock()
		defer b.rc.mu.Unlock()
		r := strings.Join(b.rc.repairs, ", ")
		b.rc.repairs = nil
		return r
	}

	b := setupController(t, true)
	setMode(t, b.flags, "pod-a", rollout.ModeMySQL)
	if err := b.ctl.Kill(ctx, rollout.PodScope("pod-a"), rollout.KillRedis, kill); err != nil {
		t.Fatal(err)
	}
	if err := b.ctl.Release(ctx, rollout.PodScope("pod-a"), kill); err != nil || repairs(b) != "pod-a<-redis" {
		t.Fatalf("release of pod-a: %v, want pod-a repaired from Redis", err)
	}

	// A shop's switch: only that shop is repaired (on each pod, since the
	// plan does not know which pod serves it).
	if err := b.ctl.Kill(ctx, rollout.ShopScope(7), rollout.KillRedis, kill); err != nil {
		t.Fatal(err)
	}
	if err := b.ctl.Release(ctx, rollout.ShopScope(7), kill); err != nil || repairs(b) != "pod-a<-redis[7], pod-b<-redis[7]" {
		t.Fatalf("release of shop 7: %v, want only shop 7 repaired", err)
	}

	// redis_only: dual writes first (audited as a kill), then the repair.
	if err := b.ctl.Kill(ctx, rollout.Global(), rollout.KillRedisOnly, kill); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	dry := kill
	dry.DryRun, dry.Out = true, &out
	if err := b.ctl.Release(ctx, rollout.Global(), dry); err != nil || !strings.Contains(out.String(), "would turn the redis_only switch into redis") ||
		!strings.Contains(out.String(), "would repair MySQL from Redis first on pod-a, pod-b") || repairs(b) != "" {
		t.Fatalf("dry-run release: %v, %q", err, out.String())
	}
	if err := b.ctl.Release(ctx, rollout.Global(), kill); err != nil || repairs(b) != "pod-a<-redis, pod-b<-redis" {
		t.Fatalf("release of a global redis_only switch: %v", err)
	}
	hs, err := b.ctl.History(ctx, 2)
	if err != nil || len(hs) != 2 || hs[0].Action != "release" || hs[1].Action != "kill" || !strings.Contains(hs[1].Reason, "dual writes before the repair") {
		t.Fatalf("history of the release: %+v %v, want the switch to redis, then the release", hs, err)
	}

	db := testdb.New(t)
	plan, err := rollout.ParsePlan([]byte(planText))
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range []rollout.Reconciler{&failingReconciler{}, nil} {
		ctl, err := rollout.NewController(rollout.ControllerConfig{DB: db.DB, Flags: b.flags, Plan: plan, Stats: b.cmp, Reconciler: rc})
		if err != nil {
			t.Fatal(err)
		}
		if err := ctl.Kill(ctx, rollout.PodScope("pod-a"), rollout.KillRedis, kill); err != nil {
			t.Fatal(err)
		}
		err = ctl.Release(ctx, rollout.PodScope("pod-a"), kill)
		if err == nil || !engaged(t, b.flags, "pod-a") {
			t.Errorf("release with reconciler %T: %v; want refused, the switch still engaged", rc, err)
		}
		t.Logf("refused: %v", err)
		if _, _, err := b.flags.Update(func(f *rollout.Flags) error {
			return f.ReleaseKill(rollout.PodScope("pod-a"), rollout.Attribution{Actor: "test", Reason: "reset"})
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// Every change the controller writes is the next version of the flags:
// advance, kill and release each add one (a release of redis_only adds
// two: the switch to redis, then the release), a dry run adds none and
// shows the version it would write.
func TestControllerBumpsTheVersion(t *testing.T) {
	b := setupController(t, true)
	ctx := context.Background()
	last := int64(0)
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
	if !strings.Contains(dry.String(), `+         "version": 1`) {
		t.Errorf("the dry run does not show the version it would write:\n%s", dry.String())
	}
	step("advance", 1, func() error {
		_, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", Reason: "start"})
		return err
	})
	kill := rollout.KillOptions{Actor: "ana", Reason: "drill"}
	step("kill pod-a", 1, func() error { return b.ctl.Kill(ctx, rollout.PodScope("pod-a"), rollout.KillRedis, kill) })
	step("kill pod-a again: nothing changes", 0, func() error { return b.ctl.Kill(ctx, rollout.PodScope("pod-a"), rollout.KillRedis, kill) })
	step("release pod-a", 1, func() error { return b.ctl.Release(ctx, rollout.PodScope("pod-a"), kill) })
	step("release pod-a again", 0, func() error { return b.ctl.Release(ctx, rollout.PodScope("pod-a"), kill) })
	step("kill everything redis_only", 1, func() error { return b.ctl.Kill(ctx, rollout.Global(), rollout.KillRedisOnly, kill) })
	// Its dry run ends at the version the release would leave: two on.
	dry.Reset()
	dryKill := kill
	dryKill.DryRun, dryKill.Out = true, &dry
	step("dry-run release of redis_only", 0, func() error { return b.ctl.Release(ctx, rollout.Global(), dryKill) })
	if want := fmt.Sprintf(`+         "version": %d`, last+2); !strings.Contains(dry.String(), want) {
		t.Errorf("the dry run of a redis_only release does not end at version %d:\n%s", last+2, dry.String())
	}
	step("release redis_only", 2, func() error { return b.ctl.Release(ctx, rollout.Global(), kill) })

	// The audit trail shows each version's file.
	hs, err := b.ctl.History(ctx, 1)
	if err != nil || len(hs) != 1 || !strings.Contains(hs[0].After, fmt.Sprintf(`"version": %d`, last)) {
		t.Errorf("the last audit entry does not hold version %d: %+v %v", last, hs, err)
	}
}
