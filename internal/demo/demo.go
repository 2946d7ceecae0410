// Package demo is `reservoir demo`: the one-command tour. It brings up
// three pods on the throwaway MariaDB and Redis that scripts/services runs
// (three databases and three Redis key prefixes), migrates them, writes a
// topology, a flags file and a rollout plan, seeds shops and stock, serves
// the API and the dashboard in process, runs a traffic generator (many
// items, a few hot ones, flash sales that drain stock, reserve then claim
// or release), walks the rollout through the controller (shadow on the
// lowest-traffic pod, then mysql on it), prints progress, and on Ctrl-C
// (or after a duration) stops everything it started and drops what it
// created. The database and Redis servers stay up for the next run.
//
// It owns orchestration only: the stores, facades and comparer come from
// package cell, the HTTP layer from package server, the rollout from
// package rollout; the traffic goes through the public HTTP API like a
// checkout service's would.
package demo

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/rollout"
)

// Config configures Run. Run applies WithDefaults, then Validate.
type Config struct {
	// Out receives the progress, for a person. Required.
	Out io.Writer
	// Addr is where the API and the dashboard listen. When it is taken,
	// the demo listens on a free port instead and says so. Default:
	// 127.0.0.1:8088.
	Addr string
	// Duration stops the demo after that long; 0 runs until ctx ends
	// (Ctrl-C).
	Duration time.Duration
	// Name starts every database (<Name>_control, <Name>_pod_a, ...) and
	// Redis key prefix (<Name>:pod-a:, ...) the demo creates; whatever
	// exists under it is dropped first. Default: reservoir_demo_ and six
	// random hex digits, so that two people running the demo on one
	// MariaDB and one Redis never drop each other's.
	Name string
	// Dir holds the topology, flags file, plan and server log. Default: a
	// new temporary directory, removed at the end unless Keep.
	Dir string
	// Keep leaves the databases, keys and Dir in place at the end, and
	// prints the command that removes them (CleanCommand).
	Keep bool
	// Program is how the printed commands name the reservoir binary
	// (`<Program> demo clean ...`). Default: reservoir.
	Program string
	// SkipIncident leaves the scripted incident out of the tour (see
	// incident.go): pod-a then stays in mysql once the walk got there.
	SkipIncident bool
	// IncidentAfter is how long MySQL decides pod-a before the incident's
	// fault is injected. Default: 15s.
	IncidentAfter time.Duration
	// IncidentHold is how long the kill switch keeps Redis deciding pod-a,
	// with the fault still in MySQL, before the demo repairs MySQL and
	// releases the switch: the time to look at the evidence. Default: 30s.
	IncidentHold time.Duration
	// MySQLDSN is the MariaDB/MySQL server's DSN without a database, e.g.
	// root@tcp(127.0.0.1:33306)/. RedisAddr is the Redis server. Default:
	// $RESERVOIR_MYSQL_DSN and $RESERVOIR_REDIS_ADDR, else what
	// `Services start mysql redis` prints (starting them if needed).
	MySQLDSN, RedisAddr string
	// Services is the path of scripts/services. Default: scripts/services.
	Services string
	// Rate is the traffic's target of HTTP requests per second. Default: 150.
	Rate int
	// Workers is how many concurrent callers make the traffic. Default: 12.
	Workers int
	// GateDuration and MinObservations are the demo plan's gates for each
	// stage. Defaults: 30s and 200.
	GateDuration time.Duration
	// MinObservations: see GateDuration.
	MinObservations int64
	// FlashEvery is how often a flash sale starts (the first after a third
	// of it). Default: 90s.
	FlashEvery time.Duration
	// ShadowTimeout is each facade's shadow deadline. Default: 1s, four
	// times production's default: a laptop that also runs a browser and a
	// build has pauses a production host has not, and a demo whose gates
	// trip on them teaches nothing.
	ShadowTimeout time.Duration
	// ProgressEvery is how often a progress line is printed. Default: 5s.
	ProgressEvery time.Duration
	// AdminToken is the admin API's token. Default: a random one (the demo
	// prints it: it is a throwaway server on loopback).
	AdminToken string
	// Logger receives the server's log. Default: warnings and errors, as
	// text, to server.log in Dir.
	Logger *slog.Logger
	// Ready, when set, is called once the dashboard is up.
	Ready func(Info)
}

// Info is what a running demo tells.
type Info struct {
	// URL is the API's base URL; Dashboard opens the dashboard with the
	// token in the URL fragment.
	URL, Dashboard string
	// Token is the admin token.
	Token string
	// ClientToken is the demo's checkout API client token (roles checkout
	// and inventory).
	ClientToken string
	// Dir holds the demo's files.
	Dir string
	// Topology is the topology file.
	Topology string
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,40}$`)

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8088"
	}
	if c.Name == "" {
		var b [3]byte
		_, _ = rand.Read(b[:])
		c.Name = "reservoir_demo_" + hex.EncodeToString(b[:])
	}
	if c.Program == "" {
		c.Program = "reservoir"
	}
	if c.IncidentAfter == 0 {
		c.IncidentAfter = 15 * time.Second
	}
	if c.IncidentHold == 0 {
		c.IncidentHold = 30 * time.Second
	}
	if c.Services == "" {
		c.Services = filepath.Join("scripts", "services")
	}
	if c.Rate == 0 {
		c.Rate = 150
	}
	if c.Workers == 0 {
		c.Workers = 12
	}
	if c.GateDuration == 0 {
		c.GateDuration = 30 * time.Second
	}
	if c.MinObservations == 0 {
		c.MinObservations = 200
	}
	if c.FlashEvery == 0 {
		c.FlashEvery = 90 * time.Second
	}
	if c.ShadowTimeout == 0 {
		c.ShadowTimeout = time.Second
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = 5 * time.Second
	}
	if c.AdminToken == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		c.AdminToken = hex.EncodeToString(b[:])
	}
	return c
}

// Validate reports a setting that cannot work, naming it.
func (c Config) Validate() error {
	switch {
	case c.Out == nil:
		return errors.New("demo: Config.Out is required")
	case !nameRE.MatchString(c.Name):
		return fmt.Errorf("demo: name %q must match %s (it names databases)", c.Name, nameRE)
	case c.Duration < 0:
		return fmt.Errorf("demo: duration must not be negative, got %s", c.Duration)
	case c.Rate < 1 || c.Rate > 5000:
		return fmt.Errorf("demo: rate must be between 1 and 5000 requests per second, got %d", c.Rate)
	case c.Workers < 1 || c.Workers > 256:
		return fmt.Errorf("demo: workers must be between 1 and 256, got %d", c.Workers)
	case c.GateDuration < time.Second:
		return fmt.Errorf("demo: gate duration must be at least 1s, got %s", c.GateDuration)
	case c.MinObservations < 1:
		return fmt.Errorf("demo: min observations must be at least 1, got %d", c.MinObservations)
	case c.IncidentAfter < 0 || c.IncidentHold < 0:
		return fmt.Errorf("demo: the incident's times must not be negative, got after %s, hold %s", c.IncidentAfter, c.IncidentHold)
	case len(c.AdminToken) < 16:
		return errors.New("demo: the admin token must be at least 16 bytes")
	}
	return nil
}

// podSpec is one demo pod: its shops and its share of the traffic.
type podSpec struct {
	name   string
	shops  []int64
	weight int
}

// pods are the demo's cells, lowest traffic first.
var pods = []podSpec{
	{"pod-a", []int64{1001, 1002}, 1},
	{"pod-b", []int64{2001, 2002, 2003, 2004}, 3},
	{"pod-c", []int64{3001, 3002, 3003, 3004, 3005, 3006}, 6},
}

// walkTo is the last stage the demo applies by itself (mysql on pod-a):
// the rest is the operator's to try.
const walkTo = 1

// printer serialises progress lines. The first write that fails (the
// reader of a pipe is gone: `reservoir demo | tee log` after Ctrl-C, or
// `| head`) calls broken, which stops the demo; nothing more is written,
// and the cleanup goes on without an audience.
type printer struct {
	mu     sync.Mutex
	out    io.Writer
	broken func(error)
	failed bool
}

func (p *printer) say(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed {
		return
	}
	if _, err := fmt.Fprintf(p.out, format+"\n", args...); err != nil {
		p.failed = true
		if p.broken != nil {
			p.broken(err)
		}
	}
}

// errOutputGone is the cause of a stop whose output broke.
var errOutputGone = errors.New("demo: the output is gone")

// Run runs the demo until ctx ends or Duration passes, then stops and
// cleans up. It returns nil after a clean stop.
func Run(ctx context.Context, cfg Config) (err error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	// A signal cancels ctx; so does an output that breaks. Either way the
	// deferred steps below stop what runs and drop what was created.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	p := &printer{out: cfg.Out, broken: func(err error) { cancel(fmt.Errorf("%w: %w", errOutputGone, err)) }}
	started := time.Now()
	p.say("reservoir demo %s: three pods, traffic, a shadow rollout, an incident and the kill switch (Ctrl-C stops it)", cfg.Name)

	env, err := newEnvironment(ctx, cfg, p)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := env.cleanup(err != nil); cerr != nil {
			p.say("cleanup: %v", cerr)
			err = errors.Join(err, cerr)
		}
	}()
	if err := env.create(ctx); err != nil {
		return err
	}

	logger := cfg.Logger
	if logger == nil {
		f, err := os.Create(filepath.Join(env.dir, "server.log"))
		if err != nil {
			return err
		}
		defer f.Close()
		logger = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	reg := server.NewRegistry()
	c, err := cell.Open(ctx, cell.Config{
		Topology: env.topo, Registerer: reg, Logger: logger, FlagPollInterval: 200 * time.Millisecond, ShadowTimeout: cfg.ShadowTimeout,
		// Five-second windows: a stage's gates count from the first whole
		// window after it was applied, so the walk does not wait for the
		// next minute at each stage (a CLI reading these stats counts the
		// same windows: rollout.StatsReader).
		Compare: compare.Config{FlushInterval: time.Second, Window: 5 * time.Second},
		// As serve does: the dashboard lists the replica, and every flip
		// reports "obeyed by 1/1 replicas".
		Heartbeat: true,
	})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if cerr := c.Close(cctx); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	p.say("  seeding %d shops x %d items x %d locations of stock ...", env.shopCount(), items, len(locations))
	if err := seed(ctx, c); err != nil {
		return err
	}
	plan, err := rollout.LoadPlan(env.topo.PlanFile)
	if err != nil {
		return err
	}
	ctl, err := rollout.NewController(rollout.ControllerConfig{
		DB: c.Control, Flags: c.FlagStore(), Plan: plan, Pods: env.topo.PodNames(), Stats: c.Comparer, Reconciler: c.Reconciler, Lag: c, Handoffs: c, Stores: c,
	})
	if err != nil {
		return err
	}
	// The demo's own checkout client, with both roles: its token is
	// printed below for trying the API by hand.
	clientToken, entry, err := server.NewClientCredential("demo", []string{server.RoleCheckout, server.RoleInventory}, nil)
	if err != nil {
		return err
	}
	clients, err := server.ParseClients([]byte(entry))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(env.dir, "clients.toml"), []byte(entry), 0o600); err != nil {
		return err
	}
	srv, err := server.New(server.Config{
		Cell: c, Controller: ctl, Clients: clients, AdminToken: cfg.AdminToken, Registry: reg, Logger: logger,
		Reconciler: server.ReportFunc(c.Reconcile),
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		p.say("  %s is taken (%v); using a free port", cfg.Addr, err)
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
	}
	serveCtx, stopServe := context.WithCancel(context.Background())
	served := make(chan error, 1)
	// One listener for the tour; `reservoir serve` keeps the admin routes
	// on a listener of their own.
	go func() { served <- srv.Serve(serveCtx, ln, nil) }()
	defer func() {
		stopServe()
		if serr := <-served; serr != nil {
			err = errors.Join(err, serr)
		}
	}()

	base := "http://" + ln.Addr().String()
	info := Info{URL: base, Dashboard: base + "/dashboard#token=" + cfg.AdminToken, Token: cfg.AdminToken, ClientToken: clientToken, Dir: env.dir,
		Topology: filepath.Join(env.dir, "topology.toml")}
	if err := waitReady(ctx, base); err != nil {
		return err
	}
	if _, err := ctl.Advance(ctx, rollout.AdvanceOptions{Actor: "demo", Reason: "demo: start with shadow on the lowest-traffic pod"}); err != nil {
		return err
	}
	p.say("  rollout stage 0 applied: %q (Redis answers; MySQL is written and compared)", plan.Stages[0].Name)
	printWelcome(p, info, cfg)
	if cfg.Ready != nil {
		cfg.Ready(info)
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(runCtx, cfg.Duration)
		defer cancel()
	}
	gen := newTraffic(base, clientToken, cfg, p)
	var wg sync.WaitGroup
	wg.Go(func() { gen.run(runCtx) })
	w := &walker{ctl: ctl, c: c, p: p, plan: plan, since: started, series: srv.Series, program: cfg.Program}
	if !cfg.SkipIncident {
		w.inc = &incident{cfg: cfg, c: c, ctl: ctl, srv: srv, p: p, podDSN: env.dsnFor(env.dbName(incidentPod)), leakedAtFirst: -1}
	}
	w.loop(runCtx, gen, cfg.ProgressEvery)
	wg.Wait()

	reason := "the duration passed"
	switch {
	case errors.Is(context.Cause(ctx), errOutputGone):
		reason = "the output is gone"
	case ctx.Err() != nil:
		reason = "interrupted"
	}
	p.say("stopping (%s) after %s: %s", reason, time.Since(started).Round(time.Second), gen.totals())
	p.say("  stopping the server (requests in flight finish), draining shadow writes, flushing the comparer ...")
	return nil
}

// waitReady polls /readyz until every store answers.
func waitReady(ctx context.Context, base string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/readyz", nil)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", res.Status, bytes.TrimSpace(body))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("demo: the server never became ready: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func printWelcome(p *printer, info Info, cfg Config) {
	host := strings.TrimPrefix(info.URL, "http://")
	p.say("")
	p.say("  dashboard:   %s", info.Dashboard)
	p.say("  API:         %s   (docs/api.md)", info.URL)
	p.say("  admin token: %s", info.Token)
	p.say("  API token:   %s   (client \"demo\": checkout and inventory)", info.ClientToken)
	p.say("  files:       %s (topology.toml, flags.json, plan.toml, clients.toml, server.log)", info.Dir)
	p.say("")
	p.say("  What to try:")
	p.say("    - watch pod-a go from shadow to mysql once its gates pass (%s, %d observations)", cfg.GateDuration, cfg.MinObservations)
	if !cfg.SkipIncident {
		p.say("    - %s after MySQL takes pod-a, an incident: a fault in pod-a's MySQL makes it disagree with Redis; the comparer counts the "+
			"mismatches, the gates break, the automatic controller engages the kill switch; %s later the demo repairs MySQL and releases the switch "+
			"(--incident=false leaves it out)", cfg.IncidentAfter, cfg.IncidentHold)
	}
	p.say("    - press \"Kill switch...\" on pod-a in the dashboard: Redis decides again within milliseconds, after the relay lag shown next to it is drained")
	p.say("    - or from a shell:")
	p.say("        export TOKEN=%s", info.Token)
	p.say(`        curl -s -X POST -H "Authorization: Bearer $TOKEN" -d '{"scope":"pod:pod-a","reason":"trying the demo"}' http://%s/admin/killswitch`, host)
	p.say("        export API_TOKEN=%s", info.ClientToken)
	p.say(`        curl -s -X POST -H "Authorization: Bearer $API_TOKEN" -H 'Content-Type: application/json' -d '{"token":"my-cart","lines":[{"item":5,"quantity":1,"locations":[1,2]}]}' http://%s/v1/shops/1001/reservations`, host)
	p.say(`        %s rollout --topology %s status`, cfg.Program, info.Topology)
	p.say("")
}
