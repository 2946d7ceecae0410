package server_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// ---- (a) timing-probed tokens ----

// TestAdminTokenComparedInConstantTime proves, from admin.go's syntax,
// that the admin token check ((*Server).authorize, which the admin
// middleware and /readyz's detail use) compares the presented token with
// subtle.ConstantTimeCompare on SHA-256 digests (so neither the token's
// bytes nor its length can be probed through timing), and that no
// non-test file of the package compares the token or its digest with ==,
// !=, bytes.Equal, strings.EqualFold or hmac.Equal (other than checking
// that the configured token is empty). Timing itself is not measured: a
// shared 2-core machine cannot tell a constant-time compare from a
// short-circuiting one reliably.
func TestAdminTokenComparedInConstantTime(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	secret := func(n ast.Node) bool { // mentions the token or its digest
		found := false
		ast.Inspect(n, func(n ast.Node) bool {
			// The result of the constant-time compare and the token's
			// length (checked at startup) are not the token.
			if c, ok := n.(*ast.CallExpr); ok {
				if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "ConstantTimeCompare" {
					return false
				}
				if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "len" {
					return false
				}
			}
			if id, ok := n.(*ast.Ident); ok && (id.Name == "tokenHash" || id.Name == "AdminToken") {
				found = true
			}
			return !found
		})
		return found
	}
	emptyLit := func(e ast.Expr) bool {
		if b, ok := e.(*ast.BasicLit); ok {
			return b.Value == `""`
		}
		id, ok := e.(*ast.Ident)
		return ok && id.Name == "nil"
	}
	var sawAdmin, sawCompare, sawDigest bool
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if (n.Op == token.EQL || n.Op == token.NEQ) && (secret(n.X) || secret(n.Y)) && !emptyLit(n.X) && !emptyLit(n.Y) {
					t.Errorf("%s: the admin token is compared with %s", fset.Position(n.Pos()), n.Op)
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				pkg, _ := sel.X.(*ast.Ident)
				if pkg == nil {
					return true
				}
				call := pkg.Name + "." + sel.Sel.Name
				switch call {
				case "bytes.Equal", "strings.EqualFold", "strings.Compare", "hmac.Equal", "reflect.DeepEqual", "slices.Equal":
					for _, a := range n.Args {
						if secret(a) {
							t.Errorf("%s: the admin token is compared with %s", fset.Position(n.Pos()), call)
						}
					}
				}
			case *ast.FuncDecl:
				if name != "admin.go" || n.Name.Name != "authorize" || n.Recv == nil {
					return true
				}
				sawAdmin = true
				ast.Inspect(n.Body, func(m ast.Node) bool {
					c, ok := m.(*ast.CallExpr)
					if !ok {
						return true
					}
					sel, ok := c.Fun.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					pkg, _ := sel.X.(*ast.Ident)
					if pkg == nil {
						return true
					}
					switch pkg.Name + "." + sel.Sel.Name {
					case "subtle.ConstantTimeCompare":
						if len(c.Args) == 2 && (secret(c.Args[0]) || secret(c.Args[1])) {
							sawCompare = true
						}
					case "sha256.Sum256":
						sawDigest = true
					}
					return true
				})
			}
			return true
		})
	}
	if !sawAdmin {
		t.Fatal("admin.go has no (*Server).authorize: the token check moved; update this test")
	}
	if !sawCompare {
		t.Error("(*Server).authorize does not compare the token digest with subtle.ConstantTimeCompare")
	}
	if !sawDigest {
		t.Error("(*Server).authorize does not hash the presented token (sha256.Sum256): a length mismatch would return early")
	}
}

// TestAdminRejectsProbedTokens proves that tokens an attacker would try
// while probing timing all answer 401 unauthorized: the token with its
// last byte changed (same length), a long shared prefix with a wrong tail,
// the token with one byte more or one byte less, and same-length tokens
// that share no byte. The real token, as a sanity check, answers 200.
func TestAdminRejectsProbedTokens(t *testing.T) {
	t.Parallel()
	h := setup(t, options{})
	last := adminToken[len(adminToken)-1]
	probes := map[string]string{
		"last byte differs":       adminToken[:len(adminToken)-1] + string(last^1),
		"long prefix, wrong tail": adminToken[:len(adminToken)-3] + "zzz",
		"one byte longer":         adminToken + string(last),
		"one byte shorter":        adminToken[:len(adminToken)-1],
		"same length, all wrong":  strings.Repeat("x", len(adminToken)),
		"twice as long":           adminToken + adminToken,
		"tab inside":              adminToken[:8] + "\t" + adminToken[9:],
	}
	for name, tok := range probes {
		if tok == adminToken {
			t.Fatalf("%s: probe equals the token", name)
		}
		r := h.do("GET", "/admin/rollout/status", nil, "", "Authorization", "Bearer "+tok)
		if r.status != http.StatusUnauthorized || str(r.body["error"]) != "unauthorized" {
			t.Errorf("%s: %d %s", name, r.status, r.raw)
		}
	}
	if r := h.admin("GET", "/admin/rollout/status", nil); r.status != http.StatusOK {
		t.Fatalf("the real token: %d %s", r.status, r.raw)
	}
}

// ---- (b) secrets never leak ----

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// passwordUser creates a MariaDB user with a password, allowed on dbs, and
// drops it when the test ends.
func passwordUser(t *testing.T, dbs ...string) (user, password string) {
	t.Helper()
	admin, err := sql.Open("mysql", testdb.ServerDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	user, password = "rsv_sec_"+randHex(4), "s3cr3t-pw-"+randHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, host := range []string{"%", "localhost", "127.0.0.1"} {
		if _, err := admin.ExecContext(ctx, fmt.Sprintf("CREATE USER '%s'@'%s' IDENTIFIED BY '%s'", user, host, password)); err != nil {
			t.Fatalf("create user: %v", err)
		}
		for _, db := range dbs {
			if _, err := admin.ExecContext(ctx, fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%s'", db, user, host)); err != nil {
				t.Fatalf("grant: %v", err)
			}
		}
	}
	t.Cleanup(func() {
		for _, host := range []string{"%", "localhost", "127.0.0.1"} {
			_, _ = admin.Exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'%s'", user, host))
		}
	})
	return user, password
}

// withUser rewrites dsn to log in as user with password (and, if addr is
// set, at addr).
func withUser(t *testing.T, dsn, user, password, addr string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd = user, password
	if addr != "" {
		cfg.Addr = addr
	}
	return cfg.FormatDSN()
}

// TestSecretsNeverLeak runs a server whose topology carries MySQL
// passwords: the control database and pod-a log in as a user with a
// password (so every call really authenticates with it), pod-b (mysql
// mode) uses the same user with a wrong password (its calls and its
// readiness fail with "access denied") and pod-c points at a dead address
// with a third password (its readiness fails to connect). It then makes
// successful and failing API calls, admin calls with the token (and wrong
// ones, and the token in a query string), /readyz (503), /healthz,
// /metrics and the dashboard's files, and proves that no response body or
// header, and no line the server (and its cell) logged, contains any of
// the passwords or the admin token. It also proves that cell.Open's error
// for a malformed DSN does not echo its password.
func TestSecretsNeverLeak(t *testing.T) {
	t.Parallel()
	var user, password string
	wrongPW, deadPW := "s3cr3t-wrong-"+randHex(6), "s3cr3t-dead-"+randHex(6)
	control, podA, podB := testdb.New(t), testdb.New(t), testdb.New(t)
	user, password = passwordUser(t, control.Name, podA.Name, podB.Name)
	secrets := []string{password, wrongPW, deadPW, adminToken}

	e := newEnv(t, envOptions{
		modes: map[string]authority.Mode{"pod-b": authority.ModeMySQL},
		topo: func(c *topology.Config) {
			c.ControlDSN = withUser(t, control.DSN, user, password, "")
			c.Pods[0].MySQLDSN = withUser(t, podA.DSN, user, password, "")
			c.Pods = append(c.Pods,
				topology.Pod{Name: "pod-b", MySQLDSN: withUser(t, podB.DSN, user, wrongPW, ""), RedisAddr: c.Pods[0].RedisAddr,
					RedisPrefix: c.Pods[0].RedisPrefix + "b:", Shops: []int64{2001}},
				topology.Pod{Name: "pod-c", MySQLDSN: withUser(t, podB.DSN, user, deadPW, "127.0.0.1:1"), RedisAddr: c.Pods[0].RedisAddr,
					RedisPrefix: c.Pods[0].RedisPrefix + "c:", Shops: []int64{3001}})
		},
	})
	hs := httptest.NewServer(e.srv.Handler())
	t.Cleanup(hs.Close)
	h := &harness{t: t, http: hs, logBuf: e.log}

	type call struct {
		method, path string
		body         any
		token        string
		want         int
	}
	calls := []call{
		{"POST", "/v1/shops/1001/items/7/locations/1/adjust", map[string]any{"available": 5}, "", 200},
		{"POST", "/v1/shops/1001/reservations", map[string]any{"token": "sec-1", "ttl_ms": 60000, "lines": []map[string]any{{"item": 7, "quantity": 1, "locations": []int64{1}}}}, "", 201},
		{"GET", "/v1/shops/1001/reservations/sec-1", nil, "", 200},
		{"POST", "/v1/shops/1001/reservations/sec-1/claim", nil, "", 200},
		{"POST", "/v1/shops/1001/reservations", `{"token":"x","lines":[{"item":7,"quantity":-1,"locations":[1]}]}`, "", 400},
		{"POST", "/v1/shops/2001/reservations", map[string]any{"token": "sec-2", "lines": []map[string]any{{"item": 7, "quantity": 1, "locations": []int64{1}}}}, "", 503},
		{"POST", "/v1/shops/2001/items/7/locations/1/adjust", map[string]any{"available": 5}, "", 503},
		{"GET", "/v1/shops/2001/items/7/availability", nil, "", 503},
		{"GET", "/readyz", nil, "", 200},         // ready, pod-b and pod-c degraded
		{"GET", "/readyz", nil, adminToken, 200}, // with the drivers' errors
		{"GET", "/healthz", nil, "", 200},
		{"GET", "/metrics", nil, "", 200},
		{"GET", "/dashboard", nil, "", 200},
		{"GET", "/dashboard/app.js", nil, "", 200},
		{"GET", "/dashboard/style.css", nil, "", 200},
		{"GET", "/admin/rollout/status", nil, adminToken, 200},
		{"GET", "/admin/rollout/history", nil, adminToken, 0},
		{"GET", "/admin/stats", nil, adminToken, 0},
		{"GET", "/admin/diffs", nil, adminToken, 0},
		{"GET", "/admin/series", nil, adminToken, 0},
		{"GET", "/admin/reconcile", nil, adminToken, 0},
		{"POST", "/admin/reconcile?pod=pod-b", nil, adminToken, 0},
		{"GET", "/admin/rollout/status", nil, adminToken + "x", 401},
		{"GET", "/admin/rollout/status?token=" + adminToken, nil, "", 401},
		{"GET", "/no/such/" + adminToken[:4], nil, "", 404},
	}
	for _, c := range calls {
		r := h.do(c.method, c.path, c.body, c.token)
		if c.want != 0 && r.status != c.want {
			t.Errorf("%s %s: %d, want %d: %s", c.method, c.path, r.status, c.want, trim(r.raw))
		}
		for _, s := range secrets {
			if strings.Contains(r.raw, s) {
				t.Errorf("%s %s: the answer contains a secret (%.6s...): %s", c.method, c.path, s, trim(r.raw))
			}
			for k, vs := range r.header {
				if strings.Contains(strings.Join(vs, " "), s) {
					t.Errorf("%s %s: header %s contains a secret", c.method, c.path, k)
				}
			}
		}
	}
	// The admin API answers about a broken pod without the driver's words
	// either ("Access denied for user 'u'@'host'"): a class and the
	// request id; the log has the rest.
	for _, path := range []string{"/admin/reconcile?pod=pod-b", "/admin/reconcile?pod=pod-c"} {
		r := h.do("POST", path, nil, adminToken)
		if r.status != http.StatusServiceUnavailable || str(r.body["error"]) != "unavailable" {
			t.Errorf("POST %s on a broken pod: %d %s, want 503 unavailable", path, r.status, trim(r.raw))
		}
		g := h.do("GET", strings.Replace(path, "POST", "", 1), nil, adminToken)
		for _, leak := range []string{user, "Access denied", "127.0.0.1", "Error 1045"} {
			if strings.Contains(r.raw, leak) || strings.Contains(g.raw, leak) {
				t.Errorf("%s names %q: %s / %s", path, leak, trim(r.raw), trim(g.raw))
			}
		}
	}
	// /readyz failed for pod-b and pod-c: it must have said which and why
	// (as a class) without the DSN, and without the drivers' errors, which
	// name the user and the address.
	if r := h.do("GET", "/readyz", nil, ""); !strings.Contains(r.raw, `"pod":"pod-b","mysql":"auth_failed"`) || !strings.Contains(r.raw, `"pod":"pod-c","mysql":"unreachable"`) {
		t.Errorf("/readyz does not report the failing pods and why: %s", trim(r.raw))
	} else if strings.Contains(r.raw, user) || strings.Contains(r.raw, "127.0.0.1") {
		t.Errorf("/readyz without the token names the user or an address: %s", r.raw)
	} else {
		t.Logf("/readyz: %s", r.raw)
	}
	logs := e.log.String()
	if !strings.Contains(logs, "authority store failed") && !strings.Contains(logs, "failed its health check") {
		t.Error("the failing pod-b calls logged no store error: the log check would prove nothing")
	}
	if !strings.Contains(logs, "store failed its ping") || !strings.Contains(logs, "Access denied") {
		t.Error("/readyz logged no driver error for pod-b: the log check would prove nothing")
	}
	for _, s := range secrets {
		if strings.Contains(logs, s) {
			i := strings.Index(logs, s)
			t.Errorf("the log contains a secret (%.6s...) near: %q", s, logs[max(0, i-200):min(len(logs), i+50)])
		}
	}
	// A DSN cell.Open cannot parse is not echoed in its error.
	bad := "u:" + deadPW + "@tcp(127.0.0.1:1)"
	_, err := cell.Open(context.Background(), cell.Config{Topology: &topology.Config{
		ControlDSN: bad, FlagsFile: filepath.Join(t.TempDir(), "flags.json"), DefaultRule: "pod:p",
		Pods: []topology.Pod{{Name: "p", MySQLDSN: bad, RedisAddr: "127.0.0.1:1", Shops: []int64{1}}}}})
	if err == nil {
		t.Error("cell.Open accepted a DSN without a database slash")
	} else if strings.Contains(err.Error(), deadPW) {
		t.Errorf("cell.Open's error contains the DSN password: %v", err)
	}
}

// TestReadyzHidesDriverErrors proves that /readyz, which needs no token,
// says which store of which pod failed and why as a class, but never the
// driver's error: pod-b logs in to the real MariaDB as a user that does
// not exist ("Error 1045 (28000): Access denied for user '...'@'...'"),
// pod-c's MySQL and Redis are a refused port ("dial tcp 127.0.0.1:1:
// connect: connection refused"). Without a token, and with a wrong one,
// the answer names neither the user nor any host or address; with the
// admin token it carries the drivers' errors. The server's log has them
// in full, and not the password.
func TestReadyzHidesDriverErrors(t *testing.T) {
	t.Parallel()
	user, password := "rsv_nouser_"+randHex(4), "s3cr3t-ready-"+randHex(6)
	podB, podC := testdb.New(t), testdb.New(t)
	mariadb, err := mysql.ParseDSN(testdb.ServerDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{topo: func(c *topology.Config) {
		c.Pods = append(c.Pods,
			topology.Pod{Name: "pod-b", MySQLDSN: withUser(t, podB.DSN, user, password, ""), RedisAddr: c.Pods[0].RedisAddr,
				RedisPrefix: c.Pods[0].RedisPrefix + "b:", Shops: []int64{2001}},
			topology.Pod{Name: "pod-c", MySQLDSN: withUser(t, podC.DSN, user, password, "127.0.0.1:1"), RedisAddr: "127.0.0.1:1",
				RedisPrefix: c.Pods[0].RedisPrefix + "c:", Shops: []int64{3001}})
	}})
	hs := httptest.NewServer(e.srv.Handler())
	t.Cleanup(hs.Close)
	h := &harness{t: t, http: hs, logBuf: e.log}

	for _, token := range []string{"", adminToken + "x"} {
		r := h.do("GET", "/readyz", nil, token)
		var v wire.Ready
		// Failing pods are degraded, not a reason to take the replica
		// out of service.
		if err := json.Unmarshal([]byte(r.raw), &v); err != nil || r.status != http.StatusOK || !v.Ready || len(v.Degraded) == 0 {
			t.Fatalf("readyz (token %t): %d %s, want 200, ready, degraded pods listed", token != "", r.status, r.raw)
		}
		want := map[string]wire.StoreHealth{
			"control": {Pod: "control", MySQL: "ok", OK: true},
			"pod-a":   {Pod: "pod-a", MySQL: "ok", Redis: "ok", OK: true},
			"pod-b":   {Pod: "pod-b", MySQL: "auth_failed", Redis: "ok"},
			"pod-c":   {Pod: "pod-c", MySQL: "unreachable", Redis: "unreachable"},
		}
		for _, got := range v.Stores {
			if got.Pod == "pod-c" && got.Redis == "timeout" {
				// go-redis retries a refused dial with 100ms pauses (about
				// 400ms in all); on a loaded machine the 1s budget may run
				// out first. Either class says the same to a prober.
				got.Redis = "unreachable"
			}
			if got.Pod == "pod-a" && (got.MySQLBreaker != "closed" || got.RedisBreaker != "closed") {
				t.Errorf("readyz (token %t): the healthy pod's breakers %+v, want closed", token != "", got)
			}
			got.MySQLBreaker, got.RedisBreaker = "", "" // the failing pods' open once the health loop ran
			if got != want[got.Pod] {
				t.Errorf("readyz (token %t): %+v, want %+v", token != "", got, want[got.Pod])
			}
			delete(want, got.Pod)
		}
		if len(want) != 0 {
			t.Errorf("readyz (token %t) does not list %v: %s", token != "", want, r.raw)
		}
		for _, leak := range []string{user, mariadb.Addr, "127.0.0.1", "localhost", "Access denied", "1045", "dial tcp", "refused", password} {
			if strings.Contains(r.raw, leak) {
				t.Errorf("readyz (token %t) contains %q: %s", token != "", leak, r.raw)
			}
		}
	}

	r := h.admin("GET", "/readyz", nil)
	var v wire.Ready
	if err := json.Unmarshal([]byte(r.raw), &v); err != nil || r.status != http.StatusOK {
		t.Fatalf("readyz with the token: %d %s", r.status, r.raw)
	}
	for _, s := range v.Stores {
		switch {
		case s.Pod == "pod-b" && !strings.Contains(s.MySQLError, user):
			t.Errorf("readyz with the token: pod-b's MySQL error does not name the user: %+v", s)
		case s.Pod == "pod-c" && (!strings.Contains(s.MySQLError, "127.0.0.1:1") || s.RedisError == ""):
			t.Errorf("readyz with the token: pod-c's errors are missing or do not name the address: %+v", s)
		case s.OK && (s.MySQLError != "" || s.RedisError != ""):
			t.Errorf("readyz with the token: a healthy store with an error: %+v", s)
		}
	}
	if strings.Contains(r.raw, password) {
		t.Errorf("readyz with the token contains the DSN password: %s", r.raw)
	}

	logs := e.log.String()
	if !strings.Contains(logs, user) || !strings.Contains(logs, `"reason":"auth_failed"`) || !strings.Contains(logs, `"reason":"unreachable"`) {
		t.Errorf("the server's log lacks the drivers' errors: %s", trim(logs))
	}
	if strings.Contains(logs, password) {
		t.Error("the server's log contains the DSN password")
	}
	if m := h.do("GET", "/metrics", nil, ""); !strings.Contains(m.raw, `reservoir_admin_auth_failures_total{reason="unauthorized"} 1`) {
		t.Error("the wrong token on /readyz was not counted as an auth failure")
	}
}

// ---- (c) request limits under a flood ----

// floodEnv is a server behind a real listener (Serve, with its
// http.Server timeouts), so slow clients meet ReadTimeout.
func floodEnv(t *testing.T) (*env, string) {
	t.Helper()
	e := newEnv(t, envOptions{cfg: func(c *server.Config) {
		c.ReadHeaderTimeout, c.ReadTimeout, c.WriteTimeout = time.Second, 2*time.Second, 5*time.Second
	}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Serve(ctx, ln, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return e, ln.Addr().String()
}

// rawPost opens a connection, sends a POST to path declaring length bytes
// of body, and streams the body: prefix, then filler, each write of chunk
// bytes after pause. It returns the answer's status (0 when the server
// cut the connection without one) and how many body bytes were written.
func rawPost(addr, path string, length int64, prefix string, chunk int, pause time.Duration) (status int, written int64, err error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, length); err != nil {
		return 0, 0, err
	}
	var n atomic.Int64
	stop := make(chan struct{})
	go func() {
		buf := []byte(prefix)
		filler := []byte(strings.Repeat("a", chunk))
		for n.Load() < length {
			select {
			case <-stop:
				return
			default:
			}
			if len(buf) == 0 {
				buf = filler
			}
			w, err := conn.Write(buf[:min(int64(len(buf)), length-n.Load())])
			n.Add(int64(w))
			if err != nil {
				return
			}
			buf = nil
			if pause > 0 {
				time.Sleep(pause)
			}
		}
	}()
	res, rerr := http.ReadResponse(bufio.NewReader(conn), nil)
	close(stop)
	if rerr != nil {
		return 0, n.Load(), rerr
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, n.Load(), nil
}

// TestOversizedBodyRejectedEarly proves that a body declared and sent as
// 1 GiB answers 413 body_too_large within seconds, after the client wrote
// only a small fraction of it (the server stops reading at MaxBodyBytes,
// 256 KiB, and closes the connection instead of draining it).
func TestOversizedBodyRejectedEarly(t *testing.T) {
	t.Parallel()
	_, addr := floodEnv(t)
	start := time.Now()
	status, written, err := rawPost(addr, "/v1/shops/1001/reservations", 1<<30, `{"token":"`, 64<<10, 0)
	if err != nil {
		t.Fatalf("no answer: %v (after writing %d bytes)", err, written)
	}
	if status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", status)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("413 took %s", d)
	}
	if written > 64<<20 {
		t.Errorf("the client wrote %d MiB before the 413: the server kept reading", written>>20)
	}
	t.Logf("413 after %s, %d KiB written", time.Since(start).Round(time.Millisecond), written>>10)
}

// TestFloodKeepsMemoryBounded proves that 48 concurrent hostile requests
// (16 sending 64 MiB bodies as fast as they can, 16 trickling a body 1 KiB
// every 100ms, 16 never finishing their headers) leave the server's heap
// bounded (HeapInuse, sampled every 10ms, grows by less than 64 MiB over
// the baseline: no request buffers more than MaxBodyBytes), that each one
// ends with a 4xx/429/503 answer or the server closing the connection
// (ReadHeaderTimeout/ReadTimeout), never a 2xx or 5xx other than 503, and
// that the server still answers /healthz and a valid reserve afterwards.
func TestFloodKeepsMemoryBounded(t *testing.T) {
	_, addr := floodEnv(t)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	peak.Store(base)
	sampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		var m runtime.MemStats
		for {
			select {
			case <-sampling:
				return
			case <-time.After(10 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
		}
	})

	const each = 16
	type outcome struct {
		kind   string
		status int
		err    error
	}
	out := make(chan outcome, 3*each)
	var wg sync.WaitGroup
	for range each {
		wg.Go(func() {
			s, _, err := rawPost(addr, "/v1/shops/1001/reservations", 64<<20, `{"token":"`, 64<<10, 0)
			out <- outcome{"oversized", s, err}
		})
		wg.Go(func() {
			s, _, err := rawPost(addr, "/v1/shops/1001/reservations", 200<<10, `{"token":"slow","lines":[`, 1<<10, 100*time.Millisecond)
			out <- outcome{"slow body", s, err}
		})
		wg.Go(func() {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				out <- outcome{"slow headers", 0, err}
				return
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
			_, _ = io.WriteString(conn, "POST /v1/shops/1001/reservations HTTP/1.1\r\nHost: x\r\nX-Slow: ")
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				out <- outcome{"slow headers", 0, err}
				return
			}
			res.Body.Close()
			out <- outcome{"slow headers", res.StatusCode, nil}
		})
	}
	start := time.Now()
	wg.Wait()
	close(out)
	close(sampling)
	sampler.Wait()
	elapsed := time.Since(start)

	counts := map[string]int{}
	for o := range out {
		switch {
		case o.status == 0:
			// The server cut the connection (a timeout), or answered and
			// closed before the reader saw it: the client got no promise.
			var ne net.Error
			if o.err != nil && errors.As(o.err, &ne) && ne.Timeout() {
				t.Errorf("%s: the client timed out waiting: the server neither answered nor closed", o.kind)
			}
		case o.status >= 400 && o.status < 500, o.status == http.StatusServiceUnavailable:
		default:
			t.Errorf("%s: status %d", o.kind, o.status)
		}
		counts[fmt.Sprintf("%s %d", o.kind, o.status)]++
	}
	growth := int64(peak.Load()) - int64(base)
	t.Logf("flood of %d requests over %s: %v; heap in use %d MiB at rest, peak +%d MiB", 3*each, elapsed.Round(time.Millisecond), counts, base>>20, growth>>20)
	if growth > 64<<20 {
		t.Errorf("heap in use grew by %d MiB under the flood (bound 64 MiB)", growth>>20)
	}
	res, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("healthz after the flood: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("healthz after the flood: %d", res.StatusCode)
	}
	body := `{"token":"after-flood","lines":[{"item":7,"quantity":1,"locations":[1]}]}`
	res, err = http.Post("http://"+addr+"/v1/shops/1001/reservations", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("reserve after the flood: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusConflict { // no stock: insufficient, answered by the store
		t.Fatalf("reserve after the flood: %d", res.StatusCode)
	}
}

// Load shedding: with every slot of the pod taken, an API call waits at
// most PodQueueWait, then answers 503 "overloaded" with Retry-After, and
// health still answers; once a slot frees, calls are served again.
func TestOverloadSheds(t *testing.T) {
	t.Parallel()
	h := setup(t, options{})
	release := server.OccupySlots(h.srv, "pod-a", h.cell.Pod("pod-a").DB.Stats().MaxOpenConnections)
	r := h.do("POST", "/v1/shops/1001/reservations", `{"token":"t","lines":[{"item":7,"quantity":1,"locations":[1]}]}`, "")
	if r.status != http.StatusServiceUnavailable || str(r.body["error"]) != "overloaded" || r.header.Get("Retry-After") == "" {
		t.Errorf("reserve with every slot taken: %d %v %v", r.status, r.body, r.header)
	}
	if why := problemOf(r, http.StatusServiceUnavailable, "overloaded"); why != "" {
		t.Errorf("reserve with every slot taken: %s", why)
	}
	if r := h.do("GET", "/healthz", "", ""); r.status != http.StatusOK {
		t.Errorf("healthz while overloaded: %d", r.status)
	}
	release()
	if r := h.do("POST", "/v1/shops/1001/reservations", `{"token":"t","lines":[{"item":7,"quantity":1,"locations":[1]}]}`, ""); r.status == http.StatusServiceUnavailable {
		t.Errorf("reserve after the slots freed: %d %v", r.status, r.body)
	}
}
