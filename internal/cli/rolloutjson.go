package cli

import (
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/rollout"
)

// The JSON the CLI prints (rollout status --json, rollout history --json)
// has one naming style, written down in docs/cli.md:
//
//   - keys are snake_case;
//   - a duration is an integer number of nanoseconds, its key ending in _ns;
//   - a time is RFC 3339 in UTC, and a time not known is left out;
//   - a rate is a fraction (0.001 is 0.1%);
//   - a list is [] when empty, never null;
//   - modes, kill switch states and gate names are the strings the flags
//     and the plan use.
//
// The rollout package's types are mapped to the views below rather than
// encoded as they are: some carry no json tags (Stage, Gates, KillSwitch,
// Decision encode as "Name", "MinObservations", ...), and the admin API's
// dashboard reads those encodings today, so they cannot simply change.

type statusView struct {
	Stage     int        `json:"stage"`
	StageName string     `json:"stage_name"`
	Since     *time.Time `json:"since,omitempty"`
	// Next is null when the plan is complete, or when there is no plan
	// (Error says so).
	Next         *stageView    `json:"next"`
	FlagsVersion int64         `json:"flags_version"`
	FlagsInvalid string        `json:"flags_invalid,omitempty"`
	Pods         []podView     `json:"pods"`
	Evidence     evidenceView  `json:"evidence"`
	Gates        []gateView    `json:"gates"`
	Ready        bool          `json:"ready"`
	Replicas     []replicaView `json:"replicas"`
	// Error says why the status is partial (no plan configured).
	Error string `json:"error,omitempty"`
}

type stageView struct {
	Name    string    `json:"name"`
	Mode    string    `json:"mode"`
	Pods    []string  `json:"pods"`
	Percent int       `json:"percent"`
	Gates   gatesView `json:"gates"`
}

type gatesView struct {
	MinObservations    int64              `json:"min_observations"`
	MinDurationNS      int64              `json:"min_duration_ns"`
	MaxRates           map[string]float64 `json:"max_rates"`
	MaxShadowErrorRate float64            `json:"max_shadow_error_rate"`
	MaxLatencyRatio    float64            `json:"max_latency_ratio"`
}

type podView struct {
	Pod string `json:"pod"`
	// Mode is "" when the pod follows the global mode.
	Mode      string       `json:"mode"`
	Ramp      *rampView    `json:"ramp,omitempty"`
	Kill      killView     `json:"kill"`
	Effective decisionView `json:"effective"`
	// Handoffs is what the pod's fences say beside the flags.
	Handoffs handoffsView `json:"handoffs"`
}

// handoffsView is a pod's handoff report judged against the flags'
// version: the fences line of the text output, and the report.
type handoffsView struct {
	// State is done, pending, not_reported, newer or unknown
	// (rollout.HandoffState).
	State string `json:"state"`
	// Line is the text output's fences line.
	Line string `json:"line"`
	// Report is null before the pod's first sweep, or when it could not
	// be read (Error).
	Report *handoffReportView `json:"report"`
	Error  string             `json:"error,omitempty"`
}

// handoffReportView is a reservation.HandoffProgress, a duration in
// nanoseconds and a time not known left out, as every CLI JSON.
type handoffReportView struct {
	FlagsVersion  int64      `json:"flags_version"`
	Shops         int64      `json:"shops"`
	Done          int64      `json:"done"`
	Pending       int64      `json:"pending"`
	Failed        int64      `json:"failed"`
	OldestPending *time.Time `json:"oldest_pending,omitempty"`
	// OldestPendingAgeNS is how long the oldest pending shop has waited
	// (0 when none is pending).
	OldestPendingAgeNS int64      `json:"oldest_pending_age_ns"`
	Started            *time.Time `json:"started,omitempty"`
	Finished           *time.Time `json:"finished,omitempty"`
	// TookNS is from Started to Finished (0 while shops are pending).
	TookNS    int64      `json:"took_ns"`
	Updated   *time.Time `json:"updated,omitempty"`
	Replica   string     `json:"replica"`
	LastError string     `json:"last_error,omitempty"`
}

// newHandoffsView judges p's handoffs against the flags at version, as
// of now.
func newHandoffsView(p rollout.PodStatus, version int64, now time.Time) handoffsView {
	state, line := rollout.JudgeHandoffs(p.Handoffs, p.HandoffsError, version, now)
	v := handoffsView{State: string(state), Line: line, Error: p.HandoffsError}
	if r := p.Handoffs; r != nil {
		v.Report = &handoffReportView{FlagsVersion: r.FlagsVersion, Shops: r.Shops, Done: r.Done, Pending: r.Pending, Failed: r.Failed,
			OldestPending: timeOrNil(r.OldestPending), Started: timeOrNil(r.Started), Finished: timeOrNil(r.Finished),
			Updated: timeOrNil(r.Updated), Replica: r.Replica, LastError: r.LastError}
		if !r.OldestPending.IsZero() {
			v.Report.OldestPendingAgeNS = int64(now.Sub(r.OldestPending))
		}
		if !r.Finished.IsZero() {
			v.Report.TookNS = int64(r.Finished.Sub(r.Started))
		}
	}
	return v
}

type rampView struct {
	Mode    string `json:"mode"`
	Percent int    `json:"percent"`
}

type killView struct {
	// State is "" when the switch is off.
	State  string     `json:"state"`
	Reason string     `json:"reason,omitempty"`
	Actor  string     `json:"actor,omitempty"`
	Since  *time.Time `json:"since,omitempty"`
}

type decisionView struct {
	Mode    string `json:"mode"`
	Kill    string `json:"kill"`
	Version int64  `json:"version"`
}

type evidenceView struct {
	Pods            []string         `json:"pods"`
	Since           *time.Time       `json:"since,omitempty"`
	Observations    int64            `json:"observations"`
	Classes         map[string]int64 `json:"classes"`
	ShadowFaults    int64            `json:"shadow_faults"`
	AuthorityMeanNS int64            `json:"authority_mean_ns"`
	ShadowMeanNS    int64            `json:"shadow_mean_ns"`
	LatencySamples  int64            `json:"latency_samples"`
}

type gateView struct {
	Gate string `json:"gate"`
	Pass bool   `json:"pass"`
	// Value and Limit are in the gate's unit: a count for
	// min_observations, seconds for min_duration, a fraction for the rates,
	// a ratio for max_latency_ratio.
	Value    float64 `json:"value"`
	Limit    float64 `json:"limit"`
	Why      string  `json:"why"`
	Breaking bool    `json:"breaking"`
}

type replicaView struct {
	ID             string     `json:"id"`
	Pods           []string   `json:"pods"`
	AppliedVersion int64      `json:"applied_version"`
	AppliedAt      *time.Time `json:"applied_at,omitempty"`
	SeenAgoNS      int64      `json:"seen_ago_ns"`
}

type auditView struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Scope  string    `json:"scope"`
	Reason string    `json:"reason"`
	Stage  int       `json:"stage"`
	// Before and After are the flags documents around the change.
	Before string `json:"before"`
	After  string `json:"after"`
}

// newStatusView maps a status (and the error that made it partial, and
// the live replicas) to its JSON, as of now.
func newStatusView(st rollout.Status, err error, replicas []rollout.Replica, now time.Time) statusView {
	v := statusView{Stage: st.Stage, StageName: st.StageName, Since: timeOrNil(st.Since), FlagsVersion: st.FlagsVersion,
		FlagsInvalid: st.FlagsInvalid, Pods: []podView{}, Gates: []gateView{}, Ready: st.Ready, Replicas: []replicaView{},
		Evidence: evidenceView{Pods: orEmpty(st.Evidence.Pods), Since: timeOrNil(st.Evidence.Since), Observations: st.Evidence.Observations,
			Classes: map[string]int64{}, ShadowFaults: st.Evidence.ShadowFaults,
			AuthorityMeanNS: int64(st.Evidence.AuthorityMean), ShadowMeanNS: int64(st.Evidence.ShadowMean),
			LatencySamples: st.Evidence.LatencySamples}}
	if err != nil {
		v.Error = strings.TrimPrefix(err.Error(), "rollout: ")
	}
	if n := st.Next; n != nil {
		g := gatesView{MinObservations: n.Gates.MinObservations, MinDurationNS: int64(n.Gates.MinDuration.Duration),
			MaxRates: map[string]float64{}, MaxShadowErrorRate: n.Gates.MaxShadowErrorRate, MaxLatencyRatio: n.Gates.MaxLatencyRatio}
		for c, r := range n.Gates.MaxRates {
			g.MaxRates[string(c)] = r
		}
		v.Next = &stageView{Name: n.Name, Mode: string(n.Mode), Pods: orEmpty(n.Pods), Percent: n.Percent, Gates: g}
	}
	for _, p := range st.Pods {
		pv := podView{Pod: p.Pod, Mode: string(p.Mode),
			Kill:      killView{State: string(p.Kill.State), Reason: p.Kill.Reason, Actor: p.Kill.Actor, Since: timeOrNil(p.Kill.Since)},
			Effective: decisionView{Mode: string(p.Effective.Mode), Kill: string(p.Effective.Kill), Version: p.Effective.Version},
			Handoffs:  newHandoffsView(p, st.FlagsVersion, now)}
		if p.Ramp != nil {
			pv.Ramp = &rampView{Mode: string(p.Ramp.Mode), Percent: p.Ramp.Percent}
		}
		v.Pods = append(v.Pods, pv)
	}
	for c, n := range st.Evidence.Classes {
		v.Evidence.Classes[string(c)] = n
	}
	for _, g := range st.Gates {
		v.Gates = append(v.Gates, gateView{Gate: g.Gate, Pass: g.Pass, Value: g.Value, Limit: g.Limit, Why: g.Why, Breaking: g.Breaking})
	}
	for _, r := range replicas {
		v.Replicas = append(v.Replicas, replicaView{ID: r.ID, Pods: orEmpty(r.Pods), AppliedVersion: r.AppliedVersion,
			AppliedAt: timeOrNil(r.AppliedAt), SeenAgoNS: int64(r.SeenAgo)})
	}
	return v
}

func newHistoryView(hs []rollout.AuditEntry) []auditView {
	out := []auditView{}
	for _, h := range hs {
		out = append(out, auditView{ID: h.ID, At: h.At.UTC(), Actor: h.Actor, Action: h.Action, Scope: h.Scope, Reason: h.Reason,
			Stage: h.Stage, Before: h.Before, After: h.After})
	}
	return out
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
