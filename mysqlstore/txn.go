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

// exec adds a statement. Unbatched it is sent now.
func (t *txn) exec(query string, args ...any) error {
	t.queue = append(t.queue, stmt{query, args})
	if t.unbatched {
		return t.flush()
	}
	return nil
}

// query sends the queue and the statements of qs, each a SELECT, and
// hands each one's rows to scan, in order.
func (t *txn) query(scan func(i int, rows *sql.Rows) error, qs ...stmt) error {
	if t.unbatched {
		if err := t.flush(); err != nil {
			return err
		}
		for i, q := range qs {
			if err := t.read(q.sql, q.args, func(rows *sql.Rows) error { return scan(i, rows) }); err != nil {
				return err
			}
		}
		return nil
	}
	t.queue = append(t.queue, qs...)
	text, args := t.take()
	i := 0
	return t.read(text, args, func(rows *sql.Rows) error {
		for {
			if i == len(qs) {
				return fmt.Errorf("mysqlstore: batch returned more than its %d result sets", len(qs))
			}
			if err := scan(i, rows); err != nil {
				return err
			}
			i++
			if !rows.NextResultSet() {
				break
			}
		}
		if err := rows.Err(); err != nil {
			// A later statement failed (a lock wait timeout, say): that
			// is the batch's error, not the missing result sets.
			return err
		}
		if i != len(qs) {
			return fmt.Errorf("mysqlstore: batch returned %d of its %d result sets", i, len(qs))
		}
		return nil
	})
}

// stmt is one SELECT of a query batch.
type stmt struct {
	sql  string
	args []any
}

// read runs one query text (possibly several statements) and checks the
// rows' error after scan, whatever scan read: a statement that failed
// after the first result set reports there.
func (t *txn) read(text string, args []any, scan func(*sql.Rows) error) error {
	rows, err := t.c.QueryContext(t.ctx, text, args...)
	if err != nil {
		return err
	}
	err = scan(rows)
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = rows.Err()
	}
	return err
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

// flush sends the queue (BEGIN first if it was not sent yet) and discards
// what it answers.
func (t *txn) flush() error {
	if len(t.queue) == 0 && t.began {
		return nil
	}
	if t.unbatched {
		q := t.queue
		t.queue = nil
		if !t.began {
			q = append(begin(), q...)
			t.began = true
		}
		for _, st := range q {
			if _, err := t.c.ExecContext(t.ctx, st.sql, st.args...); err != nil {
				return err
			}
		}
		return nil
	}
	text, args := t.take()
	_, err := t.c.ExecContext(t.ctx, text, args...)
	return err
}

// take empties the queue into one text, BEGIN first when not sent yet.
func (t *txn) take() (string, []any) {
	q := t.queue
	t.queue = nil
	if !t.began {
		q = append(begin(), q...)
		t.began = true
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
	return text.String(), args
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
