package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed31b0e981/reservoir/reservation"
)

// MySQL error numbers the store handles.
const (
	errDupEntry   = 1062 // ER_DUP_ENTRY
	errExpectRows = 1242 // ER_SUBQUERY_NO_1_ROW: only sqlExpectRows raises it
	errLockWait   = 1205 // ER_LOCK_WAIT_TIMEOUT: only the statement rolled back
	errDeadlock   = 1213 // ER_LOCK_DEADLOCK: the whole transaction rolled back
)

func mysqlErrno(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// conn is a connection checked out for one caller. Its lifetime, from
// acquiring to releasing, is the connection hold time the store reports per
// caller: by Little's law, rate(hold_seconds_sum) is the number of
// connections that caller occupies.
type conn struct {
	*sql.Conn
	s        *Store
	caller   string
	acquired time.Time
	span     trace.Span // nil outside a trace (trace.go)
}

func (s *Store) acquire(ctx context.Context, caller string) (*conn, error) {
	span := startSpan(ctx, caller)
	start := time.Now()
	c, err := s.db.Conn(ctx)
	s.metrics.connWait.WithLabelValues(caller).Observe(time.Since(start).Seconds())
	if err != nil {
		err = fmt.Errorf("mysqlstore: %s: get connection: %w", caller, err)
		endSpan(span, err)
		return nil, err
	}
	return &conn{Conn: c, s: s, caller: caller, acquired: time.Now(), span: span}, nil
}

func (c *conn) release() {
	c.s.metrics.connHold.WithLabelValues(c.caller).Observe(time.Since(c.acquired).Seconds())
	_ = c.Close()
	endSpan(c.span, nil)
}

// inTx runs fn in a READ COMMITTED transaction on a connection held for
// caller, retrying deadlocks and lock wait timeouts with capped exponential
// backoff and jitter. READ COMMITTED is set for this transaction only; under
// REPEATABLE READ a locking read of an empty pool range takes a gap lock
// that blocks the refill it is waiting for.
func (s *Store) inTx(ctx context.Context, caller string, fn func(tx *sql.Tx) error) error {
	c, err := s.acquire(ctx, caller)
	if err != nil {
		return err
	}
	defer func() {
		if c != nil { // nil when the re-acquire below failed
			c.release()
		}
	}()
	return s.retry(ctx, caller, func() error {
		tx, err := c.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if errors.Is(err, driver.ErrBadConn) {
			// A pooled connection the server or a cancelled call broke:
			// nothing was sent, so take a fresh one once.
			c.release()
			if c, err = s.acquire(ctx, caller); err != nil {
				return err
			}
			tx, err = c.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		}
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			// After 1205 the transaction is still open: roll it back
			// ourselves. After 1213 the server already did; this is a no-op.
			_ = tx.Rollback()
			return err
		}
		// Commit takes no context: a server that stops answering (a
		// paused process, a dead host) would hold the caller past its
		// deadline. The caller gets the deadline instead, with an
		// unknown outcome; the connection goes back to the pool once the
		// commit answers.
		done := make(chan error, 1)
		go func() { done <- tx.Commit() }()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			held := c
			c = nil
			go func() { <-done; held.release() }()
			return fmt.Errorf("mysqlstore: %s: the commit did not answer within the call's deadline; its outcome is unknown: %w", caller, ctx.Err())
		}
	})
}

// txOn runs fn in a READ COMMITTED transaction on c, retrying as inTx
// does, but never on another connection: c is a lease's (its named lock
// lives and dies with it), so work that must stop when the lease is lost
// fails with it instead of going on elsewhere.
func (s *Store) txOn(ctx context.Context, c *conn, caller string, fn func(tx *sql.Tx) error) error {
	return s.retry(ctx, caller, func() error {
		tx, err := c.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}

// retry runs fn until it succeeds, fails with an error that is not a
// deadlock or lock wait timeout, or runs out of attempts.
func (s *Store) retry(ctx context.Context, caller string, fn func() error) error {
	backoff := s.cfg.RetryBase
	for attempt := 1; ; attempt++ {
		err := fn()
		reason := ""
		switch mysqlErrno(err) {
		case errDeadlock:
			reason = "deadlock"
		case errLockWait:
			reason = "lock_wait_timeout"
		default:
			return err
		}
		s.metrics.retries.WithLabelValues(caller, reason).Inc()
		if attempt >= s.cfg.RetryAttempts {
			return fmt.Errorf("mysqlstore: %s: %s after %d attempts: %w (%w)", caller, reason, attempt, reservation.ErrContention, err)
		}
		// Full jitter over [backoff/2, backoff): retries of transactions
		// that collided must not collide again in lockstep.
		sleep := backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(sleep):
		}
		backoff = min(2*backoff, s.cfg.RetryMax)
	}
}
