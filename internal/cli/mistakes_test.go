package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The mistakes an operator makes each get a way out (issue 27, 6): the
// message names what is wrong in the operator's words, where it is, and
// what to do; a scope no pod serves is refused unless --force; an empty
// listing says it is empty. The rows run in order on one topology (whose
// one pod lists no shop; default_rule routes every shop to it).
func TestOperatorMistakes(t *testing.T) {
	topo := operatorTopology(t)
	t.Setenv("RESERVOIR_TOPOLOGY", "")
	t.Setenv("USER", "tester")
	dir := filepath.Dir(topo)
	badPlan := filepath.Join(dir, "plan-c.toml")
	write(t, badPlan, "pods = [\"pod-c\", \"pod-a\"]\n[[stages]]\nname = \"shadow pod-c\"\nmode = \"shadow\"\npods = [\"pod-c\"]\n")
	cases := []struct {
		name   string
		args   []string
		env    map[string]string
		code   int
		stdout string
		stderr string
		not    []string // on stdout or stderr
	}{
		{name: "an empty history says it is empty",
			args: []string{"rollout", "history", "--topology", topo}, code: 0,
			stdout: "no changes recorded yet"},
		{name: "an empty history in JSON is []",
			args: []string{"rollout", "history", "--topology", topo, "--json"}, code: 0,
			stdout: "[]\n"},
		{name: "a kill switch on a shop no pod lists is refused, naming the shop and the pods' shops",
			args: []string{"rollout", "kill", "--topology", topo, "--scope", "shop:9999", "--reason", "typo"}, code: 2,
			stderr: `reservoir rollout kill: --scope shop:9999: no pod of the topology lists shop 9999 (the pods' shops: pod-a: none); ` +
				`default_rule "modulo" would route it to pod pod-a. Give --force if the shop is about to be added, or is served by the default rule`,
			not: []string{"written"}},
		{name: "and a dry run of it too",
			args: []string{"rollout", "kill", "--topology", topo, "--scope", "shop:9999", "--reason", "typo", "--dry-run"}, code: 2,
			stderr: "no pod of the topology lists shop 9999"},
		{name: "the refused kill wrote nothing",
			args: []string{"rollout", "history", "--topology", topo}, code: 0,
			stdout: "no changes recorded yet"},
		{name: "--force writes it",
			args: []string{"rollout", "kill", "--topology", topo, "--scope", "shop:9999", "--reason", "shop 9999 moves here tonight", "--force"}, code: 0,
			stdout: "kill shop:9999: written"},
		{name: "its release needs no --force: the flags name the shop",
			args: []string{"rollout", "release", "--topology", topo, "--scope", "shop:9999", "--reason", "over"}, code: 0,
			stdout: "release shop:9999: written"},
		{name: "a release of a shop nothing names is refused",
			args: []string{"rollout", "release", "--topology", topo, "--scope", "shop:8888", "--reason", "typo"}, code: 2,
			stderr: "no pod of the topology lists shop 8888"},
		{name: "the history lists what was written",
			args: []string{"rollout", "history", "--topology", topo}, code: 0,
			stdout: "shop:9999", not: []string{"no changes recorded yet", "shop:8888"}},
		{name: "a pod reconcile does not know is bad usage, with a suggestion",
			args: []string{"reconcile", "--topology", topo, "--pod", "pod-b"}, code: 2,
			stderr: `reservoir reconcile: --pod: no pod "pod-b" in the topology (pods: pod-a); did you mean "pod-a"?`},
		{name: "a plan naming a pod the topology does not define names both files, in the operator's words",
			args: []string{"rollout", "status", "--topology", topo, "--plan", badPlan}, code: 1,
			stderr: `reservoir rollout status: plan ` + badPlan + ` names pod "pod-c", which topology ` + topo + ` does not define (its pods: pod-a): ` +
				"add the pod to the topology, or remove it from the plan's pods and stages",
			not: []string{"ControllerConfig", "Config."}},
		{name: "a short admin token says where it came from, in the operator's words",
			args: []string{"serve", "--topology", topo, "--insecure-no-auth", "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"},
			env:  map[string]string{adminTokenEnv: "0123456789"}, code: 2,
			stderr: "reservoir serve: the admin token in $RESERVOIR_ADMIN_TOKEN (the token itself) is 10 bytes: it must be at least 16",
			not:    []string{"Config.", "AdminToken"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			code, out, errOut := run(t, c.args...)
			if code != c.code || !strings.Contains(out, c.stdout) || !strings.Contains(errOut, c.stderr) {
				t.Fatalf("exit %d, want %d, stdout %q and stderr %q\nstdout %q\nstderr %q", code, c.code, c.stdout, c.stderr, out, errOut)
			}
			for _, s := range c.not {
				if strings.Contains(out+errOut, s) {
					t.Errorf("the output has %q:\nstdout %q\nstderr %q", s, out, errOut)
				}
			}
		})
	}
}

// A typo in the topology is named once, where it is: the file, the line,
// the pod (index and name), and the key it most likely meant. Before:
// "unknown key(s): pods.redis_adr, pods.redis_adr".
func TestTopologyTypoSaysWhere(t *testing.T) {
	t.Setenv("RESERVOIR_TOPOLOGY", "")
	topo := filepath.Join(t.TempDir(), "topology.toml")
	text := `control_dsn = "root@tcp(127.0.0.1:1)/control"
flags_file = "flags.json"

[[pods]]
name = "pod-a"
mysql_dsn = "root@tcp(127.0.0.1:1)/a"
redis_adr = "127.0.0.1:1"

[[pods]]
name = "pod-b"
mysql_dsn = "root@tcp(127.0.0.1:1)/b"
redis_adr = "127.0.0.1:2"
`
	if err := os.WriteFile(topo, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"rollout", "status", "--topology", topo}, {"serve", "--topology", topo, "--insecure-no-auth"}, {"migrate", "--topology", topo, "status"}} {
		code, _, errOut := run(t, args...)
		want := "topology " + topo + `:7: unknown key pods[0].redis_adr (pod "pod-a"); did you mean redis_addr?` + "\n" +
			"topology " + topo + `:12: unknown key pods[1].redis_adr (pod "pod-b"); did you mean redis_addr?` + "\n"
		if code != 1 || !strings.HasSuffix(errOut, want) || strings.Count(errOut, "redis_adr") != 2 {
			t.Errorf("%v: exit %d, stderr %q; want 1 and it to end %q", args, code, errOut, want)
		}
	}
}
