package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// Issue 24 point 3: the status never says a store decides while the
// fences may say another. pod-a's flags say mysql; what its fences say is
// the report its handoff sweeper keeps in the pod's database. No sweeper
// runs here (no relay), so the test writes the reports a sweeper would,
// where the sweeper writes them, and the server reads them through the
// cell as it reads a real sweeper's: none yet, 3 of 1,204 shops pending,
// a report of an older flags version, and every shop handed off.
func TestStatusSaysWhatTheFencesSay(t *testing.T) {
	t.Parallel()
	h := setup(t, options{modes: map[string]authority.Mode{"pod-a": authority.ModeShadow}, noRelay: true})
	ctx := context.Background()
	// pod-a to mysql at version 2: a report of version 1 is then an older
	// version's.
	writeFlags(t, h.topo.FlagsFile, map[string]authority.Mode{"pod-a": authority.ModeMySQL})
	const version = 2
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if v, _ := h.cell.Flags.AppliedVersion(ctx); v == version {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("flags version %d never applied", version)
		}
	}
	h.waitDecision("pod-a", authority.ModeMySQL, authority.KillOff)
	save := func(p reservation.HandoffProgress) {
		t.Helper()
		if err := h.cell.Pod("pod-a").MySQL.SaveHandoffProgress(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	// pod reads pod's view and its first shop's from the admin status.
	type podState struct{ state, handoffs, shop map[string]any }
	pod := func(name string) podState {
		t.Helper()
		st := h.admin("GET", "/admin/rollout/status", nil)
		if st.status != 200 {
			t.Fatalf("status: %d %s", st.status, st.raw)
		}
		var ps podState
		for _, p := range st.body["pods"].([]any) {
			if pv := mapOf(p); str(pv["pod"]) == name {
				ps.state, ps.handoffs = mapOf(pv["state"]), mapOf(pv["handoffs"])
			}
		}
		for _, s := range st.body["shops"].([]any) {
			if sv := mapOf(s); str(sv["pod"]) == name && ps.shop == nil {
				ps.shop = mapOf(sv["state"])
			}
		}
		if ps.state == nil {
			t.Fatalf("no pod %s in %s", name, st.raw)
		}
		return ps
	}
	const decides = "MySQL decides (mysql)"

	// No report at all: the sweeper has not reported this version.
	a := pod("pod-a")
	if got, want := str(a.state["headline"]), fmt.Sprintf("MySQL should decide (mysql): the handoffs of flags version %d are not reported yet", version); got != want {
		t.Errorf("pod-a without a report: headline %q, want %q", got, want)
	}
	if str(a.handoffs["state"]) != "not_reported" || a.handoffs["report"] != nil || str(a.state["handoffs"]) != "not_reported" {
		t.Errorf("pod-a's handoffs without a report: %v (state %v)", a.handoffs, a.state)
	}

	// 3 of 1,204 pending, the oldest for 2 s.
	now := time.Now().UTC()
	save(reservation.HandoffProgress{FlagsVersion: version, Shops: 1204, Done: 1201, Pending: 3, OldestPending: now.Add(-2 * time.Second),
		Started: now.Add(-3 * time.Second), Updated: now, Replica: "replica-1"})
	a = pod("pod-a")
	if got := str(a.state["headline"]); got == decides || !strings.HasPrefix(got, "handing off to MySQL (mysql): 3 of 1,204 shops pending, oldest 2") {
		t.Errorf("pod-a with 3 shops pending: headline %q", got)
	}
	if got := str(a.handoffs["line"]); !strings.HasPrefix(got, "3 of 1,204 shops pending, oldest 2") || !strings.HasSuffix(got, fmt.Sprintf("(flags version %d)", version)) {
		t.Errorf("pod-a's handoff line with 3 shops pending: %q", got)
	}
	if r := mapOf(a.handoffs["report"]); str(a.handoffs["state"]) != "pending" || num(r["pending"]) != 3 || num(r["shops"]) != 1204 ||
		num(r["flags_version"]) != float64(version) || str(r["replica"]) != "replica-1" || str(r["oldest_pending"]) == "" {
		t.Errorf("pod-a's handoffs with 3 shops pending: %v", a.handoffs)
	}
	if str(a.state["decides"]) != "mysql" || str(a.state["state"]) != "mysql" || !strings.Contains(str(a.state["detail"]), "Until a shop is handed off, the store its fences name decides it") {
		t.Errorf("pod-a's state with 3 shops pending: %v", a.state)
	}
	// Its shops are said the same way: any of them may be among the 3.
	if got := str(a.shop["headline"]); !strings.HasPrefix(got, "handing off to MySQL (mysql): 3 of 1,204") {
		t.Errorf("a shop of pod-a with 3 shops pending: headline %q", got)
	}

	// A report of an older version, all done: not this version's.
	save(reservation.HandoffProgress{FlagsVersion: version - 1, Shops: 3, Done: 3, Started: now.Add(-time.Minute),
		Finished: now.Add(-time.Minute + 20*time.Millisecond), Updated: now, Replica: "replica-1"})
	a = pod("pod-a")
	if got := str(a.state["headline"]); got == decides || !strings.Contains(got, "not reported yet") {
		t.Errorf("pod-a with a report of version %d: headline %q", version-1, got)
	}
	if got, want := str(a.handoffs["line"]), fmt.Sprintf("no report for flags version %d yet (last: version %d, handed off 3/3 shops in 20ms)", version, version-1); got != want {
		t.Errorf("pod-a's handoff line with an older report: %q, want %q", got, want)
	}

	// Every shop handed off at this version: now MySQL decides.
	save(reservation.HandoffProgress{FlagsVersion: version, Shops: 1204, Done: 1204, Started: now.Add(-time.Second),
		Finished: now.Add(-time.Second + 380*time.Millisecond), Updated: now, Replica: "replica-1"})
	a = pod("pod-a")
	if got := str(a.state["headline"]); got != decides {
		t.Errorf("pod-a with every shop handed off: headline %q, want %q", got, decides)
	}
	if got, want := str(a.handoffs["line"]), fmt.Sprintf("handed off 1,204/1,204 shops in 380ms (flags version %d)", version); got != want || str(a.handoffs["state"]) != "done" {
		t.Errorf("pod-a's handoffs, every shop handed off: %v, want line %q", a.handoffs, want)
	}
	if strings.Contains(str(a.state["detail"]), "Fences") {
		t.Errorf("pod-a's detail with every shop handed off still speaks of the fences: %q", a.state["detail"])
	}

	// pod-b (redis) has no report either: Redis should decide, not yet
	// known to.
	if got := str(pod("pod-b").state["headline"]); got != fmt.Sprintf("Redis should decide (redis): the handoffs of flags version %d are not reported yet", version) {
		t.Errorf("pod-b without a report: headline %q", got)
	}
}
