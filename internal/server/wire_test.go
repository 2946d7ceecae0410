package server_test

import (
	"strings"
	"testing"

	"github.com/seed31b0e981/reservoir/internal/wire/wiretest"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// Every JSON body the admin API answers is the wire's: no Go field name as
// a key and no zero time (wiretest.Faults; its own test shows it failing
// on rollout.Status encoded as it is). GET /admin/rollout/status is read
// where the Go names and the zero times used to leak: before the first
// stage (the plan's since not known), with a pod's kill switch engaged and
// the other's never set (its since not known), and after an advance. The
// other admin calls, the checkout API's answers and an error are read too.
func TestAdminJSONIsTheWires(t *testing.T) {
	t.Parallel()
	h := setup(t, options{plan: dashboardPlan})
	check := func(what string, r response) {
		t.Helper()
		if r.raw == "" {
			t.Errorf("%s: %d without a body", what, r.status)
			return
		}
		if faults := wiretest.Faults([]byte(r.raw)); len(faults) > 0 {
			t.Errorf("%s:\n  %s\nin %s", what, strings.Join(faults, "\n  "), r.raw)
		}
	}
	status := func(what string) map[string]any {
		t.Helper()
		r := h.admin("GET", "/admin/rollout/status", nil)
		check("status "+what, r)
		return r.body
	}

	st := status("before the first stage")
	plan := mapOf(st["plan"])
	if plan == nil || num(plan["stage"]) != -1 || plan["since"] != nil || str(mapOf(plan["next"])["name"]) != "shadow on pod-a" {
		t.Errorf("the plan before its first stage: %v", st["plan"])
	}
	check("advance dry run", h.admin("POST", "/admin/rollout/advance", map[string]any{"dry_run": true}))
	check("kill", h.do("POST", "/admin/killswitch", map[string]any{"scope": "pod:pod-a", "reason": "wire test"}, adminToken, "X-Reservoir-Actor", "ana"))
	st = status("with pod-a's kill switch engaged")
	for _, p := range mapOf(st["plan"])["pods"].([]any) {
		pv := mapOf(p)
		kill, engaged := mapOf(pv["kill"]), str(pv["pod"]) == "pod-a"
		if want := map[bool]string{true: "redis", false: "off"}[engaged]; str(kill["state"]) != want || (kill["since"] != nil) != engaged ||
			str(mapOf(pv["effective"])["authority"]) != "redis" || mapOf(pv["handoffs"])["state"] == nil {
			t.Errorf("plan pod %s: %v", pv["pod"], pv)
		}
	}
	check("release", h.do("DELETE", "/admin/killswitch?scope=pod:pod-a&reason=over", nil, adminToken))
	h.stock(1001, 7, 1, 100)
	dry := h.admin("POST", "/admin/rollout/advance", map[string]any{"dry_run": true})
	check("advance", h.admin("POST", "/admin/rollout/advance", map[string]any{"from_stage": dry.body["from_stage"], "from_version": dry.body["from_version"]}))
	h.waitDecision("pod-a", authority.ModeShadow, authority.KillOff)
	check("reserve", h.reserve(1001, "wire", 7, 2))
	check("get", h.do("GET", "/v1/shops/1001/reservations/wire", nil, ""))
	check("claim", h.do("POST", "/v1/shops/1001/reservations/wire/claim", nil, ""))
	check("release a reservation", h.do("POST", "/v1/shops/1001/reservations/nothing/release", nil, ""))
	check("refused reserve", h.reserve(1001, "too-many", 7, 1000))
	check("availability", h.do("GET", "/v1/shops/1001/items/7/availability", nil, ""))
	check("adjust", h.do("POST", "/v1/shops/1001/items/7/locations/1/adjust", map[string]any{"delta": 1}, ""))
	check("an error", h.admin("GET", "/admin/diffs?limit=0", nil))
	h.flush()
	st = status("in the first stage")
	if plan := mapOf(st["plan"]); plan["since"] == nil || mapOf(plan["evidence"])["authority_mean_ns"] == nil {
		t.Errorf("the plan in its first stage: %v", st["plan"])
	}
	for _, path := range []string{"/admin/rollout/history", "/admin/diffs", "/admin/stats?pod=pod-a&since=15m", "/admin/series",
		"/readyz", "/healthz"} {
		check(path, h.admin("GET", path, nil))
	}
	check("POST /admin/reconcile", h.admin("POST", "/admin/reconcile?pod=pod-a", nil))
	check("GET /admin/reconcile", h.admin("GET", "/admin/reconcile?pod=pod-a", nil))
	check("gates_fail", h.admin("POST", "/admin/rollout/advance", map[string]any{"from_stage": 0, "from_version": h.admin("POST", "/admin/rollout/advance",
		map[string]any{"dry_run": true}).body["from_version"]}))
}
