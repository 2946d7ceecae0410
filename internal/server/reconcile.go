package server

import (
	"context"
	"net/http"
	"time"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/wire"
)

// Reconciler reports the drift between a pod's two stores (a full-state
// comparison: ledger, MySQL pool and holds, Redis quantities and holds).
// The cell's Reconcile is one: ReportFunc(cell.Reconcile).
type Reconciler interface {
	// Report compares the pod's stores now. It may take a while; it runs
	// under Config.ReconcileTimeout instead of the request timeout.
	Report(ctx context.Context, pod string) (cell.DriftReport, error)
}

// ReportFunc adapts a function to a Reconciler.
type ReportFunc func(ctx context.Context, pod string) (cell.DriftReport, error)

// Report implements Reconciler.
func (f ReportFunc) Report(ctx context.Context, pod string) (cell.DriftReport, error) {
	return f(ctx, pod)
}

func (s *Server) noReconciler(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Reconciler != nil {
		return false
	}
	writeProblem(w, r, problem{Status: http.StatusNotImplemented, Code: "no_reconciler",
		Message: "no reconciler is wired into this server: cross-store drift cannot be reported here yet"})
	return true
}

func (s *Server) reconcile(w http.ResponseWriter, r *http.Request) {
	if s.noReconciler(w, r) {
		return
	}
	pod, p := s.podParam(r, true)
	if p != nil {
		writeProblem(w, r, *p)
		return
	}
	// A large pod takes longer than the write timeout allows an answer:
	// this call gets its own deadline.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.ReconcileTimeout + 5*time.Second))
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReconcileTimeout)
	defer cancel()
	start := time.Now()
	report, err := s.cfg.Reconciler.Report(ctx, pod)
	v := wire.Reconciliation{Pod: pod, At: start.UTC(), TookMs: float64(time.Since(start).Microseconds()) / 1000}
	if err != nil {
		v.Error = "the reconcile failed (" + failureClass(err) + "); the server's log has the error under request id " + RequestID(r.Context())
	} else {
		v.Report = &wire.DriftReport{Clean: report.Clean, Summary: report.Summary, Report: wire.ReconcileReportOf(report.Report)}
	}
	s.reconcileMu.Lock()
	s.reconciled[pod] = v
	s.reconcileMu.Unlock()
	if err != nil {
		s.internal(w, r, "reconcile pod "+pod, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) lastReconcile(w http.ResponseWriter, r *http.Request) {
	if s.noReconciler(w, r) {
		return
	}
	pod, p := s.podParam(r, true)
	if p != nil {
		writeProblem(w, r, *p)
		return
	}
	s.reconcileMu.Lock()
	v, ok := s.reconciled[pod]
	s.reconcileMu.Unlock()
	if !ok {
		writeProblem(w, r, problem{Status: http.StatusNotFound, Code: "not_run",
			Message: "this replica has not reconciled pod " + pod + " yet: POST /admin/reconcile?pod=" + pod})
		return
	}
	writeJSON(w, http.StatusOK, v)
}
