package redisstore_test

import (
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/redisstore"
)

// The store plays every role package mirror declares for a pod's Redis
// (the follower of MySQL's feed, the source of a copy ahead, a decider).
// The roles are declared where they are consumed and the store never
// imports mirror, so this assertion, in a test, is what keeps the two in
// step.
var _ mirror.Redis = (*redisstore.Store)(nil)
