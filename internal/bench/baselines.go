package bench

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seed31b0e981/reservoir/reservation"
)

// querier is what *sql.DB, *sql.Conn and *sql.Tx have in common.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// baseline is the MySQL design the unit pool replaces, as well as it can be
// done: a quantity row per item x location (buckets == 1), or that stock
// split over N bucket rows (seed 004).
//
// A reserve is one READ COMMITTED transaction: insert the hold rows, then
// take each line from its row with a guarded UPDATE (qty >= n), then
// COMMIT. The hot row is touched last, so its lock lives from the UPDATE
// to the COMMIT only; under READ COMMITTED an UPDATE whose row's committed
// value fails the guard skips it without waiting (a semi-consistent read),
// so an empty bucket costs a round trip, not a wait. Buckets are tried from
// a random one, then the others in turn, once each: a line is refused only
// when every bucket was short. Lines are taken in the cart's order, as a
// naive implementation does: carts naming the same items in different
// orders deadlock (seed 000 section 8.3 expects it; the unit pool sorts).
// Deadlocks and lock wait timeouts are retried like the store's.
//
// Batched (the default, like the store's transactions), an attempt is one
// round trip: BEGIN, the holds, each line's guarded UPDATE of one row (a
// random bucket) followed by a check that it changed a row (the store's
// sqlExpectRows), and COMMIT, so the hot row is locked for server time
// only. A line whose row was short fails the batch, which is rolled back
// and the call goes the statement-by-statement way, which walks the
// buckets and alone decides "short". Unbatched, every attempt goes that
// way, as before batches.
type baseline struct {
	db        *sql.DB
	buckets   int
	unbatched bool

	deadlocks, lockWaits, retries atomic.Int64
	holdMu                        sync.Mutex
	hold                          holdSum
}

func newBaseline(env *pointEnv, buckets int, unbatched bool) *baseline {
	return &baseline{db: env.path.db, buckets: buckets, unbatched: unbatched}
}

// Retry policy: the store's defaults (mysqlstore.Config).
const (
	baseAttempts  = 8
	baseRetryBase = 2 * time.Millisecond
	baseRetryMax  = 100 * time.Millisecond
)

func (b *baseline) setup(ctx context.Context, shop int64, sc *scenario) error {
	const chunk = 500
	var rows [][]any
	for i := range sc.items {
		stock := sc.stock(i)
		if b.buckets == 1 {
			rows = append(rows, []any{shop, int64(i + 1), location, stock})
			continue
		}
		for k := range b.buckets {
			share := stock / int64(b.buckets)
			if int64(k) < stock%int64(b.buckets) {
				share++
			}
			rows = append(rows, []any{shop, int64(i + 1), location, k, share})
		}
	}
	for start := 0; start < len(rows); start += chunk {
		part := rows[start:min(start+chunk, len(rows))]
		var args []any
		for _, r := range part {
			args = append(args, r...)
		}
		q := rowStockQuery(len(part))
		if b.buckets > 1 {
			q = bucketStockQuery(len(part))
		}
		if _, err := b.db.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("stock the baseline: %w", err)
		}
	}
	return nil
}

var errShort = errors.New("short")

func (b *baseline) reserve(ctx context.Context, shop int64, token string, lines []reservation.Line) (bool, error) {
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return false, err
	}
	acquired := time.Now()
	defer func() {
		held := time.Since(acquired)
		_ = conn.Close()
		b.holdMu.Lock()
		b.hold.seconds += held.Seconds()
		b.hold.count++
		b.holdMu.Unlock()
	}()
	backoff := baseRetryBase
	batched := !b.unbatched
	for attempt := 1; ; attempt++ {
		var err error
		if batched {
			err = b.batch(ctx, conn, shop, token, lines)
			if me := (*mysql.MySQLError)(nil); errors.As(err, &me) && me.Number == errBaseShort {
				batched = false // a row was short: walk the buckets
				continue
			}
		} else {
			err = b.attempt(ctx, conn, shop, token, lines)
		}
		if errors.Is(err, errShort) {
			return false, nil
		}
		var me *mysql.MySQLError
		if !errors.As(err, &me) || (me.Number != 1213 && me.Number != 1205) {
			return err == nil, err
		}
		if me.Number == 1213 {
			b.deadlocks.Add(1)
		} else {
			b.lockWaits.Add(1)
		}
		if attempt >= baseAttempts {
			return false, fmt.Errorf("baseline: %w (%w)", reservation.ErrContention, err)
		}
		b.retries.Add(1)
		sleep := backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(sleep):
		}
		backoff = min(2*backoff, baseRetryMax)
	}
}

func (b *baseline) attempt(ctx context.Context, conn *sql.Conn, shop int64, token string, lines []reservation.Line) (err error) {
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	args := make([]any, 0, 5*len(lines))
	for _, ln := range lines {
		args = append(args, shop, token, ln.Item, location, ln.Quantity)
	}
	if _, err := tx.ExecContext(ctx, baseHoldsQuery(len(lines)), args...); err != nil {
		return err
	}
	for _, ln := range lines {
		if err := b.take(ctx, tx, shop, ln); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// errBaseShort is the error sqlBaseExpectRow raises: a guarded UPDATE
// changed no row.
const errBaseShort = 1242

// batch is an attempt in one round trip (see baseline).
func (b *baseline) batch(ctx context.Context, conn *sql.Conn, shop int64, token string, lines []reservation.Line) error {
	args := make([]any, 0, 11*len(lines))
	for _, ln := range lines {
		args = append(args, shop, token, ln.Item, location, ln.Quantity)
	}
	for _, ln := range lines {
		if b.buckets == 1 {
			args = append(args, ln.Quantity, shop, ln.Item, location, ln.Quantity)
		} else {
			args = append(args, ln.Quantity, shop, ln.Item, location, rand.IntN(b.buckets), ln.Quantity)
		}
	}
	_, err := conn.ExecContext(ctx, baseBatchQuery(len(lines), b.buckets > 1), args...)
	if err != nil {
		// The batch stopped at its error with the transaction open.
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}
	return err
}

func (b *baseline) take(ctx context.Context, tx *sql.Tx, shop int64, ln reservation.Line) error {
	if b.buckets == 1 {
		res, err := tx.ExecContext(ctx, sqlRowTake, ln.Quantity, shop, ln.Item, location, ln.Quantity)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return errShort
		}
		return nil
	}
	first := rand.IntN(b.buckets)
	for k := range b.buckets {
		bucket := (first + k) % b.buckets
		res, err := tx.ExecContext(ctx, sqlBucketTake, ln.Quantity, shop, ln.Item, location, bucket, ln.Quantity)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return nil
		}
	}
	return errShort
}

func (b *baseline) claim(context.Context, int64, string) error {
	return errors.New("bench: the baselines have no ledger to claim against")
}

func (b *baseline) counters() counters {
	b.holdMu.Lock()
	h := b.hold
	b.holdMu.Unlock()
	return counters{
		deadlocks: b.deadlocks.Load(),
		lockWaits: b.lockWaits.Load(),
		retries:   b.retries.Load(),
		hold:      map[string]holdSum{"reserve": h},
	}
}

// check holds the baseline to the book: per item, the stock rows lost
// exactly the reserved units, no row went below zero, and the holds are the
// acknowledged reserves.
func (b *baseline) check(ctx context.Context, shop int64, bk *book) error {
	q := sqlCheckRow
	if b.buckets > 1 {
		q = sqlCheckBuckets
	}
	rows, err := b.db.QueryContext(ctx, q, shop)
	if err != nil {
		return err
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var item, qty, low, held int64
		dest := []any{&item, &qty, &held}
		if b.buckets > 1 {
			dest = []any{&item, &qty, &low, &held}
		} else {
			low = qty
		}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		seen++
		i := item - 1
		lo, hi := span(bk.reserved, bk.reserveDoubt, int(i))
		taken := bk.stock[i] - qty
		switch {
		case !within(taken, lo, hi):
			return fmt.Errorf("item %d: %d taken from the stock, but %s were reserved", item, taken, rangeText(lo, hi))
		case low < 0:
			return fmt.Errorf("item %d: a row went below zero (%d)", item, low)
		case held != taken:
			return fmt.Errorf("item %d: %d units held, but %d taken from the stock", item, held, taken)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if seen != len(bk.stock) {
		return fmt.Errorf("%d stock rows, want %d", seen, len(bk.stock))
	}
	return nil
}

func (b *baseline) close(context.Context) error { return nil }
