package compare_test

import (
	"fmt"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/reservation"
)

// Two callers race for the last unit: Redis (the authority) gives it to one,
// MySQL (the shadow) to the other. Each sees reserved on one side and
// insufficient one unit short on the other: stock-out noise, not a
// mismatch. A shadow that says insufficient with far less stock than asked
// for is a real mismatch.
func ExampleClassify() {
	got := compare.Outcome{Store: reservation.AuthorityRedis, Result: compare.ResultReserved,
		Allocations: []reservation.Allocation{{Item: 7, Location: 1, Quantity: 1}}}
	short := compare.Outcome{Store: reservation.AuthorityMySQL, Result: compare.ResultInsufficient,
		Short: []reservation.ShortLine{{Item: 7, Requested: 1, Unheld: 0}}}
	fmt.Println(compare.Classify(compare.Observation{Op: compare.OpReserve, Authority: got, Shadow: short}, compare.Rules{}))

	big := got
	big.Allocations = []reservation.Allocation{{Item: 7, Location: 1, Quantity: 40}}
	far := compare.Outcome{Store: reservation.AuthorityMySQL, Result: compare.ResultInsufficient,
		Short: []reservation.ShortLine{{Item: 7, Requested: 40, Unheld: 3}}}
	fmt.Println(compare.Classify(compare.Observation{Op: compare.OpReserve, Authority: big, Shadow: far}, compare.Rules{}))
	// Output:
	// stockout_race
	// outcome_mismatch
}
