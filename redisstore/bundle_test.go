package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/internal/testdb"
	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// mysqlstore is the ledger and the source of MySQL holds and claims.
var _ redisstore.ResyncSource = (*mysqlstore.Store)(nil)

// servers are the Redis deployments every integration test runs against.
var servers = []struct {
	name string
	new  func(testing.TB) *testredis.Redis
}{
	{"standalone", testredis.New},
	{"cluster", testredis.NewCluster},
}

const shop = 42

// poolCap is the MySQL pool cap; the Redis store gets the same quantity
// limit, so every hold it places is one the ledger accepts to deduct.
const poolCap = 100

type bundle struct {
	r      *testredis.Redis
	db     *testdb.DB
	ledger *mysqlstore.Store
	s      *redisstore.Store
	reg    *prometheus.Registry
}

func limits() reservation.Limits { return reservation.Limits{MaxQuantity: poolCap} }

// setup builds a Redis store on a fresh prefix of srv, with a fresh ledger
// database as its ledger and resync source.
func setup(t *testing.T, srv func(testing.TB) *testredis.Redis) bundle {
	t.Helper()
	r := srv(t)
	db := testdb.New(t)
	ledger, err := mysqlstore.New(mysqlstore.Config{DB: db.DB, PoolCap: poolCap})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s, err := redisstore.New(redisstore.Config{
		Client: r.Client, Ledger: ledger, Source: ledger, Prefix: r.Prefix, Registerer: reg, Limits: limits(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return bundle{r: r, db: db, ledger: ledger, s: s, reg: reg}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func (b bundle) stock(t *testing.T, item, loc, n int64) {
	t.Helper()
	if _, err := b.s.Adjust(ctx(t), &reservation.AdjustParams{Shop: shop, Item: item, Location: loc, Available: &n}); err != nil {
		t.Fatalf("stock item %d at %d = %d: %v", item, loc, n, err)
	}
}

func line(item, qty int64, locs ...int64) reservation.Line {
	return reservation.Line{Item: item, Quantity: qty, Locations: locs}
}

func (b bundle) reserve(t *testing.T, token string, ttl time.Duration, lines ...reservation.Line) reservation.ReserveResult {
	t.Helper()
	res, err := b.s.Reserve(ctx(t), &reservation.ReserveParams{Shop: shop, Token: token, Lines: lines, TTL: ttl})
	if err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve %s: %+v %v", token, res, err)
	}
	return res
}

// qty reads a Redis quantity as stored (it may be negative), 0 when absent.
func (b bundle) qty(t *testing.T, item, loc int64) int64 {
	t.Helper()
	a, err := b.r.Client.HGet(ctx(t), b.key("qty:", item), fmt.Sprint(loc)).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return a
}

func (b bundle) ledgerAt(t *testing.T, item, loc int64) int64 {
	t.Helper()
	rows, err := b.ledger.Stock(ctx(t), &reservation.StockParams{Shop: shop})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Item == item && r.Location == loc {
			return r.Available
		}
	}
	return 0
}

// key builds a key of the test shop the way the store does (keys.go).
func (b bundle) key(kind string, id any) string {
	return fmt.Sprintf("%s{shop:%d}:%s%v", b.r.Prefix, shop, kind, id)
}

func (b bundle) drift(t *testing.T, from reservation.Authority) []redisstore.Drift {
	t.Helper()
	d, err := b.s.Drift(ctx(t), &redisstore.DriftParams{Shop: shop, HoldsFrom: from})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// counter reads a counter of the store's registry, 0 when absent.
func (b bundle) counter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func hasLabels(m *dto.Metric, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == kv[i] && l.GetValue() == kv[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

var errInjected = errors.New("injected: the process died between the ledger and Redis")
