package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/internal/testredis"
	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// reshardShop is this test's own: its slot is the one moved between the
// masters, and no other test's shop hashes there.
const reshardShop = 4242

// A slot migrated between the cluster's masters while reserves, releases
// and adjusts run on it (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE of
// its keys, SETSLOT NODE, three times round the masters): no call fails
// (the client follows MOVED and ASK, and resends after TRYAGAIN, which
// says the script did not run), and nothing is applied twice: the ledger
// moved by the adjusts exactly, each Redis quantity is the ledger's less
// the units held, and every hold that answered is there, once.
//
// Not parallel: while it runs the package's parallel tests, whose shared
// cluster client does not follow redirects, wait. It puts the slot back
// where it was, whatever happens.
func TestReshardUnderTraffic(t *testing.T) {
	client := redisstore.NewClient(&redis.UniversalOptions{Addrs: testredis.ClusterAddrs(t), PoolSize: 64})
	t.Cleanup(func() { client.Close() })
	b := setupWith(t, func(tb testing.TB) *testredis.Redis {
		r := testredis.NewCluster(tb) // a fresh prefix, its keys deleted at the end
		return &testredis.Redis{Client: client, Prefix: r.Prefix, Cluster: true}
	}, nil)
	c := ctx(t)

	m := masters(t, c)
	slot, err := client.ClusterKeySlot(c, b.keyOf(reshardShop, "fence", "")).Result()
	if err != nil {
		t.Fatal(err)
	}
	home := m.owner(t, c, int(slot))
	t.Cleanup(func() { m.restore(t, int(slot), home) })

	const items, stock = 3, 1_000_000
	for item := int64(1); item <= items; item++ {
		n := int64(stock)
		if _, err := b.s.Adjust(c, &reservation.AdjustParams{Shop: reshardShop, Item: item, Location: 1, Available: &n}); err != nil {
			t.Fatal(err)
		}
	}

	// The traffic: each worker reserves one unit under a new token,
	// releases every other hold, and adjusts +1 every third call.
	var (
		mu              sync.Mutex
		held, released  []string
		adjusted        [items + 1]int64
		failures        []error
		calls, inFlight atomic.Int64
		stop            = make(chan struct{})
		wg              sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		failures = append(failures, err)
		mu.Unlock()
	}
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				item := int64(i%items + 1)
				token := fmt.Sprintf("w%d-%d", w, i)
				inFlight.Add(1)
				res, err := b.s.Reserve(c, &reservation.ReserveParams{Shop: reshardShop, Token: token, Lines: []reservation.Line{line(item, 1, 1)}, TTL: 10 * time.Minute})
				if err != nil || res.Status != reservation.StatusReserved {
					fail(fmt.Errorf("reserve %s: %+v %w", token, res, err))
					inFlight.Add(-1)
					continue
				}
				calls.Add(1)
				done := &held
				if i%2 == 0 {
					if rl, err := b.s.Release(c, &reservation.ReleaseParams{Shop: reshardShop, Token: token}); err != nil || !rl.Released {
						fail(fmt.Errorf("release %s: %+v %w", token, rl, err))
					} else {
						done = &released
						calls.Add(1)
					}
				}
				adjust := i%3 == 0
				if adjust {
					if _, err := b.s.Adjust(c, &reservation.AdjustParams{Shop: reshardShop, Item: item, Location: 1, Delta: 1, Key: token}); err != nil {
						fail(fmt.Errorf("adjust %s: %w", token, err))
						adjust = false
					} else {
						calls.Add(1)
					}
				}
				mu.Lock()
				*done = append(*done, token)
				if adjust {
					adjusted[item]++
				}
				mu.Unlock()
				inFlight.Add(-1)
			}
		})
	}

	// traffic waits until n counts more calls (started, or answered),
	// enough for a window to test something: under -race on a busy machine
	// a call may take long.
	traffic := func(n *atomic.Int64, more int64, window string) {
		want := n.Load() + more
		for deadline := time.Now().Add(10 * time.Second); n.Load() < want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("no calls while %s: the test did not test", window)
				return
			}
		}
	}
	// Round the masters and home again, with traffic in each window: the
	// slot migrating (ASK, TRYAGAIN) and just moved (MOVED, until the
	// client reloads its map).
	at := home
	for range len(m.nodes) {
		next := m.nodes[(slices.Index(m.nodes, at)+1)%len(m.nodes)]
		// While the slot is migrating the scripts, whose keys are then
		// partly on either node, get ASK and TRYAGAIN until its keys have
		// moved: calls in flight meet it, and their retries (a second or
		// so) outlast it.
		err := m.move(c, int(slot), at, next, func() {
			for deadline := time.Now().Add(10 * time.Second); inFlight.Load() == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Errorf("no call in flight while slot %d was migrating to %s: the test did not test", slot, next.addr)
					break
				}
			}
			time.Sleep(20 * time.Millisecond)
		})
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("move slot %d from %s to %s: %v", slot, at.addr, next.addr, err)
		}
		traffic(&calls, 4, fmt.Sprintf("slot %d had just moved to %s", slot, next.addr))
		at = next
	}
	close(stop)
	wg.Wait()

	for i, err := range failures {
		if i == 10 {
			t.Errorf("... and %d more", len(failures)-10)
			break
		}
		t.Errorf("during the reshard: %v", err)
	}
	t.Logf("%d calls, %d holds, %d released, %d failed", calls.Load(), len(held), len(released), len(failures))

	stockNow, err := b.ledger.Stock(c, &reservation.StockParams{Shop: reshardShop})
	if err != nil {
		t.Fatal(err)
	}
	heldOf := map[int64]int64{}
	for _, token := range held {
		h, err := b.s.Get(c, &reservation.GetParams{Shop: reshardShop, Token: token})
		if err != nil || h.Quantity() != 1 {
			t.Errorf("hold %s: %+v %v, want 1 unit held", token, h, err)
			continue
		}
		heldOf[h.Allocations[0].Item]++
	}
	for _, token := range released {
		if h, err := b.s.Get(c, &reservation.GetParams{Shop: reshardShop, Token: token}); !errors.Is(err, reservation.ErrReleased) {
			t.Errorf("released %s: %+v %v, want ErrReleased", token, h, err)
		}
	}
	for item := int64(1); item <= items; item++ {
		var ledger int64 = -1
		for _, row := range stockNow {
			if row.Item == item && row.Location == 1 {
				ledger = row.Available
			}
		}
		if want := stock + adjusted[item]; ledger != want {
			t.Errorf("item %d: ledger %d, want %d (the stock and %d adjusts of +1)", item, ledger, want, adjusted[item])
		}
		q, err := client.HGet(c, b.keyOf(reshardShop, "qty:", item), "1").Int64()
		if err != nil {
			t.Fatal(err)
		}
		if q != ledger-heldOf[item] {
			t.Errorf("item %d: Redis has %d, want the ledger's %d less the %d held", item, q, ledger, heldOf[item])
		}
	}
}

// keyOf builds a key of shop the way the store does (keys.go).
func (b bundle) keyOf(shop int64, kind string, id any) string {
	return fmt.Sprintf("%s{shop:%d}:%s%v", b.r.Prefix, shop, kind, id)
}

// master is one of the cluster's masters, reached directly.
type master struct {
	id, addr string
	c        *redis.Client
}

type clusterMasters struct{ nodes []*master }

func masters(t *testing.T, ctx context.Context) clusterMasters {
	t.Helper()
	var m clusterMasters
	for _, addr := range testredis.ClusterAddrs(t) {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		id, err := c.ClusterMyID(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		m.nodes = append(m.nodes, &master{id: id, addr: addr, c: c})
	}
	return m
}

// owner is the master that serves slot, as the first node sees it.
func (m clusterMasters) owner(t *testing.T, ctx context.Context, slot int) *master {
	t.Helper()
	id, err := ownerID(ctx, m.nodes[0].c, slot)
	for _, n := range m.nodes {
		if err == nil && n.id == id {
			return n
		}
	}
	t.Fatalf("no master serves slot %d: %v", slot, err)
	return nil
}

// ownerID is the id of the master that serves slot, as c sees it.
func ownerID(ctx context.Context, c *redis.Client, slot int) (string, error) {
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start <= int64(slot) && int64(slot) <= r.End {
				for _, n := range sh.Nodes {
					if n.Role == "master" {
						return n.ID, nil
					}
				}
			}
		}
	}
	return "", fmt.Errorf("no master serves slot %d", slot)
}

// move migrates slot from one master to another the way redis-cli
// --cluster reshard does, calling midway once it is marked (so that calls
// meet the migration half done).
func (m clusterMasters) move(ctx context.Context, slot int, from, to *master, midway func()) error {
	if err := to.c.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", from.id).Err(); err != nil {
		return err
	}
	if err := from.c.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", to.id).Err(); err != nil {
		return err
	}
	midway()
	if err := migrateKeys(ctx, slot, from, to); err != nil {
		return err
	}
	return m.assign(ctx, slot, to, from)
}

// migrateKeys moves every key of slot that from holds to to, which owns
// or imports the slot.
func migrateKeys(ctx context.Context, slot int, from, to *master) error {
	host, port, _ := net.SplitHostPort(to.addr)
	for {
		keys, err := from.c.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil || len(keys) == 0 {
			return err
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "REPLACE", "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := from.c.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("MIGRATE %d keys from %s: %w", len(keys), from.addr, err)
		}
	}
}

// assign gives slot to owner on every master: the owner first, then the
// one it came from, then the rest (as the manual says).
func (m clusterMasters) assign(ctx context.Context, slot int, owner, from *master) error {
	order := []*master{owner, from}
	for _, n := range m.nodes {
		if n != owner && n != from {
			order = append(order, n)
		}
	}
	for _, n := range order {
		if err := n.c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", owner.id).Err(); err != nil {
			return fmt.Errorf("SETSLOT NODE on %s: %w", n.addr, err)
		}
	}
	return nil
}

// restore puts slot back on home whatever state a failed test left it in
// (migration marks, keys on any master, any owner): no marks, every key on
// home, every master agreeing.
func (m clusterMasters) restore(t *testing.T, slot int, home *master) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range m.nodes {
		if err := n.c.Do(ctx, "CLUSTER", "SETSLOT", slot, "STABLE").Err(); err != nil {
			t.Errorf("restore slot %d: SETSLOT STABLE on %s: %v", slot, n.addr, err)
		}
	}
	from := m.owner(t, ctx, slot)
	if from != home {
		// Importing, home takes the keys before it owns the slot.
		if err := home.c.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", from.id).Err(); err != nil {
			t.Errorf("restore slot %d: SETSLOT IMPORTING on %s: %v", slot, home.addr, err)
		}
	}
	for _, n := range m.nodes {
		if n != home {
			if err := migrateKeys(ctx, slot, n, home); err != nil {
				t.Errorf("restore slot %d: %v", slot, err)
			}
		}
	}
	if err := m.assign(ctx, slot, home, from); err != nil {
		t.Errorf("restore slot %d: %v", slot, err)
	}
	// Every master agrees before the next test runs.
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range m.nodes {
		for {
			id, err := ownerID(ctx, n.c, slot)
			if id == home.id {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("restore slot %d: %s does not see it on %s: %v", slot, n.addr, home.addr, err)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
