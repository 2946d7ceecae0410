package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testbuf"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// serveOutput is a goroutine-safe writer a running command prints to.
type serveOutput struct{ testbuf.Buffer }

// waitFor polls out until re matches, and returns the first submatch.
func (o *serveOutput) waitFor(t *testing.T, re *regexp.Regexp, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if m := re.FindStringSubmatch(o.String()); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s in the output after %s:\n%s", re, within, o.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// listeningRE and adminRE find serve's two listeners in its first line.
var (
	listeningRE = regexp.MustCompile(`listening on (http://[0-9.:]+)`)
	adminRE     = regexp.MustCompile(`admin on (http://[0-9.:]+)`)
)

// newClient makes a checkout API client with both roles in the clients
// file at path, through `reservoir clients new --append`, and returns its
// token.
func newClient(t *testing.T, path, name string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"clients", "new", "--name", name, "--roles", "checkout,inventory", "--append", path}, &out, &errOut); code != 0 {
		t.Fatalf("clients new: exit %d: %s", code, errOut.String())
	}
	return strings.TrimSpace(out.String())
}

// apiCall sends a JSON request and decodes the JSON answer.
func apiCall(t *testing.T, method, url, token string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

// podDecisions is what a replica's /admin/rollout/status says each pod's
// shops get, as "pod=mode/kill/authority".
func podDecisions(t *testing.T, base, token string) string {
	t.Helper()
	code, st := apiCall(t, "GET", base+"/admin/rollout/status", token, nil)
	if code != 200 {
		t.Fatalf("status: %d %v", code, st)
	}
	var parts []string
	for _, p := range st["pods"].([]any) {
		pm := p.(map[string]any)
		e := pm["effective"].(map[string]any)
		parts = append(parts, fmt.Sprintf("%s=%s/%s/%s", pm["pod"], e["mode"], e["kill"], e["authority"]))
	}
	return strings.Join(parts, " ")
}

// Acceptance (e): two `reservoir serve` replicas on one topology and one
// flags file agree on every pod's mode, and both obey a kill switch
// engaged through one of them (the time until the other obeys is
// measured); released through the other, both follow again. Both stop
// cleanly on their context (SIGTERM in main).
func TestServeReplicasShareFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	control, podA, podB := testdb.New(t), testdb.New(t), testdb.New(t)
	ra, rb := testredis.New(t), testredis.New(t)
	flags := flagdoc.FlagsFile{Path: filepath.Join(dir, "flags.json")}
	if _, _, err := flags.Update(func(f *flagdoc.Flags) error {
		if err := f.SetMode(flagdoc.PodScope("pod-a"), authority.ModeMySQL); err != nil {
			return err
		}
		return f.SetMode(flagdoc.PodScope("pod-b"), authority.ModeShadow)
	}); err != nil {
		t.Fatal(err)
	}
	plan := filepath.Join(dir, "plan.toml")
	writeServeFile(t, plan, `pods = ["pod-a", "pod-b"]
[[stages]]
name = "shadow on pod-b"
mode = "shadow"
pods = ["pod-b"]
`)
	topo := filepath.Join(dir, "topology.toml")
	writeServeFile(t, topo, fmt.Sprintf(`control_dsn = %q
flags_file = %q
plan_file = %q
[[pods]]
name = "pod-a"
mysql_dsn = %q
redis_addr = %q
redis_prefix = %q
shops = [1001]
[[pods]]
name = "pod-b"
mysql_dsn = %q
redis_addr = %q
redis_prefix = %q
shops = [2001]
`, control.DSN, flags.Path, plan, podA.DSN, testredis.Addr(t), ra.Prefix, podB.DSN, testredis.Addr(t), rb.Prefix))
	const token = "replicas-test-token-0123456789"
	tokenFile := filepath.Join(dir, "token")
	writeServeFile(t, tokenFile, token+"\n")

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	type replica struct {
		base     string // the checkout API
		admin    string // the admin listener
		out, err *serveOutput
		done     chan int
	}
	clients := filepath.Join(dir, "clients.toml")
	apiTok := newClient(t, clients, "replica-test")
	var replicas []*replica
	for range 2 {
		r := &replica{out: &serveOutput{}, err: &serveOutput{}, done: make(chan int, 1)}
		go func() {
			r.done <- Main(ctx, []string{"serve", "--topology", topo, "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
				"--clients", clients, "--admin-token-file", tokenFile, "--log-level", "warn", "--shutdown-timeout", "5s"}, r.out, r.err)
		}()
		r.base = r.out.waitFor(t, listeningRE, 30*time.Second)
		r.admin = r.out.waitFor(t, adminRE, time.Second)
		replicas = append(replicas, r)
	}
	a, b := replicas[0], replicas[1]
	for _, r := range replicas {
		if code, body := apiCall(t, "GET", r.admin+"/readyz", "", nil); code != 200 {
			t.Fatalf("readyz %s: %d %v", r.base, code, body)
		}
	}

	// They agree on every pod's decision, and act on it.
	da, db := podDecisions(t, a.admin, token), podDecisions(t, b.admin, token)
	if da != db || da != "pod-a=mysql/off/mysql pod-b=shadow/off/redis" {
		t.Fatalf("the replicas disagree or are wrong:\n  A: %s\n  B: %s", da, db)
	}
	if code, body := apiCall(t, "POST", a.base+"/v1/shops/1001/items/7/locations/1/adjust", apiTok, map[string]any{"available": 100}); code != 200 {
		t.Fatalf("adjust: %d %v", code, body)
	}
	reserve := func(r *replica, tok string) string {
		t.Helper()
		code, body := apiCall(t, "POST", r.base+"/v1/shops/1001/reservations", apiTok, map[string]any{
			"token": tok, "lines": []map[string]any{{"item": 7, "quantity": 1, "locations": []int64{1}}}})
		if code != 201 {
			t.Fatalf("reserve %s via %s: %d %v", tok, r.base, code, body)
		}
		return body["authority"].(string)
	}
	if ga, gb := reserve(a, "a1"), reserve(b, "b1"); ga != "mysql" || gb != "mysql" {
		t.Fatalf("authority before the kill switch: A %s, B %s", ga, gb)
	}

	// The kill switch through A; B obeys.
	start := time.Now()
	code, body := apiCall(t, "POST", a.admin+"/admin/killswitch", token, map[string]any{"scope": "pod:pod-a", "reason": "replica test"})
	if code != 200 || body["audited"] != true {
		t.Fatalf("kill via A: %d %v", code, body)
	}
	viaA := time.Since(start)
	for podDecisions(t, b.admin, token) != "pod-a=mysql/redis/redis pod-b=shadow/off/redis" {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("B never obeyed the kill switch: %s", podDecisions(t, b.admin, token))
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("kill switch engaged via A: A obeyed %.1f ms after the flags file was written (answer after %s); B obeyed within %s of the request",
		body["obeyed_after_ms"], viaA.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if ga, gb := reserve(a, "a2"), reserve(b, "b2"); ga != "redis" || gb != "redis" {
		t.Fatalf("authority with the kill switch engaged: A %s, B %s", ga, gb)
	}
	// Made under MySQL, claimed under Redis authority through the other
	// replica: once.
	if code, body := apiCall(t, "POST", b.base+"/v1/shops/1001/reservations/a1/claim", apiTok, nil); code != 200 {
		t.Fatalf("claim a1 via B: %d %v", code, body)
	}

	// Released through B; A follows.
	start = time.Now()
	if code, body := apiCall(t, "DELETE", b.admin+"/admin/killswitch", token, map[string]any{"scope": "pod:pod-a", "reason": "over"}); code != 200 {
		t.Fatalf("release via B: %d %v", code, body)
	}
	for podDecisions(t, a.admin, token) != "pod-a=mysql/off/mysql pod-b=shadow/off/redis" {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("A never obeyed the release: %s", podDecisions(t, a.admin, token))
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("released via B: A followed within %s", time.Since(start).Round(time.Millisecond))
	if ga := reserve(a, "a3"); ga != "mysql" {
		t.Fatalf("authority after the release: %s", ga)
	}

	// SIGTERM: both stop cleanly.
	stop()
	for i, r := range replicas {
		select {
		case code := <-r.done:
			if code != 0 {
				t.Errorf("replica %d exited %d:\n%s", i, code, r.err.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("replica %d did not stop", i)
		}
	}
}

func writeServeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// onePodTopology writes dir/topology.toml: pod-a (shop 1001) on fresh
// databases and r's key prefix, its flags in the file flags; it returns
// the topology's path.
func onePodTopology(t *testing.T, dir, flags string, r *testredis.Redis) string {
	t.Helper()
	topo := filepath.Join(dir, "topology.toml")
	writeServeFile(t, topo, fmt.Sprintf("control_dsn = %q\nflags_file = %q\n[[pods]]\nname = \"pod-a\"\nmysql_dsn = %q\nredis_addr = %q\nredis_prefix = %q\nshops = [1001]\n",
		testdb.New(t).DSN, flags, testdb.New(t).DSN, testredis.Addr(t), r.Prefix))
	return topo
}

// `reservoir serve` starts although its flags file cannot be read (a
// symlink loop: unreadable even for root): the replica is not ready and
// answers reservation calls 503 flags_unavailable, touching no store,
// until a valid file is renamed into place; then it is ready and serves.
// It stops cleanly either way.
func TestServeStartsWithoutFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := testredis.New(t)
	clients := filepath.Join(dir, "clients.toml")
	apiTok := newClient(t, clients, "flags-test")
	flags := filepath.Join(dir, "flags.json")
	if err := os.Symlink("flags.json", flags); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(flags); err == nil {
		t.Fatal("the flags file is readable: the test would prove nothing")
	}
	topo := onePodTopology(t, dir, flags, r)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	out, errOut := &serveOutput{}, &serveOutput{}
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"serve", "--topology", topo, "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
			"--clients", clients, "--log-level", "warn"}, out, errOut)
	}()
	base := out.waitFor(t, listeningRE, 30*time.Second)
	admin := out.waitFor(t, adminRE, time.Second)

	code, body := apiCall(t, "GET", admin+"/readyz", "", nil)
	if code != http.StatusServiceUnavailable || body["flags_loaded"] != false || !strings.Contains(fmt.Sprint(body["not_ready"]), "flags_not_loaded") {
		t.Fatalf("readyz without flags: %d %v", code, body)
	}
	cart := map[string]any{"token": "c1", "lines": []map[string]any{{"item": 7, "quantity": 1, "locations": []int64{1}}}}
	if code, body := apiCall(t, "POST", base+"/v1/shops/1001/reservations", apiTok, cart); code != http.StatusServiceUnavailable || body["error"] != "flags_unavailable" {
		t.Fatalf("reserve without flags: %d %v", code, body)
	}
	if keys := r.Keys(t); len(keys) != 0 {
		t.Errorf("Redis was written without flags: %v", keys)
	}

	// A valid file renamed into place.
	tmp := filepath.Join(dir, "flags.json.new")
	if _, _, err := (flagdoc.FlagsFile{Path: tmp}).Update(func(f *flagdoc.Flags) error {
		return f.SetMode(flagdoc.PodScope("pod-a"), authority.ModeShadow)
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, flags); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body = apiCall(t, "GET", admin+"/readyz", "", nil)
		if code == http.StatusOK && body["flags_loaded"] == true {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz after a valid flags file was renamed into place: %d %v", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := apiCall(t, "POST", base+"/v1/shops/1001/items/7/locations/1/adjust", apiTok, map[string]any{"available": 3}); code != 200 {
		t.Fatalf("adjust: %d %v", code, body)
	}
	if code, body := apiCall(t, "POST", base+"/v1/shops/1001/reservations", apiTok, cart); code != http.StatusCreated || body["authority"] != "redis" {
		t.Fatalf("reserve once the flags loaded: %d %v", code, body)
	}

	stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited %d:\n%s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// A pod's database that cannot be reached is a connection problem, said
// as one: serve's log says it cannot connect (and which topology field to
// check), not that the schema is behind, and /readyz has the pod degraded
// ("cannot connect"), with no schema_behind among the reasons it is not
// ready. Before, the log read "not ready until the schema is migrated" for
// a pod DSN on a dead port.
func TestServeSaysCannotConnectNotSchemaBehind(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	control := testdb.New(t)
	r := testredis.New(t)
	clients := filepath.Join(dir, "clients.toml")
	newClient(t, clients, "dead-port")
	flags := filepath.Join(dir, "flags.json")
	if err := (flagdoc.FlagsFile{Path: flags}).Write(flagdoc.NewFlags()); err != nil {
		t.Fatal(err)
	}
	topo := filepath.Join(dir, "topology.toml")
	writeServeFile(t, topo, fmt.Sprintf(`control_dsn = %q
flags_file = %q
[[pods]]
name = "pod-a"
mysql_dsn = "root@tcp(127.0.0.1:1)/nothing?timeout=1s"
redis_addr = %q
redis_prefix = %q
`, control.DSN, flags, testredis.Addr(t), r.Prefix))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	out, errOut := &serveOutput{}, &serveOutput{}
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"serve", "--topology", topo, "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
			"--clients", clients, "--log-level", "warn", "--log-format", "text"}, out, errOut)
	}()
	admin := out.waitFor(t, adminRE, 30*time.Second)
	log := errOut.String()
	for _, want := range []string{"cannot connect to a database at start (not a schema problem)",
		"cannot connect to pod pod-a's database (unreachable; check the topology's mysql_dsn of pod pod-a)"} {
		if !strings.Contains(log, want) {
			t.Errorf("serve's log does not say %q:\n%s", want, log)
		}
	}
	for _, wrong := range []string{"migrated", "behind"} {
		if strings.Contains(log, wrong) {
			t.Errorf("serve's log says %q for a database it cannot reach:\n%s", wrong, log)
		}
	}
	code, body := apiCall(t, "GET", admin+"/readyz", "", nil)
	if strings.Contains(fmt.Sprint(body["not_ready"]), "schema") || !strings.Contains(fmt.Sprint(body["degraded"]), "pod-a: mysql failed its ping (unreachable: cannot connect)") {
		t.Errorf("readyz with pod-a's database unreachable: %d %v", code, body)
	}
	stop()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
}
