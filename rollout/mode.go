// Package rollout decides, per pod and per shop, which store is the source
// of truth for reservations: the modes, the kill switch, and the sources
// that evaluate them. The facade (package dualwrite) asks a ModeSource once
// per call and follows the answer; rollout never calls a store.
package rollout

import (
	"context"
	"fmt"
	"sync"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Mode is the migration stage of a scope (DESIGN section 6).
type Mode string

const (
	// ModeRedis: Redis is the authority and the only store written.
	ModeRedis Mode = "redis"
	// ModeShadow: Redis is the authority; MySQL is written concurrently and
	// compared; the caller never waits for MySQL.
	ModeShadow Mode = "shadow"
	// ModeMySQL: MySQL is the authority; Redis is written concurrently and
	// the call waits for it too, so Redis keeps a complete view and the
	// kill switch stays lossless.
	ModeMySQL Mode = "mysql"
	// ModeMySQLOnly: MySQL only (decommission). The kill switch is no longer
	// lossless: Redis must be resynced first.
	ModeMySQLOnly Mode = "mysql_only"
)

// Modes lists every mode, in rollout order.
var Modes = []Mode{ModeRedis, ModeShadow, ModeMySQL, ModeMySQLOnly}

// Valid reports whether m is a known mode.
func (m Mode) Valid() bool {
	for _, x := range Modes {
		if m == x {
			return true
		}
	}
	return false
}

// Kill is the kill switch's state for a scope. It wins over every mode.
type Kill string

const (
	// KillOff: the mode decides.
	KillOff Kill = "off"
	// KillRedis: Redis is the authority at once; dual writes go on, so the
	// rollout can flip forward again without loss.
	KillRedis Kill = "redis"
	// KillRedisOnly: Redis is the authority and MySQL reservation tables are
	// not touched at all: for when MySQL itself is the problem.
	KillRedisOnly Kill = "redis_only"
)

// Valid reports whether k is a known kill switch state.
func (k Kill) Valid() bool { return k == KillOff || k == KillRedis || k == KillRedisOnly }

// Decision is what a ModeSource answers for one (pod, shop).
type Decision struct {
	// Mode is the scope's migration stage.
	Mode Mode
	// Kill is the kill switch in force for the scope; it wins over Mode.
	Kill Kill
}

// RedisSafe is the decision to fall back to when nothing else is known: the
// code default, and what an empty or broken flag file yields.
var RedisSafe = Decision{Mode: ModeRedis, Kill: KillOff}

// Route is what the facade does for a decision: which store answers, and
// whether (and how) the other is written.
type Route struct {
	// Authority answers the caller.
	Authority reservation.Authority
	// Shadow is true when the other store is written and compared.
	Shadow bool
	// WaitShadow is true when the call waits for the shadow (mysql mode:
	// Redis must keep a complete view).
	WaitShadow bool
	// Effective is the mode actually applied after the kill switch.
	Effective Mode
}

// Route resolves the kill switch over the mode.
func (d Decision) Route() Route {
	switch d.Kill {
	case KillRedisOnly:
		return Route{Authority: reservation.AuthorityRedis, Effective: ModeRedis}
	case KillRedis:
		// Redis answers; MySQL keeps being written so flipping forward
		// again loses nothing.
		return Route{Authority: reservation.AuthorityRedis, Shadow: true, Effective: ModeShadow}
	}
	switch d.Mode {
	case ModeShadow:
		return Route{Authority: reservation.AuthorityRedis, Shadow: true, Effective: ModeShadow}
	case ModeMySQL:
		return Route{Authority: reservation.AuthorityMySQL, Shadow: true, WaitShadow: true, Effective: ModeMySQL}
	case ModeMySQLOnly:
		return Route{Authority: reservation.AuthorityMySQL, Effective: ModeMySQLOnly}
	default:
		return Route{Authority: reservation.AuthorityRedis, Effective: ModeRedis}
	}
}

// ModeSource answers the mode and kill switch for a shop of a pod. It is
// evaluated once per facade call, so it must be cheap; on an internal error
// it returns RedisSafe with the error, and the facade uses RedisSafe.
type ModeSource interface {
	Decide(ctx context.Context, pod string, shop int64) (Decision, error)
}

// Static is an in-memory ModeSource: a global decision, overridden per pod,
// overridden per shop; a kill switch at any scope wins over every mode. Safe
// for concurrent use; changes apply to the next call.
type Static struct {
	mu        sync.RWMutex
	mode      Mode
	podModes  map[string]Mode
	shopModes map[int64]Mode
	kill      Kill
	podKill   map[string]Kill
	shopKill  map[int64]Kill
}

// NewStatic returns a Static source answering mode everywhere, kill off.
func NewStatic(mode Mode) *Static {
	return &Static{mode: mode, kill: KillOff,
		podModes: map[string]Mode{}, shopModes: map[int64]Mode{},
		podKill: map[string]Kill{}, shopKill: map[int64]Kill{}}
}

var _ ModeSource = (*Static)(nil)

// SetMode sets the global mode.
func (s *Static) SetMode(m Mode) error {
	if !m.Valid() {
		return fmt.Errorf("rollout: unknown mode %q", m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mode = m
	return nil
}

// SetPodMode sets a pod's mode ("" clears it).
func (s *Static) SetPodMode(pod string, m Mode) error {
	if m != "" && !m.Valid() {
		return fmt.Errorf("rollout: unknown mode %q", m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m == "" {
		delete(s.podModes, pod)
	} else {
		s.podModes[pod] = m
	}
	return nil
}

// SetShopMode sets a shop's mode ("" clears it).
func (s *Static) SetShopMode(shop int64, m Mode) error {
	if m != "" && !m.Valid() {
		return fmt.Errorf("rollout: unknown mode %q", m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m == "" {
		delete(s.shopModes, shop)
	} else {
		s.shopModes[shop] = m
	}
	return nil
}

// SetKill sets the global kill switch.
func (s *Static) SetKill(k Kill) error {
	if !k.Valid() {
		return fmt.Errorf("rollout: unknown kill switch state %q", k)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill = k
	return nil
}

// SetPodKill sets a pod's kill switch (KillOff clears it).
func (s *Static) SetPodKill(pod string, k Kill) error {
	if !k.Valid() {
		return fmt.Errorf("rollout: unknown kill switch state %q", k)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.podKill[pod] = k
	return nil
}

// Decide implements ModeSource.
func (s *Static) Decide(_ context.Context, pod string, shop int64) (Decision, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d := Decision{Mode: s.mode, Kill: s.kill}
	if m, ok := s.podModes[pod]; ok {
		d.Mode = m
	}
	if m, ok := s.shopModes[shop]; ok {
		d.Mode = m
	}
	// The strongest kill switch of any scope wins.
	for _, k := range []Kill{s.podKill[pod], s.shopKill[shop]} {
		if k == KillRedisOnly || (k == KillRedis && d.Kill == KillOff) {
			d.Kill = k
		}
	}
	return d, nil
}
