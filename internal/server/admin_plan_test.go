package server_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// POST /admin/rollout/advance: a dry run shows the flags change and what
// applying it needs, changing nothing; applying it goes through the
// controller (audited, with the actor) only from the stage and flags
// version the dry run showed; the controller's refusals have codes of
// their own.
func TestAdminAdvance(t *testing.T) {
	t.Parallel()
	h := setup(t, options{plan: dashboardPlan})
	ctx := context.Background()
	advance := func(body map[string]any) response {
		t.Helper()
		return h.do("POST", "/admin/rollout/advance", body, adminToken, "X-Reservoir-Actor", "ana")
	}

	dry := advance(map[string]any{"dry_run": true})
	if dry.status != 200 || dry.body["dry_run"] != true || num(dry.body["from_stage"]) != -1 ||
		str(mapOf(dry.body["stage"])["name"]) != "shadow on pod-a" || !strings.Contains(str(dry.body["diff"]), `+         {"$ref": "pod:pod-a"}, "shadow",`) {
		t.Fatalf("dry run: %d %s", dry.status, dry.raw)
	}
	if d, _ := h.cell.Flags.Decide(ctx, "pod-a", 0); d.Mode != authority.ModeRedis {
		t.Fatalf("the dry run changed the flags: pod-a %s", d.Mode)
	}
	if r := advance(map[string]any{}); r.status != 400 || str(r.body["field"]) != "from_stage" {
		t.Errorf("apply without the dry run's stage: %d %s", r.status, r.raw)
	}
	// Confirmed from a stage the rollout has left: nothing is written.
	if r := advance(map[string]any{"from_stage": 0, "from_version": dry.body["from_version"]}); r.status != 409 || str(r.body["error"]) != "stage_changed" {
		t.Errorf("apply from another stage: %d %s", r.status, r.raw)
	}
	// Confirmed after the flags changed (another operator's kill switch).
	if _, _, err := h.flags.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.PodScope("pod-b"), authority.ModeRedis) }); err != nil {
		t.Fatal(err)
	}
	if r := advance(map[string]any{"from_stage": -1, "from_version": dry.body["from_version"]}); r.status != 409 || str(r.body["error"]) != "flags_changed" {
		t.Errorf("apply after the flags changed: %d %s", r.status, r.raw)
	}
	if d, _ := h.flags.Read(); d.Resolve("pod-a", 0).Mode != authority.ModeRedis {
		t.Fatal("a refused confirmation changed the flags")
	}
	dry = advance(map[string]any{"dry_run": true})
	r := advance(map[string]any{"from_stage": dry.body["from_stage"], "from_version": dry.body["from_version"], "reason": "start"})
	if r.status != 200 || str(mapOf(r.body["stage"])["state"]) != "current" || r.body["fleet"] == nil {
		t.Fatalf("apply: %d %s", r.status, r.raw)
	}
	h.waitDecision("pod-a", authority.ModeShadow, authority.KillOff)
	if hist, err := h.ctl.History(ctx, 1); err != nil || len(hist) != 1 || hist[0].Action != "advance" || hist[0].Actor != "ana" || hist[0].Reason != "start" {
		t.Errorf("audit: %+v %v", hist, err)
	}

	// Stage 0's gates have no data: the dry run still shows the change,
	// and says an override is needed and why.
	dry = advance(map[string]any{"dry_run": true})
	if dry.status != 200 || !strings.Contains(dry.raw, `"needs":["override"]`) || !strings.Contains(dry.raw, "min_observations") || str(dry.body["diff"]) == "" {
		t.Fatalf("dry run over failing gates: %d %s", dry.status, dry.raw)
	}
	from := map[string]any{"from_stage": dry.body["from_stage"], "from_version": dry.body["from_version"]}
	if r := advance(from); r.status != 409 || str(r.body["error"]) != "gates_fail" || r.body["gates"] == nil {
		t.Errorf("apply over failing gates: %d %s", r.status, r.raw)
	}
	from["override"] = true
	if r := advance(from); r.status != 400 || str(r.body["field"]) != "reason" {
		t.Errorf("override without a reason: %d %s", r.status, r.raw)
	}
	from["reason"] = "evidence in INC-7"
	if r := advance(from); r.status != 200 || str(mapOf(r.body["stage"])["name"]) != "mysql on pod-a" {
		t.Fatalf("override: %d %s", r.status, r.raw)
	}
	if hist, _ := h.ctl.History(ctx, 1); len(hist) != 1 || hist[0].Action != "override" || hist[0].Reason != "evidence in INC-7" {
		t.Errorf("override audit: %+v", hist)
	}

	// The status lists the stages with the one in force.
	st := h.admin("GET", "/admin/rollout/status", nil)
	var states []string
	for _, s := range st.body["stages"].([]any) {
		states = append(states, str(mapOf(s)["state"]))
	}
	if strings.Join(states, ",") != "done,current,next" {
		t.Errorf("stages: %v (%s)", states, st.raw)
	}
	if r := h.do("GET", "/admin/rollout/advance", nil, adminToken); r.status != 405 {
		t.Errorf("GET advance: %d %s", r.status, r.raw)
	}
	if r := h.do("POST", "/admin/rollout/advance", map[string]any{"dry_run": true}, anonymous); r.status != 401 {
		t.Errorf("advance without the token: %d %s", r.status, r.raw)
	}
}

// Without a plan there is nothing to advance: 501 no_plan.
func TestAdminAdvanceWithoutPlan(t *testing.T) {
	t.Parallel()
	h := setup(t, options{})
	if r := h.admin("POST", "/admin/rollout/advance", map[string]any{"dry_run": true}); r.status != 501 || str(r.body["error"]) != "no_plan" {
		t.Errorf("advance without a plan: %d %s", r.status, r.raw)
	}
	st := h.admin("GET", "/admin/rollout/status", nil)
	if st.status != 200 || !strings.Contains(st.raw, `"stages":[]`) {
		t.Errorf("status without a plan: %s", st.raw)
	}
}

// One state per pod: after a kill over mysql, the flags say mode mysql,
// the route authority redis and applied mode shadow; the state says it
// once: Redis decides because of the kill switch, and what it holds back.
// It says so once the pod's handoff sweeper reports every shop handed off
// at the kill's flags version (the fences agree), and the pod shows that
// report beside it.
func TestPodStateIsOneThing(t *testing.T) {
	t.Parallel()
	h := setup(t, options{modes: map[string]authority.Mode{"pod-a": authority.ModeMySQL}})
	h.waitDecision("pod-a", authority.ModeMySQL, authority.KillOff)
	// A reserve under mysql hands shop 1001 to MySQL: the kill moves it
	// back.
	h.stock(1001, 7, 1, 10)
	if r := h.reserve(1001, "before-kill", 7, 1); r.status != 201 || str(r.body["authority"]) != "mysql" {
		t.Fatalf("reserve under mysql: %d %s", r.status, r.raw)
	}
	if r := h.admin("POST", "/admin/killswitch", map[string]any{"scope": "pod:pod-a", "reason": "p99 over 2s"}); r.status != 200 {
		t.Fatalf("kill: %d %s", r.status, r.raw)
	}
	version := h.waitHandoffs()
	st := h.admin("GET", "/admin/rollout/status", nil)
	states := map[string]map[string]any{}
	handoffs := map[string]map[string]any{}
	for _, p := range st.body["pods"].([]any) {
		states[str(mapOf(p)["pod"])] = mapOf(mapOf(p)["state"])
		handoffs[str(mapOf(p)["pod"])] = mapOf(mapOf(p)["handoffs"])
	}
	if a := handoffs["pod-a"]; str(a["state"]) != "done" || !regexp.MustCompile(fmt.Sprintf(`^handed off 1/1 shops in [0-9.]+m?s \(flags version %d\)$`, version)).MatchString(str(a["line"])) ||
		num(mapOf(a["report"])["shops"]) != 1 || num(mapOf(a["report"])["flags_version"]) != float64(version) {
		t.Errorf("pod-a's handoffs after the kill: %v", a)
	}
	if b := handoffs["pod-b"]; str(b["state"]) != "done" || str(b["line"]) != fmt.Sprintf("no shop to hand off (flags version %d)", version) {
		t.Errorf("pod-b's handoffs after the kill: %v", b)
	}
	a := states["pod-a"]
	if str(a["state"]) != "killed" || str(a["decides"]) != "redis" || str(a["headline"]) != "Redis decides: kill switch redis" ||
		!strings.Contains(str(a["detail"]), "holds back the mode mysql") || !strings.Contains(str(a["detail"]), "p99 over 2s") ||
		!strings.Contains(str(a["detail"]), "MySQL keeps a shadow") {
		t.Errorf("pod-a after a kill over mysql: %v", a)
	}
	if b := states["pod-b"]; str(b["state"]) != "redis" || str(b["headline"]) != "Redis decides (redis)" || !strings.Contains(str(b["detail"]), "MySQL is not written") {
		t.Errorf("pod-b in redis mode: %v", b)
	}
	// Every shop the topology routes is listed, with flags of its own or
	// not.
	var shops []string
	for _, s := range st.body["shops"].([]any) {
		sv := mapOf(s)
		shops = append(shops, str(sv["pod"])+":"+str(mapOf(sv["state"])["state"]))
		if sv["own_flags"] != false {
			t.Errorf("shop %v has no flags of its own: %v", sv["shop"], sv)
		}
	}
	if strings.Join(shops, ",") != "pod-a:killed,pod-a:killed,pod-b:redis" {
		t.Errorf("shops: %v", shops)
	}
}

// A release through DELETE /admin/killswitch (the dashboard's release
// too) starts the gates of the stage in force again, as `reservoir
// rollout release` does: the stage's since moves to the release, the
// gates count from the comparer's next whole window (counting_from), and
// min_duration's value is never negative. A kill does not move it.
func TestReleaseThroughTheAPIRestartsTheGates(t *testing.T) {
	t.Parallel()
	h := setup(t, options{plan: dashboardPlan})
	ctx := context.Background()
	if _, err := h.ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	plan := func() map[string]any {
		t.Helper()
		r := h.admin("GET", "/admin/rollout/status", nil)
		if r.status != 200 || r.body["plan"] == nil {
			t.Fatalf("status: %d %s", r.status, r.raw)
		}
		return mapOf(r.body["plan"])
	}
	applied := str(plan()["since"])
	if r := h.admin("POST", "/admin/killswitch", map[string]any{"scope": "pod:pod-a", "reason": "drill"}); r.status != 200 {
		t.Fatalf("kill: %d %s", r.status, r.raw)
	}
	if got := str(plan()["since"]); got != applied {
		t.Errorf("the kill moved the stage's since from %s to %s", applied, got)
	}
	time.Sleep(50 * time.Millisecond)
	released := time.Now().Truncate(time.Millisecond)
	if r := h.admin("DELETE", "/admin/killswitch?scope=pod:pod-a&reason=drill+over", nil); r.status != 200 {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	p := plan()
	since, err := time.Parse(time.RFC3339Nano, str(p["since"]))
	if err != nil || since.Before(released) || since.After(time.Now()) {
		t.Errorf("after the release at %s the stage's since is %v (applied %s); want the release's time, neither before it nor ahead of the clock (%v)",
			released.UTC().Format(time.RFC3339Nano), p["since"], applied, err)
	}
	next := since.UTC().Truncate(time.Minute)
	if !next.Equal(since) {
		next = next.Add(time.Minute)
	}
	if got := str(p["counting_from"]); got != next.Format(time.RFC3339) || str(mapOf(p["evidence"])["since"]) != got {
		t.Errorf("counting_from %q, evidence since %v; want the comparer's next window, %s", got, mapOf(p["evidence"])["since"], next.Format(time.RFC3339))
	}
	for _, g := range p["gates"].([]any) {
		if gv := mapOf(g); str(gv["gate"]) == "min_duration" && (num(gv["value"]) < 0 || strings.Contains(str(gv["why"]), "for -")) {
			t.Errorf("min_duration after the release: %v: a negative duration", gv)
		}
	}
}
