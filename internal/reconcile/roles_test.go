package reconcile_test

import (
	"github.com/seed31b0e981/reservoir/internal/reconcile"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/rollout"
)

// The real stores and mirror play the roles a reconciliation reads and
// repairs through; the package itself imports neither store. And the
// Reconciler is what the rollout controller checks a kill switch with.
var (
	_ reconcile.MySQL    = (*mysqlstore.Store)(nil)
	_ reconcile.Redis    = (*redisstore.Store)(nil)
	_ reconcile.Repairer = (*mirror.Mirror)(nil)
	_ rollout.Reconciler = (*reconcile.Reconciler)(nil)
)
