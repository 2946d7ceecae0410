package soak

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seed31b0e981/reservoir/internal/proccpu"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testproc"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/migrations"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// The emergency paths (docs/rollout.md, "When a store fails"), each with
// real processes: one `reservoir serve`, pod-a on a MariaDB and a Redis of
// its own (testproc: the test kills and pauses them), pod-b on the shared
// servers beside it. Each checks what an operator sees (/readyz, the
// answers, the kill switch), that pod-b is served throughout, and the
// ledger at the end against every claim the callers were told succeeded.

// emergencyAdminToken is the admin token of the emergency tests' servers.
const emergencyAdminToken = "emergency-admin-token-0123456789"

// emergency is one emergency path's world.
type emergency struct {
	t      *testing.T
	ctx    context.Context
	client *http.Client
	flags  flagdoc.FlagsFile // the flags (unless privateControl: then in the control database)
	myA    *testproc.Server  // pod-a's MariaDB
	rdA    *testproc.Server  // pod-a's Redis
	ctl    *testproc.Server  // the control database's MariaDB (privateControl)
	dbA    *sql.DB           // pod-a's database, directly
	dbB    *testdb.DB        // pod-b's database
	serve  *proc
	// pod-b's probe: a cart after another (reserve, then claim),
	// recording each call's time and answer.
	probe *probe
}

// Shops and the one item x location each uses.
const (
	emergencyShopA = 1001
	emergencyShopB = 2001
	stockA         = 100
	stockB         = 100000
)

// emergencyOptions shape an emergency path's world.
type emergencyOptions struct {
	modeA, modeB authority.Mode
	// privateControl puts the control database on a MariaDB of its own
	// (e.ctl), with the flags in it (flags_source = "database"), so the
	// test can kill it.
	privateControl bool
}

// newEmergency starts pod-a's private servers, migrates its database,
// writes the flags (pod-a and pod-b in their modes) and the topology,
// starts serve, stocks both shops and waits until it is ready.
func newEmergency(t *testing.T, o emergencyOptions) *emergency {
	t.Helper()
	e := &emergency{t: t, ctx: context.Background(), client: &http.Client{Timeout: 30 * time.Second}}
	e.myA, e.rdA = testproc.MySQL(t), testproc.Redis(t)
	e.dbB = testdb.New(t)
	var dsnA string
	dsnA, e.dbA = e.privateDatabase(e.myA, "reservoir_a")

	f := flagdoc.NewFlags()
	if err := f.SetMode(flagdoc.PodScope("pod-a"), o.modeA); err != nil {
		t.Fatal(err)
	}
	if err := f.SetMode(flagdoc.PodScope("pod-b"), o.modeB); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var controlDSN, flagsKeys string
	if o.privateControl {
		e.ctl = testproc.MySQL(t)
		var db *sql.DB
		controlDSN, db = e.privateDatabase(e.ctl, "reservoir_control")
		if err := (flagdoc.FlagsTable{DB: db}).Write(f); err != nil {
			t.Fatal(err)
		}
		flagsKeys = "flags_source = \"database\"\n"
	} else {
		controlDSN = testdb.New(t).DSN
		e.flags = flagdoc.FlagsFile{Path: filepath.Join(dir, "flags.json")}
		if err := e.flags.Write(f); err != nil {
			t.Fatal(err)
		}
		flagsKeys = fmt.Sprintf("flags_file = %q\n", e.flags.Path)
	}
	prefix := testredis.New(t).Prefix
	topo := filepath.Join(dir, "topology.toml")
	text := fmt.Sprintf("control_dsn = %q\n%s"+
		"[[pods]]\nname = \"pod-a\"\nmysql_dsn = %q\nredis_addr = %q\nredis_prefix = \"a:\"\nshops = [%d]\n"+
		"[[pods]]\nname = \"pod-b\"\nmysql_dsn = %q\nredis_addr = %q\nredis_prefix = %q\nshops = [%d]\n",
		controlDSN, flagsKeys, dsnA, e.rdA.Addr, emergencyShopA, e.dbB.DSN, testredis.Addr(t), prefix, emergencyShopB)
	if err := os.WriteFile(topo, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	e.serve = startServe(t, "serve", topo, emergencyAdminToken)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve's log (warn and up):\n%s", tail(e.serve.stderr.String(), 6000))
		}
	})
	if _, err := waitFor(30*time.Second, func() error {
		code, r, err := ready(e.ctx, e.client, e.serve.admin)
		if err != nil || code != 200 || len(r.Degraded) > 0 {
			return fmt.Errorf("%d %+v %v", code, r, err)
		}
		return nil
	}); err != nil {
		t.Fatalf("serve not ready with every store up: %v", err)
	}
	e.adjust(emergencyShopA, stockA)
	e.adjust(emergencyShopB, stockB)
	return e
}

// privateDatabase creates a database on a private MariaDB, migrates it
// and returns its DSN and a pool on it.
func (e *emergency) privateDatabase(server *testproc.Server, name string) (string, *sql.DB) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	root, err := sql.Open("mysql", server.DSN)
	if err != nil {
		e.t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.ExecContext(ctx, "CREATE DATABASE "+name); err != nil { //sqlcheck:ok a constant name
		e.t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(server.DSN)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.DBName = name
	dsn, err := mysqlstore.DSN(cfg.FormatDSN())
	if err != nil {
		e.t.Fatal(err)
	}
	db, err := mysqlstore.Open(dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { db.Close() })
	if _, err := migrations.Up(ctx, db, migrations.Sets()...); err != nil {
		e.t.Fatal(err)
	}
	return dsn, db
}

// call is one checkout API call: its status, body and time. A call that
// got no answer has status 0 and the error as its body.
func (e *emergency) call(method, path string, body any) (int, []byte, time.Duration) {
	start := time.Now()
	code, out, err := adminCall(e.ctx, e.client, e.serve.base, method, path, apiToken, body, nil)
	if err != nil {
		return 0, []byte(err.Error()), time.Since(start)
	}
	return code, out, time.Since(start)
}

func (e *emergency) adjust(shop int64, available int64) {
	e.t.Helper()
	if code, body, _ := e.call("POST", fmt.Sprintf("/v1/shops/%d/items/1/locations/1/adjust", shop), map[string]any{"available": available}); code != 200 {
		e.t.Fatalf("stock shop %d: %d %s", shop, code, body)
	}
}

func cartOf(token string, qty int64) map[string]any {
	return map[string]any{"token": token, "ttl_ms": 600000, "lines": []map[string]any{{"item": 1, "quantity": qty, "locations": []int64{1}}}}
}

// reserve reserves qty of the shop's item and returns the status, the
// deciding store and the call's time.
func (e *emergency) reserve(shop int64, token string, qty int64) (int, string, time.Duration) {
	code, body, took := e.call("POST", fmt.Sprintf("/v1/shops/%d/reservations", shop), cartOf(token, qty))
	var r struct {
		Authority string `json:"authority"`
		Error     string `json:"error"`
	}
	_ = json.Unmarshal(body, &r)
	if code != 201 {
		return code, r.Error, took
	}
	return code, r.Authority, took
}

// settle claims (or releases) a token, retrying the same call while the
// answer is not definite (503), as the client contract says, until within
// passes. It returns the definite status.
func (e *emergency) settle(shop int64, token, op string, within time.Duration) int {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		code, body, _ := e.call("POST", fmt.Sprintf("/v1/shops/%d/reservations/%s/%s", shop, token, op), nil)
		if code != http.StatusServiceUnavailable && code != 0 {
			return code
		}
		if time.Now().After(deadline) {
			e.t.Errorf("%s %s: no definite answer after %s: %d %s", op, token, within, code, body)
			return code
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// held reads a token's reservation (GET) and returns its status.
func (e *emergency) held(shop int64, token string) (int, string) {
	code, body, _ := e.call("GET", fmt.Sprintf("/v1/shops/%d/reservations/%s", shop, token), nil)
	return code, string(body)
}

// degraded waits until /readyz answers 200 listing pod-a's store as
// degraded (want true) or no store degraded (want false), and returns how
// long that took.
func (e *emergency) degraded(store string, want bool, within time.Duration) time.Duration {
	e.t.Helper()
	took, err := waitFor(within, func() error {
		code, r, err := ready(e.ctx, e.client, e.serve.admin)
		switch {
		case err != nil:
			return err
		case code != 200 || !r.Ready:
			return fmt.Errorf("/readyz %d: %+v", code, r)
		case want && !slices.ContainsFunc(r.Degraded, func(s string) bool { return strings.HasPrefix(s, "pod-a: "+store) }):
			return fmt.Errorf("/readyz does not list pod-a's %s as degraded: %+v", store, r)
		case !want && len(r.Degraded) > 0:
			return fmt.Errorf("/readyz still lists %v", r.Degraded)
		}
		return nil
	})
	if err != nil {
		e.t.Fatalf("readiness with pod-a's %s degraded=%v: %v", store, want, err)
	}
	return took
}

// kill engages (state set) or releases (state "") a kill switch through
// the admin API, returning the status and body.
func (e *emergency) kill(scope, state string) (int, string) {
	method, body := "DELETE", map[string]any{"scope": scope, "reason": "emergency drill"}
	if state != "" {
		method, body["state"] = "POST", state
	}
	code, out, err := adminCall(e.ctx, e.client, e.serve.admin, method, "/admin/killswitch", emergencyAdminToken, body, nil)
	if err != nil {
		e.t.Fatalf("kill switch %s %s: %v", scope, state, err)
	}
	return code, string(out)
}

// ledger reads the shop's item 1 at location 1 straight from a database.
func (e *emergency) ledger(db *sql.DB, shop int64) int64 {
	e.t.Helper()
	var n int64
	if err := db.QueryRowContext(e.ctx, "SELECT available FROM inventory_ledger WHERE shop_id = ? AND inventory_item_id = 1 AND location_id = 1", shop).Scan(&n); err != nil {
		e.t.Fatalf("ledger of shop %d: %v", shop, err)
	}
	return n
}

// probe runs pod-b's carts: reserve 1, then claim, one after another,
// recording each call. Its claims answered 200 are what pod-b's ledger
// must have lost at the end.
type probe struct {
	mu      sync.Mutex
	calls   []probeCall
	claimed int64
	stop    chan struct{}
	done    chan struct{}
}

type probeCall struct {
	at   time.Time
	took time.Duration
	code int
}

func (e *emergency) startProbe() {
	p := &probe{stop: make(chan struct{}), done: make(chan struct{})}
	e.probe = p
	e.t.Cleanup(func() { // before serve stops (cleanups run last first)
		select {
		case <-p.stop:
		default:
			close(p.stop)
		}
		<-p.done
	})
	go func() {
		defer close(p.done)
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			default:
			}
			tok := fmt.Sprintf("probe-%d", i)
			code, _, took := e.reserve(emergencyShopB, tok, 1)
			p.record(code, took)
			if code != 201 {
				continue
			}
			code, _, took = e.call("POST", fmt.Sprintf("/v1/shops/%d/reservations/%s/claim", emergencyShopB, tok), nil)
			p.record(code, took)
			if code == 503 { // not definite: settle it before the next cart
				code = e.settle(emergencyShopB, tok, "claim", 10*time.Second)
			}
			if code == 200 {
				p.mu.Lock()
				p.claimed++
				p.mu.Unlock()
			}
		}
	}()
}

func (p *probe) record(code int, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, probeCall{at: time.Now().Add(-took), took: took, code: code})
}

// probeStats are the probe's calls that started within a window.
type probeStats struct {
	calls, failed int
	p50, p99      time.Duration
}

func (w probeStats) String() string {
	if w.calls == 0 {
		return "no calls"
	}
	return fmt.Sprintf("%d calls, %d failed, p50 %s, p99 %s", w.calls, w.failed, w.p50.Round(10*time.Microsecond), w.p99.Round(10*time.Microsecond))
}

// stats summarises the probe's calls that started within [from, to):
// count, failures (not 2xx), p50 and p99.
func (p *probe) stats(from, to time.Time) probeStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	var took []time.Duration
	failed := 0
	for _, c := range p.calls {
		if c.at.Before(from) || !c.at.Before(to) {
			continue
		}
		took = append(took, c.took)
		if c.code/100 != 2 {
			failed++
		}
	}
	if len(took) == 0 {
		return probeStats{}
	}
	slices.Sort(took)
	return probeStats{calls: len(took), failed: failed, p50: took[len(took)/2], p99: took[min(len(took)-1, len(took)*99/100)]}
}

// window is stats as a log line.
func (p *probe) window(from, to time.Time) string { return p.stats(from, to).String() }

// failures counts the probe's failed calls that started within [from, to).
func (p *probe) failures(from, to time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.calls {
		if !c.at.Before(from) && c.at.Before(to) && c.code/100 != 2 {
			n++
		}
	}
	return n
}

func (e *emergency) stopProbe() int64 {
	close(e.probe.stop)
	// the cleanup waits again: done is closed
	<-e.probe.done
	return e.probe.claimed
}

// TestEmergencyMySQLKilled: pod-a's mariadbd is killed while MySQL decides
// pod-a. /readyz stays 200 and lists pod-a's MySQL as degraded; pod-a's
// calls answer 503 at once; the redis_only kill switch makes pod-a serve
// from Redis within a second, with every hold acknowledged before the
// crash still there (the relay had delivered it: the lag it reported);
// mariadbd back, the release hands pod-a to MySQL again; pod-b is served
// throughout; the ledgers lose exactly what was claimed.
func TestEmergencyMySQLKilled(t *testing.T) {
	t.Parallel()
	e := newEmergency(t, emergencyOptions{modeA: authority.ModeMySQL, modeB: authority.ModeMySQL})
	e.startProbe()
	before := time.Now()
	time.Sleep(2 * time.Second) // pod-b's baseline

	// Holds MySQL decided before the crash; one claimed.
	for _, tok := range []string{"pre-1", "pre-2", "pre-3"} {
		if code, by, _ := e.reserve(emergencyShopA, tok, 2); code != 201 || by != "mysql" {
			t.Fatalf("reserve %s: %d %s, want 201 by mysql", tok, code, by)
		}
	}
	if code := e.settle(emergencyShopA, "pre-1", "claim", 5*time.Second); code != 200 {
		t.Fatalf("claim pre-1: %d", code)
	}
	time.Sleep(300 * time.Millisecond) // the relay delivers (the lag the kill will report)

	crashed := time.Now()
	if err := e.myA.Kill(); err != nil {
		t.Fatal(err)
	}
	seen := e.degraded("mysql", true, 10*time.Second)
	t.Logf("pod-a's mariadbd killed: /readyz 200 listing pod-a's mysql as degraded after %s", seen.Round(time.Millisecond))
	var slowest time.Duration
	for i := range 5 {
		code, why, took := e.reserve(emergencyShopA, fmt.Sprintf("down-%d", i), 1)
		if code != 503 || took > time.Second {
			t.Errorf("pod-a reserve with its MySQL down: %d %s after %s, want 503 within 1s", code, why, took)
		}
		slowest = max(slowest, took)
	}
	t.Logf("pod-a's calls while MySQL decides it and is down: 503 store_unavailable, slowest %s", slowest.Round(time.Millisecond))

	// The kill switch to Redis alone.
	code, body := e.kill("pod:pod-a", "redis_only")
	if code != 200 {
		t.Fatalf("kill pod:pod-a redis_only with pod-a's MySQL down: %d %s", code, body)
	}
	t.Logf("kill switch: %s", body)
	served, err := waitFor(5*time.Second, func() error {
		code, by, _ := e.reserve(emergencyShopA, fmt.Sprintf("redis-%d", time.Now().UnixNano()), 1)
		if code != 201 || by != "redis" {
			return fmt.Errorf("%d %s", code, by)
		}
		return nil
	})
	if err != nil || served > time.Second {
		t.Errorf("pod-a served from Redis %s after the kill switch was answered (%v), want within 1s", served, err)
	}
	t.Logf("pod-a serves from Redis %s after the kill switch answered (%s after the crash)", served.Round(time.Millisecond), time.Since(crashed).Round(time.Millisecond))
	for _, tok := range []string{"pre-2", "pre-3"} {
		if code, body := e.held(emergencyShopA, tok); code != 200 || !strings.Contains(body, `"status":"held"`) {
			t.Errorf("%s, acknowledged before the crash, from Redis: %d %s, want held", tok, code, body)
		}
	}
	if code, by, _ := e.reserve(emergencyShopA, "during-1", 3); code != 201 || by != "redis" {
		t.Fatalf("reserve during-1: %d %s", code, by)
	}
	if code := e.settle(emergencyShopA, "pre-3", "release", 5*time.Second); code != 200 {
		t.Fatalf("release pre-3 from Redis: %d", code)
	}
	// A claim needs the ledger (MySQL): 503 at once, outcome known to be
	// nothing; it is retried once MySQL is back.
	if code, body, took := e.call("POST", fmt.Sprintf("/v1/shops/%d/reservations/pre-2/claim", emergencyShopA), nil); code != 503 || took > time.Second {
		t.Errorf("claim with the ledger down: %d %s after %s, want 503 at once", code, body, took)
	}

	// mariadbd back after an outage of a few seconds; the release hands
	// pod-a to MySQL again.
	time.Sleep(time.Until(crashed.Add(3 * time.Second)))
	restarting := time.Now()
	if err := e.myA.Start(); err != nil {
		t.Fatal(err)
	}
	back := e.degraded("", false, 20*time.Second)
	t.Logf("pod-a's mariadbd started again: no store degraded after %s", back.Round(time.Millisecond))
	// The release waits for MySQL's old fence to be moved off pod-a's
	// shops (the handoff sweeper, once MySQL answers): until then it is
	// refused, saying so.
	var refusals []string
	released, err := waitFor(15*time.Second, func() error {
		code, body := e.kill("pod:pod-a", "")
		if code == 409 && strings.Contains(body, "old fence") {
			refusals = append(refusals, body)
			time.Sleep(100 * time.Millisecond)
		}
		if code != 200 {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("release pod:pod-a: %v", err)
	}
	t.Logf("released %s after MySQL answered again (%d refusal(s) while its old fence stood)", released.Round(time.Millisecond), len(refusals))
	handedBack, err := waitFor(10*time.Second, func() error {
		code, by, _ := e.reserve(emergencyShopA, fmt.Sprintf("back-%d", time.Now().UnixNano()), 1)
		if code != 201 || by != "mysql" {
			return fmt.Errorf("%d %s", code, by)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("pod-a not decided by MySQL after the release: %v", err)
	}
	t.Logf("pod-a decided by MySQL again %s after the release", handedBack.Round(time.Millisecond))
	for _, tok := range []string{"pre-2", "during-1"} {
		if code := e.settle(emergencyShopA, tok, "claim", 10*time.Second); code != 200 {
			t.Errorf("claim %s after the handback: %d, want 200", tok, code)
		}
	}
	if code, body := e.held(emergencyShopA, "pre-3"); code != 409 || !strings.Contains(body, "released") {
		t.Errorf("pre-3, released while Redis decided, after the handback: %d %s, want released", code, body)
	}
	after := time.Now()
	claimedB := e.stopProbe()

	// pod-b throughout: no failure while pod-a was down; its numbers
	// before and during.
	if n := e.probe.failures(crashed, after); n > 0 {
		t.Errorf("pod-b failed %d calls while pod-a's MySQL was down", n)
	}
	t.Logf("pod-b before the crash: %s", e.probe.window(before, crashed))
	t.Logf("pod-b while pod-a's MySQL was down: %s", e.probe.window(crashed, restarting))
	t.Logf("pod-b while pod-a's mariadbd restarted and pod-a was handed back: %s", e.probe.window(restarting, after))

	// The ledgers: pod-a lost pre-1, pre-2 (2 each) and during-1 (3);
	// pod-b one per claim it was told succeeded.
	if got, want := e.ledger(e.dbA, emergencyShopA), int64(stockA-2-2-3); got != want {
		t.Errorf("pod-a's ledger: %d, want %d", got, want)
	}
	if got, want := e.ledger(e.dbB.DB, emergencyShopB), stockB-claimedB; got != want {
		t.Errorf("pod-b's ledger: %d, want %d (%d claims answered 200)", got, want, claimedB)
	}
}

// waitBacklog polls pod-a's relay backlog until cond holds or within
// passes. Every 100ms, not every 10ms as waitFor: the relay measures the
// backlog once a second, and each read of /metrics (about 200 KB, built
// and compressed by serve, parsed here) is work on the machine's two
// cores that pod-b's probe, measured meanwhile, would pay for.
func (e *emergency) waitBacklog(within time.Duration, cond func(n float64) error) (time.Duration, error) {
	return poll(within, 100*time.Millisecond, func() error { return cond(e.backlog()) })
}

// probeWarmup is how long pod-b's probe runs before its baseline begins:
// its first calls open connections and fill pools, which no window
// should count.
const probeWarmup = 500 * time.Millisecond

// emergencyWindow is how long pod-b's probe is measured before a fault
// and, in TestEmergencyRedisKilled, while it lasts: 2s, or
// $RESERVOIR_EMERGENCY_WINDOW (a Go duration). The p99 of 2s of calls is
// about the tenth-slowest of 1,000 and moves from run to run; a benchmark
// asks for longer windows.
func emergencyWindow(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("RESERVOIR_EMERGENCY_WINDOW")
	if v == "" {
		return 2 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Second || d > 10*time.Minute {
		t.Fatalf("RESERVOIR_EMERGENCY_WINDOW=%q: want a duration between 1s and 10m, such as 10s", v)
	}
	return d
}

// serveCPU is the CPU time serve has used so far (user and system, from
// /proc), or -1 where /proc cannot say (not Linux).
func (e *emergency) serveCPU() time.Duration {
	return proccpu.Of(e.serve.cmd.Process.Pid)
}

// cpuPerCall says how much CPU serve used in a window (serveCPU at its
// start and end), in all and per probe call: work serve does besides
// pod-b's calls (a relay retrying, a health check failing) adds to it.
func cpuPerCall(from, to time.Duration, w probeStats) string {
	if from < 0 || to < 0 || w.calls == 0 {
		return "serve's CPU unknown"
	}
	cpu := to - from
	return fmt.Sprintf("serve used %s of CPU, %s per pod-b call", cpu, (cpu / time.Duration(w.calls)).Round(time.Microsecond))
}

// ratio is a/b, 0 when b is.
func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// backlog reads the relay's backlog of pod-a from serve's /metrics.
func (e *emergency) backlog() float64 {
	e.t.Helper()
	m, err := scrape(e.client, e.serve.admin)
	if err != nil {
		e.t.Fatal(err)
	}
	return m.sum("reservoir_mirror_backlog_changes", "reservoir_pod", nil)["pod-a"]
}

// TestEmergencyRedisKilled: pod-a's redis-server is killed while MySQL
// decides pod-a. MySQL keeps deciding (reserves and claims succeed); the
// relay's backlog grows; a kill switch asked for meanwhile is refused,
// saying why and what to do; Redis back, the backlog drains, and the kill
// switch then finds in Redis every hold MySQL made meanwhile. pod-b's
// probe is compared in windows of emergencyWindow in which the test does
// nothing else: before the crash, while Redis is down once the checks of
// the outage are done, and after it all.
func TestEmergencyRedisKilled(t *testing.T) {
	t.Parallel()
	window := emergencyWindow(t)
	e := newEmergency(t, emergencyOptions{modeA: authority.ModeMySQL, modeB: authority.ModeMySQL})
	if code, by, _ := e.reserve(emergencyShopA, "pre-1", 2); code != 201 || by != "mysql" {
		t.Fatalf("reserve pre-1: %d %s", code, by)
	}
	e.startProbe()
	time.Sleep(probeWarmup)
	before, cpuBefore := time.Now(), e.serveCPU()
	time.Sleep(window) // pod-b's baseline: the probe alone
	crashed, cpuCrashed := time.Now(), e.serveCPU()
	if err := e.rdA.Kill(); err != nil {
		t.Fatal(err)
	}
	seen := e.degraded("redis", true, 10*time.Second)
	t.Logf("pod-a's redis-server killed: /readyz 200 listing pod-a's redis as degraded after %s", seen.Round(time.Millisecond))
	for i, tok := range []string{"during-1", "during-2", "during-3"} {
		if code, by, took := e.reserve(emergencyShopA, tok, int64(i+1)); code != 201 || by != "mysql" {
			t.Fatalf("reserve %s with pod-a's Redis down: %d %s after %s, want 201 by mysql (MySQL keeps deciding)", tok, code, by, took)
		}
	}
	if code := e.settle(emergencyShopA, "during-2", "claim", 5*time.Second); code != 200 {
		t.Fatalf("claim during-2 with Redis down: %d", code)
	}
	if _, err := e.waitBacklog(10*time.Second, func(n float64) error {
		if n < 4 {
			return fmt.Errorf("backlog %v", n)
		}
		return nil
	}); err != nil {
		t.Errorf("the relay's backlog does not grow while Redis is down: %v", err)
	}
	code, body := e.kill("pod:pod-a", "redis")
	if code != 409 || !strings.Contains(body, "pod pod-a's redis cannot take its shops now") || !strings.Contains(body, "mysql keeps deciding") {
		t.Errorf("kill switch to a dead Redis: %d %s, want 409 saying Redis cannot take them and MySQL keeps deciding", code, body)
	}
	t.Logf("kill switch meanwhile: %d %s", code, body)

	// pod-b during the outage: as long a window as the baseline, in which
	// the test does nothing but the probe, as in the baseline. The checks
	// above poll /readyz and /metrics, work the baseline does not have:
	// their part of the outage is logged apart.
	quiet, cpuQuiet := time.Now(), e.serveCPU()
	time.Sleep(window)
	restarting, cpuRestarting := time.Now(), e.serveCPU()
	if err := e.rdA.Start(); err != nil {
		t.Fatal(err)
	}
	e.degraded("", false, 20*time.Second)
	drained, err := e.waitBacklog(20*time.Second, func(n float64) error {
		if n != 0 {
			return fmt.Errorf("backlog %v", n)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the backlog did not drain after Redis came back: %v", err)
	}
	t.Logf("redis-server back: the backlog drained within %s", drained.Round(time.Millisecond))
	if code, body := e.kill("pod:pod-a", "redis"); code != 200 {
		t.Fatalf("kill switch after Redis came back: %d %s", code, body)
	}
	for _, tok := range []string{"pre-1", "during-1", "during-3"} {
		if code, body := e.held(emergencyShopA, tok); code != 200 || !strings.Contains(body, `"status":"held"`) {
			t.Errorf("%s from Redis after the kill switch: %d %s, want held", tok, code, body)
		}
	}
	if code, body := e.held(emergencyShopA, "during-2"); code != 409 || !strings.Contains(body, "already_claimed") {
		t.Errorf("during-2 (claimed while Redis was down) from Redis: %d %s, want already claimed", code, body)
	}
	if code := e.settle(emergencyShopA, "during-3", "claim", 5*time.Second); code != 200 {
		t.Errorf("claim during-3 from Redis: %d", code)
	}
	if code, body := e.kill("pod:pod-a", ""); code != 200 {
		t.Fatalf("release: %d %s", code, body)
	}
	released := time.Now()
	// pod-b once more without the fault, the probe alone, pod-a's Redis
	// back and the kill switch released (its handback of pod-a's shop to
	// MySQL given a moment): the machine's load drifts, and a window on
	// each side of the outage shows how far.
	time.Sleep(probeWarmup)
	healed, cpuHealed := time.Now(), e.serveCPU()
	time.Sleep(window)
	after, cpuAfter := time.Now(), e.serveCPU()
	claimedB := e.stopProbe()
	if n := e.probe.failures(crashed, after); n > 0 {
		t.Errorf("pod-b failed %d calls while pod-a's Redis was down", n)
	}
	base, down, healedB := e.probe.stats(before, crashed), e.probe.stats(quiet, restarting), e.probe.stats(healed, after)
	t.Logf("pod-b before the crash (%s, the probe alone): %s; %s", window, base, cpuPerCall(cpuBefore, cpuCrashed, base))
	t.Logf("pod-b while pod-a's Redis was down, its checks done (%s, the probe alone): %s; %s", window, down, cpuPerCall(cpuQuiet, cpuRestarting, down))
	t.Logf("pod-b after pod-a's Redis was back and the kill switch released (%s, the probe alone): %s; %s", window, healedB, cpuPerCall(cpuHealed, cpuAfter, healedB))
	t.Logf("pod-b's p99 while pod-a's Redis was down / before: %.2f (/ after: %.2f)", ratio(down.p99, base.p99), ratio(down.p99, healedB.p99))
	t.Logf("pod-b while pod-a's Redis was down, during the checks (/readyz and /metrics polled, pod-a's calls, %s): %s",
		quiet.Sub(crashed).Round(time.Millisecond), e.probe.window(crashed, quiet))
	t.Logf("pod-b over the whole outage (%s): %s", restarting.Sub(crashed).Round(time.Millisecond), e.probe.window(crashed, restarting))
	t.Logf("pod-b while pod-a's redis-server restarted and its backlog drained: %s", e.probe.window(restarting, released))
	if got, want := e.ledger(e.dbA, emergencyShopA), int64(stockA-2-3); got != want {
		t.Errorf("pod-a's ledger: %d, want %d", got, want)
	}
	if got, want := e.ledger(e.dbB.DB, emergencyShopB), stockB-claimedB; got != want {
		t.Errorf("pod-b's ledger: %d, want %d", got, want)
	}
}

// TestEmergencyMySQLPaused: pod-a's mariadbd is paused (SIGSTOP) for 10 s
// under traffic, then resumed. No call waits past its deadline (the
// server's 5 s request timeout; once the breaker opens, 503 at once); every
// call without a definite answer is retried with its token until it gets
// one; nothing is lost or doubled: the ledger lost exactly the claims
// answered 200, each claimed once.
func TestEmergencyMySQLPaused(t *testing.T) {
	t.Parallel()
	e := newEmergency(t, emergencyOptions{modeA: authority.ModeMySQL, modeB: authority.ModeMySQL})
	const stock = 100000 // enough that the carts never run out
	e.adjust(emergencyShopA, stock)
	e.startProbe()
	const deadline = 5*time.Second + time.Second // the request timeout, and slack for the answer
	var (
		mu        sync.Mutex
		slowest   time.Duration
		slowestOp string
		fast503   int
		claimed   = map[string]int64{}
		unsettled []string
	)
	// timed notes a pod-a call's time: the slowest, and the 503s the
	// breaker answered at once.
	timed := func(took time.Duration, code int, what, body string) {
		mu.Lock()
		defer mu.Unlock()
		if took > slowest {
			slowest, slowestOp = took, fmt.Sprintf("%s (%d %s)", what, code, body)
		}
		if code == 503 && took < 100*time.Millisecond {
			fast503++
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tok := fmt.Sprintf("w%d-%d", w, i)
				code, _, took := e.reserve(emergencyShopA, tok, 1)
				timed(took, code, "reserve "+tok, "")
				// Outcome unknown: the same reserve again until definite.
				for code == 503 || code == 0 {
					time.Sleep(200 * time.Millisecond)
					code, _, took = e.reserve(emergencyShopA, tok, 1)
					timed(took, code, "reserve "+tok+" again", "")
				}
				if code != 201 && code != 200 { // 200: a retry's replay of the reserve
					mu.Lock()
					unsettled = append(unsettled, fmt.Sprintf("%s reserve %d", tok, code))
					mu.Unlock()
					continue
				}
				code, body, took := e.call("POST", fmt.Sprintf("/v1/shops/%d/reservations/%s/claim", emergencyShopA, tok), nil)
				timed(took, code, "claim "+tok, string(body))
				if code == 503 || code == 0 {
					code = e.settle(emergencyShopA, tok, "claim", 30*time.Second)
				}
				mu.Lock()
				switch code {
				case 200:
					claimed[tok]++
				default:
					unsettled = append(unsettled, fmt.Sprintf("%s claim %d", tok, code))
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	time.Sleep(2 * time.Second)
	paused := time.Now()
	if err := e.myA.Pause(); err != nil {
		t.Fatal(err)
	}
	seen := e.degraded("mysql", true, 10*time.Second)
	t.Logf("pod-a's mariadbd paused: /readyz 200 listing pod-a's mysql as degraded after %s", seen.Round(time.Millisecond))
	time.Sleep(time.Until(paused.Add(10 * time.Second)))
	if err := e.myA.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	e.degraded("", false, 20*time.Second)
	time.Sleep(2 * time.Second) // traffic after the resume
	close(stop)
	wg.Wait()
	after := time.Now()
	claimedB := e.stopProbe()

	if slowest > deadline {
		t.Errorf("a call on pod-a took %s, past its deadline (%s): %s", slowest, deadline, slowestOp)
	}
	if len(unsettled) > 0 {
		t.Errorf("carts without a 201 and a 200: %v", unsettled)
	}
	var total int64
	for tok, n := range claimed {
		if n != 1 {
			t.Errorf("%s claimed %d times", tok, n)
		}
		total++
	}
	var rows int64
	if err := e.dbA.QueryRowContext(e.ctx, "SELECT COUNT(*) FROM reservation_claims WHERE shop_id = ?", emergencyShopA).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != total {
		t.Errorf("claim rows in pod-a's ledger: %d, want %d (one per claim answered 200)", rows, total)
	}
	if got, want := e.ledger(e.dbA, emergencyShopA), stock-total; got != want {
		t.Errorf("pod-a's ledger: %d, want %d (%d claims answered 200)", got, want, total)
	}
	if got, want := e.ledger(e.dbB.DB, emergencyShopB), stockB-claimedB; got != want {
		t.Errorf("pod-b's ledger: %d, want %d", got, want)
	}
	if n := e.probe.failures(paused, after); n > 0 {
		t.Errorf("pod-b failed %d calls while pod-a's MySQL was paused", n)
	}
	t.Logf("pod-a: %d carts claimed, slowest call %s, %d answered 503 within 100ms (the breaker); resumed %s after the pause",
		total, slowest.Round(time.Millisecond), fast503, resumed.Sub(paused).Round(time.Millisecond))
	t.Logf("pod-b before the pause: %s", e.probe.window(paused.Add(-2*time.Second), paused))
	t.Logf("pod-b while pod-a's MySQL was paused: %s", e.probe.window(paused, resumed))
	t.Logf("pod-b after the resume: %s", e.probe.window(resumed, after))
}

// TestEmergencyControlDatabaseDown: the control database (flags, audit,
// comparer) is killed. The replica keeps serving every pod on the flags it
// has and stays ready (the control database listed as degraded); the
// admin API says the flags cannot be changed; the database back, the kill
// switch works again without a restart.
func TestEmergencyControlDatabaseDown(t *testing.T) {
	t.Parallel()
	e := newEmergency(t, emergencyOptions{modeA: authority.ModeMySQL, modeB: authority.ModeShadow, privateControl: true})
	if err := e.ctl.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := waitFor(10*time.Second, func() error {
		code, r, err := ready(e.ctx, e.client, e.serve.admin)
		if err != nil || code != 200 || !slices.ContainsFunc(r.Degraded, func(s string) bool { return strings.HasPrefix(s, "control:") }) {
			return fmt.Errorf("%d %+v %v", code, r, err)
		}
		return nil
	}); err != nil {
		t.Fatalf("/readyz with the control database down: %v, want 200 listing it as degraded", err)
	}
	for i, shop := range []int64{emergencyShopA, emergencyShopB} {
		want := []string{"mysql", "redis"}[i]
		tok := fmt.Sprintf("ctl-down-%d", shop)
		if code, by, took := e.reserve(shop, tok, 1); code != 201 || by != want {
			t.Errorf("reserve on shop %d with the control database down: %d %s after %s, want 201 by %s", shop, code, by, took, want)
		}
		if code := e.settle(shop, tok, "claim", 5*time.Second); code != 200 {
			t.Errorf("claim on shop %d with the control database down: %d", shop, code)
		}
	}
	code, body := e.kill("pod:pod-a", "redis")
	if code != 503 || !strings.Contains(body, "the control database does not answer") || !strings.Contains(body, "flags cannot be changed") {
		t.Errorf("kill switch with the control database down: %d %s, want an error saying the flags cannot be changed (the control database)", code, body)
	}
	t.Logf("kill switch with the control database down: %d %s", code, body)

	if err := e.ctl.Start(); err != nil {
		t.Fatal(err)
	}
	e.degraded("", false, 20*time.Second)
	engaged, err := waitFor(10*time.Second, func() error {
		if code, body := e.kill("pod:pod-a", "redis"); code != 200 {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("kill switch after the control database came back: %v", err)
	}
	if _, err := waitFor(5*time.Second, func() error {
		if code, by, _ := e.reserve(emergencyShopA, fmt.Sprintf("after-%d", time.Now().UnixNano()), 1); code != 201 || by != "redis" {
			return fmt.Errorf("%d %s", code, by)
		}
		return nil
	}); err != nil {
		t.Errorf("pod-a not decided by Redis after the kill switch: %v", err)
	}
	t.Logf("the control database back: the kill switch engaged within %s, without a restart", engaged.Round(time.Millisecond))
}

// blackhole listens on a loopback port, accepts every connection and never
// answers: a database that hangs (a paused process, a dead host whose
// packets are dropped).
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestEmergencyMySQLDownFromStart: serve starts while pod-b's MySQL hangs
// (it accepts connections and never answers). It is ready, listing pod-b
// as degraded; pod-a's reserves succeed; pod-b's calls that need MySQL
// answer 503 within a second; the admin API answers.
func TestEmergencyMySQLDownFromStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := &http.Client{Timeout: 30 * time.Second}
	control, dbA := testdb.New(t), testdb.New(t)
	cfg, err := mysql.ParseDSN(testdb.New(t).DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = blackhole(t)
	dir := t.TempDir()
	flags := flagdoc.FlagsFile{Path: filepath.Join(dir, "flags.json")}
	f := flagdoc.NewFlags()
	if err := f.SetMode(flagdoc.PodScope("pod-b"), authority.ModeMySQL); err != nil {
		t.Fatal(err)
	}
	if err := flags.Write(f); err != nil {
		t.Fatal(err)
	}
	rdA, rdB := testredis.New(t), testredis.New(t)
	topo := filepath.Join(dir, "topology.toml")
	text := fmt.Sprintf("control_dsn = %q\nflags_file = %q\n"+
		"[[pods]]\nname = \"pod-a\"\nmysql_dsn = %q\nredis_addr = %q\nredis_prefix = %q\nshops = [%d]\n"+
		"[[pods]]\nname = \"pod-b\"\nmysql_dsn = %q\nredis_addr = %q\nredis_prefix = %q\nshops = [%d]\n",
		control.DSN, flags.Path, dbA.DSN, testredis.Addr(t), rdA.Prefix, emergencyShopA, cfg.FormatDSN(), testredis.Addr(t), rdB.Prefix, emergencyShopB)
	if err := os.WriteFile(topo, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, "serve", topo, emergencyAdminToken)
	defer func() {
		if t.Failed() {
			t.Logf("serve's log (warn and up):\n%s", tail(p.stderr.String(), 4000))
		}
	}()
	var r readiness
	readyIn, err := waitFor(10*time.Second, func() error {
		code, got, err := ready(ctx, client, p.admin)
		r = got
		if err != nil || code != 200 || !slices.ContainsFunc(got.Degraded, func(s string) bool { return strings.HasPrefix(s, "pod-b: mysql") }) {
			return fmt.Errorf("/readyz %d %+v %v", code, got, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("want /readyz 200 listing pod-b's mysql as degraded: %v", err)
	}
	t.Logf("ready %s after listening, degraded: %v", readyIn.Round(time.Millisecond), r.Degraded)
	call := func(method, path string, body any) (int, []byte, time.Duration) {
		start := time.Now()
		code, out, err := adminCall(ctx, client, p.base, method, path, apiToken, body, nil)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return code, out, time.Since(start)
	}
	if code, body, _ := call("POST", fmt.Sprintf("/v1/shops/%d/items/1/locations/1/adjust", emergencyShopA), map[string]any{"available": 10}); code != 200 {
		t.Fatalf("adjust pod-a: %d %s", code, body)
	}
	if code, body, _ := call("POST", fmt.Sprintf("/v1/shops/%d/reservations", emergencyShopA), cartOf("a-1", 1)); code != 201 {
		t.Errorf("reserve on the healthy pod: %d %s", code, body)
	}
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", fmt.Sprintf("/v1/shops/%d/reservations", emergencyShopB), cartOf("b-1", 1)},
		{"POST", fmt.Sprintf("/v1/shops/%d/items/1/locations/1/adjust", emergencyShopB), map[string]any{"available": 10}},
		{"GET", fmt.Sprintf("/v1/shops/%d/items/1/availability", emergencyShopB), nil},
	} {
		code, body, took := call(c.method, c.path, c.body)
		if code != 503 || took > time.Second || errorCode(body) != "store_unavailable" {
			t.Errorf("%s %s on the pod whose MySQL hangs: %d %s after %s, want 503 store_unavailable within 1s", c.method, c.path, code, body, took)
		}
	}
	start := time.Now()
	code, body, err := adminCall(ctx, client, p.admin, "GET", "/admin/rollout/status", emergencyAdminToken, nil, nil)
	if err != nil || code != 200 {
		t.Errorf("admin status with pod-b's MySQL hanging: %d %s %v", code, body, err)
	}
	t.Logf("admin status answered in %s", time.Since(start).Round(time.Millisecond))
}
