package server

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// incident runs h (the kill switch) outside load shedding and the request
// timeout: the switch must work while the replica sheds checkout calls,
// and its check over a mysql_only scope reconciles whole pods. Its work is
// bounded by ReconcileTimeout, plus KillWait to report how fast this
// replica obeyed.
func (s *Server) incident(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		d := s.cfg.ReconcileTimeout + s.cfg.KillWait
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d + 5*time.Second))
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		h(w, r.WithContext(ctx))
	}
}

// maxReason caps a kill switch reason, in characters.
const maxReason = 500

// checkReason accepts a reason of at most maxReason printable characters:
// it is written into the flags file and the audit, shown on the
// dashboard and in terminals, so no control character (NUL, a newline,
// an escape sequence) may ride in it.
func checkReason(reason string) *problem {
	if !utf8.ValidString(reason) {
		return badInput("reason", "reason: not valid UTF-8")
	}
	if n := utf8.RuneCountInString(reason); n > maxReason {
		return badInput("reason", "reason: at most %d characters, got %d", maxReason, n)
	}
	for i, c := range reason {
		if !unicode.IsPrint(c) {
			return badInput("reason", "reason: character %U at byte %d is not printable: give one line of text", c, i)
		}
	}
	return nil
}

// readKill reads a kill request from the JSON body, or (DELETE only, for
// curl) from the query parameters scope and reason when there is no body.
func (s *Server) readKill(w http.ResponseWriter, r *http.Request) (wire.KillRequest, flagdoc.Scope, *problem) {
	var req wire.KillRequest
	q := r.URL.Query()
	for _, k := range []string{"scope", "reason"} {
		if len(q[k]) > 1 {
			return req, flagdoc.Scope{}, badInput(k, "%s: given %d times in the query; give it once", k, len(q[k]))
		}
	}
	body := r.ContentLength > 0 || r.ContentLength < 0 && r.Body != http.NoBody
	switch {
	case r.Method == http.MethodDelete && !body && q.Has("scope"):
		req.Scope, req.Reason = q.Get("scope"), q.Get("reason")
	case q.Has("scope") || q.Has("reason"):
		// Scope or reason in the query and a body too: which one would
		// the operator mean? Refuse rather than release another scope.
		return req, flagdoc.Scope{}, badInput("scope", "scope and reason go in the JSON body, or (DELETE only, without a body) in the query; not both")
	default:
		if p := s.decodeBody(w, r, &req); p != nil {
			return req, flagdoc.Scope{}, p
		}
	}
	if strings.TrimSpace(req.Scope) == "" {
		return req, flagdoc.Scope{}, badInput("scope", `scope: required: "global", "pod:<name>" or "shop:<id>"`)
	}
	scope, err := flagdoc.ParseScope(req.Scope)
	if err != nil {
		return req, flagdoc.Scope{}, badInput("scope", "scope: %v", err)
	}
	if scope.Kind == flagdoc.ScopePod && s.cfg.Cell.Pod(scope.Pod) == nil {
		return req, flagdoc.Scope{}, badInput("scope", "scope: no pod %q in the topology (pods: %s)", scope.Pod, strings.Join(s.cfg.Cell.Topology.PodNames(), ", "))
	}
	if scope.Kind == flagdoc.ScopeShop && !req.Force {
		// A shop no pod lists is most likely a typo, and a switch on it
		// protects nothing. A release of a shop the flags name (one
		// forced before) goes through.
		if err := s.cfg.Cell.Topology.UnlistedShop(scope.Shop); err != nil && !(r.Method == http.MethodDelete && s.flagsName(scope.Shop)) {
			return req, flagdoc.Scope{}, &problem{Status: http.StatusBadRequest, Code: "unknown_shop", Field: "scope",
				Message: "scope: " + err.Error() + `; send "force": true if the shop is about to be added, or is served by the default rule`}
		}
	}
	if strings.TrimSpace(req.Reason) == "" {
		return req, flagdoc.Scope{}, badInput("reason", "reason: required: say why, for whoever reads the flags in an incident")
	}
	if p := checkReason(req.Reason); p != nil {
		return req, flagdoc.Scope{}, p
	}
	return req, scope, nil
}

// flagsName reports whether the flags hold a setting of shop (a mode or a
// kill switch of its own).
func (s *Server) flagsName(shop int64) bool {
	f, err := s.cfg.Cell.FlagStore().Read()
	if err != nil {
		return false
	}
	_, ok := f.Shops[shop]
	return ok
}

// representative is the (pod, shop) whose decision shows whether this
// replica obeys a change of scope.
func (s *Server) representative(scope flagdoc.Scope) (string, int64) {
	switch scope.Kind {
	case flagdoc.ScopePod:
		return scope.Pod, 0
	case flagdoc.ScopeShop:
		if pod, err := s.cfg.Cell.PodOf(scope.Shop); err == nil && pod != nil {
			return pod.Name, scope.Shop
		}
	}
	return s.cfg.Cell.Topology.Pods[0].Name, scope.Shop
}

// waitObeyed polls this replica's flag source, up to KillWait, until it
// answers for scope with the flags version the change wrote (the fleet's
// Version), and returns how long after the write that was (nil if not
// within KillWait), its decision, and the flags it answers from. The
// flags come from the source itself, not the store: under a flood of the
// checkout listener every round trip to the control database waits
// behind it, and the fleet's wait has already read the heartbeats.
// Without a version from the fleet (a controller that does not wait for
// it) the flags store says what to wait for, and the time counts from
// start.
func (s *Server) waitObeyed(ctx context.Context, scope flagdoc.Scope, start time.Time, fleet rollout.Obedience) (*float64, wire.Decision, *flagdoc.Flags) {
	pod, shop := s.representative(scope)
	var (
		obeys func(authority.Decision) bool
		flags *flagdoc.Flags
	)
	if fleet.Version > 0 {
		obeys = func(d authority.Decision) bool { return d.Version >= fleet.Version }
		if !fleet.Since.IsZero() {
			start = fleet.Since
		}
	} else if f, err := s.cfg.Cell.FlagStore().Read(); err == nil {
		flags = f
		want := f.Resolve(pod, shop)
		obeys = func(d authority.Decision) bool { return d == want }
	} else {
		return nil, s.decide(ctx, pod, shop), nil
	}
	deadline := time.Now().Add(s.cfg.KillWait)
	for {
		d, err := s.cfg.Cell.Flags.Decide(ctx, pod, shop)
		if err == nil && obeys(d) {
			ms := float64(time.Since(start).Microseconds()) / 1000
			s.metrics.killObeyed.Observe(ms / 1000)
			if flags == nil {
				flags = s.flagsInForce(d.Version)
			}
			return &ms, s.decide(ctx, pod, shop), flags
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, s.decide(ctx, pod, shop), flags
		}
		time.Sleep(time.Millisecond)
	}
}

// flagsInForce returns the flags this replica's source answers from, when
// they are at version or later; else it reads the flags store.
func (s *Server) flagsInForce(version int64) *flagdoc.Flags {
	if doc, ok := s.cfg.Cell.Flags.InForce(); ok {
		if f, err := flagdoc.ParseFlags(doc); err == nil && f.Version >= version {
			return f
		}
	}
	if f, err := s.cfg.Cell.FlagStore().Read(); err == nil {
		return f
	}
	return nil
}

func (s *Server) engageKill(w http.ResponseWriter, r *http.Request) {
	req, scope, p := s.readKill(w, r)
	if p != nil {
		writeProblem(w, r, *p)
		return
	}
	state := authority.Kill(req.State)
	if state == "" {
		state = authority.KillRedis
	}
	if state != authority.KillRedis && state != authority.KillRedisOnly {
		writeProblem(w, r, *badInput("state", `state: want "redis" (MySQL keeps a shadow, compared) or "redis_only" (MySQL untouched), got %q`, req.State))
		return
	}
	ctx := r.Context()
	who := actor(r)
	// A kill over a scope running mysql_only is checked first, by a
	// reconciler: a handoff's drain brings Redis up to date only if Redis
	// still holds what the relay delivered before (docs/ownership.md,
	// section 4). The relay lag is taken at the switch: the answer says
	// it, and the audit (or, without a controller, the log) records it.
	start := time.Now()
	// The controller runs the check over a mysql_only scope (its
	// Reconciler), reports the lag to Out and in the audit, and waits
	// for the fleet to obey.
	var (
		out   bytes.Buffer
		fleet rollout.Obedience
	)
	err := s.cfg.Controller.Kill(ctx, scope, state, rollout.KillOptions{Actor: who, Reason: req.Reason, Resynced: req.Resynced, Out: &out, Fleet: &fleet})
	lag := lagFromOutput(out.String())
	if s.killFailed(w, r, "engage the kill switch", err) {
		return
	}
	if lag == "" {
		lag = s.lagText(ctx, s.podsUnder(scope)) // a controller without a LagReader
	}
	s.log.Warn("server: kill switch engaged", "request_id", RequestID(ctx), "scope", scope.String(), "state", state,
		"actor", who, "reason", req.Reason, "relay_lag", lag, "fleet", fleet.Summary)
	s.killAnswer(w, r, scope, who, start, lag, fleet)
}

// killFailed answers a kill switch change (what) that the controller
// refused or failed, and reports whether it did: a refusal over a
// mysql_only scope (409 refused), an unknown pod (400), a lost race with
// another operator (409 flags_changed), or a failure (503).
func (s *Server) killFailed(w http.ResponseWriter, r *http.Request, what string, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, rollout.ErrKillRefused):
		writeProblem(w, r, problem{Status: http.StatusConflict, Code: "refused", Field: "resynced",
			Message: err.Error() + ` (send "resynced": true only once Redis holds what MySQL decided)`})
	case errors.Is(err, rollout.ErrUnknownScope):
		writeProblem(w, r, *badInput("scope", "scope: %v", err))
	case errors.Is(err, flagdoc.ErrFlagsChanged):
		writeProblem(w, r, problem{Status: http.StatusConflict, Code: "flags_changed", RetryAfter: time.Second,
			Message: "the flags changed while this change was decided (another operator?); nothing was written: look at the status and try again"})
	default:
		s.internal(w, r, what, err)
	}
	return true
}

func (s *Server) releaseKill(w http.ResponseWriter, r *http.Request) {
	req, scope, p := s.readKill(w, r)
	if p != nil {
		writeProblem(w, r, *p)
		return
	}
	if req.State != "" || req.Resynced {
		writeProblem(w, r, *badInput("state", "state and resynced are for engaging; releasing takes scope and reason"))
		return
	}
	who := actor(r)
	start := time.Now()
	var fleet rollout.Obedience
	err := s.cfg.Controller.Release(r.Context(), scope, rollout.KillOptions{Actor: who, Reason: req.Reason, Fleet: &fleet})
	if s.killFailed(w, r, "release the kill switch", err) {
		return
	}
	s.log.Warn("server: kill switch released", "request_id", RequestID(r.Context()), "scope", scope.String(),
		"actor", who, "reason", req.Reason, "fleet", fleet.Summary)
	s.killAnswer(w, r, scope, who, start, "", fleet)
}

func (s *Server) killAnswer(w http.ResponseWriter, r *http.Request, scope flagdoc.Scope, who string, start time.Time, lag string, fleet rollout.Obedience) {
	obeyed, eff, flags := s.waitObeyed(r.Context(), scope, start, fleet)
	resp := wire.KillResponse{Scope: scope.String(), Actor: who, Audited: true, ObeyedAfterMs: obeyed, Effective: eff, RelayLag: lag, Fleet: wire.ObedienceOf(fleet)}
	if flags != nil {
		resp.Kill = wire.KillOf(flags.KillAt(scope))
	}
	writeJSON(w, http.StatusOK, resp)
}
