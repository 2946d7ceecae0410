package controldb

import (
	"context"
	"strings"
	"time"
)

// The comparer's tables (callers: compare's Comparer). Sampled diff
// records, stats and traffic increments flushed exactly once (a flush id
// in compare_flushes guards each flush's transaction), and their
// retention, oldest first in batches.

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
  SUM(shadow_n), SUM(shadow_us_sum), MAX(shadow_us_max), MIN(window_start)`
	// On the primary key (pod, window_start, ...).
	sqlTotalsPod = `/*caller='compare_totals'*/ SELECT mode, op, class, ` + sqlStatsSums + `
  FROM compare_stats WHERE pod = ? AND window_start >= ? GROUP BY mode, op, class`
	// On idx_compare_stats_retention (window_start).
	sqlTotalsAll = `/*caller='compare_totals'*/ SELECT mode, op, class, ` + sqlStatsSums + `
  FROM compare_stats WHERE window_start >= ? GROUP BY mode, op, class`

	sqlStatsCleanup = `/*caller='compare_cleanup'*/ DELETE FROM compare_stats
  WHERE window_start < ? ORDER BY window_start, pod, mode, op, class LIMIT ?`
)

// Traffic: increments, like the stats, in the same flush.
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

// Oldest first, in batches, on idx_compare_flushes_retention.
const sqlFlushCleanup = `/*caller='compare_cleanup'*/ DELETE FROM compare_flushes
  WHERE flushed_at < ? ORDER BY flushed_at, flush_id LIMIT ?`

// The multi-row statements below are built for rows >= 1 (their callers
// never send an empty batch).

func diffInsertQuery(rows int) string {
	return sqlDiffInsertPrefix + sqlDiffInsertRow + strings.Repeat(","+sqlDiffInsertRow, rows-1)
}

func statsUpsertQuery(rows int) string {
	return sqlStatsUpsertPrefix + sqlStatsUpsertRow + strings.Repeat(","+sqlStatsUpsertRow, rows-1) + sqlStatsUpsertSuffix
}

func trafficUpsertQuery(rows int) string {
	return sqlTrafficUpsertPrefix + sqlTrafficUpsertRow + strings.Repeat(","+sqlTrafficUpsertRow, rows-1) + sqlTrafficUpsertSuffix
}

// upsertChunk is the most rows one stats or traffic upsert carries.
const upsertChunk = 500

// DiffRow is one compare_diffs row: a sampled non-match observation. The
// caller cuts each text to its column's width and encodes the outcomes
// (Authority, Shadow) as JSON.
type DiffRow struct {
	// ID is the row id (assigned by the database; ignored by InsertDiffs).
	ID int64
	// Pod, Mode, Op and Class are the observation's labels and class.
	Pod, Mode, Op, Class string
	// ObservedAt is when the call started.
	ObservedAt time.Time
	// ShopID and Token identify the reservation.
	ShopID int64
	Token  string
	// AuthorityStore and ShadowStore name each side's store. RecentDiffs
	// leaves them empty: the outcomes' JSON carries them.
	AuthorityStore, ShadowStore string
	// Authority and Shadow are the outcomes, as JSON.
	Authority, Shadow string
}

// InsertDiffs writes rows in one multi-row INSERT (nothing for none).
func InsertDiffs(ctx context.Context, q Querier, rows []DiffRow) error {
	if len(rows) == 0 {
		return nil
	}
	args := make([]any, 0, len(rows)*11)
	for _, r := range rows {
		args = append(args, r.Pod, r.ObservedAt, r.Mode, r.Op, r.Class, r.ShopID, r.Token,
			r.AuthorityStore, r.ShadowStore, r.Authority, r.Shadow)
	}
	_, err := q.ExecContext(ctx, diffInsertQuery(len(rows)), args...)
	return err
}

// RecentDiffs returns the newest limit diff rows of pod (of every pod
// when pod is ""), newest first (by observed_at, then id).
func RecentDiffs(ctx context.Context, q Querier, pod string, limit int) ([]DiffRow, error) {
	query, args := sqlDiffRecentPod, []any{pod, limit}
	if pod == "" {
		query, args = sqlDiffRecentAll, []any{limit}
	}
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []DiffRow
	for rows.Next() {
		var r DiffRow
		if err := rows.Scan(&r.ID, &r.Pod, &r.ObservedAt, &r.Mode, &r.Op, &r.Class, &r.ShopID, &r.Token, &r.Authority, &r.Shadow); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// InsertFlush records a stats flush's id: the first statement of the
// flush's transaction, so that a retry of a flush the server applied
// fails here (IsDuplicate) instead of counting its increments twice.
func InsertFlush(ctx context.Context, q Querier, id []byte) error {
	_, err := q.ExecContext(ctx, sqlFlushInsert, id)
	return err
}

// StatsRow is one compare_stats row's increments: the observations of a
// (pod, window, mode, op, class) and each side's latencies in
// microseconds.
type StatsRow struct {
	// Pod, WindowStart, Mode, Op and Class are the row's primary key
	// (WindowStart in UTC, a multiple of the comparer's window).
	Pod         string
	WindowStart time.Time
	Mode        string
	Op          string
	Class       string
	// N is the observations to add.
	N int64
	// AuthorityN, AuthorityUsSum and AuthorityUsMax are the authority's
	// timed calls, their sum and the longest; Shadow* the shadow's.
	AuthorityN, AuthorityUsSum, AuthorityUsMax int64
	ShadowN, ShadowUsSum, ShadowUsMax          int64
}

// UpsertStats adds rows to compare_stats (counts and sums added, maxima
// kept), in statements of at most 500 rows in the order given. Give them
// sorted by primary key (pod, window_start, mode, op, class), so that two
// replicas flushing the same keys lock them in one order; and run it in
// the flush's transaction, after InsertFlush.
func UpsertStats(ctx context.Context, q Querier, rows []StatsRow) error {
	for i := 0; i < len(rows); i += upsertChunk {
		chunk := rows[i:min(i+upsertChunk, len(rows))]
		args := make([]any, 0, len(chunk)*12)
		for _, r := range chunk {
			args = append(args, r.Pod, r.WindowStart, r.Mode, r.Op, r.Class, r.N,
				r.AuthorityN, r.AuthorityUsSum, r.AuthorityUsMax, r.ShadowN, r.ShadowUsSum, r.ShadowUsMax)
		}
		if _, err := q.ExecContext(ctx, statsUpsertQuery(len(chunk)), args...); err != nil {
			return err
		}
	}
	return nil
}

// TrafficRow is one compare_traffic row's increment: the calls a pod's
// facades took in a window, mode and operation.
type TrafficRow struct {
	// Pod, WindowStart, Mode and Op are the row's primary key.
	Pod         string
	WindowStart time.Time
	Mode        string
	Op          string
	// N is the calls to add.
	N int64
}

// UpsertTraffic adds rows to compare_traffic, in statements of at most
// 500 rows in the order given: sorted by primary key (pod, window_start,
// mode, op), in the flush's transaction, like UpsertStats.
func UpsertTraffic(ctx context.Context, q Querier, rows []TrafficRow) error {
	for i := 0; i < len(rows); i += upsertChunk {
		chunk := rows[i:min(i+upsertChunk, len(rows))]
		args := make([]any, 0, len(chunk)*5)
		for _, r := range chunk {
			args = append(args, r.Pod, r.WindowStart, r.Mode, r.Op, r.N)
		}
		if _, err := q.ExecContext(ctx, trafficUpsertQuery(len(chunk)), args...); err != nil {
			return err
		}
	}
	return nil
}

// StatsSum is compare_stats summed over pods, windows and replicas for
// one (mode, op, class): counts and sums added, maxima the largest.
type StatsSum struct {
	// Mode, Op and Class are what it sums over.
	Mode, Op, Class string
	// N is the observations; the Authority* and Shadow* fields are as in
	// StatsRow.
	N                                          int64
	AuthorityN, AuthorityUsSum, AuthorityUsMax int64
	ShadowN, ShadowUsSum, ShadowUsMax          int64
	// First is the start of the earliest window summed.
	First time.Time
}

// SumStats sums compare_stats of pod (every pod when pod is "") over the
// windows that start at or after since, per mode, op and class.
func SumStats(ctx context.Context, q Querier, pod string, since time.Time) ([]StatsSum, error) {
	query, args := sqlTotalsPod, []any{pod, since}
	if pod == "" {
		query, args = sqlTotalsAll, []any{since}
	}
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []StatsSum
	for rows.Next() {
		var s StatsSum
		if err := rows.Scan(&s.Mode, &s.Op, &s.Class, &s.N, &s.AuthorityN, &s.AuthorityUsSum, &s.AuthorityUsMax,
			&s.ShadowN, &s.ShadowUsSum, &s.ShadowUsMax, &s.First); err != nil {
			return nil, err
		}
		s.First = s.First.UTC()
		out = append(out, s)
	}
	return out, rows.Err()
}

// TrafficSum is compare_traffic summed over windows, operations and
// replicas for one pod and mode.
type TrafficSum struct {
	// Pod and Mode are what it sums over.
	Pod, Mode string
	// N is the calls.
	N int64
}

// SumTraffic sums compare_traffic per pod and mode over the windows that
// start at or after since.
func SumTraffic(ctx context.Context, q Querier, since time.Time) ([]TrafficSum, error) {
	rows, err := q.QueryContext(ctx, sqlTraffic, since)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []TrafficSum
	for rows.Next() {
		var s TrafficSum
		if err := rows.Scan(&s.Pod, &s.Mode, &s.N); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// DeleteDiffsBefore deletes at most limit diff rows observed before
// before, oldest first, and returns how many it deleted: fewer than
// limit means none is left. Retention calls it until then, one short
// statement at a time, so it never holds many locks for long; so do the
// three below.
func DeleteDiffsBefore(ctx context.Context, q Querier, before time.Time, limit int) (int64, error) {
	return deleteBatch(ctx, q, sqlDiffCleanup, before, limit)
}

// DeleteStatsBefore deletes at most limit compare_stats rows of windows
// that started before before, oldest first (as DeleteDiffsBefore).
func DeleteStatsBefore(ctx context.Context, q Querier, before time.Time, limit int) (int64, error) {
	return deleteBatch(ctx, q, sqlStatsCleanup, before, limit)
}

// DeleteTrafficBefore deletes at most limit compare_traffic rows of
// windows that started before before, oldest first (as
// DeleteDiffsBefore).
func DeleteTrafficBefore(ctx context.Context, q Querier, before time.Time, limit int) (int64, error) {
	return deleteBatch(ctx, q, sqlTrafficCleanup, before, limit)
}

// DeleteFlushesBefore deletes at most limit flush ids recorded before
// before, oldest first (as DeleteDiffsBefore). Keep them at least as long
// as the stats they guard.
func DeleteFlushesBefore(ctx context.Context, q Querier, before time.Time, limit int) (int64, error) {
	return deleteBatch(ctx, q, sqlFlushCleanup, before, limit)
}

func deleteBatch(ctx context.Context, q Querier, query string, before time.Time, limit int) (int64, error) {
	res, err := q.ExecContext(ctx, query, before, limit)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
