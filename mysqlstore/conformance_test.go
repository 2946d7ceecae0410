package mysqlstore_test

import (
	"testing"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/reservation/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	exercise(t, false)
}

// The store sending one statement per round trip (the shape before
// batches, kept for the bench) must answer the same.
func TestConformanceUnbatched(t *testing.T) {
	t.Parallel()
	exercise(t, true)
}

func exercise(t *testing.T, unbatched bool) {
	storetest.Exercise(t, func(t *testing.T) storetest.Harness {
		db := testdb.New(t)
		s, err := mysqlstore.New(mysqlstore.Config{DB: db.DB, PoolCap: 20, Limits: reservation.Limits{MaxQuantity: 20}, Unbatched: unbatched})
		if err != nil {
			t.Fatal(err)
		}
		return storetest.Harness{Store: s, Ledger: s, Decide: decide(s), HandOff: handOff(s)}
	})
}
