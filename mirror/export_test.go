package mirror

// SetAfterCopy runs fn between each copy's first pass and its catch-up.
func SetAfterCopy(m *Mirror, fn func(shop int64)) { m.afterCopy = fn }

// SkipDelta makes m's copies ignore what changed during them: the broken
// copy a test must catch.
func SkipDelta(m *Mirror) { m.skipDelta = true }
