package wire

import (
	"time"

	"github.com/seed31b0e981/reservoir/compare"
)

// The CLI's own --json outputs: the rollout actions that change the flags
// (advance, kill, release), init, order-pods, and a refusal of any of
// them. `rollout status --json` is ControllerStatus, `rollout history
// --json` a list of AuditEntry, `reconcile --json` a list of
// ReconcileReport, `reservoir version --json` a Version.

// RolloutChange is what `reservoir rollout advance|kill|release --json`
// prints: the change of the flags made (or, with --dry-run, that would be
// made).
type RolloutChange struct {
	// Action is the change: "advance", "override" (an advance with
	// --override), "kill" or "release", as the audit records it.
	Action string `json:"action"`
	// Scope is what the change covers: "global", "pod:<name>" or
	// "shop:<id>" for a kill or release; the stage's pods,
	// comma-separated, for an advance.
	Scope string `json:"scope"`
	// State is the state the change sets: the kill switch's ("redis",
	// "redis_only"; "off" for a release), or the mode of the stage an
	// advance applies ("shadow", "mysql", ...).
	State string `json:"state"`
	// Stage is the stage an advance applies (or would apply); left out for
	// a kill or release.
	Stage *Stage `json:"stage,omitempty"`
	// Actor made (or would make) the change.
	Actor string `json:"actor"`
	// Reason is why, as given ("" for an advance without one).
	Reason string `json:"reason"`
	// DryRun is true when nothing was written (--dry-run).
	DryRun bool `json:"dry_run"`
	// FlagsVersionBefore is the flags' version before the change (0: there
	// were none).
	FlagsVersionBefore int64 `json:"flags_version_before"`
	// FlagsVersionAfter is the version the change wrote; for a dry run,
	// the version it would write (FlagsVersionBefore + 1).
	FlagsVersionAfter int64 `json:"flags_version_after"`
	// Diff is the change to the flags document in unified form, as the text
	// output prints it; dry run only (left out otherwise).
	Diff string `json:"diff,omitempty"`
	// RelayLag is, for a kill, the relay lag of the scope's pods at the
	// switch ("pod-a 12 change(s), oldest 40ms"); left out when there was
	// none, for a dry run, an advance or a release.
	RelayLag string `json:"relay_lag,omitempty"`
	// Obeyed says how the live replicas obeyed the change (its summary is
	// the text output's "obeyed by ..." line); left out for a dry run, or
	// when it could not be told (Warnings then says why).
	Obeyed *Obedience `json:"obeyed,omitempty"`
	// Warnings are what the text output prints besides (on stderr): a plan
	// that did not load for a release, a kill written over an invalid
	// flags document, a fleet whose obedience could not be read. [] when
	// none.
	Warnings []string `json:"warnings"`
}

// RolloutRefusal is what a rollout action run with --json prints when it
// is refused or fails once it has opened the topology (the exit status is
// the text output's: 1, or 2 for bad usage the action found). Bad usage
// found in the arguments alone prints nothing on stdout.
type RolloutRefusal struct {
	// Action is the rollout action refused ("advance", "kill", ...).
	Action string `json:"action"`
	// Refused is always true: the object is a refusal, not a result.
	Refused bool `json:"refused"`
	// Error is why, as the text output prints it on stderr (without the
	// "reservoir rollout ACTION: " prefix).
	Error string `json:"error"`
	// ExitCode is the process's exit status: 1 failure, 2 bad usage.
	ExitCode int `json:"exit_code"`
	// Stage is, for an advance refused by its gates, the name of the stage
	// in force whose gates do not all pass; "" otherwise.
	Stage string `json:"stage"`
	// Gates are, for an advance refused by its gates, every gate's verdict
	// (passing ones included); [] otherwise.
	Gates []GateResult `json:"gates"`
}

// FlagsInit is what `reservoir rollout init --json` prints.
type FlagsInit struct {
	// Written is true when the first flags were written; false when the
	// store held flags already (nothing was written).
	Written bool `json:"written"`
	// Store is where the topology's flags live ("control database",
	// "flags file /etc/reservoir/flags.yaml", ...), as the text output
	// names it.
	Store string `json:"store"`
	// FlagsVersion is the version of the flags in the store now: the one
	// written, or the one found.
	FlagsVersion int64 `json:"flags_version"`
	// From is the flags file copied (--from); "" when the flags written
	// are the defaults (every shop in redis mode) or nothing was written.
	From string `json:"from"`
}

// OrderPods is what `reservoir rollout order-pods --json` prints.
type OrderPods struct {
	// Since is the start of the traffic counted (now minus --since).
	Since time.Time `json:"since,omitzero"`
	// SinceNS is --since, in nanoseconds.
	SinceNS int64 `json:"since_ns"`
	// Pods are every pod of the topology, by calls served, lowest first:
	// the order a plan lists them in.
	Pods []PodTraffic `json:"pods"`
}

// PodTraffic is the calls one pod served.
type PodTraffic struct {
	// Pod is the pod's name.
	Pod string `json:"pod"`
	// Calls counts every reserve, claim, release and adjust its facades
	// took, all modes together.
	Calls int64 `json:"calls"`
	// ByMode counts them per effective mode ("redis", "shadow", ...); {}
	// when none.
	ByMode map[string]int64 `json:"by_mode"`
}

// PodTrafficsOf is ps as the wire shows them, in their order ([] for
// none).
func PodTrafficsOf(ps []compare.PodTraffic) []PodTraffic {
	out := make([]PodTraffic, 0, len(ps))
	for _, p := range ps {
		by := map[string]int64{}
		for m, n := range p.ByMode {
			by[m] = n
		}
		out = append(out, PodTraffic{Pod: p.Pod, Calls: p.Calls, ByMode: by})
	}
	return out
}
