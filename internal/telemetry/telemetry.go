// Package telemetry sets up OpenTelemetry tracing for `reservoir serve`
// from the standard OTEL_* environment variables, and carries the small
// helpers the rest of the process shares: the trace ids in log lines and
// the W3C propagator the listeners honour.
//
// Tracing is off by default: without OTEL_TRACES_EXPORTER (or with
// "none", or OTEL_SDK_DISABLED=true) Setup installs nothing. serve then
// leaves the listeners unwrapped, so the facade and the stores, finding
// no span in a call's context, start none; the relay's spans go to the
// global no-op tracer, which records nothing (BENCHMARKS.md, "Tracing",
// measures what is left).
//
// The instrumented packages (the stores, dualwrite, mirror) never import
// this package: they start spans on the global tracer provider
// (otel.GetTracerProvider) under their own instrumentation scope, so the
// stores keep importing only reservation from this repository. The
// server imports it for the log handler and the propagator.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// CallerKey is the span attribute naming the caller tag of a store call:
// the tag the store's SQL (`/*caller='...'*/`) or Lua (`caller=...`)
// carries, so a span and the database's own logs name the same flow.
const CallerKey = "reservoir.caller"

// Config is what Setup needs beside the environment.
type Config struct {
	// ServiceName is service.name when OTEL_SERVICE_NAME (or
	// OTEL_RESOURCE_ATTRIBUTES) does not set it. Default: "reservoir".
	ServiceName string
	// Version is service.version ("" leaves it out).
	Version string
	// Console is where the "console" exporter writes. Default: os.Stderr
	// (stdout is the CLI's own output).
	Console io.Writer
	// Getenv reads the environment. Default: os.Getenv (tests pass their
	// own, so they never change the process's environment).
	Getenv func(string) string
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	if c.ServiceName == "" {
		c.ServiceName = "reservoir"
	}
	if c.Console == nil {
		c.Console = os.Stderr
	}
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
	return c
}

// Tracing is the result of Setup.
type Tracing struct {
	// Exporter is the exporter in use: "otlp/grpc", "otlp/http/protobuf",
	// "console", or "" when tracing is off.
	Exporter string
	provider *sdktrace.TracerProvider
}

// Enabled reports whether Setup installed an SDK.
func (t *Tracing) Enabled() bool { return t != nil && t.provider != nil }

// Shutdown flushes the spans still buffered and stops the exporter; it
// is a no-op when tracing is off. Call it once, after the server stopped
// serving, with a deadline: an unreachable collector must not hold the
// process up.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("telemetry: flush spans: %w", err)
	}
	return nil
}

// Propagator is the propagation the listeners honour on incoming
// requests whatever the configuration: W3C trace context (traceparent,
// tracestate) and baggage. Honouring traceparent with tracing off costs a
// header read, and lets the response name the caller's trace.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Setup reads the OTEL_* variables and, when they ask for an exporter,
// installs an SDK tracer provider as the global one, with W3C
// propagation. With tracing off it changes no global and returns a
// Tracing whose Shutdown does nothing.
//
// Read here: OTEL_SDK_DISABLED, OTEL_TRACES_EXPORTER (none, otlp,
// console), OTEL_EXPORTER_OTLP_TRACES_PROTOCOL and
// OTEL_EXPORTER_OTLP_PROTOCOL (grpc, http/protobuf; default
// http/protobuf). Read by the SDK and the exporters themselves:
// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER,
// OTEL_TRACES_SAMPLER_ARG, OTEL_EXPORTER_OTLP_ENDPOINT (and its _TRACES_
// form), OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TIMEOUT,
// OTEL_EXPORTER_OTLP_INSECURE and OTEL_BSP_*.
func Setup(ctx context.Context, cfg Config) (*Tracing, error) {
	cfg = cfg.WithDefaults()
	if strings.EqualFold(strings.TrimSpace(cfg.Getenv("OTEL_SDK_DISABLED")), "true") {
		return &Tracing{}, nil
	}
	name := strings.ToLower(strings.TrimSpace(cfg.Getenv("OTEL_TRACES_EXPORTER")))
	if name == "" || name == "none" {
		return &Tracing{}, nil
	}
	exp, label, err := exporter(ctx, cfg, name)
	if err != nil {
		return nil, err
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.ServiceName)}
	if cfg.Version != "" {
		attrs = append(attrs, attribute.String("service.version", cfg.Version))
	}
	// WithFromEnv comes after the defaults: OTEL_RESOURCE_ATTRIBUTES and
	// OTEL_SERVICE_NAME override them, the latter (read through Getenv)
	// last, as the specification orders them.
	opts := []resource.Option{resource.WithTelemetrySDK(), resource.WithAttributes(attrs...), resource.WithFromEnv()}
	if name := strings.TrimSpace(cfg.Getenv("OTEL_SERVICE_NAME")); name != "" {
		opts = append(opts, resource.WithAttributes(attribute.String("service.name", name)))
	}
	res, err := resource.New(ctx, opts...)
	if err != nil && res == nil {
		return nil, errors.Join(fmt.Errorf("telemetry: resource: %w", err), exp.Shutdown(ctx))
	}
	// The sampler is the SDK's default, which reads OTEL_TRACES_SAMPLER
	// and its _ARG (parentbased_always_on when unset).
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(Scoped(tp))
	otel.SetTextMapPropagator(Propagator())
	return &Tracing{Exporter: label, provider: tp}, nil
}

// exporter builds the span exporter OTEL_TRACES_EXPORTER names.
func exporter(ctx context.Context, cfg Config, name string) (sdktrace.SpanExporter, string, error) {
	switch name {
	case "otlp":
		proto := strings.TrimSpace(cfg.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
		if proto == "" {
			proto = strings.TrimSpace(cfg.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
		}
		switch proto {
		case "", "http/protobuf":
			// The exporter reads the endpoint, headers, timeout and TLS
			// from the OTEL_EXPORTER_OTLP_* variables itself.
			exp, err := otlptracehttp.New(ctx)
			if err != nil {
				return nil, "", fmt.Errorf("telemetry: OTLP/HTTP exporter: %w", err)
			}
			return exp, "otlp/http/protobuf", nil
		case "grpc":
			exp, err := otlptracegrpc.New(ctx)
			if err != nil {
				return nil, "", fmt.Errorf("telemetry: OTLP/gRPC exporter: %w", err)
			}
			return exp, "otlp/grpc", nil
		}
		return nil, "", fmt.Errorf("telemetry: OTEL_EXPORTER_OTLP_PROTOCOL must be grpc or http/protobuf, got %q", proto)
	case "console":
		exp, err := stdouttrace.New(stdouttrace.WithWriter(cfg.Console))
		if err != nil {
			return nil, "", fmt.Errorf("telemetry: console exporter: %w", err)
		}
		return exp, "console", nil
	}
	return nil, "", fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER must be none, otlp or console, got %q", name)
}
