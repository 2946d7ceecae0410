package topology

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `
control_dsn = "root@tcp(127.0.0.1:33306)/control"
flags_file = "flags.json"

[[pods]]
name = "pod-a"
mysql_dsn = "root@tcp(127.0.0.1:33306)/a"
redis_addr = "127.0.0.1:36379"
shops = [1, 2]

[[pods]]
name = "pod-b"
mysql_dsn = "root@tcp(127.0.0.1:33306)/b"
redis_cluster = ["127.0.0.1:37001"]
pool_cap = 50
`

func TestParseAndRoute(t *testing.T) {
	c, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	for shop, want := range map[int64]string{1: "pod-a", 2: "pod-a", 3: "pod-b", 4: "pod-a", 5: "pod-b"} {
		p, err := c.PodOf(shop)
		if err != nil || p.Name != want {
			t.Errorf("shop %d: %v %v, want %s", shop, p, err, want)
		}
	}
	if c.Pods[0].PoolCap != 1000 || c.Pods[1].PoolCap != 50 || c.Pods[0].RedisPrefix != "reservoir:" {
		t.Errorf("defaults: %+v", c.Pods)
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ edit, want string }{
		{strings.Replace(sample, `control_dsn`, `contrl_dsn`, 1), "unknown key contrl_dsn; did you mean control_dsn?"},
		{strings.Replace(sample, `name = "pod-b"`, `name = "pod-a"`, 1), `pods[1].name "pod-a" is used twice`},
		{strings.Replace(sample, `redis_cluster = ["127.0.0.1:37001"]`, ``, 1), "pods[1]: give exactly one of redis_addr and redis_cluster"},
		{strings.Replace(sample, `shops = [1, 2]`, `shops = [1, -2]`, 1), "pods[0].shops: -2"},
		{sample + "\ndefault_rule = \"pod:nope\"\n", `unknown key pods[1].default_rule (pod "pod-b"); default_rule is a top-level key`}, // after [[pods]] it is a pod key
		{strings.Replace(sample, "flags_file = \"flags.json\"", "flags_file = \"flags.json\"\ndefault_rule = \"pod:nope\"", 1), `default_rule "pod:nope"`},
		// One pod-name rule with the flags: a pod they cannot name could
		// never be switched.
		{strings.Replace(sample, `name = "pod-b"`, `name = "Pod-B"`, 1), `pods[1].name "Pod-B" must be 1-63 lower-case`},
		{strings.Replace(sample, "flags_file = \"flags.json\"", "flags_source = \"database\"\nflags_file = \"flags.json\"", 1), `flags_file is set but flags_source is "database"`},
		{strings.Replace(sample, "flags_file = \"flags.json\"", "flags_source = \"etcd\"", 1), `flags_source "etcd" must be`},
		{strings.Replace(sample, "flags_file = \"flags.json\"", "", 1), `flags_file is required`},
		{sample + "\n[[pods]]\nname = \"pod-c\"\nmysql_dsn = \"x\"\nredis_cluster = [\"127.0.0.1:37001\"]\n", `pods[2].redis_prefix "reservoir:": pod "pod-b" uses the same Redis`},
	} {
		_, err := Parse([]byte(tc.edit))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want error containing %q, got %v", tc.want, err)
		}
	}
}

// The example references its secrets; given them, it parses, and each
// lands where the example says.
func TestExampleFileParses(t *testing.T) {
	b, err := os.ReadFile("../../deploy/topology.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"RESERVOIR_CONTROL_DB_PASSWORD": "cpw", "RESERVOIR_REDIS_C_PASSWORD": "rpw", "RESERVOIR_POD_B_DB_PASSWORD": "bpw",
		"RESERVOIR_POD_A_DB_PASSWORD": "apw", "RESERVOIR_REDIS_A_PASSWORD": "rapw"}
	files := map[string]string{
		"/etc/reservoir/secrets/pod-c-mysql-dsn":  "reservoir:cdb@tcp(mysql-c:3306)/reservoir\n",
		"/etc/reservoir/secrets/redis-b-password": "bredis\n",
	}
	c, err := parse(b, lookup(env), readFrom(files))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pods) != 3 || c.Pods[1].PoolCap != 1000 || c.Pods[2].PoolCap != 5000 {
		t.Fatalf("example topology: %d pods", len(c.Pods))
	}
	c0, c1 := c.Pods[0], c.Pods[1]
	for got, want := range map[string]string{
		c.ControlDSN:            "reservoir:cpw@tcp(mysql-control:3306)/reservoir_control",
		c0.MySQLDSN:             "reservoir:cdb@tcp(mysql-c:3306)/reservoir",
		c0.RedisPassword:        "rpw",
		c1.MySQLDSN:             "reservoir:bpw@tcp(mysql-b:3306)/reservoir?tls=true",
		c1.RedisPassword:        "bredis",
		c.Pods[2].MySQLDSN:      "reservoir:apw@tcp(mysql-a:3306)/reservoir",
		c.Pods[2].RedisPassword: "rapw",
	} {
		if got != want {
			t.Errorf("resolved %q, want %q", got, want)
		}
	}
	if !c0.RedisTLS || c0.RedisTLSCA == "" || c0.MySQLTLSCA == "" || c.ControlTLSCA == "" || c1.RedisTLSServerName == "" {
		t.Errorf("TLS settings of the example: %+v %+v", c0, c1)
	}
}

// A topology's mistakes are told where they are: the file, the line, the
// pod (its index and name), and what was most likely meant, each once.
// Before, the same typo in two pods read "unknown key(s): pods.redis_adr,
// pods.redis_adr": twice, no file, no line, no pod, no suggestion.
func TestLoadSaysWhere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "topology.toml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	typo := strings.Replace(strings.Replace(sample, "redis_addr", "redis_adr", 1), "redis_cluster", "redis_adr", 1)
	write(typo)
	_, err := Load(path)
	want := "topology " + path + `:8: unknown key pods[0].redis_adr (pod "pod-a"); did you mean redis_addr?` + "\n" +
		"topology " + path + `:14: unknown key pods[1].redis_adr (pod "pod-b"); did you mean redis_addr?`
	if err == nil || err.Error() != want {
		t.Errorf("two pods with one typo:\n got %v\nwant %s", err, want)
	}
	for _, tc := range []struct{ edit, want string }{
		// A field refused: its line.
		{strings.Replace(sample, "pool_cap = 50", "pool_cap = 50\nredis_tls_ca = \"ca.pem\"", 1),
			":16: pods[1].redis_tls_ca is set but redis_tls is not"},
		// A field missing: its pod's line.
		{strings.Replace(sample, `mysql_dsn = "root@tcp(127.0.0.1:33306)/b"`, "", 1), ":11: pods[1].mysql_dsn is required"},
		{strings.Replace(sample, `shops = [1, 2]`, `shops = [1, -2]`, 1), ":9: pods[0].shops: -2 is not a positive shop id"},
		// A secret that cannot be resolved: its key's line.
		{strings.Replace(sample, `"root@tcp(127.0.0.1:33306)/b"`, `"${RSV_TOPOLOGY_TEST_UNSET}"`, 1), ":13: pods[1].mysql_dsn: ${RSV_TOPOLOGY_TEST_UNSET} is not set"},
		// The TOML library's own errors name their line; the file is said.
		{strings.Replace(sample, "pool_cap = 50", `pool_cap = "many"`, 1), "topology " + path + ": toml: line 15"},
	} {
		write(tc.edit)
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "topology "+path) {
			t.Errorf("want an error of %s containing %q, got %v", path, tc.want, err)
		}
	}
}
