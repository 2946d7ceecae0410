package bench

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/internal/testtier"
)

// buildReservoir builds the reservoir binary once for the test: the
// killflood scenario's replicas and attackers run it.
func buildReservoir(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "reservoir")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/seed31b0e981/reservoir/cmd/reservoir")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/reservoir: %v\n%s", err, out)
	}
	return bin
}

// A small killflood point end to end: two replicas follow the control
// database's flags, a flood of 200 connections from a process of its own
// is shed, and every kill switch change is answered, measured from the
// write to each replica's heartbeat, and reported in the tables and the
// targets. The run leaves no replica, attacker or database behind. With
// Options.KillFloodControlDSN the control database is one the run made on
// that server (here the same server, another database): the changes are
// obeyed only if the replicas' flags and heartbeats are there, where the
// bench reads them. There the changes go through the admin API of the
// replica the attackers leave alone (Options.KillFloodAdmin spare).
func TestRunKillFlood(t *testing.T) {
	testtier.Needs(t, "the reservoir binary (go build) and two replicas of it")
	bin := buildReservoir(t)
	for _, tc := range []struct {
		name       string
		controlDSN string
		admin      string
	}{
		{"the run's database is the control database", "", KillFloodAdminFlooded},
		{"a control database of its own, the admin API of the spare replica", testdb.ServerDSN(t), KillFloodAdminSpare},
	} {
		t.Run(tc.name, func(t *testing.T) { runKillFlood(t, bin, tc.controlDSN, tc.admin) })
	}
}

// runKillFlood is TestRunKillFlood's point, with the control database on
// controlDSN's server ("" for the run's own) and the changes through
// admin's admin API.
func runKillFlood(t *testing.T, bin, controlDSN, admin string) {
	opts := Options{
		MySQLDSN:            testdb.ServerDSN(t),
		RedisAddr:           testredis.Addr(t),
		Sweeps:              []Sweep{{Scenario: ScenarioKillFlood, Variants: []string{"this"}, Concurrency: []int{200}, Latencies: []time.Duration{0}}},
		ServeBinaries:       map[string]string{"this": bin},
		FloodBinary:         bin,
		KillFloodSwitches:   2,
		KillFloodControlDSN: controlDSN,
		KillFloodAdmin:      admin,
	}
	via, flooded := "replica-0", "| this | 200 | first | 4 |"
	if admin == KillFloodAdminSpare {
		via, flooded = "replica-1", "| this | 200 | first (admin: the other) | 4 |"
	}
	rep, progress := runWithProgress(t, opts, 3*time.Minute)
	if len(rep.Results) != 1 {
		t.Fatalf("%d results, want 1", len(rep.Results))
	}
	r := rep.Results[0]
	kf := r.KillFlood
	if r.Error != "" || kf == nil {
		t.Fatalf("point failed: %q\n%s", r.Error, progress.String())
	}
	if kf.Changes != 4 || r.OK != 4 || kf.NotObeyed != 0 || r.Invariant != "ok" {
		t.Errorf("%d changes, %d answered 200, %d not obeyed, invariant %q; errors %v", kf.Changes, r.OK, kf.NotObeyed, r.Invariant, r.ErrorSamples)
	}
	for i, c := range kf.Each {
		if c.Answer <= 0 || c.Obey < 0 || len(c.ObeyByReplica) != 2 || !strings.Contains(c.FleetLine, "obeyed by 2/2 replicas") {
			t.Errorf("change %d: %+v", i, c)
		}
		if c.Op != []string{"engage", "release"}[i%2] {
			t.Errorf("change %d is a %s", i, c.Op)
		}
		if c.Via != via {
			t.Errorf("change %d went through %s's admin API, want %s's", i, c.Via, via)
		}
	}
	if kf.Flood.Opened == 0 || kf.Flood.Answered == 0 || kf.Replicas != 2 || len(kf.ObeyByReplica) != 2 || kf.DBCommit.N == 0 || kf.DBRoundTrip.N == 0 {
		t.Errorf("flood %+v, replicas %d, obey by replica %v, database probe %+v %+v", kf.Flood, kf.Replicas, kf.ObeyByReplica, kf.DBRoundTrip, kf.DBCommit)
	}
	if !containsTarget(rep, "kill switch obeyed by every replica") || !containsTarget(rep, "admin API (kill switch) answer") {
		t.Errorf("targets %v: the killflood targets are missing", rep.Targets)
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil || !strings.Contains(md.String(), flooded) {
		t.Errorf("markdown (%v):\n%s", err, md.String())
	}
	if (controlDSN != "") != strings.Contains(rep.Env.ControlServer, rep.Env.Database+"_control") {
		t.Errorf("the report's control server is %q", rep.Env.ControlServer)
	}
	// The replicas stopped and removed their heartbeats.
	db := testdb.New(t)
	for _, name := range []string{rep.Env.Database, rep.Env.Database + "_control"} {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&n); err != nil || n != 0 {
			t.Errorf("database %s: %d left (%v)", name, n, err)
		}
	}
	if out, _ := exec.Command("pgrep", "-f", bin).Output(); len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("processes of %s still running: %s", bin, out)
	}
}

func containsTarget(rep *Report, name string) bool {
	for _, t := range rep.Targets {
		if strings.Contains(t.Name, name) {
			return true
		}
	}
	return false
}

// The attackers' process reads its spec from the environment and reports
// what it saw when its standard input closes; a spec it cannot use is an
// error, not a flood of nothing.
func TestRunFloodSpec(t *testing.T) {
	var out bytes.Buffer
	if err := RunFlood(context.Background(), `{"bases":[],"conns":10}`, strings.NewReader(""), &out); err == nil {
		t.Error("a spec without bases was accepted")
	}
	if err := RunFlood(context.Background(), `not json`, strings.NewReader(""), &out); err == nil {
		t.Error("a spec that is not JSON was accepted")
	}
	// Nothing listens on the address and stdin is closed at once: no call
	// is answered, and the report still comes.
	out.Reset()
	if err := RunFlood(context.Background(), `{"bases":["http://127.0.0.1:1"],"conns":3,"shop":1,"item":1,"location":1,"token":"x"}`, strings.NewReader(""), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), FloodStatsPrefix) || !strings.Contains(out.String(), `"answered":0`) {
		t.Errorf("report %q", out.String())
	}
}
