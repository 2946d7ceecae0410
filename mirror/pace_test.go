package mirror_test

import (
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/reservation"
)

// The relay's pace after a round that failed (fakes_test.go: the
// failures are planted): a shop whose change Redis does not apply stops
// only itself, so a round that delivered other shops' changes is followed
// at the poll's pace, a Push cutting it short; a round that applied
// nothing (Redis does not answer, or only stuck shops have changes) backs
// off, doubling, and no Push cuts it short, or a dead Redis would cost
// the pod's MySQL a read of the same changes fifty times a second.

// pauses runs m's relay and returns the waits after its first n rounds.
func pauses(t *testing.T, m *mirror.Mirror, n int) []pause {
	t.Helper()
	got := make(chan pause, n)
	mirror.OnPause(m, func(wait time.Duration, wake bool) {
		select {
		case got <- pause{wait, wake}:
		default: // past the n the test reads
		}
	})
	stop := run(t, m)
	defer stop()
	var out []pause
	for range n {
		select {
		case p := <-got:
			out = append(out, p)
		case <-time.After(30 * time.Second):
			t.Fatalf("the relay's rounds after %v: no more within 30s", out)
		}
	}
	return out
}

type pause struct {
	wait time.Duration
	wake bool
}

// mysqlDecides gives the shops to MySQL in both fakes.
func mysqlDecides(my *fakeMySQL, rd *fakeRedis, shops ...int64) {
	at1 := reservation.Fence{Decider: reservation.AuthorityMySQL, Epoch: 1}
	for _, sh := range shops {
		my.fences[sh], rd.fences[sh] = at1, at1
	}
}

// backsOff checks that ps are waits without a wake, each twice the one
// before (from first on).
func backsOff(t *testing.T, ps []pause, first time.Duration) {
	t.Helper()
	want := first
	for i, p := range ps {
		if p.wake || p.wait != want {
			t.Errorf("wait after failed round %d: %+v, want %s without a wake (the waits %+v)", i+1, p, want, ps)
			return
		}
		want *= 2
	}
}

// A stuck shop beside a shop whose changes go through: the round that
// delivered the other shop's change keeps the poll's pace (the stuck shop
// must not slow the pod down); the rounds after it, with only the stuck
// shop's change pending, back off.
//
// Seen failing before the fix: the error of a stuck shop (a change Redis
// did not apply) was never recognised as one (it wrapped Redis's own
// error beside the stuck mark, and the check looked into both), so every
// round with a stuck shop backed off, whatever the others delivered.
func TestRelayKeepsPaceBesideAStuckShop(t *testing.T) {
	t.Parallel()
	const stuck, fine = 7, 8
	my, rd := newFakeMySQL(), newFakeRedis()
	mysqlDecides(my, rd, stuck, fine)
	mustDecide(t, my.decide, stuck, "s", reservation.StateHeld, unit(1))
	mustDecide(t, my.decide, fine, "f", reservation.StateHeld, unit(2))
	rd.failApply["s"] = 1 << 30
	const poll = time.Millisecond
	m := newFakeMirror(t, my, rd, func(c *mirror.Config) { c.Poll = poll })

	ps := pauses(t, m, 5)
	if ps[0] != (pause{poll, true}) {
		t.Errorf("wait after the round that delivered shop %d and not shop %d: %+v, want the poll (%s), cut short by a Push", fine, stuck, ps[0], poll)
	}
	backsOff(t, ps[1:], poll)
	if _, got := rd.state(fine); len(got) != 1 {
		t.Errorf("shop %d in Redis: %q, want its hold", fine, got)
	}
}

// Redis does not answer: every round applies nothing, and the relay backs
// off from the first. (What a fix of the stuck-shop check alone would
// break: every change is then a stuck shop's, and the relay went round at
// the poll's pace while Redis was down.)
func TestRelayBacksOffWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	my, rd := newFakeMySQL(), newFakeRedis()
	mysqlDecides(my, rd, 7, 8)
	mustDecide(t, my.decide, 7, "a", reservation.StateHeld, unit(1))
	mustDecide(t, my.decide, 8, "b", reservation.StateHeld, unit(2))
	rd.down = true
	const poll = time.Millisecond
	m := newFakeMirror(t, my, rd, func(c *mirror.Config) { c.Poll = poll })

	backsOff(t, pauses(t, m, 6), poll)
	if n, _, _ := my.Backlog(ctx(t)); n != 2 {
		t.Errorf("backlog %d, want the 2 changes Redis did not take", n)
	}
}
