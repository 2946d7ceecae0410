package cell_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// secureTopology writes the topology of one pod whose every connection is
// authenticated and TLS verified against the test CA, with no secret in
// the file: the control DSN whole from the environment, the pod's MySQL
// password inside its DSN from the environment, the Redis password from a
// file. edit changes the text before it is returned.
func secureTopology(t *testing.T, edit func(string) string) string {
	t.Helper()
	dir := t.TempDir()
	flags := flagdoc.FlagsFile{Path: filepath.Join(dir, "flags.json")}
	if _, _, err := flags.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.Global(), authority.ModeShadow) }); err != nil {
		t.Fatal(err)
	}
	server, err := mysql.ParseDSN(testdb.TLSServerDSN(t))
	if err != nil || server.Passwd == "" {
		t.Fatalf("%s: %v (a user with a password expected)", testdb.EnvTLSDSN, err)
	}
	srv := testredis.SecureServer(t)
	control, pod := testdb.NewTLS(t), testdb.NewTLS(t)

	t.Setenv("RSV_CELL_TEST_CONTROL_DSN", fmt.Sprintf("%s:%s@tcp(%s)/%s", server.User, server.Passwd, server.Addr, control.Name))
	t.Setenv("RSV_CELL_TEST_MYSQL_PASSWORD", server.Passwd)
	redisPassword := filepath.Join(dir, "redis-password")
	if err := os.WriteFile(redisPassword, []byte(srv.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf(`
control_dsn = "${RSV_CELL_TEST_CONTROL_DSN}"
control_tls_ca = %[1]q
flags_file = %[2]q

[[pods]]
name = "pod-s"
mysql_dsn = "%[3]s:${RSV_CELL_TEST_MYSQL_PASSWORD}@tcp(%[4]s)/%[5]s"
mysql_tls_ca = %[1]q
redis_addr = %[6]q
redis_prefix = %[7]q
redis_username = %[8]q
redis_password = "file:%[9]s"
redis_tls = true
redis_tls_ca = %[1]q
redis_tls_server_name = "localhost"
shops = [1]
`, srv.CA, flags.Path, server.User, server.Addr, pod.Name, srv.Addr, testredis.NewSecure(t).Prefix, srv.User, redisPassword)
	if edit != nil {
		text = edit(text)
	}
	path := filepath.Join(dir, "topology.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A topology with its secrets in the environment and a file, Redis behind
// an ACL user and TLS, and both databases behind TLS opens, is healthy and
// serves a reservation through both stores; the databases' connections
// are TLS.
func TestCellSecureTopology(t *testing.T) {
	topo, err := topology.Load(secureTopology(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := cell.Open(ctx, cell.Config{Topology: topo, ReapInterval: -1, FlagPollInterval: 50 * time.Millisecond, MirrorPoll: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	for _, h := range c.Ping(ctx) {
		if !h.OK {
			t.Fatalf("ping: %+v", h)
		}
	}
	p := c.Pod("pod-s")
	for what, db := range map[string]*sql.DB{"control": c.Control, "pod-s": p.DB} {
		var name, cipher string
		if err := db.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher); err != nil || cipher == "" {
			t.Errorf("%s database: cipher %q, %v: not TLS", what, cipher, err)
		}
	}

	ten := int64(10)
	if _, err := p.Facade.Adjust(ctx, &reservation.AdjustParams{Shop: 1, Item: 7, Location: 1, Available: &ten}); err != nil {
		t.Fatal(err)
	}
	res, err := p.Facade.Reserve(ctx, &reservation.ReserveParams{Shop: 1, Token: "tls", TTL: time.Minute,
		Lines: []reservation.Line{{Item: 7, Quantity: 4, Locations: []int64{1}}}})
	if err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	// Shadow mode: Redis decided, MySQL holds the shadow.
	eventually(t, "both stores hold the reservation", func() (bool, string) {
		avR, errR := p.Redis.Availability(ctx, &reservation.AvailabilityParams{Shop: 1, Item: 7})
		avM, errM := p.MySQL.Availability(ctx, &reservation.AvailabilityParams{Shop: 1, Item: 7})
		return errR == nil && errM == nil && avR.At(1) == 6 && avM.At(1) == 6,
			fmt.Sprintf("redis offers %d (%v), mysql %d (%v), want 6 each", avR.At(1), errR, avM.At(1), errM)
	})
}

// Mistakes in the connection settings are named by their field at Open,
// or show in the pod's health; no error shows a password.
func TestCellSecureTopologyMistakes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	missingCA := filepath.Join(t.TempDir(), "missing-ca.pem")
	// set replaces the value of key (its first occurrence) by value.
	set := func(key, value string) func(string) string {
		re := regexp.MustCompile(`(?m)^` + key + ` = .*$`)
		return func(s string) string {
			if !re.MatchString(s) {
				panic("no " + key)
			}
			return re.ReplaceAllLiteralString(s, key+" = "+value)
		}
	}
	for _, tc := range []struct {
		name     string
		edit     func(string) string
		openErr  string // the start of Open's error; "" when Open succeeds
		redisErr string // then: in the pod's Redis health
	}{
		{"missing control CA", set("control_tls_ca", strconv.Quote(missingCA)),
			"cell: control database: control_tls_ca: tlsclient: CA file: open " + missingCA, ""},
		{"missing Redis CA", set("redis_tls_ca", strconv.Quote(missingCA)),
			"cell: pod pod-s: redis_tls_ca: tlsclient: CA file: open " + missingCA, ""},
		{"tls in the DSN and a CA", func(s string) string {
			return regexp.MustCompile(`(mysql_dsn = "[^"]*)"`).ReplaceAllString(s, `$1?tls=true"`)
		}, "cell: pod pod-s database: mysql_tls_ca: tlsclient: the DSN already sets tls=true", ""},
		{"wrong Redis password", set("redis_password", `"${RSV_CELL_TEST_MYSQL_PASSWORD}"`), "", "WRONGPASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo, err := topology.Load(secureTopology(t, tc.edit))
			if err != nil {
				t.Fatal(err)
			}
			c, err := cell.Open(ctx, cell.Config{Topology: topo, ReapInterval: -1, NoRelay: true})
			if tc.openErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.openErr) {
					t.Fatalf("Open: %v, want %s...", err, tc.openErr)
				}
				noSecret(t, err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close(ctx) }()
			h := c.Ping(ctx)[1]
			if h.OK || h.RedisErr == nil || !strings.Contains(h.RedisErr.Error(), tc.redisErr) {
				t.Fatalf("health: %+v, want Redis failing with %s", h, tc.redisErr)
			}
			noSecret(t, h.RedisErr)
		})
	}
}

// noSecret fails the test if err shows a password of the test servers.
func noSecret(t *testing.T, err error) {
	t.Helper()
	for _, v := range []string{os.Getenv("RSV_CELL_TEST_MYSQL_PASSWORD"), os.Getenv(testredis.EnvSecurePassword)} {
		if v != "" && strings.Contains(err.Error(), v) {
			t.Errorf("error shows a password: %v", err)
		}
	}
}
