package mysqlstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The in-process refill join, on its own (issue 17's fourth shape): the
// pool tests count refills, but a second mechanism (the replenish lock
// row's generation, across stores) keeps those counts right even with the
// join broken, so a broken join only costs connections and time. Here
// the join is checked directly:
//   - reservers that find one pool short together run one replenish and
//     the others join it, holding nothing, and hear what it added;
//   - a reserver whose epoch moved (a refill landed after it looked)
//     joins without a replenish;
//   - a refill that added nothing answers no one: each waiter then runs
//     its own replenish, whose snapshot decides for it;
//   - another pool's reserver is never held up by this pool's refill.
func TestRefillJoin(t *testing.T) {
	var f refills
	k := key{shop: 1, item: 1, loc: 1}
	other := key{shop: 1, item: 2, loc: 1}
	var calls atomic.Int64
	release := make(chan struct{})
	started := make(chan struct{}, 16)
	slow := func(ctx context.Context, _ key) (snapshot, int64, error) {
		calls.Add(1)
		started <- struct{}{}
		<-release
		return snapshot{available: 10, pool: 10}, 10, nil
	}

	seen := f.epoch(k)
	const reservers = 8
	type answer struct {
		added  int64
		joined bool
		err    error
	}
	answers := make(chan answer, reservers)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, added, joined, err := f.do(context.Background(), k, seen, slow)
		answers <- answer{added, joined, err}
	})
	<-started // the first reserver's replenish runs
	for range reservers - 1 {
		wg.Go(func() {
			_, added, joined, err := f.do(context.Background(), k, seen, slow)
			answers <- answer{added, joined, err}
		})
	}
	// The others are waiting on it (not on a replenish of their own).
	waitFor(t, func() bool { return waitersOf(&f, k) == reservers-1 || len(started) > 0 }, "the others to join")
	// Another pool is not held up by k's refill.
	quick := func(context.Context, key) (snapshot, int64, error) { return snapshot{}, 3, nil }
	if _, added, joined, err := f.do(context.Background(), other, f.epoch(other), quick); err != nil || joined || added != 3 {
		t.Fatalf("another pool's refill: added %d joined %v err %v; want its own 3", added, joined, err)
	}
	close(release)
	wg.Wait()
	close(answers)
	var ran, joinedN int
	for a := range answers {
		if a.err != nil || a.added != 10 {
			t.Errorf("a reserver heard added %d, err %v; want the refill's 10", a.added, a.err)
		}
		if a.joined {
			joinedN++
		} else {
			ran++
		}
	}
	if calls.Load() != 1 || ran != 1 || joinedN != reservers-1 {
		t.Fatalf("%d replenishes ran (%d reservers ran one, %d joined); want 1 run and %d joined", calls.Load(), ran, joinedN, reservers-1)
	}

	// The epoch moved since this reserver looked: it joins at once.
	calls.Store(0)
	if _, _, joined, err := f.do(context.Background(), k, seen, slow); err != nil || !joined || calls.Load() != 0 {
		t.Fatalf("stale epoch: joined %v err %v, %d replenishes; want joined without one", joined, err, calls.Load())
	}

	// A refill that added nothing: each waiter runs its own replenish.
	empty := make(chan struct{})
	var emptyCalls atomic.Int64
	none := func(ctx context.Context, _ key) (snapshot, int64, error) {
		if emptyCalls.Add(1) == 1 {
			<-empty
		}
		return snapshot{available: 5, held: 5}, 0, nil
	}
	seen = f.epoch(k)
	var wg2 sync.WaitGroup
	results := make(chan bool, 3)
	wg2.Go(func() {
		_, _, joined, _ := f.do(context.Background(), k, seen, none)
		results <- joined
	})
	waitFor(t, func() bool { return emptyCalls.Load() == 1 }, "the first replenish to start")
	for range 2 {
		wg2.Go(func() {
			_, _, joined, _ := f.do(context.Background(), k, seen, none)
			results <- joined
		})
	}
	waitFor(t, func() bool { return waitersOf(&f, k) == 2 }, "the waiters")
	close(empty)
	wg2.Wait()
	close(results)
	for joined := range results {
		if joined {
			t.Error("a waiter on a refill that added nothing was answered by it; want its own replenish")
		}
	}
	if emptyCalls.Load() != 3 {
		t.Errorf("%d replenishes after a refill that added nothing; want 3 (one each)", emptyCalls.Load())
	}
}

// waitersOf is how many reservers wait on the refill of k in flight.
func waitersOf(f *refills, k key) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl, ok := f.inFlight[k]; ok {
		return fl.waiters
	}
	return 0
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
