package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
var _ redisstore.Source = (*mysqlstore.Store)(nil)

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
// database as its ledger and source.
func setup(t *testing.T, srv func(testing.TB) *testredis.Redis) bundle {
	t.Helper()
	return setupWith(t, srv, nil)
}

// setupWith is setup with the store's config changed by edit first.
func setupWith(t *testing.T, srv func(testing.TB) *testredis.Redis, edit func(*redisstore.Config)) bundle {
	t.Helper()
	r := srv(t)
	db := testdb.New(t)
	ledger, err := mysqlstore.New(mysqlstore.Config{DB: db.DB, PoolCap: poolCap})
	if err != nil {
		t.Fatal(err)
	}
	b := bundle{r: r, db: db, ledger: ledger}
	b.s, b.reg = b.store(t, edit)
	return b
}

// store builds another store on the bundle's prefix and ledger (its own
// registry), with the config changed by edit.
func (b bundle) store(t *testing.T, edit func(*redisstore.Config)) (*redisstore.Store, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := redisstore.Config{Client: b.r.Client, Ledger: b.ledger, Source: b.ledger, Prefix: b.r.Prefix, Registerer: reg, Limits: limits()}
	if edit != nil {
		edit(&cfg)
	}
	s, err := redisstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, reg
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// stock sets the ledger's available stock of item at loc to n through the
// store's Adjust, which makes the Redis quantity follow at once. It
// returns the ledger's change.
func (b bundle) stock(t *testing.T, item, loc, n int64) reservation.AdjustResult {
	t.Helper()
	res, err := b.s.Adjust(ctx(t), &reservation.AdjustParams{Shop: shop, Item: item, Location: loc, Available: &n})
	if err != nil {
		t.Fatalf("stock item %d at %d = %d: %v", item, loc, n, err)
	}
	if res.ChangeID == 0 && res.Delta != 0 {
		t.Fatalf("stock item %d at %d = %d: the ledger moved by %d without a change id, so Redis cannot follow it (a ledger without the change feed?)", item, loc, n, res.Delta)
	}
	return res
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

// settled checks that the ledger and Redis's quantity of item 1 at
// location 1 are both want: Redis offers what the ledger has. why, when
// not empty, says what that means for the test.
func (b bundle) settled(t *testing.T, want int64, why string) {
	t.Helper()
	if l, q := b.ledgerAt(t, 1, 1), b.qty(t, 1, 1); l != want || q != want {
		if why != "" {
			why = ": " + why
		}
		t.Errorf("ledger %d, quantity %d; want %d and %d%s", l, q, want, want, why)
	}
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

func (b bundle) drift(t *testing.T) []reservation.RedisDrift {
	t.Helper()
	d, err := b.s.Drift(ctx(t), &reservation.DriftParams{Shop: shop})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// dump renders every key of the test, its type, content and whether it
// has a TTL (not the TTL itself, which runs down), with the prefix
// removed: two dumps are equal when nothing was written in between (a
// tombstone written again moves its score in the tombstone index).
func (b bundle) dump(t *testing.T) string {
	t.Helper()
	return b.dumpAs(t, true)
}

// state is dump without the tombstone index's scores (the clock of each
// write): two stores that hold the same state have the same one.
func (b bundle) state(t *testing.T) string {
	t.Helper()
	return b.dumpAs(t, false)
}

func (b bundle) dumpAs(t *testing.T, strict bool) string {
	t.Helper()
	c := ctx(t)
	keys := b.r.Keys(t)
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		typ, err := b.r.Client.Type(c, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		var v any
		switch typ {
		case "string":
			v, err = b.r.Client.Get(c, k).Result()
		case "hash":
			var m map[string]string
			m, err = b.r.Client.HGetAll(c, k).Result()
			v = sortedMap(m)
		case "zset":
			if !strict && strings.HasSuffix(k, ":tombs") {
				// Scored by when each tombstone is forgotten: the clock of
				// the write, not state.
				v, err = b.r.Client.ZRange(c, k, 0, -1).Result()
			} else {
				v, err = b.r.Client.ZRangeWithScores(c, k, 0, -1).Result()
			}
		case "set":
			var ms []string
			ms, err = b.r.Client.SMembers(c, k).Result()
			slices.Sort(ms)
			v = ms
		}
		if err != nil {
			t.Fatal(err)
		}
		ttl, err := b.r.Client.PTTL(c, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %s ttl=%v %v", strings.TrimPrefix(k, b.r.Prefix), typ, ttl > 0, v))
	}
	return strings.Join(out, "\n")
}

func sortedMap(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// age moves a hold into the past on the Redis clock, as if time had
// passed: its expiry to expAgo ago and, when claimingAgo >= 0, the start
// of its legacy claim to claimingAgo ago. Tests use it instead of
// sleeping.
func (b bundle) age(t *testing.T, token string, expAgo, claimingAgo time.Duration) {
	t.Helper()
	c := ctx(t)
	now, err := b.r.Client.Time(c).Result()
	if err != nil {
		t.Fatal(err)
	}
	exp := now.Add(-expAgo).UnixMilli()
	if n, err := b.r.Client.Exists(c, b.key("hold:", token)).Result(); err != nil || n != 1 {
		t.Fatalf("age %s: no hold (%v)", token, err)
	}
	if err := b.r.Client.HSet(c, b.key("hold:", token), "exp", exp).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.r.Client.ZAdd(c, b.key("expiry", ""), redis.Z{Score: float64(exp), Member: token}).Err(); err != nil {
		t.Fatal(err)
	}
	if claimingAgo >= 0 {
		if err := b.r.Client.HSet(c, b.key("hold:", token), "claiming", now.Add(-claimingAgo).UnixMilli()).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// claiming reads a hold's claiming mark ("" when none).
func (b bundle) claiming(t *testing.T, token string) string {
	t.Helper()
	v, err := b.r.Client.HGet(ctx(t), b.key("hold:", token), "claiming").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return v
}

// counter reads a counter of the bundle's registry, 0 when absent.
func (b bundle) counter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return counterOf(t, b.reg, name, labels...)
}

func counterOf(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
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

// scriptRuns reads how many calls of script reservoir_redis_script_seconds
// has timed in the bundle's registry, 0 when none.
func (b bundle) scriptRuns(t *testing.T, script string) uint64 {
	t.Helper()
	mfs, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "reservoir_redis_script_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, []string{"script", script}) {
				return m.GetHistogram().GetSampleCount()
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

// deduct has the ledger record a claim directly: what a legacy claim's
// deduction leaves when every Redis step after it is lost.
func (b bundle) deduct(t *testing.T, token string, allocs ...reservation.Allocation) {
	t.Helper()
	if d, err := b.ledger.Deduct(ctx(t), &reservation.DeductParams{Shop: shop, Token: token, Allocations: allocs}); err != nil || !d.Applied {
		t.Fatalf("deduct %s: %+v %v", token, d, err)
	}
}

func alloc(item, loc, q int64) reservation.Allocation {
	return reservation.Allocation{Item: item, Location: loc, Quantity: q}
}

var errInjected = errors.New("injected: the process died between the ledger and Redis")

// failingLedger is the real ledger whose Deduct fails without an answer
// (a reset connection): whether it committed is unknown.
type failingLedger struct{ *mysqlstore.Store }

func (failingLedger) Deduct(context.Context, *reservation.DeductParams) (reservation.DeductResult, error) {
	return reservation.DeductResult{}, errors.New("ledger connection reset")
}

// failingSource is a ledger whose claims cannot be read.
type failingSource struct{}

func (failingSource) Holds(context.Context, int64) ([]reservation.Hold, error) {
	return nil, errors.New("ledger connection refused")
}

func (failingSource) Claims(context.Context, int64, []string) (map[string][]reservation.Allocation, error) {
	return nil, errors.New("ledger connection refused")
}
