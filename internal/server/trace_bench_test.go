package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/internal/telemetry"
)

// What tracing costs a checkout call: a one-line reserve through the
// server's whole handler (admission, the access log, the facade, Redis
// deciding, real servers), called in process without a network, in three
// variants:
//
//   - off: Config.Tracing false and no SDK, as serve runs by default;
//   - noop: the listeners wrapped in otelhttp over a no-op provider (the
//     cost of the wrapping alone);
//   - on: an SDK with every span sampled, batched to an in-memory
//     exporter (tracetest), as with OTEL_TRACES_EXPORTER set.
//
// BenchmarkCheckoutTracing alternates the variants call by call, so the
// noise of a shared machine hits them alike, and reports each variant's
// mean and the ratios; BenchmarkCheckoutTracingVariants runs them one
// after the other, for their allocations. BENCHMARKS.md, "Tracing".

// tracingBench is the three variants' handlers on one cell.
type tracingBench struct {
	handlers map[string]http.Handler
	sdk      trace.TracerProvider
	exp      *tracetest.InMemoryExporter
	seq      atomic.Int64
}

var tracingVariants = []string{"off", "noop", "on"}

func newTracingBench(b *testing.B) *tracingBench {
	topo, _ := topologyFor(b, b.TempDir())
	writeFlags(b, topo.FlagsFile, nil) // Redis decides every shop
	c, _, _, _ := openCell(b, topo)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	tb := &tracingBench{handlers: map[string]http.Handler{}, exp: tracetest.NewInMemoryExporter()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tb.exp))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tb.sdk = telemetry.Scoped(tp)
	prev := otel.GetTracerProvider()
	b.Cleanup(func() { otel.SetTracerProvider(prev) })
	for _, v := range tracingVariants {
		srv, err := server.New(server.Config{Cell: c, Clients: testClients(b, ""), Tracing: v != "off",
			Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), SampleInterval: time.Minute, SeriesWindow: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(srv.Close)
		tb.handlers[v] = srv.Handler()
	}
	if code := tb.call(b, "off", "POST", "/v1/shops/1001/items/7/locations/1/adjust", `{"available": 1000000}`); code != http.StatusOK {
		b.Fatalf("adjust: %d", code)
	}
	return tb
}

// call sends one request to a variant's handler, with that variant's
// global tracer provider installed, and returns the status.
func (tb *tracingBench) call(b *testing.B, variant, method, path, body string) int {
	if variant == "on" {
		otel.SetTracerProvider(tb.sdk)
	} else {
		otel.SetTracerProvider(noop.NewTracerProvider())
	}
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+clientToken)
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	tb.handlers[variant].ServeHTTP(w, req)
	return w.Code
}

// reserve places one new one-line hold through variant.
func (tb *tracingBench) reserve(b *testing.B, variant string) {
	body := fmt.Sprintf(`{"token":"bench-%d","ttl_ms":600000,"lines":[{"item":7,"quantity":1,"locations":[1]}]}`, tb.seq.Add(1))
	if code := tb.call(b, variant, "POST", "/v1/shops/1001/reservations", body); code != http.StatusCreated {
		b.Fatalf("reserve (%s): %d", variant, code)
	}
	if tb.seq.Load()%1024 == 0 {
		tb.exp.Reset() // keeps memory flat; the export itself is measured
	}
}

// go test -run '^$' -bench 'CheckoutTracing$' -benchtime 3000x -count 3 ./internal/server/
func BenchmarkCheckoutTracing(b *testing.B) {
	tb := newTracingBench(b)
	spent := map[string]time.Duration{}
	n := 0
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for k := range tracingVariants {
			// Each round starts with the next variant: none always runs
			// first, on a cache the previous round warmed.
			v := tracingVariants[(i+k)%len(tracingVariants)]
			start := time.Now()
			tb.reserve(b, v)
			spent[v] += time.Since(start)
		}
		n++
	}
	for _, v := range tracingVariants {
		b.ReportMetric(float64(spent[v].Nanoseconds())/float64(n), v+"-ns/call")
	}
	b.ReportMetric(float64(spent["noop"])/float64(spent["off"]), "noop/off")
	b.ReportMetric(float64(spent["on"])/float64(spent["off"]), "on/off")
}

// go test -run '^$' -bench 'CheckoutTracingVariants' -benchtime 2000x ./internal/server/
func BenchmarkCheckoutTracingVariants(b *testing.B) {
	tb := newTracingBench(b)
	for _, v := range tracingVariants {
		b.Run(v, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tb.reserve(b, v)
			}
		})
	}
}
