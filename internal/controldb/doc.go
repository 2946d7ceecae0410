// Package controldb owns every statement sent to the control database:
// the one database a fleet shares beside the pods' own (the topology's
// control DSN). It holds the rollout's flags document (rollout_flags, one
// row), the stage in force (rollout_state), the audit of every change
// (rollout_audit), the replicas' heartbeats (rollout_replicas), and the
// comparer's sampled diffs, stats, traffic counts and flush ids
// (compare_diffs, compare_stats, compare_traffic, compare_flushes). Its
// tables come from the control migration set (migrations/control: 00002
// compare, 00003 rollout, 00007 fleet flags, 00008 traffic); this package
// never creates or alters one.
//
// Every statement against the control database lives here, as a constant
// tagged with its caller in SQLCommenter form (/*caller='flags'*/, the tag
// internal/testdb.WaitStatement and the processlist see), values only as
// parameters; the multi-row INSERTs are built from fixed fragments holding
// only placeholders. Each statement (or small group) has one function
// taking a Querier, so the caller decides the connection and the
// transaction: rollout, rollout/flagdoc, rollout/flagsource and compare
// call these and hold no SQL of their own.
//
// What it must never do: import the packages that call it (rollout,
// compare, the server), decide anything about what it reads, or wrap the
// driver's errors. Every function returns the driver's error as it is, so
// a caller wraps it in its own words and errors.As still finds a
// *mysql.MySQLError; a single-row read returns sql.ErrNoRows when the row
// is missing.
package controldb

import (
	"context"
	"database/sql"
	"errors"

	"github.com/go-sql-driver/mysql"
)

// Querier is what every function sends its statement through: *sql.DB,
// *sql.Tx and *sql.Conn all satisfy it. A statement that must run inside
// the caller's transaction (LockFlags, the stats flush) is given the
// *sql.Tx.
type Querier interface {
	// ExecContext runs a statement that returns no rows.
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	// QueryContext runs a query that returns rows.
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	// QueryRowContext runs a query that returns at most one row.
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var (
	_ Querier = (*sql.DB)(nil)
	_ Querier = (*sql.Tx)(nil)
	_ Querier = (*sql.Conn)(nil)
)

// errDupEntry is MySQL's ER_DUP_ENTRY.
const errDupEntry = 1062

// IsDuplicate reports whether err is a duplicate-key error (ER_DUP_ENTRY,
// 1062): InsertFlags when another writer created the flags row first,
// InsertFlush when the flush was written before.
func IsDuplicate(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errDupEntry
}
