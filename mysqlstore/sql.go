package mysqlstore

import (
	"fmt"
	"strings"
	"time"
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
	callerRefuse    = "refuse"
	callerFeed      = "feed"
	callerHandoff   = "handoff"
	callerForget    = "forget"
	callerLease     = "lease"
	callerCopy      = "copy"
)

func tag(caller string) string { return "/*caller='" + caller + "'*/ " }

// A batched transaction's own statements (see txn). SET TRANSACTION
// applies to the next transaction only.
const (
	sqlReadCommitted = `SET TRANSACTION ISOLATION LEVEL READ COMMITTED`
	sqlStart         = `START TRANSACTION`
	sqlCommit        = `COMMIT`
	sqlRollback      = `ROLLBACK`
)

// Reserve.
const (
	// The shop's fence (shared lock: a handoff waits for this transaction)
	// and the token's state (a plain read: the idempotency check), in one
	// round trip. Each branch carries its own locking clause.
	sqlReserveExisting = `/*caller='reserve'*/ ` + sqlFenceAndState

	// The shop's fence again, at the end of a shadow write whose first read
	// found no fence row: a handoff to MySQL may have created it since (see
	// Store.checkShadowFence).
	sqlShadowFence = `SELECT decider, epoch, copying FROM reservation_fences WHERE shop_id = ? AND slot = ? LOCK IN SHARE MODE`

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

	sqlReserveInsertHoldsPrefix = `INSERT INTO reserved_quantities
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

func insertHoldsQuery(caller string, rows int) string {
	return tag(caller) + sqlReserveInsertHoldsPrefix + repeatJoin("(?,?,?,?,?,?,?)", ",", rows)
}

func reserveUnheldQuery(locations int) string {
	return sqlReserveUnheldPrefix + "(" + repeatJoin("?", ",", locations) + ")"
}

// The fence and a reservation's state row in one round trip. Arguments:
// shop (fence), shop, token. Rows: ('fence', decider, copying, ”, epoch, NULL)
// and ('state', state, allocations, short, 0, expires_at), each at most
// once.
const sqlFenceAndState = `(SELECT 'fence' AS kind, decider AS a, CAST(copying AS CHAR) AS b, '' AS c, epoch AS n, NULL AS t
  FROM reservation_fences WHERE shop_id = ? AND slot = ? LOCK IN SHARE MODE)
UNION ALL
(SELECT 'state', state, allocations, short, 0, expires_at FROM reservations WHERE shop_id = ? AND token = ?)`

// The same with the state row locked for update, and the token's claims
// row, which outlives the state row (its tombstone is forgotten after a
// while): a token claimed long ago is still claimed. Every transition of a
// reservation (claim, release) takes it first. Arguments: shop, slot,
// shop, token, shop, token; the claims row comes as ('claim', ”,
// allocations (JSON), ”, 0, NULL).
const sqlFenceAndStateLock = `(SELECT 'fence' AS kind, decider AS a, CAST(copying AS CHAR) AS b, '' AS c, epoch AS n, NULL AS t
  FROM reservation_fences WHERE shop_id = ? AND slot = ? LOCK IN SHARE MODE)
UNION ALL
(SELECT 'state', state, allocations, short, 0, expires_at FROM reservations WHERE shop_id = ? AND token = ? FOR UPDATE)
UNION ALL
(SELECT 'claim', '', allocations, '', 0, NULL FROM reservation_claims WHERE shop_id = ? AND token = ?)`

// Reservation state rows and their hold lines.
const (
	// A new reservation's row. A duplicate key means another call with the
	// token got there first.
	sqlStateInsert = `INSERT INTO reservations (shop_id, token, state, decided_by, allocations, short, expires_at)
  VALUES (?, ?, ?, ?, ?, ?, COALESCE(?, NOW(3)))`
	// A transition out of held, guarded: the hold must still be held and,
	// with the live guard, unexpired by the clock of this statement, which
	// runs after the row lock was taken (a claim that waited on the lock
	// must not judge liveness by the time it started waiting).
	sqlStateEnd = `UPDATE reservations SET state = ?, decided_by = ?, changed_at = NOW(3)
  WHERE shop_id = ? AND token = ? AND state = 'held'`
	// The database's clock. In a batch after a locking read it is read once
	// that lock is held: each statement has its own NOW(3), and a claim
	// that waited on the lock must not judge liveness by the time it
	// started waiting.
	sqlNow = `SELECT NOW(3)`
	// The legacy claim's record of the claim (Deduct): whatever this store
	// had for the token, the ledger's claim is the truth now.
	sqlStateClaimedPrefix = `INSERT INTO reservations (shop_id, token, state, decided_by, allocations, short, expires_at) VALUES `
	sqlStateClaimedRow    = `(?, ?, 'claimed', 'redis', ?, '', NOW(3))`
	sqlStateClaimedSuffix = ` ON DUPLICATE KEY UPDATE state = 'claimed', decided_by = 'redis', allocations = VALUES(allocations),
    expires_at = GREATEST(expires_at, NOW(3)), changed_at = NOW(3)`
	sqlStateRead = `SELECT state, allocations, short, expires_at, decided_by FROM reservations WHERE shop_id = ? AND token = ?`
	// A read as the shop's decider (Get with AsDecider): the fence slot of
	// the token and its state in one statement, one read view, no locks.
	sqlStateReadDecided = `(SELECT 'fence' AS kind, decider AS a, '' AS b, '' AS d, epoch AS n, NULL AS t
  FROM reservation_fences WHERE shop_id = ? AND slot = ?)
UNION ALL
(SELECT 'state', state, allocations, decided_by, 0, expires_at FROM reservations WHERE shop_id = ? AND token = ?)`
	sqlHoldsDelete = `DELETE FROM reserved_quantities WHERE shop_id = ? AND token = ?`
	sqlClaimRead   = `SELECT allocations FROM reservation_claims WHERE shop_id = ? AND token = ?`
	sqlClaimInsert = `INSERT INTO reservation_claims (shop_id, token, allocations, via) VALUES (?, ?, ?, ?)`
	// The claims of a group (see combiner), claims and legacy deducts:
	// their claims rows, their reservations' rows (locked), this store's
	// hold lines of them (locked), their shops' fence slots (shared) and,
	// in the last batch, the ends of their reservations and the removal of
	// their hold lines. Each condition list is one sqlTokenCond (or
	// sqlFenceSlotCond) per call, joined by OR. The locking reads force
	// the primary key: on a small table the optimizer would rather scan
	// it whole, and a scan waits for (and locks) other groups' rows, which
	// is a deadlock between two groups in flight. The writes that follow
	// go one statement per token (a single-table DELETE takes no index
	// hint in MySQL), each a lookup by primary key.
	sqlGroupClaimsPrefix  = `INSERT INTO reservation_claims (shop_id, token, allocations, via) VALUES `
	sqlGroupHoldsPrefix   = `SELECT shop_id, token, inventory_item_id, location_id, quantity FROM reserved_quantities FORCE INDEX (PRIMARY) WHERE `
	sqlGroupStatesPrefix  = `SELECT shop_id, token, state, allocations, expires_at FROM reservations FORCE INDEX (PRIMARY) WHERE `
	sqlGroupClaimedPrefix = `SELECT shop_id, token, allocations FROM reservation_claims FORCE INDEX (PRIMARY) WHERE `
	sqlGroupFencesPrefix  = `SELECT shop_id, slot, decider, epoch FROM reservation_fences FORCE INDEX (PRIMARY) WHERE `
	sqlFenceSlotCond      = `(shop_id = ? AND slot = ?)`
	// The hot row's statement: last in its transaction, guarded so the
	// ledger never goes below zero, and followed by sqlExpectRows (1): a
	// row the guard (or a missing ledger row) left alone fails the batch
	// before its COMMIT.
	sqlLedgerDeduct = `UPDATE inventory_ledger SET available = available - ?, version = version + 1
  WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ? AND available >= ?`
	// sqlExpectRows fails its batch unless the statement before it changed
	// exactly ? rows. A batch cannot branch on what a statement did, and
	// writes that ride with their COMMIT must not commit when one of them
	// found less than it had to change. ROW_COUNT() is the previous
	// statement's count; when it is wrong the scalar subquery has two rows,
	// which is error 1242 (ER_SUBQUERY_NO_1_ROW) in MySQL and MariaDB alike
	// (neither has a portable way to raise an error outside a stored
	// program), and a batch stops at its first error. It is a SET, not a
	// SELECT, so it adds no result set to a batch (and MariaDB's DO
	// ignores the error).
	sqlExpectRows = `SET @reservoir_rows = (SELECT 1 UNION ALL SELECT 1 FROM DUAL WHERE ROW_COUNT() <> ?)`
	// A state change for Redis to follow, with the writing call's trace
	// context (NULL outside a recording trace: traceparent).
	sqlFeedState = `INSERT INTO reservation_outbox (shop_id, kind, token, trace) VALUES (?, 'state', ?, ?)`
	// The same, for a reserve whose cart the relay compares (Change.Cart).
	sqlFeedStateCart = `INSERT INTO reservation_outbox (shop_id, kind, token, trace, cart, cart_label) VALUES (?, 'state', ?, ?, ?, ?)`
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
	// The ledger row, locked shared by a refill before its snapshot.
	sqlLedgerShare = `SELECT available FROM inventory_ledger
  WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ? LOCK IN SHARE MODE`
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
	// Held reservations past their expiry, oldest first, whole (the state
	// row stands for every line of the cart, so a claim holding it is never
	// split by the reaper), except in shops being copied into MySQL: their
	// holds are Redis's, copied ahead of a cut-over, and only the decider
	// expires them (Redis before the cut-over; MySQL after it, telling
	// Redis). Skipping them here, not after the select, keeps a long copy's
	// due holds from filling every batch.
	sqlReapSelect = `/*caller='reap'*/ SELECT shop_id, token, allocations FROM reservations
  WHERE state = 'held' AND expires_at <= NOW(3)
    AND NOT EXISTS (SELECT 1 FROM reservation_fences f WHERE f.shop_id = reservations.shop_id AND f.slot = 0 AND f.copying <> 0)
  ORDER BY state, expires_at LIMIT ? FOR UPDATE SKIP LOCKED`
	// The due shops' fences, locked until the reap commits: which MySQL
	// decides, and which a copy began on since the select (their holds are
	// left alone, as the select would have).
	sqlReapFencesPrefix = `/*caller='reap'*/ SELECT shop_id, decider, copying FROM reservation_fences WHERE slot = 0 AND shop_id IN (`
	sqlReapExpirePrefix = `/*caller='reap'*/ UPDATE reservations SET state = 'expired', changed_at = NOW(3)
  WHERE state = 'held' AND (`
	sqlReapDeletePrefix = `/*caller='reap'*/ DELETE FROM reserved_quantities WHERE `
	sqlTokenCond        = `(shop_id = ? AND token = ?)`
	sqlFeedStatesPrefix = `INSERT INTO reservation_outbox (shop_id, kind, token) VALUES `

	// Tombstones past their time (their hold's expiry older than the
	// retention), through idx_reservations_due, unless Redis may still have
	// to be told about them: the oldest pending change is older than their
	// last change.
	sqlForget = `/*caller='forget'*/ DELETE FROM reservations
  WHERE state IN ('claimed', 'released', 'expired', 'refused') AND expires_at <= NOW(3) - INTERVAL ? SECOND
    AND changed_at < COALESCE((SELECT created_at FROM reservation_outbox ORDER BY id LIMIT 1), NOW(3))
  LIMIT ?`
)

func reapFencesQuery(shops int) string {
	return sqlReapFencesPrefix + repeatJoin("?", ",", shops) + ") LOCK IN SHARE MODE"
}

func reapExpireQuery(tokens int) string {
	return sqlReapExpirePrefix + repeatJoin(sqlTokenCond, " OR ", tokens) + ")"
}

func reapDeleteQuery(tokens int) string {
	return sqlReapDeletePrefix + repeatJoin(sqlTokenCond, " OR ", tokens)
}

// feedDoneQuery deletes n delivered changes, their ids sorted (Done says
// why the ORDER BY and LIMIT).
func feedDoneQuery(n int) string {
	return `/*caller='feed'*/ DELETE FROM reservation_outbox WHERE id IN (` + repeatJoin("?", ",", n) + `) ORDER BY id LIMIT ?`
}

// relayDoneQuery is feedDoneQuery as a transaction of its own at READ
// COMMITTED (Done says why); inside a transaction, use feedDoneQuery.
func relayDoneQuery(n int) string {
	return sqlReadCommitted + ";\n" + feedDoneQuery(n)
}

func groupClaimsQuery(caller string, rows int) string {
	return tag(caller) + sqlGroupClaimsPrefix + repeatJoin("(?, ?, ?, ?)", ",", rows)
}

func deductStatesQuery(rows int) string {
	return tag(callerDeduct) + sqlStateClaimedPrefix + repeatJoin(sqlStateClaimedRow, ",", rows) + sqlStateClaimedSuffix
}

func groupHoldsQuery(caller string, tokens int) string {
	return tag(caller) + sqlGroupHoldsPrefix + repeatJoin(sqlTokenCond, " OR ", tokens) + " FOR UPDATE"
}

func groupStatesQuery(caller string, tokens int) string {
	return tag(caller) + sqlGroupStatesPrefix + repeatJoin(sqlTokenCond, " OR ", tokens) + " FOR UPDATE"
}

func groupClaimedQuery(caller string, tokens int) string {
	return tag(caller) + sqlGroupClaimedPrefix + repeatJoin(sqlTokenCond, " OR ", tokens)
}

func groupFencesQuery(caller string, slots int) string {
	return tag(caller) + sqlGroupFencesPrefix + repeatJoin(sqlFenceSlotCond, " OR ", slots) + " LOCK IN SHARE MODE"
}

func feedStatesQuery(caller string, rows int) string {
	return tag(caller) + sqlFeedStatesPrefix + repeatJoin("(?, 'state', ?)", ",", rows)
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
	sqlAdjustKeyResult = `/*caller='adjust'*/ UPDATE stock_adjustments SET delta = ?, available = ?, change_id = ? WHERE shop_id = ? AND adjust_key = ?`
	sqlAdjustKeyRead   = `/*caller='adjust'*/ SELECT inventory_item_id, location_id, request, delta, available, change_id
  FROM stock_adjustments WHERE shop_id = ? AND adjust_key = ?`
	// A ledger change for Redis to follow; its id is the change's.
	sqlFeedAdjust = `INSERT INTO reservation_outbox (shop_id, kind, item_id, location_id, delta, trace) VALUES (?, 'adjust', ?, ?, ?, ?)`
	sqlLedgerRead = `SELECT available FROM inventory_ledger
  WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ?`
	sqlLedgerStock = `/*caller='read'*/ SELECT inventory_item_id, location_id, available FROM inventory_ledger
  WHERE shop_id = ? ORDER BY inventory_item_id, location_id`
	sqlAvailability = `/*caller='read'*/ SELECT l.location_id, l.available - COALESCE((SELECT SUM(r.quantity) FROM reserved_quantities r
    WHERE r.shop_id = l.shop_id AND r.inventory_item_id = l.inventory_item_id AND r.location_id = l.location_id), 0)
  FROM inventory_ledger l WHERE l.shop_id = ? AND l.inventory_item_id = ? ORDER BY l.location_id`
	// The same, as the shop's decider: the fence (slot 0; all slots say
	// the same) in the same statement, so the availability and the fence
	// come from one read view. A plain read: a handoff committed after it
	// is after the answer too.
	sqlAvailabilityDecided = `/*caller='read'*/ (SELECT 'fence' AS kind, decider AS a, epoch AS n, 0 AS q
  FROM reservation_fences WHERE shop_id = ? AND slot = 0)
UNION ALL
(SELECT 'loc', '', l.location_id, l.available - COALESCE((SELECT SUM(r.quantity) FROM reserved_quantities r
    WHERE r.shop_id = l.shop_id AND r.inventory_item_id = l.inventory_item_id AND r.location_id = l.location_id), 0)
  FROM inventory_ledger l WHERE l.shop_id = ? AND l.inventory_item_id = ?)`
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

// Fences and handoffs.
const (
	sqlFenceRead = `/*caller='read'*/ SELECT decider, epoch FROM reservation_fences WHERE shop_id = ? AND slot = 0`
	// Creates the fence's slot rows (Redis decides, epoch 0) where missing
	// and locks them either way; then every slot is read locked for update.
	sqlFenceEnsurePrefix = `/*caller='handoff'*/ INSERT INTO reservation_fences (shop_id, slot, decider, epoch) VALUES `
	sqlFenceEnsureRow    = `(?, ?, 'redis', 0)`
	sqlFenceEnsureSuffix = ` ON DUPLICATE KEY UPDATE shop_id = shop_id`
	sqlFenceLock         = `/*caller='handoff'*/ SELECT decider, epoch, copying FROM reservation_fences WHERE shop_id = ? ORDER BY slot FOR UPDATE`
	// A fence change ends any copy of the shop: MySQL decides (the copy's
	// cut-over, or a takeover that copied everything) or never did.
	sqlFenceSet  = `/*caller='handoff'*/ UPDATE reservation_fences SET decider = ?, epoch = ?, copying = 0, changed_at = NOW(3) WHERE shop_id = ?`
	sqlFeedFence = `/*caller='handoff'*/ INSERT INTO reservation_outbox (shop_id, kind, decider, epoch) VALUES (?, 'fence', ?, ?)`
	// Every reservation of the shop, locked: nothing of the shop changes
	// while a handoff copies Redis's state in.
	sqlShopStatesLock    = `/*caller='handoff'*/ SELECT token, state, allocations FROM reservations WHERE shop_id = ? FOR UPDATE`
	sqlStateUpsertPrefix = `INSERT INTO reservations (shop_id, token, state, decided_by, allocations, short, expires_at) VALUES `
	// shop, token, state, decided_by, allocations, short, expires_at (NULL:
	// now).
	sqlStateUpsertRow = `(?,?,?,?,?,?,COALESCE(?, NOW(3)))`
	// A row that is 'claimed' stays as it is: a legacy claim's Deduct may
	// have inserted it after the copy locked its tokens (at READ
	// COMMITTED an absent row locks nothing), and the ledger's claim is
	// the truth. state is assigned last, so every IF reads the row's
	// state from before the statement (both MySQL and MariaDB assign left
	// to right).
	sqlStateUpsertSuffix = ` ON DUPLICATE KEY UPDATE
    decided_by = IF(state = 'claimed', decided_by, VALUES(decided_by)),
    allocations = IF(state = 'claimed', allocations, VALUES(allocations)),
    short = IF(state = 'claimed', short, VALUES(short)),
    expires_at = IF(state = 'claimed', expires_at, VALUES(expires_at)),
    changed_at = IF(state = 'claimed', changed_at, NOW(3)),
    state = IF(state = 'claimed', state, VALUES(state))`
	// Which of some tokens' rows are claimed: after a copy wrote them (and
	// so holds their locks), the tokens whose claim landed in between.
	sqlClaimedAmongPrefix    = `SELECT token FROM reservations WHERE shop_id = ? AND state = 'claimed' AND token IN (`
	sqlStatesDeletePrefix    = `DELETE FROM reservations WHERE shop_id = ? AND token IN (`
	sqlShopHoldsDeletePrefix = `DELETE FROM reserved_quantities WHERE shop_id = ? AND token IN (`
	// Some reservations of the shop, locked: a partial copy's tokens.
	sqlTokenStatesLockPrefix = `SELECT token, state, allocations FROM reservations WHERE shop_id = ? AND token IN (`
)

func tokenStatesLockQuery(caller string, tokens int) string {
	return tokensInQuery(caller, sqlTokenStatesLockPrefix, tokens) + " FOR UPDATE"
}

// Copies ahead of a handoff to MySQL (copy.go).
const (
	// Marks the shop as copied into: shadow writes are refused meanwhile.
	// A fence change (sqlFenceSet) ends it.
	sqlCopyMark = `/*caller='copy'*/ UPDATE reservation_fences SET copying = ?, changed_at = NOW(3) WHERE shop_id = ?`
	// The copy's check at the start of each of its transactions: a handoff
	// changes the fence rows for update, so a shared lock on one holds it
	// off until the copy's part commits.
	sqlCopyFence = `/*caller='copy'*/ SELECT decider, epoch, copying FROM reservation_fences WHERE shop_id = ? AND slot = 0 LOCK IN SHARE MODE`
	// The shop's held reservations, for the copy to replace or drop.
	sqlCopyHeld = `/*caller='copy'*/ SELECT token FROM reservations WHERE shop_id = ? AND token > ? AND state = 'held'
  ORDER BY token LIMIT ?`
	// Every shop's fence (slot 0; every slot says the same), for the
	// handoff sweeper.
	sqlFencesAll = `/*caller='handoff'*/ SELECT shop_id, decider, epoch, copying FROM reservation_fences WHERE slot = 0`
)

func fenceEnsureQuery() string {
	return sqlFenceEnsurePrefix + repeatJoin(sqlFenceEnsureRow, ",", fenceSlots) + sqlFenceEnsureSuffix
}

func stateUpsertQuery(caller string, rows int) string {
	return tag(caller) + sqlStateUpsertPrefix + repeatJoin(sqlStateUpsertRow, ",", rows) + sqlStateUpsertSuffix
}

func tokensInQuery(caller, prefix string, tokens int) string {
	return tag(caller) + prefix + repeatJoin("?", ",", tokens) + ")"
}

// The change feed, read by the relay (package mirror).
const (
	// Pending changes with the current state of their reservation. A state
	// change whose reservation is gone (its tombstone was forgotten) comes
	// with an empty state.
	sqlFeedPendingSelect = `/*caller='feed'*/ SELECT o.id, o.shop_id, o.kind, o.token, o.item_id, o.location_id, o.delta,
    o.decider, o.epoch, COALESCE(r.state, ''), COALESCE(r.allocations, ''), COALESCE(r.short, ''), r.expires_at,
    r.changed_at, o.created_at, COALESCE(o.cart, ''), o.cart_label, COALESCE(o.trace, '')
  FROM reservation_outbox o
  LEFT JOIN reservations r ON o.kind = 'state' AND r.shop_id = o.shop_id AND r.token = o.token`
	sqlFeedPending     = sqlFeedPendingSelect + ` ORDER BY o.id LIMIT ?`
	sqlFeedPendingShop = sqlFeedPendingSelect + ` WHERE o.shop_id = ? ORDER BY o.id LIMIT ?`
	sqlFeedBacklog     = `/*caller='feed'*/ SELECT COUNT(*), COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(3)), 0) FROM reservation_outbox`
	// The copy step of copy and catch-up reads, in one snapshot, the
	// shop's reservations, holds, ledger and pending changes.
	sqlCopyStates  = `/*caller='handoff'*/ SELECT token, state, decided_by, allocations, short, expires_at FROM reservations WHERE shop_id = ?`
	sqlCopyLedger  = `/*caller='handoff'*/ SELECT inventory_item_id, location_id, available FROM inventory_ledger WHERE shop_id = ?`
	sqlCopyPending = `/*caller='handoff'*/ SELECT id, kind FROM reservation_outbox WHERE shop_id = ?`
	// The shop's ledger rows (and, at REPEATABLE READ, the gaps between
	// them), locked shared until the copy is written: adjusts wait.
	sqlCopyLedgerLock = `/*caller='handoff'*/ SELECT inventory_item_id FROM inventory_ledger WHERE shop_id = ? LOCK IN SHARE MODE`
)

// Holding a shop still for reconciliation's look (FreezeShop): its fence
// rows for update (every transaction that decides for the shop takes one
// in share mode), its ledger rows in share mode (adjusts and deducts take
// them for update).
const (
	sqlFreezeFence  = `/*caller='reconcile'*/ SELECT slot FROM reservation_fences WHERE shop_id = ? FOR UPDATE`
	sqlFreezeLedger = `/*caller='reconcile'*/ SELECT inventory_item_id FROM inventory_ledger WHERE shop_id = ? LOCK IN SHARE MODE`
)

// Leases: GET_LOCK names are server-wide, so the database's name scopes
// them (pods may share a server).
const (
	sqlLeaseGet     = `/*caller='lease'*/ SELECT GET_LOCK(CONCAT(DATABASE(), '.', ?), 0)`
	sqlLeaseMine    = `/*caller='lease'*/ SELECT IS_USED_LOCK(CONCAT(DATABASE(), '.', ?)) = CONNECTION_ID()`
	sqlLeaseRelease = `/*caller='lease'*/ SELECT RELEASE_LOCK(CONCAT(DATABASE(), '.', ?))`
)

const leaseReleaseTimeout = 2 * time.Second

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

// The handoff sweeper's report of the pod (progress.go): one row.
const (
	sqlProgressSave = `/*caller='handoff'*/ INSERT INTO handoff_progress
  (id, flags_version, shops, done, pending, failed, oldest_pending, started_at, finished_at, updated_at, replica, last_error)
  VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
  ON DUPLICATE KEY UPDATE flags_version = VALUES(flags_version), shops = VALUES(shops), done = VALUES(done),
    pending = VALUES(pending), failed = VALUES(failed), oldest_pending = VALUES(oldest_pending),
    started_at = VALUES(started_at), finished_at = VALUES(finished_at), updated_at = VALUES(updated_at),
    replica = VALUES(replica), last_error = VALUES(last_error)`
	sqlProgressRead = `/*caller='handoff'*/ SELECT flags_version, shops, done, pending, failed, oldest_pending,
    started_at, finished_at, updated_at, replica, last_error FROM handoff_progress WHERE id = 1`
)
