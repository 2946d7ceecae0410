package telemetry

import (
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// modulePrefix is the instrumentation scope prefix of reservoir's own
// spans (each package names its scope by its import path).
const modulePrefix = "github.com/seed31b0e981/reservoir/"

// Scoped returns a tracer provider that hands out tp's tracers to
// reservoir's own packages and to otelhttp only, and no-op tracers to
// every other library. The flag libraries (OpenFeature, flagd's
// in-process provider) trace each flag evaluation and sync on the global
// provider, outside any request: with tracing on they would start a root
// trace per evaluation, thousands a second, and bury the checkout calls'.
// A no-op tracer still passes its parent's span context on, so a span a
// library would have started inside a request leaves no hole.
func Scoped(tp trace.TracerProvider) trace.TracerProvider {
	return scoped{tp: tp}
}

type scoped struct {
	embedded.TracerProvider
	tp trace.TracerProvider
}

// Tracer implements trace.TracerProvider.
func (s scoped) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	if strings.HasPrefix(name, modulePrefix) || name == otelhttp.ScopeName {
		return s.tp.Tracer(name, opts...)
	}
	return noop.NewTracerProvider().Tracer(name, opts...)
}
