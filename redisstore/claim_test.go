package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// gateLedger is the real ledger whose Deduct waits at a gate: a legacy
// claim held between its first script and the ledger.
type gateLedger struct {
	reservation.Ledger
	entered chan struct{}
	proceed chan struct{}
}

func (g gateLedger) Deduct(ctx context.Context, p *reservation.DeductParams) (reservation.DeductResult, error) {
	g.entered <- struct{}{}
	<-g.proceed
	return g.Ledger.Deduct(ctx, p)
}

// While a legacy claim is deducting the ledger, a release of its hold
// answers ErrClaimInProgress and changes nothing, and the reaper leaves
// the hold alone even past its expiry: either could give back units the
// ledger is about to deduct. The claim then completes.
func TestReleaseDuringClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, servers[0].new)
	c := ctx(t)
	b.stock(t, 1, 1, 10)
	b.reserve(t, "cart", time.Minute, line(1, 3, 1))
	gate := gateLedger{Ledger: b.ledger, entered: make(chan struct{}), proceed: make(chan struct{})}
	claimer, _ := b.store(t, func(c *redisstore.Config) { c.Ledger = gate })
	type result struct {
		res reservation.ClaimResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := claimer.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "cart"})
		done <- result{res, err}
	}()
	<-gate.entered

	before := b.dump(t)
	if r, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "cart"}); !errors.Is(err, reservation.ErrClaimInProgress) || r.Released {
		t.Errorf("release during the claim: %+v %v, want ErrClaimInProgress", r, err)
	}
	if reservation.AnswerName(reservation.ErrClaimInProgress) != "" {
		t.Error("a claim in progress must not be a domain answer")
	}
	if after := b.dump(t); after != before {
		t.Errorf("the refused release wrote:\n%s\nwant\n%s", after, before)
	}
	if n := b.counter(t, "reservoir_redis_claim_in_progress_total"); n != 1 {
		t.Errorf("claim_in_progress = %v, want 1", n)
	}
	b.age(t, "cart", time.Second, -1) // due, but its claim started just now
	if r, err := b.s.Reap(c, &reservation.ReapParams{}); err != nil || r.Holds != 0 {
		t.Errorf("reap of a claiming hold within the grace: %+v %v, want it skipped", r, err)
	}
	if _, err := b.s.Get(c, &reservation.GetParams{Shop: shop, Token: "cart"}); err != nil {
		t.Errorf("the claiming hold after the reap: %v", err)
	}

	close(gate.proceed)
	r := <-done
	if r.err != nil || r.res.Outcome != reservation.OutcomeClaimed || r.res.Replayed {
		t.Fatalf("the claim: %+v %v", r.res, r.err)
	}
	if _, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "cart"}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
		t.Errorf("release after the claim: %v, want ErrAlreadyClaimed", err)
	}
	b.settled(t, 7, "")
}

// A claiming hold older than the grace: its claim died somewhere. A
// release asks the ledger which way it went.
func TestReleaseResolvesAnOldClaim(t *testing.T) {
	t.Parallel()
	start := func(t *testing.T, edit func(*redisstore.Config)) bundle {
		t.Helper()
		b := setupWith(t, servers[0].new, edit)
		b.stock(t, 1, 1, 10)
		b.reserve(t, "cart", time.Minute, line(1, 3, 1))
		b.age(t, "cart", -time.Minute, time.Minute) // live; its claim started a minute ago
		return b
	}
	release := func(b bundle) (reservation.ReleaseResult, error) {
		return b.s.Release(context.Background(), &reservation.ReleaseParams{Shop: shop, Token: "cart"})
	}

	t.Run("NotClaimed", func(t *testing.T) {
		t.Parallel()
		b := start(t, nil)
		if r, err := release(b); err != nil || !r.Released || fmt.Sprint(r.Allocations) != "[{1 1 3}]" {
			t.Fatalf("release: %+v %v, want released: the ledger has no claim", r, err)
		}
		b.settled(t, 10, "")
	})

	t.Run("Claimed", func(t *testing.T) {
		t.Parallel()
		b := start(t, nil)
		b.deduct(t, "cart", alloc(1, 1, 3)) // the claim's deduction committed; the rest was lost
		if r, err := release(b); !errors.Is(err, reservation.ErrAlreadyClaimed) || r.Released {
			t.Fatalf("release: %+v %v, want ErrAlreadyClaimed", r, err)
		}
		b.settled(t, 7, "settled as claimed, not given back")
		if _, err := b.s.Get(context.Background(), &reservation.GetParams{Shop: shop, Token: "cart"}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
			t.Errorf("get: %v, want ErrAlreadyClaimed", err)
		}
	})

	// Without a Source the claim cannot be resolved: the outcome stays
	// unknown, and nothing is guessed.
	t.Run("NoSource", func(t *testing.T) {
		t.Parallel()
		b := start(t, func(c *redisstore.Config) { c.Source = nil })
		if _, err := release(b); !errors.Is(err, reservation.ErrClaimInProgress) {
			t.Fatalf("release: %v, want ErrClaimInProgress", err)
		}
		if q := b.qty(t, 1, 1); q != 7 {
			t.Errorf("quantity = %d, want 7: the hold stays", q)
		}
	})
}

// notDeciderLedger is the real ledger, except that MySQL has taken the
// shop over: Deduct refuses, as mysqlstore does when its fence names
// itself.
type notDeciderLedger struct {
	reservation.Ledger
	refusal *reservation.NotDeciderError
}

func (l notDeciderLedger) Deduct(context.Context, *reservation.DeductParams) (reservation.DeductResult, error) {
	return reservation.DeductResult{}, l.refusal
}

// A deduction the ledger refuses changes nothing: the claim returns the
// ledger's error (a NotDeciderError exactly as the ledger gave it, so the
// caller can route by it), the claiming mark goes, and the hold can be
// released at once.
func TestClaimRefusedByLedger(t *testing.T) {
	t.Parallel()
	t.Run("InsufficientStock", func(t *testing.T) {
		t.Parallel()
		b := setup(t, servers[0].new)
		c := ctx(t)
		b.stock(t, 1, 1, 10)
		b.reserve(t, "cart", time.Minute, line(1, 5, 1))
		two := int64(2)
		// The merchant lowers the ledger below the hold (straight in the
		// ledger, so Redis does not follow).
		if _, err := b.ledger.AdjustStock(c, &reservation.AdjustParams{Shop: shop, Item: 1, Location: 1, Available: &two}); err != nil {
			t.Fatal(err)
		}
		res, err := b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "cart"})
		if !errors.Is(err, reservation.ErrInsufficientStock) || res.Outcome != "" {
			t.Fatalf("claim: %+v %v, want ErrInsufficientStock and no result", res, err)
		}
		if m := b.claiming(t, "cart"); m != "" {
			t.Errorf("claiming mark %q left after a refusal", m)
		}
		if r, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "cart"}); err != nil || !r.Released {
			t.Errorf("release after the refused claim: %+v %v, want released", r, err)
		}
		if l := b.ledgerAt(t, 1, 1); l != 2 {
			t.Errorf("ledger = %d, want 2", l)
		}
	})
	t.Run("NotDecider", func(t *testing.T) {
		t.Parallel()
		b := setup(t, servers[0].new)
		c := ctx(t)
		b.stock(t, 1, 1, 10)
		b.reserve(t, "cart", time.Minute, line(1, 5, 1))
		refusal := &reservation.NotDeciderError{Shop: shop, Store: reservation.AuthorityMySQL, Fence: reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: 2}}
		s, _ := b.store(t, func(c *redisstore.Config) { c.Ledger = notDeciderLedger{b.ledger, refusal} })
		res, err := s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "cart"})
		var nd *reservation.NotDeciderError
		if err != error(refusal) || !errors.As(err, &nd) || res.Outcome != "" {
			t.Fatalf("claim: %+v %v, want the ledger's NotDeciderError itself and no result", res, err)
		}
		if m := b.claiming(t, "cart"); m != "" {
			t.Errorf("claiming mark %q left after a refusal", m)
		}
		if h, err := b.s.Get(c, &reservation.GetParams{Shop: shop, Token: "cart"}); err != nil || h.Quantity() != 5 {
			t.Errorf("the hold after the refusal: %+v %v", h, err)
		}
	})
}

// A hold past its expiry that no claim has started is not claimed: the
// answer is ErrExpired, and the claim expires it at once (units back,
// expired tombstone), as the reaper would, so that every later answer
// agrees: a release then releases nothing, a second claim is expired too.
func TestClaimExpiresAnExpiredHold(t *testing.T) {
	t.Parallel()
	b := setup(t, servers[0].new)
	c := ctx(t)
	b.stock(t, 1, 1, 10)
	b.reserve(t, "cart", time.Minute, line(1, 3, 1))
	b.age(t, "cart", time.Second, -1)
	if res, err := b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "cart"}); !errors.Is(err, reservation.ErrExpired) || res.Outcome != "" {
		t.Fatalf("claim of an expired hold: %+v %v, want ErrExpired", res, err)
	}
	b.settled(t, 10, "after the expired claim")
	if res, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "cart"}); err != nil || res.Released {
		t.Errorf("release after the expired claim: %+v %v, want nothing released", res, err)
	}
	if _, err := b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "cart"}); !errors.Is(err, reservation.ErrExpired) {
		t.Errorf("second claim: %v, want ErrExpired", err)
	}
	if r, err := b.s.Reap(c, &reservation.ReapParams{}); err != nil || r.Holds != 0 {
		t.Errorf("reap: %+v %v, want nothing left to reap", r, err)
	}
}

// A claim repeated after Redis forgot the token (its tombstone expired)
// is answered from the ledger's claims row: replayed, and the quantity is
// not moved again (it already follows the deduction).
func TestClaimFinishesFromTheLedger(t *testing.T) {
	t.Parallel()
	// The claim cleans up on its path, so the tombstone is there to forget.
	b := setupWith(t, servers[0].new, func(c *redisstore.Config) { c.InlineClaimCleanup = true })
	c := ctx(t)
	b.stock(t, 1, 1, 10)
	b.reserve(t, "cart", time.Minute, line(1, 3, 1))
	if _, err := b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "cart"}); err != nil {
		t.Fatal(err)
	}
	forget := func() {
		t.Helper()
		if err := b.r.Client.Del(c, b.key("tomb:", "cart")).Err(); err != nil {
			t.Fatal(err)
		}
	}
	forget()
	blind, _ := b.store(t, func(c *redisstore.Config) { c.Source = nil })
	if _, err := blind.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "cart"}); !errors.Is(err, reservation.ErrNotFound) {
		t.Errorf("claim of a forgotten token without a Source: %v, want ErrNotFound", err)
	}
	res, err := b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "cart"})
	if err != nil || !res.Replayed || res.Outcome != reservation.OutcomeClaimed || fmt.Sprint(res.Allocations) != "[{1 1 3}]" {
		t.Fatalf("claim of a forgotten token: %+v %v, want claimed, replayed [{1 1 3}]", res, err)
	}
	b.settled(t, 7, "")
	if _, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "cart"}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
		t.Errorf("release: %v, want ErrAlreadyClaimed (the tombstone is back)", err)
	}
}

// A refused claim clears only its own claiming mark: if a later attempt
// of the same claim stamped the hold meanwhile (its deduction may be in
// flight, its outcome unknown), the mark stays and a release still waits.
func TestClaimRefusalKeepsALaterAttemptsMark(t *testing.T) {
	t.Parallel()
	b := setup(t, servers[0].new)
	c := ctx(t)
	b.stock(t, 1, 1, 10)
	b.reserve(t, "cart", time.Minute, line(1, 5, 1))
	two := int64(2)
	if _, err := b.ledger.AdjustStock(c, &reservation.AdjustParams{Shop: shop, Item: 1, Location: 1, Available: &two}); err != nil {
		t.Fatal(err)
	}
	gate := gateLedger{Ledger: b.ledger, entered: make(chan struct{}), proceed: make(chan struct{})}
	first, _ := b.store(t, func(c *redisstore.Config) { c.Ledger = gate })
	done := make(chan error, 1)
	go func() {
		_, err := first.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "cart"})
		done <- err
	}()
	<-gate.entered
	now, err := b.r.Client.Time(c).Result()
	if err != nil {
		t.Fatal(err)
	}
	later := fmt.Sprint(now.Add(time.Second).UnixMilli()) // the stamp of a later attempt
	if err := b.r.Client.HSet(c, b.key("hold:", "cart"), "claiming", later).Err(); err != nil {
		t.Fatal(err)
	}
	close(gate.proceed)
	if err := <-done; !errors.Is(err, reservation.ErrInsufficientStock) {
		t.Fatalf("the first attempt: %v, want ErrInsufficientStock", err)
	}
	if m := b.claiming(t, "cart"); m != later {
		t.Errorf("claiming mark = %q after the first attempt's refusal, want the later attempt's %q", m, later)
	}
	if _, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "cart"}); !errors.Is(err, reservation.ErrClaimInProgress) {
		t.Errorf("release: %v, want ErrClaimInProgress", err)
	}
}

// Every claim attempt stamps the hold afresh: a retry of a claim whose
// first attempt is long past the grace has a deduction in flight of its
// own, so a release must wait for it rather than ask the ledger (which
// may not have committed it yet) and release.
func TestRetriedClaimStartsANewGrace(t *testing.T) {
	t.Parallel()
	b := setup(t, servers[0].new)
	c := ctx(t)
	b.stock(t, 1, 1, 10)
	b.reserve(t, "cart", time.Minute, line(1, 3, 1))
	b.age(t, "cart", -time.Minute, time.Minute) // a first attempt a minute ago
	old := b.claiming(t, "cart")
	retry, _ := b.store(t, func(c *redisstore.Config) { c.Ledger = failingLedger{b.ledger} })
	if _, err := retry.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "cart"}); err == nil {
		t.Fatal("the retry's deduction failed, but the claim did not say so")
	}
	if m := b.claiming(t, "cart"); m == "" || m == old {
		t.Fatalf("claiming mark %q after the retry, want a fresh stamp (was %q)", m, old)
	}
	if _, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "cart"}); !errors.Is(err, reservation.ErrClaimInProgress) {
		t.Errorf("release right after the retry: %v, want ErrClaimInProgress", err)
	}
}

// A legacy claim answers once the ledger has recorded it; Redis follows
// through the change feed (no cleanup on the claim's path). Until it
// does, the hold stays marked claiming, and every later answer for the
// token agrees with the claim that was acknowledged: Get (as decider or
// not), Release, a repeated Reserve and a repeated Claim, as authority
// and as shadow, each ask the ledger. Availability never counts the units
// twice, and the ledger's change applied afterwards settles the hold once.
func TestClaimAnswersBeforeRedisFollows(t *testing.T) {
	t.Parallel()
	b := setup(t, servers[0].new)
	c := ctx(t)
	b.stock(t, 1, 1, 20)
	lines := []reservation.Line{line(1, 2, 1)}
	tokens := []string{"get", "read", "release", "reserve", "claim", "shadow-claim", "shadow-release", "feed"}
	for _, token := range tokens {
		b.reserve(t, token, time.Minute, lines...)
		res, err := b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: token})
		if err != nil || res.Outcome != reservation.OutcomeClaimed || res.Replayed || fmt.Sprint(res.Allocations) != "[{1 1 2}]" {
			t.Fatalf("claim %s: %+v %v, want claimed [{1 1 2}]", token, res, err)
		}
		if b.claiming(t, token) == "" {
			t.Fatalf("claim %s cleaned Redis up on its path: want the hold left claiming for the feed", token)
		}
	}
	// 20 - 8 claims of 2: the ledger and Redis's quantity agree while
	// the holds wait for the feed.
	if l, q := b.ledgerAt(t, 1, 1), b.qty(t, 1, 1); l != 4 || q != 4 {
		t.Fatalf("ledger %d, quantity %d; want 4 and 4", l, q)
	}

	claimed := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, reservation.ErrAlreadyClaimed) {
			t.Errorf("%s after the claim was answered: %v, want ErrAlreadyClaimed", what, err)
		}
	}
	_, err := b.s.Get(c, &reservation.GetParams{Shop: shop, Token: "get", AsDecider: true})
	claimed("get as decider", err)
	if b.claiming(t, "get") != "" {
		t.Error("get as decider left the hold: want it settled on the way")
	}
	before := b.dump(t)
	_, err = b.s.Get(c, &reservation.GetParams{Shop: shop, Token: "read"})
	claimed("get", err)
	if after := b.dump(t); after != before {
		t.Errorf("a read that is not the decider's wrote:\n%s\nwant\n%s", after, before)
	}
	_, err = b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "release"})
	claimed("release", err)
	_, err = b.s.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "reserve", Lines: lines, TTL: time.Minute})
	claimed("reserve again", err)
	for _, token := range []string{"release", "reserve"} {
		if b.claiming(t, token) != "" {
			t.Errorf("%s as authority left the hold: want it settled on the way", token)
		}
	}
	res, err := b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "claim"})
	if err != nil || !res.Replayed || fmt.Sprint(res.Allocations) != "[{1 1 2}]" {
		t.Errorf("claim again: %+v %v, want claimed, replayed [{1 1 2}]", res, err)
	}
	res, err = b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "shadow-claim", As: reservation.AsShadow})
	if err != nil || !res.Replayed || res.Outcome != reservation.OutcomeSettled {
		t.Errorf("claim as shadow: %+v %v, want settled, replayed", res, err)
	}
	_, err = b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "shadow-release", As: reservation.AsShadow})
	claimed("release as shadow", err)

	// The relay delivers the ledger's changes: every hold is settled once
	// (the ones settled above are left alone) and nothing moves twice.
	changes, err := b.ledger.Pending(c, shop, 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.s.Apply(c, changes); err != nil {
		t.Fatal(err)
	}
	for _, token := range tokens {
		if m := b.claiming(t, token); m != "" {
			t.Errorf("hold %s still claiming after the feed", token)
		}
		_, err := b.s.Get(c, &reservation.GetParams{Shop: shop, Token: token, AsDecider: true})
		claimed("get "+token+" after the feed", err)
	}
	b.settled(t, 4, "after the feed")
	if d := b.drift(t); len(d) != 0 {
		t.Errorf("drift after the feed: %v", d)
	}
}

// With the ledger unreadable (MySQL down, the kill switch redis_only), a
// hold whose claim was acknowledged but not yet followed cannot be told
// from one whose claim is under way: Get and a repeated Reserve fail
// (retry) rather than answer the hold, Release answers
// ErrClaimInProgress as it always did within the grace, and nothing is
// written. With the ledger back, each answers as claimed.
func TestClaimedHoldWhileTheLedgerCannotBeRead(t *testing.T) {
	t.Parallel()
	b := setup(t, servers[0].new)
	c := ctx(t)
	b.stock(t, 1, 1, 10)
	lines := []reservation.Line{line(1, 2, 1)}
	b.reserve(t, "cart", time.Minute, lines...)
	if _, err := b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "cart"}); err != nil {
		t.Fatal(err)
	}
	down, _ := b.store(t, func(c *redisstore.Config) { c.Source = failingSource{} })
	before := b.dump(t)
	if h, err := down.Get(c, &reservation.GetParams{Shop: shop, Token: "cart", AsDecider: true}); err == nil {
		t.Errorf("get with the ledger down: %+v, want an error (the claim was acknowledged; the hold is not the answer)", h)
	}
	if res, err := down.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "cart", Lines: lines, TTL: time.Minute}); err == nil {
		t.Errorf("reserve again with the ledger down: %+v, want an error", res)
	}
	if _, err := down.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "cart"}); !errors.Is(err, reservation.ErrClaimInProgress) {
		t.Errorf("release with the ledger down: %v, want ErrClaimInProgress", err)
	}
	if after := b.dump(t); after != before {
		t.Errorf("calls with the ledger down wrote:\n%s\nwant\n%s", after, before)
	}
	if _, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "cart"}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
		t.Errorf("release with the ledger back: %v, want ErrAlreadyClaimed", err)
	}
	b.settled(t, 8, "")
}

// InlineClaimCleanup keeps the path as it was: a hold left claiming (here
// by a deduction whose outcome is unknown) is answered from Redis alone,
// the hold to Get and ErrClaimInProgress to a release within the grace,
// without asking the ledger (which is unreadable here).
func TestInlineCleanupAnswersFromRedisAlone(t *testing.T) {
	t.Parallel()
	inline := func(c *redisstore.Config) { c.InlineClaimCleanup = true }
	b := setupWith(t, servers[0].new, inline)
	c := ctx(t)
	b.stock(t, 1, 1, 10)
	b.reserve(t, "cart", time.Minute, line(1, 2, 1))
	failing, _ := b.store(t, func(c *redisstore.Config) { c.InlineClaimCleanup = true; c.Ledger = failingLedger{b.ledger} })
	if _, err := failing.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "cart"}); err == nil {
		t.Fatal("the deduction failed, but the claim did not say so")
	}
	if b.claiming(t, "cart") == "" {
		t.Fatal("the hold is not marked claiming")
	}
	down, _ := b.store(t, func(c *redisstore.Config) { c.InlineClaimCleanup = true; c.Source = failingSource{} })
	if _, err := down.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "cart"}); !errors.Is(err, reservation.ErrClaimInProgress) {
		t.Errorf("release within the grace: %v, want ErrClaimInProgress", err)
	}
	if h, err := down.Get(c, &reservation.GetParams{Shop: shop, Token: "cart", AsDecider: true}); err != nil || h.Quantity() != 2 {
		t.Errorf("get within the grace: %+v %v, want the hold", h, err)
	}
}
