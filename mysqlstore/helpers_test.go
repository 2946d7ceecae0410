package mysqlstore_test

import (
	"context"
	"testing"

	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// decide makes MySQL the decider of a shop, as a handoff from Redis with
// nothing to copy does (epoch 1).
func decide(s *mysqlstore.Store) func(t *testing.T, shop int64) {
	return func(t *testing.T, shop int64) {
		t.Helper()
		f, err := s.TakeOver(context.Background(), &reservation.Snapshot{Shop: shop}, 1)
		if err != nil || f.Decider != reservation.AuthorityMySQL {
			t.Fatalf("take over shop %d: %v %v", shop, f, err)
		}
	}
}

// handOff hands a shop MySQL decides to Redis (epoch 2).
func handOff(s *mysqlstore.Store) func(t *testing.T, shop int64) {
	return func(t *testing.T, shop int64) {
		t.Helper()
		f, err := s.Yield(context.Background(), shop, 2)
		if err != nil || f.Decider != reservation.AuthorityRedis {
			t.Fatalf("yield shop %d: %v %v", shop, f, err)
		}
	}
}
