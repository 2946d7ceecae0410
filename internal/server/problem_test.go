package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// problemCase is a request that must be refused, and how.
type problemCase struct {
	name, method, path, body, token string
	headers                         []string
	status                          int
	code, field                     string
}

// checkProblems sends each case to base and checks that the answer is an
// RFC 9457 problem (docs/api.md, "Errors"): application/problem+json,
// type, title, status (the HTTP status), detail and instance, with the
// stable error code, the message and the field the case names.
func checkProblems(t *testing.T, base string, cases []problemCase) {
	t.Helper()
	for _, c := range cases {
		var rd io.Reader
		if c.body != "" {
			rd = strings.NewReader(c.body)
		}
		req, err := http.NewRequest(c.method, base+c.path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Accept", "application/json") // whatever the Accept: a problem
		for i := 0; i+1 < len(c.headers); i += 2 {
			req.Header.Set(c.headers[i], c.headers[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != c.status {
			t.Errorf("%s: %s %s: %d, want %d: %s", c.name, c.method, c.path, res.StatusCode, c.status, raw)
			continue
		}
		if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s: Content-Type %q, want application/problem+json", c.name, ct)
		}
		var p struct {
			Type, Title, Detail, Instance, Error, Message, Field string
			Status                                               any
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Errorf("%s: not a JSON object: %v: %s", c.name, err, raw)
			continue
		}
		if p.Type != "tag:reservoir,2026:problem/"+c.code || p.Title == "" || p.Status != float64(c.status) ||
			p.Detail == "" || p.Detail != p.Message || p.Instance != strings.SplitN(c.path, "?", 2)[0] ||
			p.Error != c.code || p.Field != c.field {
			t.Errorf("%s: %s %s: want a problem with error %q, field %q, status %d; got %s", c.name, c.method, c.path, c.code, c.field, c.status, raw)
		}
		if c.status == http.StatusUnauthorized && res.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: a 401 without WWW-Authenticate", c.name)
		}
		if c.status == http.StatusMethodNotAllowed && res.Header.Get("Allow") == "" {
			t.Errorf("%s: a 405 without Allow", c.name)
		}
	}
}

// The checkout listener answers its errors as problems: a sample of real
// refusals, from the mux, the admission, the decoder, the validation and
// the store.
func TestCheckoutListenerProblems(t *testing.T) {
	h := setup(t, options{noHTTP: true})
	hs := httptest.NewServer(h.srv.APIHandler())
	t.Cleanup(hs.Close)
	reserve := "/v1/shops/1001/reservations"
	checkProblems(t, hs.URL, []problemCase{
		{name: "wrong method", method: "DELETE", path: reserve, token: clientToken, status: 405, code: "method_not_allowed"},
		{name: "unknown route", method: "GET", path: "/v1/nothing", token: clientToken, status: 404, code: "no_route"},
		{name: "admin route on the checkout listener", method: "GET", path: "/admin/rollout/status", token: adminToken, status: 404, code: "no_route"},
		{name: "unauthorized", method: "POST", path: reserve, body: `{}`, status: 401, code: "unauthorized"},
		{name: "bad JSON", method: "POST", path: reserve, body: `{"token":`, token: clientToken, status: 400, code: "malformed_json"},
		{name: "unknown field", method: "POST", path: reserve, body: `{"token":"a","colour":"red"}`, token: clientToken, status: 400, code: "unknown_field", field: "colour"},
		{name: "validation", method: "POST", path: reserve, token: clientToken, status: 400, code: "invalid_input", field: "lines[0].quantity",
			body: `{"token":"cart-1","lines":[{"item":1,"quantity":-2,"locations":[1]}]}`},
		{name: "bad path parameter", method: "GET", path: "/v1/shops/007/reservations/x", token: clientToken, status: 400, code: "invalid_input", field: "shop"},
		{name: "media type", method: "POST", path: reserve, body: `{}`, headers: []string{"Content-Type", "text/plain"}, token: clientToken, status: 415, code: "unsupported_media_type", field: "Content-Type"},
		{name: "too large", method: "POST", path: reserve, body: `{"token":"` + strings.Repeat("x", 300<<10) + `"}`, token: clientToken, status: 413, code: "body_too_large"},
		{name: "not found", method: "GET", path: "/v1/shops/1001/reservations/never", token: clientToken, status: 404, code: "not_found"},
	})
}

// The admin listener answers its errors as problems too.
func TestAdminListenerProblems(t *testing.T) {
	h := setup(t, options{noHTTP: true})
	hs := httptest.NewServer(h.srv.AdminHandler())
	t.Cleanup(hs.Close)
	checkProblems(t, hs.URL, []problemCase{
		{name: "wrong method", method: "PUT", path: "/admin/rollout/status", token: adminToken, status: 405, code: "method_not_allowed"},
		{name: "unknown route", method: "GET", path: "/admin/nothing", token: adminToken, status: 404, code: "no_route"},
		{name: "checkout route on the admin listener", method: "GET", path: "/v1/shops/1001/reservations/x", token: clientToken, status: 404, code: "no_route"},
		{name: "unauthorized", method: "GET", path: "/admin/rollout/status", status: 401, code: "unauthorized"},
		{name: "wrong token", method: "GET", path: "/admin/rollout/status", token: "wrong", status: 401, code: "unauthorized"},
		{name: "bad JSON", method: "POST", path: "/admin/killswitch", body: `{"scope":`, token: adminToken, status: 400, code: "malformed_json"},
		{name: "validation", method: "POST", path: "/admin/killswitch", body: `{"scope":"pod:pod-z","reason":"test"}`, token: adminToken, status: 400, code: "invalid_input", field: "scope"},
		{name: "bad query", method: "GET", path: "/admin/diffs?limit=x", token: adminToken, status: 400, code: "invalid_input", field: "limit"},
		{name: "advance without its confirmation", method: "POST", path: "/admin/rollout/advance", body: `{}`, token: adminToken, status: 400, code: "invalid_input", field: "from_stage"},
		{name: "no dashboard file", method: "GET", path: "/dashboard/nothing.js", status: 404, code: "no_route"},
	})
}

// problemOf says what is wrong with r as the RFC 9457 problem of code
// with status ("" when nothing is): the 503s the walks above cannot
// provoke (overloaded, store_unavailable, flags_unavailable) are checked
// with it where their tests provoke them.
func problemOf(r response, status int, code string) string {
	switch {
	case r.status != status:
		return fmt.Sprintf("status %d, want %d", r.status, status)
	case r.header.Get("Content-Type") != "application/problem+json":
		return fmt.Sprintf("Content-Type %q, want application/problem+json", r.header.Get("Content-Type"))
	case str(r.body["error"]) != code || r.body["type"] != "tag:reservoir,2026:problem/"+code || str(r.body["title"]) == "" ||
		r.body["status"] != float64(status) || str(r.body["detail"]) == "" || str(r.body["instance"]) == "":
		return fmt.Sprintf("not the problem %q: %s", code, r.raw)
	case status == http.StatusServiceUnavailable && r.header.Get("Retry-After") == "":
		return "a 503 without Retry-After"
	}
	return ""
}
