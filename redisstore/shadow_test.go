package redisstore_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Shadow calls (MySQL decides; the facade asks Redis what it would have
// answered) never write: every key of the shop is the same before and
// after, whatever they answer. They answer as a deciding call would.
func TestShadowCallsWriteNothing(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, srv.new)
			c := ctx(t)
			b.stock(t, 1, 1, 10)
			b.stock(t, 1, 2, 4)
			b.reserve(t, "held", time.Minute, line(1, 2, 1))
			b.reserve(t, "claimed", time.Minute, line(1, 1, 1))
			b.reserve(t, "released", time.Minute, line(1, 1, 1))
			if _, err := b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "claimed"}); err != nil {
				t.Fatal(err)
			}
			if _, err := b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "released"}); err != nil {
				t.Fatal(err)
			}
			if _, err := b.s.Yield(c, shop, 1); err != nil {
				t.Fatal(err)
			}
			before := b.dump(t)
			shadowReserve := func(token string, lines ...reservation.Line) (reservation.ReserveResult, error) {
				return b.s.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: token, Lines: lines, TTL: time.Minute, As: reservation.AsShadow})
			}

			// What Redis would hold: location 1 has 7 left, location 2
			// has 4, so 3 units come from location 2 (preferred) and 8
			// from nowhere.
			res, err := shadowReserve("new", line(1, 3, 2, 1))
			if err != nil || res.Status != reservation.StatusReserved || res.Replayed || fmt.Sprint(res.Allocations) != "[{1 2 3}]" || res.ExpiresAt.Before(time.Now()) {
				t.Errorf("shadow reserve: %+v %v, want reserved at location 2", res, err)
			}
			res, err = shadowReserve("short", line(1, 8, 1, 2))
			if err != nil || res.Status != reservation.StatusInsufficient || fmt.Sprint(res.Short) != "[{1 8 7}]" {
				t.Errorf("shadow reserve of a short cart: %+v %v, want insufficient [{1 8 7}]", res, err)
			}
			if res, err = shadowReserve("held", line(1, 2, 1)); err != nil || !res.Replayed || fmt.Sprint(res.Allocations) != "[{1 1 2}]" {
				t.Errorf("shadow reserve of a held token: %+v %v, want its hold replayed", res, err)
			}
			if _, err = shadowReserve("held", line(1, 3, 1)); !errors.Is(err, reservation.ErrTokenConflict) {
				t.Errorf("shadow reserve of a held token with other lines: %v, want ErrTokenConflict", err)
			}
			if _, err = shadowReserve("claimed", line(1, 1, 1)); !errors.Is(err, reservation.ErrAlreadyClaimed) {
				t.Errorf("shadow reserve of a claimed token: %v, want ErrAlreadyClaimed", err)
			}

			shadowClaim := func(token string) (reservation.ClaimResult, error) {
				return b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: token, As: reservation.AsShadow, Deducted: []reservation.Allocation{alloc(1, 1, 2)}})
			}
			if cl, err := shadowClaim("held"); err != nil || cl.Outcome != reservation.OutcomeSettled || cl.Replayed || fmt.Sprint(cl.Allocations) != "[{1 1 2}]" {
				t.Errorf("shadow claim of a held token: %+v %v, want settled [{1 1 2}]", cl, err)
			}
			if cl, err := shadowClaim("claimed"); err != nil || cl.Outcome != reservation.OutcomeSettled || !cl.Replayed || fmt.Sprint(cl.Allocations) != "[{1 1 1}]" {
				t.Errorf("shadow claim of a claimed token: %+v %v, want settled, replayed [{1 1 1}]", cl, err)
			}
			if _, err := shadowClaim("released"); !errors.Is(err, reservation.ErrReleased) {
				t.Errorf("shadow claim of a released token: %v, want ErrReleased", err)
			}
			if _, err := shadowClaim("unknown"); !errors.Is(err, reservation.ErrNotFound) {
				t.Errorf("shadow claim of an unknown token: %v, want ErrNotFound", err)
			}

			shadowRelease := func(token string) (reservation.ReleaseResult, error) {
				return b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: token, As: reservation.AsShadow})
			}
			if r, err := shadowRelease("held"); err != nil || !r.Released || fmt.Sprint(r.Allocations) != "[{1 1 2}]" {
				t.Errorf("shadow release of a held token: %+v %v, want released [{1 1 2}]", r, err)
			}
			if _, err := shadowRelease("claimed"); !errors.Is(err, reservation.ErrAlreadyClaimed) {
				t.Errorf("shadow release of a claimed token: %v, want ErrAlreadyClaimed", err)
			}
			for _, token := range []string{"released", "unknown"} {
				if r, err := shadowRelease(token); err != nil || r.Released {
					t.Errorf("shadow release of %s: %+v %v, want nothing released", token, r, err)
				}
			}

			if after := b.dump(t); after != before {
				t.Errorf("shadow calls wrote:\n%s\nwant\n%s", after, before)
			}
		})
	}
}
