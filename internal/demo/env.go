package demo

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/migrations"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

//go:embed plan.toml
var planTemplate string

// Stock the demo seeds: every shop has items 1..items at each location;
// the hot items have far more stock (and get a large share of carts).
const (
	items      = 40
	hotItems   = 3
	hotStock   = 20000
	stock      = 400
	flashItem  = 99
	flashShop  = 1001
	flashUnits = 80
)

var locations = []int64{1, 2}

// environment is what the demo creates outside the process: databases,
// Redis keys, files. cleanup removes them.
type environment struct {
	cfg      Config
	p        *printer
	dsn      *mysql.Config // the server, no database
	redis    string
	dir      string
	ownDir   bool
	topo     *topology.Config
	dbs      []string
	prefixes []string
}

// newEnvironment finds (or starts) the servers and makes the directory.
func newEnvironment(ctx context.Context, cfg Config, p *printer) (*environment, error) {
	e, err := planEnvironment(ctx, cfg, p)
	if err != nil {
		return nil, err
	}
	e.dir = cfg.Dir
	if e.dir == "" {
		if e.dir, err = os.MkdirTemp("", "reservoir-demo-"); err != nil {
			return nil, err
		}
		e.ownDir = true
	} else if err := os.MkdirAll(e.dir, 0o755); err != nil {
		return nil, err
	}
	p.say("  MariaDB %s, Redis %s", e.dsn.Addr, e.redis)
	return e, nil
}

// planEnvironment finds (or starts) the servers and names everything a
// demo called cfg.Name creates, before anything is: cleanup drops every
// one of those names, so a stop at any moment (a signal while a database
// is being created) leaves nothing behind.
func planEnvironment(ctx context.Context, cfg Config, p *printer) (*environment, error) {
	e := &environment{cfg: cfg, p: p}
	dsn, addr, err := servers(ctx, cfg, p)
	if err != nil {
		return nil, err
	}
	if e.dsn, err = mysql.ParseDSN(dsn); err != nil {
		return nil, fmt.Errorf("demo: MySQL DSN: %w", err)
	}
	e.dsn.DBName = ""
	e.redis = addr
	e.dbs = []string{e.dbName("control")}
	for _, p := range pods {
		e.dbs = append(e.dbs, e.dbName(p.name))
		e.prefixes = append(e.prefixes, e.prefix(p.name))
	}
	return e, nil
}

// prefix is a pod's Redis key prefix.
func (e *environment) prefix(pod string) string { return e.cfg.Name + ":" + pod + ":" }

// servers returns the MySQL server DSN and the Redis address: from the
// config, the environment, or scripts/services (which starts them when
// they are not running, installing them first on a fresh machine).
func servers(ctx context.Context, cfg Config, p *printer) (string, string, error) {
	dsn, addr := cfg.MySQLDSN, cfg.RedisAddr
	if dsn == "" {
		dsn = os.Getenv("RESERVOIR_MYSQL_DSN")
	}
	if addr == "" {
		addr = os.Getenv("RESERVOIR_REDIS_ADDR")
	}
	if dsn != "" && addr != "" {
		return dsn, addr, nil
	}
	if _, err := os.Stat(cfg.Services); err != nil {
		return "", "", fmt.Errorf("demo: no servers: set RESERVOIR_MYSQL_DSN and RESERVOIR_REDIS_ADDR, or run the demo from the repository root so that %s can start them (%v)", cfg.Services, err)
	}
	p.say("  starting MariaDB and Redis with %s (the first time installs them; they keep running afterwards) ...", cfg.Services)
	cctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, cfg.Services, "start", "mysql", "redis")
	var stderr bytes.Buffer
	cmd.Stderr = io.MultiWriter(&stderr, p.out) // an install takes minutes: show its progress
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("demo: %s start mysql redis: %v\n%s", cfg.Services, err, stderr.String())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `'"`)
		switch k {
		case "RESERVOIR_MYSQL_DSN":
			if dsn == "" {
				dsn = v
			}
		case "RESERVOIR_REDIS_ADDR":
			if addr == "" {
				addr = v
			}
		}
	}
	if dsn == "" || addr == "" {
		return "", "", fmt.Errorf("demo: %s printed no server addresses:\n%s%s", cfg.Services, out, stderr.String())
	}
	return dsn, addr, nil
}

func (e *environment) dbName(suffix string) string {
	return e.cfg.Name + "_" + strings.ReplaceAll(suffix, "-", "_")
}

func (e *environment) dsnFor(db string) string {
	c := e.dsn.Clone()
	c.DBName = db
	return c.FormatDSN()
}

func (e *environment) shopCount() int {
	n := 0
	for _, p := range pods {
		n += len(p.shops)
	}
	return n
}

// create makes the databases (dropping leftovers of an earlier run),
// migrates them, clears the Redis prefixes, and writes the files.
func (e *environment) create(ctx context.Context) error {
	admin, err := sql.Open("mysql", e.dsn.FormatDSN())
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := admin.PingContext(ctx); err != nil {
		return fmt.Errorf("demo: connect to MariaDB at %s: %w (is it running? scripts/services status)", e.dsn.Addr, err)
	}
	e.topo = &topology.Config{
		FlagsFile:   filepath.Join(e.dir, "flags.json"),
		PlanFile:    filepath.Join(e.dir, "plan.toml"),
		DefaultRule: "modulo",
	}
	e.p.say("  creating databases %s_{control,pod_a,pod_b,pod_c} and migrating them ...", e.cfg.Name)
	for _, db := range e.dbs {
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+db+"`"); err != nil { //sqlcheck:ok a database name cannot be a parameter; db is the demo's --name (nameRE) and a fixed suffix
			return fmt.Errorf("demo: drop %s: %w", db, err)
		}
		if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+db+"`"); err != nil { //sqlcheck:ok a database name: the demo's --name (nameRE) and a fixed suffix
			return fmt.Errorf("demo: create %s: %w", db, err)
		}
		set := migrations.Pod // each pod's database: the pod set; the control database: the control set
		if db == e.dbName("control") {
			set = migrations.Control
		}
		if err := migrate(ctx, e.dsnFor(db), set); err != nil {
			return fmt.Errorf("demo: migrate %s: %w", db, err)
		}
	}
	e.topo.ControlDSN = e.dsnFor(e.dbName("control"))
	for _, p := range pods {
		e.topo.Pods = append(e.topo.Pods, topology.Pod{Name: p.name, MySQLDSN: e.dsnFor(e.dbName(p.name)), RedisAddr: e.redis,
			RedisPrefix: e.prefix(p.name), Shops: p.shops})
	}
	if err := e.clearRedis(ctx); err != nil {
		return err
	}
	if err := (flagdoc.FlagsFile{Path: e.topo.FlagsFile}).Write(flagdoc.NewFlags()); err != nil {
		return err
	}
	var plan bytes.Buffer
	if err := template.Must(template.New("plan").Parse(planTemplate)).Execute(&plan, e.cfg); err != nil {
		return err
	}
	if err := os.WriteFile(e.topo.PlanFile, plan.Bytes(), 0o644); err != nil {
		return err
	}
	var topo bytes.Buffer
	topo.WriteString("# Written by `reservoir demo`; see internal/topology for every key.\n")
	if err := toml.NewEncoder(&topo).Encode(e.topo); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(e.dir, "topology.toml"), topo.Bytes(), 0o644); err != nil {
		return err
	}
	parsed, err := topology.Load(filepath.Join(e.dir, "topology.toml"))
	if err != nil {
		return fmt.Errorf("demo: the topology it wrote does not load: %w", err)
	}
	e.topo = parsed
	return nil
}

func migrate(ctx context.Context, dsn string, set *migrations.Set) error {
	db, err := mysqlstore.Open(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = migrations.Up(ctx, db, set)
	return err
}

// clearRedis deletes every key under the demo's prefixes.
func (e *environment) clearRedis(ctx context.Context) error {
	client := redis.NewClient(&redis.Options{Addr: e.redis})
	defer client.Close()
	for _, prefix := range e.prefixes {
		iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var batch []string
		for iter.Next(ctx) {
			if batch = append(batch, iter.Val()); len(batch) == 500 {
				if err := client.Unlink(ctx, batch...).Err(); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		if err := iter.Err(); err != nil {
			return fmt.Errorf("demo: clear redis %s*: %w", prefix, err)
		}
		if len(batch) > 0 {
			if err := client.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// cleanup drops the databases and keys and removes the directory, unless
// Keep (it then prints the command that removes them). After a failure it
// keeps the directory (its server.log says why).
func (e *environment) cleanup(failed bool) error {
	if e.cfg.Keep {
		e.p.say("  kept (--keep): databases %s, Redis keys %s*, files in %s", strings.Join(e.dbs, ", "), e.cfg.Name+":", e.dir)
		e.p.say("  to remove exactly these: %s", e.cleanCommand())
		return nil
	}
	err := e.drop()
	if e.ownDir && !failed {
		err = errors.Join(err, os.RemoveAll(e.dir))
	} else if failed {
		e.p.say("  kept %s for its server.log; %s removes it", e.dir, e.cleanCommand())
	}
	if err == nil {
		e.p.say("  dropped the demo's databases and Redis keys; MariaDB (%s) and Redis (%s) keep running for the next run: `make services-stop` stops them", e.dsn.Addr, e.redis)
	}
	return err
}

// drop drops the demo's databases and deletes its Redis keys. Each step
// gets its own deadline and runs whatever the one before did: on a loaded
// machine dropping four databases can take most of a shared one, and the
// keys would stay.
func (e *environment) drop() error {
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := sql.Open("mysql", e.dsn.FormatDSN())
	if err == nil {
		for _, db := range e.dbs {
			if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+db+"`"); err != nil { //sqlcheck:ok a database name: the demo's --name (nameRE) and a fixed suffix
				errs = append(errs, fmt.Errorf("demo: drop %s: %w", db, err))
			}
		}
		admin.Close()
	} else {
		errs = append(errs, err)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	errs = append(errs, e.clearRedis(rctx))
	rcancel()
	return errors.Join(errs...)
}

// demoFiles are the files a demo writes into its directory (the flags
// file's writer adds its lock, and a temporary file while it writes).
var demoFiles = []string{"topology.toml", "flags.json", "flags.json.lock", "plan.toml", "clients.toml", "server.log"}

// removeDir removes the demo's files from dir, then dir if that leaves it
// empty: a directory given by hand may hold other files, which stay.
func removeDir(dir string) error {
	var errs []error
	for _, f := range demoFiles {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	tmps, _ := filepath.Glob(filepath.Join(dir, ".flags.json.tmp-*"))
	for _, f := range tmps {
		errs = append(errs, os.Remove(f))
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("demo: %w (files that are not the demo's stay)", err))
	}
	return errors.Join(errs...)
}

// cleanCommand is the command that removes what this demo created: the
// servers are given explicitly (a password in the DSN as the environment
// variable, never in clear), so it works from any shell.
func (e *environment) cleanCommand() string {
	dsn := "'" + e.dsn.FormatDSN() + "'"
	if e.dsn.Passwd != "" {
		dsn = `"$RESERVOIR_MYSQL_DSN"`
	}
	cmd := fmt.Sprintf("%s demo clean --name %s --mysql-dsn %s --redis-addr %s", e.cfg.Program, e.cfg.Name, dsn, e.redis)
	if e.dir != "" {
		cmd += " --dir " + e.dir
	}
	return cmd
}

// CleanConfig says what Clean removes.
type CleanConfig struct {
	// Out receives what was removed. Required.
	Out io.Writer
	// Name is the demo's Config.Name. Required: only a demo's own names
	// are dropped (<Name>_control, <Name>_pod_a, ..., keys <Name>:pod-a:*
	// ...), never a pattern.
	Name string
	// Dir, when set, is the demo's directory: its files are removed, then
	// the directory if that empties it.
	Dir string
	// MySQLDSN, RedisAddr and Services find the servers as Config's do.
	MySQLDSN, RedisAddr, Services string
}

// Clean removes what a demo named cfg.Name created and kept (--keep, or
// a demo that could not clean up): its databases, its Redis keys and,
// with Dir, its files. `reservoir demo clean` runs it; a kept demo prints
// that command.
func Clean(ctx context.Context, cfg CleanConfig) error {
	c := Config{Out: cfg.Out, Name: cfg.Name, MySQLDSN: cfg.MySQLDSN, RedisAddr: cfg.RedisAddr, Services: cfg.Services}.WithDefaults()
	if cfg.Name == "" {
		return errors.New("demo: clean: the demo's name is required (--name, as the demo printed it)")
	}
	if err := c.Validate(); err != nil {
		return err
	}
	p := &printer{out: cfg.Out}
	e, err := planEnvironment(ctx, c, p)
	if err != nil {
		return err
	}
	if err := e.drop(); err != nil {
		return err
	}
	p.say("dropped databases %s and Redis keys %s*", strings.Join(e.dbs, ", "), c.Name+":")
	if cfg.Dir != "" {
		if err := removeDir(cfg.Dir); err != nil {
			return err
		}
		p.say("removed %s", cfg.Dir)
	}
	return nil
}

// seed gives every shop its stock, through the facades (every pod is in
// redis mode until the rollout starts, so Redis and the ledger get it).
func seed(ctx context.Context, c *cell.Cell) error {
	type job struct {
		pod             *cell.Pod
		shop, item, loc int64
		available       int64
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 16 {
		wg.Go(func() {
			for j := range jobs {
				avail := j.available
				_, err := j.pod.Facade.Adjust(ctx, &reservation.AdjustParams{Shop: j.shop, Item: j.item, Location: j.loc, Available: &avail})
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("demo: seed shop %d item %d: %w", j.shop, j.item, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, ps := range pods {
		pod := c.Pod(ps.name)
		for _, shop := range ps.shops {
			for item := int64(1); item <= items; item++ {
				for _, loc := range locations {
					n := int64(stock)
					if item <= hotItems {
						n = hotStock
					}
					select {
					case jobs <- job{pod, shop, item, loc, n}:
					case <-ctx.Done():
					}
				}
			}
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}
