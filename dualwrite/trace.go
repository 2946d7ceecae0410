package dualwrite

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// Tracing (docs/tracing.md). Each facade call is a span,
// "dualwrite.<op>", the parent of its store calls' spans; a shadow call
// is a span of its own, "dualwrite.shadow.<op>", a child of the call that
// caused it, ending after it whenever the caller did not wait. Outside a
// trace (no span in the context: tracing off and no traceparent, or a
// background caller) the facade starts nothing.

// scope is the instrumentation scope of the facade's spans.
const scope = "github.com/seed31b0e981/reservoir/dualwrite"

// The facade's span attributes.
const (
	attrPod     = "reservoir.pod"
	attrShop    = "reservoir.shop"
	attrOp      = "reservoir.op"
	attrMode    = "reservoir.mode"
	attrDecider = "reservoir.decider"
	attrStore   = "reservoir.store"
)

// startSpan starts the span of a facade call, or returns ctx and nil
// outside a trace. The tracer is looked up per call: a test may install a
// tracer provider after the facade was built.
func (f *Facade) startSpan(ctx context.Context, name string, op compare.Op, shop int64) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, nil
	}
	return otel.GetTracerProvider().Tracer(scope).Start(ctx, name,
		trace.WithAttributes(attribute.String(attrPod, f.cfg.Pod), attribute.Int64(attrShop, shop), attribute.String(attrOp, string(op))))
}

// endSpan ends span (nil: none), recording err. A refusal the domain
// names (insufficient stock, a claimed token) is an answer, not a failure
// of the call: it is an event, and the span's status stays unset.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		if !errors.Is(err, reservation.ErrInsufficientStock) && !errors.Is(err, reservation.ErrNotFound) &&
			!errors.Is(err, reservation.ErrAlreadyClaimed) && !errors.Is(err, reservation.ErrReleased) && !errors.Is(err, reservation.ErrExpired) {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// noteRoute records on ctx's span (when recording) the mode the flags
// gave the call.
func (f *Facade) noteRoute(ctx context.Context, plan authority.Route) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String(attrMode, f.modeLabel(plan)))
	}
}

// noteDecider records on ctx's span (when recording) the store that
// answered.
func noteDecider(ctx context.Context, decider reservation.Authority) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String(attrDecider, string(decider)))
	}
}
