// Package cli implements reservoir's subcommands. main only wires signals
// and exit codes; everything here takes its arguments and writers, so each
// subcommand is testable in-process.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, out, errOut io.Writer) error
}

var commands = map[string]command{
	"migrate":   {"apply or inspect the MySQL schema migrations", runMigrate},
	"reconcile": {"compare each pod's stores shop by shop, against the store that decides each shop; --repair fixes the other side", runReconcile},
	"rollout":   {"status, advance, kill switch, history and the automatic controller", runRollout},
	"bench":     {"benchmark the stores and the facade under load, with network latency", runBench},
	"serve":     {"run the checkout API, and on the admin listener the admin API, /metrics and the diff dashboard", runServe},
	"clients":   {"make a checkout API client's token and its clients file entry", runClients},
	"demo":      {"the one-command tour: three pods, traffic, a shadow rollout, the dashboard", runDemo},
}

// errUsage means the arguments were wrong; the usage was already printed.
var errUsage = errors.New("usage")

// Main runs the subcommand named by args[0] and returns the exit code:
// 0 success, 1 failure, 2 bad usage.
func Main(ctx context.Context, args []string, out, errOut io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(out)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(errOut, "reservoir: unknown command %q\n\n", args[0])
		usage(errOut)
		return 2
	}
	if err := cmd.run(ctx, args[1:], out, errOut); err != nil {
		if errors.Is(err, errUsage) || errors.Is(err, flag.ErrHelp) {
			return 2
		}
		fmt.Fprintf(errOut, "reservoir %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: reservoir COMMAND [flags]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'reservoir COMMAND -h' for a command's flags.")
}

// newFlags returns a flag set that prints its usage to errOut and returns
// errors instead of exiting.
func newFlags(name, synopsis string, errOut io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() {
		fmt.Fprintf(errOut, "usage: reservoir %s\n\nflags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args with fs. A flag fs does not define, or a value it
// cannot parse, is bad usage (exit code 2): fs has printed the error and
// the usage already, so Main prints nothing more.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return nil
}

// topologyFlag registers --topology, defaulting to $RESERVOIR_TOPOLOGY.
func topologyFlag(fs *flag.FlagSet) *string {
	return fs.String("topology", os.Getenv("RESERVOIR_TOPOLOGY"), "topology file (TOML: pods, their MySQL and Redis, the control database, the flags file) (default $RESERVOIR_TOPOLOGY)")
}

// dsnFlag registers --dsn, defaulting to $RESERVOIR_DSN.
func dsnFlag(fs *flag.FlagSet) *string {
	return fs.String("dsn", os.Getenv("RESERVOIR_DSN"),
		"MySQL DSN of the ledger database, e.g. root@tcp(127.0.0.1:33306)/reservoir (default $RESERVOIR_DSN)")
}
