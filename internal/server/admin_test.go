package server_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// adminCalls is every admin endpoint with a request that works when
// authorised.
var adminCalls = []struct {
	method, path string
	body         any
	want         int
}{
	{"GET", "/admin/rollout/status", nil, 200},
	{"GET", "/admin/rollout/history", nil, 200}, // the audit exists without a plan
	{"GET", "/admin/diffs?pod=pod-a&limit=5", nil, 200},
	{"GET", "/admin/stats?pod=pod-a&since=15m", nil, 200},
	{"GET", "/admin/series?pod=pod-a", nil, 200},
	{"POST", "/admin/reconcile?pod=pod-a", nil, 200},
	{"GET", "/admin/reconcile?pod=pod-a", nil, 200},
	{"POST", "/admin/killswitch", map[string]any{"scope": "shop:1002", "reason": "auth test"}, 200},
	{"DELETE", "/admin/killswitch", map[string]any{"scope": "shop:1002", "reason": "auth test over"}, 200},
}

// Acceptance (c): without a token or with a wrong one every admin endpoint
// answers 401 (and changes nothing); with the token it works. The token
// never appears in the logs.
func TestAdminNeedsTheToken(t *testing.T) {
	t.Parallel()
	h := setup(t, options{modes: map[string]authority.Mode{"pod-a": authority.ModeShadow}})
	before, err := h.flags.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range adminCalls {
		for _, auth := range []struct{ name, header string }{
			{"no token", ""},
			{"wrong token", "Bearer " + adminToken + "x"},
			{"wrong scheme", "Basic " + adminToken},
			{"empty bearer", "Bearer "},
			{"prefix of the token", "Bearer " + adminToken[:10]},
		} {
			r := h.do(c.method, c.path, c.body, "", "Authorization", auth.header)
			if r.status != http.StatusUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") || str(r.body["error"]) != "unauthorized" {
				t.Errorf("%s %s with %s: %d %s", c.method, c.path, auth.name, r.status, trim(r.raw))
			}
		}
	}
	if after, _ := h.flags.Read(); after.KillAt(flagdoc.ShopScope(1002)).Engaged() || len(after.Shops) != len(before.Shops) {
		t.Fatal("an unauthorised call changed the flags file")
	}
	for _, c := range adminCalls {
		if r := h.admin(c.method, c.path, c.body); r.status != c.want {
			t.Errorf("%s %s with the token: %d %s", c.method, c.path, r.status, trim(r.raw))
		}
	}
	if strings.Contains(h.logBuf.String(), adminToken[:12]) {
		t.Error("the admin token appears in the log")
	}
	if !strings.Contains(h.logBuf.String(), `"route":"GET /admin/rollout/status"`) {
		t.Error("no access log line for the admin calls")
	}
}

// A server without a token has no admin API at all.
func TestAdminDisabledWithoutToken(t *testing.T) {
	t.Parallel()
	h := setup(t, options{noToken: true})
	for _, tok := range []string{"", adminToken} {
		r := h.do("GET", "/admin/rollout/status", nil, tok)
		if r.status != http.StatusUnauthorized || str(r.body["error"]) != "admin_disabled" {
			t.Errorf("token %q: %d %s", tok, r.status, r.raw)
		}
	}
}

// The kill switch through the admin API: a pod in mysql mode answers with
// MySQL authority; engaged, the next reserve is answered by Redis (the
// flags file records who and why, and this replica reports how fast it
// obeyed, and the relay lag at the switch, which the log records too);
// released, MySQL answers again. Bad requests name the field.
func TestAdminKillSwitch(t *testing.T) {
	t.Parallel()
	h := setup(t, options{modes: map[string]authority.Mode{"pod-a": authority.ModeMySQL}})
	h.stock(1001, 7, 1, 100)
	if r := h.reserve(1001, "before", 7, 1); r.status != 201 || str(r.body["authority"]) != "mysql" {
		t.Fatalf("reserve in mysql mode: %d %s", r.status, r.raw)
	}
	for _, c := range []struct {
		body  any
		field string
	}{
		{map[string]any{"reason": "x"}, "scope"},
		{map[string]any{"scope": "pod:nope", "reason": "x"}, "scope"},
		{map[string]any{"scope": "planet:mars", "reason": "x"}, "scope"},
		{map[string]any{"scope": "pod:pod-a"}, "reason"},
		{map[string]any{"scope": "pod:pod-a", "reason": "x", "state": "off"}, "state"},
		{map[string]any{"scope": "pod:pod-a", "reason": "x", "why": "y"}, "why"},
	} {
		if r := h.admin("POST", "/admin/killswitch", c.body); r.status != 400 || str(r.body["field"]) != c.field {
			t.Errorf("engage %v: %d %s", c.body, r.status, r.raw)
		}
	}

	r := h.do("POST", "/admin/killswitch", map[string]any{"scope": "pod:pod-a", "reason": "p99 over 2s"}, adminToken, "X-Reservoir-Actor", "alice")
	lag := str(r.body["relay_lag"])
	if r.status != 200 || r.body["audited"] != true || r.body["obeyed_after_ms"] == nil || !lagRE.MatchString(lag) || strings.Contains(lag, "pod-b") {
		t.Fatalf("engage: %d %s", r.status, r.raw)
	}
	t.Logf("this replica obeyed the kill switch %.1f ms after the flags file was written; relay lag at the switch: %s", num(r.body["obeyed_after_ms"]), lag)
	f, err := h.flags.Read()
	if err != nil {
		t.Fatal(err)
	}
	if k := f.KillAt(flagdoc.PodScope("pod-a")); k.State != authority.KillRedis || k.Actor != "alice" || k.Reason != "p99 over 2s" {
		t.Fatalf("flags file: %+v", k)
	}
	if !strings.Contains(h.logBuf.String(), `"relay_lag":"`+lag+`"`) {
		t.Error("the log does not record the relay lag at the switch (there is no audit without a plan)")
	}
	if r := h.reserve(1001, "after", 7, 1); r.status != 201 || str(r.body["authority"]) != "redis" {
		t.Fatalf("reserve with the kill switch engaged: %d %s", r.status, r.raw)
	}
	// A reservation made under MySQL authority is still claimed once.
	if r := h.do("POST", "/v1/shops/1001/reservations/before/claim", nil, ""); r.status != 200 {
		t.Fatalf("claim across the flip: %d %s", r.status, r.raw)
	}
	st := h.admin("GET", "/admin/rollout/status", nil)
	if !strings.Contains(st.raw, `"kill":{"state":"redis","reason":"p99 over 2s","actor":"alice"`) {
		t.Errorf("status does not show the switch: %s", st.raw)
	}

	// Release, with scope and reason as query parameters (for curl).
	if r := h.admin("DELETE", "/admin/killswitch?scope=pod:pod-a&reason=fixed", nil); r.status != 200 || str(mapOf(r.body["kill"])["state"]) != "off" {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	if r := h.reserve(1001, "released", 7, 1); r.status != 201 || str(r.body["authority"]) != "mysql" {
		t.Fatalf("reserve after release: %d %s", r.status, r.raw)
	}
}

// lagPlan is a plan over the harness's pods, for a controller (an audit).
const lagPlan = `
pods = ["pod-a", "pod-b"]
[[stages]]
name = "mysql on pod-a"
mode = "mysql"
pods = ["pod-a"]
`

// lagRE is the relay lag at a switch of pod-a, as the audit and the kill
// switch's answer say it.
var lagRE = regexp.MustCompile(`^pod-a \d+ change\(s\), oldest \d`)

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// /healthz, /readyz and /metrics: the stores answer, and one scrape has
// the API's, the stores', the facade's, the mirror's, the comparer's and
// the Go runtime's metrics, plus the flags this replica obeys.
func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	h := setup(t, options{modes: map[string]authority.Mode{"pod-a": authority.ModeShadow}})
	if r := h.do("GET", "/healthz", nil, ""); r.status != 200 {
		t.Fatalf("healthz: %d", r.status)
	}
	r := h.do("GET", "/readyz", nil, "")
	if r.status != 200 || r.body["ready"] != true || strings.Count(r.raw, `"ok":true`) != 3 {
		t.Fatalf("readyz: %d %s", r.status, r.raw)
	}
	h.stock(1001, 7, 1, 10)
	h.reserve(1001, "m1", 7, 1)
	h.flush()
	m := h.do("GET", "/metrics", nil, "")
	for _, want := range []string{
		`reservoir_api_operations_total{code="201",op="reserve",reservoir_pod="pod-a"} 1`,
		`reservoir_compare_observations_total{class="match",mode="shadow",op="reserve",reservoir_pod="pod-a"} 1`,
		`reservoir_store_call_seconds_count{op="reserve",reservoir_pod="pod-a",result="ok",store="mysql"} 1`,
		`reservoir_mysql_conn_hold_seconds_count{caller="reserve",reservoir_pod="pod-a"}`,
		`reservoir_redis_script_seconds_count{reservoir_pod="pod-a",script="reserve"}`,
		`reservoir_dualwrite_shadow_skipped_total{reservoir_pod="pod-a"} 0`,
		`reservoir_rollout_mode{mode="shadow",reservoir_pod="pod-a"} 1`,
		`reservoir_rollout_kill_switch{reservoir_pod="pod-a",state="off"} 1`,
		`reservoir_http_requests_total{code="201",route="POST /v1/shops/{shop}/reservations"} 1`,
		`reservoir_rollout_flags_loaded 1`,
		`reservoir_dualwrite_flags_unavailable_total{reservoir_pod="pod-a"} 0`,
		`reservoir_mirror_backlog_changes{reservoir_pod="pod-a"}`,
		`reservoir_mirror_lag_seconds{reservoir_pod="pod-a"}`,
		`reservoir_mirror_relay_active{reservoir_pod="pod-a"}`,
		`reservoir_redis_not_decider_total{op="reserve",reservoir_pod="pod-a"} 0`,
		`reservoir_redis_tombstones_written_total{reservoir_pod="pod-a",state="refused"} 0`,
		`go_goroutines`,
		`process_open_fds`,
	} {
		if !strings.Contains(m.raw, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// The series behind the dashboard's rates and latency: after traffic,
// pod-a shows operations per second, compared calls, and per-store reserve
// latency.
func TestAdminSeries(t *testing.T) {
	t.Parallel()
	h := setup(t, options{modes: map[string]authority.Mode{"pod-a": authority.ModeShadow}})
	h.stock(1001, 7, 1, 1000)
	for i := range 20 {
		h.reserve(1001, "s"+string(rune('a'+i)), 7, 1)
	}
	h.flush()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := h.admin("GET", "/admin/series?pod=pod-a&points=1", nil)
		pts, _ := mapOf(r.body["pods"])["pod-a"].([]any)
		if len(pts) == 1 {
			p := mapOf(pts[0])
			lat := mapOf(p["latency"])
			if num(p["ops_per_sec"]) > 0 && num(p["observations_per_sec"]) > 0 && mapOf(lat["redis"])["reserve"] != nil && mapOf(lat["mysql"])["reserve"] != nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("series never showed the traffic: %s", r.raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Graceful shutdown: a request in flight when the server is told to stop
// finishes with its answer, new connections are refused, and Serve returns
// nil. Then closing the cell drains the facade and flushes the comparer.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	h := setup(t, options{modes: map[string]authority.Mode{"pod-a": authority.ModeMySQL}, noHTTP: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- h.srv.Serve(ctx, ln, nil) }()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Timeout: 10 * time.Second}
	post := func(path, body string) (int, error) {
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+clientToken)
		res, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		res.Body.Close()
		return res.StatusCode, nil
	}
	if code, err := post("/v1/shops/1001/items/7/locations/1/adjust", `{"available": 10}`); err != nil || code != 200 {
		t.Fatalf("adjust: %d %v", code, err)
	}
	// Hold the ledger row so the next adjust waits inside the server.
	tx, err := h.pods["pod-a"].db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }() // a failing test must not leave the adjust waiting
	if _, err := tx.Exec("SELECT available FROM inventory_ledger WHERE shop_id = 1001 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var code int
	var reqErr error
	wg.Go(func() { code, reqErr = post("/v1/shops/1001/items/7/locations/1/adjust", `{"delta": 5}`) })
	testdb.WaitStatement(t, h.pods["pod-a"].db.DB, "adjust") // the adjust is in flight, blocked on the row
	stop()
	// The listener closes once shutdown begins: new connections are
	// refused while the request in flight still runs.
	for deadline := time.Now().Add(5 * time.Second); ; {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("new connections were still accepted 5 s after shutdown began")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v while a request was in flight", err)
	default:
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if reqErr != nil || code != 200 {
		t.Fatalf("the request in flight got %d %v", code, reqErr)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after the last request")
	}
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.cell.Close(cctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("close cell: %v", err)
	}
}

// A pod whose Redis is down: /readyz stays 200 (the replica serves the
// other pod) and lists the pod as degraded, says which store and why as a
// class ("unreachable"; the driver's error, with the address, only with the
// admin token), and the pod's calls answer 503 with Retry-After (the
// authority did not answer, or its breaker refuses calls at once), while
// the other pod keeps working.
func TestAuthorityDown(t *testing.T) {
	t.Parallel()
	h := setup(t, options{deadRedis: "pod-b"})
	// go-redis retries a refused dial for about 400ms; should the 1s
	// budget run out first on a loaded machine, the class is "timeout".
	down := func(raw string) bool {
		return strings.Contains(raw, `"pod":"pod-b","mysql":"ok","redis":"unreachable","ok":false`) ||
			strings.Contains(raw, `"pod":"pod-b","mysql":"ok","redis":"timeout","ok":false`)
	}
	r := h.do("GET", "/readyz", nil, "")
	if r.status != http.StatusOK || r.body["ready"] != true || !strings.Contains(fmt.Sprint(r.body["degraded"]), "pod-b: redis failed its ping") ||
		!down(r.raw) || !strings.Contains(r.raw, `"pod":"pod-a","mysql":"ok","redis":"ok","ok":true,"mysql_breaker":"closed","redis_breaker":"closed"}`) {
		t.Fatalf("readyz: %d %s", r.status, r.raw)
	}
	if strings.Contains(r.raw, "127.0.0.1") || strings.Contains(r.raw, "redis_error") {
		t.Errorf("readyz without the token shows the store's error: %s", r.raw)
	}
	if r := h.admin("GET", "/readyz", nil); r.status != http.StatusOK || !down(r.raw) || !strings.Contains(r.raw, `"redis_error":"`) {
		t.Errorf("readyz with the token: %d %s, want the driver's error", r.status, r.raw)
	}
	r = h.reserve(2001, "down", 7, 1)
	if code := str(r.body["error"]); r.status != http.StatusServiceUnavailable || (code != "unavailable" && code != "store_unavailable") || r.header.Get("Retry-After") == "" {
		t.Fatalf("reserve on a pod whose authority is down: %d %s %v", r.status, r.raw, r.header)
	}
	if why := problemOf(r, http.StatusServiceUnavailable, str(r.body["error"])); why != "" {
		t.Errorf("reserve on a pod whose authority is down: %s", why)
	}
	if strings.Contains(r.raw, "127.0.0.1:1") {
		t.Errorf("the answer leaks the store's error: %s", r.raw)
	}
	if logs := h.logBuf.String(); !strings.Contains(logs, "authority store failed") && !strings.Contains(logs, "failed its health check") {
		t.Error("the store's error is not logged")
	}
	h.stock(1001, 7, 1, 5)
	if r := h.reserve(1001, "up", 7, 1); r.status != http.StatusCreated {
		t.Fatalf("the other pod: %d %s", r.status, r.raw)
	}
}

// The relay lag next to the kill switch: with no relay running, what MySQL
// decides stays in the change feed; the admin status shows it per pod,
// the kill switch answers it (and the audit records it), and the shop's
// next call drains it into Redis before Redis decides, after which the lag
// is gone.
func TestAdminRelayLag(t *testing.T) {
	t.Parallel()
	h := setup(t, options{modes: map[string]authority.Mode{"pod-a": authority.ModeMySQL}, noRelay: true, plan: lagPlan})
	h.stock(1001, 7, 1, 100)
	for i := range 3 {
		if r := h.reserve(1001, fmt.Sprintf("lag-%d", i), 7, 1); r.status != 201 || str(r.body["authority"]) != "mysql" {
			t.Fatalf("reserve in mysql mode: %d %s", r.status, r.raw)
		}
	}
	lagOf := func(pod string) map[string]any {
		t.Helper()
		st := h.admin("GET", "/admin/rollout/status", nil)
		for _, p := range st.body["pods"].([]any) {
			if pv := mapOf(p); str(pv["pod"]) == pod {
				return mapOf(pv["relay_lag"])
			}
		}
		t.Fatalf("no pod %s in the status: %s", pod, st.raw)
		return nil
	}
	if l := lagOf("pod-a"); num(l["changes"]) < 3 || num(l["oldest_ms"]) <= 0 || l["error"] != nil || l["at"] == nil {
		t.Fatalf("pod-a's relay lag with 3 reservations undelivered: %v", l)
	}
	if l := lagOf("pod-b"); num(l["changes"]) != 0 || l["error"] != nil {
		t.Errorf("pod-b's relay lag: %v", l)
	}

	r := h.admin("POST", "/admin/killswitch", map[string]any{"scope": "pod:pod-a", "reason": "lag drill"})
	lag := str(r.body["relay_lag"])
	if r.status != 200 || !lagRE.MatchString(lag) || strings.HasPrefix(lag, "pod-a 0 ") {
		t.Fatalf("engage with changes undelivered: %d %s", r.status, r.raw)
	}
	t.Logf("relay lag at the switch: %s", lag)
	if hist, err := h.ctl.History(context.Background(), 1); err != nil || len(hist) != 1 || hist[0].Reason != "lag drill [relay lag at the switch: "+lag+"]" {
		t.Fatalf("the audit does not record the lag at the switch: %+v %v", hist, err)
	}
	if f, err := h.flags.Read(); err != nil || f.KillAt(flagdoc.PodScope("pod-a")).Reason != "lag drill" {
		t.Fatalf("the flags file keeps the operator's reason: %v %v", f, err)
	}
	// The shop's next call hands it to Redis: the drain delivers every
	// pending change first, so Redis holds the three carts.
	if r := h.reserve(1001, "after-kill", 7, 1); r.status != 201 || str(r.body["authority"]) != "redis" {
		t.Fatalf("reserve with the kill switch engaged: %d %s", r.status, r.raw)
	}
	for i := range 3 {
		if r := h.do("GET", fmt.Sprintf("/v1/shops/1001/reservations/lag-%d", i), nil, ""); r.status != 200 {
			t.Errorf("Redis lacks lag-%d after the drain: %d %s", i, r.status, r.raw)
		}
	}
	deadline := time.Now().Add(5 * time.Second) // the status may show the switch's measurement for a moment
	for l := lagOf("pod-a"); num(l["changes"]) != 0; l = lagOf("pod-a") {
		if time.Now().After(deadline) {
			t.Fatalf("the lag after the drain: %v", l)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A shop whose deciding store cannot be settled: pod-b's flags say MySQL,
// its fence still says Redis, and Redis is down, so the handoff cannot
// finish. The answer is 503 "unavailable" saying the outcome is unknown
// (retry the same call), never a guess from the other store.
func TestDeciderUnreachable(t *testing.T) {
	t.Parallel()
	h := setup(t, options{deadRedis: "pod-b", modes: map[string]authority.Mode{"pod-b": authority.ModeMySQL}})
	r := h.reserve(2001, "stranded", 7, 1)
	if r.status != http.StatusServiceUnavailable || str(r.body["error"]) != "unavailable" || r.header.Get("Retry-After") == "" ||
		!strings.Contains(str(r.body["message"]), "outcome is unknown") || !strings.Contains(str(r.body["message"]), "handoff") {
		t.Fatalf("reserve while the handoff cannot finish: %d %s", r.status, r.raw)
	}
	if strings.Contains(r.raw, "127.0.0.1:1") {
		t.Errorf("the answer leaks the store's error: %s", r.raw)
	}
	if m := h.do("GET", "/metrics", nil, ""); !strings.Contains(m.raw, `reservoir_dualwrite_owner_unreachable_total{reason="handoff",reservoir_pod="pod-b"} 1`) {
		t.Error("the unreachable decider is not counted")
	}
}

// A kill switch on a shop no pod lists is refused, 400 unknown_shop,
// naming the shop, the shops each pod lists and where default_rule would
// route it, and nothing is written; "force": true writes it (the shop is
// about to be added), and its release goes through without force (the
// flags name the shop). Before, shop:9999 was written and answered 200.
func TestKillSwitchRefusesAShopNoPodLists(t *testing.T) {
	t.Parallel()
	h := setup(t, options{})
	before, err := h.flags.Read()
	if err != nil {
		t.Fatal(err)
	}
	r := h.admin("POST", "/admin/killswitch", map[string]any{"scope": "shop:9999", "reason": "typo"})
	want := `scope: no pod of the topology lists shop 9999 (the pods' shops: pod-a: 1001, 1002; pod-b: 2001); default_rule "pod:pod-a" would route it to pod pod-a; send "force": true`
	if r.status != http.StatusBadRequest || str(r.body["error"]) != "unknown_shop" || str(r.body["field"]) != "scope" || !strings.Contains(str(r.body["message"]), want) {
		t.Fatalf("kill shop:9999: %d %s, want 400 unknown_shop saying %s", r.status, r.raw, want)
	}
	if after, _ := h.flags.Read(); after.Version != before.Version {
		t.Fatalf("a refused kill switch wrote the flags: version %d -> %d", before.Version, after.Version)
	}
	if r := h.admin("POST", "/admin/killswitch", map[string]any{"scope": "shop:1001", "reason": "listed"}); r.status != http.StatusOK {
		t.Fatalf("kill shop:1001 (listed): %d %s", r.status, r.raw)
	}
	if r := h.admin("POST", "/admin/killswitch", map[string]any{"scope": "shop:9999", "reason": "about to be added", "force": true}); r.status != http.StatusOK {
		t.Fatalf("kill shop:9999 with force: %d %s", r.status, r.raw)
	}
	if r := h.admin("DELETE", "/admin/killswitch", map[string]any{"scope": "shop:9999", "reason": "over"}); r.status != http.StatusOK {
		t.Fatalf("release shop:9999, which the flags name: %d %s", r.status, r.raw)
	}
	if r := h.admin("DELETE", "/admin/killswitch", map[string]any{"scope": "shop:8888", "reason": "typo"}); r.status != http.StatusBadRequest || str(r.body["error"]) != "unknown_shop" {
		t.Fatalf("release shop:8888, which nothing names: %d %s", r.status, r.raw)
	}
}
