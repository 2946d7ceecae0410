package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// rollout init writes the first flags into the control database once: a
// flags file's, at its version (so stores that saw that version do not
// take the database's flags for stale ones), and refuses nothing the
// second time, changing nothing. A kill switch for a pod the topology does
// not name exits 2, naming the pods.
func TestRolloutInitAndScopes(t *testing.T) {
	dir := t.TempDir()
	control, pod, rd := testdb.New(t), testdb.New(t), testredis.New(t)
	topo := filepath.Join(dir, "topology.toml")
	if err := os.WriteFile(topo, []byte(fmt.Sprintf("control_dsn = %q\nflags_source = \"database\"\n[[pods]]\nname = \"pod-a\"\nmysql_dsn = %q\nredis_addr = %q\nredis_prefix = %q\n",
		control.DSN, pod.DSN, testredis.Addr(t), rd.Prefix)), 0o600); err != nil {
		t.Fatal(err)
	}
	file := flagdoc.FlagsFile{Path: filepath.Join(dir, "flags.json")}
	f := flagdoc.NewFlags()
	if err := f.SetMode(flagdoc.PodScope("pod-a"), authority.ModeShadow); err != nil {
		t.Fatal(err)
	}
	f.Version = 7
	if err := file.Write(f); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "rollout", "--topology", topo, "init", "--from", file.Path)
	if code != 0 || !strings.Contains(out, "at version 7") {
		t.Fatalf("init --from: %d %q %q", code, out, errOut)
	}
	got, err := (flagdoc.FlagsTable{DB: control.DB}).Read()
	if err != nil || got.Version != 7 || got.Resolve("pod-a", 1).Mode != authority.ModeShadow {
		t.Fatalf("the database's flags after init --from: %v %+v", err, got)
	}
	if code, out, _ := run(t, "rollout", "--topology", topo, "init"); code != 0 || !strings.Contains(out, "already holds flags (version 7)") {
		t.Fatalf("init again: %d %q", code, out)
	}
	code, _, errOut = run(t, "rollout", "--topology", topo, "kill", "--scope", "pod:pod-z", "--reason", "typo")
	if code != 2 || !strings.Contains(errOut, `no pod "pod-z"`) || !strings.Contains(errOut, "pod-a") {
		t.Fatalf("kill pod-z: exit %d, stderr %q; want 2 naming the pods", code, errOut)
	}
	code, out, errOut = run(t, "rollout", "--topology", topo, "kill", "--scope", "pod:pod-a", "--reason", "drill")
	if code != 0 || !strings.Contains(out, "no live replica reports") || !strings.Contains(out, "control database") {
		t.Fatalf("kill pod-a without a plan: %d %q %q", code, out, errOut)
	}
	if got, _ := (flagdoc.FlagsTable{DB: control.DB}).Read(); got.Version != 8 || !got.KillAt(flagdoc.PodScope("pod-a")).Engaged() {
		t.Fatalf("after the kill: %+v", got)
	}
}
