package rollout_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// barrierStore is a FlagStore whose Read waits until n readers have read:
// it makes two controllers decide from the same version before either
// writes, the race a fleet's two operators can run into.
type barrierStore struct {
	flagdoc.FlagStore
	wg *sync.WaitGroup
}

func (b barrierStore) Read() (*flagdoc.Flags, error) {
	f, err := b.FlagStore.Read()
	b.wg.Done()
	b.wg.Wait()
	return f, err
}

// barrierTxStore is barrierStore over a store whose changes can carry
// their audit (flagdoc.TxStore), so a controller takes its one-transaction
// path; barrierStore hides it, so a controller audits after the write.
type barrierTxStore struct {
	flagdoc.TxStore
	wg *sync.WaitGroup
}

func (b barrierTxStore) Read() (*flagdoc.Flags, error) {
	return barrierStore{b.TxStore, b.wg}.Read()
}

// Two controllers race to change the control database's flags, each from
// the version it read: one wins, the other gets ErrFlagsChanged naming
// both versions and writes nothing, and the audit holds both attempts
// (the loser's as "kill_conflict").
func TestControllersRaceOnTheDatabaseFlags(t *testing.T) {
	t.Parallel()
	stores := map[string]func(flagdoc.FlagsTable, *sync.WaitGroup) flagdoc.FlagStore{
		"audit in the flags' transaction": func(t flagdoc.FlagsTable, wg *sync.WaitGroup) flagdoc.FlagStore { return barrierTxStore{t, wg} },
		"audit after the write":           func(t flagdoc.FlagsTable, wg *sync.WaitGroup) flagdoc.FlagStore { return barrierStore{t, wg} },
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raceOnTheDatabaseFlags(t, store)
		})
	}
}

func raceOnTheDatabaseFlags(t *testing.T, store func(flagdoc.FlagsTable, *sync.WaitGroup) flagdoc.FlagStore) {
	b := setupController(t, true)
	table := flagdoc.FlagsTable{DB: b.db.DB}
	if err := table.Write(flagdoc.NewFlags()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	ctls := []*rollout.Controller{
		b.controller(t, func(c *rollout.ControllerConfig) { c.Flags = store(table, &wg); c.ObeyWait = -1 }),
		b.controller(t, func(c *rollout.ControllerConfig) { c.Flags = store(table, &wg); c.ObeyWait = -1 }),
	}
	errs := make([]error, 2)
	var run sync.WaitGroup
	for i, ctl := range ctls {
		run.Go(func() {
			errs[i] = ctl.Kill(context.Background(), flagdoc.PodScope([]string{"pod-a", "pod-b"}[i]), authority.KillRedis,
				rollout.KillOptions{Actor: []string{"alice", "bob"}[i], Reason: "race"})
		})
	}
	run.Wait()
	won, lost := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case errors.Is(err, flagdoc.ErrFlagsChanged) && strings.Contains(err.Error(), "decided at version 1, the control database is at version 2"):
			lost++
		default:
			t.Errorf("a racing kill: %v", err)
		}
	}
	if won != 1 || lost != 1 {
		t.Fatalf("%d won and %d lost the race, want one each: %v", won, lost, errs)
	}
	f, err := table.Read()
	if err != nil {
		t.Fatal(err)
	}
	engaged := 0
	for _, pod := range []string{"pod-a", "pod-b"} {
		if f.KillAt(flagdoc.PodScope(pod)).Engaged() {
			engaged++
		}
	}
	if f.Version != 2 || engaged != 1 {
		t.Errorf("after the race: version %d with %d pod kill switches engaged, want version 2 and the winner's one", f.Version, engaged)
	}
	hist, err := ctls[0].History(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	actions := map[string]int{}
	for _, h := range hist {
		actions[h.Action]++
	}
	if actions["kill"] != 1 || actions["kill_conflict"] != 1 {
		t.Errorf("the audit holds %v, want one kill and one kill_conflict", actions)
	}
}

// FlagsTable keeps the flags in the control database: a change numbers
// the next version, an unchanged one writes nothing, and UpdateAt refuses
// a stale version.
func TestFlagsTable(t *testing.T) {
	t.Parallel()
	b := setupController(t, true)
	table := flagdoc.FlagsTable{DB: b.db.DB}
	if _, err := table.Read(); err == nil {
		t.Fatal("read an empty table without an error")
	}
	before, after, err := table.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.PodScope("pod-a"), authority.ModeShadow) })
	if err != nil || before.Version != 0 || after.Version != 1 {
		t.Fatalf("first update: %v, versions %v -> %v", err, before, after)
	}
	if _, after, err = table.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.PodScope("pod-a"), authority.ModeShadow) }); err != nil || after.Version != 1 {
		t.Fatalf("unchanged update: %v, version %d, want 1", err, after.Version)
	}
	if _, _, err := table.UpdateAt(0, func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.PodScope("pod-a"), authority.ModeMySQL) }); !errors.Is(err, flagdoc.ErrFlagsChanged) {
		t.Fatalf("UpdateAt a stale version: %v, want ErrFlagsChanged", err)
	}
	f, err := table.Read()
	if err != nil || f.Version != 1 || f.Resolve("pod-a", 1).Mode != authority.ModeShadow {
		t.Fatalf("read back: %v %+v", err, f)
	}
}

// advance refuses to write a stage under an engaged kill switch on its
// pods (it would look applied and not be), unless overridden with a
// reason, which the audit records as an override.
func TestAdvanceRefusedUnderAKillSwitch(t *testing.T) {
	t.Parallel()
	b := setupController(t, true)
	ctx := context.Background()
	if err := b.ctl.Kill(ctx, flagdoc.PodScope("pod-a"), authority.KillRedis, rollout.KillOptions{Actor: "ana", Reason: "incident"}); err != nil {
		t.Fatal(err)
	}
	_, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana"})
	if !errors.Is(err, rollout.ErrKillEngaged) || !strings.Contains(err.Error(), "pod-a") {
		t.Fatalf("advance under pod-a's kill switch: %v, want ErrKillEngaged naming pod-a", err)
	}
	if b.decision(t, "pod-a").Mode != authority.ModeRedis {
		t.Fatal("the refused advance changed the flags")
	}
	if _, err := b.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", Override: true, Reason: "shadow under the switch, on purpose"}); err != nil {
		t.Fatalf("advance with an override: %v", err)
	}
	hist, err := b.ctl.History(ctx, 5)
	if err != nil || len(hist) == 0 || hist[0].Action != "override" {
		t.Fatalf("the override is not audited as one: %v %+v", err, hist)
	}
	// The global kill switch covers every pod too.
	b2 := setupController(t, true)
	if err := b2.ctl.Kill(ctx, flagdoc.Global(), authority.KillRedis, rollout.KillOptions{Actor: "ana", Reason: "incident"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana"}); !errors.Is(err, rollout.ErrKillEngaged) {
		t.Fatalf("advance under the global kill switch: %v", err)
	}
}

// A kill switch for a pod the controller does not know is refused: it
// would be written and obeyed by nobody.
func TestKillRefusesAnUnknownPod(t *testing.T) {
	t.Parallel()
	b := setupController(t, true)
	err := b.ctl.Kill(context.Background(), flagdoc.PodScope("pod-z"), authority.KillRedis, rollout.KillOptions{Actor: "ana", Reason: "typo"})
	if !errors.Is(err, rollout.ErrUnknownScope) || !strings.Contains(err.Error(), "pod-a, pod-b") {
		t.Fatalf("kill pod-z: %v, want ErrUnknownScope listing the pods", err)
	}
	if err := b.ctl.Release(context.Background(), flagdoc.PodScope("pod-z"), rollout.KillOptions{Actor: "ana", Reason: "typo"}); !errors.Is(err, rollout.ErrUnknownScope) {
		t.Fatalf("release pod-z: %v, want ErrUnknownScope", err)
	}
}

// A stage that hands a pod running mysql_only back to Redis waits for
// Redis to be current: the relay drained and the reconciler clean, or an
// operator's --resynced.
func TestAdvanceLeavingMySQLOnlyNeedsRedisCurrent(t *testing.T) {
	t.Parallel()
	plan, err := rollout.ParsePlan([]byte(`
pods = ["pod-a"]
[[stages]]
name = "mysql_only pod-a"
mode = "mysql_only"
pods = ["pod-a"]
[[stages]]
name = "back to mysql"
mode = "mysql"
pods = ["pod-a"]
`))
	if err != nil {
		t.Fatal(err)
	}
	b := setupController(t, true)
	lag := fakeLag{changes: map[string]int64{"pod-a": 3}, oldest: map[string]time.Duration{"pod-a": time.Second}}
	ctl := b.controller(t, func(c *rollout.ControllerConfig) { c.Plan, c.Pods, c.Reconciler, c.Lag = plan, nil, b.rc, lag })
	ctx := context.Background()
	if _, err := ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "ana", ConfirmMySQLOnly: true}); err != nil {
		t.Fatal(err)
	}
	over := rollout.AdvanceOptions{Actor: "ana", Override: true, Reason: "roll back a stage"} // the gates have no data yet
	if _, err := ctl.Advance(ctx, over); !errors.Is(err, rollout.ErrRedisNotCurrent) || !strings.Contains(err.Error(), "3 change(s)") {
		t.Fatalf("leaving mysql_only with 3 changes pending: %v", err)
	}
	lag.changes["pod-a"] = 0
	b.rc.clean = false
	if _, err := ctl.Advance(ctx, over); !errors.Is(err, rollout.ErrRedisNotCurrent) || !strings.Contains(err.Error(), "reconcile --pod pod-a --repair") {
		t.Fatalf("leaving mysql_only with drift: %v", err)
	}
	if b.decision(t, "pod-a").Mode != authority.ModeMySQLOnly {
		t.Fatal("a refused advance changed the flags")
	}
	over.Resynced = true
	if _, err := ctl.Advance(ctx, over); err != nil {
		t.Fatalf("leaving mysql_only, resynced: %v", err)
	}
	if b.decision(t, "pod-a").Mode != authority.ModeMySQL {
		t.Fatal("the advance did not apply")
	}
}

// Over an invalid document the status still answers: the last valid flags
// with what is wrong (line and column), never ready.
func TestStatusOverAnInvalidDocument(t *testing.T) {
	t.Parallel()
	b := setupController(t, true)
	ctx := context.Background()
	if err := os.WriteFile(b.flags.Path, []byte("{\n  \"flags\": {\n    \"reservoir-mode\": {,\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := b.ctl.Status(ctx)
	if err != nil {
		t.Fatalf("status over an invalid document: %v", err)
	}
	if st.FlagsInvalid == "" || !strings.Contains(st.FlagsInvalid, "line 3") || st.Ready {
		t.Fatalf("status: invalid %q, ready %v; want the problem with its line, not ready", st.FlagsInvalid, st.Ready)
	}
	if len(st.Pods) != 2 {
		t.Fatalf("status pods: %+v", st.Pods)
	}
	// The automatic step waits, and says for what.
	act, err := b.ctl.AutoStep(ctx, "auto")
	if err != nil || act.Did != "none" || !strings.Contains(act.Why, "flags document is invalid") || !strings.Contains(act.Why, "line 3") {
		t.Fatalf("auto step over an invalid document: %+v, %v; want it to wait, naming the problem", act, err)
	}
}

// A kill switch's change and its audit row are one transaction on the
// control database: when the audit cannot be written, the flags do not
// change either (as two commits, a failed audit left the kill in force,
// unaudited), over a valid document and over an invalid one; once the
// audit can be written, the change and its entry land together.
func TestKillLandsWithItsAudit(t *testing.T) {
	t.Parallel()
	b := setupController(t, true)
	ctx := context.Background()
	table := flagdoc.FlagsTable{DB: b.db.DB}
	if err := table.Write(flagdoc.NewFlags()); err != nil {
		t.Fatal(err)
	}
	ctl := b.controller(t, func(c *rollout.ControllerConfig) { c.Flags = table })
	refuse := func(on bool) {
		t.Helper()
		stmt := "DROP TRIGGER rollout_audit_refused"
		if on {
			stmt = "CREATE TRIGGER rollout_audit_refused BEFORE INSERT ON rollout_audit FOR EACH ROW SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'the test refuses the audit'"
		}
		if _, err := b.db.DB.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	stored := func() (version int64, doc string) {
		t.Helper()
		if err := b.db.DB.QueryRow(`SELECT version, document FROM rollout_flags WHERE id = 1`).Scan(&version, &doc); err != nil {
			t.Fatal(err)
		}
		return version, doc
	}
	audited := func() int {
		t.Helper()
		h, err := ctl.History(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(h)
	}
	kill := func() error {
		return ctl.Kill(ctx, flagdoc.PodScope("pod-a"), authority.KillRedis, rollout.KillOptions{Actor: "ana", Reason: "drill"})
	}

	refuse(true)
	if err := kill(); err == nil || !strings.Contains(err.Error(), "the test refuses the audit") {
		t.Fatalf("kill with the audit refused: %v, want the audit's error", err)
	}
	if v, doc := stored(); v != 1 || strings.Contains(doc, `"drill"`) || audited() != 0 {
		t.Fatalf("with the audit refused the kill landed: flags version %d, %d audit entries:\n%s", v, audited(), doc)
	}
	refuse(false)
	if err := kill(); err != nil {
		t.Fatal(err)
	}
	if v, _ := stored(); v != 2 || audited() != 1 || !strings.Contains(lastAudit(t, ctl).After, `"version": 2`) {
		t.Fatalf("after the kill: flags version %d, audit %+v", v, lastAudit(t, ctl))
	}

	// Over an invalid document (a hand edit): the replacement and its
	// audit, likewise.
	_, doc := stored()
	bad := strings.ReplaceAll(strings.Replace(doc, `"mysql": "mysql"`, `"mysqll": "mysqll"`, 1), `"version": 2`, `"version": 3`)
	if _, err := b.db.DB.Exec(`UPDATE rollout_flags SET version = 3, document = ? WHERE id = 1`, bad); err != nil {
		t.Fatal(err)
	}
	release := func() error {
		return ctl.Release(ctx, flagdoc.PodScope("pod-a"), rollout.KillOptions{Actor: "ana", Reason: "drill over"})
	}
	refuse(true)
	if err := release(); err == nil || !strings.Contains(err.Error(), "the test refuses the audit") {
		t.Fatalf("release over the invalid document with the audit refused: %v, want the audit's error", err)
	}
	if v, doc := stored(); v != 3 || doc != bad || audited() != 1 {
		t.Fatalf("with the audit refused the release over the invalid document landed: flags version %d, %d audit entries", v, audited())
	}
	refuse(false)
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if v, _ := stored(); v != 4 || audited() != 2 || lastAudit(t, ctl).Action != "release_over_invalid" {
		t.Fatalf("after the release over the invalid document: flags version %d, audit %+v", v, lastAudit(t, ctl))
	}
}
