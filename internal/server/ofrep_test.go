package server_test

import (
	"context"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/ofreptest"
	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// A replica on an OFREP service that does not answer is not ready, and
// /readyz says so in the topology's terms (not a file, not a database);
// once the service answers, it is ready.
func TestFlagsNotLoadedOFREP(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing answers there for now
	topo, _ := topologyFor(t, t.TempDir())
	topo.FlagsSource, topo.FlagsFile, topo.OFREPURL = topology.FlagsFromOFREP, "", "http://"+addr
	c, reg, log, _ := openCell(t, topo)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	srv, err := server.New(server.Config{Cell: c, AdminToken: adminToken, InsecureNoAuth: true, Registry: reg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	h := &harness{t: t, cell: c, srv: srv, http: hs, topo: topo}
	reason := ""
	for _, s := range readyView(t, h.do("GET", "/readyz", nil, "")).NotReady {
		if strings.HasPrefix(s, "flags_not_loaded: ") {
			reason = s
		}
	}
	for _, w := range []string{`from the OFREP service at ofrep_url (flags_source = "ofrep")`, "cannot be reached, refuses this replica's token", "until the service answers"} {
		if !strings.Contains(reason, w) {
			t.Errorf("flags_not_loaded does not say %q:\n%q", w, reason)
		}
	}

	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f := flagdoc.NewFlags()
	f.Version = 1
	doc, err := f.Render()
	if err != nil {
		t.Fatal(err)
	}
	ofreptest.New(t, string(doc), ofreptest.WithListener(l))
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := h.do("GET", "/readyz", nil, "")
		if r.body["flags_loaded"] == true {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the service answers /readyz says %s", r.raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
