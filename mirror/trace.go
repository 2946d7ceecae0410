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

// startCompare starts the span of the comparison of a reserve MySQL
// decided (Config.Evaluated): "mirror.compare", under the apply's span
// (ctx), linked to the checkout call that wrote the change, with Redis's
// own answer to the cart. The caller ends it once the comparer has it.
func startCompare(ctx context.Context, c reservation.Change, redis reservation.ReserveResult, err error) trace.Span {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return trace.SpanFromContext(context.Background()) // a no-op span
	}
	opts := []trace.SpanStartOption{trace.WithAttributes(attribute.Int64("reservoir.shop", c.Shop), attribute.String("reservoir.token", c.Token),
		attribute.Int64("reservoir.change_id", c.ID), attribute.String("reservoir.redis_status", string(redis.Status)))}
	if sc := spanContext(c.Trace); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	_, span := otel.GetTracerProvider().Tracer(scope).Start(ctx, "mirror.compare", opts...)
	if err != nil {
		span.RecordError(err)
	}
	return span
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
