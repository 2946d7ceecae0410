package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// serve with OTEL_TRACES_EXPORTER=console traces: a reserve sent with a
// traceparent answers with its trace id, its log line carries the ids,
// and on shutdown the spans still buffered are flushed, the HTTP span and
// the facade's in the caller's trace. (Not parallel: the environment and
// the global tracer provider are the process's.)
func TestServeTracesToConsole(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	t.Setenv("OTEL_SERVICE_NAME", "reservoir-serve-test")
	prev := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	dir := t.TempDir()
	clients := filepath.Join(dir, "clients.toml")
	apiTok := newClient(t, clients, "trace-test")
	flags := filepath.Join(dir, "flags.json")
	if _, _, err := (flagdoc.FlagsFile{Path: flags}).Update(func(*flagdoc.Flags) error { return nil }); err != nil {
		t.Fatal(err)
	}
	topo := onePodTopology(t, dir, flags, testredis.New(t))

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	out, errOut := &serveOutput{}, &serveOutput{}
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"serve", "--topology", topo, "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
			"--clients", clients}, out, errOut)
	}()
	base := out.waitFor(t, listeningRE, 30*time.Second)
	if code, body := apiCall(t, "POST", base+"/v1/shops/1001/items/7/locations/1/adjust", apiTok, map[string]any{"available": 3}); code != 200 {
		t.Fatalf("adjust: %d %v", code, body)
	}
	const traceID = "5bf92f3577b34da6a3ce929d0e0e4736"
	cart, _ := json.Marshal(map[string]any{"token": "c1", "lines": []map[string]any{{"item": 7, "quantity": 1, "locations": []int64{1}}}})
	req, _ := http.NewRequest("POST", base+"/v1/shops/1001/reservations", bytes.NewReader(cart))
	req.Header.Set("Authorization", "Bearer "+apiTok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated || res.Header.Get("X-Trace-Id") != traceID {
		t.Fatalf("reserve: %d, X-Trace-Id %q", res.StatusCode, res.Header.Get("X-Trace-Id"))
	}
	stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited %d:\n%s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	log := errOut.String()
	for _, want := range []string{
		`"msg":"serve: tracing on","exporter":"console"`,
		`"msg":"http request"`, `"trace_id":"` + traceID + `"`,
		`"Name":"POST /v1/shops/{shop}/reservations","SpanContext":{"TraceID":"` + traceID + `"`,
		`"Name":"dualwrite.reserve","SpanContext":{"TraceID":"` + traceID + `"`,
		`"Value":"reservoir-serve-test"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("no %s in serve's stderr:\n%s", want, log)
		}
	}
}
