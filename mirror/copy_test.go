package mirror_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/reservation"
)

// bigShop is more reservations than mirror.Config.CopyInline's default:
// its handoff to MySQL copies in the background while Redis decides.
const bigShop = 240

// loadShop has Redis decide n reservations of one unit each in sh, every
// other one released, and MySQL keep a shadow hold of its own for a cart
// Redis never held ("ghost"): the state a shop in shadow mode has.
func (b *bundle) loadShop(t *testing.T, sh int64, n int) {
	t.Helper()
	setStock(t, b.rd, sh, 10*int64(n))
	for i := range n {
		token := fmt.Sprintf("t%03d", i)
		reserve(t, b.rd, sh, token, 1)
		if i%2 == 1 {
			if res, err := b.rd.Release(ctx(t), &reservation.ReleaseParams{Shop: sh, Token: token}); err != nil || !res.Released {
				t.Fatalf("release %s: %+v %v", token, res, err)
			}
		}
	}
	if res, err := b.my.Reserve(ctx(t), &reservation.ReserveParams{Shop: sh, Token: "ghost", Lines: lines(1), TTL: 10 * time.Minute, As: reservation.AsShadow}); err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("mysql shadow reserve of the ghost: %+v %v", res, err)
	}
}

// reservations renders what a store holds of sh as the decider would
// answer it: each token's hold (allocations and expiry) or tombstone
// state, sorted.
func (b *bundle) reservations(t *testing.T, s reservation.Store, tokens []string, sh int64) string {
	t.Helper()
	var out []string
	for _, token := range tokens {
		h, err := get(t, s, sh, token)
		switch {
		case err == nil:
			out = append(out, fmt.Sprintf("%s held %v until %s", token, h.Allocations, h.ExpiresAt.UTC().Format(time.StampMilli)))
		case reservation.AnswerName(err) != "":
			out = append(out, fmt.Sprintf("%s %s", token, reservation.AnswerName(err)))
		default:
			t.Fatalf("%s get %s: %v", s.Name(), token, err)
		}
	}
	return strings.Join(out, "\n")
}

// redisTokens lists every token Redis has a hold or a tombstone of.
func (b *bundle) redisTokens(t *testing.T, sh int64) []string {
	t.Helper()
	snap, err := b.rd.Snapshot(ctx(t), sh)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, h := range snap.Holds {
		out = append(out, h.Token)
	}
	for _, tb := range snap.Tombstones {
		out = append(out, tb.Token)
	}
	slices.Sort(out)
	return out
}

// A handoff to MySQL of a large shop copies ahead while Redis keeps
// deciding: Handoff answers at once with Redis's fence (the caller follows
// Redis), Redis goes on deciding during the copy (a reserve and a release
// made between the copy's first pass and its catch-up), and at the end
// MySQL holds exactly what Redis held: every hold with its allocations and
// expiry, every tombstone, and none of its own shadow holds.
func TestHandoffToMySQLCopiesAheadWhileRedisDecides(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, srv.new, nil)
			b.loadShop(t, shop, bigShop)
			during := make(chan struct{})
			mirror.SetAfterCopy(b.m, func(int64) {
				defer close(during)
				// Redis still decides: the copy has not cut over.
				reserve(t, b.rd, shop, "during", 2)
				if _, err := b.rd.Release(ctx(t), &reservation.ReleaseParams{Shop: shop, Token: "t000"}); err != nil {
					t.Errorf("release during the copy: %v", err)
				}
			})
			f, err := b.m.Handoff(ctx(t), shop, reservation.AuthorityMySQL, 3, false)
			if err != nil || f.Decider != reservation.AuthorityRedis {
				t.Fatalf("handoff of a large shop: %v %v, want Redis's fence at once (the copy goes on in the background)", f, err)
			}
			waitFor(t, "MySQL to take the shop over", func() (bool, error) {
				mf, err := b.my.Fence(ctx(t), shop)
				return mf.String() == "mysql@3", err
			})
			<-during
			if got := b.fences(t, shop); got != "mysql mysql@3, redis mysql@3" {
				t.Errorf("fences: %s", got)
			}
			tokens := append(b.redisTokens(t, shop), "ghost")
			if r, m := b.reservations(t, b.rd, tokens, shop), b.reservations(t, b.my, tokens, shop); r != m {
				t.Errorf("MySQL after the copy and cut-over:\n%s\nRedis:\n%s", m, r)
			}
			if h, err := get(t, b.my, shop, "during"); err != nil || h.Quantity() != 2 {
				t.Errorf("the reserve Redis decided during the copy, in MySQL: %+v %v", h, err)
			}
			if _, err := get(t, b.my, shop, "t000"); !errors.Is(err, reservation.ErrReleased) {
				t.Errorf("the release Redis decided during the copy, in MySQL: %v, want released", err)
			}
			if _, err := get(t, b.my, shop, "ghost"); !errors.Is(err, reservation.ErrNotFound) {
				t.Errorf("MySQL's own shadow hold after the handoff: %v, want none (Redis never held it)", err)
			}
			if n := metric(t, b.reg, "reservoir_handoff_copied_tokens_total"); n < bigShop {
				t.Errorf("copied %v tokens, want at least %d", n, bigShop)
			}
			if n := samples(t, b.reg, "reservoir_handoff_cutover_seconds"); n != 1 {
				t.Errorf("%d cut-overs observed, want 1", n)
			}
			if n := metric(t, b.reg, "reservoir_handoffs_total", "to", "mysql", "result", "done"); n != 1 {
				t.Errorf("handoffs done = %v, want 1", n)
			}
			// MySQL decides now; Redis refuses.
			reserve(t, b.my, shop, "after", 1)
			_, err = b.rd.Reserve(ctx(t), &reservation.ReserveParams{Shop: shop, Token: "x", Lines: lines(1), TTL: time.Minute})
			notDecider(t, "redis reserve after the handoff", err, "mysql@3")
		})
	}
}

// The check above catches a copy that ignores what changed while it ran:
// with the catch-up and the cut-over's delta skipped, the reserve and the
// release Redis decided during the copy do not reach MySQL.
func TestCopyAheadCheckCatchesALostDelta(t *testing.T) {
	t.Parallel()
	b := setup(t, servers[0].new, nil)
	mirror.SkipDelta(b.m)
	b.loadShop(t, shop, bigShop)
	mirror.SetAfterCopy(b.m, func(int64) {
		reserve(t, b.rd, shop, "during", 2)
		if _, err := b.rd.Release(ctx(t), &reservation.ReleaseParams{Shop: shop, Token: "t000"}); err != nil {
			t.Errorf("release during the copy: %v", err)
		}
	})
	if _, err := b.m.HandoffWait(ctx(t), shop, reservation.AuthorityMySQL, 3, false); err != nil {
		t.Fatal(err)
	}
	tokens := b.redisTokens(t, shop)
	r, m := b.reservations(t, b.rd, tokens, shop), b.reservations(t, b.my, tokens, shop)
	if r == m {
		t.Fatalf("a copy that skipped the changes made during it left MySQL equal to Redis:\n%s", m)
	}
	if !strings.Contains(m, "during not_found") || !strings.Contains(m, "t000 held") {
		t.Errorf("MySQL after the broken copy:\n%s\nwant the reserve and the release made during the copy missing", m)
	}
}

// A small shop is handed off while its caller waits, as a handoff without
// a copy: the call that needs it finds MySQL deciding.
func TestHandoffToMySQLOfASmallShopIsInline(t *testing.T) {
	t.Parallel()
	b := setup(t, servers[0].new, nil)
	b.loadShop(t, shop, 10)
	f, err := b.m.Handoff(ctx(t), shop, reservation.AuthorityMySQL, 3, false)
	if err != nil || f.String() != "mysql@3" {
		t.Fatalf("handoff of a small shop: %v %v, want mysql@3 (inline)", f, err)
	}
	tokens := b.redisTokens(t, shop)
	if r, m := b.reservations(t, b.rd, tokens, shop), b.reservations(t, b.my, tokens, shop); r != m {
		t.Errorf("MySQL:\n%s\nRedis:\n%s", m, r)
	}
}

// Redis keeps deciding under traffic while a large shop is copied, and no
// call goes unanswered: callers that follow Redis get its answers until
// the cut-over, then MySQL's; every reserve acknowledged by either is
// held by MySQL at the end with its allocations.
func TestCopyAheadUnderTraffic(t *testing.T) {
	t.Parallel()
	b := setup(t, servers[0].new, nil)
	b.loadShop(t, shop, bigShop)
	var mu sync.Mutex
	acked := map[string]reservation.ReserveResult{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				token := fmt.Sprintf("w%d-%d", w, i)
				p := &reservation.ReserveParams{Shop: shop, Token: token, Lines: lines(1), TTL: 10 * time.Minute}
				// A caller as the facade would be: Redis while it decides,
				// MySQL once Redis refuses.
				res, err := b.rd.Reserve(ctx(t), p)
				if errors.Is(err, reservation.ErrNotDecider) {
					res, err = b.my.Reserve(ctx(t), p)
				}
				if errors.Is(err, reservation.ErrNotDecider) {
					continue // the cut-over's window: retried with a new token
				}
				if err != nil {
					t.Errorf("reserve %s: %v", token, err)
					return
				}
				if res.Status != reservation.StatusReserved {
					continue // out of stock: a refusal holds nothing
				}
				mu.Lock()
				acked[token] = res
				mu.Unlock()
			}
		})
	}
	// The copy chases three writers for up to CatchUpRounds rounds, each
	// round as long as the writes it copies: 8 s under -race on an idle
	// machine, past the 60 s of ctx at a load average of 20. The handoff
	// gets longer; what is checked is what it leaves, not how fast.
	hctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := b.m.HandoffWait(hctx, shop, reservation.AuthorityMySQL, 3, false); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(acked) == 0 {
		t.Fatal("no reserve was acknowledged during the handoff")
	}
	for token, res := range acked {
		h, err := get(t, b.my, shop, token)
		if err != nil || !slices.Equal(h.Allocations, res.Allocations) || !h.ExpiresAt.Equal(res.ExpiresAt) {
			t.Errorf("acknowledged %s (%v until %s, by %s): MySQL has %+v %v", token, res.Allocations, res.ExpiresAt, res.Authority, h, err)
		}
	}
	t.Logf("%d reserves acknowledged during the handoff", len(acked))
}

// Another replica's copy of the shop holds its copy lease: a second
// handoff does not copy beside it (two copiers would each be exact only
// against their own reads). For a large shop it answers Redis's fence at
// once, and the first one's cut-over hands the shop over.
func TestOneCopierPerShop(t *testing.T) {
	t.Parallel()
	b := setup(t, servers[0].new, nil)
	b.loadShop(t, shop, bigShop)
	other, _, _ := newMirror(t, b.my, newRedis(t, b.r, b.my), nil)
	release := make(chan struct{})
	mirror.SetAfterCopy(b.m, func(int64) { <-release })
	if f, err := b.m.Handoff(ctx(t), shop, reservation.AuthorityMySQL, 3, false); err != nil || f.Decider != reservation.AuthorityRedis {
		t.Fatalf("first handoff: %v %v, want Redis's fence", f, err)
	}
	waitFor(t, "the first copy to hold the shop's copy", func() (bool, error) {
		return metric(t, b.reg, "reservoir_handoff_copied_tokens_total") >= bigShop, nil
	})
	f, err := other.Handoff(ctx(t), shop, reservation.AuthorityMySQL, 3, false)
	if err != nil || f.Decider != reservation.AuthorityRedis {
		t.Errorf("a second replica's handoff while the first copies: %v %v, want Redis's fence (Redis decides meanwhile)", f, err)
	}
	close(release)
	waitFor(t, "the first copy's cut-over", func() (bool, error) {
		mf, err := b.my.Fence(ctx(t), shop)
		return mf.String() == "mysql@3", err
	})
	f, err = other.HandoffWait(ctx(t), shop, reservation.AuthorityMySQL, 3, false)
	if err != nil || f.String() != "mysql@3" {
		t.Errorf("the second replica's handoff after the cut-over: %v %v, want mysql@3", f, err)
	}
}
