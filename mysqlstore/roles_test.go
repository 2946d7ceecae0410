package mysqlstore_test

import (
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/mysqlstore"
)

// The store plays every role package mirror declares for a pod's MySQL
// (the feed and its lease, the target of a copy ahead, a decider). The
// roles are declared where they are consumed and the store never imports
// mirror, so this assertion, in a test, is what keeps the two in step.
var _ mirror.MySQL = (*mysqlstore.Store)(nil)
