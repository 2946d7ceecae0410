package mysqlstore

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing. A store call is traced from the connection's checkout to its
// release (conn), as one span named for its caller tag, the tag its SQL
// carries: the span and the server's query log name the same flow. Only a
// call made inside a trace gets a span: the background loops (the relay's
// polls, the reaper, the sweeper) would otherwise start a root trace per
// round.

// scope is the instrumentation scope of the store's spans.
const scope = "github.com/seed31b0e981/reservoir/mysqlstore"

// callerKey is the span attribute of the caller tag (telemetry.CallerKey;
// the store does not import the telemetry package).
const callerKey = "reservoir.caller"

// startSpan starts the span of a call for caller, or returns nil outside
// a trace. The tracer is looked up per call, not kept: a test may install
// a tracer provider after the store was built.
func startSpan(ctx context.Context, caller string) trace.Span {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	_, span := otel.GetTracerProvider().Tracer(scope).Start(ctx, "mysqlstore."+caller,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "mysql"), attribute.String(callerKey, caller)))
	return span
}

// startGroupSpan starts the span of a group transaction the combiner runs
// for several callers (combine.go), when any of them is traced (links:
// their spans): the group serves every caller at once, so it is the root
// of a trace of its own, linked to each caller's, and the call's span in
// the group (acquire) is its child. Outside any trace: ctx and nil.
func startGroupSpan(ctx context.Context, links []trace.Link, size int) (context.Context, trace.Span) {
	if len(links) == 0 {
		return ctx, nil
	}
	return otel.GetTracerProvider().Tracer(scope).Start(ctx, "mysqlstore.group",
		trace.WithNewRoot(), trace.WithLinks(links...), trace.WithAttributes(attribute.Int("reservoir.group_size", size)))
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

// traceparent is the W3C traceparent of ctx's span when it is recording,
// stored with a change-feed row so that the relay's apply can link to the
// call that wrote it; nil (NULL) otherwise, so a store without tracing
// writes what it always wrote.
func traceparent(ctx context.Context) any {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return nil
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	if tp := c["traceparent"]; tp != "" {
		return tp
	}
	return nil
}
