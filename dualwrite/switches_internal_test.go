package dualwrite

import (
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// switches: a shop's first route has no switch time, a change has one,
// and a full map tracks no new shop (forgetting only makes the comparer
// stricter) until a sweep forgets the shops whose switch no longer
// matters.
func TestSwitchesNoteAndBound(t *testing.T) {
	redis := authority.Route{Authority: reservation.AuthorityRedis, Effective: authority.ModeRedis}
	shadow := authority.Route{Authority: reservation.AuthorityRedis, Shadow: true, Effective: authority.ModeShadow}
	t0 := time.Date(2025, 3, 4, 5, 0, 0, 0, time.UTC)
	var s switches
	if got := s.note(1, redis, t0); !got.IsZero() {
		t.Errorf("first call: switched %v, want none", got)
	}
	if got := s.note(1, redis, t0.Add(time.Second)); !got.IsZero() {
		t.Errorf("same route: switched %v, want none", got)
	}
	sw := t0.Add(2 * time.Second)
	if got := s.note(1, shadow, sw); !got.Equal(sw) {
		t.Errorf("route changed: switched %v, want %v", got, sw)
	}
	if got := s.note(1, shadow, sw.Add(time.Minute)); !got.Equal(sw) || !s.since(1).Equal(sw) {
		t.Errorf("after the change: switched %v (since %v), want %v", got, s.since(1), sw)
	}

	for shop := int64(2); len(s.m) < maxTrackedShops; shop++ {
		s.m[shop] = switchMark{route: redis, since: sw}
	}
	later := sw.Add(time.Minute)
	if s.note(-1, redis, later); len(s.m) != maxTrackedShops {
		t.Fatalf("a full map of recent switches took a new shop: %d entries", len(s.m))
	}
	if got := s.note(-1, shadow, later.Add(time.Second)); !got.IsZero() {
		t.Errorf("an untracked shop reports a switch %v", got)
	}
	// One hold lifetime later every switch is old: the sweep (at most once
	// a minute) makes room.
	if s.note(-2, redis, sw.Add(switchWindow)); len(s.m) != 1 {
		t.Errorf("after the sweep: %d entries, want the new shop alone", len(s.m))
	}
}
