package cli

import (
	"context"
	"flag"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/seed31b0e981/reservoir/internal/demo"
)

// servicesScript is where scripts/services is, run from the repository
// root (the demo starts MariaDB and Redis with it when no servers are
// given).
const servicesScript = "scripts/services"

func runDemo(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("demo", "demo [--duration D] [--addr HOST:PORT] [--name NAME] [--keep] [flags]\n"+
		"       reservoir demo clean --name NAME [--dir DIR] [--mysql-dsn DSN] [--redis-addr HOST:PORT]", out)
	var cfg demo.Config
	fs.DurationVar(&cfg.Duration, "duration", 0, "stop after this long (default: run until Ctrl-C)")
	fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:8088", "where the API and the dashboard listen, `HOST:PORT` (a free port if taken)")
	fs.StringVar(&cfg.Name, "name", "", "`NAME` starting the databases and Redis keys the demo creates and drops (default: reservoir_demo_ and 6 random hex digits)")
	fs.StringVar(&cfg.Dir, "dir", "", "the `DIR` for the topology, flags file, plan and server log (default: a temporary one)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the databases, Redis keys and files at the end, and print the `demo clean` command that removes them")
	fs.StringVar(&cfg.MySQLDSN, "mysql-dsn", "", "the MariaDB/MySQL server, a `DSN` without a database (default: $RESERVOIR_MYSQL_DSN, else what --services starts)")
	fs.StringVar(&cfg.RedisAddr, "redis-addr", "", "the Redis server, `HOST:PORT` (default: $RESERVOIR_REDIS_ADDR, else what --services starts)")
	fs.StringVar(&cfg.Services, "services", servicesScript, "the `SCRIPT` that starts MariaDB and Redis when no servers are given")
	fs.IntVar(&cfg.Rate, "rate", 150, "traffic: HTTP requests per second")
	fs.IntVar(&cfg.Workers, "workers", 12, "traffic: concurrent callers")
	fs.DurationVar(&cfg.GateDuration, "gate-duration", 0, "the demo plan's min_duration per stage (default 30s)")
	fs.Int64Var(&cfg.MinObservations, "min-observations", 0, "the demo plan's min_observations per stage (default 200)")
	fs.DurationVar(&cfg.FlashEvery, "flash-every", 0, "how often a flash sale drains an item (default 90s)")
	incident := fs.Bool("incident", true, "run the scripted incident once MySQL decides pod-a: a fault in its MySQL, mismatches, broken gates, the automatic kill switch, repair and release (--incident=false leaves it out)")
	fs.DurationVar(&cfg.IncidentAfter, "incident-after", 0, "how long MySQL decides pod-a before the incident's fault (default 15s)")
	fs.DurationVar(&cfg.IncidentHold, "incident-hold", 0, "how long the kill switch keeps Redis deciding before the demo repairs MySQL and releases it (default 30s)")
	logLevel := fs.String("log-level", "", "write the server's log at this `LEVEL` to stderr (default: warnings to server.log in --dir)")
	verbose := verboseFlag(fs)
	// The one action, clean, may come before or after the flags, as
	// rollout's actions do; it owns its flags (parsed again below).
	if rest := withoutAction(fs, args, "clean"); len(rest) < len(args) {
		return inAction("clean", runDemoClean(ctx, rest, out))
	}
	if _, pos, err := splitArgs(fs, args); err == nil && len(pos) > 0 {
		return usagef("unexpected argument %q: demo takes flags, or the action clean%s", pos[0], didYouMean(pos[0], []string{"clean"}))
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *verbose {
		showLibraryLogs(errOut)
	}
	if *logLevel != "" {
		log, err := newLogger(errOut, "text", *logLevel)
		if err != nil {
			return err
		}
		cfg.Logger = log
	}
	cfg.SkipIncident = !*incident
	cfg.Program = programName()
	cfg.Out = out
	if err := cfg.WithDefaults().Validate(); err != nil {
		return usagef("%s", strings.TrimPrefix(err.Error(), "demo: "))
	}
	ctx, stop := stopSignals(ctx)
	defer stop()
	return demo.Run(ctx, cfg)
}

// stopSignals returns ctx cancelled by SIGHUP too (the terminal closed:
// the demo must still drop what it created), on top of Run's Ctrl-C and
// SIGTERM. It also takes SIGPIPE from the runtime, which would otherwise
// kill the process on its first write to a closed stdout (`| tee` after
// Ctrl-C, `| head`) before the cleanup: the write fails with EPIPE
// instead, and the demo stops on it (its printer). A SIGPIPE itself stops
// nothing, since a dashboard's browser that hangs up raises it too.
func stopSignals(ctx context.Context) (context.Context, func()) {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP, syscall.SIGTERM, os.Interrupt)
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-pipe:
			case <-done:
				return
			}
		}
	}()
	return ctx, func() {
		stop()
		close(done)
		// SIGPIPE stays taken: a write to the closed stdout after the
		// demo returned (Main's error report) must not kill the process
		// either.
	}
}

// programName is how the demo's printed commands name this binary: as it
// was run (bin/reservoir from `make demo`, or a bare name found on $PATH),
// `go run ./cmd/reservoir` when go run built it in a temporary directory
// that goes when it exits, else reservoir (a test binary).
func programName() string {
	if len(os.Args) == 0 {
		return "reservoir"
	}
	return programNameOf(os.Args[0])
}

func programNameOf(arg0 string) string {
	switch {
	case filepath.Base(arg0) != "reservoir":
		return "reservoir"
	case strings.Contains(filepath.ToSlash(arg0), "/go-build") && strings.HasSuffix(filepath.ToSlash(arg0), "/exe/reservoir"):
		return "go run ./cmd/reservoir"
	}
	return arg0
}

func runDemoClean(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("demo clean", "demo clean --name NAME [--dir DIR] [--mysql-dsn DSN] [--redis-addr HOST:PORT]", out)
	var cfg demo.CleanConfig
	fs.StringVar(&cfg.Name, "name", "", "the demo's `NAME`, as it printed it: drops databases NAME_control, NAME_pod_a, NAME_pod_b, NAME_pod_c and Redis keys NAME:pod-a:* ... (required)")
	fs.StringVar(&cfg.Dir, "dir", "", "the demo's `DIR`: its files are removed, then the directory if that empties it")
	fs.StringVar(&cfg.MySQLDSN, "mysql-dsn", "", "the MariaDB/MySQL server, a `DSN` without a database (default: $RESERVOIR_MYSQL_DSN, else what --services starts)")
	fs.StringVar(&cfg.RedisAddr, "redis-addr", "", "the Redis server, `HOST:PORT` (default: $RESERVOIR_REDIS_ADDR, else what --services starts)")
	fs.StringVar(&cfg.Services, "services", servicesScript, "the `SCRIPT` that starts MariaDB and Redis when no servers are given")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if len(fs.Args()) > 0 {
		return usagef("demo clean takes no arguments, got %q", fs.Args())
	}
	if cfg.Name == "" {
		return usagef("--name is required: the demo's name, as it printed it (reservoir demo NAME: ...)")
	}
	cfg.Out = out
	if err := (demo.Config{Name: cfg.Name, Out: out}).WithDefaults().Validate(); err != nil {
		return usagef("--%s", strings.TrimPrefix(err.Error(), "demo: "))
	}
	return demo.Clean(ctx, cfg)
}

// withoutAction returns args without the positional argument action (a
// flag's value that happens to read the same stays).
func withoutAction(fs *flag.FlagSet, args []string, action string) []string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == action {
			return append(slices.Clone(args[:i]), args[i+1:]...)
		}
		if len(a) > 1 && a[0] == '-' && !strings.Contains(a, "=") {
			if f := fs.Lookup(strings.TrimLeft(a, "-")); f != nil && !isBool(f) {
				i++ // its value
			}
		}
	}
	return args
}
