package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/topology"
)

// operatorEnv is what the operator commands (reconcile, rollout) open from
// a topology: the same cell `reservoir serve` runs on (each pod's stores
// and mirror, the flags, the comparer on the control database), without
// its background work (no reaper, no relay: the running replicas do that).
type operatorEnv struct {
	topo *topology.Config
	cell *cell.Cell
}

func (e *operatorEnv) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = e.cell.Close(ctx)
}

// openOperatorEnv opens a topology's cell for an operator command. log
// receives the cell's logs (libraryLogger: none without -v).
func openOperatorEnv(ctx context.Context, path string, log *slog.Logger) (*operatorEnv, error) {
	if err := requireTopology(path); err != nil {
		return nil, err
	}
	topo, err := topology.Load(path)
	if err != nil {
		return nil, err
	}
	c, err := cell.Open(ctx, cell.Config{Topology: topo, ReapInterval: -1, NoRelay: true,
		Compare: compare.Config{CleanupInterval: -1}, Logger: log})
	if err != nil {
		return nil, err
	}
	return &operatorEnv{topo: topo, cell: c}, nil
}
