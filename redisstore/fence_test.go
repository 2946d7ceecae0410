package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Once the shop is yielded to MySQL, every deciding call is refused with
// the fence Redis holds, and changes nothing: not a key in Redis, not the
// ledger. Reads still answer.
func TestDecidingCallsRefuseWhenMySQLDecides(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, srv.new)
			c := ctx(t)
			b.stock(t, 1, 1, 10)
			b.reserve(t, "held", time.Minute, line(1, 2, 1))
			b.reserve(t, "due", time.Minute, line(1, 3, 1))
			b.age(t, "due", time.Second, -1)
			if f, err := b.s.Yield(c, shop, 4); err != nil || f != (reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: 4}) {
				t.Fatalf("yield: %v %v", f, err)
			}
			before := b.dump(t)
			wantRefused := func(op string, err error) {
				t.Helper()
				var nd *reservation.NotDeciderError
				if !errors.As(err, &nd) || nd.Shop != shop || nd.Store != reservation.AuthorityRedis || nd.Fence.String() != "mysql@4" {
					t.Errorf("%s: %v, want a NotDeciderError of redis for shop %d with fence mysql@4", op, err, shop)
				}
			}
			_, err := b.s.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "new", Lines: []reservation.Line{line(1, 1, 1)}, TTL: time.Minute})
			wantRefused("reserve", err)
			_, err = b.s.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "short", Lines: []reservation.Line{line(1, 50, 1)}, TTL: time.Minute})
			wantRefused("reserve of a short cart", err)
			_, err = b.s.Reserve(c, &reservation.ReserveParams{Shop: shop, Token: "held", Lines: []reservation.Line{line(1, 2, 1)}, TTL: time.Minute})
			wantRefused("repeated reserve", err)
			_, err = b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "held"})
			wantRefused("claim", err)
			_, err = b.s.Release(c, &reservation.ReleaseParams{Shop: shop, Token: "held"})
			wantRefused("release", err)
			if r, err := b.s.Reap(c, &reservation.ReapParams{}); err != nil || r.Holds != 0 {
				t.Errorf("reap of a shop MySQL decides: %+v %v, want nothing expired", r, err)
			}
			if after := b.dump(t); after != before {
				t.Errorf("refused calls changed Redis:\n%s\nwant\n%s", after, before)
			}
			if l := b.ledgerAt(t, 1, 1); l != 10 {
				t.Errorf("ledger = %d, want 10", l)
			}
			for _, op := range []string{"reserve", "claim", "release"} {
				want := map[string]float64{"reserve": 3, "claim": 1, "release": 1}[op]
				if n := b.counter(t, "reservoir_redis_not_decider_total", "op", op); n != want {
					t.Errorf("not_decider{op=%s} = %v, want %v", op, n, want)
				}
			}
			if h, err := b.s.Get(c, &reservation.GetParams{Shop: shop, Token: "held"}); err != nil || h.Quantity() != 2 {
				t.Errorf("get under the fence: %+v %v", h, err)
			}
			// Handed back (the kill switch, forced): Redis decides again,
			// and the reaper expires the due hold.
			if f, err := b.s.Force(c, shop, 5); err != nil || f.String() != "redis@5" {
				t.Fatalf("force: %v %v", f, err)
			}
			if r, err := b.s.Reap(c, &reservation.ReapParams{}); err != nil || r.Holds != 1 || r.Units != 3 {
				t.Errorf("reap after the handback: %+v %v, want the due hold of 3", r, err)
			}
			if res, err := b.s.Claim(c, &reservation.ClaimParams{Shop: shop, Token: "held"}); err != nil || res.Outcome != reservation.OutcomeClaimed {
				t.Errorf("claim after the handback: %+v %v", res, err)
			}
		})
	}
}

// Yield and Force only ever raise the epoch: a repeat, or a handoff of an
// older epoch, changes nothing, and each answers the fence after.
func TestYieldAndForceEpochs(t *testing.T) {
	t.Parallel()
	b := setup(t, servers[0].new)
	c := ctx(t)
	if f, err := b.s.Fence(c, shop); err != nil || f != reservation.NoFence {
		t.Fatalf("fence of a shop never handed off: %v %v, want %v", f, err, reservation.NoFence)
	}
	steps := []struct {
		name  string
		call  func(ctx context.Context, shop, epoch int64) (reservation.Fence, error)
		epoch int64
		want  string
	}{
		{"yield 3", b.s.Yield, 3, "mysql@3"},
		{"yield 3 again", b.s.Yield, 3, "mysql@3"},
		{"yield 2 (stale)", b.s.Yield, 2, "mysql@3"},
		{"force 3 (not newer)", b.s.Force, 3, "mysql@3"},
		{"force 4", b.s.Force, 4, "redis@4"},
		{"yield 4 (not newer)", b.s.Yield, 4, "redis@4"},
		{"force 4 again", b.s.Force, 4, "redis@4"},
		{"yield 9", b.s.Yield, 9, "mysql@9"},
	}
	for _, st := range steps {
		f, err := st.call(c, shop, st.epoch)
		if err != nil || f.String() != st.want {
			t.Errorf("%s: %v %v, want %s", st.name, f, err, st.want)
		}
		if got, err := b.s.Fence(c, shop); err != nil || got != f {
			t.Errorf("%s: Fence reads %v %v, the call answered %v", st.name, got, err, f)
		}
	}
	// Another shop is not touched.
	if f, err := b.s.Fence(c, shop+1); err != nil || f != reservation.NoFence {
		t.Errorf("fence of another shop: %v %v", f, err)
	}
	var ve *reservation.ValidationError
	if _, err := b.s.Yield(c, shop, 0); !errors.As(err, &ve) || ve.Field != "epoch" {
		t.Errorf("yield at epoch 0: %v, want a ValidationError on epoch", err)
	}
}
