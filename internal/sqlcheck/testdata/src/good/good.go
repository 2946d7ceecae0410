// Package good is SQL built the way the stores build it: fixed fragments
// and placeholders only, values as parameters. The check must report
// nothing here. It is testdata: never built, never run.
package good

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

const (
	callerReserve = "reserve"
	callerClaim   = "claim"
)

func tag(caller string) string { return "/*caller='" + caller + "'*/ " }

const (
	sqlUnitsBranch = `(SELECT ? AS line_no, unit_id FROM available_units
  WHERE shop_id = ? AND inventory_item_id = ? ORDER BY unit_id LIMIT ? FOR UPDATE SKIP LOCKED)`
	sqlDeletePrefix = `DELETE FROM available_units WHERE `
	sqlDeleteLine   = `(shop_id = ? AND unit_id IN (%s))`
	sqlHoldsLock    = `SELECT quantity FROM reserved_quantities WHERE shop_id = ? AND token = ? FOR UPDATE`
)

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

func unitsQuery(lines int) string {
	return tag(callerReserve) + repeatJoin(sqlUnitsBranch, " UNION ALL ", lines)
}

func deleteQuery(units []int) string {
	var b strings.Builder
	b.WriteString(tag(callerReserve) + sqlDeletePrefix)
	for i, n := range units {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString(fmt.Sprintf(sqlDeleteLine, repeatJoin("?", ",", n)))
	}
	return b.String()
}

// caller is a parameter, but every caller passes a constant.
func lockHold(ctx context.Context, tx *sql.Tx, caller string, shop int64, token string) error {
	_, err := tx.ExecContext(ctx, tag(caller)+sqlHoldsLock, shop, token)
	return err
}

func claim(ctx context.Context, tx *sql.Tx, shop int64, token string) error {
	if _, err := tx.QueryContext(ctx, unitsQuery(2), 1, shop, 3, 4); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, deleteQuery([]int{2, 3}), shop, 1, 2, shop, 3, 4, 5); err != nil {
		return err
	}
	return lockHold(ctx, tx, callerClaim, shop, token)
}

// Not SQL: messages and keys may carry values.
func key(prefix string, shop int64) string { return prefix + "{shop:" + fmt.Sprint(shop) + "}:" }

func message(shop int64, token string) string {
	return fmt.Sprintf("claim shop %d token %q: not found", shop, token)
}

// Grown in a variable from fixed fragments only.
func grown(ctx context.Context, db *sql.DB, next bool, shop int64) error {
	q := tag(callerReserve) + repeatJoin(sqlUnitsBranch, " UNION ALL ", 2)
	if next {
		q += " UNION ALL " + sqlUnitsBranch
	}
	_, err := db.QueryContext(ctx, q, shop)
	return err
}

// A statement kept in a struct field, queued and sent later, as
// mysqlstore's txn does: every stmt the package makes holds a fixed one.
type stmt struct {
	sql  string
	args []any
}

func queue(shop int64) []stmt {
	return []stmt{{sql: sqlHoldsLock, args: []any{shop}}, {tag(callerClaim) + sqlHoldsLock, []any{shop}}}
}

// take joins the queue: its text is fixed, its arguments are values.
func take(q []stmt) (string, []any) {
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

func sendQueue(ctx context.Context, db *sql.DB, shop int64) error {
	text, args := take(queue(shop))
	_, err := db.ExecContext(ctx, text, args...)
	return err
}

// Each of a list of fixed statements.
func lockAll(ctx context.Context, tx *sql.Tx, shop int64) error {
	for _, q := range []string{sqlHoldsLock, sqlDeletePrefix} {
		if _, err := tx.ExecContext(ctx, q, shop); err != nil {
			return err
		}
	}
	return nil
}

// A wrapper with database/sql's shape forwards its query: its callers'
// queries are checked where they call it.
type conn struct{ db *sql.DB }

func (c conn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return c.db.ExecContext(ctx, query, args...)
}

// A name a parameter cannot stand for, marked with the reason it is safe.
func create(ctx context.Context, db *sql.DB, name string) error {
	_, err := db.ExecContext(ctx, "CREATE DATABASE "+name) //sqlcheck:ok test names are made by the test, never given
	return err
}
