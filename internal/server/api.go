package server

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/seed31b0e981/reservoir/docs"
	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/reservation"
)

// routes builds the handlers: the checkout API's, the admin listener's,
// and both on one. Patterns use Go's method and wildcard routing; a path
// that matches with another method answers 405 with Allow.
func (s *Server) routes() (api, admin, both http.Handler) {
	apiMux, adminMux, bothMux := http.NewServeMux(), http.NewServeMux(), http.NewServeMux()
	checkout := func(pattern, op string, withBody bool, h http.HandlerFunc) {
		s.routeTable = append(s.routeTable, Route{Listener: CheckoutListener, Pattern: pattern})
		for _, mux := range []*http.ServeMux{apiMux, bothMux} {
			s.apiOp(mux, pattern, op, withBody, h)
		}
	}
	checkout("POST /v1/shops/{shop}/reservations", "reserve", true, s.reserve)
	checkout("GET /v1/shops/{shop}/reservations/{token}", "get", false, s.get)
	checkout("POST /v1/shops/{shop}/reservations/{token}/claim", "claim", false, s.claim)
	checkout("POST /v1/shops/{shop}/reservations/{token}/release", "release", false, s.release)
	checkout("GET /v1/shops/{shop}/items/{item}/availability", "availability", false, s.availability)
	checkout("POST /v1/shops/{shop}/items/{item}/locations/{location}/adjust", "adjust", true, s.adjust)
	// Every admin listener route goes through ops, which registers it
	// in s.routeTable, and, unless adminAccess says it is public,
	// behind the role adminAccess gives it.
	ops := func(pattern string, limited bool, h http.HandlerFunc) {
		if adminAccess[pattern] != rolePublic {
			h = s.admin(pattern, h)
		}
		s.routeTable = append(s.routeTable, Route{Listener: AdminListener, Pattern: pattern})
		for _, mux := range []*http.ServeMux{adminMux, bothMux} {
			s.route(mux, pattern, limited, h)
		}
	}
	// Admin API (bearer token, role per adminAccess).
	ops("GET /admin/rollout/status", true, s.rolloutStatus)
	ops("GET /admin/rollout/history", true, s.rolloutHistory)
	// Like the kill switch: outside load shedding, bounded by the
	// reconcile a stage leaving mysql_only runs, plus the wait for the
	// fleet to obey.
	ops("POST /admin/rollout/advance", false, s.incident(s.advance))
	ops("POST /admin/killswitch", false, s.incident(s.engageKill))
	ops("DELETE /admin/killswitch", false, s.incident(s.releaseKill))
	ops("GET /admin/diffs", true, s.diffs)
	ops("GET /admin/stats", true, s.stats)
	ops("GET /admin/series", true, s.series)
	ops("GET /admin/reconcile", true, s.lastReconcile)
	ops("POST /admin/reconcile", false, s.reconcile)
	// Operations.
	ops("GET /metrics", false, s.metricsHandler())
	ops("GET /healthz", false, s.healthz)
	ops("GET /readyz", false, s.readyz)
	// The dashboard: a static page; its data comes from the admin API.
	ops("GET /dashboard", false, s.dashboard)
	ops("GET /dashboard/{file}", false, s.dashboardAsset)
	ops("GET /{$}", false, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/dashboard", http.StatusFound)
	})
	// The contract of every route here (docs/openapi.yaml), for client
	// generators and API tools; it holds nothing the repository does
	// not, so it needs no token.
	ops("GET /openapi.yaml", false, s.openAPI)
	return s.traced("checkout", s.outer(withNoRoute(apiMux, "no such endpoint on the checkout listener (the admin API, dashboard, /metrics and health are on the admin listener): see docs/api.md"))),
		s.traced("admin", s.outer(withNoRoute(adminMux, "no such endpoint on the admin listener (the checkout API /v1 is on the other listener): see docs/api.md"))),
		s.traced("reservoir", s.outer(withNoRoute(bothMux, "no such endpoint: see docs/api.md")))
}

// Route is one route the server registers: its listener and its
// net/http pattern ("POST /v1/shops/{shop}/reservations"). Routes lists
// them so a test can hold docs/openapi.yaml to what is really served.
type Route struct {
	// Listener is CheckoutListener or AdminListener.
	Listener string
	// Pattern is the http.ServeMux pattern: a method, a space, a path
	// with {wildcards} ("GET /{$}" is the root only).
	Pattern string
}

// The listeners a Route is served on.
const (
	// CheckoutListener serves the checkout API (/v1): Serve's api.
	CheckoutListener = "checkout"
	// AdminListener serves everything else: Serve's admin.
	AdminListener = "admin"
)

// Routes is every route the server registers, in registration order.
// Handler serves them all; Serve splits them between its listeners.
func (s *Server) Routes() []Route { return slices.Clone(s.routeTable) }

// openAPI serves the OpenAPI document embedded in the binary.
func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(docs.OpenAPI)
}

// withNoRoute answers, with msg, the requests no pattern of mux matches.
func withNoRoute(mux *http.ServeMux, msg string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "" {
			noRoute(w, r, mux, msg)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// noRoute answers a request no pattern matches the way every other error
// is answered (JSON), keeping the mux's verdict: 405 with Allow when the
// path exists for another method, else 404.
func noRoute(w http.ResponseWriter, r *http.Request, mux *http.ServeMux, msg string) {
	h, _ := mux.Handler(r)
	c := &capture{header: http.Header{}}
	h.ServeHTTP(c, r)
	if allow := c.header.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	if c.status == http.StatusMethodNotAllowed {
		writeProblem(w, r, problem{Status: c.status, Code: "method_not_allowed", Message: r.Method + " is not allowed here; allowed: " + c.header.Get("Allow")})
		return
	}
	writeProblem(w, r, problem{Status: http.StatusNotFound, Code: "no_route", Message: msg})
}

// capture keeps a handler's status and headers and drops its body.
type capture struct {
	header http.Header
	status int
}

// Header implements http.ResponseWriter.
func (c *capture) Header() http.Header { return c.header }

// Write implements http.ResponseWriter: the body is dropped.
func (c *capture) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return len(b), nil
}

// WriteHeader implements http.ResponseWriter.
func (c *capture) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}

// pathID reads a positive int64 path parameter, written canonically: a
// decimal without sign or leading zeros ("7001", never "+7001" or
// "007001"), so one id has one spelling in URLs, logs and caches.
func pathID(r *http.Request, name string) (int64, *problem) {
	v := r.PathValue(name)
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != v {
		return 0, badInput(name, "%s: must be a positive integer id in decimal without sign or leading zeros, got %q", name, v)
	}
	return id, nil
}

// podOf reads the {shop} path parameter and finds its pod.
func (s *Server) podOf(r *http.Request) (int64, *cell.Pod, *problem) {
	shop, p := pathID(r, "shop")
	if p != nil {
		return 0, nil, p
	}
	pod, err := s.cfg.Cell.PodOf(shop)
	if err != nil || pod == nil {
		return 0, nil, badInput("shop", "shop %d: no pod serves it: %v", shop, err)
	}
	return shop, pod, nil
}

// op counts one API operation of a pod, by status code.
func (s *Server) op(pod *cell.Pod, op string, status int) {
	s.metrics.operations.WithLabelValues(pod.Name, op, strconv.Itoa(status)).Inc()
}

// fail writes p and counts the operation.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, pod *cell.Pod, op string, p *problem) {
	if pod != nil {
		s.op(pod, op, p.Status)
	}
	writeProblem(w, r, *p)
}

func (s *Server) reserve(w http.ResponseWriter, r *http.Request) {
	const op = "reserve"
	shop, pod, p := s.podOf(r)
	if p != nil {
		s.fail(w, r, pod, op, p)
		return
	}
	var req wire.ReserveRequest
	if p := s.decodeBody(w, r, &req); p != nil {
		s.fail(w, r, pod, op, p)
		return
	}
	ttl := s.cfg.DefaultTTL
	switch {
	case req.TTLMs < 0:
		s.fail(w, r, pod, op, badInput("ttl_ms", "ttl_ms: must be positive, got %d", req.TTLMs))
		return
	case req.TTLMs > pod.Limits.MaxTTL.Milliseconds():
		// Checked before converting: a huge value would overflow the
		// Duration and wrap to something that looks valid.
		s.fail(w, r, pod, op, badInput("ttl_ms", "ttl_ms: must be between %d and %d, got %d", pod.Limits.MinTTL.Milliseconds(), pod.Limits.MaxTTL.Milliseconds(), req.TTLMs))
		return
	case req.TTLMs > 0:
		ttl = time.Duration(req.TTLMs) * time.Millisecond
	}
	params := reservation.ReserveParams{Shop: shop, Token: req.Token, Lines: wire.ReservationLines(req.Lines), TTL: ttl}
	if err := pod.Limits.ValidateReserve(&params); err != nil {
		s.fail(w, r, pod, op, validation(err, map[string]string{"ttl": "ttl_ms"}))
		return
	}
	res, err := pod.Facade.Reserve(r.Context(), &params)
	if err != nil {
		s.fail(w, r, pod, op, s.storeProblem(r, pod.Name, err))
		return
	}
	if res.Status != reservation.StatusReserved {
		s.fail(w, r, pod, op, insufficient(pod.Name, res))
		return
	}
	status := http.StatusCreated
	if res.Replayed {
		status = http.StatusOK
	}
	s.op(pod, op, status)
	writeJSON(w, status, wire.Reservation{Shop: shop, Token: req.Token, Pod: pod.Name, Status: string(res.Status),
		Authority: string(res.Authority), Allocations: wire.AllocationsOf(res.Allocations), ExpiresAt: res.ExpiresAt.UTC(), Replayed: res.Replayed})
}

// insufficient is the answer of a reserve the decider refused. A refusal
// spends the token: its tombstone answers every later reserve with the
// same refusal (Replayed), so a delayed first attempt can never hold
// anything. Both answers are the same 409, short lines included; the
// message says so, and a replay says it is one.
func insufficient(pod string, res reservation.ReserveResult) *problem {
	msg := strconv.Itoa(len(res.Short)) + " line(s) cannot be served from their eligible locations; nothing is held. " +
		"This token is spent: use a new token to try again"
	extra := wire.Problem{Short: wire.ShortLinesOf(res.Short), Pod: pod, Replayed: res.Replayed}
	if res.Replayed {
		msg = "this token was refused before (this is its first answer, replayed): " + msg
	}
	return &problem{Status: http.StatusConflict, Code: "insufficient", Message: msg, Extra: extra}
}

// tokenParams reads {shop} and {token} and validates them.
func (s *Server) tokenParams(r *http.Request) (int64, string, *cell.Pod, *problem) {
	shop, pod, p := s.podOf(r)
	if p != nil {
		return 0, "", pod, p
	}
	token := r.PathValue("token")
	if err := pod.Limits.ValidateGet(&reservation.GetParams{Shop: shop, Token: token}); err != nil {
		return 0, "", pod, validation(err, nil)
	}
	return shop, token, pod, nil
}

// tokenCall answers a call on one reservation (get, claim, release): the
// shop and token from the path, checked; then call on the shop's pod, whose
// result is the answer, or whose error becomes the store's problem.
func (s *Server) tokenCall(w http.ResponseWriter, r *http.Request, op string,
	call func(ctx context.Context, pod *cell.Pod, shop int64, token string) (any, error)) {
	shop, token, pod, p := s.tokenParams(r)
	if p != nil {
		s.fail(w, r, pod, op, p)
		return
	}
	answer, err := call(r.Context(), pod, shop, token)
	if err != nil {
		s.fail(w, r, pod, op, s.storeProblem(r, pod.Name, err))
		return
	}
	s.op(pod, op, http.StatusOK)
	writeJSON(w, http.StatusOK, answer)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	s.tokenCall(w, r, "get", func(ctx context.Context, pod *cell.Pod, shop int64, token string) (any, error) {
		h, err := pod.Facade.Get(ctx, &reservation.GetParams{Shop: shop, Token: token})
		return wire.Reservation{Shop: shop, Token: token, Pod: pod.Name, Status: "held",
			Authority: string(h.Authority), Allocations: wire.AllocationsOf(h.Allocations), ExpiresAt: h.ExpiresAt.UTC()}, err
	})
}

func (s *Server) claim(w http.ResponseWriter, r *http.Request) {
	s.tokenCall(w, r, "claim", func(ctx context.Context, pod *cell.Pod, shop int64, token string) (any, error) {
		res, err := pod.Facade.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: token})
		return wire.ClaimResponse{Shop: shop, Token: token, Pod: pod.Name, Outcome: string(res.Outcome),
			Allocations: wire.AllocationsOf(res.Allocations), Replayed: res.Replayed}, err
	})
}

func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	s.tokenCall(w, r, "release", func(ctx context.Context, pod *cell.Pod, shop int64, token string) (any, error) {
		res, err := pod.Facade.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: token})
		v := wire.ReleaseResponse{Shop: shop, Token: token, Pod: pod.Name, Released: res.Released}
		if len(res.Allocations) > 0 {
			v.Allocations = wire.AllocationsOf(res.Allocations)
		}
		return v, err
	})
}

func (s *Server) availability(w http.ResponseWriter, r *http.Request) {
	const op = "availability"
	shop, pod, p := s.podOf(r)
	if p != nil {
		s.fail(w, r, pod, op, p)
		return
	}
	item, p := pathID(r, "item")
	if p != nil {
		s.fail(w, r, pod, op, p)
		return
	}
	res, err := pod.Facade.Availability(r.Context(), &reservation.AvailabilityParams{Shop: shop, Item: item})
	if err != nil {
		s.fail(w, r, pod, op, s.storeProblem(r, pod.Name, err))
		return
	}
	s.op(pod, op, http.StatusOK)
	writeJSON(w, http.StatusOK, wire.AvailabilityOf(shop, pod.Name, res))
}

// IdempotencyKeyHeader names the header that makes an adjust idempotent
// (reservation.AdjustParams.Key): a merchant retrying "+5" after a lost
// reply adds 5 once.
const IdempotencyKeyHeader = "Idempotency-Key"

func (s *Server) adjust(w http.ResponseWriter, r *http.Request) {
	const op = "adjust"
	shop, pod, p := s.podOf(r)
	if p != nil {
		s.fail(w, r, pod, op, p)
		return
	}
	item, p := pathID(r, "item")
	if p != nil {
		s.fail(w, r, pod, op, p)
		return
	}
	loc, p := pathID(r, "location")
	if p != nil {
		s.fail(w, r, pod, op, p)
		return
	}
	var req wire.AdjustRequest
	if p := s.decodeBody(w, r, &req); p != nil {
		s.fail(w, r, pod, op, p)
		return
	}
	params := reservation.AdjustParams{Shop: shop, Item: item, Location: loc, Available: req.Available, Key: r.Header.Get(IdempotencyKeyHeader)}
	switch {
	case req.Available != nil && req.Delta != nil:
		s.fail(w, r, pod, op, badInput("available", "give either available or delta, not both"))
		return
	case req.Available == nil && req.Delta == nil:
		s.fail(w, r, pod, op, badInput("delta", "give available (the new quantity) or delta (a non-zero change)"))
		return
	case req.Delta != nil:
		params.Delta = *req.Delta
	}
	if err := pod.Limits.ValidateAdjust(&params); err != nil {
		s.fail(w, r, pod, op, validation(err, map[string]string{"key": IdempotencyKeyHeader}))
		return
	}
	res, err := pod.Facade.Adjust(r.Context(), &params)
	if errors.Is(err, reservation.ErrTokenConflict) {
		s.fail(w, r, pod, op, &problem{Status: http.StatusConflict, Code: "key_conflict", Field: IdempotencyKeyHeader,
			Message: "this Idempotency-Key was used for another change (item, location or quantity); use a new key per change"})
		return
	}
	if err != nil {
		s.fail(w, r, pod, op, s.storeProblem(r, pod.Name, err))
		return
	}
	s.op(pod, op, http.StatusOK)
	writeJSON(w, http.StatusOK, wire.AdjustResponse{Shop: shop, Item: item, Location: loc, Pod: pod.Name, Available: res.Available, Delta: res.Delta, Replayed: res.Replayed})
}
