package server_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// The operators' tokens the tests use, one per role.
const (
	viewerToken   = "test-viewer-token-0123456789"
	operatorToken = "test-operator-token-0123456789"
	aliceToken    = "test-alice-token-0123456789"
	carolToken    = "test-carol-token-0123456789"
)

// operatorEntry is one operators file entry for token.
func operatorEntry(name, token, role string) string {
	return fmt.Sprintf("[[operators]]\nname = %q\ntoken_sha256 = \"%x\"\nrole = %q\n\n", name, sha256.Sum256([]byte(token)), role)
}

// testOperators is an operators file with a viewer ("val"), an operator
// ("alice") and an admin ("ada", whose token is adminToken's own is not:
// the shared token stays the harness's).
var testOperators = operatorEntry("val", viewerToken, server.RoleViewer) +
	operatorEntry("alice", aliceToken, server.RoleOperator) +
	operatorEntry("otto", operatorToken, server.RoleOperator)

// Every route of the admin listener has an entry in the role table, and
// every entry is a route: a route added without deciding who may call it
// fails here (and the server would not start: admin panics). Then the
// table is what the server enforces: without a token every non-public
// route answers 401, and with a role below the one it needs 403
// forbidden, naming both roles.
func TestEveryAdminRouteHasARole(t *testing.T) {
	t.Parallel()
	h := setup(t, options{operators: testOperators})
	access := server.AdminAccess()
	registered := h.srv.AdminPatterns()
	if len(registered) < 10 {
		t.Fatalf("only %d admin listener routes registered: %v", len(registered), registered)
	}
	for _, p := range registered {
		role, ok := access[p]
		switch {
		case !ok:
			t.Errorf("route %s has no entry in adminAccess: say which role it needs (or public)", p)
		case role != "public" && server.RoleRank()[role] == 0:
			t.Errorf("route %s needs %q, which is no role", p, role)
		}
	}
	for p := range access {
		if !slices.Contains(registered, p) {
			t.Errorf("adminAccess lists %s, which is no route: remove it", p)
		}
	}
	tokens := map[string]string{server.RoleViewer: viewerToken, server.RoleOperator: operatorToken}
	for p, need := range access {
		method, path, _ := strings.Cut(p, " ")
		if need == "public" {
			continue
		}
		path = strings.ReplaceAll(path, "{file}", "x")
		if r := h.do(method, path, nil, anonymous); r.status != 401 || str(r.body["error"]) != "unauthorized" {
			t.Errorf("%s without a token: %d %s", p, r.status, r.raw)
		}
		for held, token := range tokens {
			if server.RoleRank()[held] >= server.RoleRank()[need] {
				continue
			}
			r := h.do(method, path, map[string]any{"scope": "pod:pod-a", "reason": "test"}, token)
			if r.status != 403 || str(r.body["error"]) != "forbidden" || str(r.body["role_needed"]) != need || str(r.body["role_held"]) != held ||
				!strings.Contains(str(r.body["detail"]), "needs role "+need) {
				t.Errorf("%s as a %s: %d %s", p, held, r.status, r.raw)
			}
		}
	}
	// Nothing a refused call asked for happened.
	f, err := h.flags.Read()
	if err != nil {
		t.Fatal(err)
	}
	if k := f.KillAt(flagdoc.PodScope("pod-a")); k.State != "" && k.State != authority.KillOff {
		t.Errorf("a refused kill switch call engaged it: %+v", k)
	}
}

// An operator's audited name is the one their token proves: alice
// calling the kill switch with X-Reservoir-Actor: bob is recorded as
// alice, in the answer, the flags and the audit. The shared admin token,
// which has no person behind it, keeps naming its actor with the header.
func TestOperatorCannotImpersonate(t *testing.T) {
	t.Parallel()
	h := setup(t, options{operators: testOperators})
	r := h.do("POST", "/admin/killswitch", map[string]any{"scope": "pod:pod-a", "reason": "p99 over 2s"}, aliceToken, "X-Reservoir-Actor", "bob")
	if r.status != 200 || str(r.body["actor"]) != "alice" {
		t.Fatalf("engage as alice, claiming bob: %d %s", r.status, r.raw)
	}
	f, err := h.flags.Read()
	if err != nil {
		t.Fatal(err)
	}
	if k := f.KillAt(flagdoc.PodScope("pod-a")); k.Actor != "alice" {
		t.Fatalf("the flags record the kill switch by %q, want alice", k.Actor)
	}
	r = h.do("DELETE", "/admin/killswitch?scope=pod:pod-a&reason=fixed", nil, adminToken, "X-Reservoir-Actor", "bob")
	if r.status != 200 || str(r.body["actor"]) != "bob" {
		t.Fatalf("release with the shared token as bob: %d %s", r.status, r.raw)
	}
	hist := h.do("GET", "/admin/rollout/history?limit=10", nil, viewerToken)
	if hist.status != 200 {
		t.Fatalf("history as a viewer: %d %s", hist.status, hist.raw)
	}
	audited := map[string]string{} // action: actor
	entries, _ := hist.body["entries"].([]any)
	for _, e := range entries {
		m, _ := e.(map[string]any)
		audited[str(m["action"])] = str(m["actor"])
	}
	if audited["kill"] != "alice" || audited["release"] != "bob" {
		t.Errorf("the audit records the engage by %q (want alice) and the release by %q (want bob): %s", audited["kill"], audited["release"], hist.raw)
	}
	if strings.Contains(h.logBuf.String(), aliceToken) || strings.Contains(h.logBuf.String(), adminToken) {
		t.Error("a token is in the log")
	}
}

// writeAtomic replaces path with content as an editor does: a new file
// renamed over the old one.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// eventually retries check for up to 5s, and fails with its last word.
func eventually(t *testing.T, what string, check func() string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		msg := check()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metric reads one sample of /metrics (0 when it is not there).
func (h *harness) metric(series string) float64 {
	h.t.Helper()
	r := h.do("GET", "/metrics", nil, anonymous)
	for _, l := range strings.Split(r.raw, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				h.t.Fatalf("%s: %v", l, err)
			}
			return f
		}
	}
	return 0
}

// The clients and operators files are reread when they change, without a
// restart: a token added works, a token removed answers 401. A file that
// no longer parses keeps the set loaded before in force, and is counted.
func TestCredentialsReloadOnChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := server.CredentialFiles{Clients: filepath.Join(dir, "clients.toml"), Operators: filepath.Join(dir, "operators.toml")}
	const oldClient, newClient = "old-client-token-0123456789", "new-client-token-0123456789"
	writeAtomic(t, files.Clients, clientEntry("old", oldClient, `"checkout"`, ""))
	writeAtomic(t, files.Operators, operatorEntry("alice", aliceToken, server.RoleViewer))
	h := setup(t, options{files: files})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.srv.WatchCredentials(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchCredentials: %v", err)
		}
	})
	const avail = "/v1/shops/1001/items/7/availability"
	if r := h.do("GET", avail, nil, oldClient); r.status != 200 {
		t.Fatalf("the old client before: %d %s", r.status, r.raw)
	}
	if r := h.do("GET", "/admin/rollout/status", nil, aliceToken); r.status != 200 {
		t.Fatalf("alice before: %d %s", r.status, r.raw)
	}
	time.Sleep(50 * time.Millisecond) // the watch is on

	writeAtomic(t, files.Clients, clientEntry("new", newClient, `"checkout"`, ""))
	writeAtomic(t, files.Operators, operatorEntry("carol", carolToken, server.RoleViewer))
	eventually(t, "the new files in force", func() string {
		for _, c := range []struct {
			path, token string
			want        int
		}{{avail, newClient, 200}, {avail, oldClient, 401}, {"/admin/rollout/status", carolToken, 200}, {"/admin/rollout/status", aliceToken, 401}} {
			if r := h.do("GET", c.path, nil, c.token); r.status != c.want {
				return fmt.Sprintf("%s with %s: %d, want %d", c.path, c.token[:8], r.status, c.want)
			}
		}
		return ""
	})
	if h.metric(`reservoir_credentials_last_load_timestamp_seconds{source="operators"}`) == 0 {
		t.Error("no last load time of the operators")
	}

	// A bad edit: both files stop parsing. Who was in stays in.
	writeAtomic(t, files.Clients, "[[clients]]\nname = \"x\"\n")
	writeAtomic(t, files.Operators, operatorEntry("carol", carolToken, "root"))
	eventually(t, "the reload errors counted", func() string {
		for _, src := range []string{"clients", "operators"} {
			if n := h.metric(`reservoir_credentials_reload_errors_total{source="` + src + `"}`); n < 1 {
				return fmt.Sprintf("%s: %v errors", src, n)
			}
		}
		return ""
	})
	if r := h.do("GET", avail, nil, newClient); r.status != 200 {
		t.Errorf("the client after a bad edit: %d %s", r.status, r.raw)
	}
	if r := h.do("GET", "/admin/rollout/status", nil, carolToken); r.status != 200 {
		t.Errorf("carol after a bad edit: %d %s", r.status, r.raw)
	}
	if !strings.Contains(h.logBuf.String(), "credentials reload failed") || !strings.Contains(h.logBuf.String(), `unknown role \"root\"`) {
		t.Errorf("the log does not say why the reload failed: %s", h.logBuf.String())
	}
}

// A Kubernetes Secret volume updates by swapping a symlink (..data) to a
// new directory, the files being symlinks through it: the watch on the
// directory sees it.
func TestCredentialsReloadSecretVolumeSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	version := func(n int, operators string) {
		v := filepath.Join(dir, fmt.Sprintf("..2026_12_07_%d", n))
		if err := os.Mkdir(v, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(v, "operators.toml"), []byte(operators), 0o400); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(v), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version(1, operatorEntry("alice", aliceToken, server.RoleOperator))
	if err := os.Symlink("..data/operators.toml", filepath.Join(dir, "operators.toml")); err != nil {
		t.Fatal(err)
	}
	h := setup(t, options{files: server.CredentialFiles{Operators: filepath.Join(dir, "operators.toml")}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = h.srv.WatchCredentials(ctx) }()
	if r := h.do("GET", "/admin/rollout/status", nil, aliceToken); r.status != 200 {
		t.Fatalf("alice before: %d %s", r.status, r.raw)
	}
	time.Sleep(50 * time.Millisecond)
	version(2, operatorEntry("carol", carolToken, server.RoleOperator))
	eventually(t, "the swapped Secret in force", func() string {
		if r := h.do("GET", "/admin/rollout/status", nil, carolToken); r.status != 200 {
			return fmt.Sprintf("carol: %d", r.status)
		}
		if r := h.do("GET", "/admin/rollout/status", nil, aliceToken); r.status != 401 {
			return fmt.Sprintf("alice: %d", r.status)
		}
		return ""
	})
}

// SIGHUP calls ReloadCredentials: it applies the files at once, without a
// watch, the shared admin token's file included; a token file that is
// too short keeps the token before.
func TestCredentialsReloadOnHangup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := server.CredentialFiles{Operators: filepath.Join(dir, "operators.toml"), AdminToken: filepath.Join(dir, "admin-token")}
	writeAtomic(t, files.Operators, operatorEntry("alice", aliceToken, server.RoleOperator))
	writeAtomic(t, files.AdminToken, adminToken+"\n")
	h := setup(t, options{files: files})
	const rotated = "rotated-admin-token-0123456789"
	writeAtomic(t, files.Operators, operatorEntry("carol", carolToken, server.RoleOperator))
	writeAtomic(t, files.AdminToken, rotated)
	if r := h.do("GET", "/admin/rollout/status", nil, carolToken); r.status != 401 {
		t.Fatalf("carol before the reload: %d", r.status)
	}
	if err := h.srv.ReloadCredentials("SIGHUP"); err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]int{carolToken: 200, aliceToken: 401, rotated: 200, adminToken: 401} {
		if r := h.do("GET", "/admin/rollout/status", nil, token); r.status != want {
			t.Errorf("%s after the reload: %d, want %d", token[:10], r.status, want)
		}
	}
	// Too short a token, and an operator with the shared token's secret:
	// both refused, what was loaded stays.
	writeAtomic(t, files.AdminToken, "short")
	if err := h.srv.ReloadCredentials("SIGHUP"); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("a short admin token reloaded: %v", err)
	}
	writeAtomic(t, files.AdminToken, rotated)
	writeAtomic(t, files.Operators, operatorEntry("carol", rotated, server.RoleViewer))
	if err := h.srv.ReloadCredentials("SIGHUP"); err == nil || !strings.Contains(err.Error(), `operator "carol"`) {
		t.Errorf("an operator with the shared token's secret reloaded: %v", err)
	}
	for token, want := range map[string]int{carolToken: 200, rotated: 200} {
		if r := h.do("GET", "/admin/rollout/status", nil, token); r.status != want {
			t.Errorf("%s after the refused reloads: %d, want %d", token[:10], r.status, want)
		}
	}
	if n := h.metric(`reservoir_credentials_reload_errors_total{source="admin_token"}`); n != 1 {
		t.Errorf("admin_token reload errors: %v, want 1", n)
	}
	if n := h.metric(`reservoir_credentials_reload_errors_total{source="operators"}`); n != 1 {
		t.Errorf("operators reload errors: %v, want 1", n)
	}
	if strings.Contains(h.logBuf.String(), rotated) {
		t.Error("the admin token is in the log")
	}
}

// The operators file is decoded strictly, and each mistake is named.
func TestParseOperators(t *testing.T) {
	t.Parallel()
	good := operatorEntry("alice", aliceToken, "admin")
	if o, err := server.ParseOperators([]byte(good)); err != nil || !slices.Equal(o.Names(), []string{"alice"}) {
		t.Fatalf("%v %v", o, err)
	}
	for name, c := range map[string]struct{ doc, want string }{
		"empty":         {"", "no [[operators]]"},
		"unknown key":   {good + "[[operators]]\nname = \"b\"\ntoken_sha256 = \"" + strings.Repeat("a", 64) + "\"\nrole = \"viewer\"\nroles = [\"admin\"]\n", "roles"},
		"no role":       {"[[operators]]\nname = \"b\"\ntoken_sha256 = \"" + strings.Repeat("a", 64) + "\"\n", "operators[0].role: is required"},
		"unknown role":  {"[[operators]]\nname = \"b\"\ntoken_sha256 = \"" + strings.Repeat("a", 64) + "\"\nrole = \"root\"\n", `unknown role "root"`},
		"bad digest":    {"[[operators]]\nname = \"b\"\ntoken_sha256 = \"abc\"\nrole = \"viewer\"\n", "64 hex digits"},
		"reserved name": {operatorEntry("admin-token", aliceToken, "admin"), "shared admin token's identity"},
		"same name":     {good + operatorEntry("alice", carolToken, "viewer"), `operators[1].name "alice" is used twice`},
		"same token":    {good + operatorEntry("bob", aliceToken, "viewer"), `the same token as "alice"`},
	} {
		if _, err := server.ParseOperators([]byte(c.doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	token, entry, err := server.NewOperatorCredential("dana", "operator")
	if err != nil {
		t.Fatal(err)
	}
	if o, err := server.ParseOperators([]byte(entry)); err != nil || strings.Contains(entry, token) || !slices.Equal(o.Names(), []string{"dana"}) {
		t.Errorf("the new operator's entry %q: %v", entry, err)
	}
}

// docs/api.md's table of routes and roles is the server's: every route
// that needs a token is there with its role, and nothing else is.
func TestRoleTableDocumented(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, doc, ok := strings.Cut(string(b), "\n### Operators and roles\n")
	if !ok {
		t.Fatal(`docs/api.md has no "### Operators and roles"`)
	}
	doc, _, _ = strings.Cut(doc, "\n### ")
	row := regexp.MustCompile("(?m)^\\| `([A-Z]+ /admin/[^`]*)` \\| `([a-z]+)` \\|$")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(doc, -1) {
		documented[m[1]] = m[2]
	}
	want := map[string]string{}
	for p, role := range server.AdminAccess() {
		if role != "public" {
			want[p] = role
		}
	}
	if len(documented) == 0 || !maps.Equal(documented, want) {
		t.Errorf("docs/api.md's roles %v, the server's %v", documented, want)
	}
}
