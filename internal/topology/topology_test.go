package topology

import (
	"os"
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
		{strings.Replace(sample, `control_dsn`, `contrl_dsn`, 1), "unknown key(s): contrl_dsn"},
		{strings.Replace(sample, `name = "pod-b"`, `name = "pod-a"`, 1), `pods[1].name "pod-a" is used twice`},
		{strings.Replace(sample, `redis_cluster = ["127.0.0.1:37001"]`, ``, 1), "pods[1]: give exactly one of redis_addr and redis_cluster"},
		{strings.Replace(sample, `shops = [1, 2]`, `shops = [1, -2]`, 1), "pods[0].shops: -2"},
		{sample + "\ndefault_rule = \"pod:nope\"\n", "unknown key"}, // after [[pods]] it is a pod key
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
	env := map[string]string{"RESERVOIR_CONTROL_DB_PASSWORD": "cpw", "RESERVOIR_REDIS_C_PASSWORD": "rpw", "RESERVOIR_POD_B_DB_PASSWORD": "bpw"}
	files := map[string]string{
		"/etc/reservoir/secrets/pod-c-mysql-dsn":  "reservoir:cdb@tcp(mysql-c:3306)/reservoir\n",
		"/etc/reservoir/secrets/redis-b-password": "bredis\n",
	}
	c, err := parse(b, lookup(env), readFrom(files))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pods) != 2 || c.Pods[1].PoolCap != 1000 {
		t.Fatalf("example topology: %d pods", len(c.Pods))
	}
	c0, c1 := c.Pods[0], c.Pods[1]
	for got, want := range map[string]string{
		c.ControlDSN:     "reservoir:cpw@tcp(mysql-control:3306)/reservoir_control",
		c0.MySQLDSN:      "reservoir:cdb@tcp(mysql-c:3306)/reservoir",
		c0.RedisPassword: "rpw",
		c1.MySQLDSN:      "reservoir:bpw@tcp(mysql-b:3306)/reservoir?tls=true",
		c1.RedisPassword: "bredis",
	} {
		if got != want {
			t.Errorf("resolved %q, want %q", got, want)
		}
	}
	if !c0.RedisTLS || c0.RedisTLSCA == "" || c0.MySQLTLSCA == "" || c.ControlTLSCA == "" || c1.RedisTLSServerName == "" {
		t.Errorf("TLS settings of the example: %+v %+v", c0, c1)
	}
}
