// Package breaker is a circuit breaker for one store of one pod: after a
// run of failures, or when the store fails its health check, calls are
// refused at once instead of each waiting for its deadline, and the store
// is probed until it answers again.
//
// It exists so that one pod's failing store costs that pod's callers a
// fast 503, not their timeouts, and costs the other pods nothing: the
// goroutines, connections and admission slots a dead store would hold
// while each call waits are not taken.
//
// States:
//
//	closed    calls go through; Config.Failures consecutive failures open it
//	open      calls are refused (an *OpenError) for Config.OpenFor, then it
//	          lets one call through as a probe (half-open)
//	half-open one probe call is in flight, every other call is refused; the
//	          probe's success closes the breaker, its failure opens it again
//
// A health check (Healthy, Unhealthy) moves it too: a failed ping opens it
// at once, a ping answered closes it.
package breaker

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// State is a breaker's state.
type State int

// The states, in the order a failing store goes through them.
const (
	// Closed: calls go through.
	Closed State = iota
	// Open: calls are refused.
	Open
	// HalfOpen: one probe call is in flight; others are refused.
	HalfOpen
)

// String names the state as /readyz and the logs show it.
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// ErrOpen matches every refusal (errors.Is(err, ErrOpen)).
var ErrOpen = errors.New("breaker: open")

// OpenError is a refused call: the store is failing and nothing was sent
// to it.
type OpenError struct {
	// Name is the breaker's (Config.Name), e.g. "pod-a mysql".
	Name string
	// Why says what opened it: the failures counted, or the health check.
	Why string
	// Retry is when the breaker lets a probe through, at the latest.
	Retry time.Time
}

func (e *OpenError) Error() string {
	return fmt.Sprintf("breaker: %s is failing (%s); the call was not sent", e.Name, e.Why)
}

// Is makes errors.Is(err, ErrOpen) true.
func (e *OpenError) Is(target error) bool { return target == ErrOpen }

// Config configures New. Zero fields take their defaults.
type Config struct {
	// Name names the store in errors and logs ("pod-a mysql"). Required.
	Name string
	// Failures is how many consecutive failed calls open the breaker.
	// Default: 5.
	Failures int
	// OpenFor is how long an open breaker refuses every call before it
	// lets one probe through. Default: 1s.
	OpenFor time.Duration
	// OnChange, if set, is called after every change of state, with what
	// caused it, outside the breaker's lock (it may call State). Two
	// changes close together may be reported out of order: for the
	// current state, read State.
	OnChange func(from, to State, why string)
	// Now is the clock. Default: time.Now.
	Now func() time.Time
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Failures == 0 {
		c.Failures = 5
	}
	if c.OpenFor == 0 {
		c.OpenFor = time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports a setting that cannot work, naming the field.
func (c Config) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("breaker: Config.Name is required")
	case c.Failures < 1:
		return fmt.Errorf("breaker: Config.Failures must be >= 1, got %d", c.Failures)
	case c.OpenFor <= 0:
		return fmt.Errorf("breaker: Config.OpenFor must be positive, got %s", c.OpenFor)
	}
	return nil
}

// Breaker guards one store. Safe for concurrent use.
type Breaker struct {
	cfg Config

	mu       sync.Mutex
	state    State
	failures int       // consecutive failed calls while closed
	why      string    // what opened it
	until    time.Time // open: when a probe may go
}

// New returns a closed breaker.
func New(cfg Config) (*Breaker, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Breaker{cfg: cfg}, nil
}

// Allow asks to make a call. It returns a refusal (an *OpenError) when
// the breaker is open, or half-open with its probe in flight; otherwise
// done, which the caller must call once with whether the call failed
// (a store failure: a timeout, a lost connection; not an answer such as
// "not found").
func (b *Breaker) Allow() (done func(failed bool), err error) {
	b.mu.Lock()
	now := b.cfg.Now()
	probe := false
	switch b.state {
	case Open:
		if now.Before(b.until) {
			err := &OpenError{Name: b.cfg.Name, Why: b.why, Retry: b.until}
			b.mu.Unlock()
			return nil, err
		}
		probe = true
	case HalfOpen:
		err := &OpenError{Name: b.cfg.Name, Why: b.why + "; a probe is in flight", Retry: now.Add(b.cfg.OpenFor)}
		b.mu.Unlock()
		return nil, err
	}
	var from State
	if probe {
		from = b.set(HalfOpen)
	}
	b.mu.Unlock()
	if probe {
		b.changed(from, HalfOpen, "probing with one call")
	}
	var once sync.Once
	return func(failed bool) { once.Do(func() { b.record(probe, failed) }) }, nil
}

// record counts a call's outcome.
func (b *Breaker) record(probe, failed bool) {
	b.mu.Lock()
	var from, to State = b.state, b.state
	var why string
	switch {
	case probe && b.state == HalfOpen && failed:
		b.why, b.until = "its probe failed", b.cfg.Now().Add(b.cfg.OpenFor)
		from, to, why = b.set(Open), Open, b.why
	case probe && b.state == HalfOpen:
		b.failures = 0
		from, to, why = b.set(Closed), Closed, "its probe succeeded"
	case b.state != Closed:
		// A call let through before the breaker opened: its outcome
		// changes nothing now.
	case failed:
		b.failures++
		if b.failures >= b.cfg.Failures {
			b.why = fmt.Sprintf("%d consecutive failures", b.failures)
			b.until = b.cfg.Now().Add(b.cfg.OpenFor)
			b.failures = 0
			from, to, why = b.set(Open), Open, b.why
		}
	default:
		b.failures = 0
	}
	b.mu.Unlock()
	if from != to {
		b.changed(from, to, why)
	}
}

// Unhealthy opens the breaker at once (a failed health check: the store
// did not answer a ping), for OpenFor from now; why says what failed.
func (b *Breaker) Unhealthy(why string) {
	b.mu.Lock()
	b.why, b.until, b.failures = "health check: "+why, b.cfg.Now().Add(b.cfg.OpenFor), 0
	from := b.set(Open)
	b.mu.Unlock()
	if from != Open {
		b.changed(from, Open, b.why)
	}
}

// Healthy records a health check the store answered: an open breaker
// closes, whatever opened it. A pod whose calls no longer reach the store
// (its shops moved to the other store by a kill switch) sends no probe, and
// its breaker must not stay open, and the pod degraded, after the store is
// back. A store that answers pings and still fails calls opens it again
// after Config.Failures of them. A probe in flight is left to decide.
func (b *Breaker) Healthy() {
	b.mu.Lock()
	var from State
	if b.state == Open {
		b.failures = 0
		from = b.set(Closed)
	}
	b.mu.Unlock()
	if from == Open {
		b.changed(Open, Closed, "it answered a health check")
	}
}

// State returns the current state, and what opened the breaker when it is
// not closed.
func (b *Breaker) State() (State, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == Closed {
		return Closed, ""
	}
	return b.state, b.why
}

// set moves to s and returns the state before; the caller holds mu.
func (b *Breaker) set(s State) State {
	from := b.state
	b.state = s
	return from
}

// changed reports a change to OnChange.
func (b *Breaker) changed(from, to State, why string) {
	if b.cfg.OnChange != nil {
		b.cfg.OnChange(from, to, why)
	}
}
