package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	if code != 1 || !strings.Contains(errOut, "\n  min_observations                 0 observations on [pod-a], need 1000") {
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
