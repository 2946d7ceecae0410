// Package soak runs the soak test of issue 8: several `reservoir serve`
// OS processes on two pods under cart traffic, with the mode flipped, the
// kill switch toggled and one server restarted on a schedule; then the
// invariants of DESIGN section 4, the claims table against the ledger,
// reconciliation, and the processes' resources are checked, and every
// answer a client got is checked with porcupine against the model of one
// authority (internal/history).
//
// It runs about a minute of traffic by default; RESERVOIR_SOAK=10m runs
// longer.
package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/internal/faults"
	"github.com/seed31b0e981/reservoir/internal/history"
	"github.com/seed31b0e981/reservoir/internal/reconcile"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
)

// EnvDuration names the variable that sets the traffic's duration (a Go
// duration, e.g. 10m). Default: defaultDuration.
const EnvDuration = "RESERVOIR_SOAK"

const (
	defaultDuration = 60 * time.Second
	replicas        = 3
	workers         = 16
	adminToken      = "soak-admin-token-0123456789abcdef"
	// Resource bounds between the midpoint and the end of the traffic.
	goroutineSlack = 1.5 // times the midpoint, plus goroutineExtra
	goroutineExtra = 64
	rssSlack       = 1.5 // times the midpoint, plus rssExtra
	rssExtra       = 64 << 20
)

// soakPlan is the rollout plan the controller is given: the soak flips
// modes itself on its schedule, so the stages only name the pods.
const soakPlan = `
pods = ["pod-a", "pod-b"]

[[stages]]
name = "shadow"
mode = "shadow"
pods = ["pod-a", "pod-b"]

[[stages]]
name = "mysql"
mode = "mysql"
pods = ["pod-a", "pod-b"]
`

var (
	podAShops = []int64{1001, 1002}
	podBShops = []int64{2001, 2002}
)

type pod struct {
	name   string
	db     *testdb.DB
	redis  *testredis.Redis
	shops  []int64
	myDSN  string // what serve uses (through a proxy for pod-a)
	rdAddr string
}

func TestSoak(t *testing.T) {
	duration := defaultDuration
	if v := os.Getenv(EnvDuration); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 10*time.Second {
			t.Fatalf("%s=%q: want a duration of at least 10s", EnvDuration, v)
		}
		duration = d
	}
	began := time.Now()
	ctx := context.Background()
	dir := t.TempDir()

	// Two pods, each its own database and Redis prefix; pod-a's MySQL and
	// Redis are reached through proxies this test owns.
	redisAddr := testredis.Addr(t)
	a := &pod{name: "pod-a", db: testdb.New(t), redis: testredis.New(t), shops: podAShops}
	b := &pod{name: "pod-b", db: testdb.New(t), redis: testredis.New(t), shops: podBShops}
	control := testdb.New(t)
	myCfg, err := mysql.ParseDSN(a.db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	if myCfg.Net != "tcp" {
		t.Fatalf("pod-a's DSN %q is not over TCP: the proxy would be bypassed", a.db.DSN)
	}
	myProxy := faults.Start(t, "pod-a-mysql", myCfg.Addr)
	rdProxy := faults.Start(t, "pod-a-redis", redisAddr)
	myCfg.Addr = myProxy.Addr()
	a.myDSN, a.rdAddr = myCfg.FormatDSN(), rdProxy.Addr()
	b.myDSN, b.rdAddr = b.db.DSN, redisAddr
	pods := []*pod{a, b}

	flags := rollout.FlagsFile{Path: filepath.Join(dir, "flags.json")}
	if err := flags.Write(rollout.NewFlags()); err != nil {
		t.Fatal(err)
	}
	var topo strings.Builder
	fmt.Fprintf(&topo, "control_dsn = %q\nflags_file = %q\n", control.DSN, flags.Path)
	for _, p := range pods {
		fmt.Fprintf(&topo, "[[pods]]\nname = %q\nmysql_dsn = %q\nredis_addr = %q\nredis_prefix = %q\nshops = %s\n",
			p.name, p.myDSN, p.rdAddr, p.redis.Prefix, strings.ReplaceAll(fmt.Sprint(p.shops), " ", ", "))
	}
	topoPath := filepath.Join(dir, "topology.toml")
	if err := os.WriteFile(topoPath, []byte(topo.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	var procs []*proc
	var bases []string
	for i := range replicas {
		p := startServe(t, fmt.Sprintf("serve-%d", i), topoPath, adminToken)
		procs = append(procs, p)
		bases = append(bases, p.base)
	}
	defer func() {
		if t.Failed() {
			for _, p := range procs {
				t.Logf("%s log (warn and up):\n%s", p.name, tail(p.stderr.String(), 4000))
			}
		}
	}()
	var shops []int64
	for _, p := range pods {
		shops = append(shops, p.shops...)
	}
	g := newTraffic(bases, shops)

	// Seed every item x location through the API (redis mode: Redis and
	// the ledger both get it).
	// Stock scales with the duration so that a long soak still claims
	// (cold items run short in about a minute: insufficient answers too).
	scale := max(1, int64(duration/defaultDuration))
	initial := map[cartKey]int64{}
	for _, shop := range shops {
		for item := int64(1); item <= items; item++ {
			for _, loc := range locations {
				n := int64(coldStock)
				if item <= hotItems {
					n = hotStock
				}
				initial[cartKey{shop, item, loc}] = n * scale
			}
		}
	}
	{
		var wg sync.WaitGroup
		keys := make(chan cartKey)
		for range 8 {
			wg.Go(func() {
				for k := range keys {
					code, body, _ := g.call(bases[0], "POST", fmt.Sprintf("/v1/shops/%d/items/%d/locations/%d/adjust", k.shop, k.item, k.loc),
						map[string]any{"available": initial[k]})
					if code != 200 {
						t.Errorf("seed %v: %d %s", k, code, body)
					}
				}
			})
		}
		for k := range initial {
			keys <- k
		}
		close(keys)
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		for k, n := range initial {
			g.rec.Stock(history.Key{Shop: k.shop, Item: k.item, Location: k.loc}, n)
		}
	}
	setup := time.Since(began)

	// The operator's tools, as `reservoir rollout` and `reservoir
	// reconcile` build them: a reconciler over each pod's stores (straight
	// to the servers, not through the proxies) and the rollout controller
	// that engages and releases the kill switch.
	modes, err := rollout.NewFlagSource(ctx, rollout.FlagSourceConfig{Path: flags.Path})
	if err != nil {
		t.Fatal(err)
	}
	defer modes.Close()
	var rpods []reconcile.Pod
	stores := map[string]*mysqlstore.Store{}
	for _, p := range pods {
		reg := prometheus.NewRegistry()
		db, err := mysqlstore.Open(p.db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		my, err := mysqlstore.New(mysqlstore.Config{DB: db, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		client := redisstore.NewClient(&redis.UniversalOptions{Addrs: []string{redisAddr}})
		defer client.Close()
		rd, err := redisstore.New(redisstore.Config{Client: client, Prefix: p.redis.Prefix, Ledger: my, Source: my, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		rpods = append(rpods, reconcile.Pod{Name: p.name, MySQL: my, Redis: rd})
		stores[p.name] = my
	}
	rec := reconcile.New(rpods, modes)
	plan, err := rollout.ParsePlan([]byte(soakPlan))
	if err != nil {
		t.Fatal(err)
	}
	stats, err := compare.New(compare.Config{DB: control.DB, Registerer: prometheus.NewRegistry(), FlushInterval: time.Hour, CleanupInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close(ctx)
	ctl, err := rollout.NewController(rollout.ControllerConfig{DB: control.DB, Flags: flags, Plan: plan, Stats: stats, Reconciler: rec})
	if err != nil {
		t.Fatal(err)
	}
	var repairs []string

	// The schedule, as fractions of the traffic's duration.
	var flips, faultsInjected []string
	flip := func(what, pod, want string, apply func() error) {
		t.Helper()
		if err := apply(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		start := time.Now()
		for _, p := range procs {
			for {
				got, err := effective(ctx, g.client, p.base, adminToken, pod)
				if err == nil && got == want {
					break
				}
				if time.Since(start) > 10*time.Second {
					t.Fatalf("%s: %s says %s is %q (%v), want %q", what, p.name, pod, got, err, want)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		flips = append(flips, fmt.Sprintf("%s (all replicas obeyed within %s)", what, time.Since(start).Round(time.Millisecond)))
	}
	// A mode change is a flags edit, as a plan stage applies it. One that
	// makes MySQL the authority follows the runbook: repair MySQL from
	// Redis first (`reservoir reconcile --pod P --repair`), as the
	// controller's advance demands a clean reconcile.
	setMode := func(pod string, m rollout.Mode) func() error {
		return func() error {
			if m == rollout.ModeMySQL {
				summary, err := rec.RepairFrom(ctx, pod, reservation.AuthorityRedis, nil)
				if err != nil {
					return err
				}
				repairs = append(repairs, fmt.Sprintf("before %s -> %s: %s", pod, m, summary))
			}
			_, _, err := flags.Update(func(f *rollout.Flags) error { return f.SetMode(rollout.PodScope(pod), m) })
			return err
		}
	}
	soakKill := rollout.KillOptions{Actor: "soak", Reason: "soak schedule"}
	restart := func(px *faults.Proxy, down time.Duration) {
		t.Helper()
		inj, err := px.Inject(faults.Fault{Kind: faults.Down})
		if err != nil {
			t.Fatalf("stop %s: %v", px.Name(), err)
		}
		time.Sleep(down)
		if err := inj.Heal(); err != nil {
			t.Fatalf("start %s: %v", px.Name(), err)
		}
		faultsInjected = append(faultsInjected, fmt.Sprintf("%s restarted (down %s)", px.Name(), down))
	}
	at := func(frac float64, trafficStart time.Time) {
		time.Sleep(time.Until(trafficStart.Add(time.Duration(frac * float64(duration)))))
	}

	tctx, stopTraffic := context.WithCancel(ctx)
	trafficDone := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(trafficDone)
		g.run(tctx, workers)
	}()
	defer func() {
		stopTraffic()
		<-trafficDone
	}()
	// Invariant 1 while the traffic runs: no ledger row ever goes negative
	// (sampled every 500ms on each pod's database, directly).
	var negatives []string
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tctx.Done():
				return
			case <-tick.C:
			}
			for _, p := range pods {
				var n int64
				if err := p.db.QueryRowContext(tctx, "SELECT COUNT(*) FROM inventory_ledger WHERE available < 0").Scan(&n); err == nil && n > 0 {
					negatives = append(negatives, fmt.Sprintf("%s: %d ledger rows below zero at %s", p.name, n, time.Since(start).Round(time.Millisecond)))
				}
			}
		}
	}()

	at(0.15, start)
	flip("pod-a redis -> shadow", "pod-a", "shadow/off/redis", setMode("pod-a", rollout.ModeShadow))
	at(0.30, start)
	flip("pod-a shadow -> mysql", "pod-a", "mysql/off/mysql", setMode("pod-a", rollout.ModeMySQL))
	at(0.40, start)
	flip("pod-a kill switch engaged (redis)", "pod-a", "mysql/redis/redis", func() error {
		return ctl.Kill(ctx, rollout.PodScope("pod-a"), rollout.KillRedis, soakKill)
	})
	at(0.50, start)
	restart(myProxy, 2*time.Second) // pod-a's MySQL: the ledger of every claim
	at(0.55, start)
	mid := make([]resources, len(procs))
	for i, p := range procs {
		if mid[i], err = scrape(g.client, p.base); err != nil {
			t.Fatalf("%s midpoint: %v", p.name, err)
		}
	}
	at(0.60, start)
	flip("pod-a kill switch released", "pod-a", "mysql/off/mysql", func() error {
		// The controller repairs MySQL from Redis before MySQL answers.
		var out strings.Builder
		soakRelease := soakKill
		soakRelease.Out = &out
		// A repair that cannot converge under the traffic refuses the
		// release (the switch stays engaged); the operator runs it again.
		var err error
		for attempt := 1; attempt <= 3; attempt++ {
			out.Reset()
			if err = ctl.Release(ctx, rollout.PodScope("pod-a"), soakRelease); err == nil {
				break
			}
			repairs = append(repairs, fmt.Sprintf("release attempt %d refused: %v", attempt, err))
		}
		repairs = append(repairs, "release: "+strings.TrimSpace(out.String()))
		return err
	})
	at(0.70, start)
	restart(rdProxy, 2*time.Second) // pod-a's Redis, a shadow in mysql mode
	at(0.75, start)
	flip("pod-b redis -> shadow", "pod-b", "shadow/off/redis", setMode("pod-b", rollout.ModeShadow))
	at(1.0, start)
	end := make([]resources, len(procs))
	for i, p := range procs {
		if end[i], err = scrape(g.client, p.base); err != nil {
			t.Fatalf("%s end: %v", p.name, err)
		}
	}
	stopTraffic()
	<-trafficDone
	<-samplerDone
	trafficTook := time.Since(start)
	for _, n := range negatives {
		t.Errorf("invariant 1 during the traffic: %s", n)
	}

	// Every hold is claimed, released or left to expire: wait for the
	// reapers (every serve runs one, each second) to return the expired.
	settleStart := time.Now()
	for _, p := range pods {
		for {
			var n int64
			if err := p.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM reserved_quantities").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			if time.Since(settleStart) > 30*time.Second+ttlMs*time.Millisecond {
				t.Errorf("%s: %d MySQL holds left after every TTL and the reapers", p.name, n)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// Redis holds expire on Redis's clock; wait out the longest TTL.
	time.Sleep(time.Until(start.Add(trafficTook + ttlMs*time.Millisecond + 2*time.Second)))
	settle := time.Since(settleStart)

	// The ledger, the claims table and the client's record.
	ledger := map[cartKey]int64{}
	claimsTable := map[string]map[cartKey]int64{} // "shop/token" -> deduction
	for _, p := range pods {
		rows, err := p.db.QueryContext(ctx, "SELECT shop_id, inventory_item_id, location_id, available FROM inventory_ledger")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var k cartKey
			var n int64
			if err := rows.Scan(&k.shop, &k.item, &k.loc, &n); err != nil {
				t.Fatal(err)
			}
			ledger[k] = n
		}
		rows.Close()
		rows, err = p.db.QueryContext(ctx, "SELECT shop_id, token, allocations FROM reservation_claims")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var shop int64
			var token, allocs string
			if err := rows.Scan(&shop, &token, &allocs); err != nil {
				t.Fatal(err)
			}
			var as []allocation
			if err := json.Unmarshal([]byte(allocs), &as); err != nil {
				t.Fatalf("claims row %d/%s: %v", shop, token, err)
			}
			m := map[cartKey]int64{}
			for _, al := range as {
				m[cartKey{shop, al.Item, al.Location}] += al.Quantity
			}
			claimsTable[fmt.Sprintf("%d/%s", shop, token)] = m
		}
		rows.Close()
	}
	g.mu.Lock()
	fates := g.fates
	violations := slices.Clone(g.violations)
	g.mu.Unlock()
	for _, v := range violations {
		t.Errorf("client: %s", v)
	}
	deducted := map[cartKey]int64{}
	for k, n := range initial {
		avail, ok := ledger[k]
		if !ok {
			t.Errorf("%v: no ledger row", k)
			continue
		}
		if avail < 0 {
			t.Errorf("invariant 1: %v: ledger available %d < 0", k, avail)
		}
		if avail > n {
			t.Errorf("%v: ledger available %d > the %d it was given (no restocks ran)", k, avail, n)
		}
		deducted[k] = n - avail
	}
	if len(ledger) != len(initial) {
		t.Errorf("%d ledger rows, %d seeded", len(ledger), len(initial))
	}
	tableSum := map[cartKey]int64{}
	for _, m := range claimsTable {
		for k, n := range m {
			tableSum[k] += n
		}
	}
	ackedSum := map[cartKey]int64{}
	var acked, unknownClaims, lost, extra, mismatched int
	for token, f := range fates {
		key := fmt.Sprintf("%d/%s", f.shop, token)
		row, inTable := claimsTable[key]
		switch {
		case f.claimed:
			acked++
			m := map[cartKey]int64{}
			for _, al := range f.claimAlloc {
				m[cartKey{f.shop, al.Item, al.Location}] += al.Quantity
				ackedSum[cartKey{f.shop, al.Item, al.Location}] += al.Quantity
			}
			if !inTable {
				lost++
				t.Errorf("claim %s acknowledged to the client, not in the claims table (lost)", key)
			} else if fmt.Sprint(m) != fmt.Sprint(row) {
				mismatched++
				t.Errorf("claim %s: the client was told %v, the claims table says %v", key, m, row)
			}
		case f.claimUnk && inTable:
			unknownClaims++
			for k, n := range row {
				ackedSum[k] += n // an unanswered claim that took effect
			}
		case inTable:
			extra++
			t.Errorf("claims row %s for a token the client never claimed (claimUnk=%v reserved=%v released=%v)", key, f.claimUnk, f.reserved, f.released)
		}
	}
	if len(claimsTable) != acked+unknownClaims+extra {
		t.Errorf("claims table has %d rows, the client accounts for %d", len(claimsTable), acked+unknownClaims+extra)
	}
	var units int64
	for k := range initial {
		if deducted[k] != tableSum[k] || tableSum[k] != ackedSum[k] {
			t.Errorf("%v: ledger deducted %d, claims table %d, claims acknowledged %d", k, deducted[k], tableSum[k], ackedSum[k])
		}
		units += deducted[k]
	}

	// Reconcile every pod: with repair, then without; no drift remains.
	var before, after []string
	for _, p := range pods {
		r1, err := rec.Run(ctx, p.name, reconcile.Options{Repair: true})
		if err != nil {
			t.Fatalf("reconcile %s with repair: %v", p.name, err)
		}
		before = append(before, r1.Summary())
		for i, f := range r1.Findings {
			if i == 10 {
				t.Logf("drift before repair, %s: ... %d more", p.name, len(r1.Findings)-i)
				break
			}
			t.Logf("drift before repair, %s: shop %d %s %s: %s", p.name, f.Shop, f.Side, f.Kind, f.Detail)
		}
		for _, f := range r1.Findings {
			if f.Kind == string(mysqlstore.DriftOverProjected) {
				t.Errorf("invariant 2 before repair: %s %s: %s", p.name, f.Kind, f.Detail)
			}
		}
		r2, err := rec.Run(ctx, p.name, reconcile.Options{})
		if err != nil {
			t.Fatalf("reconcile %s: %v", p.name, err)
		}
		after = append(after, r2.Summary())
		for _, f := range r2.Findings {
			if f.Kind != string(mysqlstore.DriftEmptyPool) {
				t.Errorf("drift after repair: %s %s %s: %s", p.name, f.Side, f.Kind, f.Detail)
			}
		}
		// Invariant 2 from the MySQL store's own check.
		ds, err := stores[p.name].Reconcile(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Kind == mysqlstore.DriftOverProjected {
				t.Errorf("invariant 2: %s: %s", p.name, d)
			}
		}
	}

	// The failure-window counters, summed over the replicas.
	counters := map[string]float64{}
	for _, e := range end {
		for k, v := range e.counters {
			counters[k] += v
		}
	}
	var windows []string
	for _, k := range slices.Sorted(maps.Keys(counters)) {
		windows = append(windows, fmt.Sprintf("%s %.0f", k, counters[k]))
	}

	// Resources: no growth beyond the bound from the midpoint to the end.
	var res []string
	for i, p := range procs {
		m, e := mid[i], end[i]
		res = append(res, fmt.Sprintf("%s goroutines %.0f -> %.0f, RSS %.1f -> %.1f MiB", p.name, m.goroutines, e.goroutines, m.rss/(1<<20), e.rss/(1<<20)))
		if e.goroutines > m.goroutines*goroutineSlack+goroutineExtra {
			t.Errorf("%s: goroutines grew from %.0f at the midpoint to %.0f at the end", p.name, m.goroutines, e.goroutines)
		}
		if e.rss > m.rss*rssSlack+rssExtra {
			t.Errorf("%s: RSS grew from %.1f MiB at the midpoint to %.1f MiB at the end", p.name, m.rss/(1<<20), e.rss/(1<<20))
		}
	}

	// SIGTERM: every replica exits 0, within a bound.
	var stops []string
	for _, p := range procs {
		took, err := p.stop(30 * time.Second)
		if err != nil {
			t.Errorf("%s after SIGTERM: %v\n%s", p.name, err, tail(p.stderr.String(), 4000))
		}
		stops = append(stops, fmt.Sprintf("%s %s", p.name, took.Round(time.Millisecond)))
	}

	// Every answer a client got, checked against the model of one
	// authority (porcupine, per item): across the flips, the kill switch
	// and the restarts, the pods behaved as one store that neither
	// oversold nor undersold and settled each hold at most once.
	checked, err := history.Check(g.rec.Entries(), history.CheckOptions{Dir: history.ArtifactDir(t), Name: "soak"})
	if err != nil {
		t.Errorf("history check: %v", err)
	} else if checked.Outcome != porcupine.Ok {
		t.Errorf("history check: %s", checked)
	}

	t.Logf("soak summary:\n  setup %s, traffic %s (%d replicas, %d clients, %d shops on 2 pods), settle %s, total %s\n  ops: %s\n  ledger: %d units deducted = claims table (%d rows) = %d acknowledged claims + %d unanswered claims that took effect; %d lost, %d extra, %d mismatched\n  history: %s\n  flips: %s\n  repairs before MySQL answered: %s\n  faults: %s\n  failure windows: %s\n  drift before repair: %s\n  drift after repair: %s\n  resources: %s\n  SIGTERM exits: %s",
		setup.Round(time.Millisecond), trafficTook.Round(time.Millisecond), replicas, workers, len(shops), settle.Round(time.Millisecond), time.Since(began).Round(time.Millisecond),
		g.summary(), units, len(claimsTable), acked, unknownClaims, lost, extra, mismatched, checked,
		strings.Join(flips, "; "), strings.Join(repairs, "; "), strings.Join(faultsInjected, "; "), strings.Join(windows, ", "), strings.Join(before, "; "), strings.Join(after, "; "),
		strings.Join(res, "; "), strings.Join(stops, ", "))
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
