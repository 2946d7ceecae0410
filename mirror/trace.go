package mirror

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Tracing (docs/tracing.md). Each apply of a batch of changes to Redis is
// a span, "mirror.apply", the root of a trace of its own: the relay works
// for many checkout calls at once, after they answered. The span links to
// the trace of every call that wrote one of the changes (the traceparent
// the change carries), so a checkout call's trace leads to the apply that
// made Redis follow it, and the other way round.

// scope is the instrumentation scope of the relay's spans.
const scope = "github.com/seed31b0e981/reservoir/mirror"

// startApply starts the span of applying changes. With tracing off the
// global tracer's span records nothing and the links are not parsed.
func startApply(ctx context.Context, changes []reservation.Change) (context.Context, trace.Span) {
	tracer := otel.GetTracerProvider().Tracer(scope)
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer)}
	ctx, span := tracer.Start(ctx, "mirror.apply", opts...)
	if !span.IsRecording() {
		return ctx, span
	}
	span.SetAttributes(attribute.Int("reservoir.changes", len(changes)))
	seen := map[trace.SpanID]bool{}
	for _, c := range changes {
		if sc := spanContext(c.Trace); sc.IsValid() && !seen[sc.SpanID()] {
			seen[sc.SpanID()] = true
			span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{
				attribute.Int64("reservoir.change_id", c.ID), attribute.Int64("reservoir.shop", c.Shop), attribute.String("reservoir.change_kind", string(c.Kind))}})
		}
	}
	return ctx, span
}

// endApply ends an apply's span with how many changes were applied.
func endApply(span trace.Span, applied int, err error) {
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("reservoir.applied", applied))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// spanContext parses a change's traceparent ("" or invalid: the zero,
// invalid span context).
func spanContext(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	return trace.SpanContextFromContext(ctx)
}
