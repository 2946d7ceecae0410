package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// KillView is a kill switch as the admin API shows it.
type KillView struct {
	// State is "off", "redis" or "redis_only".
	State authority.Kill `json:"state"`
	// Reason, Actor and Since say why, who and when (set while engaged).
	Reason string     `json:"reason,omitempty"`
	Actor  string     `json:"actor,omitempty"`
	Since  *time.Time `json:"since,omitempty"`
}

func killView(k flagdoc.KillSwitch) KillView {
	v := KillView{State: k.State, Reason: k.Reason, Actor: k.Actor}
	if v.State == "" {
		v.State = authority.KillOff
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
	Mode authority.Mode `json:"mode"`
	Kill authority.Kill `json:"kill"`
	// Authority is the store the flags say should decide ("none" when
	// the flag source failed). Which store does decide a shop is its
	// fence (docs/ownership.md): it follows the flags on the shop's next
	// call, unless the fence carries newer flags.
	Authority string `json:"authority"`
	// Effective is the mode applied after the kill switch.
	Effective authority.Mode `json:"effective"`
	// Version is the version of the flags the decision was made from:
	// the version the pod's handoffs are judged against (0 when the flag
	// source failed).
	Version int64 `json:"version"`
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
	return DecisionView{Mode: d.Mode, Kill: d.Kill, Authority: string(rt.Authority), Effective: rt.Effective, Version: d.Version}
}

// PodView is one pod's flags and what this replica does with them.
type PodView struct {
	// Pod names the pod.
	Pod string `json:"pod"`
	// Mode is the pod's own mode in the flags file ("" follows the global
	// mode).
	Mode authority.Mode `json:"mode"`
	// Ramp is the pod's percentage stage, if any.
	Ramp *flagdoc.Ramp `json:"ramp,omitempty"`
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
	// Handoffs is what the pod's fences say beside what the flags say:
	// how far the handoffs of this replica's flags version have come.
	Handoffs HandoffView `json:"handoffs"`
	// State is what this replica does for the pod, in one place: the
	// dashboard's one cell per pod.
	State StateView `json:"state"`
}

// ShopView is a shop the topology routes explicitly, or one with flags of
// its own.
type ShopView struct {
	// Shop is the shop; Pod the pod that serves it.
	Shop int64  `json:"shop"`
	Pod  string `json:"pod"`
	// OwnFlags is true when the flags set a mode or a kill switch on the
	// shop itself.
	OwnFlags bool `json:"own_flags"`
	// Mode is the shop's own mode ("" follows its pod).
	Mode authority.Mode `json:"mode,omitempty"`
	// Kill is the kill switch set on the shop itself.
	Kill KillView `json:"kill"`
	// Effective is what this replica's flag source answers for the shop.
	Effective DecisionView `json:"effective"`
	// State says it in one place, as a pod's.
	State StateView `json:"state"`
}

// StateView is a scope's state in one place. The flags give a mode and a
// kill switch, the route an authority and an applied mode: after a kill
// over mysql those read "mysql", "redis" and "shadow", three ways of
// saying one thing. This is the one thing, and why.
type StateView struct {
	// State is one word: the mode applied ("redis", "shadow", "mysql",
	// "mysql_only"), "killed" when a kill switch holds the mode back, or
	// "unknown" when this replica cannot read its flags.
	State string `json:"state"`
	// Decides is the store the flags route the callers to: "redis",
	// "mysql", or "none" (unknown). A shop's fences follow (its handoff);
	// Handoffs says whether they all have.
	Decides string `json:"decides"`
	// Handoffs is the pod's handoff state against this replica's flags
	// version (HandoffView.State; "" when the flags cannot be read).
	// Unless it is "done", some shops' fences may still name the other
	// store, and Headline says so instead of "... decides".
	Handoffs rollout.HandoffState `json:"handoffs"`
	// Headline says it in a few words ("Redis decides: kill switch
	// redis", "handing off to MySQL (mysql): 3 of 1,204 shops pending,
	// oldest 2s").
	Headline string `json:"headline"`
	// Detail explains it: what the other store does, what the kill switch
	// holds back and who engaged it, a ramp, a change still propagating.
	Detail string `json:"detail"`
}

// others says what the store that does not decide does in a mode.
var others = map[authority.Mode]string{
	authority.ModeRedis:     "MySQL is not written; nothing is compared.",
	authority.ModeShadow:    "MySQL keeps a shadow of every reservation; reserves, claims and releases are compared.",
	authority.ModeMySQL:     "Redis follows through the relay; reserves are compared.",
	authority.ModeMySQLOnly: "Redis follows through the relay; nothing is compared.",
}

// HandoffView is a pod's handoffs as the admin API shows them: what its
// fences say beside what the flags say (docs/ownership.md, sections 2 and
// 3), from the report the pod's handoff sweeper keeps in its database.
type HandoffView struct {
	// State judges the report against this replica's flags version:
	// "done" (every shop's fences name the store the flags name),
	// "pending", "not_reported" (no report of that version yet), "newer"
	// (the report is of flags this replica has not applied yet) or
	// "unknown" (the report could not be read).
	State rollout.HandoffState `json:"state"`
	// Line says it in words: "handed off 1,204/1,204 shops in 380ms
	// (flags version 12)", "3 of 1,204 shops pending, oldest 2s (flags
	// version 12)".
	Line string `json:"line"`
	// Report is the sweeper's last report: flags_version, shops, done,
	// pending, failed, oldest_pending, started, finished, updated,
	// replica, last_error. Null before the pod's first sweep, or when it
	// could not be read.
	Report *reservation.HandoffProgress `json:"report"`
	// Error says why the report could not be read.
	Error string `json:"error,omitempty"`

	at time.Time // when it was judged: the headline's ages are as of then
}

// handoffView judges a pod's report (p, ok, err as the cell's Handoffs
// answered) against the flags at version.
func handoffView(p reservation.HandoffProgress, ok bool, err error, version int64, now time.Time) HandoffView {
	v := HandoffView{at: now}
	switch {
	case err != nil:
		v.Error = err.Error()
	case ok:
		v.Report = &p
	}
	v.State, v.Line = rollout.JudgeHandoffs(v.Report, v.Error, version, now)
	return v
}

// stateOf explains eff, this replica's decision for a scope; file is what
// the flags file says (propagating when they differ), kill the kill switch
// in force over the scope (for who and why), ramp the pod's ramp, and
// handoffs the scope's pod's handoffs judged against eff's version. The
// headline says a store decides only when the fences say so too: while
// handoffs are pending, or not reported for eff's version, it says where
// the pod is going instead.
func stateOf(eff, file DecisionView, kill KillView, ramp *flagdoc.Ramp, handoffs HandoffView) StateView {
	if eff.Error != "" {
		return StateView{State: "unknown", Decides: "none", Headline: "no decision: flags unreadable",
			Detail: "This replica cannot read its flags and answers every reservation call here 503 (flags_unavailable): " + eff.Error}
	}
	v := StateView{State: string(eff.Effective), Decides: eff.Authority, Handoffs: handoffs.State}
	who := map[string]string{"redis": "Redis", "mysql": "MySQL"}[eff.Authority]
	why := "(" + string(eff.Effective) + ")"
	var detail []string
	if eff.Kill != authority.KillOff && eff.Kill != "" {
		v.State = "killed"
		why = "(kill switch " + string(eff.Kill) + ")"
		k := "The kill switch (" + string(eff.Kill)
		if kill.Actor != "" {
			k += ", engaged by " + kill.Actor
		}
		if kill.Reason != "" {
			k += ": " + kill.Reason
		}
		detail = append(detail, k+") holds back the mode "+string(eff.Mode)+".")
	}
	switch handoffs.State {
	case rollout.HandoffsDone:
		if v.State == "killed" {
			v.Headline = who + " decides: kill switch " + string(eff.Kill)
		} else {
			v.Headline = who + " decides " + why
		}
	case rollout.HandoffsPending:
		v.Headline = "handing off to " + who + " " + why + ": " + handoffs.Report.Summary(handoffs.at)
	case rollout.HandoffsNewer:
		v.Headline = fmt.Sprintf("%s should decide %s: the handoffs reported are of flags version %d, newer than this replica's %d",
			who, why, handoffs.Report.FlagsVersion, eff.Version)
	case rollout.HandoffsUnknown:
		v.Headline = who + " should decide " + why + ": the handoffs are unknown"
	default:
		v.Headline = fmt.Sprintf("%s should decide %s: the handoffs of flags version %d are not reported yet", who, why, eff.Version)
	}
	if handoffs.State != rollout.HandoffsDone {
		detail = append(detail, "Fences: "+handoffs.Line+". Until a shop is handed off, the store its fences name decides it; "+
			"the pod's handoff sweeper, or the shop's next call, hands it off.")
	}
	detail = append(detail, others[eff.Effective])
	if ramp != nil && ramp.Percent > 0 {
		detail = append(detail, fmt.Sprintf("A ramp puts %d%% of the pod's shops in %s; this is the rest.", ramp.Percent, ramp.Mode))
	}
	if file.Mode != eff.Mode || file.Kill != eff.Kill {
		detail = append(detail, "Changing: the flags file says mode "+string(file.Mode)+", kill switch "+string(file.Kill)+
			"; this replica has not applied it yet.")
	}
	v.Detail = strings.Join(detail, " ")
	return v
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
	GlobalMode authority.Mode `json:"global_mode"`
	// GlobalKill is the global kill switch.
	GlobalKill KillView `json:"global_kill"`
	// Pods are in topology order.
	Pods []PodView `json:"pods"`
	// Shops are the shops the topology routes explicitly and those with
	// their own mode or kill switch (OwnFlags), by id.
	Shops []ShopView `json:"shops"`
	// Plan is the controller's status (stage, next stage, gates with their
	// numbers); null without a plan file.
	Plan *rollout.Status `json:"plan"`
	// Stages are the plan's stages, the one in force marked; [] without
	// a plan.
	Stages []StageView `json:"stages"`
	// PlanMessage explains a null Plan or a failed status.
	PlanMessage string `json:"plan_message,omitempty"`
	// Replicas are the live replicas that report to the control database,
	// with the flags version each applied: a replica behind the others
	// has not obeyed the last change yet.
	Replicas []rollout.Replica `json:"replicas"`
	// At is when this answer was made.
	At time.Time `json:"at"`
}

// Engaged reports whether the switch is on.
func (k KillView) Engaged() bool { return k.State != "" && k.State != authority.KillOff }
