package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/reservation"
)

// bareStore is a store on a fresh prefix without a ledger: enough for the
// scripts, which never reach it.
func bareStore(t *testing.T) (*Store, *testredis.Redis) {
	t.Helper()
	r := testredis.New(t)
	cfg := Config{Client: r.Client, Prefix: r.Prefix, Registerer: prometheus.NewRegistry()}.WithDefaults()
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		t.Fatal(err)
	}
	return &Store{client: r.Client, cfg: cfg, metrics: m}, r
}

// The shadow path's promise (it writes nothing) is kept by the server, not
// only by the scripts' branches: run read-only, a script that reaches a
// write fails. Shown here by running the deciding mode read-only, where
// it would write; the shadow mode of the same scripts passes.
func TestReadOnlyRunRefusesWrites(t *testing.T) {
	t.Parallel()
	s, _ := bareStore(t)
	c := context.Background()
	k := s.shopKeys(1)
	if err := s.client.HSet(c, k.qty(5), "1", 10).Err(); err != nil {
		t.Fatal(err)
	}
	reserveArgs := func(mode string) []any {
		return []any{k.base, "t", 60000, "redis", "1", mode, s.cfg.TombstoneTTL.Milliseconds(), 1, 5, 2, 1, 1}
	}
	keys := []string{k.expiry(), k.hold("t"), k.tomb("t"), k.fence()}
	if _, err := s.runRO(c, "reserve", scriptReserve, keys, reserveArgs(modeDecide)...); err == nil || !strings.Contains(err.Error(), "Write commands are not allowed") {
		t.Fatalf("deciding reserve run read-only: %v, want the server's refusal of a write", err)
	}
	reply, err := s.runRO(c, "reserve", scriptReserve, keys, reserveArgs(modeShadow)...)
	if err != nil || reply[0] != "reserved" {
		t.Fatalf("shadow reserve run read-only: %v %v", reply, err)
	}
	if _, err := s.run(c, "reserve", scriptReserve, keys, reserveArgs(modeDecide)...); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		script func(mode string) error
	}{
		{"release", func(mode string) error {
			_, err := s.runRO(c, "release", scriptRelease, []string{k.hold("t"), k.tomb("t"), k.fence()}, k.base, "t", mode, 1000, 1000, "")
			return err
		}},
		{"claim_check", func(mode string) error {
			_, err := s.runRO(c, "claim_check", scriptClaimCheck, []string{k.hold("t"), k.tomb("t"), k.fence()}, mode, k.base, "t", 1000)
			return err
		}},
	} {
		if err := tc.script(modeDecide); err == nil || !strings.Contains(err.Error(), "Write commands are not allowed") {
			t.Errorf("deciding %s run read-only: %v, want the server's refusal", tc.name, err)
		}
		if err := tc.script(modeShadow); err != nil {
			t.Errorf("shadow %s run read-only: %v", tc.name, err)
		}
	}
}

// The reap script checks the fence itself: the reaper's peek skips a shop
// MySQL decides, but a handoff between the peek and the script must stop
// the script too.
func TestReapScriptChecksTheFence(t *testing.T) {
	t.Parallel()
	s, _ := bareStore(t)
	c := context.Background()
	k := s.shopKeys(1)
	if err := s.client.HSet(c, k.qty(5), "1", 10).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := s.Reserve(c, &reservation.ReserveParams{Shop: 1, Token: "t", Lines: []reservation.Line{{Item: 5, Quantity: 2, Locations: []int64{1}}}, TTL: time.Second})
	if err != nil || res.Status != reservation.StatusReserved {
		t.Fatal(res, err)
	}
	if err := s.client.HSet(c, k.hold("t"), "exp", 1).Err(); err != nil { // long expired
		t.Fatal(err)
	}
	if err := s.client.ZAdd(c, k.expiry(), redis.Z{Score: 1, Member: "t"}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Yield(c, 1, 1); err != nil {
		t.Fatal(err)
	}
	now, err := s.client.Time(c).Result()
	if err != nil {
		t.Fatal(err)
	}
	records, units, err := s.reapShop(c, 1, now.UnixMilli(), 10)
	if err != nil || records != 0 || units != 0 {
		t.Errorf("reap script on a shop MySQL decides: %d records, %d units, %v; want nothing", records, units, err)
	}
	if n := s.client.Exists(c, k.hold("t")).Val(); n != 1 {
		t.Error("the reap script expired a hold of a shop MySQL decides")
	}
}
