package mysqlstore

import (
	"context"
	"slices"
	"sync"
)

// gates bounds how many reserve transactions of one pool run at once
// (Config.PoolConcurrency); the others wait here, holding no connection.
//
// Measured (reservoir bench, hot item, +1 ms, 2 cores): with every caller
// in the database at once, a hot pool's reserves cost more server CPU the
// more of them there are (each SKIP LOCKED scan walks over the units the
// others hold, and more of them come back short and retry), so throughput
// at 64 and 128 callers fell to 0.6x and 0.45x of that at 16. A queue in
// the store costs nothing on the server. The gate is per pool, so a hot
// item queues only its own buyers. Pools share gates by a hash of their
// key (pivotSlots of them), which at worst queues a cold pool behind a
// hot one that hashed alike. The zero value is ready.
type gates struct {
	once  [pivotSlots]sync.Once
	slots [pivotSlots]chan struct{}
}

// enter takes a place in the gate of each key (in slot order, so two carts
// never wait for each other in a cycle) and returns the function that
// gives them back.
func (g *gates) enter(ctx context.Context, size int, keys []key) (leave func(), err error) {
	idx := make([]int, 0, len(keys))
	for _, k := range keys {
		idx = append(idx, slotOf(k))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	taken := 0
	leave = func() {
		for _, i := range idx[:taken] {
			<-g.slots[i]
		}
	}
	for _, i := range idx {
		g.once[i].Do(func() { g.slots[i] = make(chan struct{}, size) })
		select {
		case g.slots[i] <- struct{}{}:
			taken++
		case <-ctx.Done():
			leave()
			return nil, ctx.Err()
		}
	}
	return leave, nil
}
