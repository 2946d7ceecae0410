package cli

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// testTopology is a topology written for a test, with each pod's Redis.
type testTopology struct {
	path  string
	redis map[string]*testredis.Redis
}

// flags is the topology's flags file.
func (tt testTopology) flags() flagdoc.FlagsFile {
	return flagdoc.FlagsFile{Path: filepath.Join(filepath.Dir(tt.path), "flags.json")}
}

// podsTopology writes a topology of pods (fresh databases, a fresh Redis
// prefix each), pod i serving shop 100*(i+1), with a flags file (redis
// everywhere) and plan (when non-empty).
func podsTopology(t *testing.T, plan string, pods ...string) testTopology {
	t.Helper()
	dir := t.TempDir()
	flags := filepath.Join(dir, "flags.json")
	if err := (flagdoc.FlagsFile{Path: flags}).Write(flagdoc.NewFlags()); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "control_dsn = %q\nflags_file = %q\n", testdb.New(t).DSN, flags)
	if plan != "" {
		path := filepath.Join(dir, "plan.toml")
		write(t, path, plan)
		fmt.Fprintf(&b, "plan_file = %q\n", path)
	}
	tt := testTopology{path: filepath.Join(dir, "topology.toml"), redis: map[string]*testredis.Redis{}}
	for i, p := range pods {
		tt.redis[p] = testredis.New(t)
		fmt.Fprintf(&b, "[[pods]]\nname = %q\nmysql_dsn = %q\nredis_addr = %q\nredis_prefix = %q\nshops = [%d]\n",
			p, testdb.New(t).DSN, testredis.Addr(t), tt.redis[p].Prefix, 100*(i+1))
	}
	write(t, tt.path, b.String())
	return tt
}

// loseHold deletes a hold from the pod's Redis behind the stores' back.
func (tt testTopology) loseHold(t *testing.T, pod string, shop int64, token string) {
	t.Helper()
	r := tt.redis[pod]
	if n, err := r.Client.Del(context.Background(), fmt.Sprintf("%s{shop:%d}:hold:%s", r.Prefix, shop, token)).Result(); err != nil || n != 1 {
		t.Fatalf("delete hold %s of shop %d in %s's Redis: %d %v", token, shop, pod, n, err)
	}
}

// serving opens the topology's cell as `reservoir serve` does (relay,
// reaper, flags followed within milliseconds); closing it flushes its
// comparer.
func serving(t *testing.T, tt testTopology) *cell.Cell {
	t.Helper()
	topo, err := topology.Load(tt.path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cell.Open(context.Background(), cell.Config{Topology: topo, ReapInterval: 100 * time.Millisecond,
		FlagPollInterval: 10 * time.Millisecond, Logger: libraryLogger(false, nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeCell(t, c) })
	return c
}

func closeCell(t *testing.T, c *cell.Cell) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Errorf("close the cell: %v", err)
	}
}

// carts stocks item 1 of shop and reserves (and claims) n carts there
// through the pod's facade.
func carts(t *testing.T, c *cell.Cell, pod string, shop int64, n int) {
	t.Helper()
	f := c.Pod(pod).Facade
	ctx := context.Background()
	stock := int64(1000)
	if _, err := f.Adjust(ctx, &reservation.AdjustParams{Shop: shop, Item: 1, Location: 1, Available: &stock}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		token := fmt.Sprintf("%s-%d", pod, i)
		res, err := f.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: token, TTL: time.Minute,
			Lines: []reservation.Line{{Item: 1, Quantity: 1, Locations: []int64{1}}}})
		if err != nil || res.Status != reservation.StatusReserved {
			t.Fatalf("%s reserve %s: %+v %v", pod, token, res, err)
		}
		if i%2 == 0 {
			if _, err := f.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token}); err != nil {
				t.Fatalf("%s claim %s: %v", pod, token, err)
			}
		}
	}
	// In mysql_only the relay copies the holds into Redis a few
	// milliseconds later; the tests that then remove one from Redis need
	// it there first.
	if err := c.Pod(pod).Mirror.Flush(ctx, shop); err != nil {
		t.Fatalf("%s flush shop %d to Redis: %v", pod, shop, err)
	}
}

// order-pods ranks the pods by the calls each served, lowest first, in
// every mode: here no pod is in shadow yet (nothing is compared, every
// pod has 0 observations), and the quietest pod still comes first. Ranked
// by observations instead, the pods keep the topology's order, the
// busiest first.
func TestOrderPodsByTraffic(t *testing.T) {
	topo := podsTopology(t, "", "busy", "some", "idle")
	c := serving(t, topo)
	carts(t, c, "busy", 100, 40)
	carts(t, c, "some", 200, 4)
	closeCell(t, c) // the comparer's last flush
	code, out, errOut := run(t, "rollout", "--topology", topo.path, "order-pods")
	if code != 0 {
		t.Fatalf("order-pods: %d %q %q", code, out, errOut)
	}
	t.Log(out)
	var order []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		order = append(order, strings.Fields(line)[0])
	}
	if want := []string{"idle", "some", "busy"}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v:\n%s", order, want, out)
	}
	// busy: 1 adjust, 40 reserves, 20 claims, all in redis mode.
	if !strings.Contains(out, "61 calls served") || !strings.Contains(out, "(redis 61)") || !strings.Contains(out, "0 calls served") {
		t.Errorf("order-pods does not count the calls per mode:\n%s", out)
	}
	if code, out, _ := run(t, "rollout", "--topology", topo.path, "order-pods", "--since", "1ns"); code != 0 || !strings.Contains(out, "in the last 1ns") {
		t.Errorf("order-pods --since 1ns: %d %q", code, out)
	}
}

// reconcile prints drift one finding per line and notes only as a count
// (--notes or -v lists them), and exits 0 without drift whatever the
// notes: a pod in redis mode says MySQL is not written there, a pod in
// shadow mode has empty pools noted. Drift exits 1 and names what is
// left; --repair fixes it and exits 0, so `reconcile --repair && rollout
// kill` works.
func TestReconcileNotesDriftAndExit(t *testing.T) {
	topo := podsTopology(t, "", "pod-a", "pod-b")
	if _, _, err := topo.flags().Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.PodScope("pod-b"), authority.ModeMySQLOnly) }); err != nil {
		t.Fatal(err)
	}
	c := serving(t, topo)
	carts(t, c, "pod-a", 100, 6)
	carts(t, c, "pod-b", 200, 6)
	ten := int64(10)
	for item := int64(2); item <= 4; item++ { // stock never reserved: empty pools, noted
		if _, err := c.Pod("pod-b").Facade.Adjust(context.Background(), &reservation.AdjustParams{Shop: 200, Item: item, Location: 1, Available: &ten}); err != nil {
			t.Fatal(err)
		}
	}
	closeCell(t, c)

	code, out, errOut := run(t, "reconcile", "--topology", topo.path)
	t.Log(out)
	if code != 0 {
		t.Fatalf("reconcile without drift: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "pod pod-a: 1 shop in redis mode (MySQL not written in redis mode") {
		t.Errorf("pod-a in redis mode: %q", out)
	}
	if !strings.Contains(out, "pod pod-b: 1 shop, no drift; 3 notes, not drift (empty_pool 3) (--notes lists them)") {
		t.Errorf("pod-b's notes not counted apart: %q", out)
	}
	if strings.Contains(out, "note:") || strings.Contains(out, "drift:") {
		t.Errorf("notes printed one per line without --notes: %q", out)
	}
	for _, flag := range []string{"--notes", "-v"} {
		code, out, _ := run(t, "reconcile", "--topology", topo.path, "--pod", "pod-b", flag)
		if code != 0 || strings.Count(out, "pod-b note: shop 200 mysql empty_pool item ") != 3 {
			t.Errorf("reconcile %s: exit %d, want the 3 notes listed:\n%s", flag, code, out)
		}
	}

	// Planted: pod-b's Redis loses a hold MySQL decided.
	topo.loseHold(t, "pod-b", 200, "pod-b-1")
	code, out, errOut = run(t, "reconcile", "--topology", topo.path)
	if code != 1 || !strings.Contains(out, `pod-b drift: shop 200 redis missing_hold token "pod-b-1": MySQL (the decider) holds item 1 loc 1 ×1, Redis nothing`) ||
		!strings.Contains(errOut, "drift finding(s) left: `reservoir reconcile --repair` fixes") {
		t.Fatalf("reconcile with drift: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = run(t, "reconcile", "--topology", topo.path, "--repair")
	if code != 0 || !strings.Contains(out, "(repaired)") {
		t.Fatalf("reconcile --repair: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = run(t, "rollout", "--topology", topo.path, "--actor", "ana", "kill", "--scope", "pod:pod-b", "--reason", "after the repair")
	if code != 0 {
		t.Fatalf("rollout kill over mysql_only after reconcile --repair: exit %d\n%s%s", code, out, errOut)
	}
}

// suggestion is a command a message of the code suggests, and where.
type suggestion struct {
	cmd   string
	where string
}

// suggestedRe finds a suggested command: `reservoir ...` in a message.
var suggestedRe = regexp.MustCompile("`(reservoir [^`]+)`")

// suggestions lists every `reservoir ...` command the string literals of
// the module's code (tests aside) suggest: refusals, hints, usage.
func suggestions(t *testing.T) []suggestion {
	t.Helper()
	root := filepath.Join("..", "..")
	var out []suggestion
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			e, ok := n.(ast.Expr)
			if !ok {
				return true
			}
			s, ok := constString(e)
			if !ok {
				return true
			}
			where := fset.Position(e.Pos()).String()
			for _, m := range suggestedRe.FindAllStringSubmatch(s, -1) {
				out = append(out, suggestion{cmd: m[1], where: where})
			}
			for _, m := range proseRe.FindAllStringSubmatch(s, -1) {
				out = append(out, suggestion{cmd: "reservoir rollout " + m[1] + " " + m[2] + "=true", where: where})
			}
			return false // a concatenation's parts are in it
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// proseRe finds a rollout action's flag named in prose: "advance with
// --override", "kill again with --resynced".
var proseRe = regexp.MustCompile(`\b(advance|kill|release|status|history|auto|init|order-pods)(?: again)? with (--[a-z-]+)`)

// constString is the value of a string literal, or of a concatenation of
// them ("...(`reservoir " + "reconcile`)..." is one message).
func constString(e ast.Expr) (string, bool) {
	switch x := e.(type) {
	case *ast.BasicLit:
		if x.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(x.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		if x.Op != token.ADD {
			return "", false
		}
		l, ok1 := constString(x.X)
		r, ok2 := constString(x.Y)
		return l + r, ok1 && ok2
	case *ast.ParenExpr:
		return constString(x.X)
	}
	return "", false
}

// fill turns a suggested command into arguments: format verbs and
// placeholders (NAME, R, DSN, ...) become values of the right kind for
// the flag they follow.
func fill(cmd string) []string {
	args := strings.Fields(cmd)[1:]
	placeholder := regexp.MustCompile(`^(%[a-z]|[A-Z][A-Z_]*)$`)
	for i, a := range args {
		flag := ""
		if i > 0 {
			flag = strings.TrimLeft(args[i-1], "-")
		}
		switch {
		case strings.HasPrefix(a, "pod:"):
			args[i] = "pod:pod-a"
		case !placeholder.MatchString(a):
		case flag == "pod":
			args[i] = "pod-a"
		case flag == "scope":
			args[i] = "pod:pod-a"
		case flag == "shop" || flag == "limit":
			args[i] = "1"
		case flag == "since" || flag == "interval":
			args[i] = "1m"
		default:
			args[i] = "x"
		}
	}
	return args
}

// Every command a message of the code suggests is a real invocation: its
// command and action exist and so does each flag it names (each asks for
// its help, after every flag it names, and gets it), and so does a rollout
// action's flag named in prose ("kill again with --resynced"). A message
// naming a flag that does not exist (`reconcile --from mysql`, once)
// fails this.
// The checker fails on such a planted suggestion.
func TestSuggestedCommandsParse(t *testing.T) {
	all := suggestions(t)
	if len(all) < 5 {
		t.Fatalf("found %d suggested commands: the scan is broken", len(all))
	}
	bad := func(s string) string {
		args := append(fill(s), "-h")
		code, out, errOut := run(t, args...)
		if code != 0 || !strings.Contains(out, "usage: reservoir") || errOut != "" {
			return fmt.Sprintf("reservoir %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
		}
		return ""
	}
	seen := map[string]bool{}
	for _, s := range all {
		if seen[s.cmd] {
			continue
		}
		seen[s.cmd] = true
		if why := bad(s.cmd); why != "" {
			t.Errorf("%s suggests `%s`, which is not a reservoir invocation: %s", s.where, s.cmd, why)
		} else {
			t.Logf("ok: %s (%s)", s.cmd, s.where)
		}
	}
	for _, planted := range []string{"reservoir reconcile --from mysql", "reservoir rollout undo", "reservoir recon --pod x", "reservoir rollout status --force=true"} {
		if bad(planted) == "" {
			t.Errorf("the checker accepts the planted `%s`", planted)
		}
	}
}

// The refusals of a stage and of a kill switch leaving mysql_only while
// Redis lacks what MySQL decided name the command that fixes it; that
// command, run as written (the topology from $RESERVOIR_TOPOLOGY), fixes
// it, and the refused command then passes.
func TestRefusalsSuggestCommandsThatWork(t *testing.T) {
	topo := podsTopology(t, `pods = ["pod-a"]
[[stages]]
name = "mysql_only pod-a"
mode = "mysql_only"
pods = ["pod-a"]
[[stages]]
name = "mysql pod-a"
mode = "mysql"
pods = ["pod-a"]
[[stages]]
name = "mysql_only pod-a again"
mode = "mysql_only"
pods = ["pod-a"]
`, "pod-a")
	t.Setenv("RESERVOIR_TOPOLOGY", topo.path)
	t.Setenv("USER", "ana")
	mustRun := func(args ...string) string {
		t.Helper()
		code, out, errOut := run(t, args...)
		if code != 0 {
			t.Fatalf("reservoir %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	// refusedThenFixed runs args, wants it refused with a suggestion, runs
	// every suggestion as written, and runs args again.
	refusedThenFixed := func(args ...string) {
		t.Helper()
		code, out, errOut := run(t, args...)
		cmds := suggestedRe.FindAllStringSubmatch(errOut, -1)
		if code != 1 || len(cmds) == 0 {
			t.Fatalf("reservoir %s: exit %d, want refused with a command to run:\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		t.Logf("refused: %s", strings.TrimSpace(errOut))
		for _, m := range cmds {
			mustRun(strings.Fields(m[1])[1:]...)
		}
		mustRun(args...)
	}
	mustRun("rollout", "advance", "--confirm-mysql-only")
	c := serving(t, topo)
	carts(t, c, "pod-a", 100, 6) // the shop is handed to MySQL; the relay keeps Redis following

	topo.loseHold(t, "pod-a", 100, "pod-a-1")
	refusedThenFixed("rollout", "advance", "--override", "--reason", "nothing is compared in mysql_only")

	mustRun("rollout", "advance", "--override", "--reason", "back to mysql_only", "--confirm-mysql-only")
	carts(t, c, "pod-a", 100, 0)
	topo.loseHold(t, "pod-a", 100, "pod-a-3")
	refusedThenFixed("rollout", "kill", "--scope", "pod:pod-a", "--reason", "drill")
}
