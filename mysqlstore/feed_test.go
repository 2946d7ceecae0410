package mysqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
)

// The feed is read in batches of up to 10000 changes, bounds included:
// the relay's Config.Batch may be 10000 and reconcile reads a shop's
// pending changes with a limit of 10000, so a read at the bound must
// answer, not fail validation (the relay would stall and reconcile fail).
// One past it is refused.
func TestPendingReadsAFullBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, 10)
	b.stock(t, 1, 1, 5)
	for i := range 3 {
		if _, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: fmt.Sprint("t", i), Lines: one(1, 1), TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	n, _, err := b.s.Backlog(ctx)
	if err != nil || n < 3 {
		t.Fatalf("backlog: %d changes, %v; want the adjust and three reserves", n, err)
	}
	const full = 10000
	reads := map[string]func(limit int) ([]reservation.Change, error){
		"every shop": func(limit int) ([]reservation.Change, error) { return b.s.Pending(ctx, 0, limit) },
		"one shop":   func(limit int) ([]reservation.Change, error) { return b.s.Pending(ctx, shop, limit) },
		"all but one": func(limit int) ([]reservation.Change, error) {
			return b.s.PendingExcept(ctx, []int64{shop + 1}, limit)
		},
	}
	for name, read := range reads {
		cs, err := read(full)
		if err != nil || int64(len(cs)) != n {
			t.Errorf("%s, limit %d: %d changes, %v; want all %d", name, full, len(cs), err, n)
		}
		var ve *reservation.ValidationError
		if cs, err := read(full + 1); !errors.As(err, &ve) || cs != nil {
			t.Errorf("%s, limit %d: %d changes, %v; want a validation error", name, full+1, len(cs), err)
		}
	}
}

// A reserve MySQL decides with a compare label records its cart, as asked
// (lines in the caller's order, locations in preference order), with the
// change Redis must follow, held or refused; the relay reads it back with
// the label. A reserve without a label, a replay and a release record no
// cart. MySQL decides exactly as it would without the label.
func TestPendingCarriesTheCartOfACompare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, 10)
	b.stock(t, 1, 2, 1)
	b.stock(t, 2, 1, 5)
	cart := []reservation.Line{{Item: 2, Quantity: 1, Locations: []int64{3, 1}}, {Item: 1, Quantity: 1, Locations: []int64{2}}}
	reserve := func(token, label string, lines []reservation.Line) reservation.ReserveResult {
		t.Helper()
		r, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: token, Lines: lines, TTL: time.Minute, Compare: label})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	before, err := b.s.Pending(ctx, shop, 100)
	if err != nil {
		t.Fatal(err)
	}
	if r := reserve("held", "mysql", cart); r.Status != reservation.StatusReserved {
		t.Fatalf("held: %+v", r)
	}
	if r := reserve("held", "mysql", cart); !r.Replayed {
		t.Fatalf("replay: %+v", r)
	}
	if r := reserve("refused", "calibration_mysql", one(1, 1)); r.Status != reservation.StatusInsufficient {
		t.Fatalf("refused: %+v", r)
	}
	if r := reserve("plain", "", one(2, 1)); r.Status != reservation.StatusReserved {
		t.Fatalf("plain: %+v", r)
	}
	if _, err := b.s.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: "plain"}); err != nil {
		t.Fatal(err)
	}
	after, err := b.s.Pending(ctx, shop, 100)
	if err != nil {
		t.Fatal(err)
	}
	got := after[len(before):]
	want := []struct {
		token, label string
		cart         []reservation.Line
	}{{"held", "mysql", cart}, {"refused", "calibration_mysql", one(1, 1)}, {"plain", "", nil}, {"plain", "", nil}}
	if len(got) != len(want) {
		t.Fatalf("%d new changes, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		c := got[i]
		if c.Token != w.token || c.CartLabel != w.label || !reflect.DeepEqual(c.Cart, w.cart) {
			t.Errorf("change %d: token %q, label %q, cart %v; want %q, %q, %v", i, c.Token, c.CartLabel, c.Cart, w.token, w.label, w.cart)
		}
	}
	if got[0].State != reservation.StateHeld || got[1].State != reservation.StateRefused {
		t.Errorf("states %s, %s; want held, refused", got[0].State, got[1].State)
	}
}

// Each change says when it was written and when its reservation reached
// the state it carries (the relay's stale-cart check compares the two): a
// reserve's change read after the release carries the release's time,
// later than its own writing; the release's change carries its own
// transaction's time. An adjust has no reservation state.
func TestPendingTellsWhenEachStateWasReached(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, 10)
	b.stock(t, 1, 1, 5)
	if _, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "a", Lines: one(1, 1), TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := b.s.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: "a"}); err != nil {
		t.Fatal(err)
	}
	cs, err := b.s.Pending(ctx, shop, 100)
	if err != nil || len(cs) != 3 {
		t.Fatalf("pending: %+v, %v; want the adjust, the reserve and the release", cs, err)
	}
	adjust, reserved, released := cs[0], cs[1], cs[2]
	if adjust.Kind != reservation.ChangeAdjust || adjust.Written.IsZero() || !adjust.StateSince.IsZero() {
		t.Errorf("adjust: kind %s, written %v, state since %v; want written only", adjust.Kind, adjust.Written, adjust.StateSince)
	}
	if reserved.State != reservation.StateReleased || released.State != reservation.StateReleased {
		t.Fatalf("states %s, %s; want released twice", reserved.State, released.State)
	}
	if !reserved.StateSince.Equal(released.StateSince) || reserved.StateSince.Sub(reserved.Written) < 20*time.Millisecond {
		t.Errorf("the reserve's change: written %v, state since %v (the release's: %v); want the release's time, 20ms or more after its writing",
			reserved.Written, reserved.StateSince, released.StateSince)
	}
	// The release's state and its change are written by two statements of
	// one transaction, each with its own NOW(3): the state first, the
	// change a moment later (milliseconds on a busy machine).
	if d := released.Written.Sub(released.StateSince); d < 0 || d > time.Second {
		t.Errorf("the release's change: written %v, state since %v; want the state set by the same transaction, at most a moment before", released.Written, released.StateSince)
	}
}

// A cart that cannot be read (a row written by hand, a future encoding)
// costs its comparison, not the change: the relay still gets the change,
// without a cart, and Redis follows MySQL as ever.
func TestPendingDropsACartItCannotRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, 10)
	b.stock(t, 1, 1, 5)
	if _, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "t", Lines: one(1, 1), TTL: time.Minute, Compare: "mysql"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.ExecContext(ctx, `UPDATE reservation_outbox SET cart = 'not a cart' WHERE token = 't'`); err != nil {
		t.Fatal(err)
	}
	cs, err := b.s.Pending(ctx, shop, 100)
	if err != nil {
		t.Fatalf("a malformed cart failed the read: %v", err)
	}
	var found bool
	for _, c := range cs {
		if c.Token == "t" {
			found = true
			if c.Cart != nil || c.CartLabel != "" || c.State != reservation.StateHeld || len(c.Allocations) != 1 {
				t.Errorf("change %+v: want the held reservation without a cart", c)
			}
		}
	}
	if !found {
		t.Errorf("the change with the malformed cart is missing: %+v", cs)
	}
}

// The longest cart the limits allow (every line, every location, ids of
// 18 digits: about 100 KB encoded) is recorded whole: a compared reserve
// must never fail, or be cut short, for its comparison.
func TestPendingCarriesTheLongestCart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, 10)
	l := reservation.DefaultLimits
	const base = int64(100_000_000_000_000_000)
	cart := make([]reservation.Line, l.MaxLines)
	for i := range cart {
		item := base + int64(i)
		cart[i] = reservation.Line{Item: item, Quantity: 1}
		for k := range l.MaxLocations {
			cart[i].Locations = append(cart[i].Locations, base+int64(k))
		}
		b.stock(t, item, cart[i].Locations[0], 1)
	}
	if n := len(reservation.EncodeCart(cart)); n < 90_000 {
		t.Fatalf("the cart encodes to %d bytes; the test wants the longest", n)
	}
	r, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "long", Lines: cart, TTL: time.Minute, Compare: "mysql"})
	if err != nil || r.Status != reservation.StatusReserved {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	cs, err := b.s.Pending(ctx, shop, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.Token == "long" {
			if !reflect.DeepEqual(c.Cart, cart) {
				t.Errorf("the cart came back with %d lines, not as written", len(c.Cart))
			}
			return
		}
	}
	t.Errorf("no change for the reserve")
}
