package redisstore_test

import (
	"testing"

	"github.com/seed31b0e981/reservoir/reservation/storetest"
)

// a. The conformance suite, on a standalone Redis and on the 3-master
// cluster, each subtest with its own key prefix and its own ledger
// database.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			storetest.Exercise(t, func(t *testing.T) storetest.Harness {
				b := setup(t, srv.new)
				return storetest.Harness{Store: b.s, Ledger: b.ledger}
			})
		})
	}
}
