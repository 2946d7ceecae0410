package mysqlstore

import (
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Config configures a Store. New applies WithDefaults, then Validate.
type Config struct {
	// DB is the database holding the ledger and the pool tables. Required.
	// Open it with Open, or give its DSN the session settings Open adds.
	DB *sql.DB
	// PoolCap is the most units kept in the pool of one item x location.
	// Default: 1000.
	PoolCap int64
	// Limits bound input. Default: reservation.DefaultLimits, with
	// MaxQuantity lowered to PoolCap (a line must fit in one pool).
	Limits reservation.Limits
	// Registerer receives the store's metrics. Default: a private registry
	// (metrics are kept but not exported). Never the global one.
	Registerer prometheus.Registerer
	// RetryAttempts is how often a transaction is tried when it hits a
	// deadlock (1213) or a lock wait timeout (1205). Default: 8.
	RetryAttempts int
	// RetryBase is the first backoff; each retry doubles it, with jitter.
	// Default: 2ms.
	RetryBase time.Duration
	// RetryMax caps the backoff. Default: 100ms.
	RetryMax time.Duration
	// ReserveAttempts bounds how often Reserve goes back to the pool after
	// finding it short while the ledger still has stock (replenish, units
	// locked by others). Past it, Reserve returns ErrContention rather than
	// a false "insufficient". Default: 64.
	ReserveAttempts int
	// ReapBatch is the default number of reservations one Reap expires
	// (and of tombstones it forgets). Default: 500.
	ReapBatch int
	// TombstoneTTL is how long a reservation's terminal state (claimed,
	// released, expired, refused) is kept after it is reached: while it
	// is, a late claim answers expired or released, and a late or repeated
	// reserve cannot hold the token again. It must outlive any hold (at
	// least Limits.MaxTTL). Default: reservation.DefaultTombstoneTTL.
	TombstoneTTL time.Duration
	// ScanFromHead makes every reserve scan its pool from the lowest unit
	// id, as the store did before reserves started at a random point of the
	// pool. It is slower under concurrency (every scan walks over the units
	// other reservers hold and over those deleted and not yet purged) and
	// is kept to measure the difference (reservoir bench, variant
	// pool-headscan). Default: false.
	ScanFromHead bool
	// SeparateRefills makes every reserver that finds a pool short run its
	// own replenish, queueing on the pool's replenish lock row with a
	// connection, even while another reserver of this store is refilling
	// that pool, as the store did before such reservers waited for the
	// refill in flight. Under concurrency it turns each refill into a herd
	// on the lock row; it is kept to measure the difference (reservoir
	// bench, variant pool-before). Default: false.
	SeparateRefills bool
	// NoFeed skips writing the change feed (reservation_outbox), so Redis
	// never learns what this store decided: a kill switch after it loses
	// every hold taken in MySQL mode. It exists only to measure what the
	// feed costs (reservoir bench, variant facade-mysql-nofeed) and must
	// never be set on a store that serves. Default: false.
	NoFeed bool
	// Unbatched sends every statement of a reserve, claim, release and
	// deduct as its own round trip, BEGIN and COMMIT included, as the store
	// did before it sent each transaction's statements in multi-statement
	// batches (see txn). It costs several round trips per call, and a
	// claim holds the ledger row across one; it is kept to measure the
	// difference (reservoir bench, variants ending in -unbatched).
	// Default: false.
	Unbatched bool
	// GroupSize is how many concurrent claims (Claim as authority, and the
	// legacy claim's Deduct) one transaction may carry (see combiner); 1
	// runs each in its own transaction, as before claims were combined
	// (reservoir bench, variants ending in -alone). Default: 64.
	GroupSize int
	// PoolConcurrency is how many reserve transactions of one pool may run
	// at once; more wait in the store, holding no connection (see gates).
	// -1: no bound, as before (reservoir bench, variants ending in
	// -ungated). Default: 16.
	PoolConcurrency int
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.PoolCap == 0 {
		c.PoolCap = 1000
	}
	if c.Limits.MaxQuantity == 0 {
		c.Limits.MaxQuantity = min(reservation.DefaultLimits.MaxQuantity, c.PoolCap)
	}
	c.Limits = c.Limits.WithDefaults()
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.RetryAttempts == 0 {
		c.RetryAttempts = 8
	}
	if c.RetryBase == 0 {
		c.RetryBase = 2 * time.Millisecond
	}
	if c.RetryMax == 0 {
		c.RetryMax = 100 * time.Millisecond
	}
	if c.ReserveAttempts == 0 {
		c.ReserveAttempts = 64
	}
	if c.ReapBatch == 0 {
		c.ReapBatch = 500
	}
	if c.PoolConcurrency == 0 {
		c.PoolConcurrency = 16
	}
	if c.GroupSize == 0 {
		c.GroupSize = 64
	}
	if c.TombstoneTTL == 0 {
		c.TombstoneTTL = reservation.DefaultTombstoneTTL
	}
	return c
}

// Validate reports a setting that cannot work, naming the field.
func (c Config) Validate() error {
	switch {
	case c.DB == nil:
		return errors.New("mysqlstore: Config.DB is required")
	case c.PoolCap < 1 || c.PoolCap > 100000:
		return fmt.Errorf("mysqlstore: Config.PoolCap must be between 1 and 100000, got %d", c.PoolCap)
	case c.Limits.MaxQuantity > c.PoolCap:
		return fmt.Errorf("mysqlstore: Config.Limits.MaxQuantity %d exceeds PoolCap %d: a line must fit in one pool", c.Limits.MaxQuantity, c.PoolCap)
	case c.RetryAttempts < 1:
		return fmt.Errorf("mysqlstore: Config.RetryAttempts must be >= 1, got %d", c.RetryAttempts)
	case c.RetryBase <= 0 || c.RetryMax < c.RetryBase:
		return fmt.Errorf("mysqlstore: Config.RetryBase (%s) must be > 0 and <= RetryMax (%s)", c.RetryBase, c.RetryMax)
	case c.ReserveAttempts < 1:
		return fmt.Errorf("mysqlstore: Config.ReserveAttempts must be >= 1, got %d", c.ReserveAttempts)
	case c.PoolConcurrency < -1 || c.PoolConcurrency > 10000:
		return fmt.Errorf("mysqlstore: Config.PoolConcurrency must be -1 (no bound) or between 1 and 10000, got %d", c.PoolConcurrency)
	case c.GroupSize < 1 || c.GroupSize > 1000:
		return fmt.Errorf("mysqlstore: Config.GroupSize must be between 1 and 1000, got %d", c.GroupSize)
	case c.ReapBatch < 1:
		return fmt.Errorf("mysqlstore: Config.ReapBatch must be >= 1, got %d", c.ReapBatch)
	case c.TombstoneTTL < c.Limits.MaxTTL || c.TombstoneTTL%time.Second != 0:
		return fmt.Errorf("mysqlstore: Config.TombstoneTTL %s must be whole seconds and at least Limits.MaxTTL %s: a tombstone must outlive any hold", c.TombstoneTTL, c.Limits.MaxTTL)
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("mysqlstore: Config.Limits: %w", err)
	}
	return nil
}

// Session settings every connection needs. Lock waits are short: a buyer
// will not wait 50 s, and a connection pinned that long starves everyone
// (innodb_lock_wait_timeout for rows; lock_wait_timeout for metadata locks,
// which SKIP LOCKED still waits on and which MariaDB defaults to a day).
// The isolation level is deliberately absent: it is set per transaction
// (MariaDB rejects transaction_isolation in the DSN with error 1193).
var sessionParams = map[string]string{
	"time_zone":                "'+00:00'",
	"innodb_lock_wait_timeout": "2",
	"lock_wait_timeout":        "5",
}

// DSN returns dsn with the settings the store relies on: UTC times parsed
// into time.Time, client-side parameter interpolation (one round trip per
// statement instead of prepare/execute/close), multi-statement batches
// (several statements of a transaction in one round trip, see txn), and
// short lock waits. Settings already in dsn win.
//
// Multi-statements let a value that became SQL text run as a statement of
// its own. None can here: every statement of the module is constant text
// (internal/sqlcheck checks it in the tests) and values only travel as
// parameters, which the driver escapes.
func DSN(dsn string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("mysqlstore: parse DSN: %w", err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
	cfg.MultiStatements = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	for k, v := range sessionParams {
		if _, ok := cfg.Params[k]; !ok {
			cfg.Params[k] = v
		}
	}
	return cfg.FormatDSN(), nil
}

// Open opens a connection pool on dsn with DSN's settings.
func Open(dsn string) (*sql.DB, error) {
	full, err := DSN(dsn)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("mysql", full)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: open: %w", err)
	}
	db.SetConnMaxLifetime(5 * time.Minute)
	db.SetMaxIdleConns(64)
	return db, nil
}
