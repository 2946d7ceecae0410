package server_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/internal/telemetry"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// The traces tests install a tracer provider with an in-memory recorder
// as the global one, so they do not run in parallel: each has the
// process's global to itself.

// incoming is the traceparent the tests' calls carry, as a caller's
// tracing would send it (sampled).
const (
	incomingTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	incomingParent = "00-" + incomingTrace + "-00f067aa0ba902b7-01"
)

// recordSpans installs a tracer provider recording every span in memory
// as the global one, until the test ends.
func recordSpans(t *testing.T) *tracetest.SpanRecorder {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(telemetry.Scoped(tp)) // as telemetry.Setup installs it
	t.Cleanup(func() {
		otel.SetTracerProvider(prev)
		_ = tp.Shutdown(context.Background())
	})
	return rec
}

// spansOf are the ended spans of the trace.
func spansOf(rec *tracetest.SpanRecorder, traceID string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID().String() == traceID {
			out = append(out, s)
		}
	}
	return out
}

// waitSpan waits up to 10s for an ended span that match accepts.
func waitSpan(t *testing.T, rec *tracetest.SpanRecorder, what string, match func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, s := range rec.Ended() {
			if match(s) {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s among the spans ended:\n%s", what, describe(rec.Ended()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func describe(spans []sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	for _, s := range spans {
		b.WriteString("  " + s.Name() + " trace " + s.SpanContext().TraceID().String() + " parent " + s.Parent().SpanID().String())
		for _, a := range s.Attributes() {
			b.WriteString(" " + string(a.Key) + "=" + a.Value.String())
		}
		b.WriteString("\n")
	}
	return b.String()
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, a := range s.Attributes() {
		if a.Key == key {
			return a.Value.String()
		}
	}
	return ""
}

func named(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// A reserve through the real server, in the caller's trace: the HTTP
// span (named for the route), the facade's span under it, and the store's
// span under that with its caller tag, all in the trace the incoming
// traceparent named, whose id the response carries; the access log line
// carries the trace and span ids.
func TestTraceReserve(t *testing.T) {
	rec := recordSpans(t)
	h := setup(t, options{tracing: true})
	h.stock(1001, 7, 1, 10)
	r := h.do("POST", pathf("/v1/shops/%d/reservations", 1001), map[string]any{
		"token": "traced", "ttl_ms": 60000, "lines": []map[string]any{{"item": 7, "quantity": 1, "locations": []int64{1}}},
	}, "", "traceparent", incomingParent)
	if r.status != 201 {
		t.Fatalf("reserve: %d %s", r.status, r.raw)
	}
	if got := r.header.Get(server.TraceIDHeader); got != incomingTrace {
		t.Errorf("%s: %q, want the incoming trace %s", server.TraceIDHeader, got, incomingTrace)
	}
	httpSpan := waitSpan(t, rec, "HTTP span of the reserve", func(s sdktrace.ReadOnlySpan) bool {
		return s.SpanContext().TraceID().String() == incomingTrace && s.Name() == "POST /v1/shops/{shop}/reservations"
	})
	if httpSpan.SpanKind() != trace.SpanKindServer || httpSpan.Parent().SpanID().String() != "00f067aa0ba902b7" || !httpSpan.Parent().IsRemote() {
		t.Errorf("HTTP span: kind %v, parent %v; want a server span under the caller's", httpSpan.SpanKind(), httpSpan.Parent())
	}
	spans := spansOf(rec, incomingTrace)
	facade := named(spans, "dualwrite.reserve")
	if len(facade) != 1 || facade[0].Parent().SpanID() != httpSpan.SpanContext().SpanID() {
		t.Fatalf("want one dualwrite.reserve span under the HTTP span; the trace:\n%s", describe(spans))
	}
	if attr(facade[0], "reservoir.shop") != "1001" || attr(facade[0], "reservoir.pod") != "pod-a" || attr(facade[0], "reservoir.decider") != "redis" {
		t.Errorf("facade span attributes:\n%s", describe(facade))
	}
	var store []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Parent().SpanID() == facade[0].SpanContext().SpanID() && attr(s, "reservoir.caller") != "" {
			store = append(store, s)
		}
	}
	if len(store) == 0 || store[0].Name() != "redisstore.reserve" || attr(store[0], "reservoir.caller") != "reserve" {
		t.Fatalf("want the store's span redisstore.reserve (caller reserve) under the facade's; the trace:\n%s", describe(spans))
	}

	// The access log line of the call names its trace and its span.
	want := `"trace_id":"` + incomingTrace + `","span_id":"` + httpSpan.SpanContext().SpanID().String() + `"`
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(h.logBuf.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %s in:\n%s", want, h.logBuf.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, line := range strings.Split(h.logBuf.String(), "\n") {
		if strings.Contains(line, want) && !strings.Contains(line, `"msg":"http request"`) {
			t.Errorf("a line with the trace ids that is not the access log: %s", line)
		}
	}
}

// In shadow mode Redis decides and MySQL keeps a shadow hold, after the
// call returned: the shadow's span is in the call's trace, under the
// facade's span, with MySQL's span (caller reserve) under it.
func TestTraceShadow(t *testing.T) {
	rec := recordSpans(t)
	h := setup(t, options{tracing: true, modes: map[string]authority.Mode{"pod-a": authority.ModeShadow}})
	h.waitDecision("pod-a", authority.ModeShadow, authority.KillOff)
	h.stock(1001, 7, 1, 10)
	r := h.do("POST", pathf("/v1/shops/%d/reservations", 1001), map[string]any{
		"token": "traced-shadow", "ttl_ms": 60000, "lines": []map[string]any{{"item": 7, "quantity": 1, "locations": []int64{1}}},
	}, "", "traceparent", incomingParent)
	if r.status != 201 || r.body["authority"] != "redis" {
		t.Fatalf("reserve: %d %s", r.status, r.raw)
	}
	shadow := waitSpan(t, rec, "shadow span", func(s sdktrace.ReadOnlySpan) bool {
		return s.SpanContext().TraceID().String() == incomingTrace && s.Name() == "dualwrite.shadow.reserve"
	})
	spans := spansOf(rec, incomingTrace)
	facade := named(spans, "dualwrite.reserve")
	if len(facade) != 1 || shadow.Parent().SpanID() != facade[0].SpanContext().SpanID() || attr(shadow, "reservoir.store") != "mysql" {
		t.Fatalf("want the shadow span (store mysql) under the facade's span; the trace:\n%s", describe(spans))
	}
	if attr(facade[0], "reservoir.mode") != "shadow" {
		t.Errorf("facade span mode %q, want shadow", attr(facade[0], "reservoir.mode"))
	}
	mysql := waitSpan(t, rec, "MySQL's span under the shadow's", func(s sdktrace.ReadOnlySpan) bool {
		return s.Parent().SpanID() == shadow.SpanContext().SpanID() && s.Name() == "mysqlstore.reserve"
	})
	if attr(mysql, "reservoir.caller") != "reserve" || attr(mysql, "db.system.name") != "mysql" {
		t.Errorf("MySQL's span:\n%s", describe([]sdktrace.ReadOnlySpan{mysql}))
	}
}

// In mysql mode MySQL decides and the relay makes Redis follow: the
// change-feed row carries the call's trace context, and the relay's span
// applying it, the root of a trace of its own, links to the call's trace.
func TestTraceRelayApply(t *testing.T) {
	rec := recordSpans(t)
	h := setup(t, options{tracing: true, modes: map[string]authority.Mode{"pod-a": authority.ModeMySQL}})
	h.waitDecision("pod-a", authority.ModeMySQL, authority.KillOff)
	h.stock(1001, 7, 1, 10)
	r := h.do("POST", pathf("/v1/shops/%d/reservations", 1001), map[string]any{
		"token": "traced-relay", "ttl_ms": 60000, "lines": []map[string]any{{"item": 7, "quantity": 1, "locations": []int64{1}}},
	}, "", "traceparent", incomingParent)
	if r.status != 201 || r.body["authority"] != "mysql" {
		t.Fatalf("reserve: %d %s", r.status, r.raw)
	}
	apply := waitSpan(t, rec, "relay apply span linked to the reserve's trace", func(s sdktrace.ReadOnlySpan) bool {
		if s.Name() != "mirror.apply" {
			return false
		}
		for _, l := range s.Links() {
			if l.SpanContext.TraceID().String() == incomingTrace {
				return true
			}
		}
		return false
	})
	if apply.SpanContext().TraceID().String() == incomingTrace || apply.Parent().IsValid() {
		t.Errorf("the apply span should be a root of its own trace, linked to the call's: parent %v", apply.Parent())
	}
	// The link names the call's store span that wrote the row.
	spans := spansOf(rec, incomingTrace)
	var writer trace.SpanID
	for _, l := range apply.Links() {
		if l.SpanContext.TraceID().String() == incomingTrace {
			writer = l.SpanContext.SpanID()
		}
	}
	found := false
	for _, s := range spans {
		if s.SpanContext().SpanID() == writer {
			found = true
		}
	}
	if !found {
		t.Errorf("the link names span %s, which is not a span of the call's trace:\n%s", writer, describe(spans))
	}
	// The call's own trace: the HTTP span and MySQL's store span, which
	// decided.
	var httpSpan, mysqlSpan bool
	for _, s := range spans {
		httpSpan = httpSpan || s.Name() == "POST /v1/shops/{shop}/reservations"
		mysqlSpan = mysqlSpan || (s.Name() == "mysqlstore.reserve" && attr(s, "reservoir.caller") == "reserve")
	}
	if !httpSpan || !mysqlSpan {
		t.Errorf("the call's trace lacks its HTTP span (%v) or MySQL's reserve span (%v):\n%s", httpSpan, mysqlSpan, describe(spans))
	}
	// The comparison of the reserve (Redis asked the same cart as the relay
	// applies it) is a span under the apply's, linked to the call.
	cmp := waitSpan(t, rec, "the comparison's span under the relay's apply", func(s sdktrace.ReadOnlySpan) bool {
		return s.Name() == "mirror.compare" && s.Parent().SpanID() == apply.SpanContext().SpanID()
	})
	if links := cmp.Links(); len(links) != 1 || links[0].SpanContext.TraceID().String() != incomingTrace || attr(cmp, "reservoir.token") != "traced-relay" {
		t.Errorf("the comparison's span should link to the call's trace and name its token:\n%s", describe([]sdktrace.ReadOnlySpan{cmp}))
	}
	if applied := waitSpan(t, rec, "Redis's apply span under the relay's", func(s sdktrace.ReadOnlySpan) bool {
		return s.Parent().SpanID() == apply.SpanContext().SpanID() && s.Name() == "redisstore.apply"
	}); attr(applied, "reservoir.caller") != "apply" {
		t.Errorf("Redis's apply span:\n%s", describe([]sdktrace.ReadOnlySpan{applied}))
	}
}

// Tracing off (the default: serve sets Config.Tracing only when an SDK is
// installed), even with a tracer provider installed that would record
// anything started and a traceparent on the call: the request path starts
// no span, the response names no trace, and no log line carries one.
func TestTraceOff(t *testing.T) {
	rec := recordSpans(t)
	h := setup(t, options{})
	h.stock(1001, 7, 1, 10)
	r := h.do("POST", pathf("/v1/shops/%d/reservations", 1001), map[string]any{
		"token": "untraced", "ttl_ms": 60000, "lines": []map[string]any{{"item": 7, "quantity": 1, "locations": []int64{1}}},
	}, "", "traceparent", incomingParent)
	if r.status != 201 {
		t.Fatalf("reserve: %d %s", r.status, r.raw)
	}
	if got := r.header.Get(server.TraceIDHeader); got != "" {
		t.Errorf("%s: %q with tracing off", server.TraceIDHeader, got)
	}
	time.Sleep(200 * time.Millisecond) // a shadow span would have ended
	// The relay's rounds (applying the adjust above) use the global
	// provider directly, which in production is the no-op one when
	// tracing is off; the request path's spans are what is checked.
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID().String() == incomingTrace || strings.HasPrefix(s.Name(), "dualwrite.") || strings.HasPrefix(s.Name(), "POST ") {
			t.Errorf("a span of the request path with tracing off:\n%s", describe([]sdktrace.ReadOnlySpan{s}))
		}
	}
	if strings.Contains(h.logBuf.String(), "trace_id") {
		t.Errorf("a log line names a trace with tracing off:\n%s", h.logBuf.String())
	}
}

// Both listeners are traced, each under its own operation: a checkout
// call on the checkout listener and an admin call on the admin listener
// are spans named for their routes, each in its caller's trace; the
// probes are not traced.
func TestTraceListeners(t *testing.T) {
	rec := recordSpans(t)
	h := setup(t, options{tracing: true, noHTTP: true})
	api, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- h.srv.Serve(ctx, api, admin) }()
	t.Cleanup(func() { stop(); <-served })
	get := func(base, path, token, traceID string) *http.Response {
		req, _ := http.NewRequest("GET", "http://"+base+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if traceID != "" {
			req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	const checkoutTrace, adminTrace = "0af7651916cd43dd8448eb211c80319c", "1af7651916cd43dd8448eb211c80319c"
	if res := get(api.Addr().String(), "/v1/shops/1001/items/7/availability", clientToken, checkoutTrace); res.StatusCode != 200 || res.Header.Get(server.TraceIDHeader) != checkoutTrace {
		t.Errorf("checkout listener: %d, %s %q", res.StatusCode, server.TraceIDHeader, res.Header.Get(server.TraceIDHeader))
	}
	if res := get(admin.Addr().String(), "/admin/rollout/status", adminToken, adminTrace); res.StatusCode != 200 || res.Header.Get(server.TraceIDHeader) != adminTrace {
		t.Errorf("admin listener: %d, %s %q", res.StatusCode, server.TraceIDHeader, res.Header.Get(server.TraceIDHeader))
	}
	if res := get(admin.Addr().String(), "/healthz", "", ""); res.Header.Get(server.TraceIDHeader) != "" {
		t.Errorf("/healthz traced: %s", res.Header.Get(server.TraceIDHeader))
	}
	waitSpan(t, rec, "the checkout listener's span", func(s sdktrace.ReadOnlySpan) bool {
		return s.SpanContext().TraceID().String() == checkoutTrace && s.Name() == "GET /v1/shops/{shop}/items/{item}/availability" && s.SpanKind() == trace.SpanKindServer
	})
	waitSpan(t, rec, "the facade's read under it", func(s sdktrace.ReadOnlySpan) bool {
		return s.SpanContext().TraceID().String() == checkoutTrace && s.Name() == "dualwrite.availability"
	})
	waitSpan(t, rec, "the admin listener's span", func(s sdktrace.ReadOnlySpan) bool {
		return s.SpanContext().TraceID().String() == adminTrace && s.Name() == "GET /admin/rollout/status" && s.SpanKind() == trace.SpanKindServer
	})
	for _, s := range rec.Ended() {
		if strings.Contains(s.Name(), "healthz") {
			t.Errorf("a probe was traced: %s", s.Name())
		}
	}
}
