package mysqlstore

import (
	"strconv"
	"testing"
)

// Statement building on the reserve path: what every reserve pays in the
// process before the first byte goes to the server. Run with
// `go test -run '^$' -bench . -benchmem ./mysqlstore/` (benchstat-friendly:
// add -count 10).
func BenchmarkReserveStatements(b *testing.B) {
	for _, lines := range []int{1, 4} {
		b.Run("units-"+strconv.Itoa(lines)+"-lines", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = reserveUnitsRangeQuery(lines, true)
			}
		})
		b.Run("units-from-head-"+strconv.Itoa(lines)+"-lines", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = reserveUnitsQuery(lines)
			}
		})
		counts := make([]int, lines)
		for i := range counts {
			counts[i] = 1
		}
		b.Run("delete-"+strconv.Itoa(lines)+"-lines", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = reserveDeleteQuery(counts)
			}
		})
		b.Run("insert-holds-"+strconv.Itoa(lines)+"-lines", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = insertHoldsQuery(callerReserve, lines)
			}
		})
	}
	b.Run("refill-1000-units", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = poolInsertQuery(callerReplenish, 1000)
		}
	})
}

// Where a reserve starts its scan: every caller of a hot item reads and
// updates the same slot.
func BenchmarkPivots(b *testing.B) {
	var p pivots
	hot := key{1, 42, 1}
	p.learn(hot, 1_000_000)
	b.Run("hot-item-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				from, _ := p.pick(hot, 1000)
				p.learn(hot, from+1)
			}
		})
	})
	b.Run("spread", func(b *testing.B) {
		b.ReportAllocs()
		i := int64(0)
		for b.Loop() {
			i++
			k := key{1, i % 100_000, 1}
			from, _ := p.pick(k, 1000)
			p.learn(k, from+1)
		}
	})
}
