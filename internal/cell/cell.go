// Package cell opens a topology: for every pod its MySQL database, unit-pool
// store, Redis client, legacy Redis store, mirror (the relay of MySQL's
// change feed into Redis, and handoffs) and dual-write facade; one flag
// source every facade asks; one comparer on the control database. It is
// what `reservoir serve` and `reservoir demo` run on.
//
// A Cell owns everything it opens and closes it in the safe order: reapers
// and relays first, then the facades' shadow work (bounded), then the
// comparer (its last flush), then the flag source, then the connections.
// It never decides authority or compares outcomes itself: that stays with
// dualwrite, mirror, rollout and compare.
package cell

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/open-feature/go-sdk/openfeature"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/internal/reconcile"
	"github.com/seed31b0e981/reservoir/internal/tlsclient"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
	"github.com/seed31b0e981/reservoir/rollout/flagsource"
)

// Config configures Open. Open applies WithDefaults, then Validate.
type Config struct {
	// Topology is the deployment map. Required.
	Topology *topology.Config
	// Registerer receives every metric of the cell: the stores' (labelled
	// with their pod), the facades', the comparer's and the cell's own.
	// Default: a private registry (kept, not exported).
	Registerer prometheus.Registerer
	// Logger receives the cell's and its parts' logs. Default: slog.Default().
	Logger *slog.Logger
	// ShadowTimeout is each facade's shadow deadline (dualwrite.Config).
	// Default: the facade's (250ms).
	ShadowTimeout time.Duration
	// ShadowSlots bounds each facade's concurrent shadow calls
	// (dualwrite.Config). Default: the facade's (64).
	ShadowSlots int
	// MaxOpenConns caps each pod's MySQL connection pool. Default: 64.
	MaxOpenConns int
	// RedisPoolSize is each Redis client's connection pool size. Default:
	// go-redis's (10 per CPU).
	RedisPoolSize int
	// ReapInterval is how often the cell's reaper returns expired holds in
	// every pod's two stores. Negative: no reaper (another replica or a
	// test reaps). Default: 1s.
	ReapInterval time.Duration
	// Compare tunes the comparer; its DB, Registerer and Logger are set by
	// Open. Default: compare's defaults.
	Compare compare.Config
	// FlagPollInterval is the flag source's stat poll (see
	// flagsource.Config). Default: the source's (1s).
	FlagPollInterval time.Duration
	// MirrorPoll is how long each pod's relay waits when the change feed
	// is empty (mirror.Config.Poll). Default: the mirror's (20ms).
	MirrorPoll time.Duration
	// NoRelay starts no relay and no handoff sweeper: Redis follows MySQL
	// only through handoffs, and shops are handed off only by the calls
	// that find their fences behind the flags. For tests that show what
	// the relay and the sweeper protect. Default: false.
	NoRelay bool
	// Replica names this replica in the pods' handoff reports (who swept).
	// Default: the host name and process id.
	Replica string
	// HealthInterval is how often the cell pings every pod's MySQL and
	// Redis (and the control database), within the interval: a store that
	// does not answer opens its breaker at once, one that answers again
	// lets it probe, and Health reports the last round. Negative: no
	// health loop (breakers move on calls only). Default: 1s.
	HealthInterval time.Duration
	// BreakerFailures is how many consecutive failed calls open a store's
	// breaker (package breaker). Default: 5.
	BreakerFailures int
	// BreakerOpenFor is how long an open breaker refuses calls before it
	// lets one probe through. Default: 1s.
	BreakerOpenFor time.Duration
	// Provider is the OpenFeature provider the flags are evaluated
	// through when the topology says flags_source = "provider" (the
	// program running serve supplies it: package reservoirmain); the cell
	// owns it from then on and shuts it down at Close. Required with that
	// source, refused with any other: a provider that would be silently
	// ignored, or a topology promising one that is not there, is a
	// deployment mistake.
	Provider openfeature.FeatureProvider
	// Heartbeat reports this replica to the control database
	// (rollout_replicas) with the flags version it applied, so the
	// controller can tell when the fleet obeys a change. A serving
	// replica sets it; a CLI command does not. Default: false.
	Heartbeat bool
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxOpenConns == 0 {
		c.MaxOpenConns = 64
	}
	if c.ReapInterval == 0 {
		c.ReapInterval = time.Second
	}
	if c.HealthInterval == 0 {
		c.HealthInterval = time.Second
	}
	if c.BreakerFailures == 0 {
		c.BreakerFailures = 5
	}
	if c.BreakerOpenFor == 0 {
		c.BreakerOpenFor = time.Second
	}
	return c
}

// Validate reports a setting that cannot work, naming the field.
func (c Config) Validate() error {
	switch {
	case c.Topology == nil:
		return errors.New("cell: Config.Topology is required")
	case c.MaxOpenConns < 1:
		return fmt.Errorf("cell: Config.MaxOpenConns must be >= 1, got %d", c.MaxOpenConns)
	case c.RedisPoolSize < 0:
		return fmt.Errorf("cell: Config.RedisPoolSize must not be negative, got %d", c.RedisPoolSize)
	case c.ShadowTimeout < 0:
		return fmt.Errorf("cell: Config.ShadowTimeout must not be negative, got %s", c.ShadowTimeout)
	case c.BreakerFailures < 1:
		return fmt.Errorf("cell: Config.BreakerFailures must be >= 1, got %d", c.BreakerFailures)
	case c.BreakerOpenFor <= 0:
		return fmt.Errorf("cell: Config.BreakerOpenFor must be positive, got %s", c.BreakerOpenFor)
	}
	switch {
	case c.Topology.FlagsSource == topology.FlagsFromProvider && c.Provider == nil:
		return errors.New(`cell: the topology says flags_source = "provider" but this program supplies no OpenFeature provider: ` +
			`the shipped reservoir binary has none; run a program built with package reservoirmain and WithFlagsProvider, or set another flags_source`)
	case c.Topology.FlagsSource != topology.FlagsFromProvider && c.Provider != nil:
		return fmt.Errorf(`cell: this program supplies an OpenFeature provider (%s) but the topology says flags_source = %q: `+
			`set flags_source = "provider" to use it`, c.Provider.Metadata().Name, c.Topology.FlagsSource)
	}
	return c.Topology.Validate()
}

// Pod is one opened pod: its stores and the facade in front of them.
type Pod struct {
	// Name is the pod's name in the topology.
	Name string
	// DB is the pod's MySQL pool (ledger and unit pool).
	DB *sql.DB
	// MySQL is the unit-pool store and the ledger.
	MySQL *mysqlstore.Store
	// Redis is the legacy store.
	Redis *redisstore.Store
	// RedisClient is the pod's Redis connection, its own even when
	// another pod uses the same server: one pod's stuck calls cannot take
	// another's connections.
	RedisClient redis.UniversalClient
	// Breakers guard the pod's two stores (guard.go): the facade's calls
	// and the legacy claim's ledger calls go through them.
	Breakers Breakers
	// Mirror relays MySQL's change feed into Redis and hands shops off.
	Mirror *mirror.Mirror
	// Facade is what checkout calls go through.
	Facade *dualwrite.Facade
	// Limits are the input limits both stores of the pod accept: the
	// default limits with MaxQuantity lowered to the pool cap. Validate
	// with them before calling the facade and an invalid call never
	// reaches a store or the comparer.
	Limits reservation.Limits
}

// Cell is an opened topology. Its methods are safe for concurrent use.
type Cell struct {
	// Topology is the map the cell was opened from.
	Topology *topology.Config
	// Control is the control database: compare stats and diffs, rollout
	// state and audit.
	Control *sql.DB
	// Flags is the one flag source every facade asks.
	Flags *flagsource.Source
	// Comparer receives every facade's observations, and counts every
	// call each facade takes (its traffic, in every mode).
	Comparer *compare.Comparer
	// Reconciler compares each pod's two stores (reconcile.Reconciler,
	// the decider of each shop from its fences; the flags tell it which
	// shops are in redis mode, where MySQL is not written). It implements
	// rollout.Reconciler for the controller.
	Reconciler *reconcile.Reconciler

	cfg       Config
	log       *slog.Logger
	pods      []*Pod
	byName    map[string]*Pod
	clients   []redis.UniversalClient
	dbs       []*sql.DB
	reaper    *reaper
	heartbeat *rollout.Heartbeat
	relays    context.CancelFunc
	relayWG   sync.WaitGroup

	health        context.CancelFunc
	healthWG      sync.WaitGroup
	degradedGauge *prometheus.GaugeVec
	healthMu      sync.Mutex
	lastHealth    []Health
	lastHealthAt  time.Time

	closeOnce sync.Once
	closeErr  error
}

// Open connects to every database and Redis of the topology and builds the
// stores, facades, flag source and comparer. It does not migrate; it pings
// nothing (see Ping), so a server can start while a pod is down and report
// it in its readiness. On error everything opened so far is closed.
func Open(ctx context.Context, cfg Config) (_ *Cell, err error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Cell{Topology: cfg.Topology, cfg: cfg, log: cfg.Logger, byName: map[string]*Pod{}}
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = c.Close(cctx)
		}
	}()

	if c.Control, err = c.openDB("control database", cfg.Topology.ControlDSN, "control_tls_ca", cfg.Topology.ControlTLSCA); err != nil {
		return nil, err
	}
	fsc := flagsource.Config{Path: cfg.Topology.FlagsFile, Logger: cfg.Logger, PollInterval: cfg.FlagPollInterval}
	switch cfg.Topology.FlagsSource {
	case topology.FlagsFromDatabase:
		fsc.Path, fsc.DB = "", c.Control
	case topology.FlagsFromFlagd:
		fsc.Path, fsc.FlagdAddr = "", cfg.Topology.FlagdAddr
		fsc.FlagdTLS, fsc.FlagdCAFile, fsc.FlagdSelector = cfg.Topology.FlagdTLS, cfg.Topology.FlagdCAFile, cfg.Topology.FlagdSelector
	case topology.FlagsFromOFREP:
		fsc.Path = ""
		if fsc.Provider, err = flagsource.NewOFREPProvider(flagsource.OFREPConfig{
			URL: cfg.Topology.OFREPURL, Token: cfg.Topology.OFREPToken, CAFile: cfg.Topology.OFREPCAFile,
		}); err != nil {
			return nil, fmt.Errorf("cell: ofrep_ca_file: %w", err)
		}
	case topology.FlagsFromProvider:
		fsc.Path, fsc.Provider = "", cfg.Provider
	}
	if !c.writesFlags() {
		// The modes come from where reservoir does not write; its own kill
		// switch, in the control database, wins over them.
		fsc.Kills = c.Control
	}
	if c.Flags, err = flagsource.New(ctx, fsc); err != nil {
		return nil, fmt.Errorf("cell: %w", err)
	}
	if cfg.Heartbeat {
		c.heartbeat = rollout.StartHeartbeat(rollout.HeartbeatConfig{DB: c.Control, Source: c.Flags, Pods: cfg.Topology.PodNames(), Logger: cfg.Logger})
	}
	cc := cfg.Compare
	cc.DB, cc.Registerer, cc.Logger = c.Control, cfg.Registerer, cfg.Logger
	if c.Comparer, err = compare.New(cc); err != nil {
		return nil, fmt.Errorf("cell: %w", err)
	}
	timer, err := newStoreTimer(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("cell: register metrics: %w", err)
	}
	bm, err := newBreakerMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("cell: register metrics: %w", err)
	}
	c.degradedGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: DegradedMetric,
		Help: "1 while a pod is degraded: one of its stores failed the cell's last health check (each second) " +
			"or its circuit breaker refuses calls; its calls that need that store answer 503, other pods are untouched. By pod.",
	}, []string{"reservoir_pod"})
	if err := cfg.Registerer.Register(c.degradedGauge); err != nil {
		return nil, fmt.Errorf("cell: register metrics: %w", err)
	}
	for _, tp := range cfg.Topology.Pods {
		p, err := c.openPod(tp, timer, bm)
		if err != nil {
			return nil, err
		}
		c.pods = append(c.pods, p)
		c.byName[p.Name] = p
	}
	rp := make([]reconcile.Pod, len(c.pods))
	for i, p := range c.pods {
		rp[i] = reconcile.Pod{Name: p.Name, MySQL: p.MySQL, Redis: p.Redis, Mirror: p.Mirror}
	}
	c.Reconciler = reconcile.New(rp)
	c.Reconciler.Modes = c.Flags // a shop in redis mode: MySQL is not written, not compared
	if cfg.ReapInterval > 0 {
		c.reaper = startReaper(c, cfg.ReapInterval)
	}
	if cfg.HealthInterval > 0 {
		hctx, cancel := context.WithCancel(context.Background())
		c.health = cancel
		c.healthWG.Go(func() { c.healthLoop(hctx, cfg.HealthInterval) })
	}
	if !cfg.NoRelay {
		rctx, cancel := context.WithCancel(context.Background())
		c.relays = cancel
		for _, p := range c.pods {
			c.relayWG.Go(func() { _ = p.Mirror.Run(rctx) })
			c.relayWG.Go(func() {
				err := p.Mirror.RunSweeper(rctx, mirror.SweeperConfig{Wanted: p.Facade.Wanted, Version: c.Flags.AppliedVersion, Replica: cfg.Replica})
				if err != nil && rctx.Err() == nil {
					c.log.Error("cell: the handoff sweeper stopped", "pod", p.Name, "err", err)
				}
			})
		}
	}
	return c, nil
}

// openDB opens what's MySQL pool on dsn; with a CA file (the topology's
// caField), over TLS verified against it. Errors name the database and the
// field, never the DSN: it may hold a password.
func (c *Cell) openDB(what, dsn, caField, ca string) (*sql.DB, error) {
	if ca != "" {
		var err error
		if dsn, err = tlsclient.MySQLDSN(dsn, ca); err != nil {
			return nil, fmt.Errorf("cell: %s: %s: %w", what, caField, err)
		}
	}
	db, err := mysqlstore.Open(dsn)
	if err != nil {
		return nil, fmt.Errorf("cell: %s: %w", what, err)
	}
	db.SetMaxOpenConns(c.cfg.MaxOpenConns)
	c.dbs = append(c.dbs, db)
	return db, nil
}

// redisOptions are the options of tp's Redis client: its address or
// cluster seeds, its credentials and TLS. Errors name the topology field.
func (c *Cell) redisOptions(tp topology.Pod) (*redis.UniversalOptions, error) {
	opts := &redis.UniversalOptions{PoolSize: c.cfg.RedisPoolSize, Username: tp.RedisUsername, Password: tp.RedisPassword}
	if tp.RedisAddr != "" {
		opts.Addrs = []string{tp.RedisAddr}
	} else {
		opts.Addrs, opts.IsClusterMode = tp.RedisCluster, true
	}
	if tp.RedisTLS {
		// One configuration for every node of a cluster: each connection
		// verifies the node it dials (by its host, unless a name is set).
		t, err := tlsclient.Config(tp.RedisTLSCA, tp.RedisTLSServerName)
		if err != nil {
			return nil, fmt.Errorf("cell: pod %s: redis_tls_ca: %w", tp.Name, err)
		}
		opts.TLSConfig = t
	}
	return opts, nil
}

func (c *Cell) openPod(tp topology.Pod, timer *storeTimer, bm *breakerMetrics) (*Pod, error) {
	db, err := c.openDB("pod "+tp.Name+" database", tp.MySQLDSN, "mysql_tls_ca", tp.MySQLTLSCA)
	if err != nil {
		return nil, err
	}
	// The stores' metric names carry no pod: the pod becomes the label
	// reservoir_pod, so every pod's stores share one registry. Not "pod":
	// the Prometheus Operator's target label, which would rename it
	// exported_pod (docs/runbooks.md, "The label reservoir_pod").
	reg := prometheus.WrapRegistererWith(prometheus.Labels{"reservoir_pod": tp.Name}, c.cfg.Registerer)
	limits := reservation.Limits{MaxQuantity: min(reservation.DefaultLimits.MaxQuantity, tp.PoolCap)}.WithDefaults()
	my, err := mysqlstore.New(mysqlstore.Config{DB: db, PoolCap: tp.PoolCap, Limits: limits, Registerer: reg})
	if err != nil {
		return nil, fmt.Errorf("cell: pod %s: %w", tp.Name, err)
	}
	opts, err := c.redisOptions(tp)
	if err != nil {
		return nil, err
	}
	client := redisstore.NewClient(opts)
	c.clients = append(c.clients, client)
	bs, err := c.newBreakers(tp.Name, bm)
	if err != nil {
		return nil, fmt.Errorf("cell: pod %s: %w", tp.Name, err)
	}
	rd, err := redisstore.New(redisstore.Config{
		Client: client, Prefix: tp.RedisPrefix, Ledger: &guardedLedger{l: my, b: bs.MySQL}, Source: &guardedSource{s: my, b: bs.MySQL}, Limits: limits, Registerer: reg,
	})
	if err != nil {
		return nil, fmt.Errorf("cell: pod %s: %w", tp.Name, err)
	}
	mr, err := mirror.New(mirror.Config{Pod: tp.Name, MySQL: my, Redis: rd, Registerer: c.cfg.Registerer, Logger: c.log, Poll: c.cfg.MirrorPoll,
		Evaluated: compare.ObserveRelayed(tp.Name, c.Comparer)})
	if err != nil {
		return nil, fmt.Errorf("cell: pod %s: %w", tp.Name, err)
	}
	f, err := dualwrite.New(dualwrite.Config{
		Pod:           tp.Name,
		Redis:         &guardedStore{Store: timer.wrap(tp.Name, rd), b: bs.Redis},
		MySQL:         &guardedStore{Store: timer.wrap(tp.Name, my), b: bs.MySQL},
		Modes:         c.Flags,
		Mirror:        mr,
		Observer:      c.Comparer,
		Traffic:       c.Comparer,
		ShadowTimeout: c.cfg.ShadowTimeout,
		ShadowSlots:   c.cfg.ShadowSlots,
		Registerer:    c.cfg.Registerer, // the facade labels its metrics with the pod itself
		Logger:        c.log,
	})
	if err != nil {
		return nil, fmt.Errorf("cell: pod %s: %w", tp.Name, err)
	}
	return &Pod{Name: tp.Name, DB: db, MySQL: my, Redis: rd, RedisClient: client, Breakers: bs, Mirror: mr, Facade: f, Limits: limits}, nil
}

// Pods returns the pods in topology order.
func (c *Cell) Pods() []*Pod { return slices.Clone(c.pods) }

// Pod returns the named pod, or nil.
func (c *Cell) Pod(name string) *Pod { return c.byName[name] }

// PodOf returns the pod that serves shop (topology.Config.PodOf).
func (c *Cell) PodOf(shop int64) (*Pod, error) {
	tp, err := c.Topology.PodOf(shop)
	if err != nil {
		return nil, err
	}
	return c.byName[tp.Name], nil
}

// Health is the reachability of one pod's stores (or of the control
// database, as pod "control").
type Health struct {
	// Pod names the pod ("control" for the control database).
	Pod string
	// MySQLErr and RedisErr are the pings' errors, nil when the store
	// answered (RedisErr is always nil for the control database). They
	// are the drivers' own errors, so a caller can classify them by type;
	// their text may name users and hosts (never a password).
	MySQLErr, RedisErr error
	// OK is true when every store answered.
	OK bool
}

// Ping checks, concurrently and within ctx, that the control database and
// every pod's MySQL and Redis answer. It is readiness, not the flag SDK's
// state: a replica whose flags file is broken still answers (Redis-safe).
func (c *Cell) Ping(ctx context.Context) []Health {
	out := make([]Health, len(c.pods)+1)
	var wg sync.WaitGroup
	wg.Go(func() {
		err := c.Control.PingContext(ctx)
		out[0] = Health{Pod: "control", MySQLErr: err, OK: err == nil}
	})
	for i, p := range c.pods {
		wg.Go(func() {
			var myErr, rdErr error
			var inner sync.WaitGroup
			inner.Go(func() { myErr = p.DB.PingContext(ctx) })
			inner.Go(func() { rdErr = pingRedis(ctx, p.RedisClient) })
			inner.Wait()
			out[i+1] = Health{Pod: p.Name, MySQLErr: myErr, RedisErr: rdErr, OK: myErr == nil && rdErr == nil}
		})
	}
	wg.Wait()
	return out
}

// Health returns the health loop's last round (Ping's answer, one Health
// per store, the control database first) and when it ended; nil before
// the first round ends, or without a health loop.
func (c *Cell) Health() ([]Health, time.Time) {
	c.healthMu.Lock()
	defer c.healthMu.Unlock()
	return slices.Clone(c.lastHealth), c.lastHealthAt
}

func pingRedis(ctx context.Context, c redis.UniversalClient) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() })
	}
	return c.Ping(ctx).Err()
}

// DriftReport is one reconciliation of a pod, for the admin API and the
// dashboard.
type DriftReport struct {
	// Clean is true when nothing but notes was found.
	Clean bool
	// Summary is the report in one line.
	Summary string
	// Report is the full report, findings included.
	Report reconcile.Report
}

// Reconcile compares a pod's stores now, each shop against its current
// authority, and repairs nothing. Reservations in flight while it runs can
// show up as findings that the next run no longer has.
func (c *Cell) Reconcile(ctx context.Context, pod string) (DriftReport, error) {
	return c.reconcile(ctx, pod, reconcile.Options{})
}

// Repair reconciles a pod and repairs what it finds on the side that does
// not decide each shop, as `reservoir reconcile --pod POD --repair` does:
// Clean then says that no drift is left.
func (c *Cell) Repair(ctx context.Context, pod string) (DriftReport, error) {
	return c.reconcile(ctx, pod, reconcile.Options{Repair: true})
}

func (c *Cell) reconcile(ctx context.Context, pod string, o reconcile.Options) (DriftReport, error) {
	rep, err := c.Reconciler.Run(ctx, pod, o)
	if err != nil {
		return DriftReport{}, err
	}
	return DriftReport{Clean: rep.Left == 0, Summary: rep.Summary(), Report: rep}, nil
}

// Close stops the reaper and the relays, waits (within ctx) for every
// facade's shadow calls, closes the comparer (its last flush of stats and diffs, within
// ctx), the flag source and every connection. It returns every problem
// met, joined; calling it again returns the first result.
func (c *Cell) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		var errs []error
		if c.heartbeat != nil {
			c.heartbeat.Stop()
		}
		if c.health != nil {
			c.health()
			c.healthWG.Wait()
		}
		if c.reaper != nil {
			c.reaper.stop()
		}
		if c.relays != nil {
			c.relays()
			c.relayWG.Wait()
		}
		for _, p := range c.pods {
			if p.Mirror != nil {
				if err := p.Mirror.Close(ctx); err != nil {
					errs = append(errs, err)
				}
			}
		}
		for _, p := range c.pods {
			if err := p.Facade.Close(ctx); err != nil {
				errs = append(errs, fmt.Errorf("pod %s: %w", p.Name, err))
			}
		}
		if c.Comparer != nil {
			if err := c.Comparer.Close(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		if c.Flags != nil {
			if err := c.Flags.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		for _, cl := range c.clients {
			if err := cl.Close(); err != nil {
				errs = append(errs, fmt.Errorf("redis: %w", err))
			}
		}
		for _, db := range c.dbs {
			if err := db.Close(); err != nil {
				errs = append(errs, fmt.Errorf("mysql: %w", err))
			}
		}
		if len(errs) > 0 {
			c.closeErr = fmt.Errorf("cell: close: %w", errors.Join(errs...))
		}
	})
	return c.closeErr
}

// FlagStore is where this cell's flags are written: the flags file, or the
// control database's document, as the topology's flags_source says. With
// a source reservoir does not write (a flagd daemon, an OFREP service, a
// provider the program supplies), it is reservoir's
// own kill switch document in the control database (flagdoc.KillTable),
// which every replica's flag source follows beside the daemon and which
// wins over it; a change to a mode is refused, naming the daemon.
func (c *Cell) FlagStore() flagdoc.FlagStore {
	switch c.Topology.FlagsSource {
	case topology.FlagsFromDatabase:
		return flagdoc.FlagsTable{DB: c.Control}
	case topology.FlagsFromFile:
		return flagdoc.FlagsFile{Path: c.Topology.FlagsFile}
	}
	return flagdoc.KillTable{DB: c.Control, Modes: c.modesFrom()}
}

// Modes is what the controller judges a kill switch change by when the
// modes come from a source reservoir does not write
// (rollout.ControllerConfig.Modes): the flag source's own decisions,
// without the kill switch document. nil when reservoir writes the flags
// (the document has the modes).
func (c *Cell) Modes() authority.ModeSource {
	if c.writesFlags() {
		return nil
	}
	return c.Flags.WithoutKills()
}

// writesFlags says whether reservoir writes the flags document the modes
// come from (a flags file, the control database), which then carries the
// kill switch too.
func (c *Cell) writesFlags() bool {
	return c.Topology.FlagsSource == topology.FlagsFromFile || c.Topology.FlagsSource == topology.FlagsFromDatabase
}

// ModesFrom names what serves the modes when reservoir does not write
// them ("the flagd daemon at flagd:8015"), and "" when it does.
func (c *Cell) ModesFrom() string {
	if c.writesFlags() {
		return ""
	}
	return c.modesFrom()
}

// modesFrom names what serves the modes, for messages.
func (c *Cell) modesFrom() string {
	switch c.Topology.FlagsSource {
	case topology.FlagsFromFlagd:
		return "the flagd daemon at " + c.Topology.FlagdAddr
	case topology.FlagsFromOFREP:
		return "the OFREP service at " + c.Topology.OFREPURL
	case topology.FlagsFromProvider:
		if c.cfg.Provider != nil {
			return "the OpenFeature provider " + c.cfg.Provider.Metadata().Name
		}
	}
	return "the " + c.Topology.FlagsSource + " flag source"
}

// Replica is this replica's heartbeat id ("" without Config.Heartbeat).
func (c *Cell) Replica() string {
	if c.heartbeat == nil {
		return ""
	}
	return c.heartbeat.ID()
}

// Handoffs reports a pod's handoffs (rollout.HandoffReader): how far the
// handoffs the newest flags version asked for have come, as the pod's
// sweeper last wrote it; ok is false before any sweep.
func (c *Cell) Handoffs(ctx context.Context, pod string) (mirror.Progress, bool, error) {
	p := c.byName[pod]
	if p == nil {
		return mirror.Progress{}, false, fmt.Errorf("cell: no pod %q", pod)
	}
	return p.Mirror.Progress(ctx)
}

// Lag reports a pod's relay lag (rollout.LagReader): the changes MySQL
// decided that Redis has not applied yet, and the age of the oldest.
func (c *Cell) Lag(ctx context.Context, pod string) (int64, time.Duration, error) {
	p := c.byName[pod]
	if p == nil {
		return 0, 0, fmt.Errorf("cell: no pod %q", pod)
	}
	l, err := p.Mirror.Lag(ctx)
	return l.Changes, l.Oldest, err
}
