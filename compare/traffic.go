package compare

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/seed31b0e981/reservoir/internal/controldb"
)

// Traffic is what the comparer counts beside the observations: every call
// a facade took, in every mode. Observe sees only the calls both stores
// answered (shadow, mysql, a kill switch that keeps the shadow); in redis
// and mysql_only modes nothing is compared, yet the pods serve. Served
// counts those calls too, and the stats flush writes them to
// compare_traffic (migration 00008) in its own transaction, exactly once,
// summed over every replica.

// trafficKey is one compare_traffic row.
type trafficKey struct {
	pod    string
	window int64 // unix seconds of the window's start
	mode   string
	op     string
}

func (a trafficKey) compare(b trafficKey) int {
	return cmp.Or(cmp.Compare(a.pod, b.pod), cmp.Compare(a.window, b.window), cmp.Compare(a.mode, b.mode), cmp.Compare(a.op, b.op))
}

// Served counts one call a pod's facade took in mode (the effective mode
// it applied), compared or not: the pod's traffic, which Traffic reads.
// Like Observe it never waits on the database; past MaxPendingStats keys
// it drops the count (reservoir_compare_stats_dropped_total), and after
// Close it counts nothing. *Comparer implements dualwrite.TrafficCounter
// with it.
func (c *Comparer) Served(pod, mode string, op Op) {
	if c.closed.Load() {
		return
	}
	k := trafficKey{
		pod:    clip(pod, maxPod),
		window: time.Now().UTC().Truncate(c.cfg.Window).Unix(),
		mode:   clip(mode, maxMode),
		op:     clip(string(op), maxOp),
	}
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	if _, ok := c.served[k]; !ok && len(c.pending)+len(c.served)+c.unackedRows >= c.cfg.MaxPendingStats {
		c.m.statsDropped.Inc()
		return
	}
	c.served[k]++
}

// PodTraffic is one pod's calls since a time, summed over every replica
// that flushed.
type PodTraffic struct {
	// Pod is the pod.
	Pod string
	// Calls counts every call its facades took, all modes together.
	Calls int64
	// ByMode counts them per effective mode.
	ByMode map[string]int64
}

// Traffic sums compare_traffic per pod over the windows that start at or
// after since truncated to Config.Window. A pod that took no call since
// is absent. Like Totals it reads what every replica has flushed.
func (c *Comparer) Traffic(ctx context.Context, since time.Time) (map[string]PodTraffic, error) {
	sums, err := controldb.SumTraffic(ctx, c.db, since.UTC().Truncate(c.cfg.Window))
	if err != nil {
		return nil, fmt.Errorf("compare: traffic: %w", err)
	}
	out := map[string]PodTraffic{}
	for _, r := range sums {
		t := out[r.Pod]
		if t.ByMode == nil {
			t = PodTraffic{Pod: r.Pod, ByMode: map[string]int64{}}
		}
		t.Calls += r.N
		t.ByMode[r.Mode] += r.N
		out[r.Pod] = t
	}
	return out, nil
}
