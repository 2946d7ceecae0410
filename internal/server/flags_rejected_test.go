package server_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seed31b0e981/reservoir/internal/server/servertest"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// rejectedMetric reads reservoir_rollout_flags_rejected from /metrics.
func (h *harness) rejectedMetric() string {
	h.t.Helper()
	m := regexp.MustCompile(`(?m)^reservoir_rollout_flags_rejected ([0-9]+)$`).FindStringSubmatch(h.do("GET", "/metrics", nil, "").raw)
	if m == nil {
		h.t.Fatal("/metrics lacks reservoir_rollout_flags_rejected")
	}
	return m[1]
}

// Acceptance (d): a flags document broken by hand (an unknown variant,
// "mysqll") is rejected by the replica, which keeps its last valid flags
// and says so: reservoir_rollout_flags_rejected goes to 1, the status
// carries the error with its line and column, and the dashboard shows it
// in a red banner (checked in headless Chromium). The kill switch works
// all the same, through the admin API and the dashboard's own call: it
// writes a valid document over the broken one, audited; the replica loads
// it, and the metric and the banner go back to 0 and hidden.
func TestRejectedFlagsDocumentIsVisible(t *testing.T) {
	t.Parallel()
	h := setup(t, options{plan: dashboardPlan})
	bctx := servertest.Browser(t, 1200, 900)
	ctx := context.Background()
	// An audited change: stage 0, shadow on pod-a, version 2.
	if _, err := h.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	h.waitDecision("pod-a", authority.ModeShadow, authority.KillOff)
	// A change made outside the controller (not audited): pod-b mysql,
	// version 3. The kill below keeps it: it builds on the flags this
	// replica answers from, newer than the audit's.
	if _, _, err := h.flags.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.PodScope("pod-b"), authority.ModeMySQL) }); err != nil {
		t.Fatal(err)
	}
	h.waitDecision("pod-b", authority.ModeMySQL, authority.KillOff)
	if got := h.rejectedMetric(); got != "0" {
		t.Fatalf("reservoir_rollout_flags_rejected %s with a valid document", got)
	}

	// The hand edit docs/flags.md describes (copy, edit, rename), with a
	// typo in a mode variant.
	good, err := os.ReadFile(h.flags.Path)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.ReplaceAll(strings.ReplaceAll(string(good), `"shadow"`, `"shadoww"`), `"version": 3`, `"version": 4`)
	if err := os.WriteFile(h.flags.Path+".new", []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(h.flags.Path+".new", h.flags.Path); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for h.rejectedMetric() != "1" {
		if time.Now().After(deadline) {
			t.Fatal("reservoir_rollout_flags_rejected never went to 1")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The last valid flags stay in force: pod-a is still shadow, never
	// "redis with the kill switch off" nor unavailable.
	h.waitDecision("pod-a", authority.ModeShadow, authority.KillOff)
	h.stock(1001, 7, 1, 10)
	if r := h.reserve(1001, "during", 7, 1); r.status != 201 {
		t.Errorf("reserve under the rejected document: %d %s", r.status, r.raw)
	}
	st := h.admin("GET", "/admin/rollout/status", nil)
	rej := mapOf(st.body["flags_rejected"])
	where := regexp.MustCompile(`flags\["reservations.mode"\]\.variants\["shadoww"\] \(line [0-9]+, column [0-9]+\)`)
	if !where.MatchString(str(rej["error"])) || rej["last_valid_in_force"] != true || str(rej["at"]) == "" {
		t.Errorf("status flags_rejected: %v", st.body["flags_rejected"])
	}
	if !where.MatchString(str(st.body["flags_error"])) {
		t.Errorf("status flags_error: %v", st.body["flags_error"])
	}

	// The dashboard: a red banner naming the error.
	run := func(what string, a chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, a); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(expr string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 15*time.Second)
		defer cancel()
		s, err := chromedp.Run(sctx, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return s
	}
	run("open the dashboard", chromedp.Navigate(h.http.URL+"/dashboard#token="+adminToken))
	run("the banner", chromedp.WaitVisible(chromedp.CSS("#flags-banner")))
	banner := eval(`document.querySelector("#flags-banner").innerText`)
	if !strings.Contains(banner, "Flags document rejected") || !where.MatchString(banner) || !strings.Contains(banner, "last valid flags") {
		t.Errorf("banner: %q", banner)
	}
	if bg := eval(`getComputedStyle(document.querySelector("#flags-banner")).backgroundColor`); bg != "rgb(198, 40, 40)" {
		t.Errorf("the banner is not red: %s", bg)
	}
	if os.Getenv("RESERVOIR_SCREENSHOT_TEST") != "" {
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err == nil {
			err = os.WriteFile(strings.TrimSuffix(os.Getenv("RESERVOIR_SCREENSHOT_TEST"), ".png")+"-rejected.png", png, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := eval(`document.querySelector('#pods tr[data-pod="pod-a"] [data-field="state"]').textContent`); strings.Contains(got, "Changing") || !strings.Contains(got, "(shadow)") {
		t.Errorf("pod-a's state while the document is invalid (its last valid mode, shadow, not changing): %q", got)
	}

	// The kill switch, as the dashboard calls it, over the broken document.
	answer := eval(`fetch("/admin/killswitch", {method: "POST", headers: {"Authorization": "Bearer ` + adminToken +
		`", "Content-Type": "application/json", "X-Reservoir-Actor": "dashboard"}, body: JSON.stringify({scope: "pod:pod-a", reason: "typo in the flags; pod-a back to Redis"})}).then(r => r.status + " " + r.statusText)`)
	if answer != "200 OK" {
		t.Fatalf("kill switch over the broken document: %s", answer)
	}
	h.waitDecision("pod-a", authority.ModeShadow, authority.KillRedis)
	if hist, err := h.ctl.History(ctx, 1); err != nil || len(hist) != 1 || hist[0].Action != "kill_over_invalid" || hist[0].Before != bad {
		t.Errorf("audit: %+v %v", hist, err)
	}
	f, err := h.flags.Read()
	if err != nil || f.Version != 5 || f.KillAt(flagdoc.PodScope("pod-a")).State != authority.KillRedis || f.Pods["pod-b"].Mode != authority.ModeMySQL {
		t.Errorf("flags after the kill: %+v, %v", f, err)
	}
	if got := h.rejectedMetric(); got != "0" {
		t.Errorf("reservoir_rollout_flags_rejected %s after a valid document loaded", got)
	}
	sctx, cancel := context.WithTimeout(bctx, 15*time.Second)
	defer cancel()
	if _, err := chromedp.Run(sctx, chromedp.Poll[bool](`document.querySelector("#flags-banner").hidden`, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Errorf("the banner stays after the fix: %v", err)
	}
}
