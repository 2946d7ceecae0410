package server_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seed31b0e981/reservoir/internal/server/servertest"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

const dashboardPlan = `
pods = ["pod-a", "pod-b"]

[[stages]]
name = "shadow on pod-a"
mode = "shadow"
pods = ["pod-a"]
[stages.gates]
min_observations = 5
min_duration = "1s"

[[stages]]
name = "mysql on pod-a"
mode = "mysql"
pods = ["pod-a"]
[stages.gates]
min_observations = 50
min_duration = "1m"

[[stages]]
name = "shadow on pod-b"
mode = "shadow"
pods = ["pod-b"]
`

// pageLagRE is a pod's relay lag as the dashboard words it.
var pageLagRE = regexp.MustCompile(`^relay lag: ([0-9]+) changes?(?:, oldest [0-9.]+ ms)?$`)

// waitDecision waits until the cell's flag source answers mode and kill
// for pod.
func (h *harness) waitDecision(pod string, mode authority.Mode, kill authority.Kill) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, _ := h.cell.Flags.Decide(context.Background(), pod, 0)
		if d.Mode == mode && d.Kill == kill {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("pod %s never reached mode %s kill %s (at %+v)", pod, mode, kill, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Acceptance (d): the dashboard in headless Chromium (Debian's chromium,
// installed by scripts/chromium). It renders every section, its numbers
// are the API's, and its kill switch button engages the switch: the flags
// file changes and the next reserve is answered with Redis authority.
func TestDashboardInChromium(t *testing.T) {
	t.Parallel()
	// No relay: what MySQL decides stays in the change feed, so pod-a's
	// relay lag is not zero when the page shows it. The handoff sweepers
	// run: the fences follow the flags, and the page says so.
	h := setup(t, options{plan: dashboardPlan, noRelay: true, sweep: true})
	bctx := servertest.Browser(t, 1400, 1800)
	ctx := context.Background()

	// Traffic: a reservation made under Redis alone, then shadow mode, in
	// which releasing it finds MySQL without it (a shadow_missing diff),
	// then mysql mode with a few carts.
	h.stock(1001, 7, 1, 100)
	h.reserve(1001, "legacy", 7, 2)
	if _, err := h.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	h.waitDecision("pod-a", authority.ModeShadow, authority.KillOff)
	if r := h.do("POST", "/v1/shops/1001/reservations/legacy/release", nil, ""); r.status != 200 {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	for i := range 4 {
		h.reserve(1001, fmt.Sprintf("s%d", i), 7, 1)
		h.do("POST", fmt.Sprintf("/v1/shops/1001/reservations/s%d/claim", i), nil, "")
	}
	h.flush()
	if _, err := h.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "test", Override: true, Reason: "dashboard test"}); err != nil {
		t.Fatal(err)
	}
	h.waitDecision("pod-a", authority.ModeMySQL, authority.KillOff)
	// The sweeper hands shop 1001 to MySQL (before any call can), and the
	// states the page shows are settled: a pending pod's headline says
	// the age of its oldest shop, which grows between two reads.
	version := h.waitHandoffs()
	for i := range 6 {
		if r := h.reserve(1001, fmt.Sprintf("m%d", i), 7, 1); str(r.body["authority"]) != "mysql" {
			t.Fatalf("reserve in mysql mode: %d %s", r.status, r.raw)
		}
		h.do("POST", fmt.Sprintf("/v1/shops/1001/reservations/m%d/claim", i), nil, "")
	}
	h.flush()

	step := func(a chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, a); err != nil {
			t.Fatal(err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		// One evaluation finds the element and reads its text. The page
		// renders its tables afresh on every refresh, so a node found by
		// one call to the browser may be gone by the next ("No node with
		// given id found", seen in CI after an advance).
		s, err := chromedp.Run(sctx, chromedp.PollFunction[struct{ Text string }](
			`sel => { const e = document.querySelector(sel); return e && {Text: e.innerText}; }`,
			chromedp.WithPollingArgs(sel), chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(9*time.Second)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s.Text)
	}
	eval := func(expr string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		s, err := chromedp.Run(sctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return s
	}
	// waitRefresh waits for n more completed refreshes of the page. One
	// may have been under way already: only the second surely read the
	// API after the call.
	waitRefresh := func(n int) {
		t.Helper()
		cur, _ := strconv.Atoi(eval(`document.body.dataset.refreshes || "0"`))
		sctx, cancel := context.WithTimeout(bctx, 20*time.Second)
		defer cancel()
		if _, err := chromedp.Run(sctx, chromedp.Poll[bool](fmt.Sprintf(`+(document.body.dataset.refreshes || 0) >= %d`, cur+n),
			chromedp.WithPollingTimeout(15*time.Second))); err != nil {
			t.Fatalf("waiting for the page to refresh: %v (status line: %s)", err, eval(`document.querySelector("#updated").textContent`))
		}
	}

	// This replica reports to the control database, as `reservoir serve`
	// does: the page lists it, and the kill switch says it obeyed.
	hb := rollout.StartHeartbeat(rollout.HeartbeatConfig{DB: h.cell.Control, Source: h.cell.Flags, Pods: []string{"pod-a", "pod-b"}, ID: "dashboard-replica"})
	t.Cleanup(hb.Stop)

	start := time.Now()
	step(chromedp.Navigate(h.http.URL + "/dashboard#token=" + adminToken))
	waitRefresh(1)
	t.Logf("dashboard rendered in %s", time.Since(start).Round(time.Millisecond))
	if title, err := chromedp.Run(bctx, chromedp.Title()); err != nil || !strings.Contains(title, "reservoir") {
		t.Fatalf("title %q, %v", title, err)
	}
	if u := eval(`location.href`); strings.Contains(u, "token") {
		t.Errorf("the token stays in the address bar: %s", u)
	}

	// The pods table's rates are the series' last point: the label says
	// the series' window (1 s here; it said 10 s whatever the window), the
	// window the demo's progress lines name too (issue 27, 7).
	if got := text("#pods-window"); got != "rates and latency: this replica, last 1 s" {
		t.Errorf("the pods table's window: %q, want the series' 1 s", got)
	}

	// The replicas, with the flags version each applied.
	if got := text(`#replicas tr[data-replica="dashboard-replica"]`); !strings.Contains(got, "pod-a, pod-b") {
		waitRefresh(2) // its first heartbeat may have come after the first refresh (or during the next)
		if got = text(`#replicas tr[data-replica="dashboard-replica"]`); !strings.Contains(got, "pod-a, pod-b") {
			t.Errorf("the replica is not listed: %q (note %q)", got, text("#replicas-note"))
		}
	}

	// One state per pod, in one cell: the API's, the store that decides
	// and why (no separate mode, kill switch and authority columns that
	// say one thing three ways).
	st := h.admin("GET", "/admin/rollout/status", nil)
	if n := eval(`String(document.querySelectorAll('#pods thead th').length)`); n != "10" {
		t.Errorf("the pods table has %s columns, want 10 (pod, state, relay lag, handoffs, ops, compared, mismatch, 2 latencies, buttons)", n)
	}
	for _, p := range st.body["pods"].([]any) {
		pv := mapOf(p)
		pod, sv := str(pv["pod"]), mapOf(pv["state"])
		want := str(sv["decides"]) + " " + str(sv["headline"])
		if got := text(`#pods tr[data-pod="` + pod + `"] [data-field="state"]`); !strings.HasPrefix(got, want) || !strings.Contains(got, str(sv["detail"])) {
			t.Errorf("pod %s state: page %q, API %q / %q", pod, got, want, sv["detail"])
		}
		// The relay lag next to it: the API's changes, as the page words
		// them (the oldest one's age grows between the two reads).
		got := text(`#pods tr[data-pod="` + pod + `"] [data-field="relay-lag"]`)
		m := pageLagRE.FindStringSubmatch(got)
		if m == nil || m[1] != strconv.Itoa(int(num(mapOf(pv["relay_lag"])["changes"]))) {
			t.Errorf("pod %s relay lag: page %q, API %v", pod, got, pv["relay_lag"])
		}
		if pod == "pod-a" && m != nil && m[1] == "0" {
			t.Errorf("pod-a shows no relay lag with MySQL's changes undelivered: %q", got)
		}
		// And what its fences say: the API's line.
		hv := mapOf(pv["handoffs"])
		if got := text(`#pods tr[data-pod="` + pod + `"] [data-field="handoffs"]`); got != "fences: "+str(hv["line"]) || str(hv["state"]) != "done" ||
			!strings.HasSuffix(got, fmt.Sprintf("(flags version %d)", version)) {
			t.Errorf("pod %s handoffs: page %q, API %v", pod, got, hv)
		}
	}
	if got := text(`#pods tr[data-pod="pod-a"] [data-field="handoffs"]`); !regexp.MustCompile(`^fences: handed off 1/1 shops in [0-9.]+m?s `).MatchString(got) {
		t.Errorf("pod-a's handoffs: %q, want shop 1001 handed off to MySQL", got)
	}
	// Issue 27 (7): the store's badge. Redis deciding pod-b in redis mode
	// is the normal legacy state: a neutral colour, not the kill switch's
	// red (the badge was red for both).
	badge := func(pod string) (string, badgeColor) {
		t.Helper()
		got := eval(`(() => { const b = document.querySelector('#pods tr[data-pod="` + pod + `"] .badge');
			return b ? b.textContent + "|" + getComputedStyle(b).backgroundColor : "none"; })()`)
		word, rgb, _ := strings.Cut(got, "|")
		return word, parseRGB(t, rgb)
	}
	if word, c := badge("pod-b"); word != "redis" || !c.neutral() {
		t.Errorf("pod-b's badge (redis mode, no kill switch): %s %v, want redis in a neutral colour", word, c)
	}
	if word, c := badge("pod-a"); word != "mysql" || c.red() || c.neutral() {
		t.Errorf("pod-a's badge (mysql mode): %s %v, want mysql in its own colour", word, c)
	}

	// Every shop the topology routes is listed, though none has flags of
	// its own, with its state.
	if got := eval(`[...document.querySelectorAll("#shops tr[data-shop]")].map(r => r.dataset.shop + ":" + r.querySelector('[data-field="state"]').dataset.state).join(" ")`); got != "1001:mysql 1002:mysql 2001:redis" {
		t.Errorf("shops on the page: %q", got)
	}

	// The compare totals are the API's, read since the page's own start;
	// the label says the time the API counted from (the start of the
	// stats window holding the time asked), not the time asked.
	since := eval(`document.querySelector("#stats-section").dataset.since`)
	counted := eval(`document.querySelector("#stats-section").dataset.counted`)
	if s := h.admin("GET", "/admin/stats?pod=pod-a&since="+url.QueryEscape(since), nil); str(s.body["since"]) != counted {
		t.Errorf("the totals count from %s (API), the page says %s", s.body["since"], counted)
	}
	if label, want := text("#stats-note"), eval(`new Date(document.querySelector("#stats-section").dataset.counted).toLocaleString()`); !strings.Contains(label, "since "+want) {
		t.Errorf("the totals' label %q does not give the time counted from, %s", label, want)
	}
	for _, pod := range []string{"pod-a", "pod-b"} {
		s := h.admin("GET", "/admin/stats?pod="+pod+"&since="+url.QueryEscape(since), nil)
		want := strconv.Itoa(int(num(s.body["observations"])))
		if got := text(`[data-stat="observations"][data-pod="` + pod + `"]`); got != want {
			t.Errorf("pod %s observations: page %s, API %s", pod, got, want)
		}
		wantMatch := strconv.Itoa(int(num(mapOf(mapOf(s.body["live"])["by_class"])["match"])))
		if got := text(`[data-stat="match"][data-pod="` + pod + `"]`); got != wantMatch {
			t.Errorf("pod %s matches: page %s, API %s", pod, got, wantMatch)
		}
	}
	if got := text(`[data-stat="observations"][data-pod="pod-a"]`); got == "0" {
		t.Error("pod-a shows no observations")
	}

	// The next stage's gates with the numbers the controller computed.
	plan := mapOf(st.body["plan"])
	if got := text("#next-stage"); got != str(mapOf(plan["next"])["name"]) {
		t.Errorf("next stage: page %q, API %v", got, plan["next"])
	}
	for _, g := range plan["gates"].([]any) {
		gv := mapOf(g)
		if str(gv["gate"]) != "min_observations" {
			continue
		}
		want := strconv.Itoa(int(num(gv["value"])))
		if got := text(`#gates tr[data-gate="min_observations"] [data-field="value"]`); got != want {
			t.Errorf("min_observations: page %s, API %s", got, want)
		}
	}
	// Each gate's verdict in the API's words, which the CLI prints too:
	// pass, not yet or breaking. The stage was applied by an override a
	// moment ago, with a dozen calls since: too few to judge on, and
	// nothing wrong, so "not yet". The page says when the gates count
	// from: the comparer's next whole window.
	if len(plan["gates"].([]any)) == 0 {
		t.Error("no gates in the API's plan")
	}
	for _, g := range plan["gates"].([]any) {
		gv := mapOf(g)
		name, verdict := str(gv["gate"]), str(gv["verdict"])
		if !slices.Contains([]string{"pass", "not yet", "breaking"}, verdict) || name == "min_observations" && verdict != "not yet" {
			t.Errorf("gate %s just after the stage was applied: verdict %q in the API", name, verdict)
		}
		if got := text(`#gates tr[data-gate="` + name + `"] td:nth-child(2)`); got != verdict {
			t.Errorf("gate %s: verdict %q on the page, %q in the API", name, got, verdict)
		}
	}
	if from := str(plan["counting_from"]); from == "" {
		t.Errorf("the API's plan says no counting_from: %v", plan)
	} else if got, want := text("#stage-note"), eval(`new Date(`+strconv.Quote(from)+`).toLocaleTimeString()`); !strings.Contains(got, "gates counting from "+want) {
		t.Errorf("the stage note %q does not say the gates count from %s (%s)", got, want, from)
	}
	// The three words, each with its colour, rendered from a status that
	// has them all.
	if got := eval(`(() => {
		renderPlan({ plan: { stage: 1, stage_name: "s", since: "2026-03-01T12:00:37Z", counting_from: "2026-03-01T12:01:00Z", next: null, ready: false,
			gates: [{ gate: "min_observations", verdict: "pass", pass: true, breaking: false, value: 9, limit: 5, why: "" },
				{ gate: "min_duration", verdict: "not yet", pass: false, breaking: false, value: 3, limit: 60, why: "" },
				{ gate: "max_rate:outcome_mismatch", verdict: "breaking", pass: false, breaking: true, value: 0.5, limit: 0.001, why: "" }] } });
		return [...document.querySelectorAll("#gates tbody tr")].map((r) => r.dataset.gate + "=" + r.cells[1].textContent + "/" + r.cells[1].className).join(",");
	})()`); got != "min_observations=pass/good,min_duration=not yet/warn,max_rate:outcome_mismatch=breaking/bad" {
		t.Errorf("the verdicts rendered: %s", got)
	}
	waitRefresh(1) // the page's own status again

	// The recent diffs are the API's, newest first, both sides shown.
	d := h.admin("GET", "/admin/diffs?limit=20", nil)
	var wantIDs []string
	for _, x := range d.body["diffs"].([]any) {
		wantIDs = append(wantIDs, strconv.Itoa(int(num(mapOf(x)["id"]))))
	}
	gotIDs := strings.Fields(eval(`[...document.querySelectorAll("#diffs tr[data-diff-id]")].map(r => r.dataset.diffId).join(" ")`))
	if len(wantIDs) == 0 || !slices.Equal(gotIDs, wantIDs) {
		t.Errorf("diff rows: page %v, API %v", gotIDs, wantIDs)
	}
	// The release of a cart reserved before pod-a entered shadow mode:
	// MySQL never saw it, by design. Its diff is marked as such, in a
	// class of its own that the shadow_missing gate does not count.
	if got := text(`#diffs tr[data-class="pre_switch"]`); !strings.Contains(got, "legacy") || !strings.Contains(got, "not_released") || !strings.Contains(got, "may predate its shop's switch") {
		t.Errorf("the release MySQL never saw is not marked as made before the switch: %q (diffs: %q)", got, text("#diffs tbody"))
	}
	if n := eval(`String(document.querySelectorAll('#diffs tr[data-class="shadow_missing"]').length)`); n != "0" {
		t.Errorf("%s shadow_missing diffs: a cart reserved before the switch counts against the gate", n)
	}

	// The plan: every stage, the one in force marked; the audit history.
	var stageStates []string
	for _, g := range st.body["stages"].([]any) {
		stageStates = append(stageStates, str(mapOf(g)["state"]))
	}
	if got := eval(`[...document.querySelectorAll("#stages tr[data-stage]")].map(r => r.dataset.state).join(",")`); got != strings.Join(stageStates, ",") || got != "done,current,next" {
		t.Errorf("stages on the page %q, API %v", got, stageStates)
	}
	if got := text(`#stages tr[data-state="current"]`); !strings.Contains(got, "mysql on pod-a") || !strings.Contains(got, "in force") {
		t.Errorf("the stage in force: %q", got)
	}
	hist := h.admin("GET", "/admin/rollout/history?limit=20", nil)
	var wantAudit []string
	for _, e := range hist.body["entries"].([]any) {
		wantAudit = append(wantAudit, strconv.Itoa(int(num(mapOf(e)["id"]))))
	}
	if got := strings.Fields(eval(`[...document.querySelectorAll("#history tr[data-audit-id]")].map(r => r.dataset.auditId).join(" ")`)); len(wantAudit) != 2 || !slices.Equal(got, wantAudit) {
		t.Errorf("history rows: page %v, API %v", got, wantAudit)
	}
	// Charts for each pod, latency per store, the reconciler's buttons.
	if n := eval(`String(document.querySelectorAll("#class-charts figure").length) + "/" + document.querySelectorAll("#latency figure").length`); n != "2/2" {
		t.Errorf("chart figures: %s", n)
	}
	// The latency table shows the series' last point, over its trailing
	// window (1 s here, refreshed every 2 s): on a slow machine the carts
	// above are out of it by now, so reserves come until the page shows
	// one (item 7 has units for them; an adjust would deliver pod-a's
	// change feed, whose lag the kill switch below reports).
	for i := 0; ; i++ {
		got := text(`#latency table[data-pod="pod-a"] tr[data-op="reserve"]`)
		if strings.Contains(got, "ms") {
			break
		}
		if i == 50 {
			t.Errorf("no reserve latency for pod-a with reserves coming for 10 s: %q", got)
			break
		}
		h.reserve(1001, fmt.Sprintf("lat%d", i), 7, 1)
		time.Sleep(200 * time.Millisecond)
	}
	// Reconciliation from the page: pod-b has no drift.
	step(chromedp.Click(chromedp.CSS(`#reconcile tr[data-pod="pod-b"] button`)))
	sctx, cancel := context.WithTimeout(bctx, 20*time.Second)
	if _, err := chromedp.Run(sctx, chromedp.Poll[bool](`document.querySelector('#reconcile tr[data-pod="pod-b"]').textContent.includes("clean: pod pod-b")`,
		chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		t.Errorf("reconcile from the page: %v (%q)", err, text("#reconcile"))
	}
	cancel()
	if os.Getenv("RESERVOIR_SCREENSHOT_TEST") != "" {
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err == nil {
			err = os.WriteFile(os.Getenv("RESERVOIR_SCREENSHOT_TEST"), png, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	// The kill switch button: a reason, then a confirmation.
	step(chromedp.Click(chromedp.CSS(`button[data-kill="pod:pod-a"]`)))
	step(chromedp.WaitVisible(chromedp.CSS("#kill-reason")))
	step(chromedp.Click(chromedp.CSS("#kill-continue")))
	if got := text("#kill-error"); !strings.Contains(got, "reason is required") {
		t.Errorf("continuing without a reason: %q", got)
	}
	step(chromedp.SendKeys(chromedp.CSS("#kill-reason"), "mismatch spike seen on the dashboard"))
	step(chromedp.Click(chromedp.CSS("#kill-continue")))
	step(chromedp.WaitVisible(chromedp.CSS("#kill-confirm")))
	if got := text("#kill-summary"); !strings.Contains(got, "pod:pod-a") || !strings.Contains(got, "mismatch spike") {
		t.Errorf("confirmation: %q", got)
	}
	if f, _ := h.flags.Read(); f.KillAt(flagdoc.PodScope("pod-a")).Engaged() {
		t.Fatal("the switch was engaged before the confirmation")
	}
	clicked := time.Now()
	step(chromedp.Click(chromedp.CSS("#kill-confirm")))
	// The API answers once this replica obeys; the page keeps the answer.
	sctx, cancel = context.WithTimeout(bctx, 10*time.Second)
	answer, err := chromedp.Run(sctx, chromedp.Poll[string](`document.body.dataset.lastKill`, chromedp.WithPollingTimeout(10*time.Second)))
	cancel()
	if err != nil {
		t.Fatalf("no answer to the kill switch on the page: %v (dialog error: %q)", err, text("#kill-error"))
	}
	t.Logf("kill switch engaged and obeyed %s after the click: %s", time.Since(clicked).Round(time.Millisecond), answer)
	if !strings.Contains(answer, `"audited":true`) || strings.Contains(answer, `"obeyed_after_ms":null`) || !regexp.MustCompile(`"relay_lag":"pod-a [1-9][0-9]* change`).MatchString(answer) {
		t.Errorf("kill answer on the page: %s", answer)
	}
	if got := text("#toast"); !strings.Contains(got, "relay lag at the switch: pod-a ") || !strings.Contains(got, "obeyed by 1/1 replicas") {
		t.Errorf("the page does not tell the relay lag at the switch and the fleet's obedience: %q", got)
	}
	f, err := h.flags.Read()
	if err != nil {
		t.Fatal(err)
	}
	if k := f.KillAt(flagdoc.PodScope("pod-a")); k.State != authority.KillRedis || k.Reason != "mismatch spike seen on the dashboard" || k.Actor != "dashboard" {
		t.Errorf("flags file kill switch: %+v", k)
	}
	// The sweeper hands shop 1001 back to Redis (before any call can).
	killVersion := h.waitHandoffs()
	if r := h.reserve(1001, "after-kill", 7, 1); r.status != 201 || str(r.body["authority"]) != "redis" {
		t.Fatalf("reserve after the dashboard's kill switch: %d %s", r.status, r.raw)
	}
	waitRefresh(2)
	// After a kill over mysql: one state, said once, once the fences
	// agree.
	if got := text(`#pods tr[data-pod="pod-a"] [data-field="state"]`); !strings.HasPrefix(got, "redis Redis decides: kill switch redis") ||
		!strings.Contains(got, "engaged by dashboard: mismatch spike seen on the dashboard) holds back the mode mysql") {
		t.Errorf("pod-a's state on the page after the kill: %q", got)
	}
	if got := text(`#pods tr[data-pod="pod-a"] [data-field="handoffs"]`); !strings.HasPrefix(got, "fences: handed off 1/1 shops in ") ||
		!strings.HasSuffix(got, fmt.Sprintf("(flags version %d)", killVersion)) {
		t.Errorf("pod-a's handoffs on the page after the kill: %q", got)
	}
	// Red only under the kill switch: pod-a's badge is, pod-b's is not.
	if word, c := badge("pod-a"); word != "redis" || !c.red() {
		t.Errorf("pod-a's badge under the kill switch: %s %v, want redis in red", word, c)
	}
	if word, c := badge("pod-b"); word != "redis" || !c.neutral() {
		t.Errorf("pod-b's badge (redis mode, no kill switch) beside pod-a's kill: %s %v, want a neutral colour", word, c)
	}
	// Issue 27 (7): a reconcile this replica's process runs by itself
	// (the demo's recovery repairs pod-a so) shows in the drift panel,
	// said to be a repair; it said "not run by this replica yet".
	if v, err := h.srv.RunReconcile(ctx, "pod-a", h.cell.Repair); err != nil || v.Report == nil || !v.Report.Report.Repair {
		t.Fatalf("a repair through the server: %+v %v", v, err)
	}
	waitRefresh(2)
	if got := text(`#reconcile tr[data-pod="pod-a"] [data-field="result"]`); !strings.HasPrefix(got, "clean after the repair: pod pod-a: ") {
		t.Errorf("the drift panel after a repair of pod-a: %q", got)
	}
	if got := text(`#reconcile tr[data-pod="pod-a"] [data-field="at"]`); !strings.Contains(got, "a repair") {
		t.Errorf("the drift panel's last run of pod-a: %q, want it said to be a repair", got)
	}
	if got := text(`#reconcile tr[data-pod="pod-b"] [data-field="result"]`); !strings.HasPrefix(got, "clean: pod pod-b") {
		t.Errorf("the drift panel's pod-b after pod-a's repair: %q", got)
	}
	// The kill is marked on pod-a's charts, and only there.
	if got := eval(`[...document.querySelectorAll("#class-charts figure, #latency figure")].map(f => f.querySelectorAll('g.mark[data-action="kill"]').length).join(",")`); got != "1,0,1,0" {
		t.Errorf("kill marks per chart (pod-a, pod-b, pod-a latency, pod-b latency): %s", got)
	}
	if hist, err := h.ctl.History(ctx, 1); err != nil || len(hist) != 1 || hist[0].Action != "kill" || hist[0].Actor != "dashboard" ||
		!strings.HasPrefix(hist[0].Reason, "mismatch spike seen on the dashboard [relay lag at the switch: pod-a ") {
		t.Errorf("audit: %+v %v", hist, err)
	}

	// The y-scale: one spike among steady values is clipped (drawn as a
	// triangle at the top, the largest value said), so it cannot flatten
	// the rest; steady values are not clipped.
	clip := eval(`(() => {
		const pts = [...Array(20).keys()].map((i) => [i * 1000, i === 12 ? 695 : 5 + (i % 3)]);
		const f = chart("spike", [{ name: "p99", color: "#000", points: pts }], { fmt: (v) => v.toFixed(0) + " ms", min: 1 });
		const g = chart("steady", [{ name: "p99", color: "#000", points: pts.map(([t]) => [t, 5]) }], { fmt: (v) => v.toFixed(0) + " ms", min: 1 });
		return [f.dataset.clipped, f.querySelectorAll("polygon.clipped").length, f.querySelector("svg text").textContent,
			f.querySelector(".clip-note").textContent, g.dataset.clipped, g.querySelectorAll("polygon.clipped").length].join("|");
	})()`)
	if clip != "1|1|11 ms|▲ clipped at 11 ms; largest 695 ms|0|0" {
		t.Errorf("the spike's chart: %s", clip)
	}

	// The advance control: the dry run's flags change, what applying
	// needs (stage 1's gates have too little data: an override and its
	// reason), then a confirmation; applied through the controller,
	// audited with the dashboard as actor.
	step(chromedp.Click(chromedp.CSS("#advance-open")))
	sctx, cancel = context.WithTimeout(bctx, 15*time.Second)
	_, err = chromedp.Run(sctx, chromedp.Poll[bool](`document.querySelector("#advance-diff").textContent.includes('"reservations.mode"')`,
		chromedp.WithPollingTimeout(15*time.Second)))
	cancel()
	if err != nil {
		t.Fatalf("no dry run in the advance dialog: %v (%q)", err, text("#advance-error"))
	}
	if got := text("#advance-title"); got != "Advance to stage 2: “shadow on pod-b”" {
		t.Errorf("advance dialog title: %q", got)
	}
	if got := text("#advance-diff"); !strings.Contains(got, `+         {"$ref": "pod:pod-b"}, "shadow",`) {
		t.Errorf("the dry run's diff does not set pod-b to shadow: %q", got)
	}
	if got := text("#advance-blocked"); !strings.Contains(got, "override") || !strings.Contains(text("#advance-needs"), "min_duration") {
		t.Errorf("what applying needs: %q", text("#advance-needs"))
	}
	step(chromedp.Click(chromedp.CSS("#advance-continue")))
	if got := text("#advance-error"); !strings.Contains(got, "tick the override") {
		t.Errorf("continuing without the override: %q", got)
	}
	step(chromedp.Click(chromedp.CSS("#advance-override")))
	step(chromedp.Click(chromedp.CSS("#advance-continue")))
	if got := text("#advance-error"); !strings.Contains(got, "needs a reason") {
		t.Errorf("an override without a reason: %q", got)
	}
	step(chromedp.SendKeys(chromedp.CSS("#advance-reason"), "pod-b is idle; dashboard test"))
	step(chromedp.Click(chromedp.CSS("#advance-continue")))
	step(chromedp.WaitVisible(chromedp.CSS("#advance-confirm")))
	if got := text("#advance-summary"); !strings.Contains(got, "shadow on pod-b") || !strings.Contains(got, "OVERRIDE") {
		t.Errorf("advance confirmation: %q", got)
	}
	if f, _ := h.flags.Read(); f.Resolve("pod-b", 0).Mode != authority.ModeRedis {
		t.Fatal("the stage was applied before the confirmation")
	}
	step(chromedp.Click(chromedp.CSS("#advance-confirm")))
	sctx, cancel = context.WithTimeout(bctx, 15*time.Second)
	answer, err = chromedp.Run(sctx, chromedp.Poll[string](`document.body.dataset.lastAdvance`, chromedp.WithPollingTimeout(15*time.Second)))
	cancel()
	if err != nil || !strings.Contains(answer, `"name":"shadow on pod-b"`) {
		t.Fatalf("no answer to the advance on the page: %v %s (dialog error: %q)", err, answer, text("#advance-error"))
	}
	if f, _ := h.flags.Read(); f.Resolve("pod-b", 0).Mode != authority.ModeShadow {
		t.Error("the confirmed stage is not in the flags")
	}
	if hist, err := h.ctl.History(ctx, 1); err != nil || len(hist) != 1 || hist[0].Action != "override" || hist[0].Actor != "dashboard" ||
		hist[0].Reason != "pod-b is idle; dashboard test" {
		t.Errorf("advance audit: %+v %v", hist, err)
	}
	waitRefresh(2) // one refresh may have begun before the advance
	if got := text(`#stages tr[data-state="current"]`); !strings.Contains(got, "shadow on pod-b") {
		t.Errorf("the stage in force on the page after the advance: %q", got)
	}
	if got := text(`#history tr[data-action="override"]`); !strings.Contains(got, "dashboard") || !strings.Contains(got, "pod-b is idle") {
		t.Errorf("the history on the page after the advance: %q", got)
	}

	// Without a token the page says so, instead of "loading..." for ever,
	// and reads nothing.
	// (The token the page kept for this tab is forgotten first.)
	eval(`sessionStorage.clear(); "cleared"`)
	step(chromedp.Navigate(h.http.URL + "/dashboard?again"))
	sctx, cancel = context.WithTimeout(bctx, 10*time.Second)
	_, err = chromedp.Run(sctx, chromedp.Poll[bool](`document.body.dataset.state === "no-token"`, chromedp.WithPollingTimeout(10*time.Second)))
	cancel()
	if err != nil {
		t.Fatalf("the page without a token: %v (status line %q)", err, eval(`document.querySelector("#updated").textContent`))
	}
	if got := text("#updated"); !strings.Contains(got, "no admin token") || strings.Contains(got, "loading") || eval(`String(document.querySelector("#token-box").hidden)`) != "false" {
		t.Errorf("the page without a token says %q (token form hidden: %s)", got, eval(`String(document.querySelector("#token-box").hidden)`))
	}
	// A wrong token is refused, and the page says that too.
	step(chromedp.SendKeys(chromedp.CSS("#token"), "not-the-admin-token-at-all"))
	step(chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)))
	sctx, cancel = context.WithTimeout(bctx, 10*time.Second)
	_, err = chromedp.Run(sctx, chromedp.Poll[bool](`document.body.dataset.state === "token-refused"`, chromedp.WithPollingTimeout(10*time.Second)))
	cancel()
	if got := text("#updated"); err != nil || !strings.Contains(got, "admin token refused: wrong admin token") {
		t.Errorf("the page with a wrong token says %q (%v)", got, err)
	}
}

// badgeColor is an element's computed colour.
type badgeColor struct{ r, g, b int }

// parseRGB reads getComputedStyle's "rgb(r, g, b)".
func parseRGB(t *testing.T, s string) badgeColor {
	t.Helper()
	var c badgeColor
	if _, err := fmt.Sscanf(s, "rgb(%d, %d, %d)", &c.r, &c.g, &c.b); err != nil {
		t.Fatalf("colour %q: %v", s, err)
	}
	return c
}

// neutral: a grey (its channels within 40 of each other).
func (c badgeColor) neutral() bool {
	return max(c.r, c.g, c.b)-min(c.r, c.g, c.b) <= 40
}

// red: red well above green and blue.
func (c badgeColor) red() bool { return c.r >= 150 && c.g < 90 && c.b < 90 }
