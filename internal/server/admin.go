package server

// The admin API's gate and its failures: the bearer token every admin
// call presents, the role each route needs, the actor it records, and the
// answer when the server's own work fails under a call. Each concern of the admin API has its file:
// admin_views.go (what status shows), admin_rollout.go (status, history,
// the plan and advance), admin_killswitch.go, admin_stats.go (diffs, stats,
// series) and admin_params.go (query parameters).

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/internal/wire"
)

// adminAccess is the least role each route of the admin listener needs,
// or rolePublic for the ones any caller may reach (probes, the scrape, the
// dashboard's static page, whose data comes from the admin API). It is
// the one place that says who may do what: routes registers every admin
// listener route through it, and a route missing here stops the server
// from starting (and fails TestEveryAdminRouteHasARole). docs/api.md
// lists the same table.
var adminAccess = map[string]string{
	// What the dashboard and a watcher read.
	"GET /admin/rollout/status":  RoleViewer,
	"GET /admin/rollout/history": RoleViewer,
	"GET /admin/diffs":           RoleViewer,
	"GET /admin/stats":           RoleViewer,
	"GET /admin/series":          RoleViewer,
	"GET /admin/reconcile":       RoleViewer,
	// What an incident needs: stop the migration where it hurts, and
	// see how far the stores drifted. A reconcile report changes nothing
	// but compares whole pods, which a viewer should not set off.
	"POST /admin/killswitch":   RoleOperator,
	"DELETE /admin/killswitch": RoleOperator,
	"POST /admin/reconcile":    RoleOperator,
	// Moving the migration forward, overrides included (a dry run is
	// the first half of an advance, and answers with the same check).
	"POST /admin/rollout/advance": RoleAdmin,
	// No token: probes and Prometheus have none; /readyz shows the
	// drivers' errors only to a caller with an admin identity.
	"GET /metrics":          rolePublic,
	"GET /healthz":          rolePublic,
	"GET /readyz":           rolePublic,
	"GET /dashboard":        rolePublic,
	"GET /dashboard/{file}": rolePublic,
	"GET /{$}":              rolePublic,
	// The API's contract: nothing the repository does not hold.
	"GET /openapi.yaml": rolePublic,
}

// rolePublic marks an adminAccess route that needs no token.
const rolePublic = "public"

// AdminRole returns the least role the admin listener's route pattern
// ("POST /admin/killswitch", as registered) needs: RoleViewer,
// RoleOperator or RoleAdmin, or "" when it needs no token. ok is false
// when pattern is no admin listener route. The documentation checks read
// it.
func AdminRole(pattern string) (role string, ok bool) {
	role, ok = adminAccess[pattern]
	if role == rolePublic {
		role = ""
	}
	return role, ok
}

// operatorKey is the context key of the identity that authenticated an
// admin call.
type operatorKey struct{}

// admin puts h, the handler of pattern, behind the bearer token and the
// role adminAccess says pattern needs (see authorize).
func (s *Server) admin(pattern string, h http.HandlerFunc) http.HandlerFunc {
	need, ok := adminAccess[pattern]
	if !ok || need == rolePublic {
		// A programming error, caught by every test that starts a server.
		panic("server: admin route " + pattern + " has no role in adminAccess")
	}
	return func(w http.ResponseWriter, r *http.Request) {
		op, code, msg := s.authorize(r)
		if code != "" {
			s.metrics.authFailures.WithLabelValues(code).Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="reservoir admin"`)
			writeProblem(w, r, problem{Status: http.StatusUnauthorized, Code: code, Message: msg})
			return
		}
		if !op.may(need) {
			s.metrics.authFailures.WithLabelValues("forbidden").Inc()
			writeProblem(w, r, problem{Status: http.StatusForbidden, Code: "forbidden",
				Message: fmt.Sprintf("%s needs role %s; operator %q holds role %s", pattern, need, op.Name, op.Role),
				Extra:   wire.Problem{RoleNeeded: need, RoleHeld: op.Role}})
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), operatorKey{}, op)))
	}
}

// authorize finds the admin identity whose token r bears: an operator of
// the operators file, or the shared admin token (LegacyAdminName). It
// returns it, or the code and message of the 401 answer. The presented
// token is hashed and compared with every identity's digest in constant
// time, whatever matches, so neither a token's bytes, its length, nor
// which identity matched leak through timing; it is never logged.
func (s *Server) authorize(r *http.Request) (op *Operator, code, msg string) {
	set := s.admins.Load()
	if set == nil || len(set.list) == 0 {
		return nil, "admin_disabled", "the admin API is disabled: start serve with an operators file (--operators or $RESERVOIR_OPERATORS) or an admin token ($RESERVOIR_ADMIN_TOKEN or --admin-token-file)"
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, "unauthorized", "the admin API needs an Authorization: Bearer <token> header"
	}
	sum := sha256.Sum256([]byte(token))
	for _, o := range set.list {
		if subtle.ConstantTimeCompare(sum[:], o.tokenHash[:]) == 1 {
			op = o
		}
	}
	if op == nil {
		return nil, "unauthorized", "wrong admin token"
	}
	return op, "", ""
}

// actor is who makes an admin change, for the audit. An operator's
// verified name wins over ActorHeader, which it cannot use to pass for
// someone else. The shared admin token has no person behind it: its calls
// name their actor with ActorHeader when it is a short printable name,
// else "admin-api", as before operators existed.
func actor(r *http.Request) string {
	if op, _ := r.Context().Value(operatorKey{}).(*Operator); op != nil && !op.legacy {
		return op.Name
	}
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
