package faulttest

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/faults"
)

// fault is what a cell does to one server inside its window: a network
// fault on the server's proxy (a faults.Kind), or a process fault on the
// server's own process (a private server, package testproc).
type fault string

// The process faults, in the order the matrix runs them.
const (
	// faultKill sends SIGKILL to the server at the window's start; at its
	// end the server is started again, on the same port and data, and the
	// fault ends once it answers (after MariaDB's crash recovery, or
	// Redis's loading its append-only file): what a crash and a supervisor's
	// restart look like, where what the server acknowledged survives.
	faultKill fault = "kill"
	// faultPause sends SIGSTOP at the window's start and SIGCONT at its
	// end: a server frozen (a stall, a VM paused) whose kernel still
	// accepts connections, and which runs every request it was sent, those
	// whose callers gave up included, once it runs again.
	faultPause fault = "pause"
)

// processFaults lists the process faults.
var processFaults = []fault{faultKill, faultPause}

// process reports whether f is done to a process rather than a proxy.
func (f fault) process() bool { return slices.Contains(processFaults, f) }

// total reports whether f fails every call the server gets inside the
// window (where the others let some through: a latency spike may stay
// under a deadline, a lost-reply blip or a restart's downtime may miss a
// call). A pause is no total fault: the server answers late, not never,
// and a call that waits it out (the relay's comparison of a reserve, in
// the mysql column) is answered, and compared, as after a latency spike.
func (f fault) total() bool {
	switch f {
	case fault(faults.Down), fault(faults.Timeout), fault(faults.ResetPeer), faultKill:
		return true
	}
	return false
}

// inject starts f on s and returns what ends it.
func (c *cell) inject(s server, f fault) (heal func() error, err error) {
	if !f.process() {
		in, err := c.proxy[s].Inject(faults.Fault{Kind: faults.Kind(f)})
		if err != nil {
			return nil, err
		}
		return in.Heal, nil
	}
	p := c.proc[s]
	if p == nil {
		return nil, fmt.Errorf("%s is no private server in this cell", s)
	}
	if f == faultKill {
		return p.Start, p.Kill()
	}
	return p.Resume, p.Pause()
}

// processColumns are the modes the process cells run in: the two where one
// store decides throughout, so that with each server faulted in each, every
// process fault meets both a server that decides and one that only
// follows (Redis where MySQL decides; MySQL, but for the claims' ledger,
// where Redis decides). The shadow and kill columns are left out for the
// matrix's wall time (a process cell also starts a private server, and
// stops it: about 2s, a MariaDB's first of the binary a few more): shadow
// differs from redis by the comparison only, and the kill column's
// handback under a fault is what its network cells exercise.
var processColumns = []string{"redis", "mysql"}

// TestFaultMatrix runs every cell: each mode with no fault (the control),
// then with each network fault on each server, then the process cells:
// each process fault on each server, in the processColumns. Each cell:
//
//  1. wires a pod whose stores and mirror (its relay running) reach MySQL
//     and Redis through proxies (or, for the faulted server of a process
//     cell, directly: a private server, its own process), sets the stock
//     through the facade;
//  2. runs concurrent carts (reserve, then claim, release or nothing)
//     through the facade, recording every call, with the fault injected
//     on one proxy or process for the middle of the traffic and then
//     healed (the kill column engages its kill switch inside the window);
//  3. lets every caller finish its cart, waits for every hold to expire,
//     runs both reapers and lets the relay deliver;
//  4. checks (see the package doc): the callers (only retryable errors,
//     none where the faulted server only follows; every acknowledged
//     reservation claimed or released as its caller asked), no holds
//     left, the fences, late claims answered from tombstones, the ledger
//     against the claim rows and what callers were told, reconciliation
//     (no drift, none after repair), and the history against the model.
//
// A summary line per cell is logged, and the whole matrix at the end.
func TestFaultMatrix(t *testing.T) {
	tm := cellTimings()
	type cellSpec struct {
		mode   mode
		server server
		fault  fault
	}
	var specs []cellSpec
	for _, m := range modes {
		specs = append(specs, cellSpec{mode: m})
		for _, s := range []server{serverMySQL, serverRedis} {
			for _, k := range faults.Kinds {
				specs = append(specs, cellSpec{m, s, fault(k)})
			}
		}
	}
	for _, m := range modes {
		if !slices.Contains(processColumns, m.name) {
			continue
		}
		for _, s := range []server{serverMySQL, serverRedis} {
			for _, f := range processFaults {
				specs = append(specs, cellSpec{m, s, f})
			}
		}
	}
	var mu sync.Mutex
	var reports []report
	start := time.Now()
	t.Cleanup(func() {
		sort.Slice(reports, func(i, j int) bool { return reports[i].cell < reports[j].cell })
		var b strings.Builder
		failed := 0
		for _, r := range reports {
			verdict := "ok"
			if r.failures > 0 {
				verdict, failed = "FAIL", failed+1
			}
			fmt.Fprintf(&b, "\n%-28s %-4s %6s | %s\n    classes: %s\n    late claims %s\n    history: %s\n    drift: %s", r.cell, verdict,
				r.took.Round(100*time.Millisecond), r.traffic, r.classes, r.late, r.history, r.drift)
		}
		t.Logf("fault matrix: %d cells, %d failed, %s wall time (phases: traffic %s, fault %s-%s, settle <= %s, ttl %s; %d callers per cell)%s",
			len(reports), failed, time.Since(start).Round(time.Second), tm.traffic, tm.faultAt, tm.healAt, tm.settle, tm.ttl, tm.workers, b.String())
	})
	for _, spec := range specs {
		name := spec.mode.name + "/none"
		if spec.fault != "" {
			name = fmt.Sprintf("%s/%s/%s", spec.mode.name, spec.server, spec.fault)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			o := cellOptions{}
			if spec.fault.process() {
				o.private = spec.server
			}
			c := setup(t, spec.mode, tm, o)
			r := newRun(c)
			var injectErr error
			done := make(chan struct{})
			if spec.fault != "" {
				// The fault runs on its own clock, inside the traffic.
				go func() {
					defer close(done)
					time.Sleep(time.Until(r.start.Add(tm.faultAt)))
					if injectErr = c.awaitHandoff(r.start.Add(tm.traffic)); injectErr != nil {
						return
					}
					// A window delayed by the handoff keeps its length.
					healAt := r.start.Add(tm.healAt).Add(time.Since(r.start.Add(tm.faultAt)))
					heal, err := c.inject(spec.server, spec.fault)
					if injectErr = err; err != nil {
						return
					}
					r.faultInjected()
					time.Sleep(time.Until(healAt))
					injectErr = heal()
					r.faultHealed()
				}()
			} else {
				close(done)
			}
			r.traffic(t)
			<-done
			if injectErr != nil {
				t.Fatalf("fault %s on %s: %v", spec.fault, spec.server, injectErr)
			}
			rep := r.check(t, spec.server, spec.fault)
			rep.cell, rep.took = name, time.Since(began)
			if t.Failed() {
				rep.failures = 1
			}
			t.Logf("%s: %s\nclasses: %s\nlate claims %s\nhistory: %s\ndrift: %s", name, rep.traffic, rep.classes, rep.late, rep.history, rep.drift)
			mu.Lock()
			reports = append(reports, rep)
			mu.Unlock()
		})
	}
}
