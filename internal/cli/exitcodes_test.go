package cli

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The exit status of every command is what docs/cli.md says ("Exit
// status, errors and logs"): 0 done or help asked for; 2 bad usage (an
// unknown command, action or flag, a flag of another action, a missing
// required flag, a value that does not parse or is not one of the allowed
// ones, an extra argument); 1 a failure the world decides (a missing
// file, a database that cannot be reached). A usage error says where the
// help is; a failure does not. None of these rows needs a server: each
// database or Redis named is on a port nothing listens on. Before, a bad
// value of clients --roles or --name, reconcile --shop and --resume,
// bench's ranges, demo's values and demo clean --name exited 1, and
// bench --plan took an out-of-range value.
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"RESERVOIR_TOPOLOGY", "RESERVOIR_DSN", "RESERVOIR_MYSQL_DSN", "RESERVOIR_REDIS_ADDR",
		"RESERVOIR_CLIENTS", "RESERVOIR_CLIENTS_FILE", "RESERVOIR_OPERATORS", "RESERVOIR_OPERATORS_FILE", adminTokenEnv} {
		t.Setenv(v, "")
	}
	const dead = "root@tcp(127.0.0.1:1)/reservoir?timeout=1s"
	missing := filepath.Join(dir, "missing.toml")
	badOperators := filepath.Join(dir, "operators.toml")
	if err := os.WriteFile(badOperators, []byte("[[operators]]\nname = \"alice\"\ntoken_sha256 = \""+strings.Repeat("a", 64)+"\"\nrole = \"root\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const sharedToken = "shared-admin-token-0123456789"
	sameAsShared := fmt.Sprintf("[[operators]]\nname = \"alice\"\ntoken_sha256 = \"%x\"\nrole = \"admin\"\n", sha256.Sum256([]byte(sharedToken)))
	deadTopo := writeMigrateTopology(t, dead, [2]string{"pod-a", "root@tcp(127.0.0.1:2)/reservoir?timeout=1s"})
	cases := []struct {
		args []string
		env  map[string]string
		code int
		want string // on stderr (help: on stdout)
	}{
		// reservoir itself.
		{nil, nil, 2, "usage: reservoir COMMAND"},
		{[]string{"nope"}, nil, 2, `unknown command "nope"`},
		{[]string{"--topology", "x", "serve"}, nil, 2, "flag --topology before the command"},
		{[]string{"help"}, nil, 0, "usage: reservoir COMMAND"},

		// serve.
		{[]string{"serve", "-h"}, nil, 0, "--admin-token-file FILE"},
		{[]string{"serve"}, nil, 2, "no topology"},
		{[]string{"serve", "--topology", missing, "--adr", "x"}, nil, 2, "unknown flag --adr; did you mean --addr?"},
		{[]string{"serve", "--topology", missing, "now"}, nil, 2, `unexpected argument "now"`},
		{[]string{"serve", "--topology", missing, "--max-conns", "-5"}, nil, 2, "--max-conns must be -1"},
		{[]string{"serve", "--topology", missing, "--log-level", "loud"}, nil, 2, "--log-level must be"},
		{[]string{"serve", "--topology", missing, "--log-format", "xml"}, nil, 2, "--log-format must be json or text"},
		{[]string{"serve", "--topology", missing, "--shutdown-timeout", "soon"}, nil, 2, `invalid value "soon" for flag --shutdown-timeout`},
		{[]string{"serve", "--topology", missing, "--insecure-no-auth"}, map[string]string{adminTokenEnv: "short"}, 2,
			"the admin token in $RESERVOIR_ADMIN_TOKEN (the token itself) is 5 bytes: it must be at least 16"},
		{[]string{"serve", "--topology", missing, "--insecure-no-auth"}, nil, 1, "topology: open " + missing},
		{[]string{"serve", "--topology", missing, "--insecure-no-auth", "--admin-token-file", missing}, nil, 1, "--admin-token-file: open"},
		{[]string{"serve", "--topology", missing, "--insecure-no-auth", "--operators", missing}, nil, 1, "--operators: operators: open"},
		{[]string{"serve", "--topology", missing, "--insecure-no-auth", "--operators", badOperators}, nil, 1, `operators[0].role: unknown role "root"`},
		{[]string{"serve", "--topology", missing, "--insecure-no-auth"}, map[string]string{"RESERVOIR_OPERATORS": "[[operators]]\nname = \"a\"\n"}, 1,
			"$RESERVOIR_OPERATORS: operators: operators[0].token_sha256 must be 64 hex digits"},
		{[]string{"serve", "--topology", missing, "--insecure-no-auth"}, map[string]string{"RESERVOIR_OPERATORS": sameAsShared, adminTokenEnv: sharedToken}, 2,
			`the shared admin token is also operator "alice"'s token`},

		// migrate.
		{[]string{"migrate", "-h"}, nil, 0, "--set SET"},
		{[]string{"migrate"}, nil, 2, "no action: give up or status"},
		{[]string{"migrate", "sideways"}, nil, 2, `unknown action "sideways"`},
		{[]string{"migrate", "up"}, nil, 2, "no database"},
		{[]string{"migrate", "--dsn", dead, "up"}, nil, 2, "--set is required with --dsn"},
		{[]string{"migrate", "--dsn", dead, "--set", "pods", "up"}, nil, 2, `--set must be pod, control or both, got "pods"`},
		{[]string{"migrate", "--dsn", dead, "--set", "pod", "up", "now"}, nil, 2, `unexpected argument "now"`},
		{[]string{"migrate", "--topology", missing, "up"}, nil, 1, "topology: open " + missing},
		{[]string{"migrate", "--dsn", dead, "--set", "pod", "status"}, nil, 1, "reservoir migrate: cannot connect (check --dsn): "},
		{[]string{"migrate", "--topology", deadTopo, "status"}, nil, 1, "the control database: cannot connect (check the topology's control_dsn): "},

		// reconcile.
		{[]string{"reconcile", "-h"}, nil, 0, "--repair"},
		{[]string{"reconcile"}, nil, 2, "no topology"},
		{[]string{"reconcile", "--topology", missing, "--shop", "-1"}, nil, 2, "--shop must be a positive id, got -1"},
		{[]string{"reconcile", "--topology", missing, "--shop", "one"}, nil, 2, `invalid value "one" for flag --shop`},
		{[]string{"reconcile", "--topology", missing, "--resume"}, nil, 2, "--resume needs --checkpoint"},
		{[]string{"reconcile", "--topology", missing, "now"}, nil, 2, `unexpected argument "now"`},
		{[]string{"reconcile", "--topology", missing}, nil, 1, "topology: open " + missing},

		// rollout.
		{[]string{"rollout", "-h"}, nil, 0, "usage: reservoir rollout ACTION"},
		{[]string{"rollout", "kill", "-h"}, nil, 0, "--force"},
		{[]string{"rollout", "--topology", missing}, nil, 2, "no action"},
		{[]string{"rollout", "--topology", missing, "stauts"}, nil, 2, `did you mean "status"?`},
		{[]string{"rollout", "status"}, nil, 2, "no topology"},
		{[]string{"rollout", "status", "--topology", missing, "--reason", "x"}, nil, 2, "--reason is not a flag of rollout status"},
		{[]string{"rollout", "history", "--topology", missing, "--limit", "0"}, nil, 2, "--limit must be at least 1"},
		{[]string{"rollout", "history", "--topology", missing, "--limit", "many"}, nil, 2, `invalid value "many" for flag --limit`},
		{[]string{"rollout", "kill", "--topology", missing, "--reason", "x"}, nil, 2, "--scope is required"},
		{[]string{"rollout", "kill", "--topology", missing, "--scope", "pod:a"}, nil, 2, "--reason is required"},
		{[]string{"rollout", "kill", "--topology", missing, "--scope", "shop:x", "--reason", "r"}, nil, 2, "--scope: scope \"shop:x\""},
		{[]string{"rollout", "kill", "--topology", missing, "--scope", "pod:a", "--reason", "r", "--state", "off"}, nil, 2, "--state must be redis or redis_only"},
		{[]string{"rollout", "release", "--topology", missing, "--scope", "pod:a", "--reason", "r", "--state", "redis"}, nil, 2, "--state is not a flag of rollout release"},
		{[]string{"rollout", "advance", "--topology", missing, "--override"}, nil, 2, "--override needs --reason"},
		{[]string{"rollout", "auto", "--topology", missing, "--interval", "0s"}, nil, 2, "--interval must be positive"},
		{[]string{"rollout", "order-pods", "--topology", missing, "--since", "yesterday"}, nil, 2, `invalid value "yesterday" for flag --since`},
		{[]string{"rollout", "status", "--topology", missing, "now"}, nil, 2, `unexpected argument "now"`},
		{[]string{"rollout", "status", "--topology", missing}, nil, 1, "topology: open " + missing},

		// clients.
		{[]string{"clients", "-h"}, nil, 0, "--roles ROLES"},
		{[]string{"clients"}, nil, 2, "no action: give new"},
		{[]string{"clients", "old"}, nil, 2, `unknown action "old"`},
		{[]string{"clients", "new", "--name", "a"}, nil, 2, "--name and --roles are required"},
		{[]string{"clients", "new", "--name", "a", "--roles", "admin"}, nil, 2, `--roles must be checkout or inventory, got "admin"`},
		{[]string{"clients", "new", "--name", "a", "--roles", "checkout,inventroy"}, nil, 2, `got "inventroy"; did you mean "inventory"?`},
		{[]string{"clients", "new", "--name", "a b", "--roles", "checkout"}, nil, 2, `--name "a b" must be 1-64 letters`},
		{[]string{"clients", "new", "--name", "a", "--roles", "checkout", "--shops", "x"}, nil, 2, `--shops: "x" is not a positive shop id`},
		{[]string{"clients", "new", "--name", "a", "--roles", "checkout", "--append", filepath.Join(dir, "no", "clients.toml")}, nil, 1, "--append: open"},
		{[]string{"clients", "new", "--name", "a", "--roles", "checkout"}, nil, 0, "rsv_"},

		// bench.
		{[]string{"bench", "-h"}, nil, 0, "--scenarios LIST"},
		{[]string{"bench", "--flush", "3"}, nil, 2, "--flush must be 0, 1, 2 or keep"},
		{[]string{"bench", "--concurrency", "x"}, nil, 2, "--concurrency: "},
		{[]string{"bench", "--plan", "--buckets", "-1"}, nil, 2, "--buckets must be between 1 and 1024, got -1"},
		{[]string{"bench", "--plan", "--killflood-target", "all"}, nil, 2, `--killflood-target must be "first" or "both", got "all"`},
		{[]string{"bench", "--plan", "--killflood-admin", "other"}, nil, 2, `--killflood-admin must be "flooded" or "spare", got "other"`},
		{[]string{"bench", "--plan", "--killflood-admin", "spare", "--killflood-target", "both"}, nil, 2, `--killflood-admin "spare" needs --killflood-target "first"`},
		{[]string{"bench", "--plan", "--killflood-control-dsn", "root@tcp(127.0.0.1:3306)/rsv"}, nil, 2, `--killflood-control-dsn names database "rsv": give the server only`},
		{[]string{"bench"}, nil, 2, "--mysql-dsn and --redis-addr are required"},
		{[]string{"bench", "--plan", "--quick"}, nil, 0, ""},
		{[]string{"bench", "--render", missing}, nil, 1, "--render: open"},
		{[]string{"bench", "--rounds", "0"}, nil, 2, "--rounds must be at least 1, got 0"},
		{[]string{"bench", "--plan", "--rounds", "1001"}, nil, 2, "--rounds must be between 1 and 1000, got 1001"},
		{[]string{"bench", "--pairs", "redis"}, nil, 2, `--pairs: want VARIANT/BASELINE or overhead, got "redis"`},
		{[]string{"bench", "--plan", "--scenarios", "uniform", "--variants", "redis,pool", "--pairs", "facade-redis/redis"}, nil, 2,
			`--pairs: pair "facade-redis/redis": variant "facade-redis" is not among the variants run (--variants)`},
		{[]string{"bench", "--plan", "--scenarios", "uniform", "--pairs", "overhead", "--rounds", "2", "--concurrency", "16", "--latency", "1"}, nil, 0,
			"12  round 2/2  uniform redis c=16 +1ms"},

		// demo.
		{[]string{"demo", "-h"}, nil, 0, "--incident"},
		{[]string{"demo", "now"}, nil, 2, `unexpected argument "now"`},
		{[]string{"demo", "--rate", "-1"}, nil, 2, "rate must be between 1 and 5000"},
		{[]string{"demo", "--name", "Demo!"}, nil, 2, `name "Demo!" must match`},
		{[]string{"demo", "--log-level", "loud"}, nil, 2, "--log-level must be"},
		{[]string{"demo", "clean"}, nil, 2, "--name is required"},
		{[]string{"demo", "clean", "--name", "Demo!"}, nil, 2, `--name "Demo!" must match`},
		{[]string{"demo", "clean", "--name", "demo_x", "--mysql-dsn", "root@tcp(127.0.0.1:1)/", "--redis-addr", "127.0.0.1:1"}, nil, 1, "127.0.0.1:1"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			code, out, errOut := run(t, c.args...)
			where := errOut
			if c.code == 0 {
				where = out
			}
			if code != c.code || !strings.Contains(where, c.want) {
				t.Fatalf("exit %d, want %d and %q\nstdout %q\nstderr %q", code, c.code, c.want, trimOut(out), errOut)
			}
			help := strings.HasSuffix(errOut, " -h' for usage.\n")
			switch {
			case code == 2 && c.args == nil:
				// No command: the usage itself is the help.
			case code == 2 && !help:
				t.Errorf("a usage error does not say where the help is: %q", errOut)
			case code == 1 && help:
				t.Errorf("a failure says where the help is, as if it were bad usage: %q", errOut)
			case code != 0 && strings.Count(errOut, "reservoir") == 0:
				t.Errorf("an error does not name the command: %q", errOut)
			}
		})
	}
}
