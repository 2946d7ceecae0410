package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// operatorTopology writes a one-pod topology (fresh databases, a fresh
// Redis prefix), an empty flags file and a two-stage plan.
func operatorTopology(t *testing.T) string {
	t.Helper()
	pod, control, r := testdb.New(t), testdb.New(t), testredis.New(t)
	dir := t.TempDir()
	flags := filepath.Join(dir, "flags.json")
	if err := (flagdoc.FlagsFile{Path: flags}).Write(flagdoc.NewFlags()); err != nil {
		t.Fatal(err)
	}
	plan := filepath.Join(dir, "plan.toml")
	write(t, plan, `pods = ["pod-a"]
[[stages]]
name = "shadow pod-a"
mode = "shadow"
pods = ["pod-a"]
[[stages]]
name = "mysql pod-a"
mode = "mysql"
pods = ["pod-a"]
`)
	topo := filepath.Join(dir, "topology.toml")
	write(t, topo, fmt.Sprintf(`control_dsn = %q
flags_file = %q
plan_file = %q
[[pods]]
name = "pod-a"
mysql_dsn = %q
redis_addr = %q
redis_prefix = %q
`, control.DSN, flags, plan, pod.DSN, testredis.Addr(t), r.Prefix))
	return topo
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRolloutCommands(t *testing.T) {
	topo := operatorTopology(t)
	code, out, errOut := run(t, "rollout", "--topology", topo, "status")
	if code != 0 || !strings.Contains(out, "stage -1: (none applied yet)") || !strings.Contains(out, `next: "shadow pod-a"`) {
		t.Fatalf("status: %d %q %q", code, out, errOut)
	}
	code, out, _ = run(t, "rollout", "--topology", topo, "advance", "--dry-run")
	if code != 0 || !strings.Contains(out, `+         {"$ref": "pod:pod-a"}, "shadow",`) {
		t.Fatalf("advance --dry-run: %d %q", code, out)
	}
	code, out, errOut = run(t, "rollout", "--topology", topo, "--actor", "ana", "advance")
	if code != 0 || !strings.Contains(out, `applied stage "shadow pod-a"`) {
		t.Fatalf("advance: %d %q %q", code, out, errOut)
	}
	code, _, errOut = run(t, "rollout", "--topology", topo, "advance")
	if code != 1 || !strings.Contains(errOut, "\n  min_observations                 not yet   0 observations on [pod-a], need 1000") {
		t.Fatalf("advance without data: %d %q", code, errOut)
	}
	code, _, errOut = run(t, "rollout", "--topology", topo, "kill", "--scope", "pod:pod-a")
	if code != 2 || !strings.Contains(errOut, "--reason is required") {
		t.Fatalf("kill without reason: %d %q", code, errOut)
	}
	// The kill switch prints the relay lag at the switch (nothing MySQL
	// decided here), and the audit records it with the reason.
	code, out, errOut = run(t, "rollout", "--topology", topo, "--actor", "ana", "kill", "--scope", "pod:pod-a", "--reason", "drill")
	const lag = "relay lag at the switch: pod-a 0 change(s), oldest 0s"
	if code != 0 || !strings.Contains(out, lag+"\n") || !strings.Contains(out, "kill pod:pod-a") {
		t.Fatalf("kill: %d %q %q", code, out, errOut)
	}
	code, out, _ = run(t, "rollout", "--topology", topo, "status")
	if code != 0 || !strings.Contains(out, "KILL SWITCH redis (drill, by ana)") {
		t.Fatalf("status after kill: %d %q", code, out)
	}
	code, out, _ = run(t, "rollout", "--topology", topo, "history")
	if code != 0 || !strings.Contains(out, "ana") || !strings.Contains(out, "drill ["+lag+"]") || strings.Count(out, "\n") != 2 {
		t.Fatalf("history: %d %q", code, out)
	}
	code, out, errOut = run(t, "reconcile", "--topology", topo)
	if code != 0 || !strings.Contains(out, "pod pod-a: 0 shops, no drift") {
		t.Fatalf("reconcile: %d %q %q", code, out, errOut)
	}
	// The decider of each shop comes from its fences: there is no
	// --authority to give.
	if code, _, errOut = run(t, "reconcile", "--topology", topo, "--authority", "mysql"); code != 2 || !strings.Contains(errOut, "unknown flag --authority") {
		t.Fatalf("reconcile --authority: %d %q", code, errOut)
	}
	// Released without a repair first.
	code, out, errOut = run(t, "rollout", "--topology", topo, "--actor", "ana", "release", "--scope", "pod:pod-a", "--reason", "drill over")
	if code != 0 || !strings.Contains(out, "release pod:pod-a") {
		t.Fatalf("release: %d %q %q", code, out, errOut)
	}
	code, out, _ = run(t, "rollout", "--topology", topo, "status")
	if code != 0 || strings.Contains(out, "KILL SWITCH") {
		t.Fatalf("status after release: %d %q", code, out)
	}
}

// statusGates is the part of `rollout status --json` the gate tests read.
type statusGates struct {
	Since        time.Time `json:"since"`
	CountingFrom string    `json:"counting_from"`
	Gates        []struct {
		Gate    string  `json:"gate"`
		Verdict string  `json:"verdict"`
		Value   float64 `json:"value"`
		Why     string  `json:"why"`
	} `json:"gates"`
}

func rolloutStatusJSON(t *testing.T, topo string) statusGates {
	t.Helper()
	code, out, errOut := run(t, "rollout", "--topology", topo, "status", "--json")
	var st statusGates
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("status --json: %d %q %q", code, out, errOut)
	}
	return st
}

// Issue 27, observations 1 and 3. A release through the CLI starts the
// gates of the stage in force again, as DELETE /admin/killswitch does
// (both go through rollout.Controller.Release with the topology's plan):
// the CLI's release used to leave the stage's since where it was, so an
// advance a moment later judged the incident's window. A kill leaves it
// (docs/rollout.md). The status then says when the gates count from, and
// each gate's verdict in the words the JSON (the admin API's wire types)
// has: pass, not yet or breaking, never FAIL, and no negative duration.
func TestReleaseThroughTheCLIRestartsTheGates(t *testing.T) {
	topo := operatorTopology(t)
	if code, out, errOut := run(t, "rollout", "--topology", topo, "--actor", "ana", "advance"); code != 0 {
		t.Fatalf("advance: %d %q %q", code, out, errOut)
	}
	applied := rolloutStatusJSON(t, topo).Since
	if code, out, errOut := run(t, "rollout", "--topology", topo, "--actor", "ana", "kill", "--scope", "pod:pod-a", "--reason", "drill"); code != 0 {
		t.Fatalf("kill: %d %q %q", code, out, errOut)
	}
	if st := rolloutStatusJSON(t, topo); !st.Since.Equal(applied) {
		t.Errorf("the kill moved the stage's since from %s to %s; only a release starts the gates again", applied, st.Since)
	}
	time.Sleep(50 * time.Millisecond)
	released := time.Now().Truncate(time.Millisecond)
	if code, out, errOut := run(t, "rollout", "--topology", topo, "--actor", "ana", "release", "--scope", "pod:pod-a", "--reason", "drill over"); code != 0 || errOut != "" {
		t.Fatalf("release: %d %q %q", code, out, errOut)
	}
	st := rolloutStatusJSON(t, topo)
	if st.Since.Before(released) || st.Since.After(time.Now()) {
		t.Errorf("after the release at %s through the CLI the stage's since is %s (applied %s): the gates were not started again",
			released.UTC().Format(time.RFC3339Nano), st.Since.UTC().Format(time.RFC3339Nano), applied.UTC().Format(time.RFC3339Nano))
	}
	next := st.Since.UTC().Truncate(time.Minute)
	if !next.Equal(st.Since) {
		next = next.Add(time.Minute)
	}
	if want := next.Format(time.RFC3339); st.CountingFrom != want {
		t.Errorf("counting_from %q, want the start of the comparer's first whole window since %s, %s", st.CountingFrom, st.Since, want)
	}

	// The text says the same, in the same words.
	code, out, errOut := run(t, "rollout", "--topology", topo, "status")
	if code != 0 {
		t.Fatalf("status: %d %q %q", code, out, errOut)
	}
	if from, err := time.Parse(time.RFC3339, st.CountingFrom); err != nil || !strings.Contains(out, ", gates counting from "+from.UTC().Format(time.TimeOnly)+" UTC") {
		t.Errorf("status does not say the gates count from %s (%v):\n%s", st.CountingFrom, err, out)
	}
	if len(st.Gates) != 6 {
		t.Fatalf("%d gates in the JSON, want 6: %+v", len(st.Gates), st.Gates)
	}
	for _, g := range st.Gates {
		if !slices.Contains([]string{"pass", "not yet", "breaking"}, g.Verdict) {
			t.Errorf("gate %s: verdict %q in the JSON, want pass, not yet or breaking", g.Gate, g.Verdict)
		}
		line := fmt.Sprintf("  gate %-32s %-8s  %s\n", g.Gate, g.Verdict, g.Why)
		if g.Gate == "min_duration" {
			// "in force for 1s": the two commands ran a moment apart, so
			// the time in force may have ticked between them.
			line, _, _ = strings.Cut(line, " for ")
		}
		if !strings.Contains(out, line) {
			t.Errorf("status lacks the JSON's verdict of %s: %q in\n%s", g.Gate, line, out)
		}
		if g.Gate == "min_duration" && (g.Value < 0 || strings.Contains(g.Why, "for -")) {
			t.Errorf("min_duration after the release: %v, %q: a negative duration", g.Value, g.Why)
		}
	}
	if strings.Contains(out, "FAIL") {
		t.Errorf("status says FAIL, a word the API and the dashboard do not use:\n%s", out)
	}
	// Nothing counted yet, nothing wrong: every gate is "not yet", and a
	// refused advance counts them so.
	code, _, errOut = run(t, "rollout", "--topology", topo, "advance")
	if code != 1 || !strings.Contains(errOut, `refused: the gates of stage "shadow pod-a" do not all pass (6 not yet):`) ||
		!strings.Contains(errOut, "\n  min_duration                     not yet   in force for ") {
		t.Errorf("advance after the release: %d %q", code, errOut)
	}
}

// A plan file that does not load never stands between an operator and the
// kill switch: the kill and the release are written all the same, and the
// release says that the gates of the stage in force were not started
// again.
func TestKillSwitchWithABrokenPlan(t *testing.T) {
	topo := operatorTopology(t)
	if code, out, errOut := run(t, "rollout", "--topology", topo, "--actor", "ana", "advance"); code != 0 {
		t.Fatalf("advance: %d %q %q", code, out, errOut)
	}
	write(t, filepath.Join(filepath.Dir(topo), "plan.toml"), "pods = [\n")
	if code, out, errOut := run(t, "rollout", "--topology", topo, "--actor", "ana", "kill", "--scope", "pod:pod-a", "--reason", "drill"); code != 0 || errOut != "" {
		t.Fatalf("kill with a broken plan: %d %q %q", code, out, errOut)
	}
	code, out, errOut := run(t, "rollout", "--topology", topo, "--actor", "ana", "release", "--scope", "pod:pod-a", "--reason", "drill over")
	if code != 0 || !strings.Contains(out, "release pod:pod-a: written") ||
		!strings.HasPrefix(errOut, "warning: the plan did not load (plan ") || !strings.Contains(errOut, "the gates of the stage in force were not started again") {
		t.Errorf("release with a broken plan: %d %q %q", code, out, errOut)
	}
}
