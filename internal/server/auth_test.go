package server_test

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// Tokens of the extra clients the auth tests add to the harness's own.
const (
	shopOnlyToken  = "test-shop-1002-only-token-0123" // checkout, shop 1002 only
	checkoutToken  = "test-checkout-only-token-01234" // checkout, every shop
	inventoryToken = "test-inventory-only-token-0123" // inventory, every shop
)

func clientEntry(name, token, roles, shops string) string {
	e := fmt.Sprintf("[[clients]]\nname = %q\ntoken_sha256 = \"%x\"\nroles = [%s]\n", name, sha256.Sum256([]byte(token)), roles)
	if shops != "" {
		e += "shops = [" + shops + "]\n"
	}
	return e + "\n"
}

func authHarness(t *testing.T) *harness {
	return setup(t, options{clients: clientEntry("shop-1002", shopOnlyToken, `"checkout", "inventory"`, "1002") +
		clientEntry("checkout", checkoutToken, `"checkout"`, "") +
		clientEntry("inventory", inventoryToken, `"inventory"`, "")})
}

// apiRoute is one checkout API route with a valid call of it.
type apiRoute struct {
	op, method, path string
	body             string
}

// apiRoutes covers every /v1 route, for shop 1001.
var apiRoutes = []apiRoute{
	{"reserve", "POST", "/v1/shops/1001/reservations", `{"token":"auth-r","ttl_ms":60000,"lines":[{"item":7,"quantity":1,"locations":[1]}]}`},
	{"get", "GET", "/v1/shops/1001/reservations/auth-r", ""},
	{"claim", "POST", "/v1/shops/1001/reservations/auth-r/claim", ""},
	{"release", "POST", "/v1/shops/1001/reservations/auth-r/release", ""},
	{"availability", "GET", "/v1/shops/1001/items/7/availability", ""},
	{"adjust", "POST", "/v1/shops/1001/items/7/locations/1/adjust", `{"delta":1}`},
}

func (c apiRoute) send(h *harness, token string, headers ...string) response {
	h.t.Helper()
	var body any
	if c.body != "" {
		body = c.body
	}
	return h.do(c.method, c.path, body, token, headers...)
}

// Every /v1 route refuses, before anything is done: no token and a wrong
// one (401 with WWW-Authenticate), another client's token restricted to
// other shops (403), a client whose roles do not allow the operation
// (403), and a text/plain body (415, what a cross-site form or fetch
// without a preflight sends). Each refusal changes no stock: the ledger
// the test set up is the same afterwards.
func TestAPIAuthEveryRoute(t *testing.T) {
	t.Parallel()
	h := authHarness(t)
	h.stock(1001, 7, 1, 10)
	for _, c := range apiRoutes {
		checks := []struct {
			name    string
			token   string
			headers []string
			status  int
			code    string
		}{
			{"no token", anonymous, nil, http.StatusUnauthorized, "unauthorized"},
			{"wrong token", clientToken + "x", nil, http.StatusUnauthorized, "unauthorized"},
			{"basic auth", anonymous, []string{"Authorization", "Basic " + clientToken}, http.StatusUnauthorized, "unauthorized"},
			{"another client's shops", shopOnlyToken, nil, http.StatusForbidden, "forbidden"},
			{"text/plain", "", []string{"Content-Type", "text/plain"}, http.StatusUnsupportedMediaType, "unsupported_media_type"},
			{"form", "", []string{"Content-Type", "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType, "unsupported_media_type"},
		}
		for _, k := range checks {
			r := c.send(h, k.token, k.headers...)
			if r.status != k.status || str(r.body["error"]) != k.code {
				t.Errorf("%s %s, %s: %d %s, want %d %s", c.method, c.path, k.name, r.status, trim(r.raw), k.status, k.code)
			}
			if k.status == http.StatusUnauthorized && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s, %s: no WWW-Authenticate: Bearer", c.method, c.path, k.name)
			}
		}
		// The role check: checkout may not adjust; inventory may only
		// adjust and read availability.
		for _, who := range []struct{ token, role string }{{checkoutToken, server.RoleCheckout}, {inventoryToken, server.RoleInventory}} {
			allowed := map[string]bool{server.RoleCheckout: c.op != "adjust", server.RoleInventory: c.op == "adjust" || c.op == "availability"}[who.role]
			r := c.send(h, who.token)
			if !allowed && (r.status != http.StatusForbidden || str(r.body["error"]) != "forbidden") {
				t.Errorf("%s %s as a %s client: %d %s, want 403 forbidden", c.method, c.path, who.role, r.status, trim(r.raw))
			}
			if allowed && (r.status == http.StatusForbidden || r.status == http.StatusUnauthorized) {
				t.Errorf("%s %s as a %s client: %d %s, want it allowed", c.method, c.path, who.role, r.status, trim(r.raw))
			}
		}
	}
	// Only the allowed calls changed stock: the checkout client reserved
	// and claimed one unit, the inventory client added one; nothing
	// refused did anything. The restricted client reaches its own shop.
	if r := h.do("GET", "/v1/shops/1001/items/7/availability", nil, ""); r.status != 200 || !strings.Contains(r.raw, `"unheld":10}`) {
		t.Errorf("availability after the refusals: %d %s, want 10 unheld (10 set, 1 claimed, +1 adjusted)", r.status, trim(r.raw))
	}
	if r := h.do("GET", "/v1/shops/1002/items/7/availability", nil, shopOnlyToken); r.status != 200 {
		t.Errorf("the shop-1002 client on shop 1002: %d %s", r.status, trim(r.raw))
	}
}

// The body is parsed strictly: a key twice, a key in another case, and
// an id written other than canonically are refused with 400 naming the
// key, and nothing is held.
func TestAPIStrictParsing(t *testing.T) {
	t.Parallel()
	h := setup(t, options{})
	h.stock(1001, 7, 1, 10)
	line := `{"item":7,"quantity":1,"locations":[1]}`
	cases := []struct {
		name, method, path, body string
		status                   int
		code, field              string
	}{
		{"token twice", "POST", "/v1/shops/1001/reservations", `{"token":"a","token":"b","lines":[` + line + `]}`, 400, "duplicate_key", "token"},
		{"quantity twice in a line", "POST", "/v1/shops/1001/reservations", `{"token":"a","lines":[` + line + `,{"item":8,"quantity":1,"quantity":2,"locations":[1]}]}`, 400, "duplicate_key", "lines[1].quantity"},
		{"TOKEN", "POST", "/v1/shops/1001/reservations", `{"TOKEN":"a","lines":[` + line + `]}`, 400, "unknown_field", "TOKEN"},
		{"Ttl_Ms", "POST", "/v1/shops/1001/reservations", `{"token":"a","Ttl_Ms":60000,"lines":[` + line + `]}`, 400, "unknown_field", "Ttl_Ms"},
		{"Quantity", "POST", "/v1/shops/1001/reservations", `{"token":"a","lines":[{"item":7,"Quantity":1,"locations":[1]}]}`, 400, "unknown_field", "lines[0].Quantity"},
		{"delta twice", "POST", "/v1/shops/1001/items/7/locations/1/adjust", `{"delta":1,"delta":100}`, 400, "duplicate_key", "delta"},
		{"shop +1001", "POST", "/v1/shops/+1001/items/7/locations/1/adjust", `{"delta":1}`, 400, "invalid_input", "shop"},
		{"shop 001001", "GET", "/v1/shops/001001/items/7/availability", "", 400, "invalid_input", "shop"},
		{"item 07", "GET", "/v1/shops/1001/items/07/availability", "", 400, "invalid_input", "item"},
		{"location +1", "POST", "/v1/shops/1001/items/7/locations/+1/adjust", `{"delta":1}`, 400, "invalid_input", "location"},
	}
	for _, c := range cases {
		var body any
		if c.body != "" {
			body = c.body
		}
		r := h.do(c.method, c.path, body, "")
		if r.status != c.status || str(r.body["error"]) != c.code || str(r.body["field"]) != c.field {
			t.Errorf("%s: %d %s, want %d %s field %q", c.name, r.status, trim(r.raw), c.status, c.code, c.field)
		}
	}
	if r := h.do("GET", "/v1/shops/1001/items/7/availability", nil, ""); !strings.Contains(r.raw, `"unheld":10}`) {
		t.Errorf("a refused call changed the stock: %s", trim(r.raw))
	}
	if r := h.do("GET", "/v1/shops/1001/reservations/a", nil, ""); r.status != http.StatusNotFound {
		t.Errorf("a refused reserve holds something: %d %s", r.status, trim(r.raw))
	}
}

// A body declared larger than the cap answers 413 before any of it is
// read, even when it never arrives.
func TestDeclaredTooLargeAnswersAtOnce(t *testing.T) {
	t.Parallel()
	_, addr := floodEnv(t)
	status, written, err := rawPost(addr, "/v1/shops/1001/reservations", 99_999_999_999, "", 1, 0)
	if err != nil || status != http.StatusRequestEntityTooLarge {
		t.Fatalf("Content-Length 99,999,999,999: %d %v, want 413 at once", status, err)
	}
	if written > 1<<20 {
		t.Errorf("the client wrote %d bytes before the 413", written)
	}
}

// The admin API refuses what it cannot put safely into the flags file and
// the audit: a reason with control characters or longer than 500
// characters, and a scope given twice or in both the query and the body.
// Nothing is switched by a refused call.
func TestAdminKillInputHygiene(t *testing.T) {
	t.Parallel()
	h := setup(t, options{})
	cases := []struct {
		name, method, path string
		body               any
		field              string
	}{
		{"NUL in the reason", "POST", "/admin/killswitch", map[string]any{"scope": "pod:pod-a", "reason": "a\x00b"}, "reason"},
		{"newline in the reason", "POST", "/admin/killswitch", map[string]any{"scope": "pod:pod-a", "reason": "line1\nline2"}, "reason"},
		{"escape in the reason", "POST", "/admin/killswitch", map[string]any{"scope": "pod:pod-a", "reason": "\x1b[31mred"}, "reason"},
		{"501 characters", "POST", "/admin/killswitch", map[string]any{"scope": "pod:pod-a", "reason": strings.Repeat("é", 501)}, "reason"},
		{"scope twice in the query", "DELETE", "/admin/killswitch?scope=pod:pod-a&scope=pod:pod-b&reason=x", nil, "scope"},
		{"scope in the query and the body", "DELETE", "/admin/killswitch?scope=pod:pod-a&reason=x", map[string]any{"scope": "pod:pod-b", "reason": "y"}, "scope"},
		{"scope twice in the body", "POST", "/admin/killswitch", `{"scope":"pod:pod-a","scope":"global","reason":"x"}`, "scope"},
	}
	for _, c := range cases {
		r := h.admin(c.method, c.path, c.body)
		if r.status != http.StatusBadRequest || str(r.body["field"]) != c.field {
			t.Errorf("%s: %d %s, want 400 naming %s", c.name, r.status, trim(r.raw), c.field)
		}
	}
	// 500 characters of printable text (1000 bytes) are fine.
	if r := h.admin("POST", "/admin/killswitch", map[string]any{"scope": "pod:pod-b", "reason": strings.Repeat("é", 500)}); r.status != http.StatusOK {
		t.Errorf("a 500-character reason: %d %s", r.status, trim(r.raw))
	}
	f, err := h.flags.Read()
	if err != nil {
		t.Fatal(err)
	}
	if k := f.KillAt(flagdoc.PodScope("pod-a")); k.Engaged() {
		t.Errorf("a refused call engaged pod-a's kill switch: %+v", k)
	}
	if k := f.KillAt(flagdoc.Global()); k.Engaged() {
		t.Errorf("a refused call engaged the global kill switch: %+v", k)
	}
	if k := f.KillAt(flagdoc.PodScope("pod-b")); !k.Engaged() || k.Reason != strings.Repeat("é", 500) {
		t.Errorf("pod-b's kill switch, engaged with a 500-character reason: %+v", k)
	}
}
