package server

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seed31b0e981/reservoir/internal/cell"
)

// healthz says the process is up and serving HTTP. It checks nothing
// else: a liveness probe that failed on a database outage would restart
// every replica at once and make the outage worse.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// ReadyView is the answer of /readyz.
type ReadyView struct {
	// Ready is true when the control database and every pod's MySQL and
	// Redis answered, and the server is not shutting down.
	Ready bool `json:"ready"`
	// Draining is true once shutdown began.
	Draining bool `json:"draining,omitempty"`
	// Stores is each pod's (and the control database's) reachability.
	Stores []cell.Health `json:"stores"`
	// FlagsLoaded is informational: a replica whose flags file is broken
	// answers Redis-safe and stays ready.
	FlagsLoaded bool `json:"flags_loaded"`
}

// readyz pings every store (1s budget). It does not look at the flag
// SDK's state: flagd's provider can stay in ERROR after one bad file while
// the source keeps answering from the last valid version.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	v := ReadyView{Ready: true, Draining: s.draining.Load(), Stores: s.cfg.Cell.Ping(ctx), FlagsLoaded: s.cfg.Cell.Flags.Loaded()}
	for _, h := range v.Stores {
		v.Ready = v.Ready && h.OK
	}
	v.Ready = v.Ready && !v.Draining
	status := http.StatusOK
	if !v.Ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, v)
}

func (s *Server) metricsHandler() http.HandlerFunc {
	h := promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{
		Registry:          s.cfg.Registry,
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})
	return h.ServeHTTP
}
