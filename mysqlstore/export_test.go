package mysqlstore

// Test-only access to the store's knobs and statements.

// SetUnorderedLedger makes claims update ledger rows in random order.
func SetUnorderedLedger(s *Store, v bool) { s.unorderedLedger = v }

// SetBeforeReserveCommit installs a hook run inside the reserve transaction
// just before COMMIT.
func SetBeforeReserveCommit(s *Store, f func()) { s.beforeReserveCommit = f }

// SetBeforeHoldInsert installs a hook run inside the reserve transaction
// once its units are taken, before its hold rows are inserted.
func SetBeforeHoldInsert(s *Store, f func()) { s.beforeHoldInsert = f }

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
