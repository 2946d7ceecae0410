package redisstore

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Tracing. Each script run (and each Apply of the change feed) is a span
// named for its caller, the name its metrics carry, with that name in the
// reservoir.caller attribute. Only a call made inside a trace gets a
// span: the reaper and the relay's idle rounds would otherwise start a
// root trace each.

// scope is the instrumentation scope of the store's spans.
const scope = "github.com/seed31b0e981/reservoir/redisstore"

// callerKey is the span attribute of the caller (telemetry.CallerKey; the
// store does not import the telemetry package).
const callerKey = "reservoir.caller"

// startSpan starts the span of a call for caller, or returns ctx and nil
// outside a trace. The tracer is looked up per call: a test may install a
// tracer provider after the store was built.
func startSpan(ctx context.Context, caller string) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, nil
	}
	return otel.GetTracerProvider().Tracer(scope).Start(ctx, "redisstore."+caller,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "redis"), attribute.String(callerKey, caller)))
}

// endSpan ends span (nil: none), recording err.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
