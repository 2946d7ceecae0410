package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/internal/cell"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/internal/wire"
	"github.com/seed31b0e981/reservoir/rollout"
)

// operatorEnv is what the operator commands (reconcile, rollout) open from
// a topology: the same cell `reservoir serve` runs on (each pod's stores
// and mirror, the flags, the comparer on the control database), without
// its background work (no reaper, no relay: the running replicas do that).
type operatorEnv struct {
	topo     *topology.Config
	topoPath string
	cell     *cell.Cell
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
	provider, err := flagsProvider(ctx, topo, path)
	if err != nil {
		return nil, err
	}
	c, err := cell.Open(ctx, cell.Config{Topology: topo, ReapInterval: -1, NoRelay: true,
		Compare: compare.Config{CleanupInterval: -1}, Logger: log, Provider: provider})
	if err != nil {
		return nil, err
	}
	return &operatorEnv{topo: topo, topoPath: path, cell: c}, nil
}

// loadPlan loads the plan at path and refuses one that names a pod the
// topology (read from topoPath) does not define, naming both files: its
// stages could never be applied.
func loadPlan(path, topoPath string, topo *topology.Config) (*rollout.Plan, error) {
	plan, err := rollout.LoadPlan(path)
	if err != nil {
		return nil, err
	}
	for _, p := range plan.Pods {
		if _, err := topo.Pod(p); err != nil {
			return nil, fmt.Errorf("plan %s names pod %q, which topology %s does not define (its pods: %s): "+
				"add the pod to the topology, or remove it from the plan's pods and stages", path, p, topoPath, strings.Join(topo.PodNames(), ", "))
		}
	}
	return plan, nil
}

// orderPods prints the pods by the calls each served since, lowest first:
// the order a plan should list them in. The calls are every reserve,
// claim, release and adjust the pod's facades took, in every mode
// (compare_traffic), not the comparer's observations, which are none
// before a pod's shadow stage.
func orderPods(ctx context.Context, env *operatorEnv, since time.Duration, asJSON bool, out io.Writer) error {
	from := time.Now().Add(-since)
	traffic, err := env.cell.Comparer.Traffic(ctx, from)
	if err != nil {
		return err
	}
	ps := make([]compare.PodTraffic, 0, len(env.topo.PodNames()))
	for _, p := range env.topo.PodNames() {
		t := traffic[p]
		t.Pod = p
		ps = append(ps, t)
	}
	slices.SortStableFunc(ps, func(a, b compare.PodTraffic) int { return cmp.Compare(a.Calls, b.Calls) })
	if asJSON {
		return writeJSON(out, wire.OrderPods{Since: from.UTC(), SinceNS: int64(since), Pods: wire.PodTrafficsOf(ps)})
	}
	for _, p := range ps {
		var modes []string
		for _, m := range slices.Sorted(maps.Keys(p.ByMode)) {
			modes = append(modes, fmt.Sprintf("%s %d", m, p.ByMode[m]))
		}
		by := ""
		if len(modes) > 0 {
			by = " (" + strings.Join(modes, ", ") + ")"
		}
		fmt.Fprintf(out, "%-12s %d calls served in the last %s%s\n", p.Pod, p.Calls, since, by)
	}
	return nil
}
