package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/seed31b0e981/reservoir/internal/telemetry"
)

// env is a fake environment for Config.Getenv.
func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// keepGlobals restores the global tracer provider and propagator when
// the test ends (Setup replaces them when tracing is on).
func keepGlobals(t *testing.T) {
	tp, prop := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		if otel.GetTracerProvider() != tp {
			otel.SetTracerProvider(tp)
			otel.SetTextMapPropagator(prop)
		}
	})
}

// Off by default: no exporter named (or "none", or the SDK disabled)
// installs nothing: the global provider stays the no-op one, a span
// started on it records nothing, and nothing is written anywhere.
func TestOffByDefault(t *testing.T) {
	keepGlobals(t)
	for _, e := range [][]string{
		nil,
		{"OTEL_TRACES_EXPORTER", "none"},
		{"OTEL_TRACES_EXPORTER", "console", "OTEL_SDK_DISABLED", "true"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318", "OTEL_SERVICE_NAME", "x"},
	} {
		before := otel.GetTracerProvider()
		var out bytes.Buffer
		tr, err := telemetry.Setup(context.Background(), telemetry.Config{Getenv: env(e...), Console: &out})
		if err != nil {
			t.Fatalf("%v: %v", e, err)
		}
		if tr.Enabled() || tr.Exporter != "" {
			t.Errorf("%v: tracing on (%q)", e, tr.Exporter)
		}
		if otel.GetTracerProvider() != before {
			t.Errorf("%v: the global tracer provider changed", e)
		}
		if _, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); ok {
			t.Errorf("%v: an SDK is installed", e)
		}
		_, span := otel.Tracer("github.com/seed31b0e981/reservoir/test").Start(context.Background(), "x")
		if span.IsRecording() {
			t.Errorf("%v: a span records", e)
		}
		span.End()
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Errorf("%v: shutdown: %v", e, err)
		}
		if out.Len() != 0 {
			t.Errorf("%v: exported %q", e, out.String())
		}
	}
}

// The console exporter: spans of reservoir's scopes are exported, with
// the service name from OTEL_SERVICE_NAME, once Shutdown flushes them;
// a library's scope (the flag SDKs) is not.
func TestConsoleExporter(t *testing.T) {
	keepGlobals(t)
	var out bytes.Buffer
	tr, err := telemetry.Setup(context.Background(), telemetry.Config{
		Getenv: env("OTEL_TRACES_EXPORTER", "console", "OTEL_SERVICE_NAME", "reservoir-test"), Console: &out})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Enabled() || tr.Exporter != "console" {
		t.Fatalf("tracing %v %q, want on with console", tr.Enabled(), tr.Exporter)
	}
	_, span := otel.Tracer("github.com/seed31b0e981/reservoir/test").Start(context.Background(), "ours")
	span.End()
	_, lib := otel.Tracer("github.com/open-feature/go-sdk").Start(context.Background(), "resolveString")
	if lib.IsRecording() {
		t.Error("a library's span records")
	}
	lib.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, `"Name":"ours"`) || !strings.Contains(s, "reservoir-test") || strings.Contains(s, "resolveString") {
		t.Errorf("console export:\n%s", s)
	}
}

// OTLP over HTTP and gRPC are built from the environment without
// reaching the collector; an unknown exporter or protocol is refused
// with the variable's name.
func TestExporters(t *testing.T) {
	keepGlobals(t)
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"OTEL_TRACES_EXPORTER", "otlp"}, "otlp/http/protobuf"},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"}, "otlp/grpc"},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"}, "otlp/http/protobuf"},
	} {
		tr, err := telemetry.Setup(context.Background(), telemetry.Config{Getenv: env(c.env...)})
		if err != nil {
			t.Fatalf("%v: %v", c.env, err)
		}
		if tr.Exporter != c.want {
			t.Errorf("%v: exporter %q, want %q", c.env, tr.Exporter, c.want)
		}
		// Nothing was started: the flush has nothing to send.
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Errorf("%v: shutdown: %v", c.env, err)
		}
	}
	for _, e := range [][]string{
		{"OTEL_TRACES_EXPORTER", "jaeger"},
		{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"},
	} {
		if _, err := telemetry.Setup(context.Background(), telemetry.Config{Getenv: env(e...)}); err == nil || !strings.Contains(err.Error(), "OTEL_") {
			t.Errorf("%v: %v, want a refusal naming the variable", e, err)
		}
	}
}

// A line logged with a recording span's context carries its trace and
// span ids; without one, or with a span that does not record, none.
func TestLogHandler(t *testing.T) {
	var out bytes.Buffer
	log := telemetry.Logger(slog.New(slog.NewJSONHandler(&out, nil)))
	if telemetry.Logger(log) != log {
		t.Error("wrapping twice wraps again")
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	ctx, span := tp.Tracer("t").Start(context.Background(), "x")
	log.InfoContext(ctx, "traced")
	span.End()
	log.InfoContext(context.Background(), "untraced")
	log.InfoContext(ctx, "ended") // an ended span no longer records
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("log: %q", out.String())
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if first["trace_id"] != span.SpanContext().TraceID().String() || first["span_id"] != span.SpanContext().SpanID().String() {
		t.Errorf("traced line: %s", lines[0])
	}
	for _, l := range lines[1:] {
		if strings.Contains(l, "trace_id") {
			t.Errorf("line with a trace id: %s", l)
		}
	}
}
