package compare

import (
	"sync"
	"time"
)

// bucket is a token bucket: it allows burst events at once and rate events
// per second on average. (golang.org/x/time/rate is not a dependency; this
// is all of it the comparer needs.)
type bucket struct {
	mu     sync.Mutex
	rate   float64 // tokens per second
	burst  float64
	tokens float64
	last   time.Time
}

func newBucket(rate float64, burst int) *bucket {
	return &bucket{rate: rate, burst: float64(burst), tokens: float64(burst)}
}

// allow takes a token if there is one.
func (b *bucket) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.last.IsZero() {
		if d := now.Sub(b.last); d > 0 {
			b.tokens = min(b.burst, b.tokens+d.Seconds()*b.rate)
		}
	}
	if now.After(b.last) {
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
