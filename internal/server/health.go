package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

// healthz says the process is up and serving HTTP. It checks nothing
// else: a liveness probe that failed on a database outage would restart
// every replica at once and make the outage worse.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// ReadyView is the answer of /readyz.
type ReadyView struct {
	// Ready is true when this replica has loaded its flags, the control
	// database and every pod's MySQL and Redis answered, and the server is
	// not shutting down.
	Ready bool `json:"ready"`
	// NotReady says why Ready is false, one reason per entry, in words an
	// operator can act on (none when ready).
	NotReady []string `json:"not_ready,omitempty"`
	// Draining is true once shutdown began.
	Draining bool `json:"draining,omitempty"`
	// Stores is each pod's (and the control database's) reachability.
	Stores []StoreHealth `json:"stores"`
	// FlagsLoaded is false while this replica has no valid version of
	// its flags file in force (docs/ownership.md, section 7): it does not
	// know which store decides a shop, so it answers every reservation
	// call 503 flags_unavailable and is not ready. Once loaded, a file
	// that turns bad leaves the last valid version in force.
	FlagsLoaded bool `json:"flags_loaded"`
}

// The states of a store in /readyz: "ok", or why its ping failed, as a
// class that names no user, host or address.
const (
	// storeOK: the store answered its ping.
	storeOK = "ok"
	// storeUnreachable: no connection (refused, reset, unresolvable name).
	storeUnreachable = "unreachable"
	// storeTimeout: no answer within /readyz's budget (1s).
	storeTimeout = "timeout"
	// storeAuthFailed: the store refused the configured credentials.
	storeAuthFailed = "auth_failed"
	// storeError: any other failure.
	storeError = "error"
)

// StoreHealth is the reachability of one pod's stores (or of the control
// database, as pod "control"), as /readyz shows it.
type StoreHealth struct {
	// Pod names the pod ("control" for the control database).
	Pod string `json:"pod"`
	// MySQL is "ok" or why the ping failed: "unreachable", "timeout",
	// "auth_failed" or "error".
	MySQL string `json:"mysql"`
	// Redis is the same for the pod's Redis ("" for the control
	// database).
	Redis string `json:"redis,omitempty"`
	// OK is true when every store answered.
	OK bool `json:"ok"`
	// MySQLError and RedisError are the drivers' own errors. They can
	// name database users, hosts and addresses, so only a caller with the
	// admin token sees them; the server logs them for everyone else.
	MySQLError string `json:"mysql_error,omitempty"`
	RedisError string `json:"redis_error,omitempty"`
}

// readyz pings every store (1s budget) and checks that this replica's
// flags are loaded: a replica that cannot say which store decides a shop
// serves no reservation call, so it must not take traffic. It asks the
// flag source itself (FlagSource.Loaded), not the flag SDK's state:
// flagd's provider can stay in ERROR after one bad file while the source
// keeps answering from the last valid version.
//
// It needs no token (probes have none), so a failed store is shown as its
// pod, its kind and a class of failure only; the driver's error is logged,
// and shown to a caller that presents the admin token.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	detail := false
	if code, _ := s.authorize(r); code == "" {
		detail = true
	} else if r.Header.Get("Authorization") != "" {
		// A wrong token is worth counting wherever it is tried.
		s.metrics.authFailures.WithLabelValues(code).Inc()
	}
	v := ReadyView{Draining: s.draining.Load(), Stores: s.pingStores(ctx, r, detail), FlagsLoaded: s.cfg.Cell.Flags.Loaded()}
	if !v.FlagsLoaded {
		v.NotReady = append(v.NotReady, "flags_not_loaded: this replica has no valid flags file in force (missing, unreadable or invalid since it started); "+
			"it answers every reservation call 503 flags_unavailable until a valid file is in place (it watches the file)")
	}
	for _, h := range v.Stores {
		if h.OK {
			continue
		}
		why := "store_failed: " + h.Pod + " mysql " + h.MySQL
		if h.Redis != "" {
			why += ", redis " + h.Redis
		}
		v.NotReady = append(v.NotReady, why)
	}
	if v.Draining {
		v.NotReady = append(v.NotReady, "draining: the server is shutting down")
	}
	v.Ready = len(v.NotReady) == 0
	status := http.StatusOK
	if !v.Ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, v)
}

// pingStores checks that the control database and every pod's MySQL and
// Redis answer (cell.Ping, within ctx), and logs each failure with the
// driver's error (which /readyz shows only when detail is set). The class
// of a failure comes from the error's type (a *mysql.MySQLError's number,
// a net.Error), not from matching words in a message.
func (s *Server) pingStores(ctx context.Context, r *http.Request, detail bool) []StoreHealth {
	hs := s.cfg.Cell.Ping(ctx)
	out := make([]StoreHealth, len(hs))
	for i, h := range hs {
		out[i] = StoreHealth{Pod: h.Pod, MySQL: s.storeState(r, h.Pod, "mysql", h.MySQLErr), OK: h.OK}
		if i > 0 { // index 0 is the control database: no Redis
			out[i].Redis = s.storeState(r, h.Pod, "redis", h.RedisErr)
		}
		if detail && h.MySQLErr != nil {
			out[i].MySQLError = h.MySQLErr.Error()
		}
		if detail && h.RedisErr != nil {
			out[i].RedisError = h.RedisErr.Error()
		}
	}
	return out
}

// storeState classifies a ping's error (nil is "ok") and logs a failure
// in full. The drivers' errors carry users and hosts but never a
// password: go-sql-driver/mysql and go-redis do not put the DSN's or the
// client's password in their errors.
func (s *Server) storeState(r *http.Request, pod, store string, err error) string {
	if err == nil {
		return storeOK
	}
	class := failureClass(err)
	s.log.Warn("server: readiness: store failed its ping", "request_id", RequestID(r.Context()),
		"pod", pod, "store", store, "reason", class, "err", err)
	return class
}

// failureClass says why a store's ping failed, as one of the store*
// constants, from the error's type.
func failureClass(err error) string {
	var (
		my  *mysql.MySQLError
		rd  redis.Error
		ne  net.Error
		op  *net.OpError
		dns *net.DNSError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return storeTimeout
	case errors.As(err, &my):
		switch my.Number {
		case 1044, 1045, 1130, 1698: // database access denied, access denied for user, host not allowed, no password
			return storeAuthFailed
		}
		return storeError
	case errors.As(err, &rd):
		for _, prefix := range []string{"WRONGPASS", "NOAUTH", "NOPERM"} {
			if redis.HasErrorPrefix(err, prefix) {
				return storeAuthFailed
			}
		}
		return storeError
	case errors.As(err, &dns), errors.As(err, &op):
		return storeUnreachable
	}
	return storeError
}

func (s *Server) metricsHandler() http.HandlerFunc {
	h := promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{
		Registry:          s.cfg.Registry,
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})
	return h.ServeHTTP
}
