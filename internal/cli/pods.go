package cli

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/internal/reconcile"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/rollout"
)

// operatorEnv is what the operator commands (reconcile, rollout) open from
// a topology: each pod's stores, the flags, the control database.
type operatorEnv struct {
	topo    *topology.Config
	pods    []reconcile.Pod
	modes   *rollout.FlagSource
	cmp     *compare.Comparer
	closers []func()
}

func (e *operatorEnv) Close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

// openOperatorEnv opens a topology's pods. withControl also opens the
// control database's comparer (for the gates).
func openOperatorEnv(ctx context.Context, path string, withControl bool) (_ *operatorEnv, err error) {
	topo, err := topology.Load(path)
	if err != nil {
		return nil, err
	}
	e := &operatorEnv{topo: topo}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	reg := prometheus.NewRegistry()
	for _, p := range topo.Pods {
		db, err := mysqlstore.Open(p.MySQLDSN)
		if err != nil {
			return nil, fmt.Errorf("pod %s: %w", p.Name, err)
		}
		e.closers = append(e.closers, func() { db.Close() })
		my, err := mysqlstore.New(mysqlstore.Config{DB: db, PoolCap: p.PoolCap, Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"pod": p.Name}, reg)})
		if err != nil {
			return nil, fmt.Errorf("pod %s: %w", p.Name, err)
		}
		opts := &redis.UniversalOptions{Addrs: p.RedisCluster, IsClusterMode: len(p.RedisCluster) > 0}
		if p.RedisAddr != "" {
			opts.Addrs = []string{p.RedisAddr}
		}
		client := redisstore.NewClient(opts)
		e.closers = append(e.closers, func() { client.Close() })
		rd, err := redisstore.New(redisstore.Config{Client: client, Prefix: p.RedisPrefix, Ledger: my, Source: my,
			Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"pod": p.Name}, reg)})
		if err != nil {
			return nil, fmt.Errorf("pod %s: %w", p.Name, err)
		}
		e.pods = append(e.pods, reconcile.Pod{Name: p.Name, MySQL: my, Redis: rd})
	}
	if e.modes, err = rollout.NewFlagSource(ctx, rollout.FlagSourceConfig{Path: topo.FlagsFile}); err != nil {
		return nil, err
	}
	e.closers = append(e.closers, func() { e.modes.Close() })
	if withControl {
		db, err := mysqlstore.Open(topo.ControlDSN)
		if err != nil {
			return nil, fmt.Errorf("control database: %w", err)
		}
		e.closers = append(e.closers, func() { db.Close() })
		if e.cmp, err = compare.New(compare.Config{DB: db, Registerer: reg, CleanupInterval: -1}); err != nil {
			return nil, err
		}
		e.closers = append(e.closers, func() { e.cmp.Close(context.Background()) })
	}
	return e, nil
}
