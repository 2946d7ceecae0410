package breaker_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/breaker"
)

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func newBreaker(t *testing.T, c *clock) (*breaker.Breaker, *[]string) {
	t.Helper()
	var changes []string
	b, err := breaker.New(breaker.Config{Name: "pod-a mysql", Failures: 3, OpenFor: time.Second, Now: c.Now,
		OnChange: func(from, to breaker.State, why string) { changes = append(changes, from.String()+">"+to.String()) }})
	if err != nil {
		t.Fatal(err)
	}
	return b, &changes
}

func call(t *testing.T, b *breaker.Breaker, failed bool) error {
	t.Helper()
	done, err := b.Allow()
	if err != nil {
		return err
	}
	done(failed)
	return nil
}

func TestOpensAfterConsecutiveFailuresAndProbesToClose(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	b, changes := newBreaker(t, c)
	// Two failures, a success: the run starts again.
	for _, failed := range []bool{true, true, false, true, true} {
		if err := call(t, b, failed); err != nil {
			t.Fatalf("closed breaker refused a call: %v", err)
		}
	}
	if s, _ := b.State(); s != breaker.Closed {
		t.Fatalf("after 2 failures, a success, 2 failures: %s, want closed", s)
	}
	if err := call(t, b, true); err != nil { // the third in a row
		t.Fatal(err)
	}
	err := call(t, b, false)
	var open *breaker.OpenError
	if !errors.Is(err, breaker.ErrOpen) || !errors.As(err, &open) || open.Name != "pod-a mysql" || open.Why != "3 consecutive failures" {
		t.Fatalf("after 3 failures in a row: %v, want an *OpenError naming the store and the failures", err)
	}
	// Open for OpenFor; then one probe, and only one.
	c.add(999 * time.Millisecond)
	if err := call(t, b, false); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("before OpenFor ran out: %v, want refused", err)
	}
	c.add(time.Millisecond)
	probe, err := b.Allow()
	if err != nil {
		t.Fatalf("after OpenFor: %v, want a probe", err)
	}
	if err := call(t, b, false); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("beside the probe: %v, want refused", err)
	}
	probe(true) // the probe fails: open again
	if s, why := b.State(); s != breaker.Open || why != "its probe failed" {
		t.Fatalf("after a failed probe: %s (%s), want open", s, why)
	}
	c.add(time.Second)
	if err := call(t, b, false); err != nil { // a probe that succeeds
		t.Fatal(err)
	}
	if s, _ := b.State(); s != breaker.Closed {
		t.Fatalf("after a successful probe: %s, want closed", s)
	}
	want := "closed>open open>half_open half_open>open open>half_open half_open>closed"
	if got := join(*changes); got != want {
		t.Fatalf("changes %q, want %q", got, want)
	}
}

func TestHealthCheckOpensAtOnceAndClosesOnAnswer(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	b, _ := newBreaker(t, c)
	b.Unhealthy("ping: connection refused")
	err := call(t, b, false)
	var open *breaker.OpenError
	if !errors.As(err, &open) || open.Why != "health check: ping: connection refused" {
		t.Fatalf("after a failed ping: %v, want refused, saying the health check failed", err)
	}
	b.Unhealthy("ping: timeout") // still down: stays open, OpenFor from now
	c.add(500 * time.Millisecond)
	b.Healthy() // it answers again: closed, without waiting for a call
	if s, _ := b.State(); s != breaker.Closed {
		t.Fatalf("after a ping answered: %s, want closed", s)
	}
	if err := call(t, b, false); err != nil {
		t.Fatalf("after a ping answered: %v, want the call through", err)
	}
	// Opened by failed calls, it closes on an answered ping too (a pod
	// whose calls went to the other store sends no probe).
	for range 3 {
		_ = call(t, b, true)
	}
	if s, _ := b.State(); s != breaker.Open {
		t.Fatalf("after 3 failures: %s, want open", s)
	}
	b.Healthy()
	if s, _ := b.State(); s != breaker.Closed {
		t.Fatalf("open by failures, then a ping answered: %s, want closed", s)
	}
	b.Healthy() // closed: no change
	if s, _ := b.State(); s != breaker.Closed {
		t.Fatalf("healthy while closed: %s", s)
	}
}

func TestLateOutcomesOfCallsBeforeTheOpeningChangeNothing(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	b, _ := newBreaker(t, c)
	late, err := b.Allow() // in flight while the store fails
	if err != nil {
		t.Fatal(err)
	}
	b.Unhealthy("ping: timeout")
	late(false) // its success is not a probe's
	if s, _ := b.State(); s != breaker.Open {
		t.Fatalf("a late success closed the breaker: %s", s)
	}
	late(true) // done twice: counted once
}

func TestConfigNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		cfg  breaker.Config
		want string
	}{
		{breaker.Config{}, "Config.Name"},
		{breaker.Config{Name: "x", Failures: -1}, "Config.Failures"},
		{breaker.Config{Name: "x", OpenFor: -time.Second}, "Config.OpenFor"},
	} {
		if _, err := breaker.New(tc.cfg); err == nil || !contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

func join(s []string) string      { return strings.Join(s, " ") }
func contains(s, sub string) bool { return strings.Contains(s, sub) }
