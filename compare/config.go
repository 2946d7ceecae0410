package compare

import (
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Comparer. New applies WithDefaults, then Validate.
type Config struct {
	// DB holds the compare_diffs and compare_stats tables (migration
	// 00002) and compare_traffic (00008). Required. Open it with mysqlstore.Open (UTC times). New does
	// not touch it: a Comparer on an unreachable database still classifies
	// and counts, and drops what it cannot write.
	DB *sql.DB
	// Registerer receives the comparer's metrics. Default: a private
	// registry (kept, not exported). Never the global one.
	Registerer prometheus.Registerer
	// Logger receives the capped structured logs. Default: slog.Default().
	Logger *slog.Logger
	// Rules tune Classify. Default: DefaultRules.
	Rules Rules

	// FlushInterval is how often the in-memory stats are added to
	// compare_stats. Default: 5s.
	FlushInterval time.Duration
	// Window is the width of one compare_stats window; an observation
	// counts in the window holding its At. Every replica must use the same
	// value. Default: 1m.
	Window time.Duration
	// MaxPendingStats caps the stats rows held in memory: the distinct
	// (pod, window, mode, op, class) keys since the last flush plus those
	// of flushes that failed and wait to be retried (they pile up while the
	// database is down). Past it, observations of new keys are not counted
	// in the stats (reservoir_compare_stats_dropped_total); Prometheus still
	// counts them. Default: 10000.
	MaxPendingStats int

	// DiffRate is how many diff records per second, per class, are queued
	// for MySQL on average. The cap is per class so that a flood of one
	// class (timeouts during an incident) cannot starve the others.
	// Default: 10.
	DiffRate float64
	// DiffBurst is how many diff records of one class may be queued at
	// once. Default: 10.
	DiffBurst int
	// DiffQueue is the capacity of the queue between Observe and the
	// writer; when it is full a record is dropped and counted. Default: 256.
	DiffQueue int
	// DiffBatch is the most diff records written in one INSERT.
	// Default: 64.
	DiffBatch int

	// Retention is how long diff records are kept. Default: 168h (7 days).
	Retention time.Duration
	// StatsRetention is how long stats windows are kept. Default: 720h
	// (30 days).
	StatsRetention time.Duration
	// CleanupInterval is how often the comparer deletes rows past their
	// retention. Default: 10m. Negative: never in the background (call
	// Cleanup).
	CleanupInterval time.Duration
	// CleanupBatch is the most rows one DELETE removes, so cleanup never
	// holds many locks for long. Default: 1000.
	CleanupBatch int

	// WriteTimeout bounds each background database statement. Default: 5s.
	WriteTimeout time.Duration
	// LogRate is how many log records per second the comparer writes on
	// average (mismatches and its own write failures). Default: 1.
	LogRate float64
	// LogBurst is how many log records may be written at once. Default: 10.
	LogBurst int
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Rules = c.Rules.WithDefaults()
	setDefault(&c.FlushInterval, 5*time.Second)
	setDefault(&c.Window, time.Minute)
	setDefault(&c.MaxPendingStats, 10000)
	setDefault(&c.DiffRate, 10)
	setDefault(&c.DiffBurst, 10)
	setDefault(&c.DiffQueue, 256)
	setDefault(&c.DiffBatch, 64)
	setDefault(&c.Retention, 7*24*time.Hour)
	setDefault(&c.StatsRetention, 30*24*time.Hour)
	setDefault(&c.CleanupInterval, 10*time.Minute)
	setDefault(&c.CleanupBatch, 1000)
	setDefault(&c.WriteTimeout, 5*time.Second)
	setDefault(&c.LogRate, 1)
	setDefault(&c.LogBurst, 10)
	return c
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate reports a setting that cannot work, naming the field.
func (c Config) Validate() error {
	switch {
	case c.DB == nil:
		return errors.New("compare: Config.DB is required")
	case c.FlushInterval < 10*time.Millisecond:
		return fmt.Errorf("compare: Config.FlushInterval must be >= 10ms, got %s", c.FlushInterval)
	case c.Window < time.Second || c.Window > time.Hour || c.Window%time.Second != 0:
		return fmt.Errorf("compare: Config.Window must be whole seconds between 1s and 1h, got %s", c.Window)
	case c.MaxPendingStats < 1:
		return fmt.Errorf("compare: Config.MaxPendingStats must be >= 1, got %d", c.MaxPendingStats)
	case !(c.DiffRate > 0):
		return fmt.Errorf("compare: Config.DiffRate must be > 0 records per second, got %v", c.DiffRate)
	case c.DiffBurst < 1:
		return fmt.Errorf("compare: Config.DiffBurst must be >= 1, got %d", c.DiffBurst)
	case c.DiffQueue < 1:
		return fmt.Errorf("compare: Config.DiffQueue must be >= 1, got %d", c.DiffQueue)
	case c.DiffBatch < 1 || c.DiffBatch > 1000:
		return fmt.Errorf("compare: Config.DiffBatch must be between 1 and 1000, got %d", c.DiffBatch)
	case c.Retention < time.Minute:
		return fmt.Errorf("compare: Config.Retention must be >= 1m, got %s", c.Retention)
	case c.StatsRetention < c.Window:
		return fmt.Errorf("compare: Config.StatsRetention %s is shorter than one Window %s", c.StatsRetention, c.Window)
	case c.CleanupInterval >= 0 && c.CleanupInterval < 100*time.Millisecond:
		return fmt.Errorf("compare: Config.CleanupInterval must be >= 100ms (or negative for no background cleanup), got %s", c.CleanupInterval)
	case c.CleanupBatch < 1:
		return fmt.Errorf("compare: Config.CleanupBatch must be >= 1, got %d", c.CleanupBatch)
	case c.WriteTimeout <= 0:
		return fmt.Errorf("compare: Config.WriteTimeout must be > 0, got %s", c.WriteTimeout)
	case !(c.LogRate > 0):
		return fmt.Errorf("compare: Config.LogRate must be > 0 records per second, got %v", c.LogRate)
	case c.LogBurst < 1:
		return fmt.Errorf("compare: Config.LogBurst must be >= 1, got %d", c.LogBurst)
	}
	if err := c.Rules.Validate(); err != nil {
		return fmt.Errorf("compare: Config.Rules.%w", err)
	}
	return nil
}
