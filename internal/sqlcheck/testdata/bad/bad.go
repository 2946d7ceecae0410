// Package bad is planted SQL built from values, each line the check must
// report marked "want". It is testdata: never built, never run.
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
	return db.QueryContext(ctx, sqlHoldsByShop+strconv.FormatInt(shop, 10)) // want
}

// A value formatted into a statement.
func dropHold(ctx context.Context, db *sql.DB, token string) error {
	_, err := db.ExecContext(ctx, fmt.Sprintf("DELETE FROM reserved_quantities WHERE token = '%s'", token)) // want
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
	return b.String() // want
}

// A helper that looks like mysqlstore's tag, but a caller passes a value.
func tag(caller string) string { return "/*caller='" + caller + "'*/ " }

func tagged(ctx context.Context, db *sql.DB, who string) error {
	_, err := db.ExecContext(ctx, tag(who)+"UPDATE inventory_ledger SET version = version + 1") // want
	return err
}

func tagFromRequest(ctx context.Context, db *sql.DB, r map[string]string) error {
	return tagged(ctx, db, r["caller"])
}

// A value hidden in a helper's return.
func eq(col, v string) string { return col + " = '" + v + "'" }

func byToken(token string) string {
	return "SELECT quantity FROM reserved_quantities WHERE " + eq("token", token) // want
}

// A limit is a value too.
func page(n int) string {
	return fmt.Sprintf("SELECT token FROM reservation_claims ORDER BY claimed_at LIMIT %d", n) // want
}

// Lower-case SQL is SQL.
func lower(id string) string {
	return "select * from t where id = " + id // want
}

// Grown in a variable, then run.
func appended(ctx context.Context, db *sql.DB, token string) error {
	q := "DELETE FROM reservation_claims WHERE token = '"
	q += token
	q += "'"
	_, err := db.ExecContext(ctx, q) // want
	return err
}
