// Command reservoir runs the reservation stores' operations: serve,
// migrate, reconcile, rollout, clients, bench, demo and version
// (docs/cli.md). The subcommands live in internal/cli, where they are
// tested; this main is a call of package reservoirmain, as a program that
// supplies its own OpenFeature provider is (examples/provider), so both
// run one path.
package main

import (
	"os"

	"github.com/seed31b0e981/reservoir/reservoirmain"
)

func main() {
	os.Exit(reservoirmain.Main(os.Args[1:]))
}
