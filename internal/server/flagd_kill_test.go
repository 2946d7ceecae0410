package server_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/flagdtest"
	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// With the modes served by a flagd daemon, the admin API's kill switch
// engages and releases reservoir's own switch, which wins over the
// daemon's mode on this replica at once (flagsource.Config.Kills); the
// status says where the modes come from; the checkout call that follows
// the kill is decided by Redis.
func TestAdminKillSwitchWinsOverFlagd(t *testing.T) {
	t.Parallel()
	f := flagdoc.NewFlags()
	if err := f.SetMode(flagdoc.PodScope("pod-a"), authority.ModeMySQL); err != nil {
		t.Fatal(err)
	}
	doc, err := f.Render()
	if err != nil {
		t.Fatal(err)
	}
	daemon := flagdtest.New(t, string(doc))
	topo, _ := topologyFor(t, t.TempDir())
	topo.FlagsFile, topo.FlagsSource, topo.FlagdAddr = "", topology.FlagsFromFlagd, daemon.Addr()
	if err := topo.Validate(); err != nil {
		t.Fatal(err)
	}
	c, reg, log, _ := openCell(t, topo)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	srv, err := server.New(server.Config{Cell: c, AdminToken: adminToken, Registry: reg, Logger: log, Clients: testClients(t, ""),
		SampleInterval: 100 * time.Millisecond, SeriesWindow: time.Second, RequestTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	h := &harness{t: t, cell: c, srv: srv, topo: topo, http: httptest.NewServer(srv.Handler())}
	t.Cleanup(h.http.Close)

	var effective func() map[string]any
	// until polls the status until pod-a's effective decision has want as
	// its authority and kill switch (the replica polls the kill switch
	// document every 20 ms).
	until := func(what, authority, kill string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			e := effective()
			if str(e["authority"]) == authority && str(e["kill"]) == kill {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: pod-a decides %v; want %s, kill switch %s", what, e, authority, kill)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	effective = func() map[string]any {
		r := h.admin("GET", "/admin/rollout/status", nil)
		if r.status != 200 {
			t.Fatalf("status: %d %s", r.status, r.raw)
		}
		if got := str(r.body["modes_from"]); got != "the flagd daemon at "+daemon.Addr() {
			t.Errorf("modes_from %q; want the daemon", got)
		}
		for _, p := range r.body["pods"].([]any) {
			if pm := mapOf(p); str(pm["pod"]) == "pod-a" {
				return mapOf(pm["effective"])
			}
		}
		t.Fatal("no pod-a in the status")
		return nil
	}
	until("before the kill: the daemon's mode", "mysql", "off")
	h.stock(1001, 7, 1, 10)

	r := h.admin("POST", "/admin/killswitch", map[string]any{"scope": "pod:pod-a", "state": "redis", "reason": "MySQL p99 x3"})
	if r.status != 200 {
		t.Fatalf("kill over flagd: %d %s", r.status, r.raw)
	}
	until("after the kill", "redis", "redis")
	if r := h.reserve(1001, "after-kill", 7, 2); r.status != 201 || str(r.body["authority"]) != "redis" {
		t.Errorf("reserve after the kill: %d %s; want Redis to decide", r.status, r.raw)
	}
	r = h.admin("DELETE", "/admin/killswitch", map[string]any{"scope": "pod:pod-a", "reason": "recovered"})
	if r.status != 200 {
		t.Fatalf("release over flagd: %d %s", r.status, r.raw)
	}
	until("after the release", "mysql", "off")
	if r := h.reserve(1001, "after-release", 7, 2); r.status != 201 || str(r.body["authority"]) != "mysql" {
		t.Errorf("reserve after the release: %d %s; want MySQL to decide", r.status, r.raw)
	}
	if !strings.Contains(h.admin("GET", "/admin/rollout/history", nil).raw, "MySQL p99 x3") {
		t.Error("the kill is not in the audit")
	}
}
