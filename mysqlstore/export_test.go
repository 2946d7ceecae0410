package mysqlstore

import (
	"context"
	"database/sql"
)

// Test-only access to the store's knobs and statements.

// SetUnorderedLedger makes claims update ledger rows in random order.
func SetUnorderedLedger(s *Store, v bool) { s.unorderedLedger = v }

// SetBeforeReserveCommit installs a hook run inside the reserve transaction
// just before COMMIT.
func SetBeforeReserveCommit(s *Store, f func()) { s.beforeReserveCommit = f }

// SetBeforeHoldInsert installs a hook run inside the reserve transaction
// once its units are taken, before its hold rows are inserted.
func SetBeforeHoldInsert(s *Store, f func()) { s.beforeHoldInsert = f }

// SetAfterCopyLock installs a hook run inside a copy's transaction (a
// part, a cut-over, a takeover) once it has locked its tokens' rows,
// before it writes them.
func SetAfterCopyLock(s *Store, f func()) { s.afterCopyLock = f }

// ReserveUnitsQuery is the reserve path's pool select for n lines.
func ReserveUnitsQuery(n int) string { return reserveUnitsQuery(n) }

// SetBeforeDeductGroup installs a hook run by the deduct leader before
// each group of n calls is sent, and makes groups go one at a time, so a
// test can shape them.
func SetBeforeDeductGroup(s *Store, f func(n int)) {
	s.deductRun.before = f
	s.deducts.oneLeader = true
}

// SetBeforeClaimGroup is SetBeforeDeductGroup for claims.
func SetBeforeClaimGroup(s *Store, f func(n int)) {
	s.claimRun.before = f
	s.claims.oneLeader = true
}

// WaitingClaims is how many Claim calls wait for a group.
func WaitingClaims(s *Store) int {
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	return len(s.claims.waiting)
}

// WaitingDeducts is how many Deduct calls wait for a group.
func WaitingDeducts(s *Store) int {
	s.deducts.mu.Lock()
	defer s.deducts.mu.Unlock()
	return len(s.deducts.waiting)
}

// Stmt is a statement of a test's transaction (stmt): its text, its
// parameters, and the scan of its rows (nil for a statement that returns
// none).
type Stmt struct {
	SQL  string
	Args []any
	Scan func(*sql.Rows) error
}

// Txn is a test's handle on one of the store's transactions (txn).
type Txn struct{ t *txn }

// Exec queues a statement that returns no rows (txn.exec).
func (x Txn) Exec(query string, args ...any) error { return x.t.exec(query, args...) }

// Query sends the queue and qs, each SELECT read by its own scan
// (txn.query).
func (x Txn) Query(qs ...Stmt) error {
	ss := make([]stmt, len(qs))
	for i, q := range qs {
		ss[i] = stmt{sql: q.SQL, args: q.Args, scan: q.Scan}
	}
	return x.t.query(ss...)
}

// InBatch runs fn in one of the store's transactions, batched or not as
// the store is configured, and commits it (inBatch).
func InBatch(ctx context.Context, s *Store, fn func(Txn) error) error {
	return s.inBatch(ctx, "txn_test", func(t *txn) error { return fn(Txn{t}) })
}
