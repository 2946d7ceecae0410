package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// Acceptance (d), from the command line: with the flags file made invalid
// the way docs/flags.md's hand edit goes wrong (copy, edit, rename), `rollout
// kill` still works: it says where the file is broken, writes a valid file
// built from the last valid flags plus the kill, and the history shows it.
func TestRolloutKillOverABrokenFlagsFile(t *testing.T) {
	topo := operatorTopology(t)
	flags := filepath.Join(filepath.Dir(topo), "flags.json")
	if code, out, errOut := run(t, "rollout", "--topology", topo, "--actor", "ana", "advance"); code != 0 {
		t.Fatalf("advance: %d %q %q", code, out, errOut)
	}
	good, err := os.ReadFile(flags)
	if err != nil {
		t.Fatal(err)
	}
	write(t, flags+".new", strings.Replace(string(good), `"defaultVariant": "off",`, `"defaultVariant": "off"`, 1))
	if err := os.Rename(flags+".new", flags); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "rollout", "--topology", topo, "--actor", "bob", "kill", "--scope", "pod:pod-a", "--reason", "flags broken, pod-a to Redis")
	if code != 0 || !strings.Contains(out, "holds an invalid flags document") || !strings.Contains(out, "(line ") ||
		!strings.Contains(out, "wrote a valid document at version 3 built from the last valid flags in the audit") {
		t.Fatalf("kill over the broken file: %d %q %q", code, out, errOut)
	}
	f, err := (flagdoc.FlagsFile{Path: flags}).Read()
	if err != nil || f.Version != 3 || !f.KillAt(flagdoc.PodScope("pod-a")).Engaged() || f.Pods["pod-a"].Mode != authority.ModeShadow {
		t.Fatalf("the file after the kill: %+v, %v", f, err)
	}
	if code, out, _ = run(t, "rollout", "--topology", topo, "history"); code != 0 || !strings.Contains(out, "kill_over_invalid") {
		t.Fatalf("history: %d %q", code, out)
	}
}
