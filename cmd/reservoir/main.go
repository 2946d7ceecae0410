// Command reservoir runs the reservation stores' operations: serve,
// migrate, reconcile, rollout, clients, bench, demo and version
// (docs/cli.md). The subcommands live in internal/cli, where they are
// tested.
package main

import (
	"os"

	"github.com/seed31b0e981/reservoir/internal/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:]))
}
