// Package bad is planted SQL built from values, each line the analyzer
// must report marked "want" (analysistest's convention). It is testdata:
// type-checked by the test, never built, never run.
package bad

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
)

const sqlHoldsByShop = `SELECT token FROM reserved_quantities WHERE shop_id = `

// A value concatenated onto a fixed statement.
func byShop(ctx context.Context, db *sql.DB, shop int64) (*sql.Rows, error) {
	return db.QueryContext(ctx, sqlHoldsByShop+strconv.FormatInt(shop, 10)) // want `query built from a value: strconv.FormatInt\(shop, 10\)`
}

// A value formatted into a statement.
func dropHold(ctx context.Context, db *sql.DB, token string) error {
	_, err := db.ExecContext(ctx, fmt.Sprintf("DELETE FROM reserved_quantities WHERE token = '%s'", token)) // want `query built from a value: token`
	return err
}

// Values written into a builder.
func inList(items []int64) string {
	var b strings.Builder
	b.WriteString("SELECT available FROM inventory_ledger WHERE inventory_item_id IN (")
	for i, it := range items {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(strconv.FormatInt(it, 10))
	}
	b.WriteString(")")
	return b.String() // want `SQL built from a value: b.String\(\)`
}

// A helper that looks like mysqlstore's tag, but a caller passes a value.
func tag(caller string) string { return "/*caller='" + caller + "'*/ " }

func tagged(ctx context.Context, db *sql.DB, who string) error {
	_, err := db.ExecContext(ctx, tag(who)+"UPDATE inventory_ledger SET version = version + 1") // want `query built from a value: tag\(who\)`
	return err
}

func tagFromRequest(ctx context.Context, db *sql.DB, r map[string]string) error {
	return tagged(ctx, db, r["caller"])
}

// A value hidden in a helper's return.
func eq(col, v string) string { return col + " = '" + v + "'" }

func byToken(token string) string {
	return "SELECT quantity FROM reserved_quantities WHERE " + eq("token", token) // want `SQL built from a value: eq\("token", token\)`
}

// A limit is a value too.
func page(n int) string {
	return fmt.Sprintf("SELECT token FROM reservation_claims ORDER BY claimed_at LIMIT %d", n) // want `SQL built from a value: n`
}

// Lower-case SQL is SQL.
func lower(id string) string {
	return "select * from t where id = " + id // want `SQL built from a value: id`
}

// Grown in a variable, then run.
func appended(ctx context.Context, db *sql.DB, token string) error {
	q := "DELETE FROM reservation_claims WHERE token = '"
	q += token
	q += "'"
	_, err := db.ExecContext(ctx, q) // want `query built from a value: q`
	return err
}

// A statement kept in a struct field that some caller sets from a value.
type stmt struct{ sql string }

func queued(ctx context.Context, db *sql.DB, token string) error {
	for _, st := range []stmt{{sql: sqlHoldsByShop}, {sql: "DELETE FROM t WHERE token = '" + token + "'"}} { // want `SQL built from a value: token`
		if _, err := db.ExecContext(ctx, st.sql); err != nil { // want `query built from a value: st.sql`
			return err
		}
	}
	return nil
}

// An exported function's parameter may be anything: its callers are
// elsewhere, whatever the package passes it.
func Lock(ctx context.Context, db *sql.DB, query string) error {
	_, err := db.ExecContext(ctx, query) // want `query built from a value: query`
	return err
}

func lockFixed(ctx context.Context, db *sql.DB) error { return Lock(ctx, db, sqlHoldsByShop) }

// A marker without a reason marks nothing.
func create(ctx context.Context, db *sql.DB, name string) error {
	_, err := db.ExecContext(ctx /* want `query built from a value: name` */, "CREATE DATABASE "+name) //sqlcheck:ok
	return err
}
