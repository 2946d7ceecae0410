package faulttest

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/faults"
)

// TestFaultMatrix runs every cell: each mode with no fault (the control),
// then with each fault on each server. Each cell:
//
//  1. wires a pod whose stores and mirror (its relay running) reach MySQL
//     and Redis through proxies, sets the stock through the facade;
//  2. runs concurrent carts (reserve, then claim, release or nothing)
//     through the facade, recording every call, with the fault injected
//     on one proxy for the middle of the traffic and then healed (the kill
//     column engages its kill switch inside the window);
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
		fault  faults.Kind
	}
	var specs []cellSpec
	for _, m := range modes {
		specs = append(specs, cellSpec{mode: m})
		for _, s := range []server{serverMySQL, serverRedis} {
			for _, k := range faults.Kinds {
				specs = append(specs, cellSpec{m, s, k})
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
			c := setup(t, spec.mode, tm, cellOptions{})
			r := newRun(c)
			var injection *faults.Injection
			var injectErr error
			done := make(chan struct{})
			if spec.fault != "" {
				// The fault runs on its own clock, inside the traffic.
				go func() {
					defer close(done)
					time.Sleep(time.Until(r.start.Add(tm.faultAt)))
					if injection, injectErr = c.proxy[spec.server].Inject(faults.Fault{Kind: spec.fault}); injectErr != nil {
						return
					}
					time.Sleep(time.Until(r.start.Add(tm.healAt)))
					injectErr = injection.Heal()
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
