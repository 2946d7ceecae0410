package mysqlstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// A store call inside a trace is a span named for its caller tag, a
// child of the caller's span; one outside any trace is none. Claims the
// store combines into one group transaction are traced in the group's own
// trace, linked to each traced caller. (Not parallel: the global tracer
// provider is the process's.)
func TestStoreCallSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	b := setup(t, 100)
	b.stock(t, 1, 1, 50)
	const n = 5
	for i := range n {
		lines := []reservation.Line{{Item: 1, Quantity: 1, Locations: []int64{1}}}
		if res, err := b.s.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: fmt.Sprintf("g%d", i), Lines: lines, TTL: time.Minute}); err != nil || res.Status != reservation.StatusReserved {
			t.Fatalf("reserve: %+v %v", res, err)
		}
	}
	if got := len(rec.Ended()); got != 0 {
		t.Fatalf("%d spans of calls outside any trace, want none", got)
	}

	callers := make([]trace.Span, n)
	var wg sync.WaitGroup
	call := func(i int) {
		ctx, span := tp.Tracer("test").Start(context.Background(), fmt.Sprintf("caller-%d", i))
		callers[i] = span
		wg.Go(func() {
			defer span.End()
			if _, err := b.s.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: fmt.Sprintf("g%d", i)}); err != nil {
				t.Errorf("claim g%d: %v", i, err)
			}
		})
	}
	wave(t, func(f func(int)) { mysqlstore.SetBeforeClaimGroup(b.s, f) }, func() int { return mysqlstore.WaitingClaims(b.s) }, n-1,
		func() { call(0) }, func() {
			for i := 1; i < n; i++ {
				call(i)
			}
		})
	wg.Wait()

	byParent := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	var group sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		byParent[s.Parent().SpanID()] = append(byParent[s.Parent().SpanID()], s)
		if s.Name() == "mysqlstore.group" {
			group = s
		}
	}
	// The first claim ran alone, in its caller's trace.
	alone := byParent[callers[0].SpanContext().SpanID()]
	if len(alone) != 1 || alone[0].Name() != "mysqlstore.claim" || !hasAttr(alone[0], "reservoir.caller", "claim") {
		t.Errorf("the claim run alone: %v, want one mysqlstore.claim span (caller claim) under its caller's", names(alone))
	}
	if group == nil {
		t.Fatalf("no mysqlstore.group span among %v", names(rec.Ended()))
	}
	linked := map[trace.SpanID]bool{}
	for _, l := range group.Links() {
		linked[l.SpanContext.SpanID()] = true
	}
	for i := 1; i < n; i++ {
		if !linked[callers[i].SpanContext().SpanID()] {
			t.Errorf("the group span does not link caller %d", i)
		}
	}
	if group.Parent().IsValid() || !hasAttr(group, "reservoir.group_size", fmt.Sprint(n-1)) {
		t.Errorf("group span: parent %v, attributes %v; want a root of %d calls", group.Parent(), group.Attributes(), n-1)
	}
	if in := byParent[group.SpanContext().SpanID()]; len(in) != 1 || in[0].Name() != "mysqlstore.claim" {
		t.Errorf("under the group span: %v, want its transaction's mysqlstore.claim", names(in))
	}
}

func hasAttr(s sdktrace.ReadOnlySpan, key, value string) bool {
	for _, a := range s.Attributes() {
		if string(a.Key) == key && a.Value.String() == value {
			return true
		}
	}
	return false
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}
