package dualwrite

import (
	"sync"
	"time"

	"github.com/seed31b0e981/reservoir/compare"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// switchWindow is how long a shop's switch matters: after one hold
// lifetime no reservation made before it is left, and the shop's entry
// may be forgotten when the map is full.
var switchWindow = compare.DefaultRules.SwitchWindow

// maxTrackedShops bounds the shops whose last route a facade remembers.
// Beyond it a new shop is not tracked: its observations carry no switch
// time, so a difference is counted as shadow_missing rather than excused
// as pre_switch. Forgetting can only make the comparer stricter.
const maxTrackedShops = 1 << 17

// switches remembers, per shop, the route of the shop's last call at this
// facade and since when it has had it. The comparer needs to know whether
// a reservation that a claim or release is about may have been made before
// the shop's mode changed, while the shadow was not written
// (compare.ClassPreSwitch). The time is this facade's, not the flags
// file's: a replica applies a change when its flag source sees it, and
// until then it serves the old route.
type switches struct {
	mu        sync.RWMutex
	m         map[int64]switchMark
	lastSweep time.Time
}

type switchMark struct {
	route authority.Route
	// since is when the route last changed; zero when it has not changed
	// since the facade first saw the shop.
	since time.Time
}

// note records that shop is routed by r at now and returns when its route
// last changed (zero: not since the facade first saw the shop, or the
// shop is not tracked). Every call of the facade notes its route, in
// every mode: the route before a switch is seen only by the calls that
// were not compared.
func (s *switches) note(shop int64, r authority.Route, now time.Time) time.Time {
	s.mu.RLock()
	m, ok := s.m[shop]
	s.mu.RUnlock()
	if ok && m.route == r {
		return m.since
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.m[shop]; ok {
		if m.route == r {
			return m.since
		}
		s.m[shop] = switchMark{route: r, since: now}
		return now
	}
	if s.m == nil {
		s.m = map[int64]switchMark{}
	}
	if len(s.m) >= maxTrackedShops && now.Sub(s.lastSweep) >= time.Minute {
		// At most once a minute: a full map of recent switches must not
		// make every new shop's call scan it.
		s.lastSweep = now
		for shop, m := range s.m {
			if m.since.IsZero() || now.Sub(m.since) >= switchWindow {
				delete(s.m, shop)
			}
		}
	}
	if len(s.m) >= maxTrackedShops {
		return time.Time{}
	}
	s.m[shop] = switchMark{route: r}
	return time.Time{}
}

// since returns when shop's route last changed, as note last recorded it.
func (s *switches) since(shop int64) time.Time {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[shop].since
}
