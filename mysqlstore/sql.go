package mysqlstore

import (
	"fmt"
	"strings"
)

// Every statement the store sends lives in this file. Each starts with a
// low-cardinality caller tag in SQLCommenter form, so the server-side query
// log, the processlist and a proxy can attribute it. Values always travel as
// parameters; the few statements whose shape depends on a count (UNION ALL
// branches, multi-row VALUES) are built here from fixed fragments holding
// only placeholders.

// Callers: the tag values, one per business flow.
const (
	callerReserve   = "reserve"
	callerReplenish = "replenish"
	callerClaim     = "claim"
	callerSettle    = "settle"
	callerRelease   = "release"
	callerReap      = "reap"
	callerAdjust    = "adjust"
	callerDeduct    = "deduct"
	callerRead      = "read"
	callerReconcile = "reconcile"
)

func tag(caller string) string { return "/*caller='" + caller + "'*/ " }

// Reserve.
const (
	// Existing hold or claim for a token: the idempotency check.
	sqlReserveExisting = `/*caller='reserve'*/ SELECT 'hold', inventory_item_id, location_id, quantity, expires_at, authority
  FROM reserved_quantities WHERE shop_id = ? AND token = ?
UNION ALL
SELECT 'claim', 0, 0, 0, claimed_at, via FROM reservation_claims WHERE shop_id = ? AND token = ?`

	// A locking read of the token's claims row, after the hold rows are
	// inserted: see reserveCall.claimedMeanwhile.
	sqlReserveClaimedLock = `/*caller='reserve'*/ SELECT 1 FROM reservation_claims WHERE shop_id = ? AND token = ? FOR UPDATE`

	// One branch per line; all lines go in one round trip. Each branch
	// carries its own locking clause: a single one after the UNION is
	// rejected (error 1221).
	sqlReserveUnitsBranch = `(SELECT ? AS line_no, unit_id, NOW(3) AS now FROM available_units
  WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ?
  ORDER BY shop_id, inventory_item_id, location_id, unit_id LIMIT ? FOR UPDATE SKIP LOCKED)`

	// The same select over a range of unit ids [from, below): the scan
	// starts at a random point of the pool instead of its head (see
	// takeUnits for why), and a second pass over [0, from) covers the rest
	// when the first comes up short.
	sqlReserveUnitsRangeBranch = `(SELECT ? AS line_no, unit_id, NOW(3) AS now FROM available_units
  WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ? AND unit_id >= ? AND unit_id < ?
  ORDER BY shop_id, inventory_item_id, location_id, unit_id LIMIT ? FOR UPDATE SKIP LOCKED)`
	// The top of a pool's unit ids, read along with its units (a plain
	// read: no lock, no wait on a refill holding the row), where the next
	// reserve of the pool picks its starting point. line_no is negative:
	// -1 - the line's index.
	sqlReserveNextUnitBranch = `(SELECT ? AS line_no, next_unit_id, NOW(3) AS now FROM pool_replenish_locks
  WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ?)`

	// Deletes are spelled as ORs of primary-key conditions, not as a
	// row-constructor IN: MariaDB 10.11 plans "(a,b,c,d) IN ((1,2,3,4))"
	// with a single tuple as a full scan, and a locking full scan waits on
	// every row other transactions hold (deadlocks, seen in the tests).
	sqlReserveDeletePrefix = `/*caller='reserve'*/ DELETE FROM available_units WHERE `
	sqlReserveDeleteLine   = `(shop_id = ? AND inventory_item_id = ? AND location_id = ? AND unit_id IN (%s))`

	sqlReserveInsertHoldsPrefix = `/*caller='reserve'*/ INSERT INTO reserved_quantities
  (shop_id, token, inventory_item_id, location_id, quantity, expires_at, authority) VALUES `

	// Unheld stock (ledger minus holds) at a line's eligible locations,
	// used to decide whether a short pool is a real stock-out.
	sqlReserveUnheldPrefix = `/*caller='reserve'*/ SELECT l.location_id, l.available - COALESCE((SELECT SUM(r.quantity) FROM reserved_quantities r
    WHERE r.shop_id = l.shop_id AND r.inventory_item_id = l.inventory_item_id AND r.location_id = l.location_id), 0)
  FROM inventory_ledger l WHERE l.shop_id = ? AND l.inventory_item_id = ? AND l.location_id IN `
)

func reserveUnitsQuery(branches int) string {
	return tag(callerReserve) + repeatJoin(sqlReserveUnitsBranch, " UNION ALL ", branches)
}

// reserveUnitsRangeQuery selects units of several lines over unit id
// ranges, and, with next, each line's pool top after them. Arguments: per
// line, line_no, shop, item, location, from, below, limit; then, with next,
// per line, -1-line_no, shop, item, location.
func reserveUnitsRangeQuery(branches int, next bool) string {
	q := tag(callerReserve) + repeatJoin(sqlReserveUnitsRangeBranch, " UNION ALL ", branches)
	if next {
		q += " UNION ALL " + repeatJoin(sqlReserveNextUnitBranch, " UNION ALL ", branches)
	}
	return q
}

// reserveDeleteQuery deletes units of several lines; units[i] is how many
// units line i took. Arguments: per line, shop, item, location, unit ids.
func reserveDeleteQuery(units []int) string {
	var b strings.Builder
	b.WriteString(sqlReserveDeletePrefix)
	for i, n := range units {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString(fmt.Sprintf(sqlReserveDeleteLine, repeatJoin("?", ",", n)))
	}
	return b.String()
}

func reserveInsertHoldsQuery(rows int) string {
	return sqlReserveInsertHoldsPrefix + repeatJoin("(?,?,?,?,?,?,?)", ",", rows)
}

func reserveUnheldQuery(locations int) string {
	return sqlReserveUnheldPrefix + "(" + repeatJoin("?", ",", locations) + ")"
}

// Holds: claim, settle, release, get.
const (
	sqlHoldsLock = `SELECT inventory_item_id, location_id, quantity, expires_at, expires_at > NOW(3), authority
  FROM reserved_quantities WHERE shop_id = ? AND token = ?
  ORDER BY inventory_item_id, location_id FOR UPDATE`
	sqlHoldsRead = `SELECT inventory_item_id, location_id, quantity, expires_at, expires_at > NOW(3), authority
  FROM reserved_quantities WHERE shop_id = ? AND token = ?
  ORDER BY inventory_item_id, location_id`
	sqlHoldsDelete = `DELETE FROM reserved_quantities WHERE shop_id = ? AND token = ?`
	sqlClaimRead   = `SELECT allocations FROM reservation_claims WHERE shop_id = ? AND token = ?`
	sqlClaimInsert = `INSERT INTO reservation_claims (shop_id, token, allocations, via) VALUES (?, ?, ?, ?)`
	sqlClaimHeld   = `UPDATE reservation_claims SET via = ? WHERE shop_id = ? AND token = ?`
	sqlClaimVia    = `SELECT allocations, via FROM reservation_claims WHERE shop_id = ? AND token = ?`
	// The hot row's statement: last in its transaction, guarded so the
	// ledger never goes below zero.
	sqlLedgerDeduct = `UPDATE inventory_ledger SET available = available - ?, version = version + 1
  WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ? AND available >= ?`
)

// Pool: the single-flight lock, the projection snapshot, units in and out.
const (
	sqlPoolGeneration = `SELECT refills FROM pool_replenish_locks
  WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ?`
	sqlPoolLock = `SELECT next_unit_id, refills FROM pool_replenish_locks
  WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ? FOR UPDATE`
	// Creates the lock row if missing and locks it either way. (INSERT
	// IGNORE would take a shared lock and invite a deadlock on upgrade.)
	sqlPoolLockEnsure = `INSERT INTO pool_replenish_locks (shop_id, inventory_item_id, location_id) VALUES (?, ?, ?)
  ON DUPLICATE KEY UPDATE next_unit_id = next_unit_id`
	// One statement, so ledger, holds and pool are read from one snapshot:
	// a claim committing between separate reads would make the sum lie.
	sqlPoolSnapshot = `SELECT COALESCE((SELECT available FROM inventory_ledger
      WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ?), 0),
    (SELECT COALESCE(SUM(quantity), 0) FROM reserved_quantities
      WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ?),
    (SELECT COUNT(*) FROM available_units
      WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ?)`
	sqlPoolInsertPrefix = `INSERT INTO available_units (shop_id, inventory_item_id, location_id, unit_id) VALUES `
	sqlPoolAdvance      = `UPDATE pool_replenish_locks SET next_unit_id = next_unit_id + ?, refills = refills + 1,
    last_replenished_at = NOW(3)
  WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ?`
	// Trim: locking delete without SKIP LOCKED, so units an in-flight
	// reserve holds are waited for; once that reserve commits they are gone
	// and the delete moves on to the next unit.
	sqlPoolTrim = `DELETE FROM available_units
  WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ?
  ORDER BY unit_id LIMIT ?`
)

func poolInsertQuery(caller string, units int) string {
	return tag(caller) + sqlPoolInsertPrefix + repeatJoin("(?,?,?,?)", ",", units)
}

// Reaper.
const (
	sqlReapSelect = `/*caller='reap'*/ SELECT shop_id, token, inventory_item_id, location_id, quantity
  FROM reserved_quantities WHERE expires_at <= NOW(3)
  ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED`
	sqlReapDeletePrefix = `/*caller='reap'*/ DELETE FROM reserved_quantities WHERE `
	sqlReapDeleteRow    = `(shop_id = ? AND token = ? AND inventory_item_id = ? AND location_id = ?)`
)

func reapDeleteQuery(rows int) string {
	return sqlReapDeletePrefix + repeatJoin(sqlReapDeleteRow, " OR ", rows)
}

// Ledger.
const (
	sqlLedgerLock = `/*caller='adjust'*/ SELECT available FROM inventory_ledger
  WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ? FOR UPDATE`
	sqlLedgerUpsert = `/*caller='adjust'*/ INSERT INTO inventory_ledger (shop_id, inventory_item_id, location_id, available)
  VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE available = VALUES(available), version = version + 1`
	// An adjust's key: inserted first in its transaction, so a concurrent
	// repeat waits on the primary key and then finds it taken.
	sqlAdjustKeyInsert = `/*caller='adjust'*/ INSERT INTO stock_adjustments
  (shop_id, adjust_key, inventory_item_id, location_id, request, delta, available) VALUES (?, ?, ?, ?, ?, 0, 0)`
	sqlAdjustKeyResult = `/*caller='adjust'*/ UPDATE stock_adjustments SET delta = ?, available = ? WHERE shop_id = ? AND adjust_key = ?`
	sqlAdjustKeyRead   = `/*caller='adjust'*/ SELECT inventory_item_id, location_id, request, delta, available
  FROM stock_adjustments WHERE shop_id = ? AND adjust_key = ?`
	sqlLedgerRead = `SELECT available FROM inventory_ledger
  WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ?`
	sqlLedgerStock = `/*caller='read'*/ SELECT inventory_item_id, location_id, available FROM inventory_ledger
  WHERE shop_id = ? ORDER BY inventory_item_id, location_id`
	sqlAvailability = `/*caller='read'*/ SELECT l.location_id, l.available - COALESCE((SELECT SUM(r.quantity) FROM reserved_quantities r
    WHERE r.shop_id = l.shop_id AND r.inventory_item_id = l.inventory_item_id AND r.location_id = l.location_id), 0)
  FROM inventory_ledger l WHERE l.shop_id = ? AND l.inventory_item_id = ? ORDER BY l.location_id`
)

// Reconciliation: every item x location with its ledger, holds and pool.
const sqlReconcile = `/*caller='reconcile'*/ SELECT l.shop_id, l.inventory_item_id, l.location_id, l.available,
    COALESCE((SELECT SUM(r.quantity) FROM reserved_quantities r
      WHERE r.shop_id = l.shop_id AND r.inventory_item_id = l.inventory_item_id AND r.location_id = l.location_id), 0),
    (SELECT COUNT(*) FROM available_units u
      WHERE u.shop_id = l.shop_id AND u.inventory_item_id = l.inventory_item_id AND u.location_id = l.location_id)
  FROM inventory_ledger l
  WHERE (? = 0 OR l.shop_id = ?)
  ORDER BY l.shop_id, l.inventory_item_id, l.location_id`

func repeatJoin(s, sep string, n int) string {
	var b strings.Builder
	b.Grow(n * (len(s) + len(sep)))
	for i := range n {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(s)
	}
	return b.String()
}
