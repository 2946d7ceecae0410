package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
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
	v, err := s.runReconcile(r.Context(), pod, s.cfg.Reconciler.Report, RequestID(r.Context()))
	if err != nil {
		s.internal(w, r, "reconcile pod "+pod, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// RunReconcile runs run on pod as POST /admin/reconcile runs the
// configured Reconciler (under Config.ReconcileTimeout, timed), and keeps
// its result as the pod's last reconciliation at this replica: what GET
// /admin/reconcile answers and the dashboard's drift panel shows. A
// process that serves the dashboard and reconciles by itself runs its
// reconciliations through it, so that the panel shows them: the demo's
// recovery runs its repair (cell.Cell.Repair) so. The pod must be one of
// the topology's.
func (s *Server) RunReconcile(ctx context.Context, pod string, run ReportFunc) (wire.Reconciliation, error) {
	if s.cfg.Cell.Pod(pod) == nil {
		return wire.Reconciliation{}, fmt.Errorf("server: no pod %q in the topology (pods: %s)", pod, strings.Join(s.cfg.Cell.Topology.PodNames(), ", "))
	}
	return s.runReconcile(ctx, pod, run, "")
}

// runReconcile runs and records a reconciliation; requestID names the
// admin call's in the error it records ("" outside one).
func (s *Server) runReconcile(ctx context.Context, pod string, run ReportFunc, requestID string) (wire.Reconciliation, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReconcileTimeout)
	defer cancel()
	start := time.Now()
	report, err := run(ctx, pod)
	v := wire.Reconciliation{Pod: pod, At: start.UTC(), TookMs: float64(time.Since(start).Microseconds()) / 1000}
	if err != nil {
		v.Error = "the reconcile failed (" + failureClass(err) + ")"
		if requestID != "" {
			v.Error += "; the server's log has the error under request id " + requestID
		}
	} else {
		v.Report = &wire.DriftReport{Clean: report.Clean, Summary: report.Summary, Report: wire.ReconcileReportOf(report.Report)}
	}
	s.reconcileMu.Lock()
	s.reconciled[pod] = v
	s.reconcileMu.Unlock()
	return v, err
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
