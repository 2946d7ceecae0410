package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/internal/server/servertest"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
)

// EnvScreenshot, when set to a path, makes TestDemoNewcomerPath save a
// screenshot of the live demo's dashboard there (docs/dashboard.png is
// made this way: `make screenshot`).
const EnvScreenshot = "RESERVOIR_SCREENSHOT"

// Acceptance (a): the newcomer's path, scripted. `reservoir demo` (the
// README's first command, run here in process on the servers the test
// script started) brings three pods up; within a minute the API shows
// live compare stats and the metrics show reservation counters; the
// rollout walks from shadow to mysql on the lowest-traffic pod through
// the controller; then the incident (issue 16 f): the fault in pod-a's
// MySQL makes the real comparer count mismatches, a ceiling gate breaks,
// the controller's automatic step engages the kill switch, and the demo
// repairs MySQL and releases it. Ctrl-C stops it and drops what it
// created. With RESERVOIR_SCREENSHOT the dashboard is photographed while
// the kill switch holds (`make screenshot`).
func TestDemoNewcomerPath(t *testing.T) {
	t.Parallel()
	server := testdb.ServerDSN(t)
	name := randomDemoName()
	shot := os.Getenv(EnvScreenshot)
	hold := "10s"
	if shot != "" {
		hold = "60s" // the browser's refreshes take their time on a loaded machine
	}
	out, errOut := &serveOutput{}, &serveOutput{}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan int, 1)
	started := time.Now()
	go func() {
		done <- Main(ctx, []string{"demo", "--duration", "4m", "--addr", "127.0.0.1:0", "--name", name,
			"--gate-duration", "3s", "--min-observations", "30", "--rate", "120", "--flash-every", "12s",
			"--incident-after", "4s", "--incident-hold", hold}, out, errOut)
	}()
	dash := out.waitFor(t, regexp.MustCompile(`dashboard: +(http://\S+)`), 60*time.Second)
	base, token, _ := strings.Cut(dash, "/dashboard#token=")
	topo := out.waitFor(t, regexp.MustCompile(`reservoir rollout --topology (\S+) status`), time.Second)
	t.Logf("demo up in %s: %s", time.Since(started).Round(time.Millisecond), base)

	get := func(path, tok string) (int, string) {
		req, _ := http.NewRequest("GET", base+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	if code, page := get("/dashboard", ""); code != 200 || !strings.Contains(page, "reservoir") {
		t.Fatalf("dashboard page: %d", code)
	}
	// Live data within a minute of starting.
	live := regexp.MustCompile(`^\{"pod":"","since":"[^"]+","observations":([1-9][0-9]*),`)
	for {
		code, stats := get("/admin/stats?since=10m", token)
		_, metrics := get("/metrics", "")
		if code == 200 && live.MatchString(stats) &&
			regexp.MustCompile(`reservoir_api_operations_total\{code="201",op="reserve",reservoir_pod="pod-c"\} [1-9]`).MatchString(metrics) &&
			strings.Contains(metrics, `reservoir_compare_observations_total{class="match",mode="shadow",op="reserve",reservoir_pod="pod-a"}`) {
			t.Logf("live data %s after the start: %s", time.Since(started).Round(time.Millisecond), live.FindStringSubmatch(stats)[0])
			break
		}
		if time.Since(started) > time.Minute {
			t.Fatalf("no live data within a minute: stats %d %s\noutput:\n%s", code, trimOut(stats), out.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
	// The walk: shadow on pod-a, then mysql on it, through the controller.
	out.waitFor(t, regexp.MustCompile(`(applied "mysql on pod-a")`), 50*time.Second)
	if _, st := get("/admin/rollout/status", token); !strings.Contains(st, `"pod":"pod-a","mode":"mysql"`) {
		t.Errorf("status after the walk: %s", trimOut(st))
	}
	t.Logf("rollout walked to mysql on pod-a %s after the start", time.Since(started).Round(time.Millisecond))

	// The incident: the fault, then the controller's kill switch.
	injectedHolds := out.waitFor(t, regexp.MustCompile(`INCIDENT: a maintenance script writes ([1-9][0-9]*) holds`), 30*time.Second)
	injected := time.Now()
	out.waitFor(t, regexp.MustCompile(`(the automatic controller engaged the kill switch on pod-a)`), 90*time.Second)
	t.Logf("incident: the kill switch engaged %s after the fault", time.Since(injected).Round(time.Millisecond))
	st := demoRolloutStatus(t, topo)
	if k := st.pod("pod-a").Kill; k.State != "redis" || k.Actor != "demo (auto)" {
		t.Errorf("pod-a's kill switch after the incident: %+v", k)
	}
	if n := st.Evidence.Classes["allocation_mismatch"] + st.Evidence.Classes["outcome_mismatch"]; n == 0 {
		t.Errorf("no mismatch counted: %+v", st.Evidence)
	}
	// The controller engaged the switch on a ceiling that broke; the
	// status read a moment later can sit just under it again, diluted by
	// the matches that arrived since (the incident's rate starts near the
	// ceiling and climbs while MySQL, the shadow now, still disagrees). So
	// the evidence is waited for, a few seconds at most, well inside the
	// ten seconds before the demo repairs MySQL.
	breaking := ""
	for deadline := time.Now().Add(5 * time.Second); ; {
		for _, g := range st.Gates {
			if g.Breaking && strings.HasPrefix(g.Gate, "max_rate:") {
				breaking = g.Gate + ": " + g.Why
			}
		}
		if breaking != "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
		st = demoRolloutStatus(t, topo)
	}
	if breaking == "" {
		t.Errorf("no ceiling gate breaking: %+v", st.Gates)
	}
	kill := findAudit(demoRolloutHistory(t, topo), "kill", "demo (auto)")
	if kill == nil || kill.Scope != "pod:pod-a" || !strings.Contains(kill.Reason, "broke") {
		t.Errorf("the controller's kill in the audit: %+v", kill)
	}
	t.Logf("evidence: %v; %s", st.Evidence.Classes, breaking)

	if shot != "" {
		screenshot(t, dash, shot)
	}

	// Recovery: repaired, released, MySQL decides pod-a again.
	out.waitFor(t, regexp.MustCompile(`(released the kill switch on pod-a)`), 120*time.Second)
	st = demoRolloutStatus(t, topo)
	if p := st.pod("pod-a"); p.Kill.State != "off" || p.Mode != "mysql" || p.Effective.Mode != "mysql" || p.Effective.Kill != "off" {
		t.Errorf("pod-a after the recovery: %+v", p)
	}
	if rel := findAudit(demoRolloutHistory(t, topo), "release", "demo"); rel == nil || rel.Scope != "pod:pod-a" {
		t.Errorf("the release in the audit: %+v", rel)
	}
	released := time.Now()
	// Issue 27 (7): the repair says what it removed and what remains, in
	// its own words and in reconcile's summary ...
	if o := out.String(); !strings.Contains(o, "removed the "+injectedHolds+" holds the maintenance script injected, 0 remain") ||
		!regexp.MustCompile(`Reconcile's summary: pod pod-a: .*[:;] the repair removed [1-9][0-9]* of MySQL's shadow holds that Redis does not have \(shadow_extra_hold\), [0-9]+ of them remains?`).MatchString(o) {
		t.Errorf("the repair does not say that it removed the %s injected holds and that none remain:\n%s", injectedHolds, o)
	}
	// ... and it is this replica's last reconcile of pod-a: the drift
	// panel (GET /admin/reconcile) shows it, a repair, clean after it. It
	// said "not run by this replica yet" (404 not_run).
	if code, rec := get("/admin/reconcile?pod=pod-a", token); code != 200 || !strings.Contains(rec, `"clean":true`) || !strings.Contains(rec, `"repair":true`) ||
		!strings.Contains(rec, "the repair removed") {
		t.Errorf("the drift panel's pod-a after the demo's repair: %d %s", code, trimOut(rec))
	}
	t.Logf("recovered %s after the start", time.Since(started).Round(time.Millisecond))

	// Issue 27 (7): the progress lines show pod-a's mismatch over the
	// dashboard's window, and say which; they showed the rate since the
	// start (8.50% after the recovery) beside the page's last 10 s. Once
	// the window holds nothing of the incident, the console and the
	// page's series agree (read as soon as the line is printed: the
	// series moves on every 2 s).
	time.Sleep(time.Until(released.Add(11 * time.Second)))
	from := len(out.String())
	progressRE := regexp.MustCompile(`pod-a mysql \[relay lag [^\]]*\] \[[0-9.]+ compared/s, mismatch ([0-9.<]+)%, last 10 s\]`)
	var console string
	for deadline := time.Now().Add(15 * time.Second); console == ""; {
		if m := progressRE.FindStringSubmatch(out.String()[from:]); m != nil {
			console = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no progress line with pod-a's mismatch over the last 10 s after the recovery:\n%s", out.String()[from:])
		}
		time.Sleep(50 * time.Millisecond)
	}
	var ser struct {
		WindowMs int64 `json:"window_ms"`
		Pods     map[string][]struct {
			ClassRates map[string]float64 `json:"class_rates"`
		} `json:"pods"`
	}
	if code, body := get("/admin/series?pod=pod-a&points=1", token); code != 200 || json.Unmarshal([]byte(body), &ser) != nil || len(ser.Pods["pod-a"]) != 1 || ser.WindowMs != 10000 {
		t.Fatalf("the dashboard's series: %d %s", code, trimOut(body))
	}
	page := 0.0
	for c, r := range ser.Pods["pod-a"][0].ClassRates {
		if c == "outcome_mismatch" || c == "allocation_mismatch" || c == "shadow_missing" {
			page += 100 * r
		}
	}
	shown, _ := strconv.ParseFloat(strings.TrimPrefix(console, "<"), 64)
	t.Logf("pod-a's mismatch %s after the recovery: console %s%%, dashboard %.2f%% (last 10 s)", time.Since(released).Round(time.Second), console, page)
	if d := shown - page; d > 5 || d < -5 {
		t.Errorf("pod-a's mismatch after the recovery: console %s%%, dashboard %.2f%%: not the same window", console, page)
	}

	// One spelling of every command printed (issue 27, 7): the program as
	// it was run (here a test binary: reservoir).
	spellings := map[string]bool{}
	for _, m := range regexp.MustCompile(`(\S*reservoir) (?:rollout|reconcile|demo clean)\b`).FindAllStringSubmatch(out.String(), -1) {
		spellings[strings.TrimLeft(m[1], "`")] = true
	}
	if len(spellings) != 1 || !spellings["reservoir"] {
		t.Errorf("the demo spells its commands %v, want one way", spellings)
	}

	stop() // Ctrl-C
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("demo exited %d:\n%s\n%s", code, out.String(), errOut.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the demo did not stop:\n%s", out.String())
	}
	if o := out.String(); !strings.Contains(o, "stopping (interrupted)") || !strings.Contains(o, "dropped the demo's databases") {
		t.Errorf("the demo's goodbye:\n%s", o)
	}
	assertNothingLeft(t, server, name, "")
	t.Logf("demo output:\n%s", out.String())
}

// statusJSON is the part of `rollout status --json` the demo tests read.
type statusJSON struct {
	Pods     []podJSON `json:"pods"`
	Evidence struct {
		Observations int64            `json:"observations"`
		Classes      map[string]int64 `json:"classes"`
	} `json:"evidence"`
	Gates []struct {
		Gate     string `json:"gate"`
		Breaking bool   `json:"breaking"`
		Why      string `json:"why"`
	} `json:"gates"`
}

// podJSON is a pod of statusJSON.
type podJSON struct {
	Pod  string `json:"pod"`
	Mode string `json:"mode"`
	Kill struct {
		State  string `json:"state"`
		Actor  string `json:"actor"`
		Reason string `json:"reason"`
	} `json:"kill"`
	Effective struct {
		Mode string `json:"mode"`
		Kill string `json:"kill"`
	} `json:"effective"`
}

func (s statusJSON) pod(name string) podJSON {
	for _, p := range s.Pods {
		if p.Pod == name {
			return p
		}
	}
	return podJSON{}
}

// auditJSON is an entry of `rollout history --json`.
type auditJSON struct {
	Actor, Action, Scope, Reason string
}

// demoRolloutStatus runs `reservoir rollout status --json` on the demo's
// topology: what an operator would see.
func demoRolloutStatus(t *testing.T, topo string) statusJSON {
	t.Helper()
	var st statusJSON
	runJSON(t, &st, "rollout", "--topology", topo, "status", "--json")
	return st
}

func demoRolloutHistory(t *testing.T, topo string) []auditJSON {
	t.Helper()
	var hs []auditJSON
	runJSON(t, &hs, "rollout", "--topology", topo, "history", "--json", "--limit", "50")
	return hs
}

func runJSON(t *testing.T, into any, args ...string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), args, &out, &errOut); code != 0 {
		t.Fatalf("%s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	if err := json.Unmarshal(out.Bytes(), into); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
}

func findAudit(hs []auditJSON, action, actor string) *auditJSON {
	for i := range hs {
		if hs[i].Action == action && hs[i].Actor == actor {
			return &hs[i]
		}
	}
	return nil
}

// assertNothingLeft checks that no database and no Redis key of the demo
// named name is left, nor its directory dir (when given).
func assertNothingLeft(t *testing.T, server, name, dir string) {
	t.Helper()
	db, err := sql.Open("mysql", server)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var left int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name LIKE ?", name+"\\_%").Scan(&left); err != nil || left != 0 {
		t.Errorf("databases of %s left behind: %d (%v)", name, left, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: testredis.Addr(t)})
	defer rdb.Close()
	var keys []string
	iter := rdb.Scan(context.Background(), 0, name+":*", 1000).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil || len(keys) != 0 {
		t.Errorf("Redis keys of %s left behind: %d (%v), e.g. %.3q", name, len(keys), err, keys)
	}
	if dir != "" {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the demo's directory %s is left behind (%v)", dir, err)
		}
	}
}

// screenshot saves the live dashboard, after a few refreshes, as a PNG:
// during the incident, with the kill switch engaged and the evidence in.
func screenshot(t *testing.T, dash, path string) {
	t.Helper()
	// The top of the page, down to the charts: the pods, the rollout's
	// gates and history, the mismatch chart. The whole page, with every
	// shop and diff, is too tall for the README.
	bctx := servertest.Browser(t, 1400, 2300)
	sctx, cancel := context.WithTimeout(bctx, 50*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, chromedp.Navigate(dash)); err != nil {
		t.Fatal(err)
	}
	// A few refreshes fill the charts with the incident's minutes.
	if _, err := chromedp.Run(sctx, chromedp.Poll[bool](`+(document.body.dataset.refreshes || 0) >= 4`, chromedp.WithPollingTimeout(40*time.Second))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(sctx, chromedp.Evaluate[bool](`window.scrollTo(0, 0), true`)); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(sctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("dashboard screenshot: %s", path)
}

func trimOut(s string) string {
	if len(s) > 600 {
		return s[:600] + "..."
	}
	return s
}

// envDemoChild, set to the JSON list of a command's arguments, makes
// TestDemoChild run them as the binary does (Run: the process's signals,
// its real stdout) and exit with their status.
const envDemoChild = "RESERVOIR_DEMO_CHILD"

// TestDemoChild is the subprocess of TestDemoCleansUpAfterSignals; it
// runs only there.
func TestDemoChild(t *testing.T) {
	raw := os.Getenv(envDemoChild)
	if raw == "" {
		t.Skip("the child process of TestDemoCleansUpAfterSignals")
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		t.Fatal(err)
	}
	os.Exit(Run(args))
}

// Issue 16 f: Ctrl-C through `| tee` lost the cleanup (tee died, the
// demo's next write raised SIGPIPE, which killed it mid-cleanup), and so
// did a closed terminal (SIGHUP). The demo runs here as a process of its
// own with its stdout on a pipe, is sent the signal (or loses its reader),
// and must exit by itself having dropped every database, Redis key and
// file it made.
func TestDemoCleansUpAfterSignals(t *testing.T) {
	t.Parallel()
	server, redisAddr := testdb.ServerDSN(t), testredis.Addr(t)
	for _, c := range []struct {
		name      string
		closePipe bool      // the reader of stdout goes away (tee killed by the same Ctrl-C)
		sig       os.Signal // then this is sent, if any
	}{
		{"SIGHUP", false, syscall.SIGHUP},
		{"Ctrl-C through a pipe whose reader died", true, syscall.SIGINT},
		{"the pipe's reader died", true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			name := randomDemoName()
			args, _ := json.Marshal([]string{"demo", "--name", name, "--addr", "127.0.0.1:0", "--mysql-dsn", server, "--redis-addr", redisAddr,
				"--rate", "20", "--workers", "2", "--incident=false"})
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestDemoChild$")
			cmd.Env = append(os.Environ(), envDemoChild+"="+string(args))
			out, errOut := &serveOutput{}, &serveOutput{}
			cmd.Stdout, cmd.Stderr = w, errOut
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close() // the child's copy is its stdout
			started := time.Now()
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			defer func() {
				if cmd.ProcessState == nil {
					_ = cmd.Process.Kill()
				}
			}()
			go func() { _, _ = io.Copy(out, r) }()
			dir := out.waitFor(t, regexp.MustCompile(`files: +(\S+) \(`), 90*time.Second)
			out.waitFor(t, regexp.MustCompile(`(What to try:)`), 10*time.Second)
			if c.closePipe {
				r.Close()
			} else {
				defer r.Close()
			}
			if c.sig != nil {
				if err := cmd.Process.Signal(c.sig); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case err := <-exited:
				st := cmd.ProcessState
				if !st.Exited() {
					t.Fatalf("the demo did not exit by itself: %v (%s)\nstdout:\n%s\nstderr:\n%s", err, st, out.String(), errOut.String())
				}
				t.Logf("exited %d, %s after the start", st.ExitCode(), time.Since(started).Round(time.Millisecond))
			case <-time.After(2 * time.Minute):
				t.Fatalf("the demo did not stop:\n%s\nstderr:\n%s", out.String(), errOut.String())
			}
			assertNothingLeft(t, server, name, dir)
			if t.Failed() {
				t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
			}
		})
	}
}

// Issue 16 f: --keep keeps everything and prints the command that removes
// it; that command, run as printed, leaves nothing behind.
func TestDemoKeepPrintsItsCleanCommand(t *testing.T) {
	t.Parallel()
	server, redisAddr := testdb.ServerDSN(t), testredis.Addr(t)
	name := randomDemoName()
	out, errOut := &serveOutput{}, &serveOutput{}
	code := Main(context.Background(), []string{"demo", "--name", name, "--addr", "127.0.0.1:0", "--duration", "2s", "--keep", "--incident=false",
		"--rate", "20", "--workers", "2", "--mysql-dsn", server, "--redis-addr", redisAddr}, out, errOut)
	if code != 0 {
		t.Fatalf("demo --keep: exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	dir := out.waitFor(t, regexp.MustCompile(`files: +(\S+) \(`), time.Second)
	clean := out.waitFor(t, regexp.MustCompile(`to remove exactly these: (.+)`), time.Second)

	// Kept: four databases, the pods' keys, the files.
	db, err := sql.Open("mysql", server)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var dbs int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name LIKE ?", name+`\_%`).Scan(&dbs); err != nil || dbs != 4 {
		t.Errorf("databases kept: %d (%v), want 4", dbs, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	iter := rdb.Scan(context.Background(), 0, name+":pod-a:*", 1000).Iterator()
	if !iter.Next(context.Background()) {
		t.Errorf("no Redis key kept under %s:pod-a: (%v)", name, iter.Err())
	}
	if _, err := os.Stat(filepath.Join(dir, "topology.toml")); err != nil {
		t.Errorf("files not kept: %v", err)
	}

	// The printed command, as a shell would split it.
	args := shellWords(t, clean)
	if len(args) < 3 || args[0] != "reservoir" || args[1] != "demo" || args[2] != "clean" {
		t.Fatalf("the clean command: %q", clean)
	}
	var cout, cerr bytes.Buffer
	if code := Main(context.Background(), args[1:], &cout, &cerr); code != 0 {
		t.Fatalf("%s: exit %d: %s", clean, code, cerr.String())
	}
	t.Logf("%s:\n%s", clean, cout.String())
	assertNothingLeft(t, server, name, dir)
}

// shellWords splits a command line as sh does for the quoting the demo
// prints: words apart by spaces, '...' and "..." kept whole.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("unbalanced quotes in %q", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

func randomDemoName() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "rsv_demo_" + hex.EncodeToString(b[:])
}

// Issue 27 (7): the demo's commands name the program as it was run, the
// spelling that works from where it was run.
func TestDemoProgramName(t *testing.T) {
	for arg0, want := range map[string]string{
		"bin/reservoir":                        "bin/reservoir", // make demo
		"./bin/reservoir":                      "./bin/reservoir",
		"reservoir":                            "reservoir", // on $PATH
		"/usr/local/bin/reservoir":             "/usr/local/bin/reservoir",
		"/tmp/go-build2871/b001/exe/reservoir": "go run ./cmd/reservoir", // go run ./cmd/reservoir demo
		"/tmp/go-build2871/b001/cli.test":      "reservoir",
	} {
		if got := programNameOf(arg0); got != want {
			t.Errorf("run as %s: %q, want %q", arg0, got, want)
		}
	}
}
