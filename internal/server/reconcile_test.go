package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/seed31b0e981/reservoir/internal/cell"
)

// Issue 27 (7): after the demo's `reconcile --repair` the dashboard's
// drift panel said "not run by this replica yet": the demo repaired pod-a
// beside the server, not through it. A reconciliation the server's process
// runs through RunReconcile is this replica's last one, as
// POST /admin/reconcile's are: GET /admin/reconcile (what the panel reads)
// answers it, said to be a repair.
func TestRunReconcileIsTheReplicasLast(t *testing.T) {
	t.Parallel()
	h := setup(t, options{})
	ctx := context.Background()
	if r := h.admin("GET", "/admin/reconcile?pod=pod-a", nil); r.status != 404 {
		t.Fatalf("before any run: %d %s", r.status, r.raw)
	}
	v, err := h.srv.RunReconcile(ctx, "pod-a", h.cell.Repair)
	if err != nil || v.Report == nil || !v.Report.Clean || !v.Report.Report.Repair {
		t.Fatalf("a repair through the server: %+v %v", v, err)
	}
	r := h.admin("GET", "/admin/reconcile?pod=pod-a", nil)
	rep := mapOf(r.body["report"])
	if r.status != 200 || str(rep["summary"]) != v.Report.Summary || mapOf(rep["report"])["repair"] != true {
		t.Errorf("GET /admin/reconcile after the repair: %d %s", r.status, r.raw)
	}
	// A look from the page afterwards is the last one again, not a repair.
	if r := h.admin("POST", "/admin/reconcile?pod=pod-a", nil); r.status != 200 || mapOf(mapOf(r.body["report"])["report"])["repair"] != false {
		t.Errorf("POST /admin/reconcile: %d %s", r.status, r.raw)
	}

	// A failed run is kept too, its cause as a class; a pod the topology
	// does not have is refused.
	failed := func(context.Context, string) (cell.DriftReport, error) {
		return cell.DriftReport{}, context.DeadlineExceeded
	}
	if _, err := h.srv.RunReconcile(ctx, "pod-b", failed); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a failed run: %v", err)
	}
	if r := h.admin("GET", "/admin/reconcile?pod=pod-b", nil); r.status != 200 || !strings.HasPrefix(str(r.body["error"]), "the reconcile failed (timeout)") {
		t.Errorf("GET /admin/reconcile after a failed run: %d %s", r.status, r.raw)
	}
	if _, err := h.srv.RunReconcile(ctx, "pod-z", h.cell.Repair); err == nil || !strings.Contains(err.Error(), `no pod "pod-z"`) {
		t.Errorf("a pod the topology does not have: %v", err)
	}
}
