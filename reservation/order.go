package reservation

import (
	"cmp"
	"slices"
)

// SortAllocations sorts allocations by (Item, Location): the global lock
// order every store uses, so that two carts naming the same items in
// different orders never wait on each other in a cycle.
func SortAllocations(as []Allocation) {
	slices.SortFunc(as, func(a, b Allocation) int {
		if c := cmp.Compare(a.Item, b.Item); c != 0 {
			return c
		}
		return cmp.Compare(a.Location, b.Location)
	})
}

// SortedAllocations returns a sorted copy of as (SortAllocations' order),
// leaving the caller's slice as it is.
func SortedAllocations(as []Allocation) []Allocation {
	out := slices.Clone(as)
	SortAllocations(out)
	return out
}

// SameLines reports whether a hold's allocations serve exactly the given
// lines: the same items with the same quantities. It is how a repeated
// Reserve tells a retry (same cart) from a conflicting reuse of the token.
func SameLines(lines []Line, held []Allocation) bool {
	want := make(map[int64]int64, len(lines))
	for _, ln := range lines {
		want[ln.Item] += ln.Quantity
	}
	got := make(map[int64]int64, len(held))
	for _, a := range held {
		got[a.Item] += a.Quantity
	}
	if len(want) != len(got) {
		return false
	}
	for item, q := range want {
		if got[item] != q {
			return false
		}
	}
	return true
}
