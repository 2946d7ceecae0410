package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// saveHandoffs writes the pod's handoff report where its sweeper keeps it
// (the pod's database): no sweeper runs beside an operator command, and
// the command reads the report the same way whoever wrote it.
func saveHandoffs(t *testing.T, topo, pod string, p reservation.HandoffProgress) {
	t.Helper()
	cfg, err := topology.Load(topo)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := cfg.Pod(pod)
	if err != nil {
		t.Fatal(err)
	}
	db, err := mysqlstore.Open(tp.MySQLDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st, err := mysqlstore.New(mysqlstore.Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SaveHandoffProgress(t.Context(), p); err != nil {
		t.Fatal(err)
	}
}

// `rollout status` says, under each pod's flags, what its fences say
// (issue 24 point 3): no report yet, shops pending, every shop handed
// off; and its JSON carries the report with snake_case keys.
func TestRolloutStatusShowsTheFences(t *testing.T) {
	topo := operatorTopology(t)
	if code, out, errOut := run(t, "rollout", "--topology", topo, "--actor", "ana", "advance"); code != 0 {
		t.Fatalf("advance: %d %q %q", code, out, errOut)
	}
	flags, err := (flagdoc.FlagsFile{Path: strings.TrimSuffix(topo, "topology.toml") + "flags.json"}).Read()
	if err != nil {
		t.Fatal(err)
	}
	v := flags.Version
	status := func() string {
		t.Helper()
		code, out, errOut := run(t, "rollout", "--topology", topo, "status")
		if code != 0 {
			t.Fatalf("status: %d %q %q", code, out, errOut)
		}
		return out
	}
	podLine := "  pod pod-a      mode shadow               effective shadow/off\n"

	if out := status(); !strings.Contains(out, podLine+fmt.Sprintf("    fences: no report for flags version %d yet (no sweep of the pod has reported)\n", v)) {
		t.Errorf("status without a report:\n%s", out)
	}

	now := time.Now().UTC()
	saveHandoffs(t, topo, "pod-a", reservation.HandoffProgress{FlagsVersion: v - 1, Shops: 3, Done: 3, Started: now.Add(-time.Minute),
		Finished: now.Add(-time.Minute + 20*time.Millisecond), Updated: now.Add(-time.Minute), Replica: "r1"})
	if out := status(); !strings.Contains(out, podLine+fmt.Sprintf("    fences: no report for flags version %d yet (last: version %d, handed off 3/3 shops in 20ms)\n", v, v-1)) {
		t.Errorf("status with an older version's report:\n%s", out)
	}

	saveHandoffs(t, topo, "pod-a", reservation.HandoffProgress{FlagsVersion: v, Shops: 1204, Done: 1201, Pending: 3, OldestPending: now.Add(-2 * time.Second),
		Started: now.Add(-3 * time.Second), Updated: now, Replica: "r1"})
	out := status()
	i := strings.Index(out, podLine+"    fences: 3 of 1,204 shops pending, oldest ")
	if i < 0 || !strings.Contains(out[i:], fmt.Sprintf(" (flags version %d)\n", v)) {
		t.Errorf("status with 3 shops pending:\n%s", out)
	}
	var st struct {
		Pods []struct {
			Pod      string `json:"pod"`
			Handoffs struct {
				State  string         `json:"state"`
				Line   string         `json:"line"`
				Report map[string]any `json:"report"`
			} `json:"handoffs"`
		} `json:"pods"`
	}
	code, raw, errOut := run(t, "rollout", "--topology", topo, "status", "--json")
	if code != 0 {
		t.Fatalf("status --json: %d %q", code, errOut)
	}
	checkWire(t, raw)
	if err := json.Unmarshal([]byte(raw), &st); err != nil || len(st.Pods) != 1 {
		t.Fatalf("status --json: %v\n%s", err, raw)
	}
	h := st.Pods[0].Handoffs
	if h.State != "pending" || !strings.HasPrefix(h.Line, "3 of 1,204 shops pending, oldest ") || h.Report["pending"] != 3.0 || h.Report["shops"] != 1204.0 ||
		h.Report["flags_version"] != float64(v) || h.Report["replica"] != "r1" || h.Report["oldest_pending_age_ns"].(float64) < 2e9 || h.Report["started"] == nil {
		t.Errorf("status --json, 3 shops pending: %+v", h)
	}
	if _, ok := h.Report["finished"]; ok {
		t.Errorf("status --json, 3 shops pending: a finish time: %+v", h.Report)
	}

	saveHandoffs(t, topo, "pod-a", reservation.HandoffProgress{FlagsVersion: v, Shops: 1204, Done: 1204, Started: now.Add(-time.Second),
		Finished: now.Add(-time.Second + 380*time.Millisecond), Updated: now, Replica: "r1"})
	if out := status(); !strings.Contains(out, podLine+fmt.Sprintf("    fences: handed off 1,204/1,204 shops in 380ms (flags version %d)\n", v)) {
		t.Errorf("status with every shop handed off:\n%s", out)
	}
}
