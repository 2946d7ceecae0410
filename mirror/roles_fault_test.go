package mirror_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testbuf"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/reservation"
)

// These tests drive handoffs through the roles alone (fakes_test.go) and
// plant a fault between the copy and the fence move, where the real
// servers cannot be made to fail on cue. What must hold whatever fails:
// no store decides a shop while it lacks what the other decided (nothing
// lost, nothing kept that was released or claimed: nothing doubled), a
// failed handoff leaves the shop refused by both stores (its calls answer
// "unknown, retry", never a guess), and a retry finishes it with the two
// stores holding the same.

// newFakeMirror builds a mirror over fakes, with its log kept for a
// failing test.
func newFakeMirror(t *testing.T, my mirror.MySQL, rd mirror.Redis, edit func(*mirror.Config)) *mirror.Mirror {
	t.Helper()
	log := &testbuf.Buffer{}
	cfg := mirror.Config{Pod: "fake", MySQL: my, Redis: rd, Logger: slog.New(slog.NewTextHandler(log, nil)),
		CopyInline: 1000, CopyRest: -1, CutoverWait: 10 * time.Millisecond}
	if edit != nil {
		edit(&cfg)
	}
	m, err := mirror.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(context.Background()); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("mirror log:\n%s", log)
		}
	})
	return m
}

func unit(item int64) reservation.Allocation {
	return reservation.Allocation{Item: item, Location: 1, Quantity: 1}
}

// mustDecide has a fake store decide, failing the test if it refuses.
func mustDecide(t *testing.T, decide func(int64, string, reservation.State, ...reservation.Allocation) error, sh int64, token string, st reservation.State, allocs ...reservation.Allocation) {
	t.Helper()
	if err := decide(sh, token, st, allocs...); err != nil {
		t.Fatalf("decide %s %s: %v", token, st, err)
	}
}

// neitherDecides checks a shop in the middle of a handoff that failed:
// both stores refuse to decide it, so its calls answer "unknown, retry"
// and nothing is decided from a state the other store may not have.
func neitherDecides(t *testing.T, my *fakeMySQL, rd *fakeRedis, sh int64) {
	t.Helper()
	for name, decide := range map[string]func(int64, string, reservation.State, ...reservation.Allocation) error{"mysql": my.decide, "redis": rd.decide} {
		if err := decide(sh, "probe", reservation.StateHeld, unit(9)); !errors.Is(err, reservation.ErrNotDecider) {
			t.Errorf("%s, asked to decide shop %d in the middle of a failed handoff: %v, want a NotDeciderError", name, sh, err)
		}
	}
}

// redisDecidesWhole checks that if Redis's fence says Redis decides the
// shop, Redis holds exactly what MySQL decided: a hold it lacked would be
// re-sold (lost), a hold MySQL released or claimed would stay held (its
// units doubled).
func redisDecidesWhole(t *testing.T, my *fakeMySQL, rd *fakeRedis, sh int64) {
	t.Helper()
	rf, redisHas := rd.state(sh)
	if rf.Decider != reservation.AuthorityRedis {
		return
	}
	_, mysqlHas := my.state(sh)
	if !slices.Equal(redisHas, mysqlHas) {
		t.Errorf("Redis decides shop %d (fence %s) without everything MySQL decided:\nredis: %q\nmysql: %q", sh, rf, redisHas, mysqlHas)
	}
}

// agree checks the end of a handoff: both fences are want, and the two
// stores hold the same reservations.
func agree(t *testing.T, my *fakeMySQL, rd *fakeRedis, sh int64, want reservation.Fence) {
	t.Helper()
	mf, mysqlHas := my.state(sh)
	rf, redisHas := rd.state(sh)
	if mf != want || rf != want {
		t.Errorf("after the retry, MySQL's fence is %s and Redis's %s, want both %s", mf, rf, want)
	}
	if !slices.Equal(redisHas, mysqlHas) {
		t.Errorf("after the retry the stores differ:\nredis: %q\nmysql: %q", redisHas, mysqlHas)
	}
}

// A handoff to Redis drains MySQL's feed into Redis, and the drain's last
// change moves Redis's fence. Here a change of the drain fails to apply
// (Redis times out on it once): the fence change behind it must not be
// applied, so Redis does not decide the shop without that hold (the
// mirror stops a shop's changes at the first one Redis did not apply).
// The retry's delete of the delivered changes fails too (a lost reply):
// the changes come again and change nothing the second time. The third
// try finishes.
func TestFakeHandoffToRedisFailsBeforeTheFenceMove(t *testing.T) {
	t.Parallel()
	const sh = 9
	my, rd := newFakeMySQL(), newFakeRedis()
	at1 := reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: 1}
	my.fences[sh], rd.fences[sh] = at1, at1
	m := newFakeMirror(t, my, rd, nil)
	for i, token := range []string{"a", "b", "c", "d"} {
		mustDecide(t, my.decide, sh, token, reservation.StateHeld, unit(int64(i+1)))
	}
	mustDecide(t, my.decide, sh, "a", reservation.StateReleased)
	mustDecide(t, my.decide, sh, "d", reservation.StateClaimed)
	rd.failApply["b"] = 1

	want := reservation.Fence{Decider: reservation.AuthorityRedis, Epoch: 2}
	if f, err := m.Handoff(ctx(t), sh, reservation.AuthorityRedis, 2, false); !errors.Is(err, errFault) {
		t.Fatalf("handoff with b's change failing: %s %v, want the planted fault", f, err)
	}
	redisDecidesWhole(t, my, rd, sh)
	neitherDecides(t, my, rd, sh)

	my.failDone = 1
	if f, err := m.Handoff(ctx(t), sh, reservation.AuthorityRedis, 2, false); !errors.Is(err, errFault) {
		t.Fatalf("retry with the delete's reply lost: %s %v, want the planted fault", f, err)
	}
	redisDecidesWhole(t, my, rd, sh)

	if f, err := m.Handoff(ctx(t), sh, reservation.AuthorityRedis, 2, false); err != nil || f != want {
		t.Fatalf("last retry: %s %v, want %s", f, err, want)
	}
	agree(t, my, rd, sh, want)
	if n, _, _ := my.Backlog(ctx(t)); n != 0 {
		t.Errorf("%d changes left in the feed after the handoff, want none", n)
	}
	mustDecide(t, rd.decide, sh, "e", reservation.StateHeld, unit(5))
}

// A handoff to MySQL copies Redis's state ahead while Redis decides (a
// release and a new hold land during the copy), then Redis yields and
// MySQL's takeover of the last changes fails: the fence move is half
// made. Neither store decides the shop then, and the retry (a call on the
// shop: what a caller does on the "retry" answer) finds Redis yielded,
// waits for a cut-over that does not come, and takes the whole shop over
// from Redis's snapshot (exact: Redis decides nothing after yielding).
// MySQL ends with exactly Redis's state: the copy's and the late changes,
// and not the shadow hold of a cart Redis never held.
func TestFakeHandoffToMySQLFailsBetweenCopyAndFenceMove(t *testing.T) {
	t.Parallel()
	const sh = 11
	my, rd := newFakeMySQL(), newFakeRedis()
	for i := range 10 {
		mustDecide(t, rd.decide, sh, fmt.Sprintf("t%d", i), reservation.StateHeld, unit(int64(i+1)))
	}
	mustDecide(t, rd.decide, sh, "t1", reservation.StateReleased)
	my.shop(sh)["ghost"] = rec{state: reservation.StateHeld, allocs: []reservation.Allocation{unit(1)}, by: reservation.AuthorityMySQL}
	my.failTakeOver = 1
	m := newFakeMirror(t, my, rd, nil)
	mirror.SetAfterCopy(m, func(int64) {
		mustDecide(t, rd.decide, sh, "t2", reservation.StateClaimed)
		mustDecide(t, rd.decide, sh, "late", reservation.StateHeld, unit(11))
	})

	want := reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: 2}
	if f, err := m.Handoff(ctx(t), sh, reservation.AuthorityMySQL, 2, false); !errors.Is(err, errFault) {
		t.Fatalf("handoff with MySQL's takeover failing: %s %v, want the planted fault", f, err)
	}
	if rf, _ := rd.state(sh); rf != want {
		t.Fatalf("Redis's fence after the failed cut-over is %s, want %s (it yielded)", rf, want)
	}
	neitherDecides(t, my, rd, sh)

	if f, err := m.Handoff(ctx(t), sh, reservation.AuthorityMySQL, 2, false); err != nil || f != want {
		t.Errorf("retry: %s %v, want %s", f, err, want)
	}
	agree(t, my, rd, sh, want)
	mustDecide(t, my.decide, sh, "after", reservation.StateHeld, unit(12))
}

// The same failure with no call to finish the handoff: Redis yielded at
// the flags' epoch and MySQL's takeover failed, so both fences are at
// that epoch and neither store decides. That is not a newer replica's
// handoff to leave alone: the sweeper, on the same flags, must finish it
// (a quiet shop would otherwise stay undecided until a call or a
// reconciliation came by).
func TestFakeSweeperFinishesAHalfDoneHandoff(t *testing.T) {
	t.Parallel()
	const sh = 12
	my, rd := newFakeMySQL(), newFakeRedis()
	for i := range 5 {
		mustDecide(t, rd.decide, sh, fmt.Sprintf("t%d", i), reservation.StateHeld, unit(int64(i+1)))
	}
	my.failTakeOver = 1
	m := newFakeMirror(t, my, rd, nil)
	want := reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: 2}
	if _, err := m.Handoff(ctx(t), sh, reservation.AuthorityMySQL, 2, false); !errors.Is(err, errFault) {
		t.Fatalf("handoff with MySQL's takeover failing: %v, want the planted fault", err)
	}
	neitherDecides(t, my, rd, sh)

	c, cancel := context.WithCancel(ctx(t))
	done := make(chan error, 1)
	go func() {
		done <- m.RunSweeper(c, mirror.SweeperConfig{
			Wanted: func(context.Context, int64) (reservation.Authority, int64, bool, error) {
				return reservation.AuthorityMySQL, 2, false, nil
			},
			Version:  func(context.Context) (int64, bool) { return 2, true },
			Interval: 10 * time.Millisecond,
		})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mf, _ := my.state(sh)
		if mf == want || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("RunSweeper: %v, want context.Canceled", err)
	}
	agree(t, my, rd, sh, want)
}
