package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seed31b0e981/reservoir/internal/controldb"
	"github.com/seed31b0e981/reservoir/internal/proccpu"
	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// The killflood scenario (issue 25, point 4, acceptance c: "control plane
// first"): is a kill switch obeyed, and does the admin API answer, while
// the checkout API is flooded? A point starts Replicas `reservoir serve`
// processes that share their flags through the control database
// (flags_source = "database"; the run's database is the control database
// and the pod's, unless Options.KillFloodControlDSN puts the control
// database on a server of its own), with pod-a in shadow mode (Redis decides; MySQL's
// shadow writes and the comparer's writes to the control database go on).
// A process of attackers (floodproc.go) holds the point's concurrency in
// connections against the checkout listener of the first replica (or of
// every replica, Options.KillFloodTarget "both"), each sending reserves
// one after the other; most are shed (503 overloaded). Meanwhile an
// operator engages and releases the kill switch of pod-a through the
// first replica's admin API, Options.KillFloodSwitches times each, and
// for every change the point records:
//
//   - answer: the admin call's answer time, as the operator saw it (the
//     answer waits for the fleet to obey, so it includes that wait);
//   - obey: from the write (rollout_flags.updated_at, stamped by the
//     writing replica just before its UPDATE) to the moment the last
//     replica reported the new version applied (its heartbeat's
//     applied_at, stamped by the database); both clocks are this
//     machine's;
//   - fleet: the answer's own fleet line (from after the write and the
//     audit to the last heartbeat), and self: the answering replica's
//     obeyed_after_ms.
//
// The replicas run the reservoir binary of the point's variant
// (Options.ServeBinaries): two builds side by side in one run are a
// before and an after.

// ScenarioKillFlood is the killflood scenario's name.
const ScenarioKillFlood = "killflood"

// VariantServe is the killflood variant whose replicas run this
// executable (unless Options.ServeBinaries names another binary for it).
const VariantServe = "serve"

const (
	// DefaultKillFloodConns is the attacking connections of a killflood
	// point.
	DefaultKillFloodConns = 1500
	// DefaultKillFloodSwitches is the kill switch engage+release pairs of a
	// killflood point.
	DefaultKillFloodSwitches = 20
	// killFloodReplicas is the `reservoir serve` processes of a point.
	killFloodReplicas = 2
	killFloodPod      = "pod-a"
	killFloodItem     = 7
	// killFloodStock is the item's stock: the flood's reserves never run
	// out of it (each admitted reserve holds a unit for a minute).
	killFloodStock = 100_000_000
	// killFloodSettle is how long the flood runs before the first change.
	killFloodSettle = 3 * time.Second
	// killFloodGap separates two changes.
	killFloodGap = 200 * time.Millisecond
	// killFloodObeyLimit bounds the wait for every replica to report a
	// change applied; a change not obeyed by then counts as not obeyed.
	killFloodObeyLimit = 5 * time.Second
	// killFloodPause is how long an attacking connection waits after an
	// answer before its next reserve: with 1,500 connections that is
	// still far more than a replica can serve (most are shed), and it
	// leaves the machine's two cores to the replicas rather than to the
	// attackers' own loop.
	killFloodPause = 100 * time.Millisecond
	// killFloodTargetMs is the target of both the obedience's and the
	// answer's p99 (issue 25, acceptance c).
	killFloodTargetMs = 100
)

// KillFloodStats are what a killflood point's result adds: the changes'
// timings and the flood's figures. Times are in milliseconds.
type KillFloodStats struct {
	// Replicas and Target: how many replicas, and which were flooded
	// ("first" or "both").
	Replicas int    `json:"replicas"`
	Target   string `json:"target"`
	// Changes is the kill switch changes made (engage and release);
	// NotObeyed those not reported applied by every replica within 5 s
	// (or whose answer was not 200).
	Changes   int `json:"changes"`
	NotObeyed int `json:"not_obeyed"`
	// Answer is the admin call's answer time; Obey the write to the last
	// replica's heartbeat with the new version; Fleet the answer's fleet
	// line; Self the answering replica's obeyed_after_ms.
	Answer Dist `json:"answer_ms"`
	Obey   Dist `json:"obey_ms"`
	Fleet  Dist `json:"fleet_ms"`
	Self   Dist `json:"self_ms"`
	// ObeyByReplica is Obey per replica, the first (always flooded, and
	// answering the admin calls) first.
	ObeyByReplica []Dist `json:"obey_by_replica_ms"`
	// Flood is what the attackers saw over the whole flood.
	Flood    FloodStats `json:"flood"`
	ShedRate float64    `json:"shed_rate"`
	// Goroutines is each replica's go_goroutines, read once the flood
	// had settled, and Places the most checkout connections it had open
	// and the most its listener keeps open ("64/64"; "-" for a build
	// without the cap), read then, after every fifth change and at the
	// end (a listener that made a connection wait for a place was full,
	// whatever the readings caught between two turns);
	// ReplicaCores each replica's CPU (cores) and AttackerCores the
	// attackers' during the changes.
	Goroutines    []float64 `json:"goroutines"`
	Places        []string  `json:"places"`
	ReplicaCores  []float64 `json:"replica_cores"`
	AttackerCores float64   `json:"attacker_cores"`
	// AttackerNice is the attackers' CPU priority (Options.KillFloodNice).
	AttackerNice int `json:"attacker_nice"`
	// Admin is whose admin API the changes went through
	// (Options.KillFloodAdmin): "flooded", the first replica's, or
	// "spare", the second's.
	Admin string `json:"admin"`
	// DBRoundTrip and DBCommit are a no-op statement's round trip and a
	// one-row update's commit on the control database (the run's
	// database, or the one on Options.KillFloodControlDSN's server),
	// timed every 20 ms by the bench itself (not flooded)
	// during the changes: what the server alone costs a control-plane
	// round trip and a commit in the same window.
	DBRoundTrip Dist `json:"db_round_trip_ms"`
	DBCommit    Dist `json:"db_commit_ms"`
	// Binary is the reservoir binary the replicas ran.
	Binary string `json:"binary"`
	// Each is every change, in order.
	Each []KillFloodChange `json:"changes_each"`
}

// KillFloodChange is one kill switch change of a killflood point.
type KillFloodChange struct {
	Op      string  `json:"op"` // engage or release
	Status  int     `json:"status"`
	Version int64   `json:"version"`
	Answer  float64 `json:"answer_ms"`
	// Obey is -1 when not every replica reported it within 5 s.
	Obey          float64   `json:"obey_ms"`
	ObeyByReplica []float64 `json:"obey_by_replica_ms"`
	Fleet         float64   `json:"fleet_ms"`
	FleetLine     string    `json:"fleet"`
	Self          float64   `json:"self_ms"` // -1: null in the answer
	// Via is the replica whose admin API answered.
	Via   string `json:"via"`
	Error string `json:"error,omitempty"`
}

// Dist is a distribution's summary, in milliseconds.
type Dist struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// distOf summarises vs (ms), as Result.fill does latencies.
func distOf(vs []float64) Dist {
	vs = slices.Clone(vs)
	slices.Sort(vs)
	if len(vs) == 0 {
		return Dist{}
	}
	at := func(p float64) float64 { return vs[min(len(vs)-1, int(p*float64(len(vs))))] }
	return Dist{N: len(vs), P50: at(0.50), P99: at(0.99), Max: vs[len(vs)-1]}
}

func (d Dist) String() string {
	if d.N == 0 {
		return "-"
	}
	if d.Max < 10 {
		return fmt.Sprintf("%.1f / %.1f / %.1f", d.P50, d.P99, d.Max)
	}
	return fmt.Sprintf("%.0f / %.0f / %.0f", d.P50, d.P99, d.Max)
}

// killFloodVariant reports whether v can run the killflood scenario: the
// label of a serve binary.
func (o Options) killFloodVariant(v string) bool {
	_, ok := o.ServeBinaries[v]
	return ok || v == VariantServe
}

// serveBinary is the reservoir binary of a killflood variant.
func (o Options) serveBinary(v string) (string, error) {
	if p, ok := o.ServeBinaries[v]; ok {
		return p, nil
	}
	if v != VariantServe {
		return "", fmt.Errorf("bench: no serve binary for the killflood variant %q (give it with --serve %s=PATH)", v, v)
	}
	return os.Executable()
}

// floodBinary is the binary the attackers run as.
func (o Options) floodBinary() (string, error) {
	if o.FloodBinary != "" {
		return o.FloodBinary, nil
	}
	return os.Executable()
}

// killFloodRig is a killflood point's replicas and what they share.
type killFloodRig struct {
	dir        string
	shop       int64
	adminToken string
	apiToken   string
	replicas   []*replicaProc
	// admin is the replica whose admin API the changes go through: the
	// first unless Options.KillFloodAdmin is spare.
	admin *replicaProc
	// direct is the control database (servers.controlDB): the flags,
	// the heartbeats.
	direct *sql.DB
	client *http.Client
}

// replicaProc is one `reservoir serve` process.
type replicaProc struct {
	name        string
	cmd         *exec.Cmd
	base, admin string
	log         syncBuffer
	done        chan struct{}
	err         error
}

var (
	listeningOn = regexp.MustCompile(`listening on (http://[0-9.:]+)`)
	adminOnLine = regexp.MustCompile(`admin on (http://[0-9.:]+)`)
)

func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newKillFloodRig writes the point's topology and flags (pod-a in shadow
// mode, no kill switch) and starts the replicas, ready and reporting.
func (r *runner) newKillFloodRig(ctx context.Context, shop int64, binary string) (_ *killFloodRig, err error) {
	cfg, err := mysql.ParseDSN(r.opts.MySQLDSN)
	if err != nil {
		return nil, err
	}
	cfg.DBName = r.srv.dbName
	dsn := cfg.FormatDSN()
	// The control database: the pod's own, or one on a server of its own
	// (Options.KillFloodControlDSN).
	controlDSN, err := r.srv.controlDSN()
	if err != nil {
		return nil, err
	}
	control := r.srv.controlDB()
	dir, err := os.MkdirTemp("", "reservoir-killflood-")
	if err != nil {
		return nil, err
	}
	k := &killFloodRig{dir: dir, shop: shop, adminToken: randomToken(), apiToken: randomToken(), direct: control,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	defer func() {
		if err != nil {
			k.close()
		}
	}()
	topo := fmt.Sprintf("control_dsn = %q\nflags_source = \"database\"\n[[pods]]\nname = %q\nmysql_dsn = %q\nredis_addr = %q\nredis_prefix = %q\nshops = [%d]\n",
		controlDSN, killFloodPod, dsn, r.opts.RedisAddr, fmt.Sprintf("%skf%d:", r.srv.prefix, shop), shop)
	if err := os.WriteFile(filepath.Join(dir, "topology.toml"), []byte(topo), 0o600); err != nil {
		return nil, err
	}
	// pod-a in shadow mode, its kill switch off (an interrupted point
	// before may have left it on).
	_, _, err = (flagdoc.FlagsTable{DB: control}).Update(func(f *flagdoc.Flags) error {
		if f.KillAt(flagdoc.PodScope(killFloodPod)).Engaged() {
			if err := f.ReleaseKill(flagdoc.PodScope(killFloodPod), flagdoc.Attribution{Actor: "bench", Reason: "killflood point start", At: time.Now().UTC()}); err != nil {
				return err
			}
		}
		return f.SetMode(flagdoc.PodScope(killFloodPod), authority.ModeShadow)
	})
	if err != nil {
		return nil, fmt.Errorf("write the flags: %w", err)
	}
	clients := fmt.Sprintf("[[clients]]\nname = \"bench\"\ntoken_sha256 = \"%x\"\nroles = [\"checkout\", \"inventory\"]\n", sha256.Sum256([]byte(k.apiToken)))
	for i := range killFloodReplicas {
		p, err := startReplica(fmt.Sprintf("replica-%d", i), binary, dir, k.adminToken, clients)
		if err != nil {
			return nil, err
		}
		k.replicas = append(k.replicas, p)
	}
	k.admin = k.replicas[0]
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, p := range k.replicas {
		if err := k.waitReady(rctx, p); err != nil {
			return nil, err
		}
	}
	cur, err := (flagdoc.FlagsTable{DB: control}).Read()
	if err != nil {
		return nil, err
	}
	if _, err := k.waitApplied(rctx, cur.Version, time.Time{}); err != nil {
		return nil, fmt.Errorf("replicas reporting flags version %d: %w", cur.Version, err)
	}
	code, body, err := k.call(ctx, k.replicas[0].base, "POST", fmt.Sprintf("/v1/shops/%d/items/%d/locations/%d/adjust", shop, killFloodItem, location),
		k.apiToken, map[string]any{"available": killFloodStock}, nil)
	if err != nil || code != http.StatusOK {
		return nil, fmt.Errorf("stock the item: %d %s %v", code, body, err)
	}
	return k, nil
}

// startReplica starts `binary serve` in dir and waits until it listens.
func startReplica(name, binary, dir, adminToken, clients string) (*replicaProc, error) {
	cmd := exec.Command(binary, "serve", "--topology", "topology.toml", "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--log-level", "warn", "--shutdown-timeout", "5s", "--drain-timeout", "5s")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "RESERVOIR_ADMIN_TOKEN="+adminToken, "RESERVOIR_CLIENTS="+clients)
	p := &replicaProc{name: name, cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = &p.log
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s serve): %w", name, binary, err)
	}
	found := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			m, a := listeningOn.FindStringSubmatch(sc.Text()), adminOnLine.FindStringSubmatch(sc.Text())
			if m != nil && a != nil && !sent {
				found <- [2]string{m[1], a[1]}
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	select {
	case f := <-found:
		p.base, p.admin = f[0], f[1]
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited before listening: %v: %s", name, p.err, tail(p.log.String(), 2000))
	case <-time.After(60 * time.Second):
		p.stop()
		return nil, fmt.Errorf("%s did not listen within 60s: %s", name, tail(p.log.String(), 2000))
	}
}

// stop ends the process: SIGTERM, then SIGKILL after 20 s.
func (p *replicaProc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (k *killFloodRig) close() {
	for _, p := range k.replicas {
		p.stop()
	}
	k.client.CloseIdleConnections()
	_ = os.RemoveAll(k.dir)
}

// waitReady waits for p's /readyz to answer 200.
func (k *killFloodRig) waitReady(ctx context.Context, p *replicaProc) error {
	for {
		code, body, err := k.call(ctx, p.admin, "GET", "/readyz", "", nil, nil)
		if err == nil && code == http.StatusOK {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %d %s %v: %s", p.name, code, body, err, tail(p.log.String(), 2000))
		case <-p.done:
			return fmt.Errorf("%s exited: %v: %s", p.name, p.err, tail(p.log.String(), 2000))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// call makes an HTTP call with a JSON body and reads a JSON answer into
// out (on 2xx).
func (k *killFloodRig) call(ctx context.Context, base, method, path, token string, body, out any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("X-Reservoir-Actor", "bench")
	res, err := k.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return res.StatusCode, nil, err
	}
	if res.StatusCode/100 == 2 && out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return res.StatusCode, b, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return res.StatusCode, b, nil
}

// pidOf is the process id in a replica's heartbeat id (host:pid:start).
func pidOf(id string) int {
	f := strings.Split(id, ":")
	if len(f) < 3 {
		return 0
	}
	pid, _ := strconv.Atoi(f[len(f)-2])
	return pid
}

// waitApplied waits until every replica of the rig reports version (or a
// later one) applied in its heartbeat, and returns, per replica, its
// applied_at minus written (ms; when written is zero, 0).
func (k *killFloodRig) waitApplied(ctx context.Context, version int64, written time.Time) ([]float64, error) {
	deadline := time.Now().Add(killFloodObeyLimit)
	for {
		rs, err := rollout.Replicas(ctx, k.direct)
		if err != nil {
			return nil, err
		}
		out := make([]float64, len(k.replicas))
		n := 0
		for i, p := range k.replicas {
			for _, r := range rs {
				if pidOf(r.ID) == p.cmd.Process.Pid && r.AppliedVersion >= version {
					if !written.IsZero() {
						out[i] = ms(r.AppliedAt.Sub(written))
					}
					n++
				}
			}
		}
		if n == len(k.replicas) {
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d replicas report flags version %d after %s", n, len(k.replicas), version, killFloodObeyLimit)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// change makes one kill switch change through the admin API of k.admin
// and measures it.
func (k *killFloodRig) change(ctx context.Context, i int) KillFloodChange {
	c := KillFloodChange{Op: "engage", Obey: -1, Self: -1}
	method := http.MethodPost
	body := map[string]any{"scope": "pod:" + killFloodPod, "reason": "killflood drill " + strconv.Itoa(i), "state": "redis"}
	if i%2 == 1 {
		c.Op, method = "release", http.MethodDelete
		delete(body, "state")
	}
	var ans wire.KillResponse
	start := time.Now()
	code, raw, err := k.call(ctx, k.admin.admin, method, "/admin/killswitch", k.adminToken, body, &ans)
	c.Answer, c.Status, c.Via = ms(time.Since(start)), code, k.admin.name
	if err != nil || code != http.StatusOK {
		c.Error = fmt.Sprintf("%d %s %v", code, tail(string(raw), 300), err)
		return c
	}
	c.Fleet, c.FleetLine = ms(time.Duration(ans.Fleet.TookNS)), ans.Fleet.Summary
	if ans.ObeyedAfterMs != nil {
		c.Self = *ans.ObeyedAfterMs
	}
	version, written, err := controldb.FlagsWritten(ctx, k.direct, controldb.FlagsDoc)
	if err != nil {
		c.Error = "read the flags' write: " + err.Error()
		return c
	}
	c.Version = version
	if ans.Fleet.Version != 0 && ans.Fleet.Version != version {
		c.Error = fmt.Sprintf("the answer wrote flags version %d, the control database holds %d", ans.Fleet.Version, version)
		return c
	}
	per, err := k.waitApplied(ctx, version, written)
	if err != nil {
		c.Error = err.Error()
		return c
	}
	c.ObeyByReplica, c.Obey = per, slices.Max(per)
	return c
}

// scrape reads a replica's go_goroutines and its checkout listener's
// connections open, places (0, 0 when it has none) and waits for a place
// from its /metrics.
func (k *killFloodRig) scrape(ctx context.Context, p *replicaProc) (goroutines, open, places, waits float64) {
	_, body, err := k.call(ctx, p.admin, "GET", "/metrics", "", nil, nil)
	if err != nil {
		return -1, 0, 0, 0
	}
	value := func(name string) (float64, bool) {
		for line := range strings.SplitSeq(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				return f, err == nil
			}
		}
		return 0, false
	}
	goroutines, ok := value("go_goroutines")
	if !ok {
		goroutines = -1
	}
	open, _ = value("reservoir_checkout_connections")
	places, _ = value("reservoir_checkout_connection_places")
	waits, _ = value("reservoir_checkout_connection_waits_total")
	return goroutines, open, places, waits
}

// killFloodPoint runs a killflood point: the replicas, the flood, the
// changes.
func (r *runner) killFloodPoint(ctx context.Context, pt Point, shop int64) []Result {
	res := Result{Point: pt, Op: "killswitch", Invariant: "ok"}
	fail := func(err error) []Result {
		res.Error = err.Error()
		res.Invariant = "not checked"
		return []Result{res}
	}
	binary, err := r.opts.serveBinary(pt.Variant)
	if err != nil {
		return fail(err)
	}
	attackers, err := r.opts.floodBinary()
	if err != nil {
		return fail(err)
	}
	k, err := r.newKillFloodRig(ctx, shop, binary)
	if err != nil {
		return fail(err)
	}
	defer k.close()
	kf := &KillFloodStats{Replicas: len(k.replicas), Target: r.opts.KillFloodTarget, Binary: binary, AttackerNice: r.opts.KillFloodNice,
		Admin: r.opts.KillFloodAdmin}
	if kf.Admin == KillFloodAdminSpare {
		k.admin = k.replicas[1]
	}
	res.KillFlood = kf
	bases := []string{k.replicas[0].base}
	if r.opts.KillFloodTarget == KillFloodBoth {
		bases = bases[:0]
		for _, p := range k.replicas {
			bases = append(bases, p.base)
		}
	}
	fp, err := startFlood(attackers, FloodSpec{Bases: bases, Conns: pt.Concurrency, Shop: shop, Item: killFloodItem, Location: location,
		Token: k.apiToken, Pause: killFloodPause}, r.opts.KillFloodNice)
	if err != nil {
		return fail(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = fp.stop()
		}
	}()
	sleepCtx(ctx, killFloodSettle)
	open, places, waits := make([]float64, len(k.replicas)), make([]float64, len(k.replicas)), make([]float64, len(k.replicas))
	look := func(goroutines bool) {
		for i, p := range k.replicas {
			g, o, n, w := k.scrape(ctx, p)
			open[i], places[i], waits[i] = max(open[i], o), n, max(waits[i], w)
			if goroutines {
				kf.Goroutines = append(kf.Goroutines, g)
			}
		}
	}
	look(true)
	cpu0 := make([]time.Duration, len(k.replicas))
	for i, p := range k.replicas {
		cpu0[i] = proccpu.Of(p.cmd.Process.Pid)
	}
	acpu0 := proccpu.Of(fp.cmd.Process.Pid)
	pctx, stopProbe := context.WithCancel(ctx)
	probed := make(chan [2][]float64, 1)
	go func() { probed <- probeDB(pctx, r.srv.controlDB()) }()
	start := time.Now()
	for i := 0; i < 2*r.opts.KillFloodSwitches && ctx.Err() == nil; i++ {
		if !fp.alive() {
			break
		}
		c := k.change(ctx, i)
		kf.Each = append(kf.Each, c)
		if i%5 == 4 {
			look(false)
		}
		sleepCtx(ctx, killFloodGap)
	}
	look(false)
	filled := false
	for i := range k.replicas {
		kf.Places = append(kf.Places, "-")
		if places[i] > 0 {
			kf.Places[i] = fmt.Sprintf("%.0f/%.0f", open[i], places[i])
			full := open[i] >= places[i] || waits[i] > 0
			filled = filled || full && (i == 0 || r.opts.KillFloodTarget == KillFloodBoth)
		}
	}
	res.Seconds = time.Since(start).Seconds()
	stopProbe()
	pr := <-probed
	kf.DBRoundTrip, kf.DBCommit = distOf(pr[0]), distOf(pr[1])
	for i, p := range k.replicas {
		kf.ReplicaCores = append(kf.ReplicaCores, cores(cpu0[i], proccpu.Of(p.cmd.Process.Pid), res.Seconds))
	}
	kf.AttackerCores = cores(acpu0, proccpu.Of(fp.cmd.Process.Pid), res.Seconds)
	res.LoadAvg = loadAvg()
	st, ferr := fp.stop()
	stopped = true
	kf.Flood, kf.ShedRate = st, st.ShedRate()
	kf.summarise(&res)
	res.Interrupted = ctx.Err() != nil
	if ferr != nil {
		res.Error = ferr.Error()
	}
	if pt.Concurrency > 1 && kf.Flood.Statuses[http.StatusServiceUnavailable] == 0 && !filled && ferr == nil {
		res.Invariant = "the flood never filled the checkout listener: no 503, and its places were not all taken"
	}
	return []Result{res}
}

// probeDB times a no-op statement and a one-row update's commit on db
// every 20 ms until ctx ends, in ms.
func probeDB(ctx context.Context, db *sql.DB) [2][]float64 {
	var out [2][]float64
	_, _ = db.ExecContext(ctx, sqlProbeEnsure)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		for i, stmt := range []string{sqlNoop, sqlProbeTouch} {
			t0 := time.Now()
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				return out
			}
			out[i] = append(out[i], ms(time.Since(t0)))
		}
	}
}

// cores is the CPU used between two proccpu.Of readings, in cores.
func cores(before, after time.Duration, seconds float64) float64 {
	if before < 0 || after < 0 || seconds <= 0 {
		return -1
	}
	return (after - before).Seconds() / seconds
}

// summarise fills the distributions and the result's generic fields from
// the changes: OK counts the changes answered 200, the latency
// percentiles are the answers'.
func (kf *KillFloodStats) summarise(res *Result) {
	var answer, obey, fleet, self []float64
	byReplica := make([][]float64, kf.Replicas)
	res.Errors = map[string]int64{}
	res.ErrorSamples = map[string]string{}
	for _, c := range kf.Each {
		kf.Changes++
		answer = append(answer, c.Answer)
		if c.Status == http.StatusOK {
			res.OK++
			fleet = append(fleet, c.Fleet)
			if c.Self >= 0 {
				self = append(self, c.Self)
			}
		}
		if c.Error != "" {
			kind := "not_obeyed"
			if c.Status != http.StatusOK {
				kind = "status_" + strconv.Itoa(c.Status)
			}
			res.Errors[kind]++
			if _, ok := res.ErrorSamples[kind]; !ok {
				res.ErrorSamples[kind] = c.Error
			}
		}
		if c.Obey < 0 {
			kf.NotObeyed++
			continue
		}
		obey = append(obey, c.Obey)
		for i, v := range c.ObeyByReplica {
			if i < len(byReplica) {
				byReplica[i] = append(byReplica[i], v)
			}
		}
	}
	kf.Answer, kf.Obey, kf.Fleet, kf.Self = distOf(answer), distOf(obey), distOf(fleet), distOf(self)
	kf.ObeyByReplica = nil
	for _, vs := range byReplica {
		kf.ObeyByReplica = append(kf.ObeyByReplica, distOf(vs))
	}
	a := distOf(answer)
	res.P50ms, res.P99ms, res.MaxMs = a.P50, a.P99, a.Max
	if res.Seconds > 0 {
		res.OpsPerSec = float64(res.OK) / res.Seconds
	}
	if kf.NotObeyed > 0 && res.Invariant == "ok" {
		res.Invariant = fmt.Sprintf("%d of %d changes not obeyed by every replica within %s", kf.NotObeyed, kf.Changes, killFloodObeyLimit)
	}
}

// killFloodTargets judges every killflood result under a flood against
// acceptance c: obeyed by every replica within 100 ms p99, and the admin
// API answering within 100 ms p99. A point of one connection is the
// reference without a flood, not judged.
func (rep *Report) killFloodTargets(l int64, add func(t Target, ratio, bound float64, atLeast bool)) {
	for _, r := range rep.Results {
		kf := r.KillFlood
		if r.Scenario != ScenarioKillFlood || r.AddedRTTms != l || r.Error != "" || kf == nil || kf.Obey.N == 0 || r.Concurrency <= 1 {
			continue
		}
		where := fmt.Sprintf("%s %s c=%d (%s flooded)", ScenarioKillFlood, r.Variant, r.Concurrency, kf.Target)
		if kf.Admin == KillFloodAdminSpare {
			where = fmt.Sprintf("%s %s c=%d (%s flooded, admin API of the other)", ScenarioKillFlood, r.Variant, r.Concurrency, kf.Target)
		}
		add(Target{Name: "kill switch obeyed by every replica (write to the last heartbeat), p99 ms", Where: where,
			Detail: fmt.Sprintf("%d changes, p50 %.0f, max %.0f; not obeyed within 5 s: %d; shed %.0f%% of %d answers",
				kf.Changes, kf.Obey.P50, kf.Obey.Max, kf.NotObeyed, 100*kf.ShedRate, kf.Flood.Answered)},
			kf.Obey.P99, killFloodTargetMs, false)
		add(Target{Name: "admin API (kill switch) answer, p99 ms", Where: where,
			Detail: fmt.Sprintf("%d changes, p50 %.0f, max %.0f", kf.Changes, kf.Answer.P50, kf.Answer.Max)},
			kf.Answer.P99, killFloodTargetMs, false)
	}
}

// killFloodTable writes the killflood results: a row per point.
func (rep *Report) killFloodTable(b *strings.Builder) {
	b.WriteString("Times in ms, p50 / p99 / max over the point's changes (engage and release alternately, through the first replica's admin API). " +
		"Flooded: whose checkout listener the attackers held, and, when the changes went through the other replica's admin API (--killflood-admin spare), that. " +
		"Answer: the admin call as the operator saw it (it waits for the fleet). Obey: the flags write (rollout_flags.updated_at) to the last replica's heartbeat " +
		"with the new version (applied_at); per replica, the first (flooded, answering) first. Fleet: the answer's own fleet line. " +
		"Self: the answering replica's obeyed_after_ms. Flood: requests opened, answers, the share shed (503), cut without an answer. " +
		"DB rt / commit: a no-op statement and a one-row commit on the control database, timed by the bench itself every 20 ms meanwhile (p50 / p99 / max). " +
		"Goroutines: each replica's once the flood settled. Places: the most checkout connections each had open (read then, after every fifth change and at the end) / the most its listener keeps open; - without a cap.\n\n")
	b.WriteString("| variant | conns | flooded | changes | answer | obey | obey per replica | fleet | self | not obeyed | opened | answered | shed | cuts | db rt | db commit | goroutines | places | cores replicas/attackers | load | result |\n")
	b.WriteString("|---|--:|---|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|---|--:|---|\n")
	for _, r := range rep.Results {
		if r.Scenario != ScenarioKillFlood {
			continue
		}
		kf := r.KillFlood
		if kf == nil {
			fmt.Fprintf(b, "| %s | %d | failed: %s |\n", r.Variant, r.Concurrency, mdEscape(r.Error))
			continue
		}
		var per, gs, cs []string
		for _, d := range kf.ObeyByReplica {
			per = append(per, d.String())
		}
		for _, g := range kf.Goroutines {
			gs = append(gs, strconv.FormatFloat(g, 'f', 0, 64))
		}
		for _, c := range kf.ReplicaCores {
			cs = append(cs, strconv.FormatFloat(c, 'f', 2, 64))
		}
		flooded := kf.Target
		if kf.Admin == KillFloodAdminSpare {
			flooded += " (admin: the other)"
		}
		inv := r.Invariant
		switch {
		case r.Concurrency <= 1 && kf.NotObeyed == 0:
			inv = "reference, no flood"
		case inv != "ok":
			inv = "**" + mdEscape(inv) + "**"
		}
		if r.Error != "" {
			inv = "failed: " + mdEscape(r.Error) + "; " + inv
		}
		if r.Interrupted {
			inv += " (interrupted)"
		}
		fmt.Fprintf(b, "| %s | %d | %s | %d | %s | %s | %s | %s | %s | %d | %d | %d | %.0f%% | %d | %s | %s | %s | %s | %s/%.2f | %.1f | %s |\n",
			r.Variant, r.Concurrency, flooded, kf.Changes, kf.Answer, kf.Obey, strings.Join(per, "; "), kf.Fleet, kf.Self, kf.NotObeyed,
			kf.Flood.Opened, kf.Flood.Answered, 100*kf.ShedRate, kf.Flood.Cuts, kf.DBRoundTrip, kf.DBCommit,
			strings.Join(gs, ", "), strings.Join(kf.Places, ", "), strings.Join(cs, ", "), kf.AttackerCores, r.LoadAvg, inv)
	}
	b.WriteString("\n")
}

// KillFloodFirst and KillFloodBoth are Options.KillFloodTarget's values.
const (
	KillFloodFirst = "first"
	KillFloodBoth  = "both"
)

// KillFloodAdminFlooded and KillFloodAdminSpare are Options.KillFloodAdmin's
// values.
const (
	KillFloodAdminFlooded = "flooded"
	KillFloodAdminSpare   = "spare"
)

// errKillFloodLatency refuses an added latency: the replicas reach the
// servers directly.
var errKillFloodLatency = errors.New("the killflood scenario's replicas reach the servers directly: its only latency is 0")
