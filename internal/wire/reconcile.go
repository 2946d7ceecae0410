package wire

import (
	"time"

	"github.com/seed31b0e981/reservoir/internal/reconcile"
)

// A reconciliation's report: `reservoir reconcile --json` prints a list of
// ReconcileReport; POST and GET /admin/reconcile answer a Reconciliation.

// Reconciliation is one pod's last reconciliation by the answering
// replica: the answer of POST and GET /admin/reconcile.
type Reconciliation struct {
	// Pod is the pod reconciled.
	Pod string `json:"pod"`
	// At is when the run started.
	At time.Time `json:"at,omitzero"`
	// TookMs is how long it ran, in milliseconds.
	TookMs float64 `json:"took_ms"`
	// Report is what it found; left out when it failed (Error).
	Report *DriftReport `json:"report,omitempty"`
	// Error says that the run failed, and where the server's log has why;
	// left out when it did not.
	Error string `json:"error,omitempty"`
}

// DriftReport is a reconciliation's verdict and its full report.
type DriftReport struct {
	// Clean is true when nothing but notes was found.
	Clean bool `json:"clean"`
	// Summary is the report in one line.
	Summary string `json:"summary"`
	// Report is the full report, findings included.
	Report ReconcileReport `json:"report"`
}

// ReconcileReport is a reconciliation of one pod: each shop compared
// against the store that decides it (its fences say which).
type ReconcileReport struct {
	// Pod is the pod reconciled.
	Pod string `json:"pod"`
	// Shops counts the shops compared.
	Shops int `json:"shops"`
	// Findings are the drift found, repaired or not.
	Findings []Finding `json:"findings"`
	// Notes are what was found that is not drift (an empty pool, a MySQL
	// shadow hold that differs where Redis decides, ...).
	Notes []Finding `json:"notes"`
	// Counts are the drift findings per kind.
	Counts map[string]int `json:"counts"`
	// NoteCounts are the notes per kind.
	NoteCounts map[string]int `json:"note_counts"`
	// Repaired counts the drift findings a repair fixed.
	Repaired int `json:"repaired"`
	// Left counts the drift findings not repaired: the run's verdict.
	Left int `json:"left"`
	// MySQLNotWritten counts the shops in redis mode, whose MySQL side was
	// not compared: MySQL is not written there.
	MySQLNotWritten int `json:"mysql_not_written"`
	// Skipped counts the shops before the checkpoint on a resumed run.
	Skipped int `json:"skipped"`
	// Repair is true for a run that repaired (`reconcile --repair`): each
	// finding's and note's repaired says whether the look after the
	// repair no longer finds it.
	Repair bool `json:"repair"`
}

// Finding is one difference between a pod's stores: drift, or a note.
type Finding struct {
	// Shop is the shop it is in.
	Shop int64 `json:"shop"`
	// Side is the store it is about: "mysql" or "redis".
	Side string `json:"side"`
	// Kind classifies it ("missing_hold", "pool_mismatch", "fence", ...).
	Kind string `json:"kind"`
	// Where is what it is about: `token "t"`, `item I loc L`, or "" for
	// the shop's fence.
	Where string `json:"where"`
	// Detail is the finding with its numbers.
	Detail string `json:"detail"`
	// Decider is the store that decides the shop (the truth): "redis" or
	// "mysql".
	Decider string `json:"decider"`
	// Note is true for a finding that is not drift.
	Note bool `json:"note"`
	// Repaired is true when a repair fixed it.
	Repaired bool `json:"repaired"`
}

// ReconcileReportOf is rep as the wire shows it.
func ReconcileReportOf(rep reconcile.Report) ReconcileReport {
	return ReconcileReport{Pod: rep.Pod, Shops: rep.Shops, Findings: findingsOf(rep.Findings), Notes: findingsOf(rep.Notes),
		Counts: stringKeys(rep.Counts), NoteCounts: stringKeys(rep.NoteCounts), Repaired: rep.Repaired, Left: rep.Left,
		MySQLNotWritten: rep.MySQLNotWritten, Skipped: rep.Skipped, Repair: rep.Repair}
}

// ReconcileReportsOf is reps as the wire shows them ([] for none).
func ReconcileReportsOf(reps []reconcile.Report) []ReconcileReport {
	out := make([]ReconcileReport, 0, len(reps))
	for _, r := range reps {
		out = append(out, ReconcileReportOf(r))
	}
	return out
}

func findingsOf(fs []reconcile.Finding) []Finding {
	out := make([]Finding, 0, len(fs))
	for _, f := range fs {
		out = append(out, Finding{Shop: f.Shop, Side: f.Side, Kind: f.Kind, Where: f.Where, Detail: f.Detail, Decider: string(f.Decider),
			Note: f.Note, Repaired: f.Repaired})
	}
	return out
}
