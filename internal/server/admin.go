package server

// The admin API's gate and its failures: the bearer token every admin
// call presents, the actor it records, and the answer when the server's
// own work fails under a call. Each concern of the admin API has its file:
// admin_views.go (what status shows), admin_rollout.go (status, history,
// the plan and advance), admin_killswitch.go, admin_stats.go (diffs, stats,
// series) and admin_params.go (query parameters).

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"time"
)

// admin puts h behind the bearer token (see authorize).
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if code, msg := s.authorize(r); code != "" {
			s.metrics.authFailures.WithLabelValues(code).Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="reservoir admin"`)
			writeProblem(w, r, problem{Status: http.StatusUnauthorized, Code: code, Message: msg})
			return
		}
		h(w, r)
	}
}

// authorize checks r's bearer token against the admin token: it returns
// "" when they match, else the code and message of the 401 answer. The
// token is compared as a SHA-256 digest in constant time, so neither its
// bytes nor its length leak through timing; it is never logged.
func (s *Server) authorize(r *http.Request) (code, msg string) {
	if s.tokenHash == nil {
		return "admin_disabled", "the admin API is disabled: start serve with an admin token ($RESERVOIR_ADMIN_TOKEN or --admin-token-file)"
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "unauthorized", "the admin API needs an Authorization: Bearer <token> header"
	}
	sum := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(sum[:], s.tokenHash[:]) != 1 {
		return "unauthorized", "wrong admin token"
	}
	return "", ""
}

// actor is who makes an admin change: ActorHeader when it is a short
// printable name, else "admin-api".
func actor(r *http.Request) string {
	a := strings.TrimSpace(r.Header.Get(ActorHeader))
	if a == "" || len(a) > 64 {
		return "admin-api"
	}
	for i := 0; i < len(a); i++ {
		if a[i] < 0x20 || a[i] > 0x7e {
			return "admin-api"
		}
	}
	return a
}

// internal answers a failure of the server's own work (a store or the
// control database failed under it). The error's text goes to the log
// only: a driver's error names users, hosts and addresses ("Access
// denied for user 'app'@'10.0.0.5'"), which no answer carries.
func (s *Server) internal(w http.ResponseWriter, r *http.Request, what string, err error) {
	s.log.Error("server: "+what+" failed", "request_id", RequestID(r.Context()), "err", err)
	if errors.Is(err, context.DeadlineExceeded) {
		writeProblem(w, r, problem{Status: http.StatusServiceUnavailable, Code: "unavailable", RetryAfter: time.Second,
			Message: what + " did not finish in time; retry, or see the server's log for the request id"})
		return
	}
	// The control database is where the flags, the audit and the
	// rollout's state live: when it is what failed, say so, and what it
	// means for the fleet.
	pctx, cancel := context.WithTimeout(r.Context(), time.Second)
	perr := s.cfg.Cell.Control.PingContext(pctx)
	cancel()
	if perr != nil {
		writeProblem(w, r, problem{Status: http.StatusServiceUnavailable, Code: "unavailable", RetryAfter: time.Second,
			Message: what + " failed: the control database does not answer (" + failureClass(perr) + "), so the flags cannot be changed (the kill switch included) " +
				"and nothing was; every replica keeps serving on the flags it has. Retry once it answers (GET /readyz lists it as degraded until then); " +
				"the server's log has the error under the request id"})
		return
	}
	writeProblem(w, r, problem{Status: http.StatusServiceUnavailable, Code: "unavailable", RetryAfter: time.Second,
		Message: what + " failed: a store it needs did not answer as expected (" + failureClass(err) + "); the server's log has the error under the request id"})
}
