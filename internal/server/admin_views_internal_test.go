package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// stateOf says a store decides only when the pod's handoff report for the
// replica's flags version says every shop is handed off; every other
// report (pending, none, older, newer, unreadable) says where the pod is
// going instead, kill switch or not.
func TestStateOfWaitsForTheFences(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	mysql := wire.DecisionOf(authority.Decision{Mode: authority.ModeMySQL, Kill: authority.KillOff, Version: 12})
	killed := wire.DecisionOf(authority.Decision{Mode: authority.ModeMySQL, Kill: authority.KillRedis, Version: 12})
	if mysql.Authority != "mysql" || mysql.Effective != "mysql" || killed.Authority != "redis" || killed.Effective != "shadow" {
		t.Fatalf("routes: %+v %+v", mysql, killed)
	}
	done := reservation.HandoffProgress{FlagsVersion: 12, Shops: 1204, Done: 1204, Started: now.Add(-time.Second), Finished: now.Add(-620 * time.Millisecond), Updated: now}
	pending := reservation.HandoffProgress{FlagsVersion: 12, Shops: 1204, Done: 1201, Pending: 3, OldestPending: now.Add(-2 * time.Second), Started: now.Add(-3 * time.Second), Updated: now}
	older, newer := done, done
	older.FlagsVersion, newer.FlagsVersion = 11, 13
	stale := pending
	stale.Updated = now.Add(-time.Minute)
	for _, c := range []struct {
		name     string
		eff      wire.Decision
		p        reservation.HandoffProgress
		ok       bool
		err      error
		state    rollout.HandoffState
		headline string
		line     string
	}{
		{"done", mysql, done, true, nil, rollout.HandoffsDone, "MySQL decides (mysql)", "handed off 1,204/1,204 shops in 380ms (flags version 12)"},
		{"pending", mysql, pending, true, nil, rollout.HandoffsPending, "handing off to MySQL (mysql): 3 of 1,204 shops pending, oldest 2s",
			"3 of 1,204 shops pending, oldest 2s (flags version 12)"},
		{"stale report", mysql, stale, true, nil, rollout.HandoffsPending, "handing off to MySQL (mysql): 3 of 1,204 shops pending, oldest 2s",
			"3 of 1,204 shops pending, oldest 2s (flags version 12); the report is 1m0s old: is the pod's handoff sweeper running?"},
		{"none", mysql, reservation.HandoffProgress{}, false, nil, rollout.HandoffsNotReported,
			"MySQL should decide (mysql): the handoffs of flags version 12 are not reported yet",
			"no report for flags version 12 yet (no sweep of the pod has reported)"},
		{"older", mysql, older, true, nil, rollout.HandoffsNotReported,
			"MySQL should decide (mysql): the handoffs of flags version 12 are not reported yet",
			"no report for flags version 12 yet (last: version 11, handed off 1,204/1,204 shops in 380ms)"},
		{"newer", mysql, newer, true, nil, rollout.HandoffsNewer,
			"MySQL should decide (mysql): the handoffs reported are of flags version 13, newer than this replica's 12",
			"reported for flags version 13, newer than version 12: handed off 1,204/1,204 shops in 380ms"},
		{"unreadable", mysql, reservation.HandoffProgress{}, false, errors.New("mysql down"), rollout.HandoffsUnknown,
			"MySQL should decide (mysql): the handoffs are unknown", "unknown: mysql down"},
		{"killed, done", killed, done, true, nil, rollout.HandoffsDone, "Redis decides: kill switch redis", "handed off 1,204/1,204 shops in 380ms (flags version 12)"},
		{"killed, pending", killed, pending, true, nil, rollout.HandoffsPending, "handing off to Redis (kill switch redis): 3 of 1,204 shops pending, oldest 2s",
			"3 of 1,204 shops pending, oldest 2s (flags version 12)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := judgeHandoffs(c.p, c.ok, c.err, c.eff.Version, now)
			if hv := h.view; hv.State != string(c.state) || hv.Line != c.line {
				t.Errorf("handoffs %q %q, want %q %q", hv.State, hv.Line, c.state, c.line)
			}
			if (h.view.Report != nil) != c.ok {
				t.Errorf("report %+v with ok %v", h.view.Report, c.ok)
			}
			st := stateOf(c.eff, c.eff, wire.Kill{State: c.eff.Kill}, nil, h)
			if st.Headline != c.headline || st.Handoffs != string(c.state) || st.Decides != c.eff.Authority {
				t.Errorf("state %+v, want headline %q", st, c.headline)
			}
			if fences := strings.Contains(st.Detail, "Fences: "+c.line+"."); fences == (c.state == rollout.HandoffsDone) {
				t.Errorf("detail %q: the fences' line said %v, want %v", st.Detail, fences, c.state != rollout.HandoffsDone)
			}
		})
	}
	// A replica that cannot read its flags says that, whatever the fences.
	st := stateOf(wire.Decision{Authority: "none", Error: "not loaded"}, wire.Decision{}, wire.Kill{}, nil, judgeHandoffs(done, true, nil, 0, now))
	if st.State != "unknown" || st.Headline != "no decision: flags unreadable" {
		t.Errorf("flags unreadable: %+v", st)
	}
}
