package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/rollout"
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

// KillView is a kill switch as the admin API shows it.
type KillView struct {
	// State is "off", "redis" or "redis_only".
	State rollout.Kill `json:"state"`
	// Reason, Actor and Since say why, who and when (set while engaged).
	Reason string     `json:"reason,omitempty"`
	Actor  string     `json:"actor,omitempty"`
	Since  *time.Time `json:"since,omitempty"`
}

func killView(k rollout.KillSwitch) KillView {
	v := KillView{State: k.State, Reason: k.Reason, Actor: k.Actor}
	if v.State == "" {
		v.State = rollout.KillOff
	}
	if !k.Since.IsZero() {
		t := k.Since.UTC()
		v.Since = &t
	}
	return v
}

// DecisionView is what this replica's flag source answers for a scope,
// and the route it implies.
type DecisionView struct {
	// Mode and Kill are the flag values.
	Mode rollout.Mode `json:"mode"`
	Kill rollout.Kill `json:"kill"`
	// Authority is the store the flags say should decide ("none" when
	// the flag source failed). Which store does decide a shop is its
	// fence (docs/ownership.md): it follows the flags on the shop's next
	// call, unless the fence carries newer flags.
	Authority string `json:"authority"`
	// Effective is the mode applied after the kill switch.
	Effective rollout.Mode `json:"effective"`
	// Error is set when the flag source failed: this replica then serves
	// no reservation call of the scope (503 flags_unavailable), and Mode,
	// Kill and Effective mean nothing.
	Error string `json:"error,omitempty"`
}

func (s *Server) decide(ctx context.Context, pod string, shop int64) DecisionView {
	d, err := s.cfg.Cell.Flags.Decide(ctx, pod, shop)
	if err != nil {
		return DecisionView{Mode: d.Mode, Kill: d.Kill, Authority: "none", Error: err.Error()}
	}
	rt := d.Route()
	return DecisionView{Mode: d.Mode, Kill: d.Kill, Authority: string(rt.Authority), Effective: rt.Effective}
}

// PodView is one pod's flags and what this replica does with them.
type PodView struct {
	// Pod names the pod.
	Pod string `json:"pod"`
	// Mode is the pod's own mode in the flags file ("" follows the global
	// mode).
	Mode rollout.Mode `json:"mode"`
	// Ramp is the pod's percentage stage, if any.
	Ramp *rollout.Ramp `json:"ramp,omitempty"`
	// Kill is the kill switch set on the pod itself.
	Kill KillView `json:"kill"`
	// File is what the flags file resolves to for a shop of the pod without
	// an override.
	File DecisionView `json:"file"`
	// Effective is what this replica's flag source answers for such a
	// shop. It differs from File only while a change propagates (or when
	// the file is invalid and the last valid version stays in force).
	Effective DecisionView `json:"effective"`
	// Shops are the shops the topology routes to the pod explicitly.
	Shops []int64 `json:"shops"`
	// RelayLag is how far the pod's Redis is behind MySQL's decisions:
	// what the kill switch would drain into Redis if engaged now.
	RelayLag LagView `json:"relay_lag"`
}

// ShopView is a shop with its own flags.
type ShopView struct {
	// Shop is the shop; Pod the pod that serves it.
	Shop int64  `json:"shop"`
	Pod  string `json:"pod"`
	// Mode is the shop's own mode ("" follows its pod).
	Mode rollout.Mode `json:"mode,omitempty"`
	// Kill is the kill switch set on the shop itself.
	Kill KillView `json:"kill"`
	// Effective is what this replica's flag source answers for the shop.
	Effective DecisionView `json:"effective"`
}

// RolloutView is the answer of GET /admin/rollout/status.
type RolloutView struct {
	// FlagsFile is the flags file every replica watches.
	FlagsFile string `json:"flags_file"`
	// FlagsLoaded is this replica's flag source's own state (not the
	// OpenFeature SDK's): false while the file is missing, unreadable or
	// invalid since start; the replica then answers every reservation
	// call 503 flags_unavailable and /readyz 503.
	FlagsLoaded bool `json:"flags_loaded"`
	// FlagsError is set when the file cannot be read or parsed now.
	FlagsError string `json:"flags_error,omitempty"`
	// FlagsRejected is set while this replica's flag source refuses the
	// newest flags document it saw: why, with the line and column, and
	// since when (reservoir_rollout_flags_rejected).
	FlagsRejected *RejectedView `json:"flags_rejected,omitempty"`
	// GlobalMode and GlobalKill are the global scope.
	GlobalMode rollout.Mode `json:"global_mode"`
	// GlobalKill is the global kill switch.
	GlobalKill KillView `json:"global_kill"`
	// Pods are in topology order.
	Pods []PodView `json:"pods"`
	// Shops are the shops with their own mode or kill switch.
	Shops []ShopView `json:"shops"`
	// Plan is the controller's status (stage, next stage, gates with their
	// numbers); null without a plan file.
	Plan *rollout.Status `json:"plan"`
	// PlanMessage explains a null Plan or a failed status.
	PlanMessage string `json:"plan_message,omitempty"`
	// Replicas are the live replicas that report to the control database,
	// with the flags version each applied: a replica behind the others
	// has not obeyed the last change yet.
	Replicas []rollout.Replica `json:"replicas"`
	// At is when this answer was made.
	At time.Time `json:"at"`
}

func (s *Server) rolloutStatus(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := s.cfg.Cell
	v := RolloutView{FlagsFile: c.Topology.FlagsFile, FlagsLoaded: c.Flags.Loaded(), At: time.Now().UTC(), Pods: []PodView{}, Shops: []ShopView{}}
	v.FlagsRejected = rejectedView(c.Flags)
	flags, err := c.FlagStore().Read()
	if err != nil {
		v.FlagsError = err.Error()
		flags = rollout.NewFlags()
	}
	v.GlobalMode, v.GlobalKill = flags.Mode, killView(flags.Kill)
	for _, tp := range c.Topology.Pods {
		pf := flags.Pods[tp.Name]
		d := flags.Resolve(tp.Name, 0)
		rt := d.Route()
		v.Pods = append(v.Pods, PodView{
			Pod: tp.Name, Mode: pf.Mode, Ramp: pf.Ramp, Kill: killView(pf.Kill),
			File:      DecisionView{Mode: d.Mode, Kill: d.Kill, Authority: string(rt.Authority), Effective: rt.Effective},
			Effective: s.decide(ctx, tp.Name, 0),
			Shops:     append([]int64{}, tp.Shops...),
			RelayLag:  s.podLag(ctx, c.Pod(tp.Name)),
		})
	}
	shops := make([]int64, 0, len(flags.Shops))
	for id := range flags.Shops {
		shops = append(shops, id)
	}
	slices.Sort(shops)
	for _, id := range shops {
		sf := flags.Shops[id]
		sv := ShopView{Shop: id, Mode: sf.Mode, Kill: killView(sf.Kill)}
		if pod, err := c.PodOf(id); err == nil && pod != nil {
			sv.Pod = pod.Name
			sv.Effective = s.decide(ctx, pod.Name, id)
		}
		v.Shops = append(v.Shops, sv)
	}
	switch st, err := s.cfg.Controller.Status(ctx); {
	case errors.Is(err, rollout.ErrNoPlan):
		v.PlanMessage = "no rollout plan is configured (the topology's plan_file): stages and gates are not available"
	case err != nil:
		s.log.Error("server: rollout status failed", "request_id", RequestID(ctx), "err", err)
		v.PlanMessage = "rollout status failed (" + failureClass(err) + "); the server's log has the error"
	default:
		v.Plan = &st
	}
	if rs, err := rollout.Replicas(ctx, c.Control); err == nil {
		v.Replicas = rs
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) rolloutHistory(w http.ResponseWriter, r *http.Request) {
	limit, p := intParam(r, "limit", 20, 1, 500)
	if p != nil {
		writeProblem(w, r, *p)
		return
	}
	h, err := s.cfg.Controller.History(r.Context(), limit)
	if err != nil {
		s.internal(w, r, "rollout history", err)
		return
	}
	if h == nil {
		h = []rollout.AuditEntry{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": h})
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
	writeProblem(w, r, problem{Status: http.StatusServiceUnavailable, Code: "unavailable", RetryAfter: time.Second,
		Message: what + " failed: a store it needs did not answer as expected (" + failureClass(err) + "); the server's log has the error under the request id"})
}

// KillRequest is the body of POST and DELETE /admin/killswitch.
type KillRequest struct {
	// Scope is "global", "pod:<name>" or "shop:<id>". Required.
	Scope string `json:"scope"`
	// State is "redis" (default: Redis decides, MySQL keeps a shadow that
	// is compared) or "redis_only" (MySQL's reservation tables are not
	// touched). Engage only.
	State rollout.Kill `json:"state"`
	// Reason says why, for the on-call engineer who reads the flags file
	// or the audit. Required.
	Reason string `json:"reason"`
	// Resynced confirms that Redis holds what MySQL decided for a scope
	// that runs mysql_only, without the reconciler's check; without it
	// such a kill is refused (409) while the reconciler finds drift.
	// Engage only.
	Resynced bool `json:"resynced"`
}

// KillResponse is the answer of a kill switch change.
type KillResponse struct {
	// Scope is the scope changed, in its text form.
	Scope string `json:"scope"`
	// Kill is the switch now set on the scope in the flags file.
	Kill KillView `json:"kill"`
	// Actor made the change.
	Actor string `json:"actor"`
	// Audited is always true: every change goes through the rollout
	// controller and its audit. (Kept for clients of the earlier API, where
	// a server without a plan wrote the flags unaudited.)
	Audited bool `json:"audited"`
	// ObeyedAfterMs is how long after the file was written this replica's
	// flag source answered accordingly; null if not within KillWait.
	ObeyedAfterMs *float64 `json:"obeyed_after_ms"`
	// Effective is this replica's decision for the scope now.
	Effective DecisionView `json:"effective"`
	// Fleet says how the fleet obeyed: the live replicas (those that
	// report to the control database) and how many applied the change,
	// within how long ("obeyed by 3/3 replicas in 38 ms" in Summary).
	Fleet rollout.Obedience `json:"fleet"`
	// RelayLag is, for an engage, the relay lag of the scope's pods at the
	// moment of the switch ("pod-a 12 change(s), oldest 40ms"), as the
	// audit (or, without a controller, the server's log) records it: what
	// each shop's handoff drains into Redis before Redis decides (and what
	// a forced handoff would lose). Empty for a release.
	RelayLag string `json:"relay_lag,omitempty"`
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
func (s *Server) readKill(w http.ResponseWriter, r *http.Request) (KillRequest, rollout.Scope, *problem) {
	var req KillRequest
	q := r.URL.Query()
	for _, k := range []string{"scope", "reason"} {
		if len(q[k]) > 1 {
			return req, rollout.Scope{}, badInput(k, "%s: given %d times in the query; give it once", k, len(q[k]))
		}
	}
	body := r.ContentLength > 0 || r.ContentLength < 0 && r.Body != http.NoBody
	switch {
	case r.Method == http.MethodDelete && !body && q.Has("scope"):
		req.Scope, req.Reason = q.Get("scope"), q.Get("reason")
	case q.Has("scope") || q.Has("reason"):
		// Scope or reason in the query and a body too: which one would
		// the operator mean? Refuse rather than release another scope.
		return req, rollout.Scope{}, badInput("scope", "scope and reason go in the JSON body, or (DELETE only, without a body) in the query; not both")
	default:
		if p := s.decodeBody(w, r, &req); p != nil {
			return req, rollout.Scope{}, p
		}
	}
	if strings.TrimSpace(req.Scope) == "" {
		return req, rollout.Scope{}, badInput("scope", `scope: required: "global", "pod:<name>" or "shop:<id>"`)
	}
	scope, err := rollout.ParseScope(req.Scope)
	if err != nil {
		return req, rollout.Scope{}, badInput("scope", "scope: %v", err)
	}
	if scope.Kind == rollout.ScopePod && s.cfg.Cell.Pod(scope.Pod) == nil {
		return req, rollout.Scope{}, badInput("scope", "scope: no pod %q in the topology (pods: %s)", scope.Pod, strings.Join(s.cfg.Cell.Topology.PodNames(), ", "))
	}
	if strings.TrimSpace(req.Reason) == "" {
		return req, rollout.Scope{}, badInput("reason", "reason: required: say why, for whoever reads the flags file in an incident")
	}
	if p := checkReason(req.Reason); p != nil {
		return req, rollout.Scope{}, p
	}
	return req, scope, nil
}

// representative is the (pod, shop) whose decision shows whether this
// replica obeys a change of scope.
func (s *Server) representative(scope rollout.Scope) (string, int64) {
	switch scope.Kind {
	case rollout.ScopePod:
		return scope.Pod, 0
	case rollout.ScopeShop:
		if pod, err := s.cfg.Cell.PodOf(scope.Shop); err == nil && pod != nil {
			return pod.Name, scope.Shop
		}
	}
	return s.cfg.Cell.Topology.Pods[0].Name, scope.Shop
}

// waitObeyed polls this replica's flag source until it answers what the
// flags file now says for scope, up to KillWait, and returns how long
// that took after start (nil if it did not).
func (s *Server) waitObeyed(ctx context.Context, scope rollout.Scope, start time.Time) (*float64, DecisionView) {
	pod, shop := s.representative(scope)
	flags, err := s.cfg.Cell.FlagStore().Read()
	if err != nil {
		return nil, s.decide(ctx, pod, shop)
	}
	want := flags.Resolve(pod, shop)
	deadline := time.Now().Add(s.cfg.KillWait)
	for {
		d, err := s.cfg.Cell.Flags.Decide(ctx, pod, shop)
		if err == nil && d == want {
			ms := float64(time.Since(start).Microseconds()) / 1000
			s.metrics.killObeyed.Observe(ms / 1000)
			return &ms, s.decide(ctx, pod, shop)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, s.decide(ctx, pod, shop)
		}
		time.Sleep(time.Millisecond)
	}
}

func (s *Server) engageKill(w http.ResponseWriter, r *http.Request) {
	req, scope, p := s.readKill(w, r)
	if p != nil {
		writeProblem(w, r, *p)
		return
	}
	if req.State == "" {
		req.State = rollout.KillRedis
	}
	if req.State != rollout.KillRedis && req.State != rollout.KillRedisOnly {
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
	err := s.cfg.Controller.Kill(ctx, scope, req.State, rollout.KillOptions{Actor: who, Reason: req.Reason, Resynced: req.Resynced, Out: &out, Fleet: &fleet})
	lag := lagFromOutput(out.String())
	if s.killFailed(w, r, "engage the kill switch", err) {
		return
	}
	if lag == "" {
		lag = s.lagText(ctx, s.podsUnder(scope)) // a controller without a LagReader
	}
	s.log.Warn("server: kill switch engaged", "request_id", RequestID(ctx), "scope", scope.String(), "state", req.State,
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
	case errors.Is(err, rollout.ErrFlagsChanged):
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

func (s *Server) killAnswer(w http.ResponseWriter, r *http.Request, scope rollout.Scope, who string, start time.Time, lag string, fleet rollout.Obedience) {
	obeyed, eff := s.waitObeyed(r.Context(), scope, start)
	resp := KillResponse{Scope: scope.String(), Actor: who, Audited: true, ObeyedAfterMs: obeyed, Effective: eff, RelayLag: lag, Fleet: fleet}
	if f, err := s.cfg.Cell.FlagStore().Read(); err == nil {
		resp.Kill = killView(f.KillAt(scope))
	}
	writeJSON(w, http.StatusOK, resp)
}

// intParam reads an optional integer query parameter within [lo, hi].
func intParam(r *http.Request, name string, def, lo, hi int) (int, *problem) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, badInput(name, "%s: want an integer between %d and %d, got %q", name, lo, hi, v)
	}
	return n, nil
}

// podParam reads the optional pod query parameter ("" is every pod).
func (s *Server) podParam(r *http.Request, required bool) (string, *problem) {
	pod := r.URL.Query().Get("pod")
	if pod == "" {
		if required {
			return "", badInput("pod", "pod: required (pods: %s)", strings.Join(s.cfg.Cell.Topology.PodNames(), ", "))
		}
		return "", nil
	}
	if s.cfg.Cell.Pod(pod) == nil {
		return "", badInput("pod", "pod: no pod %q in the topology (pods: %s)", pod, strings.Join(s.cfg.Cell.Topology.PodNames(), ", "))
	}
	return pod, nil
}

// DiffsResponse is the answer of GET /admin/diffs.
type DiffsResponse struct {
	// Pod is the pod asked for ("" for every pod).
	Pod string `json:"pod"`
	// Diffs are the records, newest first.
	Diffs []compare.DiffRecord `json:"diffs"`
}

func (s *Server) diffs(w http.ResponseWriter, r *http.Request) {
	pod, p := s.podParam(r, false)
	if p == nil {
		var limit int
		if limit, p = intParam(r, "limit", 20, 1, 1000); p == nil {
			ds, err := s.cfg.Cell.Comparer.RecentDiffs(r.Context(), pod, limit)
			if err != nil {
				s.internal(w, r, "read diff records", err)
				return
			}
			if ds == nil {
				ds = []compare.DiffRecord{}
			}
			writeJSON(w, http.StatusOK, DiffsResponse{Pod: pod, Diffs: ds})
			return
		}
	}
	writeProblem(w, r, *p)
}

// StatsResponse is the answer of GET /admin/stats: the comparer's stats
// summed over every replica (each flushes every few seconds), plus the
// live (non-calibration) and calibration summaries.
type StatsResponse struct {
	compare.Totals
	// Live merges every non-calibration mode: what the gates judge.
	Live compare.Summary `json:"live"`
	// Calibration merges the calibration modes: the noise floor.
	Calibration compare.Summary `json:"calibration"`
}

// sinceParam reads since: an RFC 3339 time, or a duration meaning that long
// ago ("15m"). Default: 1h ago.
func sinceParam(r *http.Request, now time.Time) (time.Time, *problem) {
	v := r.URL.Query().Get("since")
	if v == "" {
		return now.Add(-time.Hour), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, badInput("since", `since: want an RFC 3339 time ("2025-03-04T05:06:07Z") or a positive duration ("15m"), got %q`, v)
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	pod, p := s.podParam(r, false)
	if p != nil {
		writeProblem(w, r, *p)
		return
	}
	since, p := sinceParam(r, time.Now())
	if p != nil {
		writeProblem(w, r, *p)
		return
	}
	t, err := s.cfg.Cell.Comparer.Totals(r.Context(), pod, since)
	if err != nil {
		s.internal(w, r, "read compare stats", err)
		return
	}
	writeJSON(w, http.StatusOK, StatsResponse{Totals: t, Live: t.Live(), Calibration: t.Calibration()})
}

func (s *Server) series(w http.ResponseWriter, r *http.Request) {
	pod, p := s.podParam(r, false)
	if p != nil {
		writeProblem(w, r, *p)
		return
	}
	points, p := intParam(r, "points", 60, 1, maxSamples)
	if p != nil {
		writeProblem(w, r, *p)
		return
	}
	pods := s.cfg.Cell.Topology.PodNames()
	if pod != "" {
		pods = []string{pod}
	}
	writeJSON(w, http.StatusOK, s.sampler.series(pods, points))
}
