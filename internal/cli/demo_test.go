package cli

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seed31b0e981/reservoir/internal/server/servertest"
	"github.com/seed31b0e981/reservoir/internal/testdb"
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
// the controller; Ctrl-C stops it and drops what it created.
func TestDemoNewcomerPath(t *testing.T) {
	t.Parallel()
	server := testdb.ServerDSN(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "rsv_demo_" + hex.EncodeToString(b[:])
	out, errOut := &serveOutput{}, &serveOutput{}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan int, 1)
	started := time.Now()
	go func() {
		done <- Main(ctx, []string{"demo", "--duration", "80s", "--addr", "127.0.0.1:0", "--name", name,
			"--gate-duration", "3s", "--min-observations", "30", "--rate", "120", "--flash-every", "12s"}, out, errOut)
	}()
	dash := out.waitFor(t, regexp.MustCompile(`dashboard: +(http://\S+)`), 60*time.Second)
	base, token, _ := strings.Cut(dash, "/dashboard#token=")
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
			regexp.MustCompile(`reservoir_api_operations_total\{code="201",op="reserve",pod="pod-c"\} [1-9]`).MatchString(metrics) &&
			strings.Contains(metrics, `reservoir_compare_observations_total{class="match",mode="shadow",op="reserve",pod="pod-a"}`) {
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

	if path := os.Getenv(EnvScreenshot); path != "" {
		screenshot(t, dash, path)
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
	db, err := sql.Open("mysql", server)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var left int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name LIKE ?", name+"%").Scan(&left); err != nil || left != 0 {
		t.Errorf("databases left behind: %d (%v)", left, err)
	}
	t.Logf("demo output:\n%s", out.String())
}

// screenshot saves the live dashboard, after a few refreshes, as a PNG.
func screenshot(t *testing.T, dash, path string) {
	t.Helper()
	bctx := servertest.Browser(t, 1400, 1000)
	sctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, chromedp.Navigate(dash)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(sctx, chromedp.Poll[bool](`+(document.body.dataset.refreshes || 0) >= 2`, chromedp.WithPollingTimeout(40*time.Second))); err != nil {
		t.Fatal(err)
	}
	// Show a reconciliation too, and let a flash sale go by.
	if err := chromedp.Do(sctx, chromedp.Click(chromedp.CSS(`#reconcile tr[data-pod="pod-a"] button`))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(sctx, chromedp.Poll[bool](`+(document.body.dataset.refreshes || 0) >= 9`, chromedp.WithPollingTimeout(40*time.Second))); err != nil {
		t.Fatal(err)
	}
	// The click scrolled the page; the sticky header belongs at the top.
	if _, err := chromedp.Run(sctx, chromedp.Evaluate[bool](`window.scrollTo(0, 0), true`)); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
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
