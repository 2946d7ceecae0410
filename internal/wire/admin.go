package wire

import "time"

// The admin API's bodies that are not the rollout controller's own:
// GET /admin/rollout/status (this replica's view of every scope), the
// kill switch and the advance.

// RolloutStatus is the answer of GET /admin/rollout/status.
type RolloutStatus struct {
	// FlagsFile is the flags file every replica watches.
	FlagsFile string `json:"flags_file"`
	// FlagsLoaded is this replica's flag source's own state: false while
	// the flags are missing, unreadable or invalid since start; the
	// replica then answers every reservation call 503 flags_unavailable
	// and /readyz 503.
	FlagsLoaded bool `json:"flags_loaded"`
	// FlagsError says why the flags document cannot be read or parsed now;
	// left out when it can.
	FlagsError string `json:"flags_error,omitempty"`
	// FlagsRejected is set while this replica's flag source refuses the
	// newest flags document it saw; left out otherwise.
	FlagsRejected *FlagsRejected `json:"flags_rejected,omitempty"`
	// ModesFrom names where the modes come from when reservoir does not
	// write them ("the flagd daemon at flagd:8015"); left out otherwise.
	// The document shown is then reservoir's own kill switch document: its
	// kill switches win over the source, its modes are the code defaults
	// and unused, and each pod's effective decision is the source's with
	// the kill switch applied.
	ModesFrom string `json:"modes_from,omitempty"`
	// GlobalMode is the global mode.
	GlobalMode string `json:"global_mode"`
	// GlobalKill is the global kill switch.
	GlobalKill Kill `json:"global_kill"`
	// Pods are the topology's pods, in its order.
	Pods []Pod `json:"pods"`
	// Shops are the shops the topology routes explicitly and those with
	// flags of their own, by id.
	Shops []Shop `json:"shops"`
	// Plan is the rollout controller's status; null without a plan file
	// (PlanMessage says why).
	Plan *PlanStatus `json:"plan"`
	// Stages are the plan's stages, the one in force marked; [] without a
	// plan.
	Stages []Stage `json:"stages"`
	// PlanMessage explains a null Plan (no plan configured, or its status
	// failed); left out with a plan.
	PlanMessage string `json:"plan_message,omitempty"`
	// Replicas are the live replicas that report to the control database,
	// with the flags version each applied: a replica behind the others has
	// not obeyed the last change yet. [] when none reports (or the list
	// could not be read).
	Replicas []Replica `json:"replicas"`
	// At is when this answer was made.
	At time.Time `json:"at,omitzero"`
}

// Pod is one pod's flags and what this replica does with them.
type Pod struct {
	// Pod names the pod.
	Pod string `json:"pod"`
	// Mode is the pod's own mode in the flags ("" follows the global
	// mode).
	Mode string `json:"mode"`
	// Ramp is the pod's percentage stage; left out when it has none.
	Ramp *Ramp `json:"ramp,omitempty"`
	// Kill is the kill switch set on the pod itself.
	Kill Kill `json:"kill"`
	// File is what the flags document resolves to for a shop of the pod
	// without an override.
	File Decision `json:"file"`
	// Effective is what this replica's flag source answers for such a
	// shop. It differs from File only while a change propagates (or when
	// the document is invalid and the last valid version stays in force).
	Effective Decision `json:"effective"`
	// Shops are the shops the topology routes to the pod explicitly.
	Shops []int64 `json:"shops"`
	// RelayLag is how far the pod's Redis is behind MySQL's decisions.
	RelayLag RelayLag `json:"relay_lag"`
	// Handoffs is what the pod's fences say beside the flags: the pod's
	// handoff report judged against Effective.Version (File.Version when
	// this replica cannot read its flags).
	Handoffs Handoffs `json:"handoffs"`
	// State is what this replica does for the pod, in one place: the
	// dashboard's one cell per pod.
	State ScopeState `json:"state"`
}

// Shop is a shop the topology routes explicitly, or one with flags of its
// own.
type Shop struct {
	// Shop is the shop's id.
	Shop int64 `json:"shop"`
	// Pod is the pod that serves it ("" when none does).
	Pod string `json:"pod"`
	// OwnFlags is true when the flags set a mode or a kill switch on the
	// shop itself.
	OwnFlags bool `json:"own_flags"`
	// Mode is the shop's own mode; left out when it follows its pod.
	Mode string `json:"mode,omitempty"`
	// Kill is the kill switch set on the shop itself.
	Kill Kill `json:"kill"`
	// Effective is what this replica's flag source answers for the shop
	// (all zero when no pod serves it).
	Effective Decision `json:"effective"`
	// State says it in one place, as a pod's (all zero when no pod serves
	// it).
	State ScopeState `json:"state"`
}

// ScopeState is a scope's state in one place. The flags give a mode and a
// kill switch, the route an authority and an applied mode: after a kill
// over mysql those read "mysql", "redis" and "shadow", three ways of
// saying one thing. This is the one thing, and why.
type ScopeState struct {
	// State is one word: the mode applied ("redis", "shadow", "mysql",
	// "mysql_only"), "killed" when a kill switch holds the mode back, or
	// "unknown" when this replica cannot read its flags.
	State string `json:"state"`
	// Decides is the store the flags route the callers to: "redis",
	// "mysql", or "none" (unknown). A shop's fences follow (its handoff);
	// Handoffs says whether they all have.
	Decides string `json:"decides"`
	// Handoffs is the pod's handoff state against this replica's flags
	// version (Handoffs.State; "" when the flags cannot be read). Unless
	// it is "done", some shops' fences may still name the other store, and
	// Headline says so instead of "... decides".
	Handoffs string `json:"handoffs"`
	// Headline says it in a few words ("Redis decides: kill switch
	// redis", "handing off to MySQL (mysql): 3 of 1,204 shops pending,
	// oldest 2s").
	Headline string `json:"headline"`
	// Detail explains it: what the other store does, what the kill switch
	// holds back and who engaged it, a ramp, a change still propagating.
	Detail string `json:"detail"`
}

// RelayLag is a pod's relay lag: how far the pod's Redis is behind what
// MySQL decided (docs/ownership.md, section 4). It is what a kill switch
// engaged now would have to drain into Redis first, and what a forced
// handoff would lose.
type RelayLag struct {
	// Changes are the changes in MySQL's change feed Redis has not applied
	// yet.
	Changes int64 `json:"changes"`
	// OldestMs is the age of the oldest of them, in milliseconds (0 when
	// there is none).
	OldestMs float64 `json:"oldest_ms"`
	// At is when it was measured (by the pod's relay, about once a second,
	// or by this call); left out when it could not be.
	At time.Time `json:"at,omitzero"`
	// Error is set when the lag could not be measured (the pod's MySQL did
	// not answer): the lag is unknown. Left out when it was measured.
	Error string `json:"error,omitempty"`
}

// FlagsRejected is a flags document this replica's flag source refused
// (the dashboard's red banner).
type FlagsRejected struct {
	// Error says why: the line and column of a syntax error, or the JSON
	// path (and line and column) of the offending value.
	Error string `json:"error"`
	// At is when the source refused it.
	At time.Time `json:"at,omitzero"`
	// LastValidInForce is true when the source answers from the last valid
	// document meanwhile; false when none has loaded since the replica
	// started (it then serves no reservation call).
	LastValidInForce bool `json:"last_valid_in_force"`
}

// KillRequest is the body of POST and DELETE /admin/killswitch.
type KillRequest struct {
	// Scope is "global", "pod:<name>" or "shop:<id>". Required.
	Scope string `json:"scope"`
	// State is "redis" (the default: Redis decides, MySQL keeps a shadow
	// that is compared) or "redis_only" (MySQL's reservation tables are
	// not touched). Engage only.
	State string `json:"state"`
	// Reason says why, for whoever reads the flags or the audit: one line
	// of at most 500 printable characters. Required.
	Reason string `json:"reason"`
	// Resynced confirms that Redis holds what MySQL decided for a scope
	// that runs mysql_only, without the reconciler's check; without it
	// such a kill is refused (409 refused) while the reconciler finds
	// drift. Engage only.
	Resynced bool `json:"resynced"`
	// Force writes a switch on a shop scope although no pod of the
	// topology lists the shop (it is about to be added, or default_rule
	// routes it). Without it such a scope is refused, 400 unknown_shop, as
	// a likely typo; a release of a shop the flags name is never refused.
	Force bool `json:"force"`
}

// KillResponse is the answer of a kill switch change.
type KillResponse struct {
	// Scope is the scope changed, in its text form.
	Scope string `json:"scope"`
	// Kill is the switch now set on the scope in the flags (all empty, its
	// state "", in the rare answer whose flags could not be read back).
	Kill Kill `json:"kill"`
	// Actor made the change (the X-Reservoir-Actor header, else
	// "admin-api").
	Actor string `json:"actor"`
	// Audited is always true: every change goes through the rollout
	// controller and its audit. (Kept for clients of the earlier API.)
	Audited bool `json:"audited"`
	// ObeyedAfterMs is how long after the flags were written this
	// replica's flag source answered with the new version, in
	// milliseconds; null if not within the server's wait (3 s).
	ObeyedAfterMs *float64 `json:"obeyed_after_ms"`
	// Effective is this replica's decision for the scope now.
	Effective Decision `json:"effective"`
	// Fleet says how the live replicas obeyed.
	Fleet Obedience `json:"fleet"`
	// RelayLag is, for an engage, the relay lag of the scope's pods at
	// the switch, as the audit records it ("pod-a 12 change(s), oldest
	// 40ms"); left out for a release.
	RelayLag string `json:"relay_lag,omitempty"`
}

// AdvanceRequest is the body of POST /admin/rollout/advance.
type AdvanceRequest struct {
	// DryRun shows the change and what it needs, and changes nothing.
	DryRun bool `json:"dry_run"`
	// FromStage is the stage the dry run showed (its from_stage).
	// Required to apply: a confirmation applies the stage it was shown or
	// nothing.
	FromStage *int `json:"from_stage"`
	// FromVersion is the flags version the dry run showed (its
	// from_version). Required to apply.
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
	// FromStage is the stage in force before (-1: none): what a
	// confirmation sends back.
	FromStage int `json:"from_stage"`
	// FromVersion is the flags version then: what a confirmation sends
	// back.
	FromVersion int64 `json:"from_version"`
	// Stage is the stage applied, or that the advance would apply.
	Stage Stage `json:"stage"`
	// Diff is the change to the flags document, in unified form; left out
	// when applied.
	Diff string `json:"diff,omitempty"`
	// Gates are the verdicts of the stage in force's exit gates.
	Gates []GateResult `json:"gates"`
	// Needs lists what applying takes beyond a confirmation (dry run
	// only): "override" when a gate fails or a kill switch covers the
	// stage's pods (Blocked says which), "confirm_mysql_only" for a
	// mysql_only stage. [] when a confirmation applies it.
	Needs []string `json:"needs"`
	// Blocked says, one line each, why an override is needed.
	Blocked []string `json:"blocked"`
	// Actor made (or would make) the change.
	Actor string `json:"actor"`
	// Fleet says how the live replicas obeyed; left out for a dry run.
	Fleet *Obedience `json:"fleet,omitempty"`
}
