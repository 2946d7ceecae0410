package rollout_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/seed31b0e981/reservoir/rollout"
)

// barrierStore is a FlagStore whose Read waits until n readers have read:
// it makes two controllers decide from the same version before either
// writes, the race a fleet's two operators can run into.
type barrierStore struct {
	rollout.FlagStore
	wg *sync.WaitGroup
}

func (b barrierStore) Read() (*rollout.Flags, error) {
	f, err := b.FlagStore.Read()
	b.wg.Done()
	b.wg.Wait()
	return f, err
}

// Two controllers race to change the control database's flags, each from
// the version it read: one wins, the other gets ErrFlagsChanged naming
// both versions and writes nothing, and the audit holds both attempts
// (the loser's as "kill_conflict").
func TestControllersRaceOnTheDatabaseFlags(t *testing.T) {
	t.Parallel()
	b := setupController(t, true)
	table := rollout.FlagsTable{DB: b.db.DB}
	if err := table.Write(rollout.NewFlags()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	ctls := []*rollout.Controller{
		b.controller(t, func(c *rollout.ControllerConfig) { c.Flags = barrierStore{table, &wg}; c.ObeyWait = -1 }),
		b.controller(t, func(c *rollout.ControllerConfig) { c.Flags = barrierStore{table, &wg}; c.ObeyWait = -1 }),
	}
	errs := make([]error, 2)
	var run sync.WaitGroup
	for i, ctl := range ctls {
		run.Go(func() {
			errs[i] = ctl.Kill(context.Background(), rollout.PodScope([]string{"pod-a", "pod-b"}[i]), rollout.KillRedis,
				rollout.KillOptions{Actor: []string{"alice", "bob"}[i], Reason: "race"})
		})
	}
	run.Wait()
	won, lost := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case errors.Is(err, rollout.ErrFlagsChanged) && strings.Contains(err.Error(), "decided at version 0, the control database is at version 1"):
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
		if f.KillAt(rollout.PodScope(pod)).Engaged() {
			engaged++
		}
	}
	if f.Version != 1 || engaged != 1 {
		t.Errorf("after the race: version %d with %d pod kill switches engaged, want version 1 and the winner's one", f.Version, engaged)
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
	table := rollout.FlagsTable{DB: b.db.DB}
	if _, err := table.Read(); err == nil {
		t.Fatal("read an empty table without an error")
	}
	before, after, err := table.Update(func(f *rollout.Flags) error { return f.SetMode(rollout.PodScope("pod-a"), rollout.ModeShadow) })
	if err != nil || before.Version != 0 || after.Version != 1 {
		t.Fatalf("first update: %v, versions %v -> %v", err, before, after)
	}
	if _, after, err = table.Update(func(f *rollout.Flags) error { return f.SetMode(rollout.PodScope("pod-a"), rollout.ModeShadow) }); err != nil || after.Version != 1 {
		t.Fatalf("unchanged update: %v, version %d, want 1", err, after.Version)
	}
	if _, _, err := table.UpdateAt(0, func(f *rollout.Flags) error { return f.SetMode(rollout.PodScope("pod-a"), rollout.ModeMySQL) }); !errors.Is(err, rollout.ErrFlagsChanged) {
		t.Fatalf("UpdateAt a stale version: %v, want ErrFlagsChanged", err)
	}
	f, err := table.Read()
	if err != nil || f.Version != 1 || f.Resolve("pod-a", 1).Mode != rollout.ModeShadow {
		t.Fatalf("read back: %v %+v", err, f)
	}
}
