package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/flagdtest"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
	"github.com/seed31b0e981/reservoir/rollout/flagsource"
)

// externalTopology writes a topology whose modes come from a flagd daemon
// serving pod-a in mode, with the operator topology's plan; it returns the
// topology's path and the control database.
func externalTopology(t *testing.T, mode authority.Mode) (string, *testdb.DB, *flagdtest.Server) {
	t.Helper()
	f := flagdoc.NewFlags()
	if err := f.SetMode(flagdoc.PodScope("pod-a"), mode); err != nil {
		t.Fatal(err)
	}
	doc, err := f.Render()
	if err != nil {
		t.Fatal(err)
	}
	daemon := flagdtest.New(t, string(doc))
	pod, control, r := testdb.New(t), testdb.New(t), testredis.New(t)
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.toml")
	write(t, plan, "pods = [\"pod-a\"]\n[[stages]]\nname = \"shadow pod-a\"\nmode = \"shadow\"\npods = [\"pod-a\"]\n")
	topo := filepath.Join(dir, "topology.toml")
	write(t, topo, fmt.Sprintf("control_dsn = %q\nflags_source = \"flagd\"\nflagd_addr = %q\nplan_file = %q\n[[pods]]\nname = \"pod-a\"\nmysql_dsn = %q\nredis_addr = %q\nredis_prefix = %q\n",
		control.DSN, daemon.Addr(), plan, pod.DSN, testredis.Addr(t), r.Prefix))
	return topo, control, daemon
}

// From the command line, with the modes from a flagd daemon: `rollout
// kill` and `release` write reservoir's own kill switch, which a replica
// (a flag source on the daemon, beside the control database) obeys while
// the daemon keeps answering mysql; `advance` is refused until the daemon
// serves the stage (here shadow, while it serves mysql); `status` says where the modes come from.
func TestRolloutKillBesideFlagd(t *testing.T) {
	topo, control, daemon := externalTopology(t, authority.ModeMySQL)
	ctx := context.Background()
	replica, err := flagsource.New(ctx, flagsource.Config{FlagdAddr: daemon.Addr(), Kills: control.DB, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.Close() })
	want := func(what string, kill authority.Kill) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			d, err := replica.Decide(ctx, "pod-a", 1)
			if err == nil && d.Mode == authority.ModeMySQL && d.Kill == kill {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the replica decides %+v, %v; want the daemon's mysql with kill switch %s", what, d, err, kill)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	want("before the kill", authority.KillOff)

	code, out, errOut := run(t, "rollout", "--topology", topo, "--actor", "ana", "kill", "--scope", "pod:pod-a", "--state", "redis_only", "--resynced", "--reason", "MySQL down")
	if code != 0 || !strings.Contains(out, "rollout_flags row 2") {
		t.Fatalf("kill: %d %q %q", code, out, errOut)
	}
	want("after the CLI's kill", authority.KillRedisOnly)

	code, out, errOut = run(t, "rollout", "--topology", topo, "status")
	if code != 0 || !strings.Contains(out, "modes: served by the flagd daemon at "+daemon.Addr()) {
		t.Errorf("status: %d %q %q; want it to say where the modes come from", code, out, errOut)
	}
	// The pod's sweeps report the epoch of the daemon's version and the
	// kill switch document's, as the replica decides: the status judges
	// the fences by that epoch, with the modes' version as the daemon
	// answers it. A report of the daemon's previous version, the kill
	// switch document's the same, is not done.
	d, err := replica.Decide(ctx, "pod-a", 1)
	if err != nil || d.Version>>flagdoc.KillVersionBits < 1 {
		t.Fatalf("the replica's decision %+v, %v: want an epoch with the daemon's version at least 1", d, err)
	}
	now := time.Now().UTC()
	sweep := func(version int64) string {
		t.Helper()
		saveHandoffs(t, topo, "pod-a", reservation.HandoffProgress{FlagsVersion: version, Shops: 3, Done: 3, Started: now.Add(-time.Second),
			Finished: now.Add(-time.Second + 20*time.Millisecond), Updated: now, Replica: "r1"})
		code, out, errOut := run(t, "rollout", "--topology", topo, "status")
		if code != 0 {
			t.Fatalf("status: %d %q %q", code, out, errOut)
		}
		return out
	}
	previous := d.Version - 1<<flagdoc.KillVersionBits
	if out, line := sweep(previous), fmt.Sprintf("    fences: no report for flags version %d yet (last: version %d, handed off 3/3 shops in 20ms)\n", d.Version, previous); !strings.Contains(out, line) {
		t.Errorf("status with the sweep of the daemon's previous version:\n%s\nwant %q", out, line)
	}
	if out, line := sweep(d.Version), fmt.Sprintf("    fences: handed off 3/3 shops in 20ms (flags version %d)\n", d.Version); !strings.Contains(out, line) {
		t.Errorf("status with the pod's sweep done:\n%s\nwant %q", out, line)
	}
	code, out, errOut = run(t, "rollout", "--topology", topo, "status", "--json")
	if code != 0 || !strings.Contains(out, `"state": "done"`) || !strings.Contains(out, fmt.Sprintf(`"flags_version": %d,`, d.Version)) {
		t.Errorf("status --json with the pod's sweep done: %d %q %q; want the handoffs done, judged against %d", code, out, errOut, d.Version)
	}

	code, out, errOut = run(t, "rollout", "--topology", topo, "--actor", "ana", "release", "--scope", "pod:pod-a", "--reason", "MySQL back")
	if code != 0 {
		t.Fatalf("release: %d %q %q", code, out, errOut)
	}
	want("after the CLI's release: the daemon's mode again", authority.KillOff)

	code, out, errOut = run(t, "rollout", "--topology", topo, "--actor", "ana", "advance")
	if code == 0 || !strings.Contains(out+errOut, "pod-a answers mysql") || !strings.Contains(out+errOut, "change the modes where they are served") {
		t.Errorf("advance with the modes at the daemon: %d %q %q; want a refusal naming what the daemon answers", code, out, errOut)
	}
}
