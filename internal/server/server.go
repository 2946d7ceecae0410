// Package server is reservoir's HTTP layer, on two listeners: the checkout
// API (reserve, claim, release, get, availability, adjust), for
// authenticated clients; and the admin listener, with the token-protected
// admin API (rollout status, kill switch, diffs, stats, reconcile), the
// diff dashboard page, /metrics, /healthz and /readyz. A flood of the
// checkout listener never reaches the admin one: the kill switch answers
// when it is needed most.
//
// It owns HTTP concerns only: authenticating clients, admitting calls
// (admission.go), decoding and validating requests (an invalid request
// never reaches a store), mapping answers and errors to status codes,
// request ids, access logs, body limits, timeouts and graceful shutdown. It calls the facades of a cell.Cell for reservations and the
// rollout package for flags; it never builds SQL or Redis commands and
// never decides authority.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/telemetry"
	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/rollout"
)

// Config configures a Server. New applies WithDefaults, then Validate.
type Config struct {
	// Cell is the opened topology the server answers for. Required. The
	// server never closes it: whoever opened it does, after Serve returns.
	Cell *cell.Cell
	// Controller makes every change of the flags the admin API makes
	// (the kill switch, audited and checked), and answers the plan's
	// status. Give it the cell as its LagReader (ControllerConfig.Lag) so
	// the audit records the relay lag at each switch. Default: a
	// controller without a plan on the cell's flag store, control
	// database, reconciler and relay lag (status then says no plan is
	// configured).
	Controller *rollout.Controller
	// Reconciler reports cross-store drift per pod for POST
	// /admin/reconcile. Optional: without one that endpoint answers 501.
	Reconciler Reconciler
	// Clients are the checkout API's clients: a call without one of their
	// tokens answers 401, a call its roles or shops do not allow 403.
	// Required unless InsecureNoAuth.
	Clients *Clients
	// InsecureNoAuth serves the checkout API to anyone who reaches it: for
	// development on a laptop, never in production.
	InsecureNoAuth bool
	// Operators are the admin API's identities, each with a role
	// (viewer, operator, admin); the audit records the name of the one
	// that makes a change. Optional beside AdminToken; with neither, the
	// admin API is disabled (every admin call answers 401 saying so).
	Operators *Operators
	// AdminToken is the shared bearer token of the admin API, from before
	// operators: it is the identity LegacyAdminName, role admin. Compared
	// in constant time and never logged. Empty: none.
	AdminToken string
	// CredentialFiles names the files ReloadCredentials and
	// WatchCredentials reread Clients, Operators and AdminToken from.
	// Each empty one is not reread (its credentials came from the
	// environment, or there are none).
	CredentialFiles CredentialFiles
	// Registry receives the server's metrics and is what /metrics serves.
	// Give it the registry the cell registered on, so one scrape has
	// everything. Default: a new registry with the Go and process
	// collectors (see NewRegistry).
	Registry *prometheus.Registry
	// Logger receives access logs and errors. Default: slog.Default().
	// A line logged for a request carries trace_id and span_id when the
	// request's span is recording (telemetry.LogHandler).
	Logger *slog.Logger
	// Tracing wraps both listeners in OpenTelemetry's HTTP instrumentation
	// (otelhttp): a span per request from the global tracer provider, the
	// caller's W3C traceparent honoured, and the trace id in each
	// response's X-Trace-Id (docs/tracing.md). serve sets it when
	// telemetry.Setup installed an SDK; off, the listeners are not wrapped
	// at all, and the facade and stores below start no span.
	Tracing bool
	// MaxBodyBytes caps a request body; a larger one answers 413.
	// Default: 256 KiB (a cart of 100 lines with 50 locations each fits).
	MaxBodyBytes int64
	// RequestTimeout bounds each API and admin call's work (its context).
	// A call that runs out answers 503. Default: 5s.
	RequestTimeout time.Duration
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout are the
	// http.Server's. Defaults: 5s, 10s, 15s, 60s.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// ShutdownTimeout bounds how long Serve waits, after its context ends,
	// for requests in flight to finish. Default: 15s.
	ShutdownTimeout time.Duration
	// DefaultTTL is a reservation's TTL when the request gives no ttl_ms.
	// Default: 10m.
	DefaultTTL time.Duration
	// SampleInterval is how often the server samples its own counters and
	// histograms for /admin/series (the dashboard's rates and latency
	// quantiles). Default: 2s.
	SampleInterval time.Duration
	// SeriesWindow is the trailing window each /admin/series point's
	// rates and quantiles cover. Default: 10s.
	SeriesWindow time.Duration
	// ReconcileTimeout bounds POST /admin/reconcile (a whole pod, shop by
	// shop), and a kill switch change (whose check over a mysql_only
	// scope reconciles whole pods). Default: 5m.
	ReconcileTimeout time.Duration
	// KillWait is how long a kill switch change waits for this replica's
	// flag source to obey, to report the propagation time. Default: 3s.
	KillWait time.Duration
	// PodQueueWait is how long a checkout call may wait for one of its
	// pod's slots. A pod serves as many calls at once as its MySQL pool
	// has connections, and as many more may wait; beyond that, or after
	// this wait, the call answers 503 "overloaded" with Retry-After, and
	// nothing was done. Default: 250ms.
	PodQueueWait time.Duration
	// BodyBytesInFlight caps the checkout request bytes the server holds
	// at once (bodies being read or served); a call whose body does not
	// fit answers 503 "overloaded" before its body is read. Bodies are
	// read before a pod slot is taken, so slow senders hold only this
	// budget. Default: 32 MiB.
	BodyBytesInFlight int64
	// AdminMaxInFlight caps the admin API reads served at once; beyond it
	// a call answers 503 "overloaded" at once. Health, metrics, the
	// dashboard and the kill switch are not counted. Default: 64.
	AdminMaxInFlight int
	// MaxConns caps the checkout listener's open connections (admission
	// step 0): the next ones wait in the kernel's accept queue, unread,
	// and while every place is taken each connection serves one call and
	// one idle for a second is closed, so the places go round. It bounds
	// what a flood of the checkout listener costs the process at once,
	// so that the flag feed, the heartbeat and the admin listener (never
	// capped) are served promptly beside it (BENCHMARKS.md, "The kill
	// switch under a flood": 64 places against 128 and 256, and none).
	// Calls waiting on a pod's store hold their connections' places: with
	// fewer places than a pod has slots, a pod whose store stalls would
	// hold them all, and the other pods' calls would wait. Applies only
	// with an admin listener of its own (Serve). Negative: no cap.
	// Default: 32 per CPU the process runs on (GOMAXPROCS), and at least
	// the pods' slots together: 64 for one pod on two CPUs.
	MaxConns int
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Registry == nil {
		c.Registry = NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 256 << 10
	}
	def(&c.RequestTimeout, 5*time.Second)
	def(&c.ReadHeaderTimeout, 5*time.Second)
	def(&c.ReadTimeout, 10*time.Second)
	def(&c.WriteTimeout, 15*time.Second)
	def(&c.IdleTimeout, 60*time.Second)
	def(&c.ShutdownTimeout, 15*time.Second)
	def(&c.DefaultTTL, 10*time.Minute)
	def(&c.SampleInterval, 2*time.Second)
	def(&c.SeriesWindow, 10*time.Second)
	def(&c.KillWait, 3*time.Second)
	def(&c.ReconcileTimeout, 5*time.Minute)
	def(&c.PodQueueWait, 250*time.Millisecond)
	if c.BodyBytesInFlight == 0 {
		c.BodyBytesInFlight = 32 << 20
	}
	if c.AdminMaxInFlight == 0 {
		c.AdminMaxInFlight = 64
	}
	if c.MaxConns == 0 {
		c.MaxConns = 32 * runtime.GOMAXPROCS(0)
		if c.Cell != nil {
			slots := 0
			for _, p := range c.Cell.Pods() {
				slots += podSlots(p)
			}
			c.MaxConns = max(c.MaxConns, slots)
		}
	}
	return c
}

// Validate reports a setting that cannot work, naming the field.
func (c Config) Validate() error {
	switch {
	case c.Cell == nil:
		return errors.New("server: Config.Cell is required")
	case c.MaxBodyBytes < 1024:
		return fmt.Errorf("server: Config.MaxBodyBytes must be >= 1024, got %d", c.MaxBodyBytes)
	case c.RequestTimeout <= 0 || c.ShutdownTimeout <= 0:
		return errors.New("server: Config.RequestTimeout and ShutdownTimeout must be > 0")
	case c.SampleInterval < 10*time.Millisecond:
		return fmt.Errorf("server: Config.SampleInterval must be >= 10ms, got %s", c.SampleInterval)
	case c.SeriesWindow < c.SampleInterval:
		return fmt.Errorf("server: Config.SeriesWindow %s is shorter than SampleInterval %s", c.SeriesWindow, c.SampleInterval)
	case c.Clients == nil && !c.InsecureNoAuth:
		return errors.New("server: Config.Clients is required (or set InsecureNoAuth to serve the checkout API to anyone, for development)")
	case c.Clients != nil && c.InsecureNoAuth:
		return errors.New("server: Config.Clients and InsecureNoAuth are exclusive")
	case c.PodQueueWait < 0:
		return fmt.Errorf("server: Config.PodQueueWait must be >= 0, got %s", c.PodQueueWait)
	case c.BodyBytesInFlight < c.MaxBodyBytes:
		return fmt.Errorf("server: Config.BodyBytesInFlight %d is below MaxBodyBytes %d: the largest body could never be read", c.BodyBytesInFlight, c.MaxBodyBytes)
	case c.AdminMaxInFlight < 1:
		return fmt.Errorf("server: Config.AdminMaxInFlight must be >= 1, got %d", c.AdminMaxInFlight)
	case c.AdminToken != "" && len(c.AdminToken) < minAdminToken:
		return errors.New("server: the admin token must be at least 16 bytes (or none, to disable the admin API)")
	case c.CredentialFiles.Clients != "" && c.InsecureNoAuth:
		return errors.New("server: Config.CredentialFiles.Clients and InsecureNoAuth are exclusive")
	}
	return nil
}

// NewRegistry returns a Prometheus registry with the Go runtime and
// process collectors, for the cell and the server to share.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Server is reservoir's HTTP server. New starts its sampler; Close stops
// it. Serve runs the listeners until its context ends.
type Server struct {
	cfg     Config
	log     *slog.Logger
	api     http.Handler // the checkout API
	adminH  http.Handler // the admin API, dashboard, metrics and health
	both    http.Handler // both, for one listener
	metrics *metrics
	// clients and admins are the credentials in force: swapped whole by
	// a reload, read once per call (a call sees one set).
	clients atomic.Pointer[Clients]
	admins  atomic.Pointer[adminSet]
	creds   *credentials // what a reload rereads, and its metrics
	// routeTable is every route, as routes registered it: for the test
	// that each admin route has a role, and Routes.
	routeTable []Route
	sampler    *sampler
	draining   atomic.Bool
	adminSlots chan struct{}       // one per admin read being served
	gates      map[string]*podGate // per pod: its checkout calls in flight
	// places is the checkout listener's cap (admission step 0) while
	// Serve runs with an admin listener of its own; nil otherwise.
	places    atomic.Pointer[placeListener]
	bodyBytes atomic.Int64 // checkout body bytes held now

	schemaCheck *schemaCheck // each database's migrations, cached for /readyz

	reconcileMu sync.Mutex
	reconciled  map[string]wire.Reconciliation // last report per pod

	closeOnce sync.Once
}

// New builds a server on cfg.Cell and starts its sampler.
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Controller == nil {
		c := cfg.Cell
		ctl, err := rollout.NewController(rollout.ControllerConfig{DB: c.Control, Flags: c.FlagStore(), Pods: c.Topology.PodNames(),
			Reconciler: c.Reconciler, Lag: c, Handoffs: c, Stores: c, InForce: c.Flags.InForce, Wrote: c.Flags.PollNow, Modes: c.Modes()})
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		cfg.Controller = ctl
	}
	s := &Server{cfg: cfg, log: telemetry.Logger(cfg.Logger), reconciled: map[string]wire.Reconciliation{},
		adminSlots: make(chan struct{}, cfg.AdminMaxInFlight), gates: map[string]*podGate{},
		schemaCheck: &schemaCheck{cell: cfg.Cell, log: telemetry.Logger(cfg.Logger)}}
	for _, p := range cfg.Cell.Pods() {
		s.gates[p.Name] = newPodGate(podSlots(p))
	}
	m, err := newMetrics(cfg.Registry, cfg.Cell)
	if err != nil {
		return nil, fmt.Errorf("server: register metrics: %w", err)
	}
	s.metrics = m
	if err := s.initCredentials(cfg); err != nil {
		return nil, err
	}
	if err := s.registerPlaceMetrics(cfg.Registry); err != nil {
		return nil, fmt.Errorf("server: register metrics: %w", err)
	}
	s.api, s.adminH, s.both = s.routes()
	s.sampler = startSampler(cfg.Registry, cfg.SampleInterval, cfg.SeriesWindow, s.log)
	return s, nil
}

// Handler returns every route, checkout API and admin, on one handler:
// for tests and for embedding behind a listener of one's own. Serve with
// an admin listener keeps them apart.
func (s *Server) Handler() http.Handler { return s.both }

// Close stops the sampler. It does not stop Serve (cancel its context)
// and does not close the cell.
func (s *Server) Close() {
	s.closeOnce.Do(s.sampler.stop)
}

// Serve answers the checkout API on api and the admin routes (admin API,
// dashboard, /metrics, /healthz, /readyz) on admin, until ctx ends. With
// admin nil, api serves both (development; a flood of checkout calls then
// shares the listener with the kill switch).
//
// When ctx ends it shuts down gracefully: it stops accepting, answers
// /readyz with 503, and waits up to ShutdownTimeout for requests in
// flight to finish (then closes what is left). It returns nil after a
// clean shutdown. The caller then closes the cell, which drains the
// facades' shadow work and flushes the comparer.
func (s *Server) Serve(ctx context.Context, api, admin net.Listener) error {
	type served struct {
		hs *http.Server
		ln net.Listener
	}
	servers := []served{{s.httpServer(s.api), api}}
	if admin == nil {
		servers[0].hs.Handler = s.both
	} else {
		servers = append(servers, served{s.httpServer(s.adminH), admin})
		if s.cfg.MaxConns > 0 {
			// The checkout listener's places (admission.go, step 0);
			// the admin listener has none.
			pl := newPlaceListener(api, s.cfg.MaxConns)
			servers[0].ln, servers[0].hs.ConnState = pl, pl.connState
			s.places.Store(pl)
			defer s.places.Store(nil)
		}
	}
	errc := make(chan error, len(servers))
	for _, sv := range servers {
		go func() { errc <- sv.hs.Serve(sv.ln) }()
	}
	var err error
	pending := len(servers)
	select {
	case err = <-errc:
		err = fmt.Errorf("server: %w", err)
		pending--
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.log.Info("server: shutting down: no new connections; waiting for requests in flight", "timeout", s.cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	for _, sv := range servers {
		if serr := sv.hs.Shutdown(sctx); serr != nil {
			_ = sv.hs.Close()
			if err == nil {
				err = fmt.Errorf("server: shutdown: requests still running after %s were cut: %w", s.cfg.ShutdownTimeout, serr)
			}
		}
	}
	for range pending {
		if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = fmt.Errorf("server: %w", serr)
		}
	}
	return err
}

// httpServer is an http.Server for h with the configured timeouts.
func (s *Server) httpServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}
