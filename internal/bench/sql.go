package bench

import "strings"

// Every statement the benchmark sends itself lives here: the baselines'
// tables and transactions, the invariant checks, and the counters it reads
// from the server. Statements on the hot path carry a caller tag like the
// store's, so a processlist shows who is who. Values travel as parameters.

// The baselines' tables, created in the run's own database only.
var sqlCreateBaselines = []string{
	// The single-row baseline: one quantity row per item x location.
	`CREATE TABLE bench_row_stock (
  shop_id     BIGINT NOT NULL,
  item_id     BIGINT NOT NULL,
  location_id BIGINT NOT NULL,
  qty         BIGINT NOT NULL,
  PRIMARY KEY (shop_id, item_id, location_id)
) ENGINE=InnoDB`,
	// The buckets baseline (seed 004): the stock of an item x location
	// split over N rows.
	`CREATE TABLE bench_bucket_stock (
  shop_id     BIGINT NOT NULL,
  item_id     BIGINT NOT NULL,
  location_id BIGINT NOT NULL,
  bucket      INT    NOT NULL,
  qty         BIGINT NOT NULL,
  PRIMARY KEY (shop_id, item_id, location_id, bucket)
) ENGINE=InnoDB`,
	// Both baselines record their holds, as the unit pool does: a
	// reservation that does not say who holds what cannot be released or
	// claimed. (A bucketed hold need not name its bucket: a release may
	// credit any bucket of the item.)
	`CREATE TABLE bench_holds (
  shop_id     BIGINT        NOT NULL,
  token       VARBINARY(64) NOT NULL,
  item_id     BIGINT        NOT NULL,
  location_id BIGINT        NOT NULL,
  quantity    BIGINT        NOT NULL,
  PRIMARY KEY (shop_id, token, item_id, location_id)
) ENGINE=InnoDB`,
	// The commit probe's row.
	`CREATE TABLE bench_probe (
  id INT    NOT NULL PRIMARY KEY,
  n  BIGINT NOT NULL
) ENGINE=InnoDB`,
}

// Baseline reserve: holds first, then the stock rows, so the hot rows'
// locks are held from their UPDATE to COMMIT only, the best a single-row
// design can do.
const (
	sqlBaseHoldsPrefix = `/*caller='reserve'*/ INSERT INTO bench_holds (shop_id, token, item_id, location_id, quantity) VALUES `
	sqlBaseHoldsRow    = `(?,?,?,?,?)`
	sqlRowTake         = `/*caller='reserve'*/ UPDATE bench_row_stock SET qty = qty - ?
  WHERE shop_id = ? AND item_id = ? AND location_id = ? AND qty >= ?`
	sqlBucketTake = `/*caller='reserve'*/ UPDATE bench_bucket_stock SET qty = qty - ?
  WHERE shop_id = ? AND item_id = ? AND location_id = ? AND bucket = ? AND qty >= ?`
	sqlRowStockPrefix    = `INSERT INTO bench_row_stock (shop_id, item_id, location_id, qty) VALUES `
	sqlBucketStockPrefix = `INSERT INTO bench_bucket_stock (shop_id, item_id, location_id, bucket, qty) VALUES `
)

// The baselines' batched attempt: BEGIN, the holds, each line's UPDATE
// with a check that it changed one row (error 1242 otherwise, as
// mysqlstore's sqlExpectRows), COMMIT. Arguments: the holds', then each
// line's UPDATE's.
const (
	sqlBaseBegin     = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\nSTART TRANSACTION;\n"
	sqlBaseExpectRow = ";\nSET @reservoir_rows = (SELECT 1 UNION ALL SELECT 1 FROM DUAL WHERE ROW_COUNT() <> 1)"
	sqlBaseCommit    = ";\nCOMMIT"
)

func baseBatchQuery(lines int, buckets bool) string {
	take := sqlRowTake
	if buckets {
		take = sqlBucketTake
	}
	return sqlBaseBegin + baseHoldsQuery(lines) + ";\n" + join(take+sqlBaseExpectRow, ";\n", lines) + sqlBaseCommit
}

func baseHoldsQuery(rows int) string {
	return sqlBaseHoldsPrefix + join(sqlBaseHoldsRow, ",", rows)
}

func rowStockQuery(rows int) string    { return sqlRowStockPrefix + join("(?,?,?,?)", ",", rows) }
func bucketStockQuery(rows int) string { return sqlBucketStockPrefix + join("(?,?,?,?,?)", ",", rows) }

// Invariant checks, run on the direct connection after a point.
const (
	sqlCheckRow = `SELECT s.item_id, s.qty, COALESCE((SELECT SUM(h.quantity) FROM bench_holds h
    WHERE h.shop_id = s.shop_id AND h.item_id = s.item_id AND h.location_id = s.location_id), 0)
  FROM bench_row_stock s WHERE s.shop_id = ?`
	sqlCheckBuckets = `SELECT s.item_id, SUM(s.qty), MIN(s.qty), COALESCE((SELECT SUM(h.quantity) FROM bench_holds h
    WHERE h.shop_id = s.shop_id AND h.item_id = s.item_id AND h.location_id = s.location_id), 0)
  FROM bench_bucket_stock s WHERE s.shop_id = ? GROUP BY s.shop_id, s.item_id, s.location_id`
	// The unit pool's projection per item: ledger, held, pool.
	sqlCheckPool = `SELECT l.inventory_item_id, l.available,
    COALESCE((SELECT SUM(r.quantity) FROM reserved_quantities r
      WHERE r.shop_id = l.shop_id AND r.inventory_item_id = l.inventory_item_id AND r.location_id = l.location_id), 0),
    (SELECT COUNT(*) FROM available_units u
      WHERE u.shop_id = l.shop_id AND u.inventory_item_id = l.inventory_item_id AND u.location_id = l.location_id)
  FROM inventory_ledger l WHERE l.shop_id = ?`
	sqlCheckClaims = `SELECT COUNT(*) FROM reservation_claims WHERE shop_id = ?`
)

// sqlDiscardFeed drops a finished point's entries of the stores' change
// feed (docs/ownership.md, section 4), once its target is closed.
const sqlDiscardFeed = `/*caller='bench'*/ DELETE FROM reservation_outbox WHERE shop_id = ?`

// Server counters and settings.
const (
	sqlFlushRead      = `SELECT @@GLOBAL.innodb_flush_log_at_trx_commit`
	sqlBinlogRead     = `SELECT @@GLOBAL.log_bin, @@GLOBAL.binlog_format, @@GLOBAL.sync_binlog`
	sqlFlushSet       = `SET GLOBAL innodb_flush_log_at_trx_commit = ?`
	sqlStatusLike     = `SHOW GLOBAL STATUS LIKE ?`
	sqlMonitorEnabled = `SELECT ENABLED FROM information_schema.INNODB_METRICS WHERE NAME = ?`
	sqlMonitorEnable  = `SET GLOBAL innodb_monitor_enable = ?`
	sqlMonitorDisable = `SET GLOBAL innodb_monitor_disable = ?`
	sqlMonitorCount   = `SELECT COUNT FROM information_schema.INNODB_METRICS WHERE NAME = ?`
	sqlPidFile        = `SELECT @@pid_file`
	sqlNoop           = `/*caller='probe'*/ DO 1`
	sqlProbeEnsure    = `/*caller='probe'*/ INSERT IGNORE INTO bench_probe (id, n) VALUES (1, 0)`
	sqlProbeTouch     = `/*caller='probe'*/ UPDATE bench_probe SET n = n + 1 WHERE id = 1`
)

const monitorLockRequests = "lock_rec_lock_requests"

// statusVars are the global status variables read at each window's edges.
var statusVars = []string{"Innodb_os_log_fsyncs", "Innodb_data_fsyncs", "Innodb_row_lock_waits",
	"Innodb_row_lock_time", "Innodb_history_list_length", "Innodb_rows_read", "Innodb_rows_deleted"}

func statusQuery() string {
	return `SHOW GLOBAL STATUS WHERE Variable_name IN (` + join("?", ",", len(statusVars)) + `)`
}

func join(s, sep string, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(s)
	}
	return b.String()
}

// The undo InnoDB has still to purge (the history list length; MySQL 8
// and MariaDB both count it here): the handoff scenario waits for it to
// drain after loading its shop, so that the switches are measured on a
// server doing the pod's work, not the load's cleanup.
const sqlHistoryLength = `/*caller='bench'*/ SELECT count FROM information_schema.INNODB_METRICS WHERE name = 'trx_rseg_history_len'`
