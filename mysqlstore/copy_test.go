package mysqlstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/mysqlstore"
	"github.com/seed31b0e981/reservoir/reservation"
)

// MySQL's side of a copy ahead of a handoff to MySQL (copy.go): while a
// copy is under way MySQL keeps no shadow write of its own for the shop
// (reserve and release refused: a hold of its own, or a release Redis did
// not decide, would not be Redis's state); one copier per shop; a part
// is copied only while the shop is still marked with its copy; the
// cut-over takes the last part and the fence together and ends the copy.
func TestCopyAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, 10)
	b.stock(t, 1, 1, 5)
	handOff(b.s)(t, shop) // Redis decides (redis@2)
	shadow := func(token string) error {
		_, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: token, Lines: one(1, 1), TTL: time.Minute, As: reservation.AsShadow})
		return err
	}
	if err := shadow("before"); err != nil {
		t.Fatalf("shadow reserve before the copy: %v", err)
	}

	copier, f, err := b.s.BeginCopy(ctx, shop, 7, redis2)
	if err != nil || copier == nil || f.String() != "redis@2" {
		t.Fatalf("begin copy: %v %v %v", copier, f, err)
	}
	defer copier.Close()
	if _, _, err := b.s.BeginCopy(ctx, shop, 7, redis2); !errors.Is(err, reservation.ErrCopyBusy) {
		t.Errorf("a second copier: %v, want ErrCopyBusy", err)
	}
	if err := shadow("during"); !errors.Is(err, reservation.ErrNotDecider) {
		t.Errorf("shadow reserve during the copy: %v, want refused", err)
	}
	_, err = b.s.Release(ctx, &reservation.ReleaseParams{Shop: shop, Token: "before", As: reservation.AsShadow})
	if !errors.Is(err, reservation.ErrNotDecider) {
		t.Errorf("shadow release during the copy: %v, want refused", err)
	}
	var held []string
	err = copier.Held(ctx, func(page []string) error { held = append(held, page...); return nil })
	if err != nil || len(held) != 1 || held[0] != "before" {
		t.Errorf("held: %v %v, want [before]", held, err)
	}

	exp := time.Now().Add(time.Hour).Truncate(time.Millisecond).UTC()
	redisHold := reservation.Hold{Shop: shop, Token: "r1", Allocations: []reservation.Allocation{{Item: 1, Location: 1, Quantity: 2}}, ExpiresAt: exp, Authority: reservation.AuthorityRedis}
	bad := &reservation.Snapshot{Shop: shop, Tokens: []string{"x"}, Holds: []reservation.Hold{redisHold}}
	var ve *reservation.ValidationError
	if err := copier.Copy(ctx, bad); !errors.As(err, &ve) {
		t.Errorf("a part with a hold outside its tokens: %v, want a ValidationError", err)
	}
	if _, err := b.s.TakeOver(ctx, &reservation.Snapshot{Shop: shop, Tokens: []string{}}, 3); !errors.As(err, &ve) {
		t.Errorf("a whole-shop takeover of a partial snapshot: %v, want a ValidationError", err)
	}
	// The first part: Redis's hold r1, and "before", which Redis does not
	// have (a shadow hold of a cart Redis never held): dropped.
	if err := copier.Copy(ctx, &reservation.Snapshot{Shop: shop, Tokens: []string{"before", "r1"}, Holds: []reservation.Hold{redisHold}}); err != nil {
		t.Fatal(err)
	}
	if h, err := b.s.Get(ctx, &reservation.GetParams{Shop: shop, Token: "r1"}); err != nil || h.Quantity() != 2 || !h.ExpiresAt.Equal(exp) {
		t.Errorf("r1 after the part: %+v %v", h, err)
	}
	if _, err := b.s.Get(ctx, &reservation.GetParams{Shop: shop, Token: "before"}); !errors.Is(err, reservation.ErrNotFound) {
		t.Errorf("MySQL's own shadow hold after the part: %v, want dropped", err)
	}
	if d := b.drift(t); len(d) != 0 {
		t.Errorf("drift after the part (pool + held must stay within the ledger): %v", d)
	}

	// The cut-over: r1 released in Redis since.
	last := &reservation.Snapshot{Shop: shop, Tokens: []string{"r1"}, Tombstones: []reservation.Tombstone{{Token: "r1", State: reservation.StateReleased, Allocations: redisHold.Allocations, ExpiresAt: exp}}}
	f, err = copier.TakeOver(ctx, last, 3)
	if err != nil || f.String() != "mysql@3" {
		t.Fatalf("take over: %v %v", f, err)
	}
	if _, err := b.s.Get(ctx, &reservation.GetParams{Shop: shop, Token: "r1", AsDecider: true}); !errors.Is(err, reservation.ErrReleased) {
		t.Errorf("r1 after the cut-over: %v, want released", err)
	}
	if f, err := copier.TakeOver(ctx, last, 3); err != nil || f.String() != "mysql@3" {
		t.Errorf("the cut-over again: %v %v, want mysql@3 unchanged", f, err)
	}
	if err := copier.Copy(ctx, last); !errors.Is(err, reservation.ErrCopyLost) {
		t.Errorf("a part after the cut-over: %v, want ErrCopyLost", err)
	}
	if res, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "after", Lines: one(1, 1), TTL: time.Minute}); err != nil || res.Status != reservation.StatusReserved {
		t.Errorf("MySQL decides after the cut-over: %+v %v", res, err)
	}
}

// A copy overtaken by a whole-shop takeover (another replica's fallback
// after Redis yielded: its copier seemed gone) writes nothing more: a part
// is refused (ErrCopyLost), and its cut-over leaves MySQL's state alone.
func TestOvertakenCopyWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, copier := copyUnderWay(t)
	if f, err := b.s.TakeOver(ctx, &reservation.Snapshot{Shop: shop}, 3); err != nil || f.String() != "mysql@3" {
		t.Fatalf("the whole-shop takeover: %v %v", f, err)
	}
	if res, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "m1", Lines: one(1, 1), TTL: time.Minute}); err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("MySQL decides: %+v %v", res, err)
	}
	part := &reservation.Snapshot{Shop: shop, Tokens: []string{"m1"}} // "Redis has no m1"
	if err := copier.Copy(ctx, part); !errors.Is(err, reservation.ErrCopyLost) {
		t.Errorf("a part after the takeover: %v, want ErrCopyLost", err)
	}
	if f, err := copier.TakeOver(ctx, part, 4); !errors.Is(err, reservation.ErrCopyLost) {
		t.Errorf("the overtaken copy's cut-over: %v %v, want ErrCopyLost", f, err)
	}
	if f, err := b.s.Fence(ctx, shop); err != nil || f.String() != "mysql@3" {
		t.Errorf("fence after the overtaken copy: %v %v, want mysql@3 unchanged", f, err)
	}
	if _, err := b.s.Get(ctx, &reservation.GetParams{Shop: shop, Token: "m1", AsDecider: true}); err != nil {
		t.Errorf("MySQL's hold after the overtaken copy: %v", err)
	}
}

// copyUnderWay is a shop Redis decides (redis@2), item 1 stocked with 5
// at location 1, and copy 7 of it into MySQL begun (closed at the test's
// end).
func copyUnderWay(t *testing.T) (bundle, reservation.Copier) {
	t.Helper()
	b := setup(t, 10)
	b.stock(t, 1, 1, 5)
	handOff(b.s)(t, shop)
	copier, _, err := b.s.BeginCopy(context.Background(), shop, 7, redis2)
	if err != nil || copier == nil {
		t.Fatalf("begin copy: %v %v", copier, err)
	}
	t.Cleanup(func() { copier.Close() })
	return b, copier
}

// redis2 is Redis's fence after handOff: Redis decides at epoch 2.
var redis2 = reservation.Fence{Decider: reservation.AuthorityRedis, Epoch: 2}

// A shop Redis took over by force (the kill switch redis_only, MySQL not
// answering: MySQL's fence still names it, at a lower epoch) is copied
// into like any shop Redis decides: Redis's state is the truth since, and
// the cut-over replaces MySQL's stale state with it. A shop MySQL decides
// after Redis did is not copied into.
func TestCopyAfterAForcedHandoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, 10) // MySQL decides at epoch 1
	b.stock(t, 1, 1, 5)
	if res, err := b.s.Reserve(ctx, &reservation.ReserveParams{Shop: shop, Token: "stale", Lines: one(1, 1), TTL: time.Minute}); err != nil || res.Status != reservation.StatusReserved {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	if c, f, err := b.s.BeginCopy(ctx, shop, 7, reservation.Fence{Decider: reservation.AuthorityRedis, Epoch: 0}); err != nil || c != nil || f.String() != "mysql@1" {
		t.Fatalf("a copy into a shop MySQL decides after Redis: %v %v %v, want none", c, f, err)
	}
	forced := reservation.Fence{Decider: reservation.AuthorityRedis, Epoch: 2} // Redis's, by force
	copier, f, err := b.s.BeginCopy(ctx, shop, 7, forced)
	if err != nil || copier == nil || f.String() != "mysql@1" {
		t.Fatalf("a copy after a forced handoff: %v %v %v, want a copier", copier, f, err)
	}
	defer copier.Close()
	if f, err := copier.TakeOver(ctx, &reservation.Snapshot{Shop: shop, Tokens: []string{"stale"}}, 3); err != nil || f.String() != "mysql@3" {
		t.Fatalf("cut-over: %v %v", f, err)
	}
	if _, err := b.s.Get(ctx, &reservation.GetParams{Shop: shop, Token: "stale", AsDecider: true}); !errors.Is(err, reservation.ErrNotFound) {
		t.Errorf("MySQL's hold from before the forced handoff, which Redis does not have: %v, want dropped", err)
	}
}

// A hold copied ahead of a cut-over is Redis's until the cut-over: MySQL's
// reaper leaves it alone while the copy is under way, even past its
// expiry (Redis expires it, or MySQL does once it decides), and expires it
// with a change for Redis after the cut-over. Were it expired quietly
// during the copy as a shadow hold, and the cut-over had nothing newer to
// copy, MySQL would decide a shop whose Redis still holds that hold (and
// offers its units to nobody): nothing would ever tell Redis.
func TestCopiedHoldsExpireOnlyOnceMySQLDecides(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, copier := copyUnderWay(t)
	due := reservation.Hold{Shop: shop, Token: "due", Allocations: []reservation.Allocation{{Item: 1, Location: 1, Quantity: 2}},
		ExpiresAt: time.Now().Add(-time.Second).Truncate(time.Millisecond).UTC(), Authority: reservation.AuthorityRedis}
	if err := copier.Copy(ctx, &reservation.Snapshot{Shop: shop, Tokens: []string{"due"}, Holds: []reservation.Hold{due}}); err != nil {
		t.Fatal(err)
	}
	if res, err := b.s.Reap(ctx, &reservation.ReapParams{}); err != nil || res.Holds != 0 {
		t.Fatalf("reap during the copy: %+v %v, want nothing expired", res, err)
	}
	if h, err := b.s.Get(ctx, &reservation.GetParams{Shop: shop, Token: "due"}); err != nil || h.Quantity() != 2 {
		t.Fatalf("the copied hold after a reap during the copy: %+v %v, want still held", h, err)
	}
	if _, err := copier.TakeOver(ctx, &reservation.Snapshot{Shop: shop, Tokens: []string{}}, 3); err != nil {
		t.Fatal(err)
	}
	var before int
	if err := b.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM reservation_outbox WHERE shop_id = ? AND kind = 'state' AND token = 'due'`, shop).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if res, err := b.s.Reap(ctx, &reservation.ReapParams{}); err != nil || res.Holds != 1 {
		t.Fatalf("reap after the cut-over: %+v %v, want the hold expired", res, err)
	}
	if _, err := b.s.Get(ctx, &reservation.GetParams{Shop: shop, Token: "due", AsDecider: true}); !errors.Is(err, reservation.ErrExpired) {
		t.Errorf("the hold after the reap: %v, want expired", err)
	}
	var after int
	if err := b.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM reservation_outbox WHERE shop_id = ? AND kind = 'state' AND token = 'due'`, shop).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before+1 {
		t.Errorf("changes for Redis about the expiry: %d, want %d: Redis would keep the hold", after, before+1)
	}
}

// A copy never undoes a claim the ledger recorded. A legacy claim's
// Deduct can commit between the moment a copy locks its tokens' rows and
// the moment it writes them: for a token MySQL had no row of (a cart
// Redis decided alone), the lock at READ COMMITTED locks nothing, so the
// Deduct's 'claimed' row lands in between. Were the copy to write Redis's
// hold over it, MySQL would hold (and later expire) a reservation its
// ledger has deducted: a claimed token answered as held, then expired, and
// Redis, told so through the feed, would give back units the ledger no
// longer has. Redis keeps such a hold marked claiming until it follows
// the claim, so every later part carries it again: the copy must keep
// the claim each time.
func TestCopyKeepsAClaimThatLandsWhileItWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, copier := copyUnderWay(t)
	allocs := []reservation.Allocation{{Item: 1, Location: 1, Quantity: 2}}
	hold := reservation.Hold{Shop: shop, Token: "paid", Allocations: allocs,
		ExpiresAt: time.Now().Add(-time.Second).Truncate(time.Millisecond).UTC(), Authority: reservation.AuthorityRedis} // due: a reap would expire it
	part := &reservation.Snapshot{Shop: shop, Tokens: []string{"paid"}, Holds: []reservation.Hold{hold}}
	deducted := false
	mysqlstore.SetAfterCopyLock(b.s, func() {
		if deducted {
			return
		}
		deducted = true
		// The legacy claim's ledger step, on another connection, between
		// the copy's lock and its writes.
		if d, err := b.s.Deduct(ctx, &reservation.DeductParams{Shop: shop, Token: "paid", Allocations: allocs}); err != nil || !d.Applied {
			t.Errorf("deduct: %+v %v", d, err)
		}
	})
	if err := copier.Copy(ctx, part); err != nil {
		t.Fatal(err)
	}
	// Redis has not followed the claim yet: the next part carries the
	// hold again, and so does the cut-over.
	if err := copier.Copy(ctx, part); err != nil {
		t.Fatal(err)
	}
	if _, err := copier.TakeOver(ctx, part, 3); err != nil {
		t.Fatal(err)
	}
	if !deducted {
		t.Fatal("the hook never ran: the test tested nothing")
	}
	if _, err := b.s.Get(ctx, &reservation.GetParams{Shop: shop, Token: "paid", AsDecider: true}); !errors.Is(err, reservation.ErrAlreadyClaimed) {
		t.Errorf("the claimed token after the copy: %v, want claimed", err)
	}
	var lines int
	if err := b.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM reserved_quantities WHERE shop_id = ? AND token = 'paid'`, shop).Scan(&lines); err != nil {
		t.Fatal(err)
	}
	if lines != 0 {
		t.Errorf("hold lines of the claimed token after the copy: %d, want none", lines)
	}
	if l := b.ledger(t, 1, 1); l != 3 {
		t.Errorf("ledger %d, want 3 (5 - 2 claimed)", l)
	}
	for _, d := range b.drift(t) {
		if d.Kind != reservation.DriftEmptyPool { // refilled by the next reserve
			t.Errorf("drift after the copy: %v", d)
		}
	}
	if res, err := b.s.Reap(ctx, &reservation.ReapParams{}); err != nil || res.Holds != 0 {
		t.Errorf("reap past the hold's expiry: %+v %v, want nothing expired (the token is claimed)", res, err)
	}
}
