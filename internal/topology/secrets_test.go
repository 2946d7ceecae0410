package topology

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func readFrom(files map[string]string) func(string) ([]byte, error) {
	return func(path string) ([]byte, error) {
		v, ok := files[path]
		if !ok {
			return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
		}
		return []byte(v), nil
	}
}

// secretSample has a secret reference in every field that may hold one.
const secretSample = `
control_dsn = "${CONTROL_DSN}"
flags_file = "flags.json"

[[pods]]
name = "pod-a"
mysql_dsn = "root:${DB_PASS}@tcp(127.0.0.1:33306)/a"
redis_addr = "127.0.0.1:36379"
redis_username = "${REDIS_USER}"
redis_password = "file:/run/secrets/redis"

[[pods]]
name = "pod-b"
mysql_dsn = "file:/run/secrets/b-dsn"
redis_addr = "127.0.0.1:36379"
redis_prefix = "b:"
redis_password = "pw$${NOT_A_REF}x"
`

var (
	sampleEnv   = map[string]string{"CONTROL_DSN": "ctl:hunter2@tcp(c:3306)/control", "DB_PASS": "s3cret", "REDIS_USER": "reservoir"}
	sampleFiles = map[string]string{"/run/secrets/redis": "r-pass\n", "/run/secrets/b-dsn": "b:bpass@tcp(b:3306)/b\r\n"}
)

// ${NAME} resolves as the whole value or inside it, file: reads a file and
// drops its trailing newline, $${ is a literal ${.
func TestSecretsResolve(t *testing.T) {
	c, err := parse([]byte(secretSample), lookup(sampleEnv), readFrom(sampleFiles))
	if err != nil {
		t.Fatal(err)
	}
	a, b := c.Pods[0], c.Pods[1]
	for _, tc := range []struct{ field, got, want string }{
		{"control_dsn", c.ControlDSN, "ctl:hunter2@tcp(c:3306)/control"},
		{"pods[0].mysql_dsn", a.MySQLDSN, "root:s3cret@tcp(127.0.0.1:33306)/a"},
		{"pods[0].redis_username", a.RedisUsername, "reservoir"},
		{"pods[0].redis_password", a.RedisPassword, "r-pass"},
		{"pods[1].mysql_dsn", b.MySQLDSN, "b:bpass@tcp(b:3306)/b"},
		{"pods[1].redis_password", b.RedisPassword, "pw${NOT_A_REF}x"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.field, tc.got, tc.want)
		}
	}
}

// A resolved value is final: a secret holding "${" or starting with
// "file:" is taken as it is.
func TestSecretsResolveOnce(t *testing.T) {
	env := map[string]string{"CONTROL_DSN": "x", "DB_PASS": "${DB_PASS}", "REDIS_USER": "file:/etc/passwd"}
	c, err := parse([]byte(secretSample), lookup(env), readFrom(sampleFiles))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Pods[0].MySQLDSN; got != "root:${DB_PASS}@tcp(127.0.0.1:33306)/a" {
		t.Errorf("mysql_dsn = %q", got)
	}
	if got := c.Pods[0].RedisUsername; got != "file:/etc/passwd" {
		t.Errorf("redis_username = %q", got)
	}
}

// Through Parse: the real environment and file system.
func TestSecretsFromEnvironmentAndFiles(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "redis-password")
	if err := os.WriteFile(pw, []byte("from-a-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RSV_TOPOLOGY_TEST_PASS", "from-env")
	c, err := Parse([]byte(strings.NewReplacer(
		`root@tcp(127.0.0.1:33306)/a`, `root:${RSV_TOPOLOGY_TEST_PASS}@tcp(127.0.0.1:33306)/a`,
		`redis_addr = "127.0.0.1:36379"`, `redis_addr = "127.0.0.1:36379"`+"\nredis_password = \"file:"+pw+"\"",
	).Replace(sample)))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Pods[0]; p.MySQLDSN != "root:from-env@tcp(127.0.0.1:33306)/a" || p.RedisPassword != "from-a-file" {
		t.Errorf("resolved: %q %q", p.MySQLDSN, p.RedisPassword)
	}

	unreadable := filepath.Join(dir, "missing")
	_, err = Parse([]byte(strings.Replace(sample, `redis_addr = "127.0.0.1:36379"`,
		`redis_addr = "127.0.0.1:36379"`+"\nredis_password = \"file:"+unreadable+"\"", 1)))
	if want := "topology line 9: pods[0].redis_password: open " + unreadable + ": no such file or directory"; err == nil || err.Error() != want {
		t.Errorf("unreadable file: got %v, want %s", err, want)
	}
}

// Every error names the field and the reference, and never holds a
// secret: not a resolved one, not the literal text around a reference.
func TestSecretErrorsNameTheFieldNotTheSecret(t *testing.T) {
	secrets := []string{"hunter2", "s3cret", "r-pass", "bpass", "tops3cret"}
	for _, tc := range []struct {
		name       string
		edit       func(string) string
		env        map[string]string
		files      map[string]string
		want       string
		wantPrefix bool
	}{
		{name: "unset variable", edit: func(s string) string { return s }, env: without(sampleEnv, "DB_PASS"),
			want: "topology: pods[0].mysql_dsn: ${DB_PASS} is not set"},
		{name: "unset whole value", edit: func(s string) string { return s }, env: without(sampleEnv, "CONTROL_DSN"),
			want: "topology: control_dsn: ${CONTROL_DSN} is not set"},
		{name: "missing file", edit: func(s string) string { return s }, files: without(sampleFiles, "/run/secrets/b-dsn"),
			want: "topology: pods[1].mysql_dsn: open /run/secrets/b-dsn: file does not exist"},
		{name: "empty file", edit: func(s string) string { return s }, files: with(sampleFiles, "/run/secrets/redis", "\n"),
			want: "topology: pods[0].redis_password: file /run/secrets/redis is empty"},
		{name: "file: without a path", edit: replace(`"file:/run/secrets/redis"`, `"file:"`),
			want: "topology: pods[0].redis_password: file: needs a path", wantPrefix: true},
		{name: "unclosed reference", edit: replace(`"root:${DB_PASS}@tcp`, `"root:tops3cret${DB_PASS@tcp`),
			want: "topology: pods[0].mysql_dsn: a ${ has no closing }", wantPrefix: true},
		{name: "not a name", edit: replace(`"root:${DB_PASS}@tcp`, `"root:${tops3cret!}@tcp`),
			want: "topology: pods[0].mysql_dsn: a ${...} does not hold a variable name", wantPrefix: true},
		{name: "a later field's validation", edit: replace(`name = "pod-b"`, `name = "pod b"`),
			want: `topology: pods[1].name "pod b" must be`, wantPrefix: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, files := tc.env, tc.files
			if env == nil {
				env = sampleEnv
			}
			if files == nil {
				files = sampleFiles
			}
			_, err := parse([]byte(tc.edit(secretSample)), lookup(env), readFrom(files))
			if err == nil {
				t.Fatalf("parsed; want %s", tc.want)
			}
			// Where is TestLoadSaysWhere's: here, what.
			if got := withoutLine(err.Error()); tc.wantPrefix && !strings.HasPrefix(got, tc.want) || !tc.wantPrefix && got != tc.want {
				t.Errorf("error %q, want %q", got, tc.want)
			}
			for _, s := range secrets {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q holds the secret %q", err, s)
				}
			}
		})
	}
}

// The new pod fields are checked together: TLS details without TLS, and
// an ACL user without a password, are mistakes to name.
func TestRedisAuthAndTLSValidation(t *testing.T) {
	pod := `redis_cluster = ["127.0.0.1:37001"]`
	for _, tc := range []struct{ add, want string }{
		{`redis_tls_ca = "/etc/ca.pem"`, "topology: pods[1].redis_tls_ca is set but redis_tls is not"},
		{`redis_tls_server_name = "redis.internal"`, "topology: pods[1].redis_tls_server_name is set but redis_tls is not"},
		{`redis_username = "reservoir"`, "topology: pods[1].redis_username is set but redis_password is empty"},
		{"redis_tls = true\nredis_tls_ca = \"/etc/ca.pem\"\nredis_username = \"u\"\nredis_password = \"p\"", ""},
	} {
		_, err := Parse([]byte(strings.Replace(sample, pod, pod+"\n"+tc.add, 1)))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.HasPrefix(withoutLine(err.Error()), tc.want)) {
			t.Errorf("%s: got %v, want %q", tc.add, err, tc.want)
		}
	}
}

func without(m map[string]string, k string) map[string]string {
	out := map[string]string{}
	for kk, v := range m {
		if kk != k {
			out[kk] = v
		}
	}
	return out
}

func with(m map[string]string, k, v string) map[string]string {
	out := without(m, k)
	out[k] = v
	return out
}

func replace(old, new string) func(string) string {
	return func(s string) string {
		if !strings.Contains(s, old) {
			panic(fmt.Sprintf("sample has no %q", old))
		}
		return strings.Replace(s, old, new, 1)
	}
}

// withoutLine is an error of Parse without the line it names: "topology
// line 7: x" is "topology: x".
func withoutLine(s string) string {
	return regexp.MustCompile(`^topology line \d+: `).ReplaceAllString(s, "topology: ")
}
