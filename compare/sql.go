package compare

import "strings"

// Every statement the comparer sends lives in this file, tagged with its
// caller in SQLCommenter form like mysqlstore's. Values always travel as
// parameters; the multi-row INSERTs are built from fixed fragments holding
// only placeholders.

// Diff records.
const (
	sqlDiffInsertPrefix = `/*caller='compare_diff'*/ INSERT INTO compare_diffs
  (pod, observed_at, mode, op, class, shop_id, token, authority_store, shadow_store, authority, shadow) VALUES `
	sqlDiffInsertRow = `(?,?,?,?,?,?,?,?,?,?,?)`

	sqlDiffColumns = `id, pod, observed_at, mode, op, class, shop_id, token, authority, shadow`
	// Newest first, on idx_compare_diffs_pod_recent.
	sqlDiffRecentPod = `/*caller='compare_read'*/ SELECT ` + sqlDiffColumns + ` FROM compare_diffs
  WHERE pod = ? ORDER BY observed_at DESC, id DESC LIMIT ?`
	// Newest first, on idx_compare_diffs_retention.
	sqlDiffRecentAll = `/*caller='compare_read'*/ SELECT ` + sqlDiffColumns + ` FROM compare_diffs
  ORDER BY observed_at DESC, id DESC LIMIT ?`

	// Oldest first, in batches, on idx_compare_diffs_retention.
	sqlDiffCleanup = `/*caller='compare_cleanup'*/ DELETE FROM compare_diffs
  WHERE observed_at < ? ORDER BY observed_at, id LIMIT ?`
)

// The multi-row statements below are built for rows >= 1 (their callers
// never write an empty batch).

func diffInsertQuery(rows int) string {
	return sqlDiffInsertPrefix + sqlDiffInsertRow + strings.Repeat(","+sqlDiffInsertRow, rows-1)
}

// Stats.
const (
	// Increments, not values: every replica adds its own. VALUES() rather
	// than a row alias, so that MariaDB (which has no row alias) and
	// MySQL 8 both take it. Rows arrive sorted by primary key so that two
	// replicas flushing the same keys lock them in one order.
	sqlStatsUpsertPrefix = `/*caller='compare_flush'*/ INSERT INTO compare_stats
  (pod, window_start, mode, op, class, n,
   authority_n, authority_us_sum, authority_us_max, shadow_n, shadow_us_sum, shadow_us_max) VALUES `
	sqlStatsUpsertRow    = `(?,?,?,?,?,?,?,?,?,?,?,?)`
	sqlStatsUpsertSuffix = ` ON DUPLICATE KEY UPDATE n = n + VALUES(n),
  authority_n = authority_n + VALUES(authority_n),
  authority_us_sum = authority_us_sum + VALUES(authority_us_sum),
  authority_us_max = GREATEST(authority_us_max, VALUES(authority_us_max)),
  shadow_n = shadow_n + VALUES(shadow_n),
  shadow_us_sum = shadow_us_sum + VALUES(shadow_us_sum),
  shadow_us_max = GREATEST(shadow_us_max, VALUES(shadow_us_max))`

	// The first statement of a flush's transaction: a duplicate id means
	// the flush was written before.
	sqlFlushInsert = `/*caller='compare_flush'*/ INSERT INTO compare_flushes (flush_id) VALUES (?)`

	sqlStatsSums = `SUM(n), SUM(authority_n), SUM(authority_us_sum), MAX(authority_us_max),
  SUM(shadow_n), SUM(shadow_us_sum), MAX(shadow_us_max)`
	// On the primary key (pod, window_start, ...).
	sqlTotalsPod = `/*caller='compare_totals'*/ SELECT mode, op, class, ` + sqlStatsSums + `
  FROM compare_stats WHERE pod = ? AND window_start >= ? GROUP BY mode, op, class`
	// On idx_compare_stats_retention (window_start).
	sqlTotalsAll = `/*caller='compare_totals'*/ SELECT mode, op, class, ` + sqlStatsSums + `
  FROM compare_stats WHERE window_start >= ? GROUP BY mode, op, class`

	sqlStatsCleanup = `/*caller='compare_cleanup'*/ DELETE FROM compare_stats
  WHERE window_start < ? ORDER BY window_start, pod, mode, op, class LIMIT ?`
)

// Traffic (traffic.go): increments, like the stats, in the same flush.
const (
	sqlTrafficUpsertPrefix = `/*caller='compare_flush'*/ INSERT INTO compare_traffic (pod, window_start, mode, op, n) VALUES `
	sqlTrafficUpsertRow    = `(?,?,?,?,?)`
	sqlTrafficUpsertSuffix = ` ON DUPLICATE KEY UPDATE n = n + VALUES(n)`

	// On idx_compare_traffic_retention (window_start).
	sqlTraffic = `/*caller='compare_traffic'*/ SELECT pod, mode, SUM(n) FROM compare_traffic
  WHERE window_start >= ? GROUP BY pod, mode`

	sqlTrafficCleanup = `/*caller='compare_cleanup'*/ DELETE FROM compare_traffic
  WHERE window_start < ? ORDER BY window_start, pod, mode, op LIMIT ?`
)

func trafficUpsertQuery(rows int) string {
	return sqlTrafficUpsertPrefix + sqlTrafficUpsertRow + strings.Repeat(","+sqlTrafficUpsertRow, rows-1) + sqlTrafficUpsertSuffix
}

// Oldest first, in batches, on idx_compare_flushes_retention.
const sqlFlushCleanup = `/*caller='compare_cleanup'*/ DELETE FROM compare_flushes
  WHERE flushed_at < ? ORDER BY flushed_at, flush_id LIMIT ?`

func statsUpsertQuery(rows int) string {
	return sqlStatsUpsertPrefix + sqlStatsUpsertRow + strings.Repeat(","+sqlStatsUpsertRow, rows-1) + sqlStatsUpsertSuffix
}
