package reconcile_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/reconcile"
	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

const shop = 5

type bundle struct {
	db *testdb.DB
	r  *testredis.Redis
	my *mysqlstore.Store
	rd *redisstore.Store
	rc *reconcile.Reconciler
}

// setup builds one pod whose two stores agree: the same stock, the same
// two holds.
func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{db: testdb.New(t), r: testredis.New(t)}
	var err error
	if b.my, err = mysqlstore.New(mysqlstore.Config{DB: b.db.DB, PoolCap: 20}); err != nil {
		t.Fatal(err)
	}
	if b.rd, err = redisstore.New(redisstore.Config{Client: b.r.Client, Prefix: b.r.Prefix, Ledger: b.my, Source: b.my,
		Limits: reservation.Limits{MaxQuantity: 20}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for item := int64(1); item <= 2; item++ {
		n := int64(50)
		// Redis as authority sets the ledger and its own quantity; MySQL's
		// view is the same ledger.
		if _, err := b.rd.Adjust(ctx, &reservation.AdjustParams{Shop: shop, Item: item, Location: 1, Available: &n}); err != nil {
			t.Fatal(err)
		}
	}
	for i, st := range []reservation.Store{b.rd, b.my} {
		for _, tok := range []string{"a", "b"} {
			res, err := st.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: tok, TTL: time.Minute, Authority: reservation.AuthorityRedis,
				Lines: []reservation.Line{{Item: 1, Quantity: 3, Locations: []int64{1}}}})
			if err != nil || res.Status != reservation.StatusReserved {
				t.Fatalf("store %d reserve %s: %+v %v", i, tok, res, err)
			}
		}
	}
	b.rc = reconcile.New([]reconcile.Pod{{Name: "p", MySQL: b.my, Redis: b.rd}}, nil)
	if rep := b.run(t, reservation.AuthorityMySQL, false); len(kinds(rep)) != 0 {
		t.Fatalf("fresh pod has drift: %s %v", rep.Summary(), rep.Findings)
	}
	return b
}

func (b *bundle) run(t *testing.T, auth reservation.Authority, repair bool) reconcile.Report {
	t.Helper()
	rep, err := b.rc.Run(context.Background(), "p", reconcile.Options{Authority: auth, Repair: repair})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func kinds(rep reconcile.Report) []string {
	var out []string
	for _, f := range rep.Findings {
		if f.Kind != string(mysqlstore.DriftEmptyPool) {
			out = append(out, f.Side+":"+f.Kind)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// redisState is every key of the pod's Redis prefix with its value, to
// prove a repair did not touch Redis.
func (b *bundle) redisState(t *testing.T) string {
	t.Helper()
	keys := b.r.Keys(t)
	slices.Sort(keys)
	var sb strings.Builder
	for _, k := range keys {
		typ := b.r.Client.Type(context.Background(), k).Val()
		switch typ {
		case "hash":
			fmt.Fprintf(&sb, "%s=%v\n", k, b.r.Client.HGetAll(context.Background(), k).Val())
		case "zset":
			fmt.Fprintf(&sb, "%s=%v\n", k, b.r.Client.ZRangeWithScores(context.Background(), k, 0, -1).Val())
		default:
			fmt.Fprintf(&sb, "%s=%v\n", k, b.r.Client.Get(context.Background(), k).Val())
		}
	}
	return sb.String()
}

func (b *bundle) mysqlState(t *testing.T) string {
	t.Helper()
	rows, err := b.db.Query("SELECT token, inventory_item_id, location_id, quantity FROM reserved_quantities ORDER BY 1, 2, 3")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var sb strings.Builder
	for rows.Next() {
		var tok string
		var i, l, q int64
		_ = rows.Scan(&tok, &i, &l, &q)
		fmt.Fprintf(&sb, "%s %d %d %d\n", tok, i, l, q)
	}
	var ledger int64
	_ = b.db.QueryRow("SELECT SUM(available) FROM inventory_ledger").Scan(&ledger)
	fmt.Fprintf(&sb, "ledger %d\n", ledger)
	return sb.String()
}

// f. With MySQL the authority, drift injected into Redis is found and
// --repair rebuilds Redis; MySQL (holds and ledger) is not touched.
func TestRepairRedisWhenMySQLIsTheAuthority(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	qtyKey := fmt.Sprintf("%s{shop:%d}:qty:2", b.r.Prefix, shop)
	b.r.Client.HIncrBy(ctx, qtyKey, "1", 7)                                                         // a quantity off by 7
	b.r.Client.Del(ctx, fmt.Sprintf("%s{shop:%d}:hold:a", b.r.Prefix, shop))                        // a hold lost
	if _, err := b.db.Exec("INSERT INTO available_units VALUES (?, 2, 1, 900)", shop); err != nil { // MySQL pool: fine, under the ledger
		t.Fatal(err)
	}
	mysqlBefore := b.mysqlState(t)
	rep := b.run(t, reservation.AuthorityMySQL, false)
	got := kinds(rep)
	for _, want := range []string{"redis:missing_hold", "redis:quantity"} {
		if !slices.Contains(got, want) {
			t.Errorf("findings %v: no %s", got, want)
		}
	}
	rep = b.run(t, reservation.AuthorityMySQL, true)
	t.Log(rep.Summary())
	if rep.Repaired == 0 {
		t.Errorf("nothing repaired: %v", rep.Findings)
	}
	if rep := b.run(t, reservation.AuthorityMySQL, false); len(kinds(rep)) != 0 {
		t.Errorf("drift after repair: %v", rep.Findings)
	}
	if after := b.mysqlState(t); after != mysqlBefore {
		t.Errorf("the repair touched the authority (MySQL):\nbefore %s\nafter %s", mysqlBefore, after)
	}
}

// f. With Redis the authority, drift injected into MySQL (a lost hold, an
// extra hold, a pool over the ledger) is found and --repair fixes MySQL;
// Redis is not touched.
func TestRepairMySQLWhenRedisIsTheAuthority(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.db.Exec("DELETE FROM reserved_quantities WHERE token = 'a'"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec("INSERT INTO reserved_quantities (shop_id, token, inventory_item_id, location_id, quantity, expires_at, authority) VALUES (?, 'ghost', 2, 1, 4, NOW(3) + INTERVAL 1 HOUR, 'redis')", shop); err != nil {
		t.Fatal(err)
	}
	for u := 1000; u < 1060; u++ { // 60 units over a ledger of 50
		if _, err := b.db.Exec("INSERT INTO available_units VALUES (?, 2, 1, ?)", shop, u); err != nil {
			t.Fatal(err)
		}
	}
	redisBefore := b.redisState(t)
	rep := b.run(t, reservation.AuthorityRedis, false)
	got := kinds(rep)
	for _, want := range []string{"mysql:extra_hold", "mysql:missing_hold", "mysql:over_projected"} {
		if !slices.Contains(got, want) {
			t.Errorf("findings %v: no %s", got, want)
		}
	}
	rep = b.run(t, reservation.AuthorityRedis, true)
	t.Log(rep.Summary())
	if rep := b.run(t, reservation.AuthorityRedis, false); len(kinds(rep)) != 0 {
		t.Errorf("drift after repair: %v", rep.Findings)
	}
	if after := b.redisState(t); after != redisBefore {
		t.Errorf("the repair touched the authority (Redis):\nbefore %s\nafter %s", redisBefore, after)
	}
	if n := b.db.Count(t, "reserved_quantities"); n != 2 {
		t.Errorf("MySQL holds %d rows after repair, want Redis's 2", n)
	}
}

// A run resumes after the last shop it finished.
func TestResumeFromCheckpoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cp := filepath.Join(t.TempDir(), "checkpoint")
	rep, err := b.rc.Run(context.Background(), "p", reconcile.Options{Shops: []int64{shop, shop + 1}, Checkpoint: cp, Authority: reservation.AuthorityRedis})
	if err != nil || rep.Shops != 2 {
		t.Fatalf("first run: %+v %v", rep, err)
	}
	rep, err = b.rc.Run(context.Background(), "p", reconcile.Options{Shops: []int64{shop, shop + 1, shop + 2}, Checkpoint: cp, Resume: true, Authority: reservation.AuthorityRedis})
	if err != nil || rep.Shops != 1 || rep.Skipped != 2 {
		t.Fatalf("resumed run: shops %d skipped %d, %v; want 1 and 2", rep.Shops, rep.Skipped, err)
	}
}
