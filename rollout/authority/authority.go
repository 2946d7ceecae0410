// Package authority is the vocabulary of who decides a reservation: the
// modes of the migration, the kill switch, the Decision a ModeSource
// answers for a shop of a pod, and the Route the facade takes from it. It
// depends on package reservation alone, so the facade (package dualwrite)
// and the topology import it without the flags' sources and their
// dependencies (flagd, gRPC). The flags document lives in package
// rollout/flagdoc, the sources that evaluate it in rollout/flagsource, and
// the staged rollout that changes it in package rollout.
package authority

import (
	"context"
	"fmt"
	"regexp"
	"sync"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Mode is the migration stage of a scope (docs/flags.md, docs/rollout.md).
type Mode string

const (
	// ModeRedis: Redis decides; MySQL's reservation tables are not
	// written (the ledger is).
	ModeRedis Mode = "redis"
	// ModeShadow: Redis decides; MySQL keeps shadow holds, compared with
	// Redis's answers; the caller never waits for MySQL.
	ModeShadow Mode = "shadow"
	// ModeMySQL: MySQL decides; Redis follows MySQL's change feed (the
	// relay) and is asked what it would have done, for comparison; the
	// caller never waits for Redis.
	ModeMySQL Mode = "mysql"
	// ModeMySQLOnly: MySQL decides and Redis is off the request path; the
	// relay keeps Redis following MySQL's change feed for as long as Redis
	// answers, so the kill switch stays lossless (docs/ownership.md).
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
	// Version is the version of the flags the decision was made from: a
	// number that only grows across every change of the flags, and the
	// same on every replica for the same flags (the flags file's
	// metadata.version, docs/flags.md). The facade takes it as the epoch of
	// a handoff between the stores (docs/ownership.md section 2). Flags
	// read from a document always carry one, from 1 up (every source
	// refuses a document without it). 0 means no version is known (RedisSafe,
	// or an OpenFeature provider that answers none): such a decision never
	// hands a shop off, so a store's fence (epoch 0 or higher) always wins
	// over it.
	Version int64
}

// RedisSafe is the code default (mode redis, kill switch off), with no
// version: what a flag an OpenFeature provider does not have means (a
// flags document without the flags has no version, and is refused). A
// ModeSource also returns it beside every error; a caller must not act on
// a decision that came with an error: a replica in doubt about its flags
// serves no reservation call (docs/ownership.md section 7), and with
// Version 0 the decision could not hand a shop off anyway.
var RedisSafe = Decision{Mode: ModeRedis, Kill: KillOff}

// Route is what the facade does for a decision: which store answers, and
// whether (and how) the other is written.
type Route struct {
	// Authority answers the caller.
	Authority reservation.Authority
	// Shadow is true when the other store is written and compared.
	Shadow bool
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
		return Route{Authority: reservation.AuthorityMySQL, Shadow: true, Effective: ModeMySQL}
	case ModeMySQLOnly:
		return Route{Authority: reservation.AuthorityMySQL, Effective: ModeMySQLOnly}
	default:
		return Route{Authority: reservation.AuthorityRedis, Effective: ModeRedis}
	}
}

// ModeSource answers the mode, the kill switch and the flags' version for
// a shop of a pod. It is evaluated once per facade call, so it must be
// cheap. On an internal error it returns RedisSafe with the error; the
// caller must not act on that decision (see RedisSafe).
type ModeSource interface {
	Decide(ctx context.Context, pod string, shop int64) (Decision, error)
}

// Static is an in-memory ModeSource: a global decision, overridden per pod,
// overridden per shop; a kill switch at any scope wins over every mode. Its
// version starts at 1 and every setter call that changes something adds
// one, so each state has its own version, as a flags file's changes do.
// Safe for concurrent use; changes apply to the next call.
type Static struct {
	mu        sync.RWMutex
	version   int64
	mode      Mode
	podModes  map[string]Mode
	shopModes map[int64]Mode
	kill      Kill
	podKill   map[string]Kill
	shopKill  map[int64]Kill
}

// NewStatic returns a Static source answering mode everywhere, kill off,
// at version 1.
func NewStatic(mode Mode) *Static {
	return &Static{version: 1, mode: mode, kill: KillOff,
		podModes: map[string]Mode{}, shopModes: map[int64]Mode{},
		podKill: map[string]Kill{}, shopKill: map[int64]Kill{}}
}

var _ ModeSource = (*Static)(nil)

// Version returns the version of the current state, the one Decide
// reports.
func (s *Static) Version() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.version
}

// override sets (or, with none, clears) an override in m, and bumps the
// version when that changed something. The caller holds the lock.
func override[K comparable, V comparable](s *Static, m map[K]V, key K, v, none V) {
	cur, ok := m[key]
	switch {
	case v == none && ok:
		delete(m, key)
	case v != none && (!ok || cur != v):
		m[key] = v
	default:
		return
	}
	s.version++
}

// SetMode sets the global mode.
func (s *Static) SetMode(m Mode) error {
	if !m.Valid() {
		return fmt.Errorf("rollout: unknown mode %q", m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mode != m {
		s.mode = m
		s.version++
	}
	return nil
}

// SetPodMode sets a pod's mode ("" clears it).
func (s *Static) SetPodMode(pod string, m Mode) error {
	if m != "" && !m.Valid() {
		return fmt.Errorf("rollout: unknown mode %q", m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	override(s, s.podModes, pod, m, "")
	return nil
}

// SetShopMode sets a shop's mode ("" clears it).
func (s *Static) SetShopMode(shop int64, m Mode) error {
	if m != "" && !m.Valid() {
		return fmt.Errorf("rollout: unknown mode %q", m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	override(s, s.shopModes, shop, m, "")
	return nil
}

// SetKill sets the global kill switch.
func (s *Static) SetKill(k Kill) error {
	if !k.Valid() {
		return fmt.Errorf("rollout: unknown kill switch state %q", k)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kill != k {
		s.kill = k
		s.version++
	}
	return nil
}

// SetPodKill sets a pod's kill switch (KillOff clears it).
func (s *Static) SetPodKill(pod string, k Kill) error {
	if !k.Valid() {
		return fmt.Errorf("rollout: unknown kill switch state %q", k)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	override(s, s.podKill, pod, k, KillOff)
	return nil
}

// Decide implements ModeSource. The decision carries the version of the
// state it was made from.
func (s *Static) Decide(_ context.Context, pod string, shop int64) (Decision, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d := Decision{Mode: s.mode, Kill: s.kill, Version: s.version}
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

// Kills lists the kill switch states, weakest first.
var Kills = []Kill{KillOff, KillRedis, KillRedisOnly}

// Strength orders kill switch states: a stronger state wins over a weaker
// one whatever scope set it. "" counts as off.
func (k Kill) Strength() int {
	switch k {
	case KillRedis:
		return 1
	case KillRedisOnly:
		return 2
	default:
		return 0
	}
}

// PodName is what a pod may be called: it appears in JSON, in $evaluators
// names and in scope strings, so it is kept to a plain alphabet. The
// topology names pods by the same rule (ValidPodName), so every pod that
// serves traffic can be targeted by a flag and a kill switch.
var PodName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// PodNameRule says in words what ValidPodName accepts.
const PodNameRule = "1-63 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit"

// ValidPodName reports whether name can name a pod: in the topology, the
// flags and kill switch scopes alike.
func ValidPodName(name string) bool { return PodName.MatchString(name) }
