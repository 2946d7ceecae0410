package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/seed31b0e981/reservoir/internal/wire"
)

// decodeOne decodes out, which must be exactly one JSON document of
// into's type (no key it does not know), into into.
func decodeOne(t *testing.T, what, out string, into any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s: stdout is not one %T: %v\n%s", what, into, err, out)
	}
	if err := dec.Decode(new(json.RawMessage)); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: stdout holds more than one JSON document (%v):\n%s", what, err, out)
	}
}

// `reservoir version` says which build this is, in words and as
// wire.Version; it needs no server.
func TestVersion(t *testing.T) {
	code, out, errOut := run(t, "version")
	if code != 0 || !strings.HasPrefix(out, "version  "+Version+"\ncommit   ") || !strings.Contains(out, runtime.Version()) || errOut != "" {
		t.Fatalf("version: %d %q %q", code, out, errOut)
	}
	code, out, errOut = run(t, "version", "--json")
	var v wire.Version
	decodeOne(t, "version --json", out, &v)
	if code != 0 || errOut != "" || v.Version != Version || v.GoVersion != runtime.Version() ||
		v.Platform != runtime.GOOS+"/"+runtime.GOARCH || v.Module != "github.com/seed31b0e981/reservoir" {
		t.Fatalf("version --json: %d %+v %q", code, v, errOut)
	}
	// Set with -ldflags -X, as the Dockerfile does.
	defer func(v, r string) { Version, Revision = v, r }(Version, Revision)
	Version, Revision = "v1.2.3", "0123abc"
	if _, out, _ := run(t, "version", "--json"); !strings.Contains(out, `"version": "v1.2.3"`) {
		t.Errorf("version --json with Version set: %s", out)
	}
	if code, _, errOut := run(t, "version", "extra"); code != 2 || !strings.Contains(errOut, `unexpected argument "extra"`) {
		t.Errorf("version extra: %d %q", code, errOut)
	}
	if code, out, _ := run(t, "help"); code != 0 || !strings.Contains(out, "\n  version ") {
		t.Errorf("help does not list version: %q", out)
	}
}

// Every rollout action takes --json: stdout is then one document of its
// wire type (the human lines go to stderr), and the exit status is the
// text output's. A refusal once the action runs is a wire.RolloutRefusal;
// bad usage in the arguments prints nothing on stdout.
func TestRolloutActionsJSON(t *testing.T) {
	topo := operatorTopology(t)
	rollout := func(args ...string) (int, string, string) {
		return run(t, append([]string{"rollout", "--topology", topo}, args...)...)
	}

	code, out, errOut := rollout("init", "--json")
	var in wire.FlagsInit
	decodeOne(t, "init --json", out, &in)
	if code != 0 || in.Written || in.FlagsVersion != 1 || !strings.Contains(in.Store, "flags file") || !strings.Contains(errOut, "nothing written") {
		t.Fatalf("init --json: %d %+v %q", code, in, errOut)
	}

	code, out, errOut = rollout("order-pods", "--json")
	var op wire.OrderPods
	decodeOne(t, "order-pods --json", out, &op)
	if code != 0 || len(op.Pods) != 1 || op.Pods[0].Pod != "pod-a" || op.Pods[0].ByMode == nil || op.SinceNS != 24*3600e9 || op.Since.IsZero() {
		t.Fatalf("order-pods --json: %d %+v %q", code, op, errOut)
	}

	code, out, errOut = rollout("advance", "--actor", "ana", "--dry-run", "--json")
	var ch wire.RolloutChange
	decodeOne(t, "advance --dry-run --json", out, &ch)
	if code != 0 || !ch.DryRun || ch.Action != "advance" || ch.State != "shadow" || ch.Scope != "pod-a" || ch.Stage == nil ||
		ch.Stage.Name != "shadow pod-a" || ch.Stage.State != "next" || ch.FlagsVersionBefore != 1 || ch.FlagsVersionAfter != 2 ||
		!strings.Contains(ch.Diff, `+         {"$ref": "pod:pod-a"}, "shadow",`) || ch.Obeyed != nil || len(ch.Warnings) != 0 {
		t.Fatalf("advance --dry-run --json: %d %+v %q", code, ch, errOut)
	}

	code, out, errOut = rollout("advance", "--actor", "ana", "--json")
	ch = wire.RolloutChange{}
	decodeOne(t, "advance --json", out, &ch)
	if code != 0 || ch.DryRun || ch.Stage == nil || ch.Stage.State != "current" || ch.Stage.Index != 0 || ch.FlagsVersionAfter != 2 ||
		ch.Diff != "" || ch.Obeyed == nil || ch.Obeyed.Version != 2 || ch.Actor != "ana" || !strings.Contains(errOut, `applied stage "shadow pod-a"`) {
		t.Fatalf("advance --json: %d %+v %q", code, ch, errOut)
	}

	// Refused by its gates: exit 1 as without --json, the gates on stdout.
	code, out, errOut = rollout("advance", "--actor", "ana", "--json")
	var ref wire.RolloutRefusal
	decodeOne(t, "refused advance --json", out, &ref)
	if code != 1 || !ref.Refused || ref.ExitCode != 1 || ref.Action != "advance" || ref.Stage != "shadow pod-a" || len(ref.Gates) == 0 ||
		!strings.Contains(ref.Error, "refused: the gates") || !strings.Contains(errOut, "min_observations") {
		t.Fatalf("refused advance --json: %d %+v %q", code, ref, errOut)
	}

	// Bad usage in the arguments: exit 2, nothing on stdout.
	if code, out, errOut = rollout("kill", "--actor", "ana", "--scope", "pod:pod-a", "--json"); code != 2 || out != "" || !strings.Contains(errOut, "--reason is required") {
		t.Fatalf("kill --json without a reason: %d %q %q", code, out, errOut)
	}
	// Bad usage the action finds once it runs: exit 2, and the refusal.
	code, out, errOut = rollout("kill", "--actor", "ana", "--scope", "pod:nope", "--reason", "drill", "--json")
	ref = wire.RolloutRefusal{}
	decodeOne(t, "kill --scope pod:nope --json", out, &ref)
	if code != 2 || ref.ExitCode != 2 || ref.Action != "kill" || !strings.Contains(ref.Error, `no pod "nope"`) || len(ref.Gates) != 0 {
		t.Fatalf("kill --scope pod:nope --json: %d %+v %q", code, ref, errOut)
	}

	code, out, errOut = rollout("kill", "--actor", "ana", "--scope", "pod:pod-a", "--reason", "drill", "--dry-run", "--json")
	ch = wire.RolloutChange{}
	decodeOne(t, "kill --dry-run --json", out, &ch)
	if code != 0 || !ch.DryRun || ch.Action != "kill" || ch.Scope != "pod:pod-a" || ch.State != "redis" || ch.Stage != nil ||
		ch.FlagsVersionAfter != 3 || !strings.Contains(ch.Diff, "drill") || ch.RelayLag != "" {
		t.Fatalf("kill --dry-run --json: %d %+v %q", code, ch, errOut)
	}

	code, out, errOut = rollout("kill", "--actor", "ana", "--scope", "pod:pod-a", "--reason", "drill", "--state", "redis_only", "--json")
	ch = wire.RolloutChange{}
	decodeOne(t, "kill --json", out, &ch)
	if code != 0 || ch.DryRun || ch.State != "redis_only" || ch.Reason != "drill" || ch.FlagsVersionBefore != 2 || ch.FlagsVersionAfter != 3 ||
		ch.RelayLag != "pod-a 0 change(s), oldest 0s" || ch.Obeyed == nil || len(ch.Warnings) != 0 ||
		!strings.Contains(errOut, "kill pod:pod-a: written to the") || !strings.Contains(errOut, "relay lag at the switch") {
		t.Fatalf("kill --json: %d %+v %q", code, ch, errOut)
	}

	code, out, errOut = rollout("release", "--actor", "ana", "--scope", "pod:pod-a", "--reason", "drill over", "--json")
	ch = wire.RolloutChange{}
	decodeOne(t, "release --json", out, &ch)
	if code != 0 || ch.Action != "release" || ch.State != "off" || ch.FlagsVersionAfter != 4 || ch.Obeyed == nil || ch.Warnings == nil {
		t.Fatalf("release --json: %d %+v %q", code, ch, errOut)
	}

	// The text output is as it was: the same actions without --json print
	// no JSON.
	code, out, _ = rollout("kill", "--actor", "ana", "--scope", "pod:pod-a", "--reason", "again", "--dry-run")
	if code != 0 || bytes.HasPrefix([]byte(out), []byte("{")) || !strings.Contains(out, "--- ") {
		t.Fatalf("kill --dry-run: %d %q", code, out)
	}
}
