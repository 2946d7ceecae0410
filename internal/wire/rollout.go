package wire

import (
	"maps"
	"slices"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// The rollout's state as the admin API and `reservoir rollout status
// --json` show it: the plan's status, its stages and gates, each scope's
// flags and decision, the handoffs, the replicas and the audit.

// Kill is a kill switch (of the global scope, a pod or a shop).
type Kill struct {
	// State is "off", "redis" (Redis decides; MySQL keeps a shadow that is
	// compared) or "redis_only" (MySQL's reservation tables are not
	// touched). Never empty: a switch never set is "off".
	State string `json:"state"`
	// Reason is why it was engaged, as the operator gave it; left out
	// while it is off.
	Reason string `json:"reason,omitempty"`
	// Actor is who engaged it; left out while it is off.
	Actor string `json:"actor,omitempty"`
	// Since is when it was engaged, to the second; left out while it is
	// off.
	Since time.Time `json:"since,omitzero"`
}

// KillOf is k as the wire shows it.
func KillOf(k flagdoc.KillSwitch) Kill {
	v := Kill{State: string(k.State), Reason: k.Reason, Actor: k.Actor, Since: utc(k.Since)}
	if v.State == "" {
		v.State = string(authority.KillOff)
	}
	return v
}

// Engaged reports whether the switch is on (any state but "off").
func (k Kill) Engaged() bool { return k.State != "" && k.State != string(authority.KillOff) }

// Decision is what the flags say for a scope (a pod's shop without
// overrides, or one shop), and the route it implies.
type Decision struct {
	// Mode is the scope's mode in the flags: "redis", "shadow", "mysql" or
	// "mysql_only" (meaningless when Error is set).
	Mode string `json:"mode"`
	// Kill is the kill switch state in force over the scope: "off",
	// "redis" or "redis_only". It wins over Mode.
	Kill string `json:"kill"`
	// Authority is the store the flags say should decide: "redis",
	// "mysql", or "none" when the flags could not be read. Which store
	// does decide a shop is its fence (docs/ownership.md): it follows the
	// flags on the shop's next call, unless the fence carries newer flags.
	Authority string `json:"authority"`
	// Effective is the mode applied after the kill switch ("shadow" for
	// mode mysql under kill switch redis).
	Effective string `json:"effective"`
	// Version is the version of the flags the decision was made from (0
	// when the flags could not be read).
	Version int64 `json:"version"`
	// Error says why the flags could not be read: the replica then serves
	// no reservation call of the scope (503 flags_unavailable), and Mode,
	// Kill and Effective mean nothing. Left out when they were read.
	Error string `json:"error,omitempty"`
}

// DecisionOf is d, with the route it implies.
func DecisionOf(d authority.Decision) Decision {
	rt := d.Route()
	return Decision{Mode: string(d.Mode), Kill: string(d.Kill), Authority: string(rt.Authority), Effective: string(rt.Effective), Version: d.Version}
}

// Ramp is a pod's percentage stage.
type Ramp struct {
	// Mode is the mode of the shops in the ramp.
	Mode string `json:"mode"`
	// Percent is the share of the pod's shops in the ramp, 1 to 99.
	Percent int `json:"percent"`
}

// RampOf is r as the wire shows it (nil for nil).
func RampOf(r *flagdoc.Ramp) *Ramp {
	if r == nil {
		return nil
	}
	return &Ramp{Mode: string(r.Mode), Percent: r.Percent}
}

// Stage is a stage of the rollout plan.
type Stage struct {
	// Index is the stage's place in the plan, from 0.
	Index int `json:"index"`
	// Name is what status and the audit call it.
	Name string `json:"name"`
	// Mode is the mode the stage applies to Pods.
	Mode string `json:"mode"`
	// Pods are the pods the stage changes.
	Pods []string `json:"pods"`
	// Percent, 1 to 99, applies Mode to that share of each pod's shops
	// only; 0 means every shop.
	Percent int `json:"percent"`
	// State is "done", "current" (in force), "next" (what advance applies)
	// or "later".
	State string `json:"state"`
	// Gates are the stage's exit gates: what must pass, on what was
	// observed while it was in force, before the next stage starts.
	Gates StageGates `json:"gates"`
}

// StageGates are a stage's exit criteria as the plan sets them (the
// verdicts are GateResult).
type StageGates struct {
	// MinObservations is the fewest dual-written calls to judge on.
	MinObservations int64 `json:"min_observations"`
	// MinDurationNS is the least time the stage must be in force, in
	// nanoseconds.
	MinDurationNS int64 `json:"min_duration_ns"`
	// MaxRates caps the rate of each named compare class (a fraction).
	MaxRates map[string]float64 `json:"max_rates"`
	// MaxShadowErrorRate caps shadow errors, panics and timeouts together
	// (a fraction).
	MaxShadowErrorRate float64 `json:"max_shadow_error_rate"`
	// MaxLatencyRatio caps the shadow's mean latency over the authority's;
	// 0 means the gate is off.
	MaxLatencyRatio float64 `json:"max_latency_ratio"`
}

// StageOf is the plan's stage st at index i, current being the index of
// the stage in force (-1: none yet).
func StageOf(i int, st rollout.Stage, current int) Stage {
	v := Stage{Index: i, Name: st.Name, Mode: string(st.Mode), Pods: orEmpty(st.Pods), Percent: st.Percent, Gates: StageGates{
		MinObservations: st.Gates.MinObservations, MinDurationNS: int64(st.Gates.MinDuration.Duration), MaxRates: stringKeys(st.Gates.MaxRates),
		MaxShadowErrorRate: st.Gates.MaxShadowErrorRate, MaxLatencyRatio: st.Gates.MaxLatencyRatio}}
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

// StagesOf lists the plan's stages, current marking the one in force (-1:
// none yet); [] without a plan.
func StagesOf(p *rollout.Plan, current int) []Stage {
	out := []Stage{}
	if p == nil {
		return out
	}
	for i, st := range p.Stages {
		out = append(out, StageOf(i, st, current))
	}
	return out
}

// PlanStatus is where the rollout stands: the rollout controller's status.
type PlanStatus struct {
	// Stage is the index of the stage in force (-1: none applied yet).
	Stage int `json:"stage"`
	// StageName names it ("" before the first).
	StageName string `json:"stage_name"`
	// Since is when it was applied, or when a release covering its pods
	// started its gates again (min_duration counts from it); left out
	// before the first.
	Since time.Time `json:"since,omitzero"`
	// CountingFrom is when the gates' evidence counts from: the start of
	// the comparer's first whole window (one minute) at or after Since,
	// so no call observed before the stage counts for it. It can be up to
	// a window ahead of now: nothing counts until then. Left out before
	// the first stage.
	CountingFrom time.Time `json:"counting_from,omitzero"`
	// Next is the stage advance would apply; null when the plan is
	// complete (or, in the CLI's output, when there is no plan: Error
	// says so).
	Next *Stage `json:"next"`
	// FlagsVersion is the version of the flags document.
	FlagsVersion int64 `json:"flags_version"`
	// FlagsInvalid says what is wrong with the stored flags document when
	// it does not parse (with its line and column); Pods then show the
	// last valid flags, and Ready is false. Left out when it parses.
	FlagsInvalid string `json:"flags_invalid,omitempty"`
	// Pods are each plan pod's flags, and what its fences say.
	Pods []PlanPod `json:"pods"`
	// Evidence is what the gates judged.
	Evidence Evidence `json:"evidence"`
	// Gates are the verdicts of the stage in force's exit gates ([] before
	// the first stage: it needs no evidence).
	Gates []GateResult `json:"gates"`
	// Ready is true when every gate passes and a next stage exists.
	Ready bool `json:"ready"`
}

// PlanPod is one pod's flags in the plan's status.
type PlanPod struct {
	// Pod names the pod.
	Pod string `json:"pod"`
	// Mode is the pod's own mode in the flags ("" follows the global
	// mode).
	Mode string `json:"mode"`
	// Ramp is the pod's percentage stage; left out when it has none.
	Ramp *Ramp `json:"ramp,omitempty"`
	// Kill is the kill switch set on the pod itself.
	Kill Kill `json:"kill"`
	// Effective is the flags' decision for a shop of the pod outside any
	// ramp and without overrides.
	Effective Decision `json:"effective"`
	// Handoffs is what the pod's fences say beside the flags: the pod's
	// handoff report judged against the status's FlagsVersion
	// (rollout.Status.Fences).
	Handoffs Handoffs `json:"handoffs"`
}

// PlanStatusOf is st as of now (the handoffs' ages are as of now).
func PlanStatusOf(st rollout.Status, now time.Time) PlanStatus {
	v := PlanStatus{Stage: st.Stage, StageName: st.StageName, Since: utc(st.Since), CountingFrom: utc(st.CountingFrom), FlagsVersion: st.FlagsVersion, FlagsInvalid: st.FlagsInvalid,
		Pods: []PlanPod{}, Evidence: EvidenceOf(st.Evidence), Gates: GateResultsOf(st.Gates), Ready: st.Ready}
	if st.Next != nil {
		n := StageOf(st.Stage+1, *st.Next, st.Stage)
		v.Next = &n
	}
	for _, p := range st.Pods {
		state, line, version := st.Fences(p, now)
		v.Pods = append(v.Pods, PlanPod{Pod: p.Pod, Mode: string(p.Mode), Ramp: RampOf(p.Ramp), Kill: KillOf(p.Kill),
			Effective: DecisionOf(p.Effective), Handoffs: handoffsView(p.Handoffs, p.HandoffsError, now, state, line, version)})
	}
	return v
}

// Evidence is what the compare stats say about a stage's pods since it
// started: what the gates judge.
type Evidence struct {
	// Pods are the stage's pods.
	Pods []string `json:"pods"`
	// Since is when the evidence counts from (PlanStatus.CountingFrom);
	// left out before the first stage.
	Since time.Time `json:"since,omitzero"`
	// Observations counts the compared calls (calibration excluded).
	Observations int64 `json:"observations"`
	// Classes counts the observations per compare class.
	Classes map[string]int64 `json:"classes"`
	// ShadowFaults counts shadow errors, panics and timeouts.
	ShadowFaults int64 `json:"shadow_faults"`
	// AuthorityMeanNS is the deciding store's mean latency, in
	// nanoseconds (0 when none was measured).
	AuthorityMeanNS int64 `json:"authority_mean_ns"`
	// ShadowMeanNS is the shadow's mean latency, in nanoseconds (0 when
	// none was measured).
	ShadowMeanNS int64 `json:"shadow_mean_ns"`
	// LatencySamples is how many observations timed both stores (the
	// relay's observations time neither).
	LatencySamples int64 `json:"latency_samples"`
}

// EvidenceOf is e as the wire shows it.
func EvidenceOf(e rollout.Evidence) Evidence {
	return Evidence{Pods: orEmpty(e.Pods), Since: utc(e.Since), Observations: e.Observations, Classes: stringKeys(e.Classes),
		ShadowFaults: e.ShadowFaults, AuthorityMeanNS: int64(e.AuthorityMean), ShadowMeanNS: int64(e.ShadowMean), LatencySamples: e.LatencySamples}
}

// GateResult is one exit gate's verdict with its numbers.
type GateResult struct {
	// Gate names it: "min_observations", "min_duration",
	// "max_rate:<class>", "max_shadow_error_rate", "max_latency_ratio".
	Gate string `json:"gate"`
	// Verdict is "pass", "not yet" (the gate cannot pass yet, and nothing
	// measured is wrong: too few observations, too little time in force,
	// a ceiling not judged before min_observations, no latency measured)
	// or "breaking" (a rate or the latency ratio above its maximum with
	// at least min_observations): the words `reservoir rollout status`
	// prints and the dashboard shows.
	Verdict string `json:"verdict"`
	// Pass is true when Verdict is "pass".
	Pass bool `json:"pass"`
	// Value is what was measured, in the gate's unit: a count for
	// min_observations, seconds for min_duration (never negative), a
	// fraction for the rates, a ratio for max_latency_ratio.
	Value float64 `json:"value"`
	// Limit is what Value is held to, in the same unit.
	Limit float64 `json:"limit"`
	// Why says it in words, numbers included.
	Why string `json:"why"`
	// Breaking is true when Verdict is "breaking": what makes the
	// automatic controller pull the kill switch. A floor not reached yet
	// is never breaking.
	Breaking bool `json:"breaking"`
}

// GateResultsOf is gs as the wire shows them ([] for none).
func GateResultsOf(gs []rollout.GateResult) []GateResult {
	out := make([]GateResult, 0, len(gs))
	for _, g := range gs {
		out = append(out, GateResult{Gate: g.Gate, Verdict: string(g.Verdict()), Pass: g.Pass, Value: g.Value, Limit: g.Limit, Why: g.Why, Breaking: g.Breaking})
	}
	return out
}

// Handoffs is a pod's handoff report judged against a flags version:
// whether every shop's fences name the store those flags name
// (docs/ownership.md, sections 2 and 3).
type Handoffs struct {
	// State is "done" (every shop's fences name the store the flags
	// name), "pending", "not_reported" (no report of that version yet),
	// "newer" (the report is of flags newer than those judged) or
	// "unknown" (the report could not be read: Error; or, beside a mode
	// source reservoir does not write, the modes' version could not be:
	// Line).
	State string `json:"state"`
	// Line says it in words, as `reservoir rollout status` prints it:
	// "handed off 1,204/1,204 shops in 380ms (flags version 12)".
	Line string `json:"line"`
	// Report is the pod's handoff sweeper's last report; null before the
	// pod's first sweep, or when it could not be read.
	Report *HandoffReport `json:"report"`
	// Error says why the report could not be read; left out when it was.
	Error string `json:"error,omitempty"`
	// FlagsVersion is the version the report was judged against: the
	// flags' version; beside a mode source reservoir does not write, the
	// epoch of the modes' version and the kill switch document's, as the
	// pod's sweeps report it (report.flags_version). Left out when it
	// could not be read.
	FlagsVersion int64 `json:"flags_version,omitempty"`
}

// HandoffReport is the report a pod's handoff sweeper keeps in the pod's
// database.
type HandoffReport struct {
	// FlagsVersion is the flags version the sweep worked to.
	FlagsVersion int64 `json:"flags_version"`
	// Shops is how many shops that version moved to another decider.
	Shops int64 `json:"shops"`
	// Done is how many of them are handed off.
	Done int64 `json:"done"`
	// Pending is how many are still to hand off.
	Pending int64 `json:"pending"`
	// Failed is how many of the pending failed at their last try.
	Failed int64 `json:"failed"`
	// OldestPending is since when the oldest pending shop has waited; left
	// out when none is pending.
	OldestPending time.Time `json:"oldest_pending,omitzero"`
	// OldestPendingAgeNS is how long the oldest pending shop has waited,
	// in nanoseconds, as of the answer (0 when none is pending).
	OldestPendingAgeNS int64 `json:"oldest_pending_age_ns"`
	// Started is when the sweep first saw the version.
	Started time.Time `json:"started,omitzero"`
	// Finished is when its last shop was handed off; left out while shops
	// are pending.
	Finished time.Time `json:"finished,omitzero"`
	// TookNS is from Started to Finished, in nanoseconds (0 while shops
	// are pending).
	TookNS int64 `json:"took_ns"`
	// Updated is when the report was written.
	Updated time.Time `json:"updated,omitzero"`
	// Replica is the replica that ran the sweep.
	Replica string `json:"replica"`
	// LastError is the sweep's last handoff failure; left out when none.
	LastError string `json:"last_error,omitempty"`
}

// HandoffsOf judges a pod's report p (nil: none yet; readErr non-empty:
// it could not be read) against the flags at version, as of now
// (rollout.JudgeHandoffs).
func HandoffsOf(p *reservation.HandoffProgress, readErr string, version int64, now time.Time) Handoffs {
	state, line := rollout.JudgeHandoffs(p, readErr, version, now)
	return handoffsView(p, readErr, now, state, line, version)
}

// handoffsView is the view of report p judged against version as state
// and line.
func handoffsView(p *reservation.HandoffProgress, readErr string, now time.Time, state rollout.HandoffState, line string, version int64) Handoffs {
	v := Handoffs{State: string(state), Line: line, Error: readErr, FlagsVersion: version}
	if p != nil {
		r := &HandoffReport{FlagsVersion: p.FlagsVersion, Shops: p.Shops, Done: p.Done, Pending: p.Pending, Failed: p.Failed,
			OldestPending: utc(p.OldestPending), Started: utc(p.Started), Finished: utc(p.Finished), Updated: utc(p.Updated),
			Replica: p.Replica, LastError: p.LastError}
		if !p.OldestPending.IsZero() {
			r.OldestPendingAgeNS = int64(now.Sub(p.OldestPending))
		}
		if !p.Finished.IsZero() {
			r.TookNS = int64(p.Finished.Sub(p.Started))
		}
		v.Report = r
	}
	return v
}

// Replica is a live replica: one that reports to the control database.
type Replica struct {
	// ID is the replica's id: host, pid and start time.
	ID string `json:"id"`
	// Pods are the pods it serves.
	Pods []string `json:"pods"`
	// AppliedVersion is the flags version its flag source answers with (0:
	// none loaded).
	AppliedVersion int64 `json:"applied_version"`
	// AppliedAt is when it applied that version (the database's clock);
	// left out when it has applied none.
	AppliedAt time.Time `json:"applied_at,omitzero"`
	// SeenAgoNS is how long ago it last reported, in nanoseconds.
	SeenAgoNS int64 `json:"seen_ago_ns"`
}

// ReplicasOf is rs as the wire shows them ([] for none).
func ReplicasOf(rs []rollout.Replica) []Replica {
	out := make([]Replica, 0, len(rs))
	for _, r := range rs {
		out = append(out, Replica{ID: r.ID, Pods: orEmpty(r.Pods), AppliedVersion: r.AppliedVersion, AppliedAt: utc(r.AppliedAt), SeenAgoNS: int64(r.SeenAgo)})
	}
	return out
}

// Obedience says how the fleet obeyed a change of the flags.
type Obedience struct {
	// Version is the flags version written.
	Version int64 `json:"version"`
	// Live counts the live replicas.
	Live int `json:"live"`
	// Obeyed counts those that applied Version (or a later one).
	Obeyed int `json:"obeyed"`
	// TookNS is how long after the write the last live replica applied it
	// (or how long the wait lasted, when some lag), in nanoseconds.
	TookNS int64 `json:"took_ns"`
	// Lagging are the live replicas that had not applied it by then; left
	// out when none lags.
	Lagging []Replica `json:"lagging,omitempty"`
	// Summary says it in one line: "obeyed by 3/3 replicas in 23 ms
	// (flags version 41)".
	Summary string `json:"summary"`
}

// ObedienceOf is o as the wire shows it.
func ObedienceOf(o rollout.Obedience) Obedience {
	v := Obedience{Version: o.Version, Live: o.Live, Obeyed: o.Obeyed, TookNS: int64(o.Took), Summary: o.Summary}
	if len(o.Lagging) > 0 {
		v.Lagging = ReplicasOf(o.Lagging)
	}
	return v
}

// AuditEntry is one recorded change of the flags.
type AuditEntry struct {
	// ID is the audit row's id: later changes have higher ids.
	ID int64 `json:"id"`
	// At is when the change was made.
	At time.Time `json:"at,omitzero"`
	// Actor is who made it.
	Actor string `json:"actor"`
	// Action is what it was: "advance", "override", "kill", "release",
	// ... ("<action>_conflict" for a change refused because another
	// operator's came first).
	Action string `json:"action"`
	// Scope is what it covered: "global", "pod:<name>", "shop:<id>", or
	// an advance's pods, comma-separated.
	Scope string `json:"scope"`
	// Reason is why, as given (a kill switch's carries the relay lag at
	// the switch).
	Reason string `json:"reason"`
	// Stage is the stage in force after the change (-1: none).
	Stage int `json:"stage"`
	// Before is the flags document before the change.
	Before string `json:"before"`
	// After is the flags document after it.
	After string `json:"after"`
}

// AuditEntriesOf is hs as the wire shows them, in their order ([] for
// none).
func AuditEntriesOf(hs []rollout.AuditEntry) []AuditEntry {
	out := make([]AuditEntry, 0, len(hs))
	for _, h := range hs {
		out = append(out, AuditEntry{ID: h.ID, At: utc(h.At), Actor: h.Actor, Action: h.Action, Scope: h.Scope, Reason: h.Reason,
			Stage: h.Stage, Before: h.Before, After: h.After})
	}
	return out
}

// History is the answer of GET /admin/rollout/history.
type History struct {
	// Entries are the latest changes, newest first.
	Entries []AuditEntry `json:"entries"`
}

// ControllerStatus is what `reservoir rollout status --json` prints: the
// plan's status (its fields inline), the live replicas, and why the status
// is partial when it is.
type ControllerStatus struct {
	// PlanStatus is the controller's status; its keys are ControllerStatus's
	// own (embedded, so inline).
	PlanStatus
	// Replicas are the live replicas, with the flags version each applied.
	Replicas []Replica `json:"replicas"`
	// Error says why the status is partial (no plan configured); left out
	// when it is whole.
	Error string `json:"error,omitempty"`
}

// utc is t in UTC, or the zero time for a zero t (left out by omitzero).
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

// orEmpty is a copy of s, [] for none.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return slices.Clone(s)
}

// stringKeys copies m with its keys as strings ({} for none).
func stringKeys[K ~string, V any](m map[K]V) map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range maps.All(m) {
		out[string(k)] = v
	}
	return out
}
