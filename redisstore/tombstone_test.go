package redisstore_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/redisstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// Every row of the tombstone table (docs/ownership.md, section 5): a
// token that reached a terminal state answers reserve, claim, release and
// get from its tombstone, and none of those calls writes anything.
func TestTombstoneAnswers(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			// The claim cleans up on its path: its tombstone answers at once.
			b := setupWith(t, srv.new, func(c *redisstore.Config) { c.InlineClaimCleanup = true })
			c := ctx(t)
			b.stock(t, 1, 1, 10)
			lines := []reservation.Line{line(1, 2, 1)}
			for _, token := range []string{"claimed", "released", "expired"} {
				b.reserve(t, token, time.Minute, lines...)
			}
			if _, err := b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "claimed"}); err != nil {
				t.Fatal(err)
			}
			if r, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "released"}); err != nil || !r.Released {
				t.Fatalf("release: %+v %v", r, err)
			}
			b.age(t, "expired", time.Second, -1)
			if r, err := b.s.Reap(c, &reservation.ReapParams{}); err != nil || r.Holds != 1 {
				t.Fatalf("reap: %+v %v", r, err)
			}
			refusedLines := []reservation.Line{line(1, 50, 1)}
			first, err := b.s.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "refused", Lines: refusedLines, TTL: time.Minute})
			if err != nil || first.Status != reservation.StatusInsufficient || first.Replayed || fmt.Sprint(first.Short) != "[{1 50 8}]" {
				t.Fatalf("reserve of a short cart: %+v %v", first, err)
			}
			for _, st := range []string{"claimed", "released", "expired", "refused"} {
				if n := b.counter(t, "reservoir_redis_tombstones_written_total", "state", st); n != 1 {
					t.Errorf("tombstones written{state=%s} = %v, want 1", st, n)
				}
				ttl := b.r.Client.PTTL(c, b.key("tomb:", st)).Val()
				if ttl <= reservation.DefaultTombstoneTTL-time.Minute || ttl > reservation.DefaultTombstoneTTL {
					t.Errorf("tombstone of %s lives %s, want about %s", st, ttl, reservation.DefaultTombstoneTTL)
				}
			}
			if n := b.r.Client.ZCard(c, b.key("tombs", "")).Val(); n != 4 {
				t.Errorf("tombstone index has %d entries, want 4", n)
			}
			before := b.dump(t)
			ledger := b.ledgerAt(t, 1, 1)

			type answer struct {
				err    error
				replay bool // claim: replayed success; reserve: the refusal replayed
			}
			rows := []struct {
				token                   string
				lines                   []reservation.Line
				reserve, claim, release answer
				get                     error
			}{
				{"claimed", lines, answer{err: reservation.ErrAlreadyClaimed}, answer{replay: true}, answer{err: reservation.ErrAlreadyClaimed}, reservation.ErrAlreadyClaimed},
				{"released", lines, answer{err: reservation.ErrReleased}, answer{err: reservation.ErrReleased}, answer{}, reservation.ErrReleased},
				{"expired", lines, answer{err: reservation.ErrExpired}, answer{err: reservation.ErrExpired}, answer{}, reservation.ErrExpired},
				{"refused", refusedLines, answer{replay: true}, answer{err: reservation.ErrNotFound}, answer{}, reservation.ErrNotFound},
			}
			for _, row := range rows {
				res, err := b.s.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: row.token, Lines: row.lines, TTL: time.Minute})
				switch {
				case row.reserve.err != nil && (!errors.Is(err, row.reserve.err) || res.Status != ""):
					t.Errorf("reserve %s: %+v %v, want %v and no result", row.token, res, err, row.reserve.err)
				case row.reserve.replay && (err != nil || res.Status != reservation.StatusInsufficient || !res.Replayed || fmt.Sprint(res.Short) != fmt.Sprint(first.Short)):
					t.Errorf("reserve %s: %+v %v, want the first refusal replayed", row.token, res, err)
				}
				cl, err := b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: row.token})
				switch {
				case row.claim.err != nil && (!errors.Is(err, row.claim.err) || cl.Outcome != ""):
					t.Errorf("claim %s: %+v %v, want %v and no result", row.token, cl, err, row.claim.err)
				case row.claim.replay && (err != nil || cl.Outcome != reservation.OutcomeClaimed || !cl.Replayed || fmt.Sprint(cl.Allocations) != "[{1 1 2}]"):
					t.Errorf("claim %s: %+v %v, want claimed, replayed, [{1 1 2}]", row.token, cl, err)
				}
				rl, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: row.token})
				if !errors.Is(err, row.release.err) || rl.Released {
					t.Errorf("release %s: %+v %v, want %v and nothing released", row.token, rl, err, row.release.err)
				}
				if _, err := b.s.Get(c, &reservation.GetParams{Shop: shop, Token: row.token}); !errors.Is(err, row.get) {
					t.Errorf("get %s: %v, want %v", row.token, err, row.get)
				}
			}
			if after := b.dump(t); after != before {
				t.Errorf("calls on tombstoned tokens wrote:\n%s\nwant\n%s", after, before)
			}
			if l := b.ledgerAt(t, 1, 1); l != ledger {
				t.Errorf("ledger moved from %d to %d", ledger, l)
			}
			for _, st := range []string{"claimed", "released", "expired", "refused"} {
				if n := b.counter(t, "reservoir_redis_tombstone_hits_total", "op", "reserve", "state", st); n != 1 {
					t.Errorf("tombstone hits{op=reserve,state=%s} = %v, want 1", st, n)
				}
			}
		})
	}
}

// A reserve refused for lack of stock stays refused: the same token,
// delivered again after stock arrived (a delayed first attempt, a retry),
// answers the first refusal and holds nothing, whatever lines it carries.
func TestDelayedFirstAttemptAfterRefusal(t *testing.T) {
	t.Parallel()
	b := setup(t, servers[0].new)
	c := ctx(t)
	b.stock(t, 1, 1, 1)
	reserve := func(lines ...reservation.Line) (reservation.ReserveResult, error) {
		return b.s.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "late", Lines: lines, TTL: time.Minute})
	}
	first, err := reserve(line(1, 3, 1))
	if err != nil || first.Status != reservation.StatusInsufficient || fmt.Sprint(first.Short) != "[{1 3 1}]" {
		t.Fatalf("first reserve: %+v %v, want insufficient [{1 3 1}]", first, err)
	}
	b.stock(t, 1, 1, 10)
	for _, lines := range [][]reservation.Line{{line(1, 3, 1)}, {line(1, 1, 1)}} {
		res, err := reserve(lines...)
		if err != nil || res.Status != reservation.StatusInsufficient || !res.Replayed || fmt.Sprint(res.Short) != "[{1 3 1}]" {
			t.Errorf("reserve %v after the stock arrived: %+v %v, want the first refusal, replayed", lines, res, err)
		}
	}
	if q := b.qty(t, 1, 1); q != 10 {
		t.Errorf("quantity = %d, want 10: nothing held", q)
	}
	if _, err := b.s.Get(c, &reservation.GetParams{Shop: shop, Token: "late"}); !errors.Is(err, reservation.ErrNotFound) {
		t.Errorf("get: %v, want ErrNotFound", err)
	}
	if n := b.r.Client.Exists(c, b.key("hold:", "late")).Val(); n != 0 {
		t.Error("the refused token holds something")
	}
}
