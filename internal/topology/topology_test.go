package topology

import (
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
	} {
		_, err := Parse([]byte(tc.edit))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want error containing %q, got %v", tc.want, err)
		}
	}
}

func TestExampleFileParses(t *testing.T) {
	c, err := Load("../../deploy/topology.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pods) != 2 || c.Pods[1].PoolCap != 1000 {
		t.Errorf("example topology: %+v", c.Pods)
	}
}
