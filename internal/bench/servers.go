package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/seed31b0e981/reservoir/internal/proccpu"
	"github.com/seed31b0e981/reservoir/migrations"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
)

// servers is what a run holds on the MySQL and Redis servers: its own
// database and key prefix, direct connections for setup, counters and
// checks, and one network path per added latency.
type servers struct {
	opts Options

	runID  string
	dbName string
	// admin is the server without a database: counters, settings, create
	// and drop. direct is the run's database, without the added latency.
	admin, direct *sql.DB
	// controlAdmin and control are the killflood scenario's control
	// server and its database controlName when it has one of its own
	// (Options.KillFloodControlDSN); nil otherwise: direct is the
	// control database too (controlDB).
	controlAdmin, control *sql.DB
	controlName           string
	controlAddr           string // host:port, for the report
	// prefix starts every Redis key of the run; redisDirect cleans it up.
	prefix      string
	redisDirect *redis.Client

	mysqlPid, redisPid int
	// split says how the run is pinned to CPUs (Options.Split), or "".
	split string
	// fsyncVar is the status variable counting log fsyncs on this server.
	fsyncVar string
	// lockRequests is true when the lock_rec_lock_requests monitor counts.
	lockRequests bool

	proxyServer *toxiproxy.ApiServer
	proxies     []*toxiproxy.Proxy
	paths       map[time.Duration]*path

	// undo puts back what the run changed on the servers, last first.
	undo []func(ctx context.Context) error
}

// path is the way from the load generator to both servers at one added
// latency, with counters of the requests sent (a MySQL client writes once
// per command, go-redis once per command or pipeline: each write is a
// round trip) and of the time spent waiting for their answers.
type path struct {
	latency    time.Duration
	db         *sql.DB
	redis      *redis.Client
	mysqlConns connCounters
	redisConns connCounters
	// Measured on an idle path: the round trip of a no-op statement and of
	// a PING, and a commit of a one-row change.
	mysqlRTT, redisRTT, commit time.Duration
}

// shadowConns is room for connections beyond one per caller: the facade's
// shadow slots (dualwrite's default 64) and the comparer's writer.
const shadowConns = 64 + 16

// maxConns bounds each path's Redis connections (and MySQL's, until a
// point sets its own bound): the largest concurrency plus shadowConns.
const maxConns = 1024 + shadowConns

func newRunID() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// openServers creates the run's database and prefix and the paths. On error
// it has already cleaned up what it created.
func openServers(ctx context.Context, opts Options, latencies []time.Duration) (_ *servers, err error) {
	s := &servers{opts: opts, runID: newRunID(), paths: map[time.Duration]*path{}}
	s.dbName = "rsv_bench_" + s.runID
	s.prefix = "rsvbench:" + s.runID + ":"
	defer func() {
		if err != nil {
			s.close(context.WithoutCancel(ctx))
		}
	}()
	cfg, err := mysql.ParseDSN(opts.MySQLDSN)
	if err != nil {
		return nil, fmt.Errorf("bench: parse MySQL DSN: %w", err)
	}
	if cfg.DBName != "" {
		return nil, fmt.Errorf("bench: the MySQL DSN names database %q: give the server only; the run creates its own database", cfg.DBName)
	}
	if s.admin, err = mysqlstore.Open(opts.MySQLDSN); err != nil {
		return nil, err
	}
	s.admin.SetMaxOpenConns(4)
	if err := s.admin.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("bench: connect to MySQL: %w", err)
	}
	s.redisDirect = redis.NewClient(&redis.Options{Addr: opts.RedisAddr, MaxRetries: -1})
	if err := s.redisDirect.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("bench: connect to Redis at %s: %w", opts.RedisAddr, err)
	}
	if _, err := s.admin.ExecContext(ctx, "CREATE DATABASE "+s.dbName); err != nil { //sqlcheck:ok a database name cannot be a parameter; this one is rsv_bench_ and the run's id
		return nil, fmt.Errorf("bench: create database %s: %w", s.dbName, err)
	}
	s.undo = append(s.undo, func(ctx context.Context) error {
		if opts.Keep {
			return nil
		}
		_, err := s.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+s.dbName) //sqlcheck:ok the name made above
		return err
	})
	s.undo = append(s.undo, func(ctx context.Context) error {
		if opts.Keep {
			return nil
		}
		return deletePrefix(ctx, s.redisDirect, s.prefix)
	})
	cfg.DBName = s.dbName
	if s.direct, err = mysqlstore.Open(cfg.FormatDSN()); err != nil {
		return nil, err
	}
	s.direct.SetMaxOpenConns(64)
	if _, err := migrations.Up(ctx, s.direct, migrations.Sets()...); err != nil { // one database for the pod and the control plane
		return nil, fmt.Errorf("bench: migrate %s: %w", s.dbName, err)
	}
	for _, stmt := range sqlCreateBaselines {
		if _, err := s.direct.ExecContext(ctx, stmt); err != nil {
			return nil, fmt.Errorf("bench: create baseline tables: %w", err)
		}
	}
	if opts.KillFloodControlDSN != "" {
		if err := s.openControl(ctx); err != nil {
			return nil, err
		}
	}
	if err := s.settings(ctx); err != nil {
		return nil, err
	}
	s.findPids(ctx)
	if s.opts.Split {
		if err := s.pinCores(); err != nil {
			return nil, err
		}
	}
	for _, l := range latencies {
		if _, ok := s.paths[l]; ok {
			continue
		}
		p, err := s.openPath(ctx, cfg, l)
		if err != nil {
			return nil, err
		}
		s.paths[l] = p
	}
	return s, nil
}

// setFlush applies the flush setting (Options.Flush) on the server of
// admin, remembering how to put it back.
func (s *servers) setFlush(ctx context.Context, admin *sql.DB) error {
	if s.opts.Flush == "" {
		return nil
	}
	var old int
	if err := admin.QueryRowContext(ctx, sqlFlushRead).Scan(&old); err != nil {
		return fmt.Errorf("bench: read innodb_flush_log_at_trx_commit: %w", err)
	}
	// The variable takes a number, not a string.
	want, _ := strconv.Atoi(s.opts.Flush)
	if old == want {
		return nil
	}
	if _, err := admin.ExecContext(ctx, sqlFlushSet, want); err != nil {
		return fmt.Errorf("bench: set innodb_flush_log_at_trx_commit=%s: %w", s.opts.Flush, err)
	}
	s.undo = append(s.undo, func(ctx context.Context) error {
		_, err := admin.ExecContext(ctx, sqlFlushSet, old)
		return err
	})
	return nil
}

// openControl creates and migrates the run's control database on the
// server of Options.KillFloodControlDSN, as openServers does the run's
// own, and says how to drop it. Its name is the run's with "_control",
// so that a control server that is the run's server too still works.
func (s *servers) openControl(ctx context.Context) (err error) {
	cfg, err := mysql.ParseDSN(s.opts.KillFloodControlDSN)
	if err != nil {
		return fmt.Errorf("bench: parse the control server's DSN: %w", err)
	}
	if s.controlAdmin, err = mysqlstore.Open(s.opts.KillFloodControlDSN); err != nil {
		return err
	}
	s.controlAdmin.SetMaxOpenConns(4)
	if err := s.controlAdmin.PingContext(ctx); err != nil {
		return fmt.Errorf("bench: connect to the control server: %w", err)
	}
	s.controlName, s.controlAddr = s.dbName+"_control", cfg.Addr
	if _, err := s.controlAdmin.ExecContext(ctx, "CREATE DATABASE "+s.controlName); err != nil { //sqlcheck:ok a database name cannot be a parameter; this one is the run's and _control
		return fmt.Errorf("bench: create database %s on the control server: %w", s.controlName, err)
	}
	s.undo = append(s.undo, func(ctx context.Context) error {
		if s.opts.Keep {
			return nil
		}
		_, err := s.controlAdmin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+s.controlName) //sqlcheck:ok the name made above
		return err
	})
	cfg.DBName = s.controlName
	if s.control, err = mysqlstore.Open(cfg.FormatDSN()); err != nil {
		return err
	}
	s.control.SetMaxOpenConns(16)
	if _, err := migrations.Up(ctx, s.control, migrations.Control); err != nil {
		return fmt.Errorf("bench: migrate %s on the control server: %w", s.controlName, err)
	}
	// The run's commits are as durable there as on its own server.
	if err := s.setFlush(ctx, s.controlAdmin); err != nil {
		return fmt.Errorf("bench: the control server: %w", err)
	}
	// The database probe's row (probeDB).
	for _, stmt := range sqlCreateBaselines {
		if strings.Contains(stmt, "bench_probe") {
			if _, err := s.control.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("bench: create the probe's table on the control server: %w", err)
			}
		}
	}
	return nil
}

// controlDB is the killflood scenario's control database: the one on a
// server of its own (Options.KillFloodControlDSN), else the run's.
func (s *servers) controlDB() *sql.DB {
	if s.control != nil {
		return s.control
	}
	return s.direct
}

// controlDSN is controlDB's DSN, for the replicas' control_dsn.
func (s *servers) controlDSN() (string, error) {
	dsn, name := s.opts.MySQLDSN, s.dbName
	if s.control != nil {
		dsn, name = s.opts.KillFloodControlDSN, s.controlName
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", err
	}
	cfg.DBName = name
	return cfg.FormatDSN(), nil
}

// settings applies the flush setting and turns on the record lock counter,
// remembering how to put both back.
func (s *servers) settings(ctx context.Context) error {
	if err := s.setFlush(ctx, s.admin); err != nil {
		return err
	}
	var name, value string
	err := s.admin.QueryRowContext(ctx, sqlStatusLike, "Innodb_os_log_fsyncs").Scan(&name, &value)
	switch {
	case err == nil:
		s.fsyncVar = "Innodb_os_log_fsyncs"
	case errors.Is(err, sql.ErrNoRows):
		// MariaDB 10.8+ has no Innodb_os_log_fsyncs; its log fsyncs go
		// through the same counter as data file fsyncs.
		s.fsyncVar = "Innodb_data_fsyncs"
	default:
		return fmt.Errorf("bench: read fsync counter: %w", err)
	}
	// lock_rec_lock_requests counts every record lock a statement asks
	// for, including those SKIP LOCKED then skips: the length of a scan.
	var enabled int
	if err := s.admin.QueryRowContext(ctx, sqlMonitorEnabled, monitorLockRequests).Scan(&enabled); err == nil {
		if enabled == 0 {
			if _, err := s.admin.ExecContext(ctx, sqlMonitorEnable, monitorLockRequests); err == nil {
				s.undo = append(s.undo, func(ctx context.Context) error {
					_, err := s.admin.ExecContext(ctx, sqlMonitorDisable, monitorLockRequests)
					return err
				})
				enabled = 1
			}
		}
		s.lockRequests = enabled == 1
	}
	return nil
}

// findPids finds the servers' processes when they run on this machine, for
// their CPU time; 0 when not found.
func (s *servers) findPids(ctx context.Context) {
	var pidFile string
	if err := s.admin.QueryRowContext(ctx, sqlPidFile).Scan(&pidFile); err == nil {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && proccpu.Of(pid) >= 0 {
				s.mysqlPid = pid
			}
		}
	}
	if info, err := s.redisDirect.Info(ctx, "server").Result(); err == nil {
		for l := range strings.SplitSeq(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "process_id:"); ok {
				if pid, err := strconv.Atoi(v); err == nil && proccpu.Of(pid) >= 0 {
					s.redisPid = pid
				}
			}
		}
	}
}

// pinCores stands in for an application and its databases on separate
// machines (Options.Split): MariaDB and Redis on the first half of the
// CPUs, this process (the load generator, the proxy and the store or
// facade under test) on the rest, with GOMAXPROCS to match. All of it is
// put back at the end of the run.
func (s *servers) pinCores() error {
	n := runtime.NumCPU()
	if n < 2 {
		return fmt.Errorf("bench: Options.Split needs at least 2 CPUs, this machine has %d", n)
	}
	if s.mysqlPid == 0 || s.redisPid == 0 {
		return errors.New("bench: Options.Split needs MariaDB and Redis on this machine (their processes were not found)")
	}
	var db, app []int
	for c := range n {
		if c < n/2 {
			db = append(db, c)
		} else {
			app = append(app, c)
		}
	}
	for _, pid := range []int{s.mysqlPid, s.redisPid, os.Getpid()} {
		cpus := db
		if pid == os.Getpid() {
			cpus = app
		}
		old, err := pin(pid, cpus)
		if err != nil {
			return fmt.Errorf("bench: split: %w", err)
		}
		s.undo = append(s.undo, func(context.Context) error {
			_, err := pin(pid, old)
			return err
		})
	}
	prev := runtime.GOMAXPROCS(len(app))
	s.undo = append(s.undo, func(context.Context) error {
		runtime.GOMAXPROCS(prev)
		return nil
	})
	s.split = fmt.Sprintf("MariaDB and Redis on CPU %s, the load generator and the store or facade on CPU %s", cpuList(db), cpuList(app))
	return nil
}

func cpuList(cpus []int) string {
	parts := make([]string, len(cpus))
	for i, c := range cpus {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, ",")
}

// openPath opens connections to both servers with latency added: through
// an in-process toxiproxy whose latency toxic delays the server-to-client
// stream, so each round trip pays the latency once.
func (s *servers) openPath(ctx context.Context, cfg *mysql.Config, latency time.Duration) (*path, error) {
	p := &path{latency: latency}
	mysqlAddr, redisAddr := cfg.Addr, s.opts.RedisAddr
	if latency > 0 {
		if cfg.Net != "tcp" {
			return nil, fmt.Errorf("bench: added latency needs MySQL over TCP, the DSN uses %q", cfg.Net)
		}
		var err error
		if mysqlAddr, err = s.proxy(ctx, "mysql", cfg.Addr, latency); err != nil {
			return nil, err
		}
		if redisAddr, err = s.proxy(ctx, "redis", s.opts.RedisAddr, latency); err != nil {
			return nil, err
		}
	}
	c := cfg.Clone()
	c.Addr = mysqlAddr
	full, err := mysqlstore.DSN(c.FormatDSN())
	if err != nil {
		return nil, err
	}
	if c, err = mysql.ParseDSN(full); err != nil {
		return nil, err
	}
	c.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: conn, c: &p.mysqlConns}, nil
	}
	connector, err := mysql.NewConnector(c)
	if err != nil {
		return nil, fmt.Errorf("bench: MySQL connector: %w", err)
	}
	p.db = sql.OpenDB(connector)
	p.db.SetMaxOpenConns(maxConns)
	p.db.SetMaxIdleConns(maxConns)
	p.redis = redisstore.NewClient(&redis.UniversalOptions{
		Addrs:    []string{redisAddr},
		PoolSize: maxConns,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: conn, c: &p.redisConns}, nil
		},
	}).(*redis.Client)
	if err := p.probe(ctx); err != nil {
		return nil, fmt.Errorf("bench: probe the +%s path: %w", latencyLabel(latency), err)
	}
	return p, nil
}

func (s *servers) proxy(ctx context.Context, name, upstream string, latency time.Duration) (string, error) {
	if s.proxyServer == nil {
		s.proxyServer = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	}
	px := toxiproxy.NewProxy(s.proxyServer, name+"-"+latencyLabel(latency), "127.0.0.1:0", upstream)
	if err := px.Start(); err != nil {
		return "", fmt.Errorf("bench: start %s proxy: %w", name, err)
	}
	s.proxies = append(s.proxies, px)
	toxic := fmt.Sprintf(`{"name":"rtt","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":%d,"jitter":0}}`,
		latency.Milliseconds())
	if _, err := px.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
		return "", fmt.Errorf("bench: add latency toxic to %s proxy: %w", name, err)
	}
	return px.Listen, nil
}

// probe measures the path idle: the median of a no-op statement, of a PING,
// and of the COMMIT of a one-row update (its fsync, at flush=1).
func (p *path) probe(ctx context.Context) error {
	const n = 25
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var rtts, commits, pings []time.Duration
	for range n {
		start := time.Now()
		if _, err := conn.ExecContext(ctx, sqlNoop); err != nil {
			return err
		}
		rtts = append(rtts, time.Since(start))
		start = time.Now()
		if err := p.redis.Ping(ctx).Err(); err != nil {
			return err
		}
		pings = append(pings, time.Since(start))
	}
	if _, err := conn.ExecContext(ctx, sqlProbeEnsure); err != nil {
		return err
	}
	for range n {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqlProbeTouch); err != nil {
			_ = tx.Rollback()
			return err
		}
		start := time.Now()
		if err := tx.Commit(); err != nil {
			return err
		}
		commits = append(commits, time.Since(start))
	}
	p.mysqlRTT, p.redisRTT, p.commit = median(rtts), median(pings), median(commits)
	return nil
}

// close stops the proxies, closes the connections and undoes what the run
// changed on the servers. It reports what it could not undo.
func (s *servers) close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, p := range s.paths {
		_ = p.db.Close()
		_ = p.redis.Close()
	}
	for _, px := range s.proxies {
		px.Stop()
	}
	if s.direct != nil {
		_ = s.direct.Close()
	}
	if s.control != nil {
		_ = s.control.Close()
	}
	var errs []error
	for i := len(s.undo) - 1; i >= 0; i-- {
		if err := s.undo[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if s.admin != nil {
		_ = s.admin.Close()
	}
	if s.controlAdmin != nil {
		_ = s.controlAdmin.Close()
	}
	if s.redisDirect != nil {
		_ = s.redisDirect.Close()
	}
	if len(errs) > 0 {
		return fmt.Errorf("bench: clean up: %w", errors.Join(errs...))
	}
	return nil
}

func deletePrefix(ctx context.Context, c *redis.Client, prefix string) error {
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := c.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// countingConn counts the requests of a client connection (one write
// each) and the time from each request to the first bytes of its answer:
// the round trip plus the server's time. What is left of a connection's
// hold time is spent in the client, between answers and requests.
type countingConn struct {
	net.Conn
	c    *connCounters
	sent time.Time // zero: no request waiting for its answer
}

type connCounters struct {
	writes atomic.Int64
	waitNs atomic.Int64
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.c.writes.Add(1)
	c.sent = time.Now()
	return c.Conn.Write(b)
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if !c.sent.IsZero() {
		c.c.waitNs.Add(int64(time.Since(c.sent)))
		c.sent = time.Time{}
	}
	return n, err
}
