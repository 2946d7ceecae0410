package cli

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/seed31b0e981/reservoir/internal/suggest"
	"github.com/seed31b0e981/reservoir/internal/wire/wiretest"
)

// runAsCLI makes the test binary the reservoir binary when the
// subprocess tests ask for it: Run, as main calls it, library log capture
// included.
const runAsCLI = "RESERVOIR_CLI_TEST_RUN"

func TestMain(m *testing.M) {
	if os.Getenv(runAsCLI) == "1" {
		os.Exit(Run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// runProcess runs the CLI in a process of its own (the test binary as
// reservoir), so what libraries write on the process's stderr is seen.
func runProcess(t *testing.T, args ...string) (code int, out, errOut string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runAsCLI+"=1")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if x, ok := err.(*exec.ExitError); ok {
		return x.ExitCode(), o.String(), e.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, o.String(), e.String()
}

// The CLI's usage, one case a row (issue 16 c): each action owns its
// flags, flags go before or after the action, typos get a suggestion, a
// missing topology says what to set, usage errors exit 2 with the message
// printed once under one prefix, a gate refusal is a list, and every
// --json output is the wire's (no Go field name, no zero time). The rows run in order on one topology:
// some change its state (advance, kill).
func TestCLIUsage(t *testing.T) {
	topo := operatorTopology(t)
	t.Setenv("RESERVOIR_TOPOLOGY", "")
	t.Setenv("USER", "tester")
	cases := []struct {
		name           string
		args           []string
		code           int
		stdout, stderr []string // each must appear
		notOut, notErr []string // none may appear
		check          func(t *testing.T, out, errOut string)
	}{
		{name: "another action's flag is refused, naming the actions that take it",
			args: []string{"rollout", "--topology", topo, "status", "--reason", "x", "--limit", "3"}, code: 2,
			stderr: []string{"reservoir rollout status: --reason is not a flag of rollout status (it is one of advance, kill, release)\n" +
				"Run 'reservoir rollout status -h' for usage.\n"}},
		{name: "an action's help lists its own flags only, and the actor's default once",
			args: []string{"rollout", "kill", "-h"}, code: 0,
			stdout: []string{"usage: reservoir rollout kill --scope S --reason R", "--scope SCOPE", "--state STATE", "--reason REASON", "--topology FILE", "  -v\n",
				`who is acting, for the audit: a NAME (default $USER, else "cli")` + "\n"},
			notOut: []string{"--limit", "--from", "--interval", "--plan", "--override", `(default "`}},
		{name: "rollout's help lists the actions",
			args: []string{"help", "rollout"}, code: 0,
			stdout: []string{"usage: reservoir rollout ACTION [flags]", "order-pods", "Run 'reservoir rollout ACTION -h'"}},
		{name: "a typo in an action gets a suggestion",
			args: []string{"rollout", "--topology", topo, "stauts"}, code: 2,
			stderr: []string{`reservoir rollout: unknown action "stauts"; did you mean "status"?` + "\nRun 'reservoir rollout -h' for usage.\n"}},
		{name: "a typo in a command gets a suggestion",
			args: []string{"rolout", "status"}, code: 2,
			stderr: []string{`reservoir: unknown command "rolout"; did you mean "rollout"?`}},
		{name: "a typo in a flag gets a suggestion",
			args: []string{"rollout", "kill", "--topology", topo, "--scope", "pod:pod-a", "--reasn", "x"}, code: 2,
			stderr: []string{"reservoir rollout kill: unknown flag --reasn; did you mean --reason?"}},
		{name: "a flag of another action, misspelt, is named with its action",
			args: []string{"rollout", "status", "--topology", topo, "--limt", "3"}, code: 2,
			stderr: []string{"reservoir rollout status: unknown flag --limt (--limit is a flag of history)"}},
		{name: "a typo in a kill switch state gets a suggestion",
			args: []string{"rollout", "kill", "--topology", topo, "--scope", "pod:pod-a", "--reason", "x", "--state", "redis-only"}, code: 2,
			stderr: []string{`--state must be redis or redis_only, got "redis-only"; did you mean "redis_only"?`}},
		{name: "a missing topology says which flag or variable to set",
			args: []string{"rollout", "status"}, code: 2,
			stderr: []string{"reservoir rollout status: no topology: give --topology FILE or set RESERVOIR_TOPOLOGY"},
			notErr: []string{"open :", "no such file"}},
		{name: "a missing topology, reconcile",
			args: []string{"reconcile"}, code: 2,
			stderr: []string{"reservoir reconcile: no topology: give --topology FILE or set RESERVOIR_TOPOLOGY"}},
		{name: "no action",
			args: []string{"rollout", "--topology", topo}, code: 2,
			stderr: []string{"reservoir rollout: no action: give one of init, status, advance, kill, release, history, auto, order-pods"}},
		{name: "a required flag",
			args: []string{"rollout", "--topology", topo, "kill", "--scope", "pod:pod-a"}, code: 2,
			stderr: []string{"reservoir rollout kill: --reason is required"}},
		{name: "an argument too many",
			args: []string{"rollout", "--topology", topo, "status", "now"}, code: 2,
			stderr: []string{`reservoir rollout status: unexpected argument "now"`}},
		{name: "a flag without its value",
			args: []string{"rollout", "kill", "--topology", topo, "--reason", "x", "--scope"}, code: 2,
			stderr: []string{"reservoir rollout kill: flag --scope needs a value"}},
		{name: "a value that does not parse",
			args: []string{"rollout", "--topology", topo, "history", "--limit", "many"}, code: 2,
			stderr: []string{`reservoir rollout history: invalid value "many" for flag --limit`}},
		{name: "a pod the topology does not name",
			args: []string{"rollout", "--topology", topo, "kill", "--scope", "pod:pod-z", "--reason", "typo"}, code: 2,
			stderr: []string{`reservoir rollout kill: --scope: no pod "pod-z" in the topology (pods: pod-a)`}},
		{name: "a usage error of another command exits 2 with its message",
			args: []string{"migrate", "up", "--dsn", ""}, code: 2,
			stderr: []string{"reservoir migrate: no database: --dsn is empty; give --dsn DSN with --set pod|control|both, or --topology FILE\nRun 'reservoir migrate -h' for usage.\n"}},
		{name: "flags before the action",
			args: []string{"rollout", "--topology", topo, "--actor", "ana", "advance"}, code: 0,
			stdout: []string{`applied stage "shadow pod-a"`}},
		{name: "a gate refusal is a list, one gate a line",
			args: []string{"rollout", "--topology", topo, "advance"}, code: 1,
			stderr: []string{`reservoir rollout advance: refused: the gates of stage "shadow pod-a" do not all pass (6 not yet):` + "\n",
				"\n  min_observations                 not yet   0 observations on [pod-a], need 1000", "\n  max_rate:shadow_missing          not yet   0 of 0",
				"advances anyway (audited)\n"},
			check: func(t *testing.T, _, errOut string) {
				for l := range strings.Lines(errOut) {
					if len(l) > 130 {
						t.Errorf("line of %d characters: %q", len(l), l)
					}
				}
			}},
		{name: "the package's own prefix is not repeated",
			args: []string{"rollout", "advance", "--topology", topo, "--plan", "/nonexistent/plan.toml"}, code: 1,
			stderr: []string{"reservoir rollout advance: plan: open /nonexistent/plan.toml: no such file or directory\n"},
			notErr: []string{"rollout: "}},
		{name: "flags after the action",
			args: []string{"rollout", "kill", "--topology", topo, "--scope", "pod:pod-a", "--reason", "drill", "--actor", "ana"}, code: 0,
			stdout: []string{"kill pod:pod-a: written to the flags file"}},
		{name: "status --json is the wire's",
			args: []string{"rollout", "status", "--json", "--topology", topo}, code: 0,
			stdout: []string{`"min_observations": 1000`, `"min_duration_ns": 600000000000`, `"state": "redis"`, `"actor": "ana"`, `"replicas": []`},
			check:  func(t *testing.T, out, _ string) { checkWire(t, out) }},
		{name: "history --json is the wire's",
			args: []string{"rollout", "history", "--json", "--topology", topo}, code: 0,
			stdout: []string{`"action": "kill"`, `"actor": "ana"`},
			check:  func(t *testing.T, out, _ string) { checkWire(t, out) }},
		{name: "reconcile --json is the wire's",
			args: []string{"reconcile", "--json", "--topology", topo}, code: 0,
			stdout: []string{`"pod": "pod-a"`},
			check:  func(t *testing.T, out, _ string) { checkWire(t, out) }},
		{name: "kill --dry-run --json is the wire's",
			args: []string{"rollout", "kill", "--dry-run", "--json", "--topology", topo, "--scope", "global", "--reason", "drill"}, code: 0,
			stdout: []string{`"action": "kill"`, `"dry_run": true`, `"diff": "--- `, `"warnings": []`},
			check:  func(t *testing.T, out, _ string) { checkWire(t, out) }},
		{name: "order-pods --json is the wire's",
			args: []string{"rollout", "order-pods", "--json", "--topology", topo}, code: 0,
			stdout: []string{`"pod": "pod-a"`, `"since_ns": 86400000000000`},
			check:  func(t *testing.T, out, _ string) { checkWire(t, out) }},
		{name: "version --json is the wire's",
			args: []string{"version", "--json"}, code: 0,
			stdout: []string{`"version": "devel"`, `"go_version": "go`},
			check:  func(t *testing.T, out, _ string) { checkWire(t, out) }},
		{name: "release, flags on both sides",
			args: []string{"rollout", "--actor", "ana", "release", "--topology", topo, "--scope", "pod:pod-a", "--reason", "drill over"}, code: 0,
			stdout: []string{"release pod:pod-a: written"}},
	}
	repeated := regexp.MustCompile(`\b(reservoir|rollout|kill|advance|status|history|release|reconcile|migrate): (\w+ )?\b(rollout|kill|advance|status|history|release|reconcile|migrate):`)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := run(t, c.args...)
			if code != c.code {
				t.Errorf("exit status %d, want %d\nstdout %q\nstderr %q", code, c.code, out, errOut)
			}
			for _, s := range c.stdout {
				if !strings.Contains(out, s) {
					t.Errorf("stdout lacks %q:\n%s", s, out)
				}
			}
			for _, s := range c.stderr {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr lacks %q:\n%s", s, errOut)
				}
			}
			for _, s := range c.notOut {
				if strings.Contains(out, s) {
					t.Errorf("stdout has %q:\n%s", s, out)
				}
			}
			for _, s := range c.notErr {
				if strings.Contains(errOut, s) {
					t.Errorf("stderr has %q:\n%s", s, errOut)
				}
			}
			switch {
			case code == 2 && !strings.HasSuffix(errOut, " -h' for usage.\n"):
				t.Errorf("a usage error must say where the help is: %q", errOut)
			case code == 2 && strings.Count(errOut, "\n") != 2:
				t.Errorf("a usage error is its message and where the help is, nothing more: %q", errOut)
			case code != 0 && !strings.HasPrefix(errOut, "reservoir"):
				t.Errorf("an error starts with the command: %q", errOut)
			}
			if m := repeated.FindString(errOut); m != "" {
				t.Errorf("a repeated prefix %q in %q", m, errOut)
			}
			if c.check != nil {
				c.check(t, out, errOut)
			}
		})
	}
}

// Without -v a command prints nothing of the libraries' own logs (flagd
// wrote INFO JSON lines on the process's stderr; the flag source logged
// through the cell's logger); with -v both appear.
func TestLibraryLogsOnlyWithV(t *testing.T) {
	topo := operatorTopology(t)
	code, out, errOut := runProcess(t, "rollout", "--topology", topo, "status")
	if code != 0 || !strings.Contains(out, "stage -1") || errOut != "" {
		t.Fatalf("status without -v: exit %d, stdout %q, stderr %q; want 0 and an empty stderr", code, out, errOut)
	}
	code, out, errOut = runProcess(t, "rollout", "status", "--topology", topo, "-v")
	if code != 0 || !strings.Contains(out, "stage -1") || !strings.Contains(errOut, `"msg":"initializing InProcess service"`) ||
		!strings.Contains(errOut, "flags file loaded") {
		t.Fatalf("status -v: exit %d, stdout %q, stderr %q; want flagd's lines and the flag source's", code, out, errOut)
	}
	// And the messages the CLI prints itself are not held back.
	code, _, errOut = runProcess(t, "rollout", "stauts")
	if code != 2 || !strings.Contains(errOut, `did you mean "status"?`) {
		t.Fatalf("a usage error from a process: exit %d, stderr %q", code, errOut)
	}
}

// checkWire fails t for what in the JSON document doc is not the wire's:
// a Go field name as a key, a zero time (wiretest.Faults).
func checkWire(t *testing.T, doc string) {
	t.Helper()
	if bad := wiretest.Faults([]byte(doc)); len(bad) > 0 {
		t.Errorf("not the wire's: %v", bad)
	}
}

func TestTrimContext(t *testing.T) {
	for _, c := range []struct{ prefix, msg, want string }{
		{"reservoir rollout kill", "rollout: kill: state must be redis", "state must be redis"},
		{"reservoir rollout advance", "rollout: plan: open x", "plan: open x"},
		{"reservoir rollout status", "topology: open x", "topology: open x"},
		{"reservoir reconcile", "reconcile: pod a: boom", "pod a: boom"},
	} {
		if got := trimContext(c.msg, c.prefix); got != c.want {
			t.Errorf("trimContext(%q, %q) = %q, want %q", c.msg, c.prefix, got, c.want)
		}
	}
}

func TestClosest(t *testing.T) {
	actions := actionNames()
	for _, c := range []struct{ name, want string }{
		{"stauts", "status"}, {"stat", "status"}, {"adv", "advance"}, {"kil", "kill"}, {"relase", "release"},
		{"histroy", "history"}, {"order", "order-pods"}, {"deploy", ""}, {"x", ""},
	} {
		if got := suggest.Closest(c.name, actions); got != c.want {
			t.Errorf("suggest.Closest(%q) = %q, want %q", c.name, got, c.want)
		}
	}
}
