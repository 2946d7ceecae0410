package server

// The advance control's endpoint: a dry run that shows the flags change,
// then a confirmation that applies it through the controller.

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

func (s *Server) advance(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var req wire.AdvanceRequest
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
	resp := wire.AdvanceResponse{DryRun: req.DryRun, FromStage: st.Stage, FromVersion: st.FlagsVersion, Actor: who,
		Stage: wire.StageOf(st.Stage+1, *st.Next, st.Stage), Gates: wire.GateResultsOf(st.Gates), Needs: []string{}, Blocked: []string{}}
	for _, g := range st.Gates {
		if !g.Pass {
			resp.Blocked = append(resp.Blocked, g.Line())
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
	resp.Stage = wire.StageOf(st.Stage+1, next, st.Stage+1)
	resp.Needs, resp.Blocked = []string{}, []string{}
	f := wire.ObedienceOf(fleet)
	resp.Fleet = &f
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
			Extra:   wire.Problem{Gates: wire.GateResultsOf(ge.Gates)}})
	case errors.Is(err, rollout.ErrKillEngaged):
		writeProblem(w, r, problem{Status: http.StatusConflict, Code: "kill_engaged", Field: "override", Message: err.Error()})
	case errors.Is(err, flagdoc.ErrModesExternal):
		writeProblem(w, r, problem{Status: http.StatusConflict, Code: "modes_external", Message: err.Error()})
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
