package faulttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/internal/history"
	"github.com/seed31b0e981/reservoir/internal/reconcile"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// authorityUses reports whether the answer to op may depend on server in
// mode m, so that a fault there may reach the caller. Where Redis decides
// (redis, shadow) its answers are Redis's, and MySQL's ledger takes a
// claim's deduction; where MySQL decides (mysql) every answer is MySQL's
// and Redis only follows (the relay) and is asked for comparison. The kill
// column hands the shop from MySQL back to Redis inside the fault window:
// the handoff needs both (MySQL yields, its feed is drained into Redis),
// so every call may meet either server. Where it is false the server is
// only a follower for op: a fault there must change no answer.
func authorityUses(m mode, s server, op string) bool {
	switch {
	case m.kill != authority.KillOff:
		return true
	case m.mode == authority.ModeMySQL || m.mode == authority.ModeMySQLOnly:
		return s == serverMySQL
	}
	return s == serverRedis || op == "claim"
}

// report is one cell's line in the matrix summary.
type report struct {
	cell     string
	took     time.Duration
	traffic  string
	classes  string
	history  string
	drift    string
	late     string
	failures int
}

// check settles the cell after the fault was healed and checks every
// invariant, reporting each broken one as a test error. kind is the fault
// that was injected on s ("" for none).
func (r *run) check(t testing.TB, s server, kind fault) report {
	t.Helper()
	c := r.c
	ctx := context.Background()
	faulted := kind != ""
	rep := report{traffic: r.summary()}
	for _, k := range slices.Sorted(maps.Keys(r.samples)) {
		t.Logf("first %s error: %s", k, r.samples[k])
	}

	// What callers saw.
	for _, v := range r.takeViolations() {
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
			t.Errorf("%s only follows for %s in this mode, yet %d callers got %s errors: a follower's fault changed answers; the first one's calls:%s",
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
	// fails (fault.total) and a reserve the faulted server only shadows ran
	// in it (reserves are compared in every mode that compares; claims and
	// releases only where Redis decides).
	route := authority.Decision{Mode: c.mode.mode, Kill: c.mode.kill}.Route()
	total := kind.total()
	shadowCalls := 0
	if !authorityUses(c.mode, s, "reserve") {
		shadowCalls = r.faultCalls["reserve"]
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
	// has, unless the feed settles it first. Log each with what its caller
	// did and was told, to explain what the reconciliation may report.
	if found, err := c.rdDirect.Drift(ctx, &reservation.DriftParams{Shop: shop}); err != nil {
		t.Errorf("redis drift: %v", err)
	} else {
		for _, d := range found {
			if d.Kind == reservation.DriftLeftoverHold {
				t.Logf("leftover Redis hold before expiry: %s; its calls:%s", d, r.trail(d.Token))
			}
		}
	}
	// Every hold expires; the decider's reaper returns it (and MySQL's its
	// shadow holds), and where MySQL decides the relay brings the expiries
	// to Redis.
	time.Sleep(time.Until(r.lastReserve.Add(c.t.ttl + c.t.shadow + time.Second)))
	if left := r.settle(ctx); left != "" {
		t.Errorf("after expiry, reaping and the relay: %s", left)
	}

	fences := r.checkFences(t)
	rep.late = r.probeLateClaims(t)
	r.checkLedger(t)

	// Reconcile: MySQL's pools against the ledger (the projection), and
	// Redis against the decider (the fences say which): with the feed
	// delivered there is nothing to find but notes. Then repair, and find
	// nothing left.
	rc := reconcile.New([]reconcile.Pod{{Name: pod, MySQL: c.myDirect, Redis: c.rdDirect, Mirror: c.direct}})
	opts := reconcile.Options{Shops: []int64{shop}}
	before, err := rc.Run(ctx, pod, opts)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	for _, f := range before.Findings {
		switch {
		case f.Note:
		case f.Kind == string(reservation.DriftOverProjected), f.Kind == string(reservation.DriftOverCap):
			t.Errorf("pool projection broken: %s", f.Detail)
		default:
			t.Errorf("drift once the feed was delivered (Redis must hold what the decider, %s, holds): %s %s %s", f.Decider, f.Side, f.Kind, f.Detail)
		}
	}
	opts.Repair = true
	if _, err := rc.Run(ctx, pod, opts); err != nil {
		t.Errorf("reconcile with repair: %v", err)
	}
	opts.Repair = false
	after, err := rc.Run(ctx, pod, opts)
	if err != nil {
		t.Fatalf("reconcile after repair: %v", err)
	}
	for _, f := range after.Findings {
		if !f.Note {
			t.Errorf("drift left after repair: %s %s %s", f.Side, f.Kind, f.Detail)
		}
	}
	rep.drift = fmt.Sprintf("before repair %s; after %s; fences %s", driftSummary(before), driftSummary(after), fences)

	// The history: every call against the model of the deciding store.
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
		if !f.Note {
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

// settle reaps both stores until no hold is left in either, waiting for
// the relay to deliver MySQL's expiries to Redis (unless the cell has no
// feed). It returns what is still left after a bound, "" when nothing.
func (r *run) settle(ctx context.Context) string {
	c := r.c
	deadline := time.Now().Add(20 * time.Second)
	for {
		var left []string
		for _, st := range []reservation.Store{c.myDirect, c.rdDirect} {
			if _, err := st.Reap(ctx, &reservation.ReapParams{}); err != nil {
				left = append(left, fmt.Sprintf("reap %s: %v", st.Name(), err))
			}
		}
		var rows int64
		if err := c.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM reserved_quantities").Scan(&rows); err != nil {
			left = append(left, err.Error())
		} else if rows != 0 {
			left = append(left, fmt.Sprintf("MySQL: %d hold rows left", rows))
		}
		if !c.noFeed {
			if n, _, err := c.myDirect.Backlog(ctx); err != nil || n != 0 {
				left = append(left, fmt.Sprintf("MySQL's feed: %d changes not delivered (%v)", n, err))
			}
		}
		keys, err := redisKeys(ctx, c)
		if err != nil {
			left = append(left, err.Error())
		}
		for _, k := range keys {
			if strings.Contains(k, ":hold:") || strings.HasSuffix(k, ":expiry") {
				left = append(left, "Redis: "+k+" left")
			}
		}
		if len(left) == 0 {
			return ""
		}
		if time.Now().After(deadline) || c.noFeed {
			if len(left) > 10 {
				left = append(left[:10], fmt.Sprintf("and %d more", len(left)-10))
			}
			return strings.Join(left, "; ")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// redisKeys lists the cell's Redis keys (the shared standalone server).
func redisKeys(ctx context.Context, c *cell) ([]string, error) {
	var out []string
	iter := c.r.Client.Scan(ctx, 0, c.r.Prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		out = append(out, iter.Val())
	}
	return out, iter.Err()
}

// lateSample is how many carts of each fate the late claims probe.
const lateSample = 12

// probeLateClaims claims again, once every hold has expired, a sample of
// the carts of each fate, through the facade: every late claim is
// answered from the token's tombstone. A claimed cart
// answers its claim, replayed, with the same allocations; a released one
// "released" (409) and an abandoned one "expired" (410), never success and
// never "not_found" (404); a refused one "not_found" (it never held
// anything). It returns a summary for the report.
//
// The probes are not recorded in the history: after a fault's unknown
// outcomes, operations that come after every other one multiply the
// checker's search (minutes instead of milliseconds), and each probe's
// answer is checked here against what it must be.
func (r *run) probeLateClaims(t testing.TB) string {
	r.mu.Lock()
	all := map[string][]string{}
	for _, token := range slices.Sorted(maps.Keys(r.fates)) {
		f := r.fates[token]
		kind := ""
		switch {
		case f.unresolved != "":
		case f.claimed:
			kind = "claimed"
		case f.released:
			kind = "released"
		case f.abandoned:
			kind = "abandoned"
		case f.refused:
			kind = "refused"
		}
		if kind != "" {
			all[kind] = append(all[kind], token)
		}
	}
	r.mu.Unlock()
	// Evenly spread over the tokens (worker by worker, in order): every
	// caller and every phase of the traffic.
	samples := map[string][]string{}
	for kind, tokens := range all {
		step := max(1, len(tokens)/lateSample)
		for i := 0; i < len(tokens) && len(samples[kind]) < lateSample; i += step {
			samples[kind] = append(samples[kind], tokens[i])
		}
	}
	type probe struct{ kind, token string }
	var probes []probe
	for kind, tokens := range samples {
		for _, token := range tokens {
			probes = append(probes, probe{kind, token})
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	const callers = 4
	for w := range callers {
		wg.Go(func() {
			rt := &retrier{r: r}
			for i := w; i < len(probes); i += callers {
				p := probes[i]
				var res reservation.ClaimResult
				ctx, cancel := until(deadline)
				err := rt.do(ctx, "late_claim", p.token, func(ctx context.Context) error {
					start := time.Now()
					var err error
					res, err = r.c.facade.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: p.token})
					r.trace(p.token, "late claim", start, res.Outcome, res.Replayed, err)
					return err
				})
				cancel()
				if !answered(err) {
					r.violate("late claim of %s cart %s: no answer: %v", p.kind, p.token, err)
					continue
				}
				r.mu.Lock()
				f := r.fates[p.token]
				r.mu.Unlock()
				var want error
				switch p.kind {
				case "claimed":
					if err != nil || !res.Replayed || !sameAllocs(res.Allocations, f.allocs) {
						r.violate("late claim of claimed cart %s: %+v %v, want the claim replayed with %v", p.token, res, err, f.allocs)
						continue
					}
				case "released":
					want = reservation.ErrReleased
				case "abandoned":
					want = reservation.ErrExpired
				case "refused":
					want = reservation.ErrNotFound
				}
				if want != nil && !errors.Is(err, want) {
					r.violate("late claim of %s cart %s: %+v %v, want %q from its tombstone", p.kind, p.token, res, err, history.Answer(want))
					continue
				}
				mu.Lock()
				got[p.kind]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, v := range r.takeViolations() {
		t.Errorf("caller: %s", v)
	}
	var parts []string
	for _, kind := range []string{"claimed", "released", "abandoned", "refused"} {
		parts = append(parts, fmt.Sprintf("%s %d/%d", kind, got[kind], len(samples[kind])))
	}
	return "answered from tombstones: " + strings.Join(parts, ", ")
}

// checkFences checks that the shop ended where the column says, in both
// stores: MySQL deciding in the mysql column (handed off on the first
// call), Redis in the kill column (handed back by the kill switch under
// the fault), and nothing handed off where Redis decides throughout. It
// returns the fences for the report.
func (r *run) checkFences(t testing.TB) string {
	t.Helper()
	c := r.c
	ctx := context.Background()
	mf, err := c.myDirect.Fence(ctx, shop)
	if err != nil {
		t.Fatal(err)
	}
	rf, err := c.rdDirect.Fence(ctx, shop)
	if err != nil {
		t.Fatal(err)
	}
	want := reservation.NoFence
	switch {
	case c.mode.kill != authority.KillOff:
		want = reservation.Fence{Decider: reservation.AuthorityRedis, Epoch: c.modes.Version()}
	case c.mode.mode == authority.ModeMySQL || c.mode.mode == authority.ModeMySQLOnly:
		want = reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: c.modes.Version()}
	}
	if mf != want || rf != want {
		t.Errorf("fences at the end: MySQL %s, Redis %s; want both %s (the column's decider at the flags' version)", mf, rf, want)
	}
	return fmt.Sprintf("mysql %s, redis %s", mf, rf)
}
