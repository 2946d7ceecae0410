package server_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/go-sql-driver/mysql"

	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// contractBase is the one server URL the contract's router knows: every
// request is looked up as if sent there, whichever test server took it.
const contractBase = "http://reservoir.contract"

// notProvoked are the statuses docs/openapi.yaml documents that no case
// of TestOpenAPIContract provokes, keyed "operationId status", each with
// why. Keep it short: a status here is one the test cannot show the
// server really answers as documented.
var notProvoked = map[string]string{
	// flags_changed is another operator's change landing between this
	// release's read and write of the flags: a race the HTTP API gives no
	// way to line up (rollout's tests provoke it under the controller).
	"killSwitchRelease 409": "flags_changed: a race between two operators",
}

// reqCheck says what the document must say of a case's request.
type reqCheck int

const (
	// reqValid: the request is one the document allows.
	reqValid reqCheck = iota
	// reqInvalid: the case sends what the document forbids (a missing
	// token, a malformed id, an unknown member, another Content-Type),
	// and the server refuses it too.
	reqInvalid
	// reqEither: not checked (a body far over the limit, say).
	reqEither
)

// contract checks requests and answers against docs/openapi.yaml and
// keeps which status of which operation each case provoked.
type contract struct {
	t      testing.TB
	router routers.Router
	client *http.Client
	mu     sync.Mutex
	seen   map[string]map[int]bool // operationId: statuses answered
}

// newContract checks against doc (loadOpenAPI's, or one a test broke on
// purpose) and reports to t.
func newContract(t testing.TB, doc *openapi3.T) *contract {
	doc.Servers = openapi3.Servers{{URL: contractBase}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	// The dashboard's files and the metrics are text; their schemas
	// say string.
	for _, ct := range []string{"text/html", "text/css", "text/javascript", "application/openmetrics-text"} {
		openapi3filter.RegisterBodyDecoder(ct, openapi3filter.PlainBodyDecoder)
	}
	return &contract{t: t, router: router, seen: map[string]map[int]bool{},
		// A redirect is an answer of its own (GET / answers 302).
		client: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// call is one case: a request, the status it must provoke and whether
// the document allows the request.
type call struct {
	method, path string
	// body is sent as is when a string, else encoded as JSON; with a
	// body, Content-Type is application/json unless header says.
	body any
	// token is the bearer token; "" sends no Authorization header.
	token  string
	header []string
	want   int
	req    reqCheck
}

// do sends c to base, checks it provoked c.want, and checks the request
// and the answer against the document.
func (k *contract) do(base string, c call) response {
	t := k.t
	t.Helper()
	var data []byte
	switch b := c.body.(type) {
	case nil:
	case string:
		data = []byte(b)
	default:
		var err error
		if data, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	build := func(base string) *http.Request {
		var rd io.Reader
		if c.body != nil {
			rd = bytes.NewReader(data)
		}
		req, err := http.NewRequest(c.method, base+c.path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if c.body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		for i := 0; i+1 < len(c.header); i += 2 {
			req.Header.Set(c.header[i], c.header[i+1])
		}
		return req
	}
	res, err := k.client.Do(build(base))
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	raw, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", c.method, c.path, err)
	}
	r := response{status: res.StatusCode, header: res.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	if r.status != c.want {
		t.Errorf("%s %s: %d, want %d: %s", c.method, c.path, r.status, c.want, r.raw)
	}
	k.check(build(contractBase), c.req, res.StatusCode, res.Header, raw)
	return r
}

// check validates req (as the document's router finds it) and the
// answer it got against the document, and records the status.
func (k *contract) check(req *http.Request, rc reqCheck, status int, header http.Header, body []byte) {
	t := k.t
	t.Helper()
	name := req.Method + " " + req.URL.RequestURI()
	route, params, err := k.router.FindRoute(req)
	if err != nil {
		t.Errorf("%s: no operation of docs/openapi.yaml: %v", name, err)
		return
	}
	ctx := context.Background()
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{MultiError: true, AuthenticationFunc: bearer}}
	switch err := openapi3filter.ValidateRequest(ctx, in); {
	case rc == reqValid && err != nil:
		t.Errorf("%s: the request breaks docs/openapi.yaml: %v", name, err)
	case rc == reqInvalid && err == nil:
		t.Errorf("%s: docs/openapi.yaml allows this request, which the server refuses (%d)", name, status)
	}
	// The answer is checked against the operation whatever the request:
	// a refusal is part of the contract too.
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: header,
		Body: io.NopCloser(bytes.NewReader(body)), Options: &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true}}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Errorf("%s: its %d answer breaks docs/openapi.yaml: %v\n%s", name, status, err, clip(body))
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	op := route.Operation.OperationID
	if k.seen[op] == nil {
		k.seen[op] = map[int]bool{}
	}
	k.seen[op][status] = true
}

// bearer is the document's security schemes as a client sees them: a
// bearer token is there (whether the server knows it is its business).
func bearer(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	scheme, token, ok := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return fmt.Errorf("no bearer token for %s", in.SecuritySchemeName)
	}
	return nil
}

func clip(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "..."
	}
	return string(b)
}

// missing is every status the document gives an operation that no case
// provoked, but those of notProvoked.
func (k *contract) missing(doc *openapi3.T) []string {
	var out []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for code := range op.Responses.Map() {
				key := op.OperationID + " " + code
				var status int
				if _, err := fmt.Sscan(code, &status); err != nil {
					out = append(out, key+" (not a status: "+path+" "+method+")")
					continue
				}
				if !k.seen[op.OperationID][status] && notProvoked[key] == "" {
					out = append(out, key)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// stalled sends a body that stops halfway to a server whose read timeout
// is short, and checks the 408 against the document.
func (k *contract) stalled(h http.Handler, path, token string) {
	t := k.t
	t.Helper()
	hs := httptest.NewUnstartedServer(h)
	hs.Config.ReadTimeout = 300 * time.Millisecond
	hs.Start()
	defer hs.Close()
	conn, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: reservoir\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"tok", path, token)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	req, _ := http.NewRequest("POST", contractBase+path, strings.NewReader(`{"token":"t","lines":[{"item":7,"quantity":1,"locations":[1]}]}`))
	res, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatalf("POST %s with a stalled body: %v", path, err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusRequestTimeout {
		t.Errorf("POST %s with a stalled body: %d, want 408: %s", path, res.StatusCode, body)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	k.check(req, reqEither, res.StatusCode, res.Header, body)
}

// shelfToken is a client with the inventory role for shop 1002 only.
const shelfToken = "test-shelf-token-0123456789"

func shelfClient() string {
	return fmt.Sprintf("[[clients]]\nname = \"shelf\"\ntoken_sha256 = \"%x\"\nroles = [\"inventory\"]\nshops = [1002]\n", sha256.Sum256([]byte(shelfToken)))
}

// TestOpenAPIContract drives every route of a running server (real
// MariaDB and Redis) through every status docs/openapi.yaml gives it,
// and holds each request and each answer to the document with
// kin-openapi's openapi3filter: the answer's status must be documented
// for its operation, its Content-Type one the operation lists, its
// headers and body valid against the schemas (which refuse members they
// do not list, so a Go field name slipping onto the wire fails). Then
// every documented status must have been provoked by some case, but
// those notProvoked lists.
func TestOpenAPIContract(t *testing.T) {
	t.Parallel()
	k := newContract(t, loadOpenAPI(t))
	h := setup(t, options{plan: dashboardPlan, clients: shelfClient(), operators: testOperators})
	base := h.http.URL
	x := func(want int, rc reqCheck, method, path string, body any, token string, header ...string) response {
		t.Helper()
		return k.do(base, call{method: method, path: path, body: body, token: token, header: header, want: want, req: rc})
	}
	line := func(token string, qty int64, ttl int64) map[string]any {
		return map[string]any{"token": token, "ttl_ms": ttl, "lines": []map[string]any{{"item": 7, "quantity": qty, "locations": []int64{1}}}}
	}
	const ct = clientToken
	bigBody := `{"token":"` + strings.Repeat("a", 300<<10) + `"}`

	// Checkout: adjust first, for the stock.
	adj := "/v1/shops/1001/items/7/locations/1/adjust"
	x(200, reqValid, "POST", adj, map[string]any{"available": 10}, ct)
	x(200, reqValid, "POST", adj, map[string]any{"delta": 1}, ct, "Idempotency-Key", "k-1")
	x(200, reqValid, "POST", adj, map[string]any{"delta": 1}, ct, "Idempotency-Key", "k-1") // replayed
	x(409, reqValid, "POST", adj, map[string]any{"delta": 2}, ct, "Idempotency-Key", "k-1") // key_conflict
	x(409, reqValid, "POST", adj, map[string]any{"delta": -1000}, ct)                       // insufficient_stock
	x(404, reqValid, "POST", "/v1/shops/1001/items/99/locations/9/adjust", map[string]any{"delta": 1}, ct)
	x(400, reqInvalid, "POST", adj, map[string]any{"delta": 1, "colour": "red"}, ct)
	x(400, reqInvalid, "POST", "/v1/shops/1001/items/07/locations/1/adjust", map[string]any{"delta": 1}, ct)
	x(400, reqEither, "POST", adj, map[string]any{"delta": 1, "available": 3}, ct)
	x(401, reqInvalid, "POST", adj, map[string]any{"delta": 1}, "")
	x(401, reqValid, "POST", adj, map[string]any{"delta": 1}, "not-a-known-token")
	x(403, reqValid, "POST", adj, map[string]any{"delta": 1}, shelfToken) // shop 1001 is not the shelf's
	x(413, reqEither, "POST", adj, bigBody, ct)
	x(415, reqInvalid, "POST", adj, `{"delta": 1}`, ct, "Content-Type", "text/plain")

	// Reserve.
	res := "/v1/shops/1001/reservations"
	x(201, reqValid, "POST", res, line("oa-1", 1, 60000), ct)
	x(200, reqValid, "POST", res, line("oa-1", 1, 60000), ct)       // replayed
	x(409, reqValid, "POST", res, line("oa-1", 2, 60000), ct)       // token_conflict
	x(409, reqValid, "POST", res, line("oa-short", 500, 60000), ct) // insufficient
	x(409, reqValid, "POST", res, line("oa-short", 500, 60000), ct) // insufficient, replayed
	x(400, reqInvalid, "POST", res, map[string]any{"token": "oa-2", "lines": []any{}, "Token": "x"}, ct)
	x(400, reqInvalid, "POST", "/v1/shops/007001/reservations", line("oa-2", 1, 60000), ct)
	x(400, reqInvalid, "POST", res, line("oa-2", 0, 60000), ct)    // quantity 0
	x(400, reqValid, "POST", res, line("oa-2", 1, 99_000_000), ct) // ttl_ms over 1h (the limit is the pod's)
	x(401, reqInvalid, "POST", res, line("oa-2", 1, 60000), "")
	x(403, reqValid, "POST", "/v1/shops/1002/reservations", line("oa-2", 1, 60000), shelfToken) // no checkout role
	x(413, reqEither, "POST", res, bigBody, ct)
	x(415, reqInvalid, "POST", res, line("oa-2", 1, 60000), ct, "Content-Type", "application/x-www-form-urlencoded")
	k.stalled(h.srv.Handler(), res, ct)
	k.stalled(h.srv.Handler(), adj, ct)

	// Release, claim, get.
	tok := func(token, op string) string { return "/v1/shops/1001/reservations/" + token + op }
	x(201, reqValid, "POST", res, line("oa-rel", 1, 60000), ct)
	x(200, reqValid, "POST", tok("oa-rel", "/release"), nil, ct)
	x(200, reqValid, "POST", tok("oa-rel", "/release"), nil, ct) // nothing left to release
	x(409, reqValid, "POST", tok("oa-rel", "/claim"), nil, ct)   // released
	x(409, reqValid, "POST", res, line("oa-rel", 1, 60000), ct)  // released
	x(409, reqValid, "GET", tok("oa-rel", ""), nil, ct)          // released
	x(200, reqValid, "GET", tok("oa-1", ""), nil, ct)
	x(200, reqValid, "POST", tok("oa-1", "/claim"), nil, ct)
	x(200, reqValid, "POST", tok("oa-1", "/claim"), nil, ct)   // replayed
	x(409, reqValid, "POST", tok("oa-1", "/release"), nil, ct) // already_claimed
	x(409, reqValid, "POST", res, line("oa-1", 1, 60000), ct)  // already_claimed
	x(404, reqValid, "GET", tok("oa-never", ""), nil, ct)
	x(404, reqValid, "POST", tok("oa-never", "/claim"), nil, ct)
	for _, op := range []struct{ method, suffix string }{{"GET", ""}, {"POST", "/claim"}, {"POST", "/release"}} {
		x(400, reqInvalid, op.method, "/v1/shops/+1001/reservations/t"+op.suffix, nil, ct)
		x(400, reqInvalid, op.method, "/v1/shops/1001/reservations/"+strings.Repeat("t", 65)+op.suffix, nil, ct)
		x(401, reqInvalid, op.method, tok("oa-1", op.suffix), nil, "")
		x(403, reqValid, op.method, "/v1/shops/1002/reservations/t"+op.suffix, nil, shelfToken)
		x(415, reqEither, op.method, tok("oa-1", op.suffix), nil, ct, "Content-Type", "text/plain")
	}
	// Expired: a hold of 1 s, on the store's clock (no reaper runs).
	x(201, reqValid, "POST", res, line("oa-late", 1, 1000), ct)
	time.Sleep(1500 * time.Millisecond)
	x(410, reqValid, "POST", tok("oa-late", "/claim"), nil, ct)
	x(410, reqValid, "GET", tok("oa-late", ""), nil, ct)
	x(410, reqValid, "POST", res, line("oa-late", 1, 1000), ct)

	// Availability.
	av := "/v1/shops/1001/items/7/availability"
	x(200, reqValid, "GET", av, nil, ct)
	x(200, reqValid, "GET", "/v1/shops/1002/items/7/availability", nil, shelfToken)
	x(400, reqInvalid, "GET", "/v1/shops/1001/items/0/availability", nil, ct)
	x(401, reqInvalid, "GET", av, nil, "")
	x(403, reqValid, "GET", av, nil, shelfToken)
	x(415, reqEither, "GET", av, nil, ct, "Content-Type", "text/plain")

	// Every checkout call while pod-a's slots are all taken: 503
	// overloaded, after the queue's wait.
	release := server.OccupySlots(h.srv, "pod-a", h.cell.Pod("pod-a").DB.Stats().MaxOpenConnections)
	x(503, reqValid, "POST", res, line("oa-3", 1, 60000), ct)
	x(503, reqValid, "GET", tok("oa-3", ""), nil, ct)
	x(503, reqValid, "POST", tok("oa-3", "/claim"), nil, ct)
	x(503, reqValid, "POST", tok("oa-3", "/release"), nil, ct)
	x(503, reqValid, "GET", av, nil, ct)
	x(503, reqValid, "POST", adj, map[string]any{"delta": 1}, ct)
	release()

	// Admin reads.
	at := adminToken
	x(200, reqValid, "GET", "/admin/rollout/status", nil, at)
	x(401, reqInvalid, "GET", "/admin/rollout/status", nil, "")
	x(401, reqValid, "GET", "/admin/rollout/status", nil, "wrong-admin-token")
	x(200, reqValid, "GET", "/admin/rollout/history?limit=5", nil, at)
	x(400, reqInvalid, "GET", "/admin/rollout/history?limit=0", nil, at)
	x(401, reqInvalid, "GET", "/admin/rollout/history", nil, "")
	h.flush()
	x(200, reqValid, "GET", "/admin/diffs?pod=pod-a&limit=5", nil, at)
	x(200, reqValid, "GET", "/admin/diffs", nil, at)
	x(400, reqInvalid, "GET", "/admin/diffs?limit=5000", nil, at)
	x(400, reqValid, "GET", "/admin/diffs?pod=pod-z", nil, at)
	x(401, reqInvalid, "GET", "/admin/diffs", nil, "")
	x(200, reqValid, "GET", "/admin/stats?since=15m", nil, at)
	x(200, reqValid, "GET", "/admin/stats?pod=pod-a&since=2026-01-02T03:04:05Z", nil, at)
	x(400, reqValid, "GET", "/admin/stats?since=yesterday", nil, at)
	x(401, reqInvalid, "GET", "/admin/stats", nil, "")
	time.Sleep(300 * time.Millisecond) // a few of the sampler's points
	x(200, reqValid, "GET", "/admin/series?points=5", nil, at)
	x(200, reqValid, "GET", "/admin/series?pod=pod-b", nil, at)
	x(400, reqInvalid, "GET", "/admin/series?points=0", nil, at)
	x(401, reqInvalid, "GET", "/admin/series", nil, "")
	x(404, reqValid, "GET", "/admin/reconcile?pod=pod-a", nil, at)
	x(200, reqValid, "POST", "/admin/reconcile?pod=pod-a", nil, at)
	x(200, reqValid, "GET", "/admin/reconcile?pod=pod-a", nil, at)
	x(400, reqInvalid, "GET", "/admin/reconcile", nil, at)
	x(400, reqValid, "POST", "/admin/reconcile?pod=pod-z", nil, at)
	x(401, reqInvalid, "GET", "/admin/reconcile?pod=pod-a", nil, "")
	x(401, reqInvalid, "POST", "/admin/reconcile?pod=pod-a", nil, "")
	x(403, reqValid, "POST", "/admin/reconcile?pod=pod-a", nil, viewerToken) // a viewer may not run one
	x(200, reqValid, "GET", "/admin/rollout/status", nil, viewerToken)
	// Every admin read slot taken: the reads answer 503 overloaded.
	release = server.OccupyAdminSlots(h.srv)
	for _, p := range []string{"/admin/rollout/status", "/admin/rollout/history", "/admin/diffs", "/admin/stats", "/admin/series", "/admin/reconcile?pod=pod-a"} {
		x(503, reqValid, "GET", p, nil, at)
	}
	release()

	// The rollout's advance.
	adv := "/admin/rollout/advance"
	dry := x(200, reqValid, "POST", adv, map[string]any{"dry_run": true}, at, "X-Reservoir-Actor", "ana")
	x(400, reqValid, "POST", adv, map[string]any{}, at)
	x(400, reqInvalid, "POST", adv, map[string]any{"dry_run": true, "DryRun": true}, at)
	x(409, reqValid, "POST", adv, map[string]any{"from_stage": 0, "from_version": dry.body["from_version"]}, at) // stage_changed
	x(200, reqValid, "POST", adv, map[string]any{"from_stage": dry.body["from_stage"], "from_version": dry.body["from_version"], "reason": "start"}, at)
	x(409, reqValid, "POST", adv, map[string]any{"from_stage": 0, "from_version": 1}, at) // gates_fail or flags_changed
	x(401, reqInvalid, "POST", adv, map[string]any{"dry_run": true}, "")
	x(403, reqValid, "POST", adv, map[string]any{"dry_run": true}, operatorToken) // an operator may not advance
	x(413, reqEither, "POST", adv, bigBody, at)

	// The kill switch.
	ks := "/admin/killswitch"
	x(200, reqValid, "POST", ks, map[string]any{"scope": "pod:pod-b", "reason": "contract test"}, at, "X-Reservoir-Actor", "ana")
	x(200, reqValid, "POST", ks, map[string]any{"scope": "shop:9999", "reason": "about to be added", "force": true, "state": "redis_only"}, at)
	x(400, reqValid, "POST", ks, map[string]any{"scope": "shop:8888", "reason": "typo"}, at) // unknown_shop
	x(400, reqInvalid, "POST", ks, map[string]any{"scope": "pod:pod-a"}, at)                 // no reason
	x(400, reqInvalid, "POST", ks, map[string]any{"scope": "pod:pod-a", "reason": "x", "state": "sideways"}, at)
	x(400, reqInvalid, "POST", ks, map[string]any{"scope": "pods:pod-a", "reason": "x"}, at)
	x(400, reqValid, "POST", ks, map[string]any{"scope": "pod:pod-z", "reason": "no such pod"}, at)
	x(401, reqInvalid, "POST", ks, map[string]any{"scope": "global", "reason": "x"}, "")
	x(403, reqValid, "POST", ks, map[string]any{"scope": "global", "reason": "x"}, viewerToken) // a viewer may not engage
	x(413, reqEither, "POST", ks, bigBody, at)
	x(200, reqValid, "DELETE", ks+"?scope=pod:pod-b&reason=fixed", nil, at)
	x(200, reqValid, "DELETE", ks, map[string]any{"scope": "shop:9999", "reason": "over"}, at)
	x(400, reqEither, "DELETE", ks+"?scope=pod:pod-b&scope=pod:pod-a&reason=twice", nil, at)
	x(400, reqValid, "DELETE", ks+"?scope=pod:pod-b", map[string]any{"scope": "pod:pod-b", "reason": "both"}, at)
	x(401, reqInvalid, "DELETE", ks+"?scope=pod:pod-b&reason=x", nil, "")
	x(403, reqValid, "DELETE", ks+"?scope=pod:pod-b&reason=x", nil, viewerToken)
	x(413, reqEither, "DELETE", ks, bigBody, at)

	// Operations.
	x(200, reqValid, "GET", "/healthz", nil, "")
	x(200, reqValid, "GET", "/readyz", nil, "")
	x(200, reqValid, "GET", "/readyz", nil, at)
	x(200, reqValid, "GET", "/metrics", nil, "")
	x(200, reqValid, "GET", "/metrics", nil, "", "Accept", "application/openmetrics-text; version=1.0.0")
	x(200, reqValid, "GET", "/dashboard", nil, "")
	x(200, reqValid, "GET", "/dashboard/app.js", nil, "")
	x(200, reqValid, "GET", "/dashboard/style.css", nil, "")
	x(404, reqValid, "GET", "/dashboard/secrets.txt", nil, "")
	x(302, reqValid, "GET", "/", nil, "")
	x(200, reqValid, "GET", "/openapi.yaml", nil, "")

	// A server with neither a plan nor a reconciler: 501.
	bare, err := server.New(server.Config{Cell: h.cell, AdminToken: adminToken, Clients: testClients(t, ""), Registry: server.NewRegistry(), Logger: slog.New(slog.DiscardHandler),
		SampleInterval: 100 * time.Millisecond, SeriesWindow: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bare.Close)
	bs := httptest.NewServer(bare.Handler())
	t.Cleanup(bs.Close)
	y := func(base string, want int, method, path string, body any) {
		t.Helper()
		k.do(base, call{method: method, path: path, body: body, token: adminToken, want: want})
	}
	y(bs.URL, 501, "POST", adv, map[string]any{"dry_run": true})
	y(bs.URL, 501, "GET", "/admin/reconcile?pod=pod-a", nil)
	y(bs.URL, 501, "POST", "/admin/reconcile?pod=pod-a", nil)

	// A replica whose flags cannot be read (it is not ready, and no
	// change of the flags can be written) and whose pod-b stores are down.
	broken := brokenServer(t)
	y(broken, 503, "GET", "/readyz", nil)
	y(broken, 503, "POST", ks, map[string]any{"scope": "pod:pod-a", "reason": "cannot be written"})
	y(broken, 503, "DELETE", ks+"?scope=pod:pod-a&reason=cannot", nil)
	y(broken, 503, "POST", adv, map[string]any{"dry_run": true})
	y(broken, 503, "POST", "/admin/reconcile?pod=pod-b", nil)
	// flags_unavailable; the server takes no token (InsecureNoAuth), the
	// document always wants one.
	k.do(broken, call{method: "GET", path: "/v1/shops/1001/items/7/availability", token: clientToken, want: 503})

	// A kill switch refused: pod-b runs mysql_only, and its Redis lost
	// what MySQL decided.
	killRefused(t, k)

	if miss := k.missing(loadOpenAPI(t)); len(miss) > 0 {
		t.Errorf("docs/openapi.yaml documents these statuses, which no case provoked (provoke each, or list it in notProvoked with why):\n  %s", strings.Join(miss, "\n  "))
	}
	for key := range notProvoked {
		op, code, _ := strings.Cut(key, " ")
		var status int
		_, _ = fmt.Sscan(code, &status)
		if k.seen[op][status] {
			t.Errorf("notProvoked lists %q, which a case provoked: remove it", key)
		}
	}
}

// brokenServer starts a server whose flags file cannot be read (a
// symlink loop, unreadable even for root) and whose pod-b stores answer
// nothing, with a plan, and returns its URL.
func brokenServer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	topo, _ := topologyFor(t, dir)
	for i := range topo.Pods {
		if topo.Pods[i].Name == "pod-b" {
			// Nothing listens on port 1.
			cfg, err := mysql.ParseDSN(topo.Pods[i].MySQLDSN)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Addr = "127.0.0.1:1"
			topo.Pods[i].MySQLDSN, topo.Pods[i].RedisAddr = cfg.FormatDSN(), "127.0.0.1:1"
		}
	}
	if err := os.Symlink(filepath.Base(topo.FlagsFile), topo.FlagsFile); err != nil {
		t.Fatal(err)
	}
	c, reg, log, _ := openCell(t, topo)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	path := filepath.Join(dir, "plan.toml")
	if err := os.WriteFile(path, []byte(dashboardPlan), 0o644); err != nil {
		t.Fatal(err)
	}
	plan, err := rollout.LoadPlan(path)
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := rollout.NewController(rollout.ControllerConfig{DB: c.Control, Flags: flagdoc.FlagsFile{Path: topo.FlagsFile}, Plan: plan,
		Stats: c.Comparer, Reconciler: c.Reconciler, Lag: c, Handoffs: c, InForce: c.Flags.InForce})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Cell: c, Controller: ctl, AdminToken: adminToken, InsecureNoAuth: true, Registry: reg, Logger: log,
		Reconciler: server.ReportFunc(c.Reconcile), SampleInterval: 100 * time.Millisecond, SeriesWindow: time.Second, KillWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

// killRefused provokes 409 refused: a kill switch over a pod running
// mysql_only whose Redis does not hold what MySQL decided.
func killRefused(t *testing.T, k *contract) {
	t.Helper()
	h := setup(t, options{modes: map[string]authority.Mode{"pod-b": authority.ModeMySQLOnly}})
	h.stock(2001, 7, 1, 10)
	if r := h.reserve(2001, "oa-mysql", 7, 1); r.status != http.StatusCreated || str(r.body["authority"]) != "mysql" {
		t.Fatalf("reserve on pod-b (mysql_only): %d %s", r.status, r.raw)
	}
	// What MySQL decided goes missing from Redis.
	ctx := context.Background()
	rd := h.pods["pod-b"].redis
	keys, err := rd.Client.Keys(ctx, rd.Prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		if err := rd.Client.Del(ctx, keys...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	k.do(h.http.URL, call{method: "POST", path: "/admin/killswitch", body: map[string]any{"scope": "pod:pod-b", "reason": "drifted"}, token: adminToken, want: 409})
}

// caught is a testing.TB that keeps what a check reports as an error,
// for a test of the check itself.
type caught struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

// Errorf implements testing.TB: it keeps the error.
func (c *caught) Errorf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

// Helper implements testing.TB.
func (c *caught) Helper() {}

// The contract's checks fail on a document that is wrong about the
// server: a member of an answer it does not list, a status it does not
// give the operation, a status it gives that no case provoked, a route
// it does not have. (TestOpenAPIContract passing proves nothing unless
// these fail.)
func TestOpenAPIContractCatchesAWrongDocument(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	delete(doc.Components.Schemas["Reservation"].Value.Properties, "expires_at")
	doc.Paths.Find("/v1/shops/{shop}/reservations/{token}").Get.Responses.Delete("404")
	avail := doc.Paths.Find("/v1/shops/{shop}/items/{item}/availability").Get
	avail.Responses.Set("404", avail.Responses.Value("403"))
	doc.Paths.Delete("/admin/series")
	c := &caught{TB: t}
	k := newContract(c, doc)
	h := setup(t, options{})
	base := h.http.URL
	for _, x := range []call{
		{method: "POST", path: "/v1/shops/1001/items/7/locations/1/adjust", body: map[string]any{"available": 5}, token: clientToken, want: 200},
		{method: "POST", path: "/v1/shops/1001/reservations", token: clientToken, want: 201,
			body: map[string]any{"token": "c-1", "lines": []map[string]any{{"item": 7, "quantity": 1, "locations": []int64{1}}}}},
		{method: "GET", path: "/v1/shops/1001/reservations/c-none", token: clientToken, want: 404},
		{method: "GET", path: "/v1/shops/1001/items/7/availability", token: clientToken, want: 200},
		{method: "GET", path: "/admin/series", token: adminToken, want: 200},
	} {
		k.do(base, x)
	}
	all := strings.Join(c.errs, "\n")
	for _, want := range []string{
		`POST /v1/shops/1001/reservations: its 201 answer breaks docs/openapi.yaml: response body doesn't match schema #/components/schemas/Reservation: property "expires_at" is unsupported`,
		"GET /v1/shops/1001/reservations/c-none: its 404 answer breaks docs/openapi.yaml: status is not supported",
		"GET /admin/series: no operation of docs/openapi.yaml",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("the contract's checks did not report %q; they reported:\n%s", want, all)
		}
	}
	if miss := k.missing(doc); !slices.Contains(miss, "availability 404") {
		t.Errorf("a documented status no case provoked is not reported missing: %v", miss)
	}
}
