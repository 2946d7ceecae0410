package redisstore_test

import (
	"testing"

	"github.com/seed31b0e981/reservoir/reservation/storetest"
)

// a. The conformance suite, on a standalone Redis and on the 3-master
// cluster, each subtest with its own key prefix and its own ledger
// database. Redis decides a shop without a fence, so Decide is not
// needed; a handoff away from Redis is its first step, Yield.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			storetest.Exercise(t, func(t *testing.T) storetest.Harness {
				b := setup(t, srv.new)
				return storetest.Harness{
					Store:  b.s,
					Ledger: b.ledger,
					HandOff: func(t *testing.T, shop int64) {
						if f, err := b.s.Yield(ctx(t), shop, 1); err != nil || f.Decider != "mysql" {
							t.Fatalf("yield shop %d: %v %v", shop, f, err)
						}
					},
				}
			})
		})
	}
}
