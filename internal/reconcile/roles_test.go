package reconcile_test

import (
	"github.com/seed31b0e981/reservoir/internal/reconcile"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
)

// The real stores and mirror play the roles a reconciliation reads and
// repairs through; the package itself imports neither store.
var (
	_ reconcile.MySQL    = (*mysqlstore.Store)(nil)
	_ reconcile.Redis    = (*redisstore.Store)(nil)
	_ reconcile.Repairer = (*mirror.Mirror)(nil)
)
