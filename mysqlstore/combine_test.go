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

// wave shapes a combiner's groups the way concurrent calls shape them
// while a group is in flight: first's call runs alone (the leader's first
// group, held in its hook), the calls rest launches wait meanwhile, and
// once n of them wait the first group goes and those n make the next.
func wave(t *testing.T, setHook func(func(int)), waiting func() int, n int, first, rest func()) {
	t.Helper()
	taken, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	setHook(func(int) { once.Do(func() { close(taken); <-release }) })
	first()
	select {
	case <-taken:
	case <-time.After(10 * time.Second):
		t.Fatal("the first call's group never started")
	}
	rest()
	deadline := time.Now().Add(10 * time.Second)
	for waiting() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls waiting, want %d", waiting(), n)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
}

// deductWave is wave for the store's deducts.
func deductWave(t *testing.T, s *mysqlstore.Store, n int, first, rest func()) {
	t.Helper()
	wave(t, func(f func(int)) { mysqlstore.SetBeforeDeductGroup(s, f) }, func() int { return mysqlstore.WaitingDeducts(s) }, n, first, rest)
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
	results := make([]reservation.DeductResult, n+1)
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	call := func(i int) {
		wg.Go(func() { results[i], errs[i] = b.s.Deduct(ctx, deductOf(fmt.Sprintf("c%d", i), 1, 1, 1)) })
	}
	deductWave(t, b.s, n, func() { call(0) }, func() {
		for i := 1; i <= n; i++ {
			call(i)
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
	results := make([]reservation.DeductResult, len(calls))
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	call := func(i int) { wg.Go(func() { results[i], errs[i] = b.s.Deduct(ctx, calls[i]) }) }
	deductWave(t, b.s, len(calls)-1, func() { call(0) }, func() {
		for i := 1; i < len(calls); i++ {
			call(i)
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
	gone, giveUp := context.WithCancel(ctx)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	deductWave(t, b.s, 2, func() {
		wg.Go(func() { _, errs[0] = b.s.Deduct(ctx, deductOf("lead", 1, 1, 1)) })
	}, func() {
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

// Concurrent claims as authority share one transaction: each claim gets
// its own answer (claimed, replayed, not found, expired, released), the
// ledger loses exactly the claimed units, once per item x location, and
// each claimed token has its claims row.
func TestClaimsShareTransactions(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	b.stock(t, 1, 1, 50)
	b.stock(t, 2, 1, 50)
	reserve := func(token string, item, q int64, ttl time.Duration) {
		t.Helper()
		lines := []reservation.Line{{Item: item, Quantity: q, Locations: []int64{1}}}
		if res, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: token, Lines: lines, TTL: ttl}); err != nil || res.Status != reservation.StatusReserved {
			t.Fatalf("reserve %s: %+v %v", token, res, err)
		}
	}
	for i := range 10 {
		reserve(fmt.Sprintf("c%d", i), 1+int64(i%2), 2, time.Minute)
	}
	reserve("lead", 1, 1, time.Minute)
	reserve("before", 1, 1, time.Minute)
	if _, err := b.s.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: "before"}); err != nil {
		t.Fatal(err)
	}
	reserve("released", 2, 1, time.Minute)
	if _, err := b.s.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: "released"}); err != nil {
		t.Fatal(err)
	}
	reserve("expiring", 2, 3, time.Minute)
	// Its hold ran out (what a minute's wait would do).
	for _, table := range []string{"reservations", "reserved_quantities"} {
		if _, err := b.db.Exec("UPDATE "+table+" SET expires_at = NOW(3) - INTERVAL 1 SECOND WHERE shop_id = ? AND token = 'expiring'", shop); err != nil {
			t.Fatal(err)
		}
	}
	tokens := []string{"lead", "before", "released", "expiring", "unknown"}
	for i := range 10 {
		tokens = append(tokens, fmt.Sprintf("c%d", i))
	}
	results := make([]reservation.ClaimResult, len(tokens))
	errs := make([]error, len(tokens))
	var wg sync.WaitGroup
	call := func(i int) {
		wg.Go(func() { results[i], errs[i] = b.s.Claim(ctx, &reservation.ClaimParams{Shop: shop, Token: tokens[i]}) })
	}
	wave(t, func(f func(int)) { mysqlstore.SetBeforeClaimGroup(b.s, f) }, func() int { return mysqlstore.WaitingClaims(b.s) }, len(tokens)-1,
		func() { call(0) }, func() {
			for i := 1; i < len(tokens); i++ {
				call(i)
			}
		})
	wg.Wait()
	for i, tok := range tokens {
		r, err := results[i], errs[i]
		switch tok {
		case "before":
			if err != nil || !r.Replayed {
				t.Errorf("claim of a claimed token: %+v %v, want a replay", r, err)
			}
		case "released":
			if !errors.Is(err, reservation.ErrReleased) {
				t.Errorf("claim of a released token: %+v %v, want ErrReleased", r, err)
			}
		case "expiring":
			if !errors.Is(err, reservation.ErrExpired) {
				t.Errorf("claim of an expired hold: %+v %v, want ErrExpired", r, err)
			}
		case "unknown":
			if !errors.Is(err, reservation.ErrNotFound) {
				t.Errorf("claim of an unknown token: %+v %v, want ErrNotFound", r, err)
			}
		default:
			if err != nil || r.Replayed || r.Outcome != reservation.OutcomeClaimed || len(r.Allocations) != 1 {
				t.Errorf("claim %s: %+v %v", tok, r, err)
			}
		}
	}
	// Item 1: 50 - 5 x 2 (c0, c2, ...) - 1 (lead) - 1 (before); item 2: 50 - 5 x 2.
	if got := b.ledger(t, 1, 1); got != 38 {
		t.Errorf("ledger of item 1: %d, want 38", got)
	}
	if got := b.ledger(t, 2, 1); got != 40 {
		t.Errorf("ledger of item 2: %d, want 40", got)
	}
	if got := b.db.Count(t, "reservation_claims"); got != 12 {
		t.Errorf("%d claims rows, want 12", got)
	}
	if h := histogramCount(t, b, "reservoir_mysql_claim_group_size"); h != 3 {
		// "before", then "lead" alone, then the 14 that waited.
		t.Errorf("%d claim groups, want 3", h)
	}
	if d := b.drift(t); len(d) != 0 {
		t.Errorf("drift after the group: %v", d)
	}
}
