package mysqlstore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/mysqlstore"
)

// Each statement of a transaction brings its own scan, and each result set
// goes to the scan of the statement that produced it: here one batch of
// statements whose rows have different shapes (one column, three, none
// at all, several rows), with writes, which answer no result set, before
// and between them. Each scan records what it read under its own name, so
// a result set handed to another statement's scan shows up as the wrong
// rows under a name. Batched, it all goes in one round trip; unbatched,
// one a statement.
func TestEachResultSetReachesItsOwnScan(t *testing.T) {
	t.Parallel()
	for _, unbatched := range []bool{false, true} {
		t.Run(fmt.Sprintf("unbatched=%v", unbatched), func(t *testing.T) {
			t.Parallel()
			s, trips := probeStore(t, unbatched)
			seen := map[string]string{}
			var sent int64
			err := mysqlstore.InBatch(context.Background(), s, func(tx mysqlstore.Txn) error {
				clear(seen)
				before := trips.Load()
				if err := tx.Exec("INSERT INTO txn_probe (id, v) VALUES (?, ?)", 1, "a"); err != nil {
					return err
				}
				err := tx.Query(
					mysqlstore.Stmt{SQL: "SELECT ? AS n", Args: []any{7}, Scan: record(seen, "one column")},
					mysqlstore.Stmt{SQL: "INSERT INTO txn_probe (id, v) VALUES (?, ?)", Args: []any{2, "b"}},
					mysqlstore.Stmt{SQL: "SELECT 'x' AS a, 'y' AS b, 'z' AS c", Scan: record(seen, "three columns")},
					mysqlstore.Stmt{SQL: "SELECT id, v FROM txn_probe WHERE id < 0", Scan: record(seen, "no rows")},
					mysqlstore.Stmt{SQL: "UPDATE txn_probe SET v = 'B' WHERE id = ?", Args: []any{2}},
					mysqlstore.Stmt{SQL: "SELECT id, v FROM txn_probe ORDER BY id", Scan: record(seen, "the writes")},
				)
				sent = trips.Load() - before
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{
				"one column":    "n: 7",
				"three columns": "a b c: x y z",
				"no rows":       "id v:",
				"the writes":    "id v: 1 a; 2 B",
			}
			for name, w := range want {
				if seen[name] != w {
					t.Errorf("scan %q read %q, want %q", name, seen[name], w)
				}
			}
			if len(seen) != len(want) {
				t.Errorf("scans read %v, want %v", seen, want)
			}
			// BEGIN (2 statements), the first write, then 6 statements.
			wantSent := int64(1)
			if unbatched {
				wantSent = 2 + 1 + 6
			}
			if sent != wantSent {
				t.Errorf("the transaction's statements up to the query took %d round trips, want %d", sent, wantSent)
			}
		})
	}
}

// A batch whose statements and scans do not match fails: a SELECT
// without a scan, or a write with one, is refused by the count of result
// sets rather than shifting every later result set onto the wrong scan.
func TestBatchWithAMismatchedScanFails(t *testing.T) {
	t.Parallel()
	s, _ := probeStore(t, false)
	seen := map[string]string{}
	for name, qs := range map[string][]mysqlstore.Stmt{
		"a SELECT without a scan": {
			{SQL: "SELECT 1 AS unscanned"},
			{SQL: "SELECT 'x' AS a, 'y' AS b", Scan: record(seen, "two columns")},
		},
		"a write with a scan": {
			{SQL: "SELECT 'x' AS a, 'y' AS b", Scan: record(seen, "two columns")},
			{SQL: "INSERT INTO txn_probe (id, v) VALUES (?, ?)", Args: []any{9, "z"}, Scan: record(seen, "a write")},
		},
	} {
		err := mysqlstore.InBatch(context.Background(), s, func(tx mysqlstore.Txn) error { return tx.Query(qs...) })
		if err == nil || !strings.Contains(err.Error(), "result sets") {
			t.Errorf("%s: batch answered %v, want a failure counting its result sets", name, err)
		}
	}
}

// probeStore is a store on a fresh database with a probe table, whose
// connections count their round trips: each query text the driver sends
// (the DSN interpolates parameters on the client, so nothing is prepared).
func probeStore(t *testing.T, unbatched bool) (*mysqlstore.Store, *atomic.Int64) {
	t.Helper()
	db := testdb.New(t)
	if _, err := db.Exec("CREATE TABLE txn_probe (id INT PRIMARY KEY, v VARCHAR(8) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	trips := new(atomic.Int64)
	counted := sql.OpenDB(countingConnector{connector, trips})
	t.Cleanup(func() { counted.Close() })
	s, err := mysqlstore.New(mysqlstore.Config{DB: counted, Unbatched: unbatched, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return s, trips
}

// record is a scan that writes what it read under name in seen: the
// columns, then each row, every value as text ("a b: 1 2; 3 4").
func record(seen map[string]string, name string) func(*sql.Rows) error {
	return func(rows *sql.Rows) error {
		cols, err := rows.Columns()
		if err != nil {
			return err
		}
		var out []string
		for rows.Next() {
			vals := make([]sql.NullString, len(cols))
			dest := make([]any, len(cols))
			for i := range vals {
				dest[i] = &vals[i]
			}
			if err := rows.Scan(dest...); err != nil {
				return err
			}
			row := make([]string, len(vals))
			for i, v := range vals {
				row[i] = v.String
			}
			out = append(out, strings.Join(row, " "))
		}
		seen[name] = strings.TrimSpace(strings.Join(cols, " ") + ": " + strings.Join(out, "; "))
		return nil
	}
}

// countingConnector counts the query texts its connections send.
type countingConnector struct {
	driver.Connector
	n *atomic.Int64
}

func (c countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return countingConn{conn, c.n}, nil
}

type countingConn struct {
	driver.Conn
	n *atomic.Int64
}

func (c countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.n.Add(1)
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.n.Add(1)
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}
