package compare_test

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/reservation"
)

func benchObservation(a, s compare.Outcome) compare.Observation {
	return compare.Observation{Op: compare.OpReserve, Pod: "pod-a", Shop: 1, Token: "cart-1", Mode: "shadow",
		At: time.Unix(1_700_000_000, 0), Authority: a, Shadow: s}
}

// Classification is on every dual-written call's path (in the shadow's
// slot). Run with `go test -run '^$' -bench . -benchmem ./compare/`.
func BenchmarkClassify(b *testing.B) {
	lines := []reservation.Allocation{{Item: 1, Location: 1, Quantity: 2}, {Item: 2, Location: 1, Quantity: 1}, {Item: 3, Location: 2, Quantity: 1}}
	other := []reservation.Allocation{{Item: 1, Location: 2, Quantity: 2}, {Item: 2, Location: 1, Quantity: 1}, {Item: 3, Location: 2, Quantity: 1}}
	redis := compare.Outcome{Store: reservation.AuthorityRedis, Result: compare.ResultReserved, Allocations: lines, Latency: time.Millisecond}
	cases := []struct {
		name string
		o    compare.Observation
	}{
		{"match", benchObservation(redis, compare.Outcome{Store: reservation.AuthorityMySQL, Result: compare.ResultReserved, Allocations: lines})},
		{"allocation-mismatch", benchObservation(redis, compare.Outcome{Store: reservation.AuthorityMySQL, Result: compare.ResultReserved, Allocations: other})},
		{"stockout-race", benchObservation(redis, compare.Outcome{Store: reservation.AuthorityMySQL, Result: compare.ResultInsufficient,
			Short: []reservation.ShortLine{{Item: 1, Requested: 2, Unheld: 1}}})},
		{"shadow-error", benchObservation(redis, compare.Outcome{Store: reservation.AuthorityMySQL, Err: reservation.ErrContention})},
		{"shadow-skipped", benchObservation(redis, compare.Outcome{Store: reservation.AuthorityMySQL, Skipped: true})},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = compare.Classify(c.o, compare.DefaultRules)
			}
		})
	}
}

// Observe is what the facade's observer costs per call when the stores
// agree: classification, the Prometheus counters and histograms, and the
// in-memory stats. The comparer never touches its database here (its
// flush is an hour away and a match writes no diff record).
func BenchmarkObserveMatch(b *testing.B) {
	db, err := sql.Open("mysql", "bench@tcp(127.0.0.1:1)/none")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	c, err := compare.New(compare.Config{DB: db, Registerer: prometheus.NewRegistry(), FlushInterval: time.Hour,
		CleanupInterval: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Close(ctx)
	}()
	as := []reservation.Allocation{{Item: 1, Location: 1, Quantity: 1}}
	o := benchObservation(compare.Outcome{Store: reservation.AuthorityRedis, Result: compare.ResultReserved, Allocations: as, Latency: time.Millisecond},
		compare.Outcome{Store: reservation.AuthorityMySQL, Result: compare.ResultReserved, Allocations: as, Latency: 3 * time.Millisecond})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Observe(o)
		}
	})
}
