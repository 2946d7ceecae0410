package server

// The plan as the dashboard shows it: every stage with its gates, which
// one is in force, and the advance control's endpoint (a dry run that
// shows the flags change, then a confirmation that applies it through the
// controller).

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// StageView is a plan stage as the admin API shows it (snake_case, unlike
// rollout.Stage, whose Go field names status's "plan.next" carries).
type StageView struct {
	// Index is the stage's place in the plan, from 0.
	Index int `json:"index"`
	// Name, Mode, Pods and Percent are the plan's (Percent 0: every shop).
	Name    string         `json:"name"`
	Mode    authority.Mode `json:"mode"`
	Pods    []string       `json:"pods"`
	Percent int            `json:"percent,omitempty"`
	// State is "done", "current" (in force), "next" (what advance
	// applies) or "later".
	State string `json:"state"`
	// Gates are the stage's exit gates.
	Gates GatesView `json:"gates"`
}

// GatesView is a stage's exit gates.
type GatesView struct {
	MinObservations    int64              `json:"min_observations"`
	MinDurationNS      int64              `json:"min_duration_ns"`
	MaxRates           map[string]float64 `json:"max_rates"`
	MaxShadowErrorRate float64            `json:"max_shadow_error_rate"`
	MaxLatencyRatio    float64            `json:"max_latency_ratio,omitempty"`
}

func stageView(i int, st rollout.Stage, current int) StageView {
	v := StageView{Index: i, Name: st.Name, Mode: st.Mode, Pods: slices.Clone(st.Pods), Percent: st.Percent,
		Gates: GatesView{MinObservations: st.Gates.MinObservations, MinDurationNS: int64(st.Gates.MinDuration.Duration),
			MaxRates: map[string]float64{}, MaxShadowErrorRate: st.Gates.MaxShadowErrorRate, MaxLatencyRatio: st.Gates.MaxLatencyRatio}}
	for c, r := range st.Gates.MaxRates {
		v.Gates.MaxRates[string(c)] = r
	}
	switch {
	case i < current:
		v.State = "done"
	case i == current:
		v.State = "current"
	case i == current+1:
		v.State = "next"
	default:
		v.State = "later"
	}
	return v
}

// planStages lists the plan's stages, current marking the one in force
// (-1: none yet); nil without a plan.
func (s *Server) planStages(current int) []StageView {
	p := s.cfg.Controller.Plan()
	if p == nil {
		return nil
	}
	out := make([]StageView, 0, len(p.Stages))
	for i, st := range p.Stages {
		out = append(out, stageView(i, st, current))
	}
	return out
}

// AdvanceRequest is the body of POST /admin/rollout/advance.
type AdvanceRequest struct {
	// DryRun shows the change and what it needs, and changes nothing.
	DryRun bool `json:"dry_run"`
	// FromStage and FromVersion are the stage and flags version the dry
	// run showed (from_stage, from_version of its answer). Required to
	// apply: a confirmation applies the stage it was shown or nothing.
	FromStage   *int   `json:"from_stage"`
	FromVersion *int64 `json:"from_version"`
	// Override advances although gates fail or a kill switch covers the
	// stage's pods; it needs a Reason (audited as an override).
	Override bool `json:"override"`
	// Reason is recorded in the audit; required with Override.
	Reason string `json:"reason"`
	// ConfirmMySQLOnly is required to enter a mysql_only stage.
	ConfirmMySQLOnly bool `json:"confirm_mysql_only"`
	// Resynced confirms that Redis holds what MySQL decided, for a stage
	// that hands a pod running mysql_only back to Redis, without the
	// controller's relay and reconcile checks.
	Resynced bool `json:"resynced"`
}

// AdvanceResponse is the answer of POST /admin/rollout/advance.
type AdvanceResponse struct {
	// DryRun is true when nothing was changed.
	DryRun bool `json:"dry_run"`
	// FromStage is the stage in force before (-1: none), FromVersion the
	// flags version then: what a confirmation sends back.
	FromStage   int   `json:"from_stage"`
	FromVersion int64 `json:"from_version"`
	// Stage is the stage applied, or that the advance would apply.
	Stage StageView `json:"stage"`
	// Diff is the change to the flags document, in unified form (dry
	// run only).
	Diff string `json:"diff,omitempty"`
	// Gates are the verdicts of the stage in force's exit gates.
	Gates []rollout.GateResult `json:"gates"`
	// Needs lists what applying it takes beyond a confirmation (dry run
	// only): "override" when a gate fails or a kill switch covers the
	// stage's pods (Blocked says which), "confirm_mysql_only" for a
	// mysql_only stage. Empty: a confirmation applies it.
	Needs []string `json:"needs"`
	// Blocked says, one line each, why an override is needed.
	Blocked []string `json:"blocked"`
	// Actor made (or would make) the change.
	Actor string `json:"actor"`
	// Fleet says how the live replicas obeyed (applied only).
	Fleet *rollout.Obedience `json:"fleet,omitempty"`
}

func (s *Server) advance(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var req AdvanceRequest
	if p := s.decodeBody(w, r, &req); p != nil {
		writeProblem(w, r, *p)
		return
	}
	if req.Reason != "" {
		if p := checkReason(req.Reason); p != nil {
			writeProblem(w, r, *p)
			return
		}
	}
	if req.Override && strings.TrimSpace(req.Reason) == "" {
		writeProblem(w, r, *badInput("reason", "reason: required with override: say why the gates may be overridden, for the audit"))
		return
	}
	if !req.DryRun && (req.FromStage == nil || req.FromVersion == nil) {
		writeProblem(w, r, *badInput("from_stage", "from_stage and from_version: required to apply: send those of the dry run you confirm"))
		return
	}
	st, err := s.cfg.Controller.Status(ctx)
	switch {
	case errors.Is(err, rollout.ErrNoPlan):
		writeProblem(w, r, problem{Status: http.StatusNotImplemented, Code: "no_plan",
			Message: "no rollout plan is configured (the topology's plan_file): there is no stage to advance to"})
		return
	case err != nil:
		s.internal(w, r, "rollout status", err)
		return
	case st.Next == nil:
		writeProblem(w, r, problem{Status: http.StatusConflict, Code: "plan_complete",
			Message: fmt.Sprintf("the plan is complete: stage %q is the last", st.StageName)})
		return
	case !req.DryRun && *req.FromStage != st.Stage:
		writeProblem(w, r, problem{Status: http.StatusConflict, Code: "stage_changed",
			Message: fmt.Sprintf("the rollout moved on since the dry run (stage %d then, %d now): nothing was written; look at the plan again", *req.FromStage, st.Stage)})
		return
	}
	who := actor(r)
	resp := AdvanceResponse{DryRun: req.DryRun, FromStage: st.Stage, FromVersion: st.FlagsVersion, Actor: who,
		Stage: stageView(st.Stage+1, *st.Next, st.Stage), Gates: st.Gates, Needs: []string{}, Blocked: []string{}}
	if resp.Gates == nil {
		resp.Gates = []rollout.GateResult{}
	}
	for _, g := range st.Gates {
		if !g.Pass {
			resp.Blocked = append(resp.Blocked, g.Gate+": "+g.Why)
		}
	}
	for _, p := range st.Pods {
		if slices.Contains(st.Next.Pods, p.Pod) && p.Effective.Kill != authority.KillOff {
			resp.Blocked = append(resp.Blocked, "kill switch "+string(p.Effective.Kill)+" engaged on "+p.Pod)
		}
	}
	if st.FlagsInvalid != "" {
		resp.Blocked = append(resp.Blocked, "flags document invalid: "+st.FlagsInvalid)
	}
	if len(resp.Blocked) > 0 {
		resp.Needs = append(resp.Needs, "override")
	}
	if st.Next.Mode == authority.ModeMySQLOnly {
		resp.Needs = append(resp.Needs, "confirm_mysql_only")
	}
	if req.DryRun {
		// The diff is rendered whatever the gates say (an override and a
		// confirmation assumed), so the operator sees what would change
		// before deciding to override; Needs says what applying takes.
		var out bytes.Buffer
		_, err := s.cfg.Controller.Advance(ctx, rollout.AdvanceOptions{Actor: who, Reason: "dry run", Override: true, DryRun: true,
			ConfirmMySQLOnly: true, Resynced: true, Out: &out, FromVersion: &st.FlagsVersion})
		if s.advanceFailed(w, r, err) {
			return
		}
		resp.Diff = out.String()
		writeJSON(w, http.StatusOK, resp)
		return
	}
	if st.Next.Mode == authority.ModeMySQLOnly && !req.ConfirmMySQLOnly {
		writeProblem(w, r, problem{Status: http.StatusConflict, Code: "confirm_mysql_only", Field: "confirm_mysql_only",
			Message: fmt.Sprintf("stage %q is mysql_only: Redis leaves the request path and follows MySQL only through the relay; send \"confirm_mysql_only\": true to enter it", st.Next.Name)})
		return
	}
	var fleet rollout.Obedience
	next, err := s.cfg.Controller.Advance(ctx, rollout.AdvanceOptions{Actor: who, Reason: req.Reason, Override: req.Override,
		ConfirmMySQLOnly: req.ConfirmMySQLOnly, Resynced: req.Resynced, Fleet: &fleet, FromVersion: req.FromVersion})
	if s.advanceFailed(w, r, err) {
		return
	}
	s.log.Warn("server: rollout advanced", "request_id", RequestID(ctx), "stage", next.Name, "actor", who,
		"override", req.Override, "reason", req.Reason, "fleet", fleet.Summary)
	resp.Stage = stageView(st.Stage+1, next, st.Stage+1)
	resp.Needs, resp.Blocked = []string{}, []string{}
	resp.Fleet = &fleet
	writeJSON(w, http.StatusOK, resp)
}

// advanceFailed answers an advance the controller refused or failed, and
// reports whether it did.
func (s *Server) advanceFailed(w http.ResponseWriter, r *http.Request, err error) bool {
	var ge *rollout.GatesError
	switch {
	case err == nil:
		return false
	case errors.As(err, &ge):
		writeProblem(w, r, problem{Status: http.StatusConflict, Code: "gates_fail", Field: "override",
			Message: err.Error() + " (advance with \"override\": true and a reason, audited, to go on anyway)",
			Extra:   map[string]any{"gates": ge.Gates}})
	case errors.Is(err, rollout.ErrKillEngaged):
		writeProblem(w, r, problem{Status: http.StatusConflict, Code: "kill_engaged", Field: "override", Message: err.Error()})
	case errors.Is(err, rollout.ErrRedisNotCurrent):
		writeProblem(w, r, problem{Status: http.StatusConflict, Code: "redis_not_current", Field: "resynced", Message: err.Error()})
	case errors.Is(err, flagdoc.ErrFlagsChanged):
		writeProblem(w, r, problem{Status: http.StatusConflict, Code: "flags_changed", RetryAfter: time.Second,
			Message: "the flags changed since the dry run (another operator?): nothing was written; look at the plan again"})
	default:
		s.internal(w, r, "advance the rollout", err)
	}
	return true
}
