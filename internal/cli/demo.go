package cli

import (
	"context"
	"io"

	"github.com/seed31b0e981/reservoir/internal/demo"
)

func runDemo(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("demo", "demo [--duration D] [--addr HOST:PORT] [--keep] [flags]", out)
	var cfg demo.Config
	fs.DurationVar(&cfg.Duration, "duration", 0, "stop after this long (default: run until Ctrl-C)")
	fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:8088", "where the API and the dashboard listen, `HOST:PORT` (a free port if taken)")
	fs.StringVar(&cfg.Name, "name", "reservoir_demo", "`PREFIX` of the databases and Redis keys the demo creates (and drops)")
	fs.StringVar(&cfg.Dir, "dir", "", "the `DIR` for the topology, flags file, plan and server log (default: a temporary one)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the databases, Redis keys and files at the end")
	fs.StringVar(&cfg.Services, "services", "scripts/services", "the `SCRIPT` that starts MariaDB and Redis when $RESERVOIR_MYSQL_DSN / $RESERVOIR_REDIS_ADDR are not set")
	fs.IntVar(&cfg.Rate, "rate", 150, "traffic: HTTP requests per second")
	fs.IntVar(&cfg.Workers, "workers", 12, "traffic: concurrent callers")
	fs.DurationVar(&cfg.GateDuration, "gate-duration", 0, "the demo plan's min_duration per stage (default 30s)")
	fs.Int64Var(&cfg.MinObservations, "min-observations", 0, "the demo plan's min_observations per stage (default 200)")
	fs.DurationVar(&cfg.FlashEvery, "flash-every", 0, "how often a flash sale drains an item (default 90s)")
	logLevel := fs.String("log-level", "", "write the server's log at this `LEVEL` to stderr (default: warnings to server.log in --dir)")
	verbose := verboseFlag(fs)
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
	cfg.Out = out
	return demo.Run(ctx, cfg)
}
