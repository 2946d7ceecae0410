package lossless_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// The cases an adversarial run of the earlier design found (three serve
// replicas, small stock, flips, kill switches, lost replies), one call
// sequence each, numbered as they were reported. Each failed on that
// design; each passes here because of a rule of docs/ownership.md, named
// in the test's comment.

const shopA = 1001

// caseWorld is one pod of three replicas whose flags say redis (version
// 1), with the given options.
func caseWorld(t testing.TB, cfg worldConfig) (*world, []*replica) {
	t.Helper()
	cfg.pods = 1
	w := newWorld(t, cfg, 1, nil)
	return w, w.pods[0].replicas
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func cart(item, qty int64, locs ...int64) []reservation.Line {
	return []reservation.Line{{Item: item, Quantity: qty, Locations: locs}}
}

func mode(m authority.Mode) func(*flags) {
	return func(f *flags) { f.mode["pod-a"] = m }
}

func kill(k authority.Kill) func(*flags) {
	return func(f *flags) { f.kill["pod-a"] = k }
}

func reserve(t testing.TB, r *replica, token string, ttl time.Duration, lines []reservation.Line) (reservation.ReserveResult, error) {
	t.Helper()
	return r.facade.Reserve(ctxT(t), &reservation.ReserveParams{Shop: shopA, Token: token, Lines: lines, TTL: ttl})
}

func mustReserve(t testing.TB, r *replica, token string, lines []reservation.Line) reservation.ReserveResult {
	t.Helper()
	res, err := reserve(t, r, token, time.Minute, lines)
	if err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve %s on %s: %+v %v, want reserved", token, r.name, res, err)
	}
	return res
}

func claim(t testing.TB, r *replica, token string) (reservation.ClaimResult, error) {
	t.Helper()
	return r.facade.Claim(ctxT(t), &reservation.ClaimParams{Shop: shopA, Token: token})
}

func release(t testing.TB, r *replica, token string) (reservation.ReleaseResult, error) {
	t.Helper()
	return r.facade.Release(ctxT(t), &reservation.ReleaseParams{Shop: shopA, Token: token})
}

// Case 1: a stock-out race in mysql mode. Two buyers race for the last
// unit of each of 30 items through different replicas. The earlier design
// let Redis decide the race its own way (its shadow write ordered B before
// A) and then cleaned B's orphan up, so Redis held nothing for A; after
// the kill switch it sold A's unit to C and A's claim failed. Now Redis
// never decides while MySQL does (fences), and the kill switch drains
// MySQL's decisions into Redis first: C is refused, A claims.
func TestStockOutRaceInMySQLMode(t *testing.T) {
	t.Parallel()
	stockOutRace(t, worldConfig{})
}

func stockOutRace(t testing.TB, cfg worldConfig) {
	w, rs := caseWorld(t, cfg)
	const items = 30
	for i := int64(1); i <= items; i++ {
		w.setStock(shopA, i, 1, 1)
	}
	w.flipTo(mode(authority.ModeMySQL))
	winners := make([]string, items+1)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := int64(1); i <= items; i++ {
		for b, r := range []*replica{rs[0], rs[1]} {
			wg.Go(func() {
				token := fmt.Sprintf("item%d-buyer%d", i, b)
				res, err := reserve(t, r, token, time.Minute, cart(i, 1, 1))
				if err != nil {
					t.Errorf("reserve %s: %v", token, err)
					return
				}
				if res.Status == reservation.StatusReserved {
					mu.Lock()
					if winners[i] != "" {
						t.Errorf("item %d sold twice: %s and %s", i, winners[i], token)
					}
					winners[i] = token
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	w.flipTo(kill(authority.KillRedis))
	for i := int64(1); i <= items; i++ {
		res, err := reserve(t, rs[2], fmt.Sprintf("item%d-late", i), time.Minute, cart(i, 1, 1))
		if err != nil || res.Status != reservation.StatusInsufficient {
			t.Errorf("item %d: a third buyer after the kill switch got %+v %v, want insufficient (the unit is held)", i, res, err)
		}
		if winners[i] == "" {
			t.Errorf("item %d: nobody got the unit", i)
			continue
		}
		if _, err := claim(t, rs[i%3], winners[i]); err != nil {
			t.Errorf("item %d: the winner's claim after the kill switch: %v", i, err)
		}
		if l := w.ledger(shopA, i, 1); l != 0 {
			t.Errorf("item %d: ledger %d after the claim, want 0", i, l)
		}
	}
}

// Case 2: a skipped shadow. The earlier design wrote Redis in mysql mode
// with a best-effort concurrent call, skipped when its slots were full
// (and lost restocks the same way); after the kill switch Redis did not
// know the hold. Now no path relies on such a write: even with no relay
// running at all, the kill switch's handoff drains MySQL's change feed
// (the hold, the restock) into Redis before Redis decides.
func TestNothingReliesOnABestEffortWrite(t *testing.T) {
	t.Parallel()
	noBestEffortWrite(t, worldConfig{noRelay: true})
}

func noBestEffortWrite(t testing.TB, cfg worldConfig) {
	w, rs := caseWorld(t, cfg)
	w.setStock(shopA, 1, 1, 1)
	w.flipTo(mode(authority.ModeMySQL))
	mustReserve(t, rs[0], "a", cart(1, 1, 1))
	// A restock while MySQL decides.
	if _, err := rs[1].facade.Adjust(ctxT(t), &reservation.AdjustParams{Shop: shopA, Item: 1, Location: 1, Delta: 2, Key: "restock-1"}); err != nil {
		t.Fatal(err)
	}
	w.flipTo(kill(authority.KillRedis))
	mustReserve(t, rs[2], "b", cart(1, 2, 1)) // the restocked units
	if res, err := reserve(t, rs[2], "c", time.Minute, cart(1, 1, 1)); err != nil || res.Status != reservation.StatusInsufficient {
		t.Errorf("a buyer beyond the stock after the kill switch: %+v %v, want insufficient", res, err)
	}
	if _, err := claim(t, rs[1], "a"); err != nil {
		t.Errorf("the hold MySQL made, claimed after the kill switch: %v", err)
	}
	if l := w.ledger(shopA, 1, 1); l != 2 {
		t.Errorf("ledger %d, want 3 - 1 = 2", l)
	}
}

// Case 3: the redis_only kill switch. A reservation only MySQL held (its
// Redis write had timed out) answered not found under redis_only. Now the
// redis_only handoff still drains the feed when MySQL answers, so Redis
// holds it and the claim succeeds (once).
func TestRedisOnlyKillSwitchHonoursMySQLHolds(t *testing.T) {
	t.Parallel()
	redisOnlyHonoursMySQLHolds(t, worldConfig{noRelay: true})
}

func redisOnlyHonoursMySQLHolds(t testing.TB, cfg worldConfig) {
	w, rs := caseWorld(t, cfg)
	w.setStock(shopA, 1, 1, 2)
	w.flipTo(mode(authority.ModeMySQL))
	mustReserve(t, rs[0], "a", cart(1, 1, 1))
	w.flipTo(kill(authority.KillRedisOnly))
	if res, err := claim(t, rs[1], "a"); err != nil || res.Outcome != reservation.OutcomeClaimed {
		t.Fatalf("claim under redis_only of a hold MySQL made: %+v %v", res, err)
	}
	if res, err := claim(t, rs[2], "a"); err != nil || !res.Replayed {
		t.Errorf("repeated claim: %+v %v, want replayed", res, err)
	}
	if l := w.ledger(shopA, 1, 1); l != 1 {
		t.Errorf("ledger %d, want 1 (deducted once)", l)
	}
}

// Case 4: a stale copy after the owner expired. MySQL's hold of A expired
// and was reaped, B got the unit, then A's claim succeeded through Redis's
// stale copy (the facade asked "whichever store has it") and B's was
// refused. Now only the decider answers, and its tombstone says expired.
func TestExpiredHoldIsNotClaimedThroughAStaleCopy(t *testing.T) {
	t.Parallel()
	w, rs := caseWorld(t, worldConfig{noRelay: true})
	w.setStock(shopA, 1, 1, 1)
	w.flipTo(mode(authority.ModeMySQL))
	if res, err := reserve(t, rs[0], "a", time.Second, cart(1, 1, 1)); err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve a: %+v %v", res, err)
	}
	w.waitFor("a's hold to expire and be reaped", 10*time.Second, func() bool {
		_, err := rs[0].my.Get(context.Background(), &reservation.GetParams{Shop: shopA, Token: "a"})
		return errors.Is(err, reservation.ErrExpired)
	})
	mustReserve(t, rs[1], "b", cart(1, 1, 1))
	res, err := claim(t, rs[2], "a")
	if !errors.Is(err, reservation.ErrExpired) || res.Outcome != "" {
		t.Errorf("late claim of a: %+v %v, want ErrExpired and no result", res, err)
	}
	if _, err := claim(t, rs[0], "b"); err != nil {
		t.Errorf("b's claim: %v", err)
	}
	// The same after a kill switch: Redis has the tombstone too.
	w.flipTo(kill(authority.KillRedis))
	if _, err := claim(t, rs[1], "a"); !errors.Is(err, reservation.ErrExpired) {
		t.Errorf("late claim of a through Redis: %v, want ErrExpired", err)
	}
	if l := w.ledger(shopA, 1, 1); l != 0 {
		t.Errorf("ledger %d, want 0 (b's claim only)", l)
	}
}

// Case 5: a claim after an acknowledged release. (a) Released in
// mysql_only, then claimed: the earlier design deducted the ledger. (b) In
// shadow mode across replicas, a late MySQL shadow reserve landed after the
// release and the claim found that orphan. (c) Claim then release answered
// released. Now a released reservation is a tombstone in the decider:
// claim answers released, and release after claim answers already_claimed.
func TestNoClaimAfterAnAcknowledgedRelease(t *testing.T) {
	t.Parallel()
	w, rs := caseWorld(t, worldConfig{})
	w.setStock(shopA, 1, 1, 5)
	w.flipTo(mode(authority.ModeMySQL))
	mustReserve(t, rs[0], "a", cart(1, 1, 1))
	w.flipTo(mode(authority.ModeMySQLOnly))
	if res, err := release(t, rs[1], "a"); err != nil || !res.Released {
		t.Fatalf("release a: %+v %v", res, err)
	}
	if res, err := claim(t, rs[2], "a"); !errors.Is(err, reservation.ErrReleased) {
		t.Errorf("(a) claim after release in mysql_only: %+v %v, want ErrReleased", res, err)
	}
	// (b) Shadow mode across replicas: reserve on one, release on another,
	// claim on the first.
	w.flipTo(mode(authority.ModeShadow))
	mustReserve(t, rs[0], "b", cart(1, 1, 1))
	if res, err := release(t, rs[1], "b"); err != nil || !res.Released {
		t.Fatalf("release b: %+v %v", res, err)
	}
	if res, err := claim(t, rs[0], "b"); !errors.Is(err, reservation.ErrReleased) {
		t.Errorf("(b) claim after release across replicas: %+v %v, want ErrReleased", res, err)
	}
	// (c) Claim, then release.
	mustReserve(t, rs[2], "c", cart(1, 1, 1))
	if _, err := claim(t, rs[0], "c"); err != nil {
		t.Fatal(err)
	}
	if res, err := release(t, rs[1], "c"); !errors.Is(err, reservation.ErrAlreadyClaimed) {
		t.Errorf("(c) release after claim: %+v %v, want ErrAlreadyClaimed", res, err)
	}
	if l := w.ledger(shopA, 1, 1); l != 4 {
		t.Errorf("ledger %d, want 4 (c's claim only)", l)
	}
}

// Case 6: a replayed reserve destroyed a hold. A hold only MySQL had, the
// kill switch, then the same reserve again: the earlier design answered
// insufficient, deleted MySQL's hold and the claim found nothing. Now the
// handoff gives Redis the hold, the repeat is answered from it (replayed)
// and the claim succeeds.
func TestReplayedReserveAfterTheKillSwitchKeepsTheHold(t *testing.T) {
	t.Parallel()
	replayedReserveKeepsTheHold(t, worldConfig{noRelay: true})
}

func replayedReserveKeepsTheHold(t testing.TB, cfg worldConfig) {
	w, rs := caseWorld(t, cfg)
	w.setStock(shopA, 1, 1, 1)
	w.flipTo(mode(authority.ModeMySQL))
	first := mustReserve(t, rs[0], "a", cart(1, 1, 1))
	w.flipTo(kill(authority.KillRedis))
	again, err := reserve(t, rs[1], "a", time.Minute, cart(1, 1, 1))
	if err != nil || again.Status != reservation.StatusReserved || !again.Replayed || fmt.Sprint(again.Allocations) != fmt.Sprint(first.Allocations) {
		t.Fatalf("the same reserve after the kill switch: %+v %v, want the hold replayed", again, err)
	}
	if _, err := claim(t, rs[2], "a"); err != nil {
		t.Errorf("claim: %v", err)
	}
}

// Case 7: leaving mysql_only was not lossless: Redis was resynced, then
// the kill switch engaged, and every write in between never reached Redis
// (a unit sold twice, a second hold for a replayed token, restocks lost).
// Now the relay keeps running in mysql_only; and if Redis lost its data,
// copy and catch-up (mirror.Resync) rebuilds it under traffic: what MySQL
// decides after the copy stays in the feed and reaches Redis on top.
func TestLeavingMySQLOnlyIsLossless(t *testing.T) {
	t.Parallel()
	leavingMySQLOnly(t, worldConfig{})
}

func leavingMySQLOnly(t testing.TB, cfg worldConfig) {
	w, rs := caseWorld(t, cfg)
	w.setStock(shopA, 1, 1, 3)
	w.setStock(shopA, 2, 1, 1)
	w.flipTo(mode(authority.ModeMySQL))
	w.flipTo(mode(authority.ModeMySQLOnly))
	mustReserve(t, rs[0], "a", cart(1, 1, 1))
	// Redis loses everything of the shop (a flush, a failover without
	// persistence), and is rebuilt by copy and catch-up while traffic
	// goes on.
	p := w.pods[0]
	if keys := p.redis.Keys(t); len(keys) > 0 {
		if err := p.redis.Client.Del(context.Background(), keys...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rs[1].mirror.Resync(ctxT(t), shopA); err != nil {
		t.Fatalf("resync: %v", err)
	}
	mustReserve(t, rs[2], "b", cart(1, 1, 1)) // after the copy
	if _, err := rs[0].facade.Adjust(ctxT(t), &reservation.AdjustParams{Shop: shopA, Item: 2, Location: 1, Delta: 1, Key: "restock-2"}); err != nil {
		t.Fatal(err)
	}
	w.flipTo(kill(authority.KillRedis))
	if res, err := reserve(t, rs[1], "b", time.Minute, cart(1, 1, 1)); err != nil || !res.Replayed {
		t.Errorf("b replayed after the kill switch: %+v %v, want its hold (not a second one)", res, err)
	}
	mustReserve(t, rs[1], "c", cart(1, 1, 1)) // the third unit
	if res, err := reserve(t, rs[2], "d", time.Minute, cart(1, 1, 1)); err != nil || res.Status != reservation.StatusInsufficient {
		t.Errorf("a fourth unit: %+v %v, want insufficient: a and b hold theirs", res, err)
	}
	mustReserve(t, rs[2], "e", cart(2, 2, 1)) // the restock reached Redis
	for _, tok := range []string{"a", "b", "c", "e"} {
		if _, err := claim(t, rs[0], tok); err != nil {
			t.Errorf("claim %s after leaving mysql_only: %v", tok, err)
		}
	}
	if l1, l2 := w.ledger(shopA, 1, 1), w.ledger(shopA, 2, 1); l1 != 0 || l2 != 0 {
		t.Errorf("ledger %d and %d, want 0 and 0", l1, l2)
	}
}

// Case 8: split brain on a flag failure. A replica whose flags could not
// be read fell back to redis mode, writing only Redis, while the others
// treated MySQL as the decider: with stock 1 both answered reserved. Now a
// replica in doubt serves nothing (503, no store touched), and a replica
// with stale flags is refused by the fence and follows it.
func TestReplicaInDoubtServesNothing(t *testing.T) {
	t.Parallel()
	w, rs := caseWorld(t, worldConfig{})
	w.setStock(shopA, 1, 1, 1)
	w.flipTo(mode(authority.ModeMySQL), rs[0], rs[1]) // rs[2] keeps redis (v1): stale
	rs[1].view.mu.Lock()
	rs[1].view.cur = nil // in doubt
	rs[1].view.mu.Unlock()
	if _, err := reserve(t, rs[1], "doubt", time.Minute, cart(1, 1, 1)); !errors.Is(err, dualwrite.ErrFlagsUnavailable) || reservation.AnswerName(err) != "" {
		t.Errorf("a reserve on the replica in doubt: %v, want ErrFlagsUnavailable (503)", err)
	}
	mustReserve(t, rs[0], "a", cart(1, 1, 1))
	res, err := reserve(t, rs[2], "b", time.Minute, cart(1, 1, 1))
	if err != nil || res.Status != reservation.StatusInsufficient {
		t.Errorf("a reserve on the replica with stale flags (redis): %+v %v, want insufficient: MySQL decides and the unit is held", res, err)
	}
	if _, err := claim(t, rs[2], "a"); err != nil {
		t.Errorf("claim a through the stale replica: %v", err)
	}
	if l := w.ledger(shopA, 1, 1); l != 0 {
		t.Errorf("ledger %d, want 0", l)
	}
}

// Case 9: a claim racing the reaper. The claim judged liveness by NOW(3)
// at its statement's start and, after waiting on a row lock, claimed only
// the lines the reaper had not taken: one line paid, never deducted. Now
// the reaper and the claim lock the reservation as one row (a cart is
// never split), and the claim checks liveness after the lock. Every cart
// ends claimed with every line deducted, or expired with none.
func TestClaimRacingTheReaperIsAllOrNothing(t *testing.T) {
	t.Parallel()
	w, rs := caseWorld(t, worldConfig{noRelay: true})
	const carts = 40
	w.setStock(shopA, 1, 1, carts)
	w.setStock(shopA, 2, 1, carts)
	w.flipTo(mode(authority.ModeMySQL))
	lines := []reservation.Line{{Item: 1, Quantity: 1, Locations: []int64{1}}, {Item: 2, Quantity: 1, Locations: []int64{1}}}
	expires := make([]time.Time, carts)
	for i := range carts {
		res, err := reserve(t, rs[0], fmt.Sprintf("c%d", i), time.Second, lines)
		if err != nil || res.Status != reservation.StatusReserved {
			t.Fatalf("reserve: %+v %v", res, err)
		}
		expires[i] = res.ExpiresAt
	}
	// The race is with the clock itself: each cart's claim starts within
	// 30ms either side of its expiry (the database's clock, on this host),
	// while the reapers run.
	var wg sync.WaitGroup
	claimed := make([]bool, carts)
	for i := range carts {
		wg.Go(func() {
			offset := time.Duration((i*7919)%61-30) * time.Millisecond
			time.Sleep(time.Until(expires[i].Add(offset)))
			res, err := claim(t, rs[i%3], fmt.Sprintf("c%d", i))
			switch {
			case err == nil:
				claimed[i] = len(res.Allocations) == 2
				if !claimed[i] {
					t.Errorf("cart %d claimed with %v: part of the cart", i, res.Allocations)
				}
			case !errors.Is(err, reservation.ErrExpired):
				t.Errorf("cart %d: %v, want claimed or expired", i, err)
			}
		})
	}
	wg.Wait()
	n := int64(0)
	for _, c := range claimed {
		if c {
			n++
		}
	}
	for item := int64(1); item <= 2; item++ {
		if l := w.ledger(shopA, item, 1); l != carts-n {
			t.Errorf("item %d: ledger %d, want %d (%d whole carts claimed)", item, l, carts-n, n)
		}
	}
	t.Logf("%d of %d carts claimed, the others expired", n, carts)
}

// Case 10: answers that misled the payment side. A late claim answered
// 404 once the reaper had run (never the documented 410), and a claim
// could answer with a result and an error together. Now the tombstone
// answers 410 expired, and an error never comes with a result.
func TestLateClaimAnswersExpired(t *testing.T) {
	t.Parallel()
	for _, m := range []authority.Mode{authority.ModeRedis, authority.ModeMySQL} {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			w, rs := caseWorld(t, worldConfig{})
			w.setStock(shopA, 1, 1, 1)
			w.flipTo(mode(m))
			if res, err := reserve(t, rs[0], "a", time.Second, cart(1, 1, 1)); err != nil || res.Status != reservation.StatusReserved {
				t.Fatalf("reserve: %+v %v", res, err)
			}
			store := reservation.Store(rs[0].rd)
			if m == authority.ModeMySQL {
				store = rs[0].my
			}
			w.waitFor("the reaper to expire the hold", 10*time.Second, func() bool {
				_, err := store.Get(context.Background(), &reservation.GetParams{Shop: shopA, Token: "a"})
				return errors.Is(err, reservation.ErrExpired)
			})
			res, err := claim(t, rs[1], "a")
			if !errors.Is(err, reservation.ErrExpired) {
				t.Errorf("late claim: %v, want ErrExpired (410), not not_found", err)
			}
			if res.Outcome != "" || res.Allocations != nil || res.Replayed {
				t.Errorf("late claim came with a result %+v and an error", res)
			}
		})
	}
}

// Case 11: a delayed first attempt. A reserve whose retry was answered
// insufficient ("nothing is held") could still create a hold when the
// delayed first attempt arrived, held until its TTL. Now the refusal is a
// tombstone: the late attempt gets the refusal, even after stock came
// back, in either store.
func TestDelayedFirstAttemptAfterARefusalCreatesNothing(t *testing.T) {
	t.Parallel()
	for _, m := range []authority.Mode{authority.ModeRedis, authority.ModeMySQL} {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			w, rs := caseWorld(t, worldConfig{})
			w.setStock(shopA, 1, 1, 0)
			w.flipTo(mode(m))
			res, err := reserve(t, rs[0], "a", time.Minute, cart(1, 1, 1))
			if err != nil || res.Status != reservation.StatusInsufficient {
				t.Fatalf("first answer: %+v %v, want insufficient", res, err)
			}
			if _, err := rs[1].facade.Adjust(ctxT(t), &reservation.AdjustParams{Shop: shopA, Item: 1, Location: 1, Delta: 1, Key: "restock"}); err != nil {
				t.Fatal(err)
			}
			late, err := reserve(t, rs[2], "a", time.Minute, cart(1, 1, 1))
			if err != nil || late.Status != reservation.StatusInsufficient || !late.Replayed {
				t.Errorf("the delayed first attempt: %+v %v, want the refusal replayed", late, err)
			}
			mustReserve(t, rs[0], "b", cart(1, 1, 1)) // the unit is free for a new token
		})
	}
}

// recordingTB keeps a test body's failures instead of failing the test,
// so that a test can assert the body fails.
type recordingTB struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	panic(fatal{}) // ends the body; recovered by failsWith
}

func (r *recordingTB) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errors) > 0
}

type fatal struct{}

// failsWith runs body with cfg against a recording TB and returns what
// it reported.
func failsWith(t *testing.T, body func(testing.TB, worldConfig), cfg worldConfig) []string {
	rec := &recordingTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(fatal); !ok {
					panic(r)
				}
			}
		}()
		body(rec, cfg)
	}()
	return rec.errors
}

// The cases the change feed protects fail when MySQL's feed never reaches
// Redis (mirror.Config.Disabled): they test what the feed protects.
func TestCasesFailWithoutTheFeed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		body func(testing.TB, worldConfig)
	}{
		{"1 stock-out race", stockOutRace},
		{"2 no best-effort write", noBestEffortWrite},
		{"3 redis_only honours MySQL's holds", redisOnlyHonoursMySQLHolds},
		{"6 a replayed reserve keeps the hold", replayedReserveKeepsTheHold},
		{"7 leaving mysql_only", leavingMySQLOnly},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			errs := failsWith(t, c.body, worldConfig{noFeed: true, noRelay: true})
			if len(errs) == 0 {
				t.Fatalf("case %s passed with the change feed off", c.name)
			}
			t.Logf("with the feed off it fails, as it must: %s", errs[0])
		})
	}
}
