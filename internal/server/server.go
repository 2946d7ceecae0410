// Package server is reservoir's HTTP layer: the JSON API checkout calls
// (reserve, claim, release, get, availability, adjust), the token-protected
// admin API (rollout status, kill switch, diffs, stats, reconcile), the
// diff dashboard page, /metrics, /healthz and /readyz.
//
// It owns HTTP concerns only: decoding and validating requests (an invalid
// request never reaches a store), mapping answers and errors to status
// codes, request ids, access logs, body limits, timeouts and graceful
// shutdown. It calls the facades of a cell.Cell for reservations and the
// rollout package for flags; it never builds SQL or Redis commands and
// never decides authority.
package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/rollout"
)

// Config configures a Server. New applies WithDefaults, then Validate.
type Config struct {
	// Cell is the opened topology the server answers for. Required. The
	// server never closes it: whoever opened it does, after Serve returns.
	Cell *cell.Cell
	// Controller moves the rollout (status with gates, audited kill
	// switch). Give it the cell as its LagReader (ControllerConfig.Lag)
	// so the audit records the relay lag at each switch. Optional:
	// without a plan file there is none; the kill switch then writes the
	// flags file directly (not audited; the cell's reconciler checks a
	// mysql_only scope, and the log records the relay lag) and status says
	// no plan is configured.
	Controller *rollout.Controller
	// Reconciler reports cross-store drift per pod for POST
	// /admin/reconcile. Optional: without one that endpoint answers 501.
	Reconciler Reconciler
	// AdminToken is the bearer token of the admin API, compared in
	// constant time and never logged. Empty disables the admin API (every
	// admin call answers 401 saying so).
	AdminToken string
	// Registry receives the server's metrics and is what /metrics serves.
	// Give it the registry the cell registered on, so one scrape has
	// everything. Default: a new registry with the Go and process
	// collectors (see NewRegistry).
	Registry *prometheus.Registry
	// Logger receives access logs and errors. Default: slog.Default().
	Logger *slog.Logger
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
	// MaxInFlight caps the API and admin calls served at once; beyond it a
	// call answers 503 "overloaded" with Retry-After at once instead of
	// queueing (load shedding: a flood costs a goroutine and a small
	// answer each, not a store connection). Health, metrics, the
	// dashboard and the kill switch are not counted: an operator can
	// engage it while the replica sheds checkout calls. Default: 1024.
	MaxInFlight int
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
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 1024
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
	case c.MaxInFlight < 1:
		return fmt.Errorf("server: Config.MaxInFlight must be >= 1, got %d", c.MaxInFlight)
	case c.AdminToken != "" && len(c.AdminToken) < 16:
		return errors.New("server: Config.AdminToken must be at least 16 bytes (or empty to disable the admin API)")
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
// it. Serve runs the listener until its context ends.
type Server struct {
	cfg       Config
	log       *slog.Logger
	handler   http.Handler
	tokenHash *[32]byte
	metrics   *metrics
	sampler   *sampler
	draining  atomic.Bool
	inflight  chan struct{} // one slot per API or admin call being served

	reconcileMu sync.Mutex
	reconciled  map[string]reconcileView // last report per pod

	closeOnce sync.Once
}

// New builds a server on cfg.Cell and starts its sampler.
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, reconciled: map[string]reconcileView{}, inflight: make(chan struct{}, cfg.MaxInFlight)}
	if cfg.AdminToken != "" {
		h := sha256.Sum256([]byte(cfg.AdminToken))
		s.tokenHash = &h
	}
	m, err := newMetrics(cfg.Registry, cfg.Cell)
	if err != nil {
		return nil, fmt.Errorf("server: register metrics: %w", err)
	}
	s.metrics = m
	s.handler = s.routes()
	s.sampler = startSampler(cfg.Registry, cfg.SampleInterval, cfg.SeriesWindow, s.log)
	return s, nil
}

// Handler returns the server's handler: every route behind the request id,
// access log and panic recovery.
func (s *Server) Handler() http.Handler { return s.handler }

// Close stops the sampler. It does not stop Serve (cancel its context)
// and does not close the cell.
func (s *Server) Close() {
	s.closeOnce.Do(s.sampler.stop)
}

// Serve answers on ln until ctx ends, then shuts down gracefully: it stops
// accepting, answers /readyz with 503, and waits up to ShutdownTimeout for
// requests in flight to finish (then closes what is left). It returns nil
// after a clean shutdown. The caller then closes the cell, which drains
// the facades' shadow work and flushes the comparer.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("server: %w", err)
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.log.Info("server: shutting down: no new connections; waiting for requests in flight", "timeout", s.cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	if err != nil {
		_ = hs.Close()
		err = fmt.Errorf("server: shutdown: requests still running after %s were cut: %w", s.cfg.ShutdownTimeout, err)
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = fmt.Errorf("server: %w", serr)
	}
	return err
}
