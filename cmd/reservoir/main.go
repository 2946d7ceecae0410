// Command reservoir runs the reservation stores' operations: migrations and
// reconciliation today; serve, rollout, bench and demo as they land. The
// subcommands live in internal/cli, where they are tested.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/seed31b0e981/reservoir/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
