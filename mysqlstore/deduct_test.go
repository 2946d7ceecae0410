package mysqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// wave holds the deduct leader's first group until n more calls wait,
// so the next group is exactly those n: what concurrent legacy claims
// look like while a group is in flight.
func wave(t *testing.T, s *mysqlstore.Store, n int) (start func(func())) {
	t.Helper()
	release := make(chan struct{})
	var once sync.Once
	mysqlstore.SetBeforeDeductGroup(s, func(int) { once.Do(func() { <-release }) })
	return func(launch func()) {
		launch()
		deadline := time.Now().Add(10 * time.Second)
		for mysqlstore.WaitingDeducts(s) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d deducts waiting, want %d", mysqlstore.WaitingDeducts(s), n)
			}
			time.Sleep(time.Millisecond)
		}
		close(release)
	}
}

func deductOf(token string, item, loc, q int64) *reservation.DeductParams {
	return &reservation.DeductParams{Shop: redisShop, Token: token, Allocations: []reservation.Allocation{{Item: item, Location: loc, Quantity: q}}}
}

// Concurrent legacy claims share one transaction, and each is deducted
// once, exactly: the ledger row loses the sum, every token has its
// claims row, and the pool the claims did not hold in this store is
// trimmed so that pool + held <= available still holds.
func TestDeductsShareTransactions(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	b.stockShop(t, redisShop, 1, 1, 60)
	// Fill the pool (a shadow reserve and its release), so the trim has
	// something to take.
	line := []reservation.Line{{Item: 1, Quantity: 1, Locations: []int64{1}}}
	if _, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: redisShop, Token: "prime", Lines: line, TTL: time.Minute, As: reservation.AsShadow, Authority: reservation.AuthorityRedis}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.s.Release(ctx, &reservation.ReleaseParams{Shop: redisShop, Token: "prime", As: reservation.AsShadow}); err != nil {
		t.Fatal(err)
	}
	const n = 40
	start := wave(t, b.s, n)
	results := make([]reservation.DeductResult, n+1)
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	start(func() {
		for i := range n + 1 {
			wg.Go(func() { results[i], errs[i] = b.s.Deduct(ctx, deductOf(fmt.Sprintf("c%d", i), 1, 1, 1)) })
			if i == 0 {
				// The first one is the leader's first group: wait for it
				// to be taken before the others come.
				for mysqlstore.WaitingDeducts(b.s) != 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}
	})
	wg.Wait()
	for i := range n + 1 {
		if errs[i] != nil || !results[i].Applied {
			t.Errorf("deduct %d: %+v %v", i, results[i], errs[i])
		}
	}
	if got := b.ledgerOf(t, redisShop, 1, 1); got != 60-(n+1) {
		t.Errorf("ledger %d, want %d", got, 60-(n+1))
	}
	if got := b.db.Count(t, "reservation_claims"); got != n+1 {
		t.Errorf("%d claims rows, want %d", got, n+1)
	}
	if h := histogramCount(t, b, "reservoir_mysql_deduct_group_size"); h != 2 {
		t.Errorf("%d groups, want 2: the first call alone, then the %d that waited", h, n)
	}
	var avail, held, pool int64
	if err := b.db.QueryRow(`SELECT l.available,
	    (SELECT COALESCE(SUM(quantity), 0) FROM reserved_quantities r WHERE r.shop_id = l.shop_id AND r.inventory_item_id = 1),
	    (SELECT COUNT(*) FROM available_units u WHERE u.shop_id = l.shop_id AND u.inventory_item_id = 1)
	  FROM inventory_ledger l WHERE l.shop_id = ? AND l.inventory_item_id = 1`, redisShop).Scan(&avail, &held, &pool); err != nil {
		t.Fatal(err)
	}
	if pool+held > avail {
		t.Errorf("pool %d + held %d > available %d: the group broke the projection", pool, held, avail)
	}
}

// A group in which one call cannot go through (its token was deducted
// before; its ledger row cannot give) falls back to running each call
// alone: every call gets the answer it would have had alone, and the
// ledger loses exactly what was applied. Two calls with the same token in
// one wave deduct once.
func TestDeductGroupAnswersEachCall(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	b.stockShop(t, redisShop, 1, 1, 50)
	b.stockShop(t, redisShop, 2, 1, 1)
	if d, err := b.s.Deduct(ctx, deductOf("before", 1, 1, 2)); err != nil || !d.Applied {
		t.Fatalf("first deduct: %+v %v", d, err)
	}
	calls := []*reservation.DeductParams{
		deductOf("lead", 1, 1, 1),   // the leader's first group, alone
		deductOf("before", 1, 1, 2), // a repeat: not applied, the first deduct's answer
		deductOf("short", 2, 1, 5),  // the ledger has 1
		deductOf("ok-1", 1, 1, 3),
		deductOf("twice", 1, 1, 4),
		deductOf("twice", 1, 1, 4), // same token in the same wave
		deductOf("ok-2", 1, 1, 5),
	}
	start := wave(t, b.s, len(calls)-1)
	results := make([]reservation.DeductResult, len(calls))
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	start(func() {
		for i, p := range calls {
			wg.Go(func() { results[i], errs[i] = b.s.Deduct(ctx, p) })
			if i == 0 {
				for mysqlstore.WaitingDeducts(b.s) != 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}
	})
	wg.Wait()
	for i, p := range calls {
		switch p.Token {
		case "before":
			if errs[i] != nil || results[i].Applied || len(results[i].Allocations) != 1 || results[i].Allocations[0].Quantity != 2 {
				t.Errorf("repeat of a deducted token: %+v %v, want not applied with the first allocations", results[i], errs[i])
			}
		case "short":
			if !errors.Is(errs[i], reservation.ErrInsufficientStock) {
				t.Errorf("deduct of 5 from a ledger of 1: %+v %v, want ErrInsufficientStock", results[i], errs[i])
			}
		case "twice":
		default:
			if errs[i] != nil || !results[i].Applied {
				t.Errorf("deduct %s: %+v %v", p.Token, results[i], errs[i])
			}
		}
	}
	if a, b := results[4].Applied, results[5].Applied; a == b || errs[4] != nil || errs[5] != nil {
		t.Errorf("the same token twice: applied %v and %v (%v, %v), want exactly one", a, b, errs[4], errs[5])
	}
	// 50 - 2 (before) - 1 (lead) - 3 - 4 - 5 = 35; item 2 untouched.
	if got := b.ledgerOf(t, redisShop, 1, 1); got != 35 {
		t.Errorf("ledger of item 1: %d, want 35", got)
	}
	if got := b.ledgerOf(t, redisShop, 2, 1); got != 1 {
		t.Errorf("ledger of item 2: %d, want 1 (the short deduct changed nothing)", got)
	}
}

func histogramCount(t *testing.T, b bundle, name string) uint64 {
	t.Helper()
	fams, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func (b bundle) ledgerOf(t *testing.T, sh, item, loc int64) int64 {
	t.Helper()
	var n int64
	if err := b.db.QueryRow("SELECT available FROM inventory_ledger WHERE shop_id = ? AND inventory_item_id = ? AND location_id = ?", sh, item, loc).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A deduct runs only while its caller waits: one whose caller gave up
// before its group was sent is never applied (a legacy claim's grace
// relies on it: the release that follows asks the ledger, and a deduct
// landing after that answer would be a claim after a release).
func TestDeductOfAGoneCallerNeverLands(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	b.stockShop(t, redisShop, 1, 1, 10)
	start := wave(t, b.s, 2)
	gone, giveUp := context.WithCancel(ctx)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	start(func() {
		wg.Go(func() { _, errs[0] = b.s.Deduct(ctx, deductOf("lead", 1, 1, 1)) })
		for mysqlstore.WaitingDeducts(b.s) != 0 {
			time.Sleep(time.Millisecond)
		}
		wg.Go(func() { _, errs[1] = b.s.Deduct(gone, deductOf("gone", 1, 1, 2)) })
		wg.Go(func() { _, errs[2] = b.s.Deduct(ctx, deductOf("stays", 1, 1, 3)) })
		for mysqlstore.WaitingDeducts(b.s) != 2 {
			time.Sleep(time.Millisecond)
		}
		giveUp()
	})
	wg.Wait()
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("the callers that waited: %v, %v", errs[0], errs[2])
	}
	if !errors.Is(errs[1], context.Canceled) {
		t.Errorf("the caller that gave up: %v, want context.Canceled", errs[1])
	}
	if got := b.ledgerOf(t, redisShop, 1, 1); got != 10-1-3 {
		t.Errorf("ledger %d, want %d: the deduct of the caller that gave up landed", got, 10-1-3)
	}
}
