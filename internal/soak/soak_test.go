// Package soak runs reservoir as it is deployed, under cart traffic, while
// the rollout is flipped through every mode and kill switch: three
// `reservoir serve` OS processes on two pods, pod-a's MySQL and Redis
// behind proxies the test can take down.
//
// The traffic is real clients of the HTTP API (docs/api.md, "Client
// contract"): carts that are reserved, then claimed, released or
// abandoned; a 503 or a cut connection is retried with the same token on
// the next replica; and the late and repeated calls a checkout makes (a
// refused cart sent again, a double click, a claim after a release, a
// release after a claim, a claim of an abandoned cart after its hold
// expired). Meanwhile the schedule moves each pod through redis, shadow,
// mysql and mysql_only and back, engages and releases the kill switch
// (redis and redis_only; per pod, per shop and global, the exit from
// mysql_only included) through the admin API, and waits each time until
// every replica obeys; it takes pod-a's MySQL down while Redis decides
// under the kill switch and pod-a's Redis down while MySQL decides, and
// kills one replica with SIGKILL and starts it again. One replica starts
// unable to read its flags: until its flags file becomes readable it must
// be unready and answer every reservation call 503 flags_unavailable,
// which the clients retry elsewhere.
//
// Once the traffic stops, with no kill switch left, every hold expired and
// reaped and every pod's change feed delivered to Redis, it checks what
// the model test (internal/lossless) checks: the ledger went down by
// exactly the acknowledged claims (and claims whose outcome the client
// never learned) and never below zero; every answer a client got is
// consistent with one store that decided every reservation (porcupine,
// internal/history: no acknowledged hold refused or lost before its
// expiry, nothing claimed after a release or an expiry, a refusal
// replayed); neither store holds anything; reconcile finds no drift
// between the stores without repairing anything. It also bounds the
// processes' goroutines and memory, and checks that each exits cleanly on
// SIGTERM.
//
// It runs about a minute of traffic by default; RESERVOIR_SOAK=10m runs
// longer.
package soak

import (
	"context"
	"fmt"
	"maps"
	"net/http"
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

	"github.com/seed31b0e981/reservoir/internal/faults"
	"github.com/seed31b0e981/reservoir/internal/history"
	"github.com/seed31b0e981/reservoir/internal/reconcile"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// EnvDuration names the variable that sets the traffic's duration (a Go
// duration, e.g. 10m). Default: defaultDuration.
const EnvDuration = "RESERVOIR_SOAK"

const (
	defaultDuration = 60 * time.Second
	replicas        = 3
	workers         = 24
	adminToken      = "soak-admin-token-0123456789abcdef"
	// doubtReplica starts unable to read its flags.
	doubtReplica = 2
	// crashReplica is killed with SIGKILL and started again.
	crashReplica = 1
	// outageMin is how long a proxied store stays down, at least.
	outageMin = 2 * time.Second
	// killAttempts bounds the tries of a kill switch the controller
	// refuses (a mysql_only scope whose reconcile found drift).
	killAttempts = 5
	// Resource bounds between the midpoint and the end of the traffic.
	goroutineSlack = 1.5 // times the midpoint, plus goroutineExtra
	goroutineExtra = 64
	rssSlack       = 1.5 // times the midpoint, plus rssExtra
	rssExtra       = 64 << 20
)

// soakPlan is the rollout plan the servers' controller is given (it
// audits the kill switches the soak engages through the admin API); the
// soak sets modes itself on its schedule, so the stages only name the
// pods.
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
	podOf := map[int64]string{}
	var shops []int64
	for _, p := range pods {
		shops = append(shops, p.shops...)
		for _, s := range p.shops {
			podOf[s] = p.name
		}
	}

	// The flags file every replica watches, in a directory of its own.
	// The doubt replica reaches it by a path of its own that cannot be
	// read at start (a symlink to itself: ELOOP, whoever runs the test);
	// during the traffic a symlink to the shared file is renamed over it.
	flagsDir := filepath.Join(dir, "flags")
	if err := os.Mkdir(flagsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	flags := flagdoc.FlagsFile{Path: filepath.Join(flagsDir, "flags.json")}
	if err := flags.Write(flagdoc.NewFlags()); err != nil {
		t.Fatal(err)
	}
	doubtFlags := filepath.Join(flagsDir, fmt.Sprintf("serve-%d.json", doubtReplica))
	if err := os.Symlink(filepath.Base(doubtFlags), doubtFlags); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(doubtFlags); err == nil {
		t.Fatalf("%s is readable: the doubt replica would have its flags", doubtFlags)
	}
	planPath := filepath.Join(dir, "plan.toml")
	if err := os.WriteFile(planPath, []byte(soakPlan), 0o600); err != nil {
		t.Fatal(err)
	}
	writeTopology := func(name, flagsFile string) string {
		var topo strings.Builder
		fmt.Fprintf(&topo, "control_dsn = %q\nflags_file = %q\nplan_file = %q\n", control.DSN, flagsFile, planPath)
		for _, p := range pods {
			fmt.Fprintf(&topo, "[[pods]]\nname = %q\nmysql_dsn = %q\nredis_addr = %q\nredis_prefix = %q\nshops = %s\n",
				p.name, p.myDSN, p.rdAddr, p.redis.Prefix, strings.ReplaceAll(fmt.Sprint(p.shops), " ", ", "))
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(topo.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	sharedTopo := writeTopology("topology.toml", flags.Path)
	doubtTopo := writeTopology("topology-doubt.toml", doubtFlags)

	procs := make([]*proc, replicas)
	var all []*proc // every process started, for the logs of a failed run
	var bases []string
	for i := range replicas {
		topo := sharedTopo
		if i == doubtReplica {
			topo = doubtTopo
		}
		procs[i] = startServe(t, fmt.Sprintf("serve-%d", i), topo, adminToken)
		all = append(all, procs[i])
		bases = append(bases, procs[i].base)
	}
	defer func() {
		if t.Failed() {
			for _, p := range all {
				t.Logf("%s log (warn and up):\n%s", p.name, tail(p.stderr.String(), 4000))
			}
		}
	}()
	g := newTraffic(bases, shops)
	g.doubt = procs[doubtReplica].base
	admin := &http.Client{Timeout: time.Minute}
	doubt := procs[doubtReplica]

	// The replicas with their flags are ready; the doubt replica is not,
	// and refuses every reservation call with 503 flags_unavailable.
	for i, p := range procs {
		if i == doubtReplica {
			continue
		}
		if _, err := waitFor(20*time.Second, func() error {
			code, r, err := ready(ctx, g.client, p.admin)
			if err == nil && code != 200 {
				err = fmt.Errorf("/readyz %d: %v", code, r.NotReady)
			}
			return err
		}); err != nil {
			t.Fatalf("%s not ready: %v", p.name, err)
		}
	}
	if code, r, err := ready(ctx, g.client, doubt.admin); err != nil || code != 503 || r.FlagsLoaded || !slices.ContainsFunc(r.NotReady, func(s string) bool { return strings.HasPrefix(s, "flags_not_loaded") }) {
		t.Fatalf("%s without its flags: /readyz %d %+v (%v), want 503 with flags_not_loaded", doubt.name, code, r, err)
	}
	for _, probe := range []struct{ method, path string }{
		{"POST", "/v1/shops/1001/reservations"},
		{"POST", "/v1/shops/2001/reservations/soak-doubt-probe/claim"},
		{"POST", "/v1/shops/1002/reservations/soak-doubt-probe/release"},
	} {
		var body any
		if strings.HasSuffix(probe.path, "/reservations") {
			body = map[string]any{"token": "soak-doubt-probe", "lines": []map[string]any{{"item": 1, "quantity": 1, "locations": []int64{1}}}}
		}
		code, answer, _ := adminCall(ctx, g.client, doubt.base, probe.method, probe.path, apiToken, body, nil)
		if code != 503 || errorCode(answer) != "flags_unavailable" {
			t.Fatalf("%s without its flags: %s %s answered %d %s, want 503 flags_unavailable", doubt.name, probe.method, probe.path, code, answer)
		}
	}

	// Seed every item x location through the API (redis mode: Redis and
	// the ledger both get it). Stock scales with the duration so that a
	// long soak still claims (cold items run short in about a minute:
	// insufficient answers too).
	scale := max(1, int64(duration/defaultDuration))
	initial := map[cartKey]int64{}
	for _, shop := range shops {
		for item := int64(1); item <= items; item++ {
			for _, loc := range locations {
				n := int64(coldStock)
				switch {
				case item <= hotItems:
					n = hotStock
				case item > items-scarceItems:
					n = scarceStock
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
					code, body, _ := g.call("adjust", 0, attempts{}, "POST", fmt.Sprintf("/v1/shops/%d/items/%d/locations/%d/adjust", k.shop, k.item, k.loc),
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

	// The pods' stores and mirrors, built here straight on the servers
	// (not through the proxies), as `reservoir reconcile` builds them: for
	// the end-state checks.
	var rpods []reconcile.Pod
	for _, p := range pods {
		reg := prometheus.NewRegistry()
		if p.my, err = mysqlstore.New(mysqlstore.Config{DB: p.db.DB, Registerer: reg}); err != nil {
			t.Fatal(err)
		}
		if p.rd, err = redisstore.New(redisstore.Config{Client: p.redis.Client, Prefix: p.redis.Prefix, Ledger: p.my, Source: p.my, Registerer: reg}); err != nil {
			t.Fatal(err)
		}
		if p.mirror, err = mirror.New(mirror.Config{Pod: p.name, MySQL: p.my, Redis: p.rd, Registerer: reg}); err != nil {
			t.Fatal(err)
		}
		rpods = append(rpods, reconcile.Pod{Name: p.name, MySQL: p.my, Redis: p.rd, Mirror: p.mirror})
	}
	rc := reconcile.New(rpods)
	setup := time.Since(began)

	// ---- the schedule's moves ----

	var flips, kills, faultsInjected, refusals []string
	var doubtNote string
	// obey waits until every replica applies what the flags file now says
	// for each pod and each shop with flags of its own.
	obey := func(what string, since time.Time) {
		t.Helper()
		f, err := flags.Read()
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		decision := func(pod string, shop int64) string {
			d := f.Resolve(pod, shop)
			return fmt.Sprintf("%s/%s/%s", d.Mode, d.Kill, d.Route().Authority)
		}
		var shown []string
		for _, p := range pods {
			want["pod:"+p.name] = decision(p.name, 0)
			shown = append(shown, p.name+" "+want["pod:"+p.name])
		}
		for _, shop := range slices.Sorted(maps.Keys(f.Shops)) {
			k := fmt.Sprintf("shop:%d", shop)
			want[k] = decision(podOf[shop], shop)
			shown = append(shown, k+" "+want[k])
		}
		for _, p := range procs {
			if _, err := waitFor(10*time.Second, func() error {
				st, err := status(ctx, admin, p.admin, adminToken)
				if err != nil {
					return err
				}
				got := st.effective()
				for k, w := range want {
					if got[k] != w {
						return fmt.Errorf("%s applies %s to %s, the file says %s", p.name, got[k], k, w)
					}
				}
				return nil
			}); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		flips = append(flips, fmt.Sprintf("%s [%s] (all replicas obeyed within %s)", what, strings.Join(shown, ", "), time.Since(since).Round(time.Millisecond)))
	}
	// A mode change is a flags edit, as a plan stage applies it. None
	// needs a repair first: a shop's handoff to MySQL copies Redis's
	// state in, and a handoff to Redis drains MySQL's change feed first.
	setMode := func(p string, m authority.Mode) func() {
		return func() {
			t.Helper()
			cur, err := flags.Read()
			if err != nil {
				t.Fatal(err)
			}
			from := cur.Resolve(p, 0).Mode
			start := time.Now()
			if _, _, err := flags.Update(func(f *flagdoc.Flags) error { return f.SetMode(flagdoc.PodScope(p), m) }); err != nil {
				t.Fatalf("%s -> %s: %v", p, m, err)
			}
			obey(fmt.Sprintf("%s %s -> %s", p, from, m), start)
		}
	}
	// The kill switch goes through the admin API of serve-0, as an
	// operator engages it: its controller audits it, checks a mysql_only
	// scope with reconcile first, and answers the relay lag at the switch.
	engage := func(scope string, k authority.Kill) func() {
		return func() {
			t.Helper()
			var resp struct {
				Audited       bool     `json:"audited"`
				ObeyedAfterMs *float64 `json:"obeyed_after_ms"`
				RelayLag      string   `json:"relay_lag"`
			}
			for attempt := 1; ; attempt++ {
				code, body, err := adminCall(ctx, admin, procs[0].admin, "POST", "/admin/killswitch", adminToken,
					map[string]any{"scope": scope, "state": k, "reason": "soak schedule"}, &resp)
				if err != nil {
					t.Fatalf("kill %s %s: %v", scope, k, err)
				}
				if code == 200 {
					break
				}
				if code == 409 && errorCode(body) == "refused" && attempt < killAttempts {
					// The operator runs it again a moment later.
					refusals = append(refusals, fmt.Sprintf("kill %s %s attempt %d: %s", scope, k, attempt, body))
					pause(ctx, 500*time.Millisecond)
					continue
				}
				if code == 409 && errorCode(body) == "refused" {
					logDrift(ctx, t, rc, pods, g.rec)
				}
				t.Fatalf("kill %s %s (attempt %d): %d %s", scope, k, attempt, code, body)
			}
			answered := time.Now()
			if !resp.Audited || resp.ObeyedAfterMs == nil {
				t.Errorf("kill %s %s: audited %v, serve-0 obeyed after %v ms: want audited and obeyed", scope, k, resp.Audited, resp.ObeyedAfterMs)
			}
			kills = append(kills, fmt.Sprintf("%s %s: relay lag at the switch %q", scope, k, resp.RelayLag))
			obey(fmt.Sprintf("kill %s %s", scope, k), answered)
		}
	}
	release := func(scope string) func() {
		return func() {
			t.Helper()
			code, body, err := adminCall(ctx, admin, procs[0].admin, "DELETE", "/admin/killswitch", adminToken,
				map[string]any{"scope": scope, "reason": "soak schedule"}, nil)
			if err != nil || code != 200 {
				t.Fatalf("release %s: %d %s (%v)", scope, code, body, err)
			}
			obey("release "+scope, time.Now())
		}
	}
	// outage takes a proxied store of pod-a down until the replicas see
	// it (serve-0's /readyz names it) and outageMin has passed, then
	// brings it back and waits until they see it answer again.
	outage := func(px *faults.Proxy, store string) func() {
		return func() {
			t.Helper()
			inj, err := px.Inject(faults.Fault{Kind: faults.Down})
			if err != nil {
				t.Fatalf("stop %s: %v", px.Name(), err)
			}
			down := time.Now()
			seen, err := waitFor(10*time.Second, func() error {
				_, r, err := ready(ctx, g.client, procs[0].admin)
				if err == nil && (r.store("pod-a", store) == "ok" || r.store("pod-a", store) == "") {
					err = fmt.Errorf("pod-a %s is %q", store, r.store("pod-a", store))
				}
				return err
			})
			if err != nil {
				t.Fatalf("%s down: serve-0 does not see it: %v", px.Name(), err)
			}
			pause(ctx, time.Until(down.Add(outageMin))) // the outage lasts
			if err := inj.Heal(); err != nil {
				t.Fatalf("start %s: %v", px.Name(), err)
			}
			healed := time.Now()
			back, err := waitFor(30*time.Second, func() error {
				_, r, err := ready(ctx, g.client, procs[0].admin)
				if err == nil && r.store("pod-a", store) != "ok" {
					err = fmt.Errorf("pod-a %s is %q", store, r.store("pod-a", store))
				}
				return err
			})
			if err != nil {
				t.Fatalf("%s back: serve-0 does not see it: %v", px.Name(), err)
			}
			faultsInjected = append(faultsInjected, fmt.Sprintf("%s down %s (serve-0 unready after %s, ready %s after it came back)",
				px.Name(), healed.Sub(down).Round(time.Millisecond), seen.Round(time.Millisecond), back.Round(time.Millisecond)))
		}
	}
	// crash kills a replica with SIGKILL and starts it again; the
	// clients' calls to it fail over to the others meanwhile. Its
	// counters until the kill are kept for the summary.
	var gone metrics
	crash := func(i int) func() {
		return func() {
			t.Helper()
			old := procs[i]
			if m, err := scrape(g.client, old.admin); err == nil {
				gone.add(m)
			}
			before := g.unansweredBy(old.base)
			start := time.Now()
			if err := old.crash(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			// The clients find it gone (their calls fail over to the
			// others) before it comes back at a new address, as a load
			// balancer would take it out and put it back.
			failedOver, err := waitFor(10*time.Second, func() error {
				if n := g.unansweredBy(old.base) - before; n < 5 {
					return fmt.Errorf("%d attempt(s) sent to the killed %s got no answer", n, old.name)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			lost := g.unansweredBy(old.base) - before
			p := startServe(t, old.name+" (restarted)", old.topo, adminToken)
			procs[i] = p
			all = append(all, p)
			g.replace(i, p.base)
			listen := time.Since(start)
			readyIn, err := waitFor(20*time.Second, func() error {
				code, r, err := ready(ctx, g.client, p.admin)
				if err == nil && code != 200 {
					err = fmt.Errorf("/readyz %d: %v", code, r.NotReady)
				}
				return err
			})
			if err != nil {
				t.Fatalf("%s: %v", p.name, err)
			}
			faultsInjected = append(faultsInjected, fmt.Sprintf("%s killed (SIGKILL; %d attempts unanswered within %s, retried on the others) and started again: listening after %s, ready %s later",
				old.name, lost, failedOver.Round(time.Millisecond), listen.Round(time.Millisecond), readyIn.Round(time.Millisecond)))
		}
	}
	// readable makes the doubt replica's flags readable, after checking
	// what it did without them: not ready, and no reservation call
	// answered but with 503 (its own counters, read before).
	readable := func() {
		t.Helper()
		if code, r, err := ready(ctx, g.client, doubt.admin); err != nil || code != 503 || r.FlagsLoaded {
			t.Errorf("%s without its flags: /readyz %d flags_loaded %v (%v), want 503 and false", doubt.name, code, r.FlagsLoaded, err)
		}
		m, err := scrape(g.client, doubt.admin)
		if err != nil {
			t.Fatal(err)
		}
		if loaded := m.sum("reservoir_rollout_flags_loaded", "", nil)[""]; loaded != 0 {
			t.Errorf("%s without its flags: reservoir_rollout_flags_loaded %v, want 0", doubt.name, loaded)
		}
		served := m.sum(opsMetric, "code", nil)
		for code, n := range served {
			if code != "503" && n > 0 {
				t.Errorf("%s without its flags answered %.0f reservation call(s) %s: want 503 flags_unavailable only (%s)", doubt.name, n, code, sortedJoin(served))
			}
		}
		refused := m.sum("reservoir_dualwrite_flags_unavailable_total", "", nil)[""]
		g.doubtOver.Store(true)
		tmp := doubtFlags + ".tmp"
		if err := os.Symlink(filepath.Base(flags.Path), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, doubtFlags); err != nil {
			t.Fatal(err)
		}
		readyIn, err := waitFor(10*time.Second, func() error {
			code, r, err := ready(ctx, g.client, doubt.admin)
			if err == nil && (code != 200 || !r.FlagsLoaded) {
				err = fmt.Errorf("/readyz %d flags_loaded %v: %v", code, r.FlagsLoaded, r.NotReady)
			}
			return err
		})
		if err != nil {
			t.Fatalf("%s once its flags are readable: %v", doubt.name, err)
		}
		tally := g.doubtTally()
		total := 0
		for k, n := range tally {
			total += n
			if !strings.HasSuffix(k, " 503 flags_unavailable") {
				t.Errorf("%s without its flags answered %d call(s) %q: want 503 flags_unavailable only", doubt.name, n, k)
			}
		}
		if total == 0 {
			t.Errorf("%s got no call while it could not read its flags: nothing was checked", doubt.name)
		}
		doubtNote = fmt.Sprintf("%s unable to read its flags for %s: /readyz 503 flags_not_loaded, %d call(s) answered 503 flags_unavailable "+
			"(%.0f by its counter), none otherwise, each retried on another replica; ready %s after its flags became readable",
			doubt.name, time.Since(doubt.started).Round(100*time.Millisecond), total, refused, readyIn.Round(time.Millisecond))
	}
	var mid []metrics
	midpoint := func() {
		t.Helper()
		mid = make([]metrics, len(procs))
		for i, p := range procs {
			if mid[i], err = scrape(g.client, p.admin); err != nil {
				t.Fatalf("%s midpoint: %v", p.name, err)
			}
		}
	}

	// The schedule, as fractions of the traffic's duration: every mode
	// and kill switch variant, and back, with the outages and the crash
	// in between.
	schedule := []struct {
		at float64
		do func()
	}{
		{0.05, readable},
		{0.09, setMode("pod-a", authority.ModeShadow)},
		{0.12, setMode("pod-b", authority.ModeShadow)},
		{0.16, setMode("pod-a", authority.ModeMySQL)},
		{0.20, engage("pod:pod-a", authority.KillRedis)},
		{0.23, setMode("pod-b", authority.ModeMySQL)},
		// pod-a's MySQL while Redis decides under the kill switch: a
		// claim's ledger is out of reach (503, retried).
		{0.26, outage(myProxy, "mysql")},
		{0.32, release("pod:pod-a")},
		{0.36, setMode("pod-a", authority.ModeMySQLOnly)},
		{0.40, engage("pod:pod-a", authority.KillRedisOnly)}, // the exit from mysql_only
		{0.44, release("pod:pod-a")},
		{0.47, crash(crashReplica)},
		// pod-a's Redis while MySQL decides alone: only the relay waits.
		{0.50, outage(rdProxy, "redis")},
		{0.55, midpoint},
		{0.57, engage("global", authority.KillRedis)},
		{0.62, release("global")},
		{0.66, engage("shop:2001", authority.KillRedisOnly)},
		{0.70, setMode("pod-b", authority.ModeMySQLOnly)},
		{0.74, release("shop:2001")},
		{0.77, engage("global", authority.KillRedisOnly)},
		{0.81, release("global")},
		{0.85, setMode("pod-a", authority.ModeMySQL)},
		{0.88, setMode("pod-b", authority.ModeShadow)},
		{0.91, setMode("pod-a", authority.ModeRedis)},
		{0.94, setMode("pod-b", authority.ModeRedis)},
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
	// No ledger row ever goes negative (sampled every 500ms on each pod's
	// database, directly).
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
	at := func(frac float64) {
		pause(ctx, time.Until(start.Add(time.Duration(frac*float64(duration)))))
	}
	for _, s := range schedule {
		at(s.at)
		s.do()
	}
	at(1.0)
	end := make([]metrics, len(procs))
	for i, p := range procs {
		if end[i], err = scrape(g.client, p.admin); err != nil {
			t.Fatalf("%s end: %v", p.name, err)
		}
	}
	stopTraffic()
	<-trafficDone
	<-samplerDone
	trafficTook := time.Since(start)
	for _, n := range negatives {
		t.Errorf("oversold during the traffic: %s", n)
	}

	// ---- the end state ----

	// No kill switch is left in the flags.
	final, err := flags.Read()
	if err != nil {
		t.Fatal(err)
	}
	scopes := []flagdoc.Scope{flagdoc.Global()}
	for _, p := range pods {
		scopes = append(scopes, flagdoc.PodScope(p.name))
	}
	for shop := range final.Shops {
		scopes = append(scopes, flagdoc.ShopScope(shop))
	}
	for _, s := range scopes {
		if k := final.KillAt(s); k.Engaged() {
			t.Errorf("the schedule left the kill switch of %s engaged (%s)", s, k.State)
		}
	}
	// Every hold expires (the calls are over: the longest TTL) and the
	// reapers (every serve runs one, each second) return it; a Redis hold
	// whose legacy claim started and never finished (its client gave up)
	// is left to that claim for the claim grace, then settled from the
	// ledger. Then every pod's change feed reaches Redis.
	settleStart := time.Now()
	var late string // holds left a while after the last one's expiry
	holdsIn, err := poll(ttl+redisstore.DefaultClaimGrace+30*time.Second, 100*time.Millisecond, func() error {
		if time.Since(settleStart) < ttl {
			return fmt.Errorf("the holds' TTL has not passed")
		}
		left, err := checkNoHolds(ctx, pods)
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("%s", strings.Join(left, "; "))
			if late == "" && time.Since(settleStart) > ttl+3*time.Second {
				late = err.Error()
			}
		}
		return err
	})
	if err != nil {
		t.Errorf("holds left: %v", err)
	}
	if late != "" {
		t.Logf("holds still there %s after the traffic (the last expired by %s; a claiming one waits for the claim grace, %s): %s",
			ttl+3*time.Second, ttl, redisstore.DefaultClaimGrace, late)
	}
	drainedIn, err := poll(30*time.Second, 50*time.Millisecond, func() error { return checkDrained(ctx, pods) })
	if err != nil {
		t.Errorf("change feeds: %v", err)
	}
	settle := time.Since(settleStart)

	checksStart := time.Now()
	g.mu.Lock()
	claims := maps.Clone(g.claims)
	violations := slices.Clone(g.violations)
	g.mu.Unlock()
	for _, v := range violations {
		t.Errorf("client: %s", v)
	}
	ledger, found, err := checkLedger(ctx, pods, initial, claims)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("%s", f)
	}
	found, err = checkNoHolds(ctx, pods)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("%s", f)
	}
	agree, found, err := checkAgree(ctx, rc, pods)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("%s", f)
	}
	// Every answer a client got, checked against the model of one store
	// deciding (porcupine, per item): across the flips, the kill
	// switches, the outages and the crash, the pods behaved as one store
	// that neither oversold nor undersold and settled each hold at most
	// once.
	checked, err := history.Check(g.rec.Entries(), history.CheckOptions{Dir: history.ArtifactDir(t), Name: "soak"})
	if err != nil {
		t.Errorf("history check: %v", err)
	} else if checked.Outcome != porcupine.Ok {
		t.Errorf("history check: %s", checked)
	}
	checks := time.Since(checksStart)

	// The signals of the new design, summed over the replicas (the
	// crashed process's until its kill), now that everything settled.
	var total metrics
	total.add(gone)
	for _, p := range procs {
		m, err := scrape(g.client, p.admin)
		if err != nil {
			t.Fatalf("%s after the settle: %v", p.name, err)
		}
		total.add(m)
	}
	handoffs := total.sum("reservoir_handoffs_total", "result", nil)
	forced := handoffs["forced"]
	signals := []string{
		"handoffs by result: " + sortedJoin(handoffs) +
			" (to mysql: " + sortedJoin(total.sum("reservoir_handoffs_total", "result", map[string]string{"to": "mysql"})) +
			"; to redis: " + sortedJoin(total.sum("reservoir_handoffs_total", "result", map[string]string{"to": "redis"})) + ")",
		fmt.Sprintf("forced handoffs: %.0f", forced),
		"503 owner unreachable: " + sortedJoin(total.sum("reservoir_dualwrite_owner_unreachable_total", "reason", nil)),
		fmt.Sprintf("503 flags_unavailable: %.0f", total.sum("reservoir_dualwrite_flags_unavailable_total", "", nil)[""]),
		"rerouted: " + sortedJoin(total.sum("reservoir_dualwrite_rerouted_total", "action", nil)),
		"tombstone hits: mysql " + sortedJoin(total.sum("reservoir_mysql_tombstone_hits_total", "state", nil)) +
			"; redis " + sortedJoin(total.sum("reservoir_redis_tombstone_hits_total", "state", nil)),
		fmt.Sprintf("503 claim_in_progress: %.0f", total.sum("reservoir_redis_claim_in_progress_total", "", nil)[""]),
		fmt.Sprintf("claiming holds settled by the reaper: %.0f", total.sum("reservoir_redis_reap_settled_total", "", nil)[""]),
		"relay: applied " + sortedJoin(total.sum("reservoir_mirror_applied_total", "kind", nil)) +
			fmt.Sprintf("; failed rounds %.0f", total.sum("reservoir_mirror_apply_failures_total", "", nil)[""]),
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

	if len(refusals) == 0 {
		refusals = []string{"none"}
	}
	t.Logf("soak summary:\n  setup %s, traffic %s (%d replicas, %d clients, %d shops on 2 pods), settle %s (holds gone after %s, feeds drained %s later), checks %s, total %s\n"+
		"  ops: %s\n  flags in doubt: %s\n  flips:\n    %s\n  kill switches: %s; refused and tried again: %s\n  faults: %s\n  signals: %s\n"+
		"  checks: ledger: %s, none below zero; holds: none left in either store; reconcile without repair: %s; history: %s\n"+
		"  resources: %s\n  SIGTERM exits: %s",
		setup.Round(time.Millisecond), trafficTook.Round(time.Millisecond), replicas, workers, len(shops), settle.Round(time.Millisecond),
		holdsIn.Round(time.Millisecond), drainedIn.Round(time.Millisecond), checks.Round(time.Millisecond), time.Since(began).Round(time.Millisecond),
		g.summary(), doubtNote, strings.Join(flips, "\n    "), strings.Join(kills, "; "), strings.Join(refusals, "; "),
		strings.Join(faultsInjected, "; "), strings.Join(signals, "; "),
		ledger, strings.Join(agree, "; "), checked, strings.Join(res, "; "), strings.Join(stops, ", "))
}

// opsMetric counts the API's reservation calls by pod, operation and
// status code.
const opsMetric = "reservoir_api_operations_total"

// poll checks cond every interval until it holds (nil) or within passes.
func poll(within, every time.Duration, cond func() error) (time.Duration, error) {
	start := time.Now()
	for {
		err := cond()
		if err == nil {
			return time.Since(start), nil
		}
		if time.Since(start) > within {
			return time.Since(start), fmt.Errorf("not within %s: %w", within, err)
		}
		time.Sleep(every)
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// logDrift logs what the reconciler finds on each pod, finding by finding,
// and for each token found, its calls, its Redis hash and its MySQL row:
// what a refused kill switch saw.
func logDrift(ctx context.Context, t *testing.T, rc *reconcile.Reconciler, pods []*pod, rec *history.Recorder) {
	t.Helper()
	calls := rec.Calls()
	for _, p := range pods {
		rep, err := rc.Run(ctx, p.name, reconcile.Options{})
		if err != nil {
			t.Logf("reconcile %s: %v", p.name, err)
			continue
		}
		for _, f := range rep.Findings {
			t.Logf("reconcile %s: %s", p.name, f)
			token, ok := strings.CutPrefix(f.Where, "token ")
			if !ok {
				continue
			}
			token = strings.Trim(token, `"`)
			for _, c := range calls {
				if c.Shop == f.Shop && c.Token == token {
					t.Logf("  call %s %s..%s: %s %v exp %s unknown=%v via=%s err=%s", c.Op, c.CallAt.Format("15:04:05.000"), c.ReturnAt.Format("15:04:05.000"),
						c.Result, c.Allocations, c.ExpiresAt.Format("15:04:05.000"), c.Unknown, c.Via, c.Err)
				}
			}
			h, err := p.redis.Client.HGetAll(ctx, fmt.Sprintf("%s{shop:%d}:hold:%s", p.redis.Prefix, f.Shop, token)).Result()
			t.Logf("  redis hold: %v (%v)", h, err)
			var state, by, allocs string
			var exp, changed time.Time
			err = p.db.QueryRowContext(ctx, "SELECT state, decided_by, allocations, expires_at, changed_at FROM reservations WHERE shop_id = ? AND token = ?",
				f.Shop, token).Scan(&state, &by, &allocs, &exp, &changed)
			t.Logf("  mysql row: %s by %s %s exp %s changed %s (%v)", state, by, allocs, exp.Format("15:04:05.000"), changed.Format("15:04:05.000"), err)
		}
	}
}
