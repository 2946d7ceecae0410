package bench

import (
	"math/rand/v2"
	"slices"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Scenario names: the four load shapes of seed 000 section 8.3, the
// claim storm, and the handoffs of a loaded shop (handoff.go). The kill
// switch under a flood is ScenarioKillFlood (killflood.go).
const (
	ScenarioHot     = "hot"
	ScenarioUniform = "uniform"
	ScenarioDrain   = "drain"
	ScenarioCarts   = "carts"
	ScenarioClaim   = "claim"
	ScenarioHandoff = "handoff"
)

// location is the one location every item is stocked at: the scenarios
// measure contention on an item x location, not the location rule.
const location = 1

// scenario is the shape of a point's load.
type scenario struct {
	name  string
	about string
	// items in the catalog: ids 1..items.
	items int
	// stock is the ledger's stock of item i (0-based).
	stock func(i int) int64
	// prime: fill item i's unit pool before the window (a pool refills
	// itself inline on its first reserve; priming keeps thousands of first
	// refills out of the measurement). Only the pool variants look at it.
	prime func(i int) bool
	// poolCap, when set, replaces Options.PoolCap for the pool variants.
	poolCap int64
	// cart appends the next call's lines to lines[:0].
	cart func(r *rand.Rand, lines []reservation.Line) []reservation.Line
	// drain: the window starts with the first call and ends when every
	// caller has been refused once: the stock is gone.
	drain bool
	// claims: after the reserve window, a claim window claims the holds.
	claims bool
	// handoff: the point is a shop loaded in shadow mode and handed off
	// three times under probe callers (handoff.go), not a window.
	handoff bool
	// killflood: the point is `reservoir serve` replicas whose checkout
	// listener is flooded while the kill switch is flipped (killflood.go),
	// not a window; its concurrency is the attacking connections.
	killflood bool
}

func line(item int64) reservation.Line {
	return reservation.Line{Item: item, Quantity: 1, Locations: []int64{location}}
}

func always(int) bool { return true }

// hotShare is the share of calls on the hot item.
const hotShare = 0.99

var scenarios = map[string]*scenario{
	ScenarioHot: {
		name:  ScenarioHot,
		about: "99% of calls reserve 1 unit of item 1 (10M in stock, pool primed); 1% spread over 99 cold items (100 each, pools fill on first use)",
		items: 100,
		stock: func(i int) int64 {
			if i == 0 {
				return 10_000_000
			}
			return 100
		},
		prime: func(i int) bool { return i == 0 },
		cart: func(r *rand.Rand, lines []reservation.Line) []reservation.Line {
			if r.Float64() < hotShare {
				return append(lines[:0], line(1))
			}
			return append(lines[:0], line(2+r.Int64N(99)))
		},
	},
	ScenarioUniform: {
		name:    ScenarioUniform,
		about:   "1 unit of one of 1000 items, uniformly (500 each; pools capped at 50 and primed)",
		items:   1000,
		stock:   func(int) int64 { return 500 },
		prime:   always,
		poolCap: 50,
		cart: func(r *rand.Rand, lines []reservation.Line) []reservation.Line {
			return append(lines[:0], line(1+r.Int64N(1000)))
		},
	},
	ScenarioDrain: {
		name:  ScenarioDrain,
		about: "every caller reserves 1 unit of item 1 until refused; 5000 in stock, pool cap 1000: four refills under load, and exactly 5000 holds at the end",
		items: 1,
		stock: func(int) int64 { return 5000 },
		prime: always,
		drain: true,
		cart: func(r *rand.Rand, lines []reservation.Line) []reservation.Line {
			return append(lines[:0], line(1))
		},
	},
	ScenarioCarts: {
		name:  ScenarioCarts,
		about: "carts of 2-4 distinct items out of 20, in random order, 1 unit each (1M each, pools primed)",
		items: 20,
		stock: func(int) int64 { return 1_000_000 },
		prime: always,
		cart: func(r *rand.Rand, lines []reservation.Line) []reservation.Line {
			lines = lines[:0]
			n := 2 + r.IntN(3)
			for _, i := range r.Perm(20)[:n] {
				lines = append(lines, line(int64(i+1)))
			}
			return lines
		},
	},
	ScenarioClaim: {
		name:   ScenarioClaim,
		about:  "reserve 1 unit of item 1 for one window, then claim those holds for the next: the ledger row is the hot row",
		items:  1,
		stock:  func(int) int64 { return 10_000_000 },
		prime:  always,
		claims: true,
		cart: func(r *rand.Rand, lines []reservation.Line) []reservation.Line {
			return append(lines[:0], line(1))
		},
	},
	ScenarioHandoff: {
		name: ScenarioHandoff,
		about: "a shop of n reservations (half live holds with a 10 min TTL, half released), loaded in shadow mode, " +
			"handed off three times (advance to mysql, kill switch redis, kill switch released) while probe callers reserve and release " +
			"carts of 1-3 of its 100 items (1M each) through the facade, with the relay and the handoff sweeper running",
		items:   handoffItems,
		stock:   func(int) int64 { return handoffStock },
		prime:   always,
		handoff: true,
		cart: func(r *rand.Rand, lines []reservation.Line) []reservation.Line {
			lines = lines[:0]
			for _, i := range r.Perm(handoffItems)[:1+r.IntN(3)] {
				lines = append(lines, line(int64(i+1)))
			}
			return lines
		},
	},
	ScenarioKillFlood: {
		name: ScenarioKillFlood,
		about: "two `reservoir serve` replicas sharing their flags through the control database (pod-a in shadow mode); " +
			"c connections flood the first replica's checkout listener (or both replicas', --killflood-target both) with reserves, " +
			"each 100 ms after its last answer, while the kill switch of pod-a is engaged and released through the first replica's admin API " +
			"(or the second's, --killflood-admin spare)",
		killflood: true,
	},
}

// ScenarioNames lists the scenarios, sorted.
func ScenarioNames() []string {
	out := make([]string, 0, len(scenarios))
	for n := range scenarios {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// ScenarioAbout describes a scenario for a person.
func ScenarioAbout(name string) string {
	if s, ok := scenarios[name]; ok {
		return s.about
	}
	return ""
}
