package mirror_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/testbuf"
	"github.com/seed31b0e981/reservoir/mirror"
	"github.com/seed31b0e981/reservoir/reservation"
)

// What a store that does not answer costs the mirror (fakes_test.go: the
// failures are planted). The relay's pace after a round that failed: a
// shop whose change Redis does not apply stops only itself, so a round
// that delivered other shops' changes is followed at the poll's pace, a
// Push cutting it short; a round that applied nothing (Redis does not
// answer, or only stuck shops have changes) backs off, doubling, and no
// Push cuts it short, or a dead Redis would cost the pod's MySQL a read
// of the same changes fifty times a second. The handoff sweeper logs an
// outage once, not once per retry.

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

// Redis does not answer: the handoff sweeper's step fails at once every
// Interval (it reads the shops Redis took by force first). The first
// failure is logged, the next ones at most every 10s, not one line per
// retry; once a step succeeds, a new failure is logged at once.
//
// Seen failing before the fix: a line per failed step (ten a second with
// the default Interval, for as long as Redis was down).
func TestSweeperLogsAnOutageOnce(t *testing.T) {
	t.Parallel()
	my, rd := newFakeMySQL(), newFakeRedis()
	log := &testbuf.Buffer{}
	m := newFakeMirror(t, my, rd, func(c *mirror.Config) { c.Logger = slog.New(slog.NewTextHandler(log, nil)) })
	setDown := func(down bool) {
		rd.mu.Lock()
		defer rd.mu.Unlock()
		rd.down = down
	}
	reads := func() int {
		rd.mu.Lock()
		defer rd.mu.Unlock()
		return rd.forcedReads
	}
	// waitReads waits until the sweeper has read the forced shops n more
	// times: n steps.
	waitReads := func(n int) {
		t.Helper()
		want := reads() + n
		deadline := time.Now().Add(30 * time.Second)
		for reads() < want {
			if time.Now().After(deadline) {
				t.Fatalf("the sweeper took %d steps within 30s, want %d", reads()-want+n, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	failures := func() int { return strings.Count(log.String(), "handoff sweep failed") }

	setDown(true)
	c, cancel := context.WithCancel(ctx(t))
	done := make(chan error, 1)
	go func() {
		done <- m.RunSweeper(c, mirror.SweeperConfig{
			Wanted: func(context.Context, int64) (reservation.Authority, int64, bool, error) {
				return reservation.AuthorityMySQL, 1, false, nil
			},
			Version:  func(context.Context) (int64, bool) { return 1, true },
			Interval: time.Millisecond,
		})
	}()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("RunSweeper: %v, want context.Canceled", err)
		}
	}()
	waitReads(20)
	if n := failures(); n != 1 {
		t.Errorf("after 20 failed steps: %d lines of a failed sweep, want 1 (the log:\n%s)", n, log)
	}
	setDown(false)
	waitReads(2)
	setDown(true)
	waitReads(2)
	if n := failures(); n != 2 {
		t.Errorf("after Redis answered and failed again: %d lines of a failed sweep, want 2, the new outage's at once (the log:\n%s)", n, log)
	}
}
