package server

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed31b0e981/reservoir/internal/telemetry"
)

// TraceIDHeader carries, on every response of a traced request, the id of
// the trace the request's span belongs to: the caller's own when it sent
// a traceparent, so a client can find its call in the tracing backend.
const TraceIDHeader = "X-Trace-Id"

// untraced are the paths no span is started for: probes and scrapes every
// few seconds would drown the traces (as they would the access log).
var untraced = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// traced wraps a listener's handler in otelhttp when Config.Tracing is
// on, with operation naming the listener; off, h is returned as is, so
// tracing off costs the request path nothing here. The span is renamed
// after the route once the mux chose it (outer, nameSpan).
func (s *Server) traced(operation string, h http.Handler) http.Handler {
	if !s.cfg.Tracing {
		return h
	}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sc := trace.SpanContextFromContext(r.Context()); sc.IsValid() {
			w.Header().Set(TraceIDHeader, sc.TraceID().String())
		}
		h.ServeHTTP(w, r)
	})
	return otelhttp.NewHandler(inner, operation,
		// Always W3C, whatever the global propagator: the listeners
		// honour the caller's traceparent.
		otelhttp.WithPropagators(telemetry.Propagator()),
		otelhttp.WithFilter(func(r *http.Request) bool { return !untraced[r.URL.Path] }),
		otelhttp.WithSpanNameFormatter(func(operation string, r *http.Request) string {
			if r.Pattern != "" {
				return r.Pattern
			}
			return operation + " " + r.Method
		}),
	)
}

// nameSpan names r's span after the route the mux matched ("POST
// /v1/shops/{shop}/reservations": low cardinality, as span names must
// be), and records the request id, when the span is recording.
func nameSpan(r *http.Request, requestID string) {
	span := trace.SpanFromContext(r.Context())
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("reservoir.request_id", requestID))
	if r.Pattern != "" {
		span.SetName(r.Pattern)
		span.SetAttributes(attribute.String("http.route", r.Pattern))
	}
}
