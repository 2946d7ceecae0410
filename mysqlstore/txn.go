package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
)

// txn is one transaction of a checkout call (reserve, claim, release,
// deduct) on a connection held for it, sent in as few round trips as its
// logic allows.
//
// Batched (the default), exec only queues a statement. The queue travels
// with the next query, as one multi-statement round trip, and the last
// writes travel with the COMMIT. So a call costs one round trip per read
// its logic decides on, plus one, and a hot row (the ledger) written by
// the last batch is locked for server time only: never across a network
// round trip. The BEGIN (with its isolation level) rides in the first
// round trip.
//
// A batch stops at its first failing statement and leaves the transaction
// open, with its locks: every error is followed by a ROLLBACK (see end),
// and a connection whose ROLLBACK fails is discarded, never pooled.
//
// Unbatched (Config.Unbatched), every statement is its own round trip, as
// before batches: the bench compares the two.
//
// Every statement is constant text from sql.go (the transaction's own
// too: sqlReadCommitted, sqlStart, sqlCommit, sqlRollback); values travel
// only as parameters, interpolated by the driver (DSN turns
// multi-statements on, so this is what keeps a value from ever becoming a
// statement).
type txn struct {
	ctx       context.Context
	c         *conn
	unbatched bool

	queue []stmt
	// began: the BEGIN was sent (or is in the queue being sent); done: the
	// transaction ended (committed or rolled back).
	began, done bool
	// committed runs once the COMMIT succeeded (metrics of what it wrote).
	committed []func()
}

// afterCommit runs fn once the transaction committed.
func (t *txn) afterCommit(fn func()) { t.committed = append(t.committed, fn) }

// begin is what starts a READ COMMITTED transaction: SET TRANSACTION
// applies to the next transaction only (see inTx for why READ COMMITTED).
func begin() []stmt {
	return []stmt{{sql: sqlReadCommitted}, {sql: sqlStart}}
}

// stmt is one statement of a transaction: constant text from sql.go, its
// parameters, and, for a statement that returns rows, scan, which reads
// them. A statement returns a result set if and only if it has a scan
// (BEGIN, the writes and COMMIT have none): in a batch, the reader hands
// each result set to the scan of the statement that produced it, so
// statements are added, moved or removed without any position to keep in
// step. In a batch, a SELECT without a scan, or a write with one, fails
// the batch (readSets counts the result sets): it cannot pass a result
// set on to the wrong scan unnoticed. (Unbatched, each statement is its
// own round trip, read by its own scan or none.)
type stmt struct {
	sql  string
	args []any
	scan func(*sql.Rows) error
}

// eachRow is a scan that reads every row of its result set with fn.
func eachRow(fn func(*sql.Rows) error) func(*sql.Rows) error {
	return func(rows *sql.Rows) error {
		for rows.Next() {
			if err := fn(rows); err != nil {
				return err
			}
		}
		return nil
	}
}

// exec adds a statement that returns no rows. Unbatched it is sent now.
func (t *txn) exec(query string, args ...any) error {
	t.queue = append(t.queue, stmt{sql: query, args: args})
	if t.unbatched {
		return t.flush()
	}
	return nil
}

// query sends the queue and the statements of qs at once, each SELECT
// read by its own scan (a statement of qs without one is a write that
// rides along).
func (t *txn) query(qs ...stmt) error {
	t.queue = append(t.queue, qs...)
	return t.flush()
}

// commit sends the queue with the COMMIT.
func (t *txn) commit() error {
	if !t.began && len(t.queue) == 0 {
		t.done = true // nothing was ever sent
		for _, fn := range t.committed {
			fn()
		}
		return nil
	}
	t.queue = append(t.queue, stmt{sql: sqlCommit})
	if err := t.flush(); err != nil {
		return err
	}
	t.done = true
	for _, fn := range t.committed {
		fn()
	}
	return nil
}

// flush sends the queue (BEGIN first if it was not sent yet): batched as
// one multi-statement round trip, unbatched one statement a round trip.
// Each result set goes to its own statement's scan.
func (t *txn) flush() error {
	if len(t.queue) == 0 && t.began {
		return nil
	}
	q := t.take()
	if t.unbatched {
		for _, st := range q {
			if err := t.send(st.sql, st.args, []stmt{st}); err != nil {
				return err
			}
		}
		return nil
	}
	var text strings.Builder
	var args []any
	for i, st := range q {
		if i > 0 {
			text.WriteString(";\n")
		}
		text.WriteString(st.sql)
		args = append(args, st.args...)
	}
	return t.send(text.String(), args, q)
}

// take empties the queue, BEGIN first when not sent yet.
func (t *txn) take() []stmt {
	q := t.queue
	t.queue = nil
	if !t.began {
		q = append(begin(), q...)
		t.began = true
	}
	return q
}

// send runs text, the statements of q (one or several), in one round
// trip. The driver skips the results of statements that return no rows
// (an OK packet has no result set), so the n-th result set is that of the
// n-th statement of q that has a scan, and goes to that scan. Whatever a
// scan read, the rows' error is checked after it: a statement that failed
// after the first result set reports there.
func (t *txn) send(text string, args []any, q []stmt) error {
	var scans []func(*sql.Rows) error
	for _, st := range q {
		if st.scan != nil {
			scans = append(scans, st.scan)
		}
	}
	if len(scans) == 0 {
		_, err := t.c.ExecContext(t.ctx, text, args...)
		return err
	}
	rows, err := t.c.QueryContext(t.ctx, text, args...)
	if err != nil {
		return err
	}
	err = readSets(rows, scans)
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = rows.Err()
	}
	return err
}

// readSets hands rows' result sets to scans, the n-th to the n-th, and
// fails unless there is exactly one for each.
func readSets(rows *sql.Rows, scans []func(*sql.Rows) error) error {
	n := 0
	for {
		if n == len(scans) {
			return fmt.Errorf("mysqlstore: batch returned more than its %d result sets", len(scans))
		}
		if err := scans[n](rows); err != nil {
			return err
		}
		n++
		if !rows.NextResultSet() {
			break
		}
	}
	if err := rows.Err(); err != nil {
		// A later statement failed (a lock wait timeout, say): that is
		// the batch's error, not the missing result sets.
		return err
	}
	if n != len(scans) {
		return fmt.Errorf("mysqlstore: batch returned %d of its %d result sets", n, len(scans))
	}
	return nil
}

// end rolls back a transaction that did not commit. When the ROLLBACK
// itself fails the connection may still hold the transaction's locks, so
// it is discarded rather than pooled.
func (t *txn) end() {
	if t.done || !t.began {
		return
	}
	t.done = true
	if _, err := t.c.ExecContext(context.WithoutCancel(t.ctx), sqlRollback); err != nil {
		_ = t.c.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// inBatch runs fn in a txn on a connection held for caller, commits it, and
// retries deadlocks and lock wait timeouts as inTx does. fn must not
// commit; on its error (or the commit's) the transaction is rolled back.
func (s *Store) inBatch(ctx context.Context, caller string, fn func(t *txn) error) error {
	c, err := s.acquire(ctx, caller)
	if err != nil {
		return err
	}
	defer func() {
		if c != nil { // nil when the re-acquire below failed
			c.release()
		}
	}()
	fresh := true // this connection has not been used by an attempt yet
	return s.retry(ctx, caller, func() error {
		err := s.attemptBatch(ctx, c, fn)
		if errors.Is(err, driver.ErrBadConn) && fresh {
			// A pooled connection the server or a cancelled call broke.
			// The driver answers ErrBadConn only when nothing it sent can
			// have been performed (and the server rolls back what an
			// earlier batch of the attempt began when the socket closes),
			// so run the attempt again on a fresh connection, once.
			c.release()
			if c, err = s.acquire(ctx, caller); err != nil {
				return err
			}
			err = s.attemptBatch(ctx, c, fn)
		}
		fresh = false
		return err
	})
}

// attemptBatch is one attempt of inBatch.
func (s *Store) attemptBatch(ctx context.Context, c *conn, fn func(t *txn) error) error {
	t := &txn{ctx: ctx, c: c, unbatched: s.cfg.Unbatched}
	defer t.end()
	if err := fn(t); err != nil {
		return err
	}
	return t.commit()
}
