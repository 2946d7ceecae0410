package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// The checkout path through the API in shadow mode: stock, reserve (201),
// a repeated reserve (200, replayed), get, availability, claim (and its
// replay), release of a claimed token (409), an insufficient cart (409
// with the short line), unknown tokens (404).
func TestAPIReservationLifecycle(t *testing.T) {
	t.Parallel()
	h := setup(t, options{modes: map[string]authority.Mode{"pod-a": authority.ModeShadow}})
	h.stock(1001, 7, 1, 10)

	r := h.reserve(1001, "cart-1", 7, 3)
	if r.status != http.StatusCreated || str(r.body["status"]) != "reserved" || str(r.body["authority"]) != "redis" || str(r.body["pod"]) != "pod-a" {
		t.Fatalf("reserve: %d %s", r.status, r.raw)
	}
	if r.header.Get("X-Request-Id") == "" {
		t.Error("no X-Request-Id on the answer")
	}
	if r = h.reserve(1001, "cart-1", 7, 3); r.status != http.StatusOK || r.body["replayed"] != true {
		t.Fatalf("repeated reserve: %d %s", r.status, r.raw)
	}
	if r = h.reserve(1001, "cart-1", 7, 4); r.status != http.StatusConflict || str(r.body["error"]) != "token_conflict" {
		t.Fatalf("same token, other lines: %d %s", r.status, r.raw)
	}
	if r = h.do("GET", "/v1/shops/1001/reservations/cart-1", nil, ""); r.status != 200 || str(r.body["status"]) != "held" {
		t.Fatalf("get: %d %s", r.status, r.raw)
	}
	r = h.do("GET", "/v1/shops/1001/items/7/availability", nil, "")
	if r.status != 200 || !strings.Contains(r.raw, `"unheld":7`) {
		t.Fatalf("availability: %d %s", r.status, r.raw)
	}
	r = h.do("POST", "/v1/shops/1001/reservations/cart-1/claim", nil, "")
	if r.status != 200 || str(r.body["outcome"]) != "claimed" {
		t.Fatalf("claim: %d %s", r.status, r.raw)
	}
	if r = h.do("POST", "/v1/shops/1001/reservations/cart-1/claim", nil, ""); r.status != 200 || r.body["replayed"] != true {
		t.Fatalf("repeated claim: %d %s", r.status, r.raw)
	}
	if r = h.do("POST", "/v1/shops/1001/reservations/cart-1/release", nil, ""); r.status != http.StatusConflict || str(r.body["error"]) != "already_claimed" {
		t.Fatalf("release after claim: %d %s", r.status, r.raw)
	}
	r = h.reserve(1001, "cart-2", 7, 8)
	if r.status != http.StatusConflict || str(r.body["error"]) != "insufficient" || !strings.Contains(r.raw, `"requested":8`) {
		t.Fatalf("insufficient: %d %s", r.status, r.raw)
	}
	if r = h.do("GET", "/v1/shops/1001/reservations/nope", nil, ""); r.status != http.StatusNotFound || str(r.body["error"]) != "not_found" {
		t.Fatalf("get unknown: %d %s", r.status, r.raw)
	}
	if r = h.do("POST", "/v1/shops/1001/reservations/nope/claim", nil, ""); r.status != http.StatusNotFound {
		t.Fatalf("claim unknown: %d %s", r.status, r.raw)
	}
	if r = h.do("POST", "/v1/shops/1001/reservations/nope/release", nil, ""); r.status != 200 || r.body["released"] != false {
		t.Fatalf("release unknown: %d %s", r.status, r.raw)
	}
	if r = h.do("POST", "/v1/shops/1001/items/7/locations/1/adjust", map[string]any{"delta": 5}, ""); r.status != 200 || num(r.body["available"]) != 12 {
		t.Fatalf("adjust delta: %d %s", r.status, r.raw)
	}
	// With an Idempotency-Key, a retried delta applies once, and the key
	// cannot be reused for another change; a malformed key changes nothing.
	for i := range 2 {
		r = h.do("POST", "/v1/shops/1001/items/7/locations/1/adjust", map[string]any{"delta": 2}, "", "Idempotency-Key", "restock-9")
		if r.status != 200 || num(r.body["available"]) != 14 || num(r.body["delta"]) != 2 || (r.body["replayed"] == true) != (i == 1) {
			t.Fatalf("keyed adjust, call %d: %d %s", i+1, r.status, r.raw)
		}
	}
	if r = h.do("POST", "/v1/shops/1001/items/7/locations/1/adjust", map[string]any{"delta": 3}, "", "Idempotency-Key", "restock-9"); r.status != http.StatusConflict || str(r.body["error"]) != "key_conflict" || str(r.body["field"]) != "Idempotency-Key" {
		t.Fatalf("key reused for another delta: %d %s", r.status, r.raw)
	}
	if r = h.do("POST", "/v1/shops/1001/items/7/locations/1/adjust", map[string]any{"delta": 3}, "", "Idempotency-Key", strings.Repeat("k", 65)); r.status != http.StatusBadRequest || str(r.body["field"]) != "Idempotency-Key" {
		t.Fatalf("key too long: %d %s", r.status, r.raw)
	}
	if r = h.do("GET", "/v1/shops/1001/items/7/availability", nil, ""); !strings.Contains(r.raw, `"unheld":14`) {
		t.Fatalf("availability after the keyed adjusts: %d %s", r.status, r.raw)
	}
	if r = h.do("DELETE", "/v1/shops/1001/reservations", nil, ""); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("wrong method: %d %s", r.status, r.raw)
	}
	// A caller's request id comes back.
	if r = h.do("GET", "/healthz", nil, "", "X-Request-Id", "checkout-42"); r.header.Get("X-Request-Id") != "checkout-42" {
		t.Errorf("request id not kept: %q", r.header.Get("X-Request-Id"))
	}
}

// Acceptance (b): bad input answers 4xx with a message naming the field,
// and nothing is written: no row in either pod's tables, no Redis key, no
// observation in the comparer.
func TestAPIBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	h := setup(t, options{modes: map[string]authority.Mode{"pod-a": authority.ModeShadow}})
	line := `{"item": 7, "quantity": 1, "locations": [1]}`
	manyLines := make([]string, 101)
	for i := range manyLines {
		manyLines[i] = fmt.Sprintf(`{"item": %d, "quantity": 1, "locations": [1]}`, i+1)
	}
	huge := `{"token": "big", "lines": [` + line + `], "pad": "` + strings.Repeat("x", 300<<10) + `"}`
	const reserve = "/v1/shops/1001/reservations"
	cases := []struct {
		name, method, path, body string
		status                   int
		code, field, message     string
	}{
		{"malformed JSON", "POST", reserve, `{"token": "t1", "lines": [`, 400, "malformed_json", "", "ends in the middle"},
		{"syntax error", "POST", reserve, `{"token": t1}`, 400, "malformed_json", "", "at byte"},
		{"empty body", "POST", reserve, ``, 400, "malformed_json", "", "empty"},
		{"not an object", "POST", reserve, `[1, 2]`, 400, "malformed_json", "", "JSON object"},
		{"trailing data", "POST", reserve, `{"token": "t1", "lines": [` + line + `]} {}`, 400, "malformed_json", "", "after the JSON object"},
		{"unknown field", "POST", reserve, `{"token": "t1", "colour": "red", "lines": [` + line + `]}`, 400, "unknown_field", "colour", "colour"},
		{"unknown line field", "POST", reserve, `{"token": "t1", "lines": [{"item": 7, "qty": 1, "locations": [1]}]}`, 400, "unknown_field", "lines[0].qty", `"lines[0].qty"`},
		{"unknown field after a line's fields", "POST", reserve, `{"token": "t1", "lines": [{"item": 1, "quantity": 1, "locations": [1], "bogus": 1}]}`, 400, "unknown_field", "lines[0].bogus", `"lines[0].bogus"`},
		{"unknown field in a later line", "POST", reserve, `{"token": "t1", "lines": [` + line + `, {"item": 8, "quantity": 1, "locations": [1], "sku": "a"}]}`, 400, "unknown_field", "lines[1].sku", `"lines[1].sku"`},
		{"first unknown field wins", "POST", reserve, `{"token": "t1", "lines": [` + line + `, {"item": 8, "quantity": 1, "locations": [1], "sku": "a"}], "colour": "red"}`, 400, "unknown_field", "lines[1].sku", "sku"},
		{"unknown field after the lines", "POST", reserve, `{"token": "t1", "lines": [` + line + `], "colour": "red"}`, 400, "unknown_field", "colour", `"colour"`},
		{"huge body", "POST", reserve, huge, 413, "body_too_large", "", "exceeds"},
		{"negative quantity", "POST", reserve, `{"token": "t1", "lines": [{"item": 7, "quantity": -2, "locations": [1]}]}`, 400, "invalid_input", "lines[0].quantity", "lines[0].quantity"},
		{"zero quantity", "POST", reserve, `{"token": "t1", "lines": [{"item": 7, "quantity": 0, "locations": [1]}]}`, 400, "invalid_input", "lines[0].quantity", "between 1 and"},
		{"quantity not a number", "POST", reserve, `{"token": "t1", "lines": [{"item": 7, "quantity": "2", "locations": [1]}]}`, 400, "invalid_input", "lines[0].quantity", "want an integer"},
		{"fractional quantity", "POST", reserve, `{"token": "t1", "lines": [{"item": 7, "quantity": 1, "locations": [1]}, {"item": 8, "quantity": 1.5, "locations": [1]}]}`, 400, "invalid_input", "lines[1].quantity", "want an integer"},
		{"location not a number", "POST", reserve, `{"token": "t1", "lines": [{"item": 7, "quantity": 1, "locations": [1, "two"]}]}`, 400, "invalid_input", "lines[0].locations[1]", "want an integer"},
		{"line not an object", "POST", reserve, `{"token": "t1", "lines": [{"item": 7, "quantity": 1, "locations": [1]}, 5]}`, 400, "invalid_input", "lines[1]", "want"},
		{"lines an object", "POST", reserve, `{"token": "t1", "lines": {"item": 7}}`, 400, "invalid_input", "lines", "want"},
		{"too many lines", "POST", reserve, `{"token": "t1", "lines": [` + strings.Join(manyLines, ",") + `]}`, 400, "invalid_input", "lines", "at most 100 lines"},
		{"no lines", "POST", reserve, `{"token": "t1", "lines": []}`, 400, "invalid_input", "lines", "at least one line"},
		{"missing token", "POST", reserve, `{"lines": [` + line + `]}`, 400, "invalid_input", "token", "token"},
		{"token too long", "POST", reserve, `{"token": "` + strings.Repeat("t", 65) + `", "lines": [` + line + `]}`, 400, "invalid_input", "token", "at most 64"},
		{"token with a space", "POST", reserve, `{"token": "a b", "lines": [` + line + `]}`, 400, "invalid_input", "token", "printable"},
		{"item twice", "POST", reserve, `{"token": "t1", "lines": [` + line + `,` + line + `]}`, 400, "invalid_input", "lines[1].item", "already"},
		{"location zero", "POST", reserve, `{"token": "t1", "lines": [{"item": 7, "quantity": 1, "locations": [0]}]}`, 400, "invalid_input", "lines[0].locations[0]", "positive"},
		{"negative ttl", "POST", reserve, `{"token": "t1", "ttl_ms": -5, "lines": [` + line + `]}`, 400, "invalid_input", "ttl_ms", "positive"},
		{"ttl too long", "POST", reserve, `{"token": "t1", "ttl_ms": 7200000, "lines": [` + line + `]}`, 400, "invalid_input", "ttl_ms", "between"},
		{"shop not a number", "POST", "/v1/shops/abc/reservations", `{"token": "t1", "lines": [` + line + `]}`, 400, "invalid_input", "shop", "positive integer"},
		{"shop zero", "POST", "/v1/shops/0/reservations", `{"token": "t1", "lines": [` + line + `]}`, 400, "invalid_input", "shop", "positive integer"},
		{"claim bad token", "POST", "/v1/shops/1001/reservations/a%20b/claim", ``, 400, "invalid_input", "token", "printable"},
		{"release bad token", "POST", "/v1/shops/1001/reservations/" + strings.Repeat("x", 65) + "/release", ``, 400, "invalid_input", "token", "at most 64"},
		{"availability bad item", "GET", "/v1/shops/1001/items/-3/availability", ``, 400, "invalid_input", "item", "positive integer"},
		{"adjust both", "POST", "/v1/shops/1001/items/7/locations/1/adjust", `{"available": 5, "delta": 1}`, 400, "invalid_input", "available", "not both"},
		{"adjust neither", "POST", "/v1/shops/1001/items/7/locations/1/adjust", `{}`, 400, "invalid_input", "delta", "delta"},
		{"adjust negative stock", "POST", "/v1/shops/1001/items/7/locations/1/adjust", `{"available": -1}`, 400, "invalid_input", "available", "between 0"},
		{"adjust zero delta", "POST", "/v1/shops/1001/items/7/locations/1/adjust", `{"delta": 0}`, 400, "invalid_input", "delta", "non-zero"},
		{"adjust unknown field", "POST", "/v1/shops/1001/items/7/locations/1/adjust", `{"stock": 5}`, 400, "unknown_field", "stock", "stock"},
		{"adjust bad location", "POST", "/v1/shops/1001/items/7/locations/x/adjust", `{"available": 5}`, 400, "invalid_input", "location", "positive integer"},
	}
	for _, c := range cases {
		r := h.do(c.method, c.path, c.body, "")
		if r.status != c.status || str(r.body["error"]) != c.code || str(r.body["field"]) != c.field ||
			!strings.Contains(str(r.body["message"]), c.message) || str(r.body["request_id"]) == "" {
			t.Errorf("%s: got %d %s\nwant %d error %q field %q message containing %q", c.name, r.status, trim(r.raw), c.status, c.code, c.field, c.message)
		}
	}

	// Nothing reached a store, nor the comparer.
	h.flush()
	for name, p := range h.pods {
		for _, table := range []string{"inventory_ledger", "available_units", "reserved_quantities", "reservation_claims"} {
			if n := p.db.Count(t, table); n != 0 {
				t.Errorf("pod %s: %s has %d rows after bad input", name, table, n)
			}
		}
		if keys := p.redis.Keys(t); len(keys) != 0 {
			t.Errorf("pod %s: redis keys after bad input: %v", name, keys)
		}
	}
	tot, err := h.cell.Comparer.Totals(context.Background(), "", time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if tot.Observations != 0 {
		t.Errorf("the comparer saw %d observations of bad input", tot.Observations)
	}
}

func trim(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// A token's final answer is kept (its tombstone) and answered again,
// whichever store decides the shop: a refused token stays refused (the
// replayed refusal is the first one, short lines included, and says the
// token is spent), a released one is never claimed nor reserved again, a
// refused one was never held (claim 404), an expired one answers 410, and
// releasing twice releases once. docs/api.md's client contract lists
// these answers.
func TestAPITombstoneAnswers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mode      authority.Mode
		authority string
	}{{authority.ModeShadow, "redis"}, {authority.ModeMySQL, "mysql"}} {
		t.Run(string(c.mode), func(t *testing.T) {
			t.Parallel()
			h := setup(t, options{modes: map[string]authority.Mode{"pod-a": c.mode}})
			h.stock(1001, 7, 1, 5)
			do := func(method, path string) response {
				t.Helper()
				return h.do(method, path, nil, "")
			}
			want := func(what string, r response, status int, code string) {
				t.Helper()
				if r.status != status || str(r.body["error"]) != code {
					t.Fatalf("%s: %d %s, want %d %q", what, r.status, r.raw, status, code)
				}
			}

			// Refused, then refused again: the same answer, replayed.
			first := h.reserve(1001, "short", 7, 6)
			want("insufficient reserve", first, http.StatusConflict, "insufficient")
			if first.body["replayed"] != nil || !strings.Contains(str(first.body["message"]), "use a new token") {
				t.Errorf("first refusal: %s", first.raw)
			}
			h.stock(1001, 7, 1, 50) // enough now: the token stays refused all the same
			again := h.reserve(1001, "short", 7, 6)
			want("reserve of a refused token", again, http.StatusConflict, "insufficient")
			if again.body["replayed"] != true || !strings.Contains(str(again.body["message"]), "spent") ||
				fmt.Sprint(again.body["short"]) != fmt.Sprint(first.body["short"]) {
				t.Errorf("replayed refusal: %s\nfirst: %s", again.raw, first.raw)
			}
			want("claim of a refused token", do("POST", "/v1/shops/1001/reservations/short/claim"), http.StatusNotFound, "not_found")
			if r := do("POST", "/v1/shops/1001/reservations/short/release"); r.status != 200 || r.body["released"] != false {
				t.Errorf("release of a refused token: %d %s", r.status, r.raw)
			}

			// Released: never claimed, never reserved again.
			if r := h.reserve(1001, "gone", 7, 2); r.status != http.StatusCreated || str(r.body["authority"]) != c.authority {
				t.Fatalf("reserve: %d %s", r.status, r.raw)
			}
			if r := do("POST", "/v1/shops/1001/reservations/gone/release"); r.status != 200 || r.body["released"] != true {
				t.Fatalf("release: %d %s", r.status, r.raw)
			}
			want("claim after release", do("POST", "/v1/shops/1001/reservations/gone/claim"), http.StatusConflict, "released")
			want("reserve after release", h.reserve(1001, "gone", 7, 2), http.StatusConflict, "released")
			want("get after release", do("GET", "/v1/shops/1001/reservations/gone"), http.StatusConflict, "released")
			if r := do("POST", "/v1/shops/1001/reservations/gone/release"); r.status != 200 || r.body["released"] != false {
				t.Errorf("second release: %d %s", r.status, r.raw)
			}

			// Claimed: reserve and release refuse, claim replays.
			h.reserve(1001, "paid", 7, 1)
			if r := do("POST", "/v1/shops/1001/reservations/paid/claim"); r.status != 200 || str(r.body["outcome"]) != "claimed" {
				t.Fatalf("claim: %d %s", r.status, r.raw)
			}
			want("reserve after claim", h.reserve(1001, "paid", 7, 1), http.StatusConflict, "already_claimed")
			want("release after claim", do("POST", "/v1/shops/1001/reservations/paid/release"), http.StatusConflict, "already_claimed")
			if r := do("POST", "/v1/shops/1001/reservations/paid/claim"); r.status != 200 || r.body["replayed"] != true {
				t.Errorf("claim again: %d %s", r.status, r.raw)
			}

			// Expired: a claim after the expiry (on the store's clock; no
			// reaper runs here) answers 410, and so does everything after.
			r := h.do("POST", "/v1/shops/1001/reservations", map[string]any{"token": "late", "ttl_ms": 1000,
				"lines": []map[string]any{{"item": 7, "quantity": 1, "locations": []int64{1}}}}, "")
			if r.status != http.StatusCreated {
				t.Fatalf("reserve for 1s: %d %s", r.status, r.raw)
			}
			time.Sleep(1500 * time.Millisecond) // the hold's own clock: nothing to poll for
			want("claim after expiry", do("POST", "/v1/shops/1001/reservations/late/claim"), http.StatusGone, "expired")
			want("claim after expiry, again", do("POST", "/v1/shops/1001/reservations/late/claim"), http.StatusGone, "expired")
			if r := do("POST", "/v1/shops/1001/reservations/late/release"); r.status != 200 || r.body["released"] != false {
				t.Errorf("release after expiry: %d %s", r.status, r.raw)
			}
		})
	}
}
