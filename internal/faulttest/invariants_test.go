package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/internal/faults"
	"github.com/seed31b0e981/reservoir/internal/history"
	"github.com/seed31b0e981/reservoir/internal/reconcile"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
)

// authorityUses reports whether the answer to op goes through server in
// mode m, so that a fault there may reach the caller. Redis answers in
// every mode but mysql (and always under the kill switch); MySQL answers in
// mysql mode, and in every mode its ledger takes the claim's deduction.
// Where it is false the server is only a shadow for op: a fault there must
// change no answer.
func authorityUses(m mode, s server, op string) bool {
	redisAnswers := m.kill != rollout.KillOff || m.mode != rollout.ModeMySQL
	if s == serverRedis {
		return redisAnswers
	}
	return !redisAnswers || op == "claim"
}

// report is one cell's line in the matrix summary.
type report struct {
	cell     string
	took     time.Duration
	traffic  string
	classes  string
	history  string
	drift    string
	failures int
}

// check settles the cell after the fault was healed and checks every
// invariant, reporting each broken one as a test error. kind is the fault
// that was injected on s ("" for none).
func (r *run) check(t testing.TB, s server, kind faults.Kind) report {
	t.Helper()
	c := r.c
	ctx := context.Background()
	faulted := kind != ""
	rep := report{traffic: r.summary()}
	for _, k := range slices.Sorted(maps.Keys(r.samples)) {
		t.Logf("first %s error: %s", k, r.samples[k])
	}

	// What callers saw.
	for _, v := range r.violations {
		t.Errorf("caller: %s", v)
	}
	for _, u := range r.unclear {
		t.Errorf("unclear error (a fault must surface as a retryable error): %s", u)
	}
	for token, f := range r.fates {
		if f.unresolved != "" && f.unresolved != "claim" { // claims are reported as violations
			t.Errorf("%s %s: no answer %s after healing", f.unresolved, token, c.t.settle)
		}
	}
	for key, n := range r.errs {
		op, kind, _ := strings.Cut(key, ":")
		if strings.HasPrefix(kind, "answer") {
			continue
		}
		if !faulted {
			t.Errorf("no fault, yet %d %s errors on %s", n, kind, op)
		} else if !authorityUses(c.mode, s, op) {
			t.Errorf("%s is only the shadow for %s in this mode, yet %d callers got %s errors: a shadow fault changed answers; the first one's calls:%s",
				s, op, n, kind, r.trail(r.sampleTokens[key]))
		}
	}

	// Shadow calls finish, then every hold expires and the reapers return
	// it. The last hold is the last reserve's (its shadow may start up to
	// the shadow deadline later).
	c.drain(t)
	classes, samples := c.obs.snapshot()
	rep.classes = classSummary(classes)
	for _, cl := range compare.Classes {
		if s, ok := samples[cl]; ok {
			t.Logf("first %s: %s", cl, s)
		}
	}
	// A panic is a bug whatever the fault: the facade keeps it from the
	// caller, not from the test.
	if n := classes[compare.ClassShadowPanic]; n > 0 {
		t.Errorf("%d shadow calls panicked, the first: %s", n, samples[compare.ClassShadowPanic])
	}
	// A fault on a shadow is seen by the comparer: it is classified, not
	// silently absorbed. Checked where every shadow call in the window
	// fails (the other faults let some through: a latency spike may stay
	// under the shadow deadline, a lost-reply blip or a restart's downtime
	// may miss a call) and a call that only the shadow serves ran in it.
	route := rollout.Decision{Mode: c.mode.mode, Kill: c.mode.kill}.Route()
	total := kind == faults.Down || kind == faults.Timeout || kind == faults.ResetPeer
	shadowCalls := 0
	for _, op := range []string{"reserve", "claim", "release"} {
		if !authorityUses(c.mode, s, op) {
			shadowCalls += r.faultCalls[op]
		}
	}
	if route.Shadow && total && shadowCalls > 0 {
		n := 0
		for cl, k := range classes {
			if cl.ShadowFault() {
				n += k
			}
		}
		if n == 0 {
			t.Errorf("%s was faulted as a shadow during %d calls, yet no observation is a shadow fault: %s", s, shadowCalls, rep.classes)
		}
	}

	// Before the holds expire: a Redis hold for a token the ledger has
	// deducted (a leftover) will give units back that the ledger no longer
	// has. Log each with what its caller did and was told, to explain the
	// drift the reconciliation will report.
	if leftovers, err := c.rdDirect.Drift(ctx, &redisstore.DriftParams{Shop: shop, HoldsFrom: reservation.AuthorityRedis}); err != nil {
		t.Errorf("redis drift: %v", err)
	} else {
		for _, d := range leftovers {
			if d.Kind == redisstore.DriftLeftoverHold {
				t.Logf("leftover Redis hold before expiry: %s; its calls:%s", d, r.trail(d.Token))
			}
		}
	}
	time.Sleep(time.Until(r.lastReserve.Add(c.t.ttl + c.t.shadow + time.Second)))
	for _, st := range []reservation.Store{c.myDirect, c.rdDirect} {
		for range 20 {
			res, err := st.Reap(ctx, &reservation.ReapParams{})
			if err != nil {
				t.Fatalf("reap %s: %v", st.Name(), err)
			}
			if res.Holds == 0 {
				break
			}
		}
	}
	if n := c.db.Count(t, "reserved_quantities"); n != 0 {
		t.Errorf("MySQL: %d hold rows left after expiry and reaping", n)
	}
	for _, k := range c.r.Keys(t) {
		if strings.Contains(k, ":hold:") || strings.HasSuffix(k, ":expiry") {
			t.Errorf("Redis: %s left after expiry and reaping", k)
		}
	}

	r.checkLedger(t)

	// Reconcile: MySQL's pools against the ledger (the projection), Redis
	// against the ledger and the true holds; then repair the side that is
	// not the authority and find nothing left.
	rc := reconcile.New([]reconcile.Pod{{Name: pod, MySQL: c.myDirect, Redis: c.rdDirect}}, c.modes)
	opts := reconcile.Options{Shops: []int64{shop}}
	before, err := rc.Run(ctx, pod, opts)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	for _, f := range before.Findings {
		switch f.Kind {
		case string(mysqlstore.DriftOverProjected), string(mysqlstore.DriftOverCap):
			t.Errorf("pool projection broken: %s", f.Detail)
		case string(mysqlstore.DriftEmptyPool):
		default:
			t.Logf("drift before repair: %s %s", f.Side, f.Detail)
		}
	}
	opts.Repair = true
	if _, err := rc.Run(ctx, pod, opts); err != nil {
		t.Fatalf("reconcile with repair: %v", err)
	}
	opts.Repair = false
	after, err := rc.Run(ctx, pod, opts)
	if err != nil {
		t.Fatalf("reconcile after repair: %v", err)
	}
	for _, f := range after.Findings {
		if f.Kind != string(mysqlstore.DriftEmptyPool) {
			t.Errorf("drift left after repair: %s %s", f.Side, f.Detail)
		}
	}
	rep.drift = fmt.Sprintf("before repair %s; after %s", driftSummary(before), driftSummary(after))

	// The history: every call against the model of the authority.
	res, err := history.Check(r.rec.Entries(), history.CheckOptions{Dir: history.ArtifactDir(t), Timeout: 30 * time.Second})
	if err != nil {
		t.Errorf("history check: %v", err)
	}
	switch res.Outcome {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Logf("history check timed out: %s", res)
	default:
		t.Errorf("history is not linearizable: %s", res)
	}
	rep.history = res.String()
	return rep
}

// checkLedger checks the claim rules against the ledger: every claim row
// is a claim a caller was told about, with the allocations it was told;
// every claim a caller was told about has its row; no released cart has
// one; and each ledger row went down by exactly the claim rows' units
// (deducted once per claim), never below zero, never more than it was
// given.
func (r *run) checkLedger(t testing.TB) {
	t.Helper()
	c := r.c
	rows, err := c.db.Query("SELECT token, allocations FROM reservation_claims WHERE shop_id = ?", shop)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	claimed := map[int64]int64{}
	seen := map[string]bool{}
	for rows.Next() {
		var token, doc string
		if err := rows.Scan(&token, &doc); err != nil {
			t.Fatal(err)
		}
		var allocs []reservation.Allocation
		if err := json.Unmarshal([]byte(doc), &allocs); err != nil {
			t.Fatalf("claim row %s: %v", token, err)
		}
		seen[token] = true
		for _, a := range allocs {
			claimed[a.Item] += a.Quantity
		}
		f := r.fates[token]
		switch {
		case f == nil:
			t.Errorf("claim row for %s, a token no caller used", token)
		case f.released:
			t.Errorf("claim row for %s, which its caller was told was released: the ledger was deducted for units given back", token)
		case !f.claimed && f.unresolved == "":
			t.Errorf("claim row for %s, which its caller never claimed", token)
		case f.claimed && !sameAllocs(f.allocs, allocs):
			t.Errorf("claim row for %s deducted %v, its caller was told %v", token, allocs, f.allocs)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for token, f := range r.fates {
		if f.claimed && !seen[token] {
			t.Errorf("%s: its caller was told claimed, but there is no claim row: the ledger was never deducted", token)
		}
	}
	levels, err := c.myDirect.Stock(context.Background(), &reservation.StockParams{Shop: shop})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range levels {
		given := c.t.stock[l.Item]
		switch {
		case l.Available < 0:
			t.Errorf("item %d: ledger %d, below zero", l.Item, l.Available)
		case claimed[l.Item] > given:
			t.Errorf("item %d: %d units claimed, the ledger was given %d: oversold", l.Item, claimed[l.Item], given)
		case l.Available != given-claimed[l.Item]:
			t.Errorf("item %d: ledger %d, want %d given - %d in claim rows: deductions and claims disagree", l.Item, l.Available, given, claimed[l.Item])
		}
	}
}

func sameAllocs(a, b []reservation.Allocation) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	reservation.SortAllocations(a)
	reservation.SortAllocations(b)
	return slices.Equal(a, b)
}

func classSummary(classes map[compare.Class]int) string {
	var parts []string
	for _, cl := range compare.Classes {
		if n := classes[cl]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", cl, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func driftSummary(rep reconcile.Report) string {
	counts := map[string]int{}
	for _, f := range rep.Findings {
		if f.Kind != string(mysqlstore.DriftEmptyPool) {
			counts[f.Side+":"+f.Kind]++
		}
	}
	if len(counts) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}
