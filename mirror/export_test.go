package mirror

import "time"

// SetAfterCopy runs fn between each copy's first pass and its catch-up.
func SetAfterCopy(m *Mirror, fn func(shop int64)) { m.afterCopy = fn }

// SkipDelta makes m's copies ignore what changed during them: the broken
// copy a test must catch.
func SkipDelta(m *Mirror) { m.skipDelta = true }

// OnPause tells fn of the relay's wait after each of m's rounds, and
// whether a Push may cut it short. Set it before Run.
func OnPause(m *Mirror, fn func(wait time.Duration, wake bool)) { m.onPause = fn }
