package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// decide is what this replica's flag source answers for a shop of pod
// (shop 0: one without overrides), and the route it implies.
func (s *Server) decide(ctx context.Context, pod string, shop int64) wire.Decision {
	d, err := s.cfg.Cell.Flags.Decide(ctx, pod, shop)
	if err != nil {
		return wire.Decision{Mode: string(d.Mode), Kill: string(d.Kill), Authority: "none", Error: err.Error()}
	}
	return wire.DecisionOf(d)
}

// others says what the store that does not decide does in a mode.
var others = map[authority.Mode]string{
	authority.ModeRedis:     "MySQL is not written; nothing is compared.",
	authority.ModeShadow:    "MySQL keeps a shadow of every reservation; reserves, claims and releases are compared.",
	authority.ModeMySQL:     "Redis follows through the relay; reserves are compared.",
	authority.ModeMySQLOnly: "Redis follows through the relay; nothing is compared.",
}

// handoffs is a pod's handoffs judged against a flags version: what the
// status shows (view), and what the headline says it from.
type handoffs struct {
	view   wire.Handoffs
	report *reservation.HandoffProgress // nil: none, or not read
	at     time.Time                    // when it was judged: the headline's ages are as of then
}

// judgeHandoffs judges a pod's report (p, ok, err as the cell's Handoffs
// answered) against the flags at version.
func judgeHandoffs(p reservation.HandoffProgress, ok bool, err error, version int64, now time.Time) handoffs {
	h := handoffs{at: now}
	readErr := ""
	switch {
	case err != nil:
		readErr = err.Error()
	case ok:
		h.report = &p
	}
	h.view = wire.HandoffsOf(h.report, readErr, version, now)
	return h
}

// stateOf explains eff, this replica's decision for a scope; file is what
// the flags file says (propagating when they differ), kill the kill switch
// in force over the scope (for who and why), ramp the pod's ramp, and
// handoffs the scope's pod's handoffs judged against eff's version. The
// headline says a store decides only when the fences say so too: while
// handoffs are pending, or not reported for eff's version, it says where
// the pod is going instead.
func stateOf(eff, file wire.Decision, kill wire.Kill, ramp *flagdoc.Ramp, h handoffs) wire.ScopeState {
	if eff.Error != "" {
		return wire.ScopeState{State: "unknown", Decides: "none", Headline: "no decision: flags unreadable",
			Detail: "This replica cannot read its flags and answers every reservation call here 503 (flags_unavailable): " + eff.Error}
	}
	state := rollout.HandoffState(h.view.State)
	v := wire.ScopeState{State: eff.Effective, Decides: eff.Authority, Handoffs: h.view.State}
	who := map[string]string{"redis": "Redis", "mysql": "MySQL"}[eff.Authority]
	why := "(" + eff.Effective + ")"
	var detail []string
	if eff.Kill != string(authority.KillOff) && eff.Kill != "" {
		v.State = "killed"
		why = "(kill switch " + eff.Kill + ")"
		k := "The kill switch (" + eff.Kill
		if kill.Actor != "" {
			k += ", engaged by " + kill.Actor
		}
		if kill.Reason != "" {
			k += ": " + kill.Reason
		}
		detail = append(detail, k+") holds back the mode "+eff.Mode+".")
	}
	switch state {
	case rollout.HandoffsDone:
		if v.State == "killed" {
			v.Headline = who + " decides: kill switch " + eff.Kill
		} else {
			v.Headline = who + " decides " + why
		}
	case rollout.HandoffsPending:
		v.Headline = "handing off to " + who + " " + why + ": " + h.report.Summary(h.at)
	case rollout.HandoffsNewer:
		v.Headline = fmt.Sprintf("%s should decide %s: the handoffs reported are of flags version %d, newer than this replica's %d",
			who, why, h.report.FlagsVersion, eff.Version)
	case rollout.HandoffsUnknown:
		v.Headline = who + " should decide " + why + ": the handoffs are unknown"
	default:
		v.Headline = fmt.Sprintf("%s should decide %s: the handoffs of flags version %d are not reported yet", who, why, eff.Version)
	}
	if state != rollout.HandoffsDone {
		detail = append(detail, "Fences: "+h.view.Line+". Until a shop is handed off, the store its fences name decides it; "+
			"the pod's handoff sweeper, or the shop's next call, hands it off.")
	}
	detail = append(detail, others[authority.Mode(eff.Effective)])
	if ramp != nil && ramp.Percent > 0 {
		detail = append(detail, fmt.Sprintf("A ramp puts %d%% of the pod's shops in %s; this is the rest.", ramp.Percent, ramp.Mode))
	}
	if file.Mode != eff.Mode || file.Kill != eff.Kill {
		detail = append(detail, "Changing: the flags file says mode "+file.Mode+", kill switch "+file.Kill+
			"; this replica has not applied it yet.")
	}
	v.Detail = strings.Join(detail, " ")
	return v
}
