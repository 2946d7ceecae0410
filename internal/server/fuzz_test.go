package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// env is a server built for a testing.TB (the fuzz targets have a
// *testing.F, which setup does not take): a one-pod topology (pod-a,
// shops 1001 and 1002) on a fresh database and key prefix, unless topo
// rewrites it.
type env struct {
	srv  *server.Server
	cell *cell.Cell
	log  *syncBuffer
	topo *topology.Config
}

type envOptions struct {
	// modes per pod, written to the flags file.
	modes map[string]authority.Mode
	// topo edits the topology before the cell opens.
	topo func(*topology.Config)
	// cfg edits the server's config before New.
	cfg func(*server.Config)
}

func newEnv(tb testing.TB, o envOptions) *env {
	tb.Helper()
	dir := tb.TempDir()
	control := testdb.New(tb)
	pod := testdb.New(tb)
	rd := testredis.New(tb)
	topo := &topology.Config{ControlDSN: control.DSN, FlagsFile: filepath.Join(dir, "flags.json"), DefaultRule: "pod:pod-a",
		Pods: []topology.Pod{{Name: "pod-a", MySQLDSN: pod.DSN, RedisAddr: testredis.Addr(tb), RedisPrefix: rd.Prefix, Shops: []int64{1001, 1002}}}}
	if o.topo != nil {
		o.topo(topo)
	}
	*topo = topo.WithDefaults()
	if err := topo.Validate(); err != nil {
		tb.Fatal(err)
	}
	writeFlags(tb, topo.FlagsFile, o.modes)
	c, reg, log, logBuf := openCell(tb, topo)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	cfg := server.Config{Cell: c, AdminToken: adminToken, Registry: reg, Logger: log, InsecureNoAuth: true,
		Reconciler:     server.ReportFunc(c.Reconcile),
		SampleInterval: 100 * time.Millisecond, SeriesWindow: time.Second, RequestTimeout: 10 * time.Second}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Close)
	return &env{srv: srv, cell: c, log: logBuf, topo: topo}
}

// serve runs one request through the handler in process (no network).
func (e *env) serve(method, path string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	e.srv.Handler().ServeHTTP(rec, req)
	return rec
}

// The codes a rejected body may answer with, and whether each must name a
// field.
var rejectCodes = map[string]bool{
	"invalid_input":  true,  // a field's value or type is wrong
	"unknown_field":  false, // names the field in the message (the key may be "")
	"duplicate_key":  false, // names the member in the message (the key may be "")
	"malformed_json": false, // the body itself: syntax, empty, trailing data
	"body_too_large": false,
}

// checkRejected asserts a 4xx answer is a JSON problem naming a field or
// the body's problem.
func checkRejected(t *testing.T, rec *httptest.ResponseRecorder, body []byte) {
	t.Helper()
	if rec.Code != http.StatusBadRequest && rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("rejected with %d, want 400 or 413; body %q -> %s", rec.Code, body, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("rejection is %q, not application/problem+json: %s", ct, rec.Body)
	}
	var p struct{ Error, Message, Field, RequestID string }
	var raw map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatalf("rejection is not a JSON object: %v: %s", err, rec.Body)
	}
	p.Error, p.Message, p.Field, p.RequestID = str(raw["error"]), str(raw["message"]), str(raw["field"]), str(raw["request_id"])
	mustField, known := rejectCodes[p.Error]
	switch {
	case !known:
		t.Fatalf("rejection code %q is not a body/field problem; body %q -> %s", p.Error, body, rec.Body)
	case p.Message == "":
		t.Fatalf("rejection without a message: %s", rec.Body)
	case mustField && p.Field == "":
		t.Fatalf("%s without a field; body %q -> %s", p.Error, body, rec.Body)
	case p.Error == "unknown_field" && !strings.Contains(p.Message, "unknown field"):
		t.Fatalf("unknown_field message does not name the field: %s", rec.Body)
	case p.RequestID == "":
		t.Fatalf("rejection without a request id: %s", rec.Body)
	}
}

// strictDecode decodes body the way the API documents it: one JSON object,
// names matched exactly (no unknown field, none in another case, none
// twice), nothing after it. encoding/json would match "AvAilABle" to
// "available" and take a name given twice: JSON v2's defaults do not.
func strictDecode(body []byte, v any) error {
	return jsonv2.Unmarshal(body, v, jsonv2.RejectUnknownMembers(true))
}

// reserveWithinBounds reports why an accepted reserve body breaks the
// documented bounds ("" when it does not): token 1..64 printable ASCII,
// 1..100 lines, distinct positive items, quantity 1..pool cap, 1..50
// distinct positive locations, ttl_ms absent (0) or 1000..3600000.
func reserveWithinBounds(req wire.ReserveRequest, maxQty int64) string {
	l := reservation.DefaultLimits
	if n := len(req.Token); n < 1 || n > reservation.MaxTokenBytes {
		return "token length"
	}
	for i := 0; i < len(req.Token); i++ {
		if c := req.Token[i]; c < 0x21 || c > 0x7e {
			return "token byte"
		}
	}
	if req.TTLMs != 0 && (req.TTLMs < l.MinTTL.Milliseconds() || req.TTLMs > l.MaxTTL.Milliseconds()) {
		return "ttl_ms outside 1s..1h"
	}
	if len(req.Lines) < 1 || len(req.Lines) > l.MaxLines {
		return "number of lines"
	}
	items := map[int64]bool{}
	for _, ln := range req.Lines {
		if ln.Item <= 0 || items[ln.Item] {
			return "item"
		}
		items[ln.Item] = true
		if ln.Quantity < 1 || ln.Quantity > maxQty {
			return "quantity"
		}
		if len(ln.Locations) < 1 || len(ln.Locations) > l.MaxLocations {
			return "number of locations"
		}
		locs := map[int64]bool{}
		for _, loc := range ln.Locations {
			if loc <= 0 || locs[loc] {
				return "location"
			}
			locs[loc] = true
		}
	}
	return ""
}

// FuzzDecodeReserve drives POST /v1/shops/1001/reservations with arbitrary
// bodies through the real handler (in process, no network). It proves: the
// handler never panics (a panic would be recovered into a 500, which
// fails here); a rejected body answers 400/413 with a JSON problem whose
// code is a body or field problem, naming the field for invalid_input; an
// accepted body (201, 200 replay, 409 insufficient/conflict, 503 store)
// decodes strictly and satisfies every documented bound; and the answer
// agrees with a reference strict decode + bounds check (a body the
// reference finds valid is not rejected). Invalid bodies never reach a
// store: validation runs before the facade call. A store's answer carries
// one of the codes the client contract lists for a reserve: a token the
// corpus repeats may have been refused (its refusal is replayed),
// released, claimed or expired before.
func FuzzDecodeReserve(f *testing.F) {
	// The seed corpus is testdata/fuzz/FuzzDecodeReserve: valid bodies,
	// malformed JSON, unknown fields, huge numbers, a negative quantity,
	// too many lines and locations, an empty token, trailing data.
	e := newEnv(f, envOptions{})
	maxQty := min(reservation.DefaultLimits.MaxQuantity, e.topo.Pods[0].PoolCap)
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := e.serve("POST", "/v1/shops/1001/reservations", body)
		var req wire.ReserveRequest
		refErr := strictDecode(body, &req)
		why := "decode: "
		if refErr == nil {
			why = reserveWithinBounds(req, maxQty)
		} else {
			why += refErr.Error()
		}
		switch rec.Code {
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			checkRejected(t, rec, body)
			if why == "" && len(body) <= 256<<10 {
				t.Fatalf("a valid body was rejected: %q -> %s", body, rec.Body)
			}
		case http.StatusCreated, http.StatusOK, http.StatusConflict, http.StatusGone, http.StatusServiceUnavailable:
			if why != "" {
				t.Fatalf("accepted (%d) a body outside the bounds (%s): %q -> %s", rec.Code, why, body, rec.Body)
			}
			if code := answerCode(t, rec); !reserveAnswers[rec.Code][code] {
				t.Fatalf("a reserve answered %d %q, which the client contract does not list: %q -> %s", rec.Code, code, body, rec.Body)
			}
		default:
			t.Fatalf("unexpected status %d for %q: %s", rec.Code, body, rec.Body)
		}
	})
}

// reserveAnswers are the codes a store's answer to a valid reserve may
// carry, per status (docs/api.md, "Client contract"; "" is a success).
var reserveAnswers = map[int]map[string]bool{
	http.StatusCreated:            {"": true},
	http.StatusOK:                 {"": true},
	http.StatusConflict:           {"insufficient": true, "token_conflict": true, "already_claimed": true, "released": true},
	http.StatusGone:               {"expired": true},
	http.StatusServiceUnavailable: {"unavailable": true, "flags_unavailable": true, "contention": true, "overloaded": true},
}

// answerCode is the error code of an answer ("" for a success), which
// must be a JSON object.
func answerCode(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var raw map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatalf("answer %d is not a JSON object: %v: %s", rec.Code, err, rec.Body)
	}
	return str(raw["error"])
}

// FuzzDecodeAdjust does the same for the adjust body: exactly one of
// available (0..1e9) and delta (non-zero, within ±1e9).
func FuzzDecodeAdjust(f *testing.F) {
	// The seed corpus is testdata/fuzz/FuzzDecodeAdjust.
	e := newEnv(f, envOptions{})
	maxStock := reservation.DefaultLimits.MaxStock
	// The row exists before any input: a delta on an unknown item x
	// location answers 404, which would make an input's verdict depend on
	// whether an "available" input ran before it.
	if r := e.serve("POST", "/v1/shops/1001/items/7/locations/1/adjust", []byte(`{"available":10}`)); r.Code != http.StatusOK {
		f.Fatalf("seed the ledger row: %d %s", r.Code, r.Body)
	}
	// Each input starts from the same stock: a delta's verdict depends on
	// it (the sum must stay within 0..MaxStock), and without the reset it
	// would depend on the inputs that ran before.
	const base = 10
	f.Fuzz(func(t *testing.T, body []byte) {
		if r := e.serve("POST", "/v1/shops/1001/items/7/locations/1/adjust", []byte(`{"available":10}`)); r.Code != http.StatusOK {
			t.Fatalf("reset the stock: %d %s", r.Code, r.Body)
		}
		rec := e.serve("POST", "/v1/shops/1001/items/7/locations/1/adjust", body)
		var req wire.AdjustRequest
		why := ""
		if err := strictDecode(body, &req); err != nil {
			why = "decode: " + err.Error()
		} else {
			switch {
			case (req.Available == nil) == (req.Delta == nil):
				why = "want exactly one of available and delta"
			case req.Available != nil && (*req.Available < 0 || *req.Available > maxStock):
				why = "available out of range"
			case req.Delta != nil && (*req.Delta == 0 || *req.Delta > maxStock || *req.Delta < -maxStock):
				why = "delta out of range"
			case req.Delta != nil && base+*req.Delta > maxStock:
				why = "delta takes the stock above the most allowed"
			}
		}
		switch rec.Code {
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			checkRejected(t, rec, body)
			if why == "" {
				t.Fatalf("a valid body was rejected: %q -> %s", body, rec.Body)
			}
		case http.StatusOK, http.StatusConflict, http.StatusServiceUnavailable:
			// 409: a negative delta below the stock (insufficient_stock).
			if why != "" {
				t.Fatalf("accepted (%d) a body outside the bounds (%s): %q -> %s", rec.Code, why, body, rec.Body)
			}
		default:
			t.Fatalf("unexpected status %d for %q: %s", rec.Code, body, rec.Body)
		}
	})
}

// TestReserveTTLOverflow is the regression case for a bug the reserve
// bounds check exposes: api.go computes time.Duration(req.TTLMs) *
// time.Millisecond without an overflow check, so ttl_ms = 2^58 + 60000
// (288230376151771744, far above the documented 1h maximum) wraps to
// exactly 60s and is accepted (201 with a 60s hold) instead of answering
// 400 on ttl_ms; ttl_ms = MaxInt64 wraps to -1ms and the 400 says "got
// -1ms". api.go now rejects ttl_ms above MaxTTL before converting; the
// body is also in testdata/fuzz/FuzzDecodeReserve.
func TestReserveTTLOverflow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	if r := e.serve("POST", "/v1/shops/1001/items/7/locations/1/adjust", []byte(`{"available":10}`)); r.Code != http.StatusOK {
		t.Fatalf("adjust: %d %s", r.Code, r.Body)
	}
	body := []byte(`{"token":"ovf","ttl_ms":288230376151771744,"lines":[{"item":7,"quantity":1,"locations":[1]}]}`)
	r := e.serve("POST", "/v1/shops/1001/reservations", body)
	if r.Code != http.StatusBadRequest || !strings.Contains(r.Body.String(), `"field":"ttl_ms"`) {
		t.Fatalf("ttl_ms 2^58+60000: %d %s, want 400 on ttl_ms", r.Code, r.Body)
	}
}
