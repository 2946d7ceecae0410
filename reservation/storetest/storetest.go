// Package storetest is the conformance suite every reservation.Store must
// pass. A behaviour lands here first, so that "the two stores mean the same
// thing" is a test, not a hope.
//
// A store's test calls Exercise with a function that builds a fresh, isolated
// Harness (its own database, its own key prefix) for each subtest.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Harness is what the suite needs from a store under test.
type Harness struct {
	// Store is the store under test.
	Store reservation.Store
	// Ledger is the ledger the store's authority claims deduct from.
	Ledger reservation.Ledger
	// Decide makes the store the decider of shop (a fence naming it; see
	// reservation.Fence). The suite calls it before each test. Nil: the
	// store decides shops without a fence (Redis).
	Decide func(t *testing.T, shop int64)
	// HandOff makes the other store the decider of shop in this store's
	// fence: what this store sees after a handoff away from it.
	HandOff func(t *testing.T, shop int64)
}

// NewHarness builds a fresh Harness whose state no other subtest sees. It
// registers its own cleanup with t.
type NewHarness func(t *testing.T) Harness

// TTL is the hold time the suite uses where expiry does not matter.
const TTL = time.Minute

// ExpiryTTL is the hold time of tests that wait for expiry; the store's
// Limits.MinTTL must allow it.
const ExpiryTTL = time.Second

const shop = 7

// Exercise runs the conformance suite.
func Exercise(t *testing.T, newHarness NewHarness) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"ReserveThenGet", testReserveThenGet},
		{"ReserveIsIdempotentOnToken", testReserveIdempotent},
		{"ReserveTokenConflict", testReserveTokenConflict},
		{"CartIsAllOrNothing", testAllOrNothing},
		{"LocationPreference", testLocationPreference},
		{"LinesNeverSplit", testLinesNeverSplit},
		{"UnknownStockIsInsufficient", testUnknownStock},
		{"ClaimDeductsLedgerOnce", testClaimOnce},
		{"ConcurrentClaimsDeductOnce", testConcurrentClaims},
		{"ClaimUnknownToken", testClaimUnknown},
		{"ClaimExpiredHold", testClaimExpired},
		{"ClaimWhenLedgerLowered", testClaimLedgerLowered},
		{"ReleaseReturnsUnits", testRelease},
		{"ClaimedTokenIsFinal", testClaimedTokenIsFinal},
		{"ReleasedTokenIsFinal", testReleasedTokenIsFinal},
		{"RefusedTokenIsFinal", testRefusedTokenIsFinal},
		{"ExpiredTokenIsFinal", testExpiredTokenIsFinal},
		{"OnlyTheDeciderDecides", testOnlyTheDeciderDecides},
		{"ReapReturnsExpiredHolds", testReap},
		{"ParallelReapersReturnOnce", testParallelReapers},
		{"AdjustSetAndDelta", testAdjust},
		{"AdjustAsShadowIsRefused", testAdjustShadow},
		{"AdjustWithKeyAppliesOnce", testAdjustKey},
		{"AvailabilityPerLocation", testAvailability},
		{"BadInputChangesNothing", testBadInput},
		{"ConcurrentReserversNeverOversell", testConcurrentReservers},
		{"ConcurrentCartsReserveAndClaim", testConcurrentCarts},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if h.Decide != nil {
				h.Decide(t, shop)
			}
			tc.fn(t, h)
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func stock(t *testing.T, h Harness, item, loc, n int64) {
	t.Helper()
	if _, err := h.Store.Adjust(ctx(t), &reservation.AdjustParams{Shop: shop, Item: item, Location: loc, Available: &n}); err != nil {
		t.Fatalf("set stock of item %d at %d to %d: %v", item, loc, n, err)
	}
}

func reserve(t *testing.T, h Harness, token string, ttl time.Duration, lines ...reservation.Line) reservation.ReserveResult {
	t.Helper()
	res, err := h.Store.Reserve(ctx(t), &reservation.ReserveParams{Shop: shop, Token: token, Lines: lines, TTL: ttl})
	if err != nil {
		t.Fatalf("reserve %s: %v", token, err)
	}
	return res
}

func mustReserve(t *testing.T, h Harness, token string, lines ...reservation.Line) reservation.ReserveResult {
	t.Helper()
	res := reserve(t, h, token, TTL, lines...)
	if res.Status != reservation.StatusReserved {
		t.Fatalf("reserve %s: status %s (short %+v), want reserved", token, res.Status, res.Short)
	}
	return res
}

func line(item, qty int64, locs ...int64) reservation.Line {
	return reservation.Line{Item: item, Quantity: qty, Locations: locs}
}

func unheld(t *testing.T, h Harness, item, loc int64) int64 {
	t.Helper()
	a, err := h.Store.Availability(ctx(t), &reservation.AvailabilityParams{Shop: shop, Item: item})
	if err != nil {
		t.Fatalf("availability of item %d: %v", item, err)
	}
	return a.At(loc)
}

func ledger(t *testing.T, h Harness, item, loc int64) int64 {
	t.Helper()
	rows, err := h.Ledger.Stock(ctx(t), &reservation.StockParams{Shop: shop})
	if err != nil {
		t.Fatalf("ledger stock: %v", err)
	}
	for _, r := range rows {
		if r.Item == item && r.Location == loc {
			return r.Available
		}
	}
	return 0
}

func wantAllocs(t *testing.T, got []reservation.Allocation, want ...reservation.Allocation) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("allocations = %v, want %v", got, want)
	}
}

func alloc(item, loc, q int64) reservation.Allocation {
	return reservation.Allocation{Item: item, Location: loc, Quantity: q}
}

func claim(t *testing.T, h Harness, token string) (reservation.ClaimResult, error) {
	t.Helper()
	return h.Store.Claim(ctx(t), &reservation.ClaimParams{Shop: shop, Token: token, As: reservation.AsAuthority})
}

func testReserveThenGet(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 5)
	stock(t, h, 20, 2, 5)
	before := time.Now()
	res := mustReserve(t, h, "cart-1", line(20, 2, 2), line(10, 3, 1))
	wantAllocs(t, res.Allocations, alloc(10, 1, 3), alloc(20, 2, 2))
	if res.Replayed {
		t.Error("first reserve reported Replayed")
	}
	// The expiry comes from the store's clock; allow for clock skew between
	// the test and the server, but it must be about TTL away.
	if d := res.ExpiresAt.Sub(before); d < TTL-5*time.Second || d > TTL+5*time.Second {
		t.Errorf("expires_at %s is %s after the call, want about %s", res.ExpiresAt, d, TTL)
	}
	if res.Authority != h.Store.Name() {
		t.Errorf("authority = %q, want the store's own %q", res.Authority, h.Store.Name())
	}
	got, err := h.Store.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "cart-1"})
	if err != nil {
		t.Fatal(err)
	}
	wantAllocs(t, got.Allocations, alloc(10, 1, 3), alloc(20, 2, 2))
	if !got.ExpiresAt.Equal(res.ExpiresAt) {
		t.Errorf("Get expires_at %s, Reserve said %s", got.ExpiresAt, res.ExpiresAt)
	}
	if u := unheld(t, h, 10, 1); u != 2 {
		t.Errorf("unheld item 10 = %d, want 2", u)
	}
	if _, err := h.Store.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "nope"}); !errors.Is(err, reservation.ErrNotFound) {
		t.Errorf("Get unknown token: %v, want ErrNotFound", err)
	}
}

func testReserveIdempotent(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 5)
	first := mustReserve(t, h, "cart-1", line(10, 2, 1))
	again := mustReserve(t, h, "cart-1", line(10, 2, 1))
	if !again.Replayed {
		t.Error("repeated reserve: Replayed = false")
	}
	wantAllocs(t, again.Allocations, first.Allocations...)
	if !again.ExpiresAt.Equal(first.ExpiresAt) {
		t.Errorf("repeat expires_at %s, first %s", again.ExpiresAt, first.ExpiresAt)
	}
	if u := unheld(t, h, 10, 1); u != 3 {
		t.Errorf("unheld = %d after a repeated reserve of 2 from 5, want 3 (one hold)", u)
	}
}

func testReserveTokenConflict(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 5)
	mustReserve(t, h, "cart-1", line(10, 2, 1))
	_, err := h.Store.Reserve(ctx(t), &reservation.ReserveParams{Shop: shop, Token: "cart-1", Lines: []reservation.Line{line(10, 3, 1)}, TTL: TTL})
	if !errors.Is(err, reservation.ErrTokenConflict) {
		t.Fatalf("reserve same token, other lines: %v, want ErrTokenConflict", err)
	}
	if u := unheld(t, h, 10, 1); u != 3 {
		t.Errorf("unheld = %d, want 3", u)
	}
}

func testAllOrNothing(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 5)
	stock(t, h, 20, 1, 1)
	res := reserve(t, h, "cart-1", TTL, line(10, 2, 1), line(20, 3, 1))
	if res.Status != reservation.StatusInsufficient {
		t.Fatalf("status %s, want insufficient", res.Status)
	}
	if len(res.Allocations) != 0 {
		t.Errorf("insufficient result has allocations %v", res.Allocations)
	}
	if fmt.Sprint(res.Short) != fmt.Sprint([]reservation.ShortLine{{Item: 20, Requested: 3, Unheld: 1}}) {
		t.Errorf("short = %+v, want item 20 requested 3 unheld 1", res.Short)
	}
	if u := unheld(t, h, 10, 1); u != 5 {
		t.Errorf("item 10 unheld = %d after a failed cart, want 5", u)
	}
	if _, err := h.Store.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "cart-1"}); !errors.Is(err, reservation.ErrNotFound) {
		t.Errorf("Get after insufficient: %v, want ErrNotFound", err)
	}
	// Once stock arrives a new token reserves the cart (the refused token
	// stays refused: RefusedTokenIsFinal).
	stock(t, h, 20, 1, 3)
	mustReserve(t, h, "cart-2", line(10, 2, 1), line(20, 3, 1))
}

func testLocationPreference(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 2)
	stock(t, h, 10, 2, 10)
	stock(t, h, 10, 3, 100)
	// Location 1 cannot cover 5, location 2 can: 2 serves, 3 is never asked.
	res := mustReserve(t, h, "a", line(10, 5, 1, 2, 3))
	wantAllocs(t, res.Allocations, alloc(10, 2, 5))
	// The first preference is used when it can serve.
	res = mustReserve(t, h, "b", line(10, 1, 1, 2))
	wantAllocs(t, res.Allocations, alloc(10, 1, 1))
	// Preference order is the caller's, not the ids'.
	res = mustReserve(t, h, "c", line(10, 1, 3, 1))
	wantAllocs(t, res.Allocations, alloc(10, 3, 1))
	// Only the eligible locations serve: 100 at location 3 does not help a
	// line that names 1 and 2.
	res = reserve(t, h, "d", TTL, line(10, 6, 1, 2))
	if res.Status != reservation.StatusInsufficient {
		t.Fatalf("line eligible at 1,2 with 1 and 5 unheld: %s, want insufficient", res.Status)
	}
	if res.Short[0].Unheld != 5 {
		t.Errorf("short unheld = %d, want 5 (the best eligible location)", res.Short[0].Unheld)
	}
}

func testLinesNeverSplit(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 2)
	stock(t, h, 10, 2, 2)
	res := reserve(t, h, "a", TTL, line(10, 3, 1, 2))
	if res.Status != reservation.StatusInsufficient {
		t.Fatalf("3 units over two locations of 2: %s %v, want insufficient (lines never split)", res.Status, res.Allocations)
	}
}

func testUnknownStock(t *testing.T, h Harness) {
	res := reserve(t, h, "a", TTL, line(99, 1, 1))
	if res.Status != reservation.StatusInsufficient {
		t.Fatalf("item with no ledger row: %s, want insufficient", res.Status)
	}
}

func testClaimOnce(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 5)
	stock(t, h, 20, 1, 5)
	mustReserve(t, h, "cart-1", line(10, 2, 1), line(20, 1, 1))
	res, err := claim(t, h, "cart-1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != reservation.OutcomeClaimed || res.Replayed {
		t.Fatalf("claim = %+v, want claimed, not replayed", res)
	}
	wantAllocs(t, res.Allocations, alloc(10, 1, 2), alloc(20, 1, 1))
	if l := ledger(t, h, 10, 1); l != 3 {
		t.Errorf("ledger item 10 = %d, want 3", l)
	}
	if u := unheld(t, h, 10, 1); u != 3 {
		t.Errorf("unheld item 10 = %d after claim, want 3", u)
	}
	again, err := claim(t, h, "cart-1")
	if err != nil {
		t.Fatalf("repeated claim: %v", err)
	}
	if !again.Replayed || again.Outcome != reservation.OutcomeClaimed {
		t.Errorf("repeated claim = %+v, want claimed and replayed", again)
	}
	wantAllocs(t, again.Allocations, alloc(10, 1, 2), alloc(20, 1, 1))
	if l := ledger(t, h, 10, 1); l != 3 {
		t.Errorf("ledger item 10 = %d after a repeated claim, want 3", l)
	}
	if _, err := h.Store.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "cart-1"}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
		t.Errorf("Get after claim: %v, want ErrAlreadyClaimed", err)
	}
}

func testConcurrentClaims(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 10)
	mustReserve(t, h, "cart-1", line(10, 4, 1))
	var applied, replayed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			res, err := h.Store.Claim(context.Background(), &reservation.ClaimParams{Shop: shop, Token: "cart-1"})
			if err != nil {
				errs <- err
				return
			}
			if res.Replayed {
				replayed.Add(1)
			} else {
				applied.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent claim: %v", err)
	}
	if applied.Load() != 1 || replayed.Load() != 15 {
		t.Errorf("applied %d, replayed %d; want 1 and 15", applied.Load(), replayed.Load())
	}
	if l := ledger(t, h, 10, 1); l != 6 {
		t.Errorf("ledger = %d after 16 concurrent claims of 4 from 10, want 6", l)
	}
}

func testClaimUnknown(t *testing.T, h Harness) {
	if _, err := claim(t, h, "never"); !errors.Is(err, reservation.ErrNotFound) {
		t.Errorf("claim of an unknown token: %v, want ErrNotFound", err)
	}
	_, err := h.Store.Claim(ctx(t), &reservation.ClaimParams{Shop: shop, Token: "never", As: reservation.AsShadow})
	if !errors.Is(err, reservation.ErrNotFound) {
		t.Errorf("settle of an unknown token: %v, want ErrNotFound", err)
	}
}

func testClaimExpired(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 5)
	reserve(t, h, "cart-1", ExpiryTTL, line(10, 2, 1))
	time.Sleep(ExpiryTTL + 300*time.Millisecond)
	if _, err := claim(t, h, "cart-1"); !errors.Is(err, reservation.ErrExpired) {
		t.Fatalf("claim after expiry: %v, want ErrExpired", err)
	}
	if l := ledger(t, h, 10, 1); l != 5 {
		t.Errorf("ledger = %d after a refused claim, want 5", l)
	}
}

func testClaimLedgerLowered(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 5)
	mustReserve(t, h, "cart-1", line(10, 4, 1))
	stock(t, h, 10, 1, 2) // the merchant found only 2
	if _, err := claim(t, h, "cart-1"); !errors.Is(err, reservation.ErrInsufficientStock) {
		t.Fatalf("claim of 4 with a ledger of 2: %v, want ErrInsufficientStock", err)
	}
	if l := ledger(t, h, 10, 1); l != 2 {
		t.Errorf("ledger = %d, want 2 (never negative)", l)
	}
	if _, err := h.Store.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "cart-1"}); err != nil {
		t.Errorf("the hold must survive a refused claim: %v", err)
	}
	if res, err := h.Store.Release(ctx(t), &reservation.ReleaseParams{Shop: shop, Token: "cart-1"}); err != nil || !res.Released {
		t.Errorf("release after a refused claim: %+v %v", res, err)
	}
	if u := unheld(t, h, 10, 1); u != 2 {
		t.Errorf("unheld = %d, want 2", u)
	}
}

func testRelease(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 5)
	mustReserve(t, h, "cart-1", line(10, 4, 1))
	res, err := h.Store.Release(ctx(t), &reservation.ReleaseParams{Shop: shop, Token: "cart-1"})
	if err != nil || !res.Released {
		t.Fatalf("release: %+v %v", res, err)
	}
	wantAllocs(t, res.Allocations, alloc(10, 1, 4))
	if u := unheld(t, h, 10, 1); u != 5 {
		t.Errorf("unheld = %d after release, want 5", u)
	}
	again, err := h.Store.Release(ctx(t), &reservation.ReleaseParams{Shop: shop, Token: "cart-1"})
	if err != nil || again.Released {
		t.Errorf("second release: %+v %v, want not released, no error", again, err)
	}
	if u := unheld(t, h, 10, 1); u != 5 {
		t.Errorf("unheld = %d after a second release, want 5", u)
	}
	if l := ledger(t, h, 10, 1); l != 5 {
		t.Errorf("ledger = %d, want 5", l)
	}
	// The units are reservable again, all of them.
	mustReserve(t, h, "cart-2", line(10, 5, 1))
}

func testClaimedTokenIsFinal(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 5)
	mustReserve(t, h, "cart-1", line(10, 1, 1))
	if _, err := claim(t, h, "cart-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Store.Release(ctx(t), &reservation.ReleaseParams{Shop: shop, Token: "cart-1"}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
		t.Errorf("release after claim: %v, want ErrAlreadyClaimed", err)
	}
	_, err := h.Store.Reserve(ctx(t), &reservation.ReserveParams{Shop: shop, Token: "cart-1", Lines: []reservation.Line{line(10, 1, 1)}, TTL: TTL})
	if !errors.Is(err, reservation.ErrAlreadyClaimed) {
		t.Errorf("reserve after claim: %v, want ErrAlreadyClaimed", err)
	}
	if u := unheld(t, h, 10, 1); u != 4 {
		t.Errorf("unheld = %d, want 4", u)
	}
}

func testReap(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 5)
	stock(t, h, 20, 1, 5)
	reserve(t, h, "short", ExpiryTTL, line(10, 2, 1), line(20, 1, 1))
	mustReserve(t, h, "long", line(10, 1, 1))
	time.Sleep(ExpiryTTL + 300*time.Millisecond)
	res, err := h.Store.Reap(ctx(t), &reservation.ReapParams{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Holds != 2 || res.Units != 3 {
		t.Errorf("reap = %+v, want 2 holds of 3 units", res)
	}
	if u := unheld(t, h, 10, 1); u != 4 {
		t.Errorf("unheld item 10 = %d after reap, want 4 (the long hold stays)", u)
	}
	if _, err := h.Store.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "long"}); err != nil {
		t.Errorf("unexpired hold after reap: %v", err)
	}
	again, err := h.Store.Reap(ctx(t), &reservation.ReapParams{})
	if err != nil || again.Holds != 0 {
		t.Errorf("second reap = %+v %v, want nothing", again, err)
	}
	// A reaped hold's tombstone answers a late claim: expired, not
	// "never heard of it".
	if _, err := claim(t, h, "short"); !errors.Is(err, reservation.ErrExpired) {
		t.Errorf("claim of a reaped hold: %v, want ErrExpired", err)
	}
	if l := ledger(t, h, 10, 1); l != 5 {
		t.Errorf("ledger = %d, want 5", l)
	}
}

func testParallelReapers(t *testing.T, h Harness) {
	const holds = 40
	stock(t, h, 10, 1, 1000)
	for i := range holds {
		reserve(t, h, fmt.Sprintf("cart-%d", i), ExpiryTTL, line(10, 3, 1))
	}
	time.Sleep(ExpiryTTL + 300*time.Millisecond)
	var total atomic.Int64
	var units atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				res, err := h.Store.Reap(context.Background(), &reservation.ReapParams{Limit: 3})
				if err != nil {
					t.Errorf("reap: %v", err)
					return
				}
				if res.Holds == 0 {
					return
				}
				total.Add(int64(res.Holds))
				units.Add(res.Units)
			}
		})
	}
	wg.Wait()
	if total.Load() != holds || units.Load() != 3*holds {
		t.Errorf("reapers returned %d holds, %d units; want %d and %d, each once", total.Load(), units.Load(), holds, 3*holds)
	}
	if u := unheld(t, h, 10, 1); u != 1000 {
		t.Errorf("unheld = %d after reaping everything, want 1000", u)
	}
}

func testAdjust(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 5)
	mustReserve(t, h, "cart-1", line(10, 2, 1))
	res, err := h.Store.Adjust(ctx(t), &reservation.AdjustParams{Shop: shop, Item: 10, Location: 1, Delta: 4})
	if err != nil || res.Available != 9 || res.Delta != 4 {
		t.Fatalf("adjust +4: %+v %v, want available 9", res, err)
	}
	if u := unheld(t, h, 10, 1); u != 7 {
		t.Errorf("unheld = %d after +4, want 7", u)
	}
	seven := int64(7)
	res, err = h.Store.Adjust(ctx(t), &reservation.AdjustParams{Shop: shop, Item: 10, Location: 1, Available: &seven})
	if err != nil || res.Available != 7 || res.Delta != -2 {
		t.Fatalf("adjust set 7: %+v %v, want available 7 delta -2", res, err)
	}
	if u := unheld(t, h, 10, 1); u != 5 {
		t.Errorf("unheld = %d after set 7, want 5", u)
	}
	if _, err := h.Store.Adjust(ctx(t), &reservation.AdjustParams{Shop: shop, Item: 10, Location: 1, Delta: -8}); !errors.Is(err, reservation.ErrInsufficientStock) {
		t.Errorf("delta below zero: %v, want ErrInsufficientStock", err)
	}
	if _, err := h.Store.Adjust(ctx(t), &reservation.AdjustParams{Shop: shop, Item: 11, Location: 1, Delta: 1}); !errors.Is(err, reservation.ErrNotFound) {
		t.Errorf("delta on an unknown item: %v, want ErrNotFound", err)
	}
	// Below what is held: nothing is left to reserve, the hold survives.
	one := int64(1)
	if _, err := h.Store.Adjust(ctx(t), &reservation.AdjustParams{Shop: shop, Item: 10, Location: 1, Available: &one}); err != nil {
		t.Fatal(err)
	}
	if u := unheld(t, h, 10, 1); u != 0 {
		t.Errorf("unheld = %d with 1 in stock and 2 held, want 0", u)
	}
	if res := reserve(t, h, "cart-2", TTL, line(10, 1, 1)); res.Status != reservation.StatusInsufficient {
		t.Errorf("reserve with stock below held: %s, want insufficient", res.Status)
	}
	if l := ledger(t, h, 10, 1); l != 1 {
		t.Errorf("ledger = %d, want 1", l)
	}
}

// A merchant's "+3" whose reply was lost, retried with its key, adds 3
// once; the key cannot be reused for another change.
func testAdjustKey(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 5)
	stock(t, h, 11, 1, 5)
	plus3 := &reservation.AdjustParams{Shop: shop, Item: 10, Location: 1, Delta: 3, Key: "restock-42"}
	first, err := h.Store.Adjust(ctx(t), plus3)
	if err != nil || first.Replayed || first.Delta != 3 || first.Available != 8 {
		t.Fatalf("adjust +3: %+v %v, want delta 3, available 8", first, err)
	}
	again, err := h.Store.Adjust(ctx(t), plus3)
	if err != nil || !again.Replayed || again.Delta != 3 || again.Available != 8 {
		t.Fatalf("adjust +3 again with its key: %+v %v, want the first result, replayed", again, err)
	}
	if l, u := ledger(t, h, 10, 1), unheld(t, h, 10, 1); l != 8 || u != 8 {
		t.Errorf("ledger %d, unheld %d after the repeat; want 8 and 8 (added once)", l, u)
	}
	for _, reuse := range []reservation.AdjustParams{
		{Shop: shop, Item: 10, Location: 1, Delta: 4, Key: "restock-42"},
		{Shop: shop, Item: 11, Location: 1, Delta: 3, Key: "restock-42"},
	} {
		if res, err := h.Store.Adjust(ctx(t), &reuse); !errors.Is(err, reservation.ErrTokenConflict) {
			t.Errorf("key reused for item %d delta %d: %+v %v, want ErrTokenConflict", reuse.Item, reuse.Delta, res, err)
		}
	}
	if l, l11 := ledger(t, h, 10, 1), ledger(t, h, 11, 1); l != 8 || l11 != 5 {
		t.Errorf("ledger %d and %d after refused reuses, want 8 and 5", l, l11)
	}
	// Without a key, a repeat is a second change.
	plain := &reservation.AdjustParams{Shop: shop, Item: 11, Location: 1, Delta: 1}
	for range 2 {
		if _, err := h.Store.Adjust(ctx(t), plain); err != nil {
			t.Fatal(err)
		}
	}
	if l := ledger(t, h, 11, 1); l != 7 {
		t.Errorf("ledger %d after two unkeyed +1, want 7", l)
	}
	bad := &reservation.AdjustParams{Shop: shop, Item: 10, Location: 1, Delta: 1, Key: "has space"}
	var ve *reservation.ValidationError
	if _, err := h.Store.Adjust(ctx(t), bad); !errors.As(err, &ve) || ve.Field != "key" {
		t.Errorf("adjust with key %q: %v, want invalid key", bad.Key, err)
	}
}

// Redis follows the ledger through the change feed, and MySQL is the
// ledger: a shadow adjust has nothing to do and is refused, naming the
// field.
func testAdjustShadow(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 5)
	_, err := h.Store.Adjust(ctx(t), &reservation.AdjustParams{Shop: shop, Item: 10, Location: 1, Delta: -2, As: reservation.AsShadow})
	checkInvalid(t, "adjust as shadow", "as", err)
	if u, l := unheld(t, h, 10, 1), ledger(t, h, 10, 1); u != 5 || l != 5 {
		t.Errorf("unheld %d, ledger %d after a refused shadow adjust; want 5 and 5", u, l)
	}
}

func testAvailability(t *testing.T, h Harness) {
	stock(t, h, 10, 3, 4)
	stock(t, h, 10, 1, 6)
	stock(t, h, 20, 1, 9)
	mustReserve(t, h, "cart-1", line(10, 2, 1))
	a, err := h.Store.Availability(ctx(t), &reservation.AvailabilityParams{Shop: shop, Item: 10})
	if err != nil {
		t.Fatal(err)
	}
	want := []reservation.LocationAvailability{{Location: 1, Unheld: 4}, {Location: 3, Unheld: 4}}
	if a.Item != 10 || fmt.Sprint(a.Locations) != fmt.Sprint(want) {
		t.Errorf("availability = %+v, want item 10 %v", a, want)
	}
	a, err = h.Store.Availability(ctx(t), &reservation.AvailabilityParams{Shop: shop, Item: 30})
	if err != nil || len(a.Locations) != 0 {
		t.Errorf("availability of an unknown item = %+v %v, want empty", a, err)
	}
}

func testBadInput(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 5)
	mustReserve(t, h, "held", line(10, 1, 1))
	long := strings.Repeat("x", reservation.MaxTokenBytes+1)
	neg := int64(-1)
	reserves := []struct {
		field string
		p     reservation.ReserveParams
	}{
		{"lines[0].quantity", reservation.ReserveParams{Shop: shop, Token: "t", TTL: TTL, Lines: []reservation.Line{line(10, 0, 1)}}},
		{"lines[0].quantity", reservation.ReserveParams{Shop: shop, Token: "t", TTL: TTL, Lines: []reservation.Line{line(10, -3, 1)}}},
		{"lines[0].quantity", reservation.ReserveParams{Shop: shop, Token: "t", TTL: TTL, Lines: []reservation.Line{line(10, 1<<40, 1)}}},
		{"lines", reservation.ReserveParams{Shop: shop, Token: "t", TTL: TTL}},
		{"lines[1].item", reservation.ReserveParams{Shop: shop, Token: "t", TTL: TTL, Lines: []reservation.Line{line(10, 1, 1), line(10, 1, 1)}}},
		{"lines[0].locations", reservation.ReserveParams{Shop: shop, Token: "t", TTL: TTL, Lines: []reservation.Line{line(10, 1)}}},
		{"lines[0].locations[1]", reservation.ReserveParams{Shop: shop, Token: "t", TTL: TTL, Lines: []reservation.Line{line(10, 1, 1, 0)}}},
		{"lines[0].item", reservation.ReserveParams{Shop: shop, Token: "t", TTL: TTL, Lines: []reservation.Line{line(-10, 1, 1)}}},
		{"token", reservation.ReserveParams{Shop: shop, Token: long, TTL: TTL, Lines: []reservation.Line{line(10, 1, 1)}}},
		{"token", reservation.ReserveParams{Shop: shop, Token: "", TTL: TTL, Lines: []reservation.Line{line(10, 1, 1)}}},
		{"shop", reservation.ReserveParams{Shop: 0, Token: "t", TTL: TTL, Lines: []reservation.Line{line(10, 1, 1)}}},
		{"ttl", reservation.ReserveParams{Shop: shop, Token: "t", TTL: 0, Lines: []reservation.Line{line(10, 1, 1)}}},
		{"ttl", reservation.ReserveParams{Shop: shop, Token: "t", TTL: 1000 * time.Hour, Lines: []reservation.Line{line(10, 1, 1)}}},
	}
	for _, tc := range reserves {
		_, err := h.Store.Reserve(ctx(t), &tc.p)
		checkInvalid(t, "reserve", tc.field, err)
	}
	checkInvalid(t, "claim", "token", func() error {
		_, err := h.Store.Claim(ctx(t), &reservation.ClaimParams{Shop: shop, Token: long})
		return err
	}())
	checkInvalid(t, "release", "shop", func() error {
		_, err := h.Store.Release(ctx(t), &reservation.ReleaseParams{Shop: -1, Token: "held"})
		return err
	}())
	checkInvalid(t, "adjust", "available", func() error {
		_, err := h.Store.Adjust(ctx(t), &reservation.AdjustParams{Shop: shop, Item: 10, Location: 1, Available: &neg})
		return err
	}())
	checkInvalid(t, "adjust", "delta", func() error {
		_, err := h.Store.Adjust(ctx(t), &reservation.AdjustParams{Shop: shop, Item: 10, Location: 1})
		return err
	}())
	checkInvalid(t, "adjust", "location", func() error {
		_, err := h.Store.Adjust(ctx(t), &reservation.AdjustParams{Shop: shop, Item: 10, Delta: 1})
		return err
	}())
	checkInvalid(t, "availability", "item", func() error {
		_, err := h.Store.Availability(ctx(t), &reservation.AvailabilityParams{Shop: shop})
		return err
	}())
	checkInvalid(t, "deduct", "allocations", func() error {
		_, err := h.Ledger.Deduct(ctx(t), &reservation.DeductParams{Shop: shop, Token: "held"})
		return err
	}())
	// Nothing changed.
	if u := unheld(t, h, 10, 1); u != 4 {
		t.Errorf("unheld = %d after bad calls, want 4", u)
	}
	if l := ledger(t, h, 10, 1); l != 5 {
		t.Errorf("ledger = %d after bad calls, want 5", l)
	}
	if g, err := h.Store.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "held"}); err != nil || g.Quantity() != 1 {
		t.Errorf("hold after bad calls: %+v %v", g, err)
	}
	if _, err := h.Store.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "t"}); !errors.Is(err, reservation.ErrNotFound) {
		t.Errorf("a bad reserve left a hold: %v", err)
	}
}

func checkInvalid(t *testing.T, op, field string, err error) {
	t.Helper()
	var ve *reservation.ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, reservation.ErrInvalidInput) {
		t.Errorf("%s with bad %s: %v, want a *ValidationError", op, field, err)
		return
	}
	if ve.Field != field {
		t.Errorf("%s: error names field %q, want %q (%v)", op, ve.Field, field, err)
	}
}

func testConcurrentReservers(t *testing.T, h Harness) {
	const stockN, workers, perWorker = 100, 32, 5
	stock(t, h, 10, 1, stockN)
	var ok, short atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				res, err := h.Store.Reserve(context.Background(), &reservation.ReserveParams{
					Shop: shop, Token: fmt.Sprintf("w%d-%d", w, i), TTL: TTL, Lines: []reservation.Line{line(10, 1, 1)},
				})
				switch {
				case err != nil:
					t.Errorf("reserve: %v", err)
				case res.Status == reservation.StatusReserved:
					ok.Add(1)
				default:
					short.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() != stockN || short.Load() != workers*perWorker-stockN {
		t.Fatalf("%d reserved, %d insufficient; want exactly %d reserved", ok.Load(), short.Load(), stockN)
	}
	if u := unheld(t, h, 10, 1); u != 0 {
		t.Errorf("unheld = %d, want 0", u)
	}
}

func testConcurrentCarts(t *testing.T, h Harness) {
	const items = 6
	for i := int64(1); i <= items; i++ {
		stock(t, h, i, 1, 40)
	}
	var claimed [items + 1]atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range 15 {
				perm := r.Perm(items)[:2+r.IntN(3)]
				var lines []reservation.Line
				for _, p := range perm {
					lines = append(lines, line(int64(p+1), 1+int64(r.IntN(2)), 1))
				}
				token := fmt.Sprintf("w%d-%d", w, i)
				res, err := h.Store.Reserve(context.Background(), &reservation.ReserveParams{Shop: shop, Token: token, TTL: TTL, Lines: lines})
				if err != nil {
					t.Errorf("reserve: %v", err)
					continue
				}
				if res.Status != reservation.StatusReserved {
					continue
				}
				if r.IntN(3) == 0 {
					if _, err := h.Store.Release(context.Background(), &reservation.ReleaseParams{Shop: shop, Token: token}); err != nil {
						t.Errorf("release: %v", err)
					}
					continue
				}
				c, err := h.Store.Claim(context.Background(), &reservation.ClaimParams{Shop: shop, Token: token})
				if err != nil {
					t.Errorf("claim: %v", err)
					continue
				}
				for _, a := range c.Allocations {
					claimed[a.Item].Add(a.Quantity)
				}
			}
		})
	}
	wg.Wait()
	for i := int64(1); i <= items; i++ {
		if l := ledger(t, h, i, 1); l != 40-claimed[i].Load() {
			t.Errorf("item %d: ledger %d, claimed %d of 40", i, l, claimed[i].Load())
		}
		if l := ledger(t, h, i, 1); l < 0 {
			t.Errorf("item %d oversold: ledger %d", i, l)
		}
		if u := unheld(t, h, i, 1); u != ledger(t, h, i, 1) {
			t.Errorf("item %d: unheld %d, ledger %d, with no holds left", i, u, ledger(t, h, i, 1))
		}
	}
}

// A released token is final: a claim after an acknowledged release never
// succeeds, a repeated reserve cannot hold it again, a repeated release
// changes nothing.
func testReleasedTokenIsFinal(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 5)
	mustReserve(t, h, "cart-1", line(10, 2, 1))
	if res, err := h.Store.Release(ctx(t), &reservation.ReleaseParams{Shop: shop, Token: "cart-1"}); err != nil || !res.Released {
		t.Fatalf("release: %+v %v", res, err)
	}
	if res, err := claim(t, h, "cart-1"); !errors.Is(err, reservation.ErrReleased) {
		t.Errorf("claim after release: %+v %v, want ErrReleased", res, err)
	}
	if res, err := h.Store.Reserve(ctx(t), &reservation.ReserveParams{Shop: shop, Token: "cart-1", Lines: []reservation.Line{line(10, 2, 1)}, TTL: TTL}); !errors.Is(err, reservation.ErrReleased) {
		t.Errorf("reserve after release: %+v %v, want ErrReleased", res, err)
	}
	if res, err := h.Store.Release(ctx(t), &reservation.ReleaseParams{Shop: shop, Token: "cart-1"}); err != nil || res.Released {
		t.Errorf("second release: %+v %v, want not released", res, err)
	}
	if _, err := h.Store.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "cart-1"}); !errors.Is(err, reservation.ErrReleased) {
		t.Errorf("get after release: %v, want ErrReleased", err)
	}
	if u, l := unheld(t, h, 10, 1), ledger(t, h, 10, 1); u != 5 || l != 5 {
		t.Errorf("unheld %d, ledger %d; want 5 and 5", u, l)
	}
}

// A refused token stays refused: a delayed first attempt (or any repeat)
// that arrives after stock came back must not hold anything, because the
// caller was told nothing is held. A new token can reserve.
func testRefusedTokenIsFinal(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 1)
	first := reserve(t, h, "cart-1", TTL, line(10, 2, 1))
	if first.Status != reservation.StatusInsufficient {
		t.Fatalf("reserve 2 of 1: %s, want insufficient", first.Status)
	}
	stock(t, h, 10, 1, 5)
	again := reserve(t, h, "cart-1", TTL, line(10, 2, 1))
	if again.Status != reservation.StatusInsufficient || !again.Replayed {
		t.Errorf("the same token after stock came back: %+v, want the refusal replayed", again)
	}
	if len(again.Short) != 1 || again.Short[0].Item != 10 || again.Short[0].Requested != 2 {
		t.Errorf("replayed refusal's short lines %+v, want item 10 requested 2", again.Short)
	}
	if _, err := claim(t, h, "cart-1"); !errors.Is(err, reservation.ErrNotFound) {
		t.Errorf("claim of a refused token: %v, want ErrNotFound", err)
	}
	if res, err := h.Store.Release(ctx(t), &reservation.ReleaseParams{Shop: shop, Token: "cart-1"}); err != nil || res.Released {
		t.Errorf("release of a refused token: %+v %v, want not released", res, err)
	}
	if u := unheld(t, h, 10, 1); u != 5 {
		t.Errorf("unheld = %d, want 5: the refused token holds nothing", u)
	}
	mustReserve(t, h, "cart-2", line(10, 2, 1))
}

// An expired token is final once reaped: claim, reserve and get answer
// expired (410), release changes nothing.
func testExpiredTokenIsFinal(t *testing.T, h Harness) {
	stock(t, h, 10, 1, 5)
	reserve(t, h, "cart-1", ExpiryTTL, line(10, 2, 1))
	time.Sleep(ExpiryTTL + 300*time.Millisecond)
	if _, err := h.Store.Reap(ctx(t), &reservation.ReapParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := claim(t, h, "cart-1"); !errors.Is(err, reservation.ErrExpired) {
		t.Errorf("claim after reap: %v, want ErrExpired", err)
	}
	if _, err := h.Store.Reserve(ctx(t), &reservation.ReserveParams{Shop: shop, Token: "cart-1", Lines: []reservation.Line{line(10, 2, 1)}, TTL: TTL}); !errors.Is(err, reservation.ErrExpired) {
		t.Errorf("reserve after reap: %v, want ErrExpired", err)
	}
	if res, err := h.Store.Release(ctx(t), &reservation.ReleaseParams{Shop: shop, Token: "cart-1"}); err != nil || res.Released {
		t.Errorf("release after reap: %+v %v, want not released", res, err)
	}
	if _, err := h.Store.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "cart-1"}); !errors.Is(err, reservation.ErrExpired) {
		t.Errorf("get after reap: %v, want ErrExpired", err)
	}
	if u, l := unheld(t, h, 10, 1), ledger(t, h, 10, 1); u != 5 || l != 5 {
		t.Errorf("unheld %d, ledger %d; want 5 and 5", u, l)
	}
}

// A store whose fence names the other store decides nothing: reserve,
// claim and release as authority answer *NotDeciderError naming the fence,
// and nothing changes. Reads as the decider (AsDecider) answer the same
// refusal: a follower's copy is never served as the decider's answer; a
// plain read still answers from the store's own copy.
func testOnlyTheDeciderDecides(t *testing.T, h Harness) {
	if h.HandOff == nil {
		t.Skip("the harness cannot hand the shop off")
	}
	stock(t, h, 10, 1, 5)
	mustReserve(t, h, "held", line(10, 2, 1))
	if g, err := h.Store.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "held", AsDecider: true}); err != nil || g.Quantity() != 2 {
		t.Errorf("get as the decider, before the handoff: %+v %v", g, err)
	}
	if a, err := h.Store.Availability(ctx(t), &reservation.AvailabilityParams{Shop: shop, Item: 10, AsDecider: true}); err != nil || a.At(1) != 3 {
		t.Errorf("availability as the decider, before the handoff: %+v %v, want 3 unheld at 1", a, err)
	}
	h.HandOff(t, shop)
	want := func(op string, err error) {
		t.Helper()
		var nd *reservation.NotDeciderError
		if !errors.As(err, &nd) || !errors.Is(err, reservation.ErrNotDecider) {
			t.Errorf("%s after the handoff: %v, want *NotDeciderError", op, err)
			return
		}
		if nd.Shop != shop || nd.Store != h.Store.Name() || nd.Fence.Decider == h.Store.Name() {
			t.Errorf("%s: %+v, want shop %d refused by %s with a fence naming the other store", op, nd, shop, h.Store.Name())
		}
		if reservation.AnswerName(err) != "" {
			t.Errorf("%s: a NotDeciderError must not be a domain answer", op)
		}
	}
	_, err := h.Store.Reserve(ctx(t), &reservation.ReserveParams{Shop: shop, Token: "new", Lines: []reservation.Line{line(10, 1, 1)}, TTL: TTL})
	want("reserve", err)
	_, err = h.Store.Reserve(ctx(t), &reservation.ReserveParams{Shop: shop, Token: "held", Lines: []reservation.Line{line(10, 2, 1)}, TTL: TTL})
	want("repeated reserve", err)
	_, err = claim(t, h, "held")
	want("claim", err)
	_, err = h.Store.Release(ctx(t), &reservation.ReleaseParams{Shop: shop, Token: "held"})
	want("release", err)
	_, err = h.Store.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "held", AsDecider: true})
	want("get as the decider", err)
	_, err = h.Store.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "never", AsDecider: true})
	want("get of an unknown token as the decider", err)
	_, err = h.Store.Availability(ctx(t), &reservation.AvailabilityParams{Shop: shop, Item: 10, AsDecider: true})
	want("availability as the decider", err)
	if g, err := h.Store.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "held"}); err != nil || g.Quantity() != 2 {
		t.Errorf("the hold after refused calls: %+v %v", g, err)
	}
	if _, err := h.Store.Get(ctx(t), &reservation.GetParams{Shop: shop, Token: "new"}); !errors.Is(err, reservation.ErrNotFound) {
		t.Errorf("a refused reserve left something: %v", err)
	}
	if l := ledger(t, h, 10, 1); l != 5 {
		t.Errorf("ledger = %d, want 5", l)
	}
}
