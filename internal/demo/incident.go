package demo

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// The tour's incident. Once MySQL has decided pod-a for IncidentAfter, a
// scripted fault corrupts pod-a's MySQL behind reservoir's back: a
// "maintenance script" writes holds straight into its tables, holding out
// location 1's whole stock of every item of pod-a's shops. Nothing of it
// goes through reservoir, so nothing reaches the change feed and Redis
// never hears of it: that is the fault, a MySQL that no longer agrees
// with what it decided.
//
// Everything after the injection is the product's own, unscripted: MySQL,
// deciding, serves carts that prefer location 1 from location 2 (or
// refuses those that only take location 1); Redis, evaluating the same
// carts as the shadow, still serves them from location 1; the comparer
// classifies each difference (allocation_mismatch, outcome_mismatch); the
// stage's ceiling gates break; the rollout controller's automatic step
// (rollout.Controller.AutoStep, what `reservoir rollout auto` runs)
// engages the kill switch on pod-a, and Redis decides again. The demo
// only takes that step when a gate breaks, so that it never advances the
// plan past walkTo on its own.
//
// After IncidentHold (the dashboard shows the evidence and the rollback
// meanwhile; MySQL, now the shadow, still disagrees), the demo does what
// the on-call engineer would: `reservoir reconcile --pod pod-a --repair`
// (MySQL's shadow holds rewritten from Redis's, the decider's, which drops
// the leaked ones), then `reservoir rollout release --scope pod:pod-a`:
// MySQL decides pod-a again, each shop's handoff copying Redis's state in
// first.

// incidentPod is the pod the incident strikes: the one the walk gave to
// MySQL.
const incidentPod = "pod-a"

// incidentLocation is the location whose stock the leaked holds take.
const incidentLocation = 1

// leakPrefix starts the tokens of the leaked holds.
const leakPrefix = "leaked-"

// The fault, in one transaction on pod-a's database: a reservation row and
// a hold line per item at the location, each holding the ledger's whole
// available stock there, for an hour. Then the pool units at the location
// are deleted, as the store's own trim would (pool + held <= available),
// so that no reserve finds a unit left over from before.
//
// The flash sale's item is spared. Its buyers ask for one or two units, and
// a refusal of so few units with none left is what the comparer counts as a
// stock-out race, not a mismatch (compare.Rules.RaceMargin): a fault that
// caught a sale still running would drown the incident's mismatches in
// hundreds of "races" and keep its ceiling gate from breaking.
const (
	sqlLeakStates = `INSERT INTO reservations (shop_id, token, state, decided_by, allocations, short, expires_at)
  SELECT shop_id, CONCAT(?, inventory_item_id), 'held', 'mysql', CONCAT(inventory_item_id, ':', location_id, ':', available), '',
    NOW(3) + INTERVAL 1 HOUR
  FROM inventory_ledger WHERE shop_id IN (?, ?) AND location_id = ? AND inventory_item_id <> ? AND available > 0`
	sqlLeakHolds = `INSERT INTO reserved_quantities (shop_id, token, inventory_item_id, location_id, quantity, expires_at, authority)
  SELECT shop_id, CONCAT(?, inventory_item_id), inventory_item_id, location_id, available, NOW(3) + INTERVAL 1 HOUR, 'mysql'
  FROM inventory_ledger WHERE shop_id IN (?, ?) AND location_id = ? AND inventory_item_id <> ? AND available > 0`
	sqlLeakTrim = `DELETE FROM available_units WHERE shop_id IN (?, ?) AND location_id = ? AND inventory_item_id <> ?`
	sqlLeakLeft = `SELECT COUNT(*) FROM reserved_quantities WHERE token LIKE CONCAT(?, '%')`
)

// incidentPhase is where the incident stands.
type incidentPhase int

const (
	incidentWaiting   incidentPhase = iota // MySQL decides pod-a; the fault is not in yet
	incidentFaulty                         // the fault is in; waiting for a gate to break
	incidentKilled                         // the controller engaged the kill switch
	incidentRecovered                      // repaired and released
)

// incident runs the tour's incident, one step at a time (walker.step).
type incident struct {
	cfg    Config
	c      *cell.Cell
	ctl    *rollout.Controller
	srv    *server.Server
	p      *printer
	podDSN string

	phase incidentPhase
	at    time.Time // when the phase began
	left  int       // a refused repair or release, retried on the next steps
	// repaired: the repair is done (a refused release is retried alone).
	repaired bool
	// leakedAtFirst is how many leaked hold lines the first repair attempt
	// found (-1 before any): an attempt that fails part way (a shop whose
	// look timed out) has already removed some, and the message of the one
	// that completes counts from the first.
	leakedAtFirst int
}

// faultWindow bounds how long the fault stays in without a gate breaking
// (too little traffic, say): the demo then repairs it all the same.
const faultWindow = 3 * time.Minute

func (in *incident) done() bool { return in.phase == incidentRecovered }

// step moves the incident on, given the rollout's status.
func (in *incident) step(ctx context.Context, st rollout.Status) {
	switch in.phase {
	case incidentWaiting:
		if st.Stage != walkTo || time.Since(st.Since) < in.cfg.IncidentAfter {
			return
		}
		n, err := in.inject(ctx)
		if err != nil {
			in.p.say("incident: the fault could not be injected (%v); will retry", err)
			return
		}
		in.p.say("INCIDENT: a maintenance script writes %d holds straight into %s's MySQL, holding out all the stock at location %d of shops %s (the flash sale's item aside); "+
			"it bypasses reservoir, so Redis never hears of them.", n, incidentPod, incidentLocation, shopList(pods[0].shops))
		in.p.say("incident: MySQL, deciding %s, now serves carts that prefer location %d from another location, or refuses them; "+
			"Redis, asked the same carts as the shadow, still serves location %d. Watch the comparer count the differences and the gates break.",
			incidentPod, incidentLocation, incidentLocation)
		in.phase, in.at = incidentFaulty, time.Now()
	case incidentFaulty:
		breaking := ""
		for _, g := range st.Gates {
			if g.Breaking {
				breaking = g.Gate
				break
			}
		}
		if breaking == "" {
			if time.Since(in.at) > faultWindow {
				in.p.say("incident: no gate broke within %s (too little traffic?); repairing MySQL all the same", faultWindow)
				in.phase, in.at = incidentKilled, time.Time{}
			}
			return
		}
		// What `reservoir rollout auto` runs every interval. The demo
		// takes the step only once a gate breaks: taken while every gate
		// passes, it would advance the plan past walkTo.
		a, err := in.ctl.AutoStep(ctx, "demo (auto)")
		if err != nil {
			in.p.say("incident: the automatic step failed: %v (will retry)", err)
			return
		}
		if a.Did != "killed" {
			return
		}
		in.p.say("incident: the automatic controller engaged the kill switch on %s: %s", incidentPod, a.Why)
		in.p.say("incident: Redis decides %s again, within milliseconds (each shop's handoff drains MySQL's change feed into Redis first); "+
			"MySQL, the shadow now, still disagrees. The dashboard shows the evidence (diffs, gates) and the rollback (kill switch, audit). "+
			"`%s rollout --topology %s history` lists it too.", incidentPod, in.cfg.Program, in.topology())
		in.phase, in.at = incidentKilled, time.Now()
	case incidentKilled:
		if time.Since(in.at) < in.cfg.IncidentHold {
			return
		}
		if err := in.repairAndRelease(ctx); err != nil {
			if in.left++; in.left == 1 || in.left%10 == 0 {
				in.p.say("incident: recovery: %v (will retry)", err)
			}
			return
		}
		in.phase, in.at = incidentRecovered, time.Now()
	}
}

// inject writes the fault into pod-a's MySQL and returns the holds written.
func (in *incident) inject(ctx context.Context) (int64, error) {
	db, err := sql.Open("mysql", in.podDSN)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	shops := pods[0].shops
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, sqlLeakStates, leakPrefix, shops[0], shops[1], incidentLocation, flashItem); err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, sqlLeakHolds, leakPrefix, shops[0], shops[1], incidentLocation, flashItem)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	if _, err := tx.ExecContext(ctx, sqlLeakTrim, shops[0], shops[1], incidentLocation, flashItem); err != nil {
		return 0, err
	}
	return n, tx.Commit()
}

// repairAndRelease repairs pod-a's MySQL from Redis, checks that the leaked holds
// are gone, and releases the kill switch, saying each step's command. The
// repair runs through the server (server.Server.RunReconcile), so that the
// dashboard's drift panel shows it; once done, a retry (a refused
// release) only retries the release.
func (in *incident) repairAndRelease(ctx context.Context) error {
	killed := in.killed(ctx)
	if !in.repaired {
		if err := in.repair(ctx); err != nil {
			return err
		}
		in.repaired = true
	}
	if !killed {
		return nil
	}
	reason := "demo: the leaked holds are repaired; MySQL agrees with Redis again"
	if err := in.ctl.Release(ctx, flagdoc.PodScope(incidentPod), rollout.KillOptions{Actor: "demo", Reason: reason}); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	in.p.say("incident: released the kill switch on %s, as `%s rollout --topology %s release --scope pod:%s --reason ...` does: "+
		"MySQL decides %s again, each shop's handoff copying Redis's state in first. Recovered. "+
		"The release started the stage's gates again, from the comparer's next window (docs/rollout.md).",
		incidentPod, in.cfg.Program, in.topology(), incidentPod, incidentPod)
	return nil
}

// repair runs `reconcile --repair` on pod-a through the server and says
// how many of the leaked holds it removed and how many remain (none, or
// it fails).
func (in *incident) repair(ctx context.Context) error {
	db, err := sql.Open("mysql", in.podDSN)
	if err != nil {
		return err
	}
	defer db.Close()
	leaked := func() (int, error) {
		var n int
		err := db.QueryRowContext(ctx, sqlLeakLeft, leakPrefix).Scan(&n)
		return n, err
	}
	before, err := leaked()
	if err != nil {
		return err
	}
	if in.leakedAtFirst < 0 {
		in.leakedAtFirst = before
	}
	before = max(before, in.leakedAtFirst)
	v, err := in.srv.RunReconcile(ctx, incidentPod, in.c.Repair)
	if err != nil {
		return fmt.Errorf("reconcile --repair: %w", err)
	}
	left, err := leaked()
	if err != nil {
		return err
	}
	if left > 0 {
		return fmt.Errorf("reconcile --repair left %d of the %d leaked hold line(s) in %s's MySQL (%s)", left, before, incidentPod, v.Report.Summary)
	}
	in.p.say("incident: repaired, as `%s reconcile --topology %s --pod %s --repair` does: MySQL's shadow holds rewritten from Redis's; "+
		"removed the %d holds the maintenance script injected, %d remain. Reconcile's summary: %s. The dashboard's drift panel shows this run.",
		in.cfg.Program, in.topology(), incidentPod, before-left, left, v.Report.Summary)
	return nil
}

// killed reports whether pod-a's kill switch is engaged.
func (in *incident) killed(ctx context.Context) bool {
	st, err := in.ctl.Status(ctx)
	if err != nil {
		return true // release is harmless when it is off
	}
	for _, p := range st.Pods {
		if p.Pod == incidentPod {
			return p.Kill.State != authority.KillOff
		}
	}
	return false
}

func (in *incident) topology() string { return dirOf(in.c) + "/topology.toml" }

func shopList(shops []int64) string {
	parts := make([]string, len(shops))
	for i, s := range shops {
		parts[i] = fmt.Sprint(s)
	}
	return strings.Join(parts, " and ")
}
