package reconcile

import "context"

// SetRepairHooks sets what runs between a shop's look and its repair
// (before), and between the repair and the look that checks it (after):
// where a test lands the operations that are in flight in production.
func SetRepairHooks(r *Reconciler, before, after func(shop int64)) {
	r.beforeRepair, r.afterRepair = before, after
}

// SetDuringLook sets what runs in each look while its shop is held still,
// with the look's context: a slow store, played by a test.
func SetDuringLook(r *Reconciler, f func(ctx context.Context)) { r.duringLook = f }
