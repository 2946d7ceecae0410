package server

import (
	"context"
	"time"

	"github.com/seed31b0e981/reservoir/rollout"
)

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
