package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// LogHandler wraps h so that a record logged with a context whose span is
// recording carries trace_id and span_id: a log line of a request can be
// found from its trace and the other way round. Records without such a
// context, or with tracing off, pass through unchanged. Wrapping a
// handler LogHandler already wrapped returns it as is, so the server and
// the CLI can both wrap without doubling the attributes.
func LogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(traceHandler); ok {
		return h
	}
	return traceHandler{h}
}

// Logger is a logger on LogHandler(l.Handler()).
func Logger(l *slog.Logger) *slog.Logger {
	if _, ok := l.Handler().(traceHandler); ok {
		return l
	}
	return slog.New(LogHandler(l.Handler()))
}

type traceHandler struct{ slog.Handler }

// Handle implements slog.Handler.
func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx != nil {
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			sc := span.SpanContext()
			r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
		}
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
