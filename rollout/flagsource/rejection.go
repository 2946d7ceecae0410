package flagsource

import (
	"log/slog"
	"sync"
	"time"
)

// rejection is a feed's refusal of its newest flags document: why and
// when, until a valid document loads (or the one in force is put back).
// A source that keeps its last valid flags through a broken edit looks
// healthy from the outside; this is what makes the broken edit visible
// (Source.Rejected, the server's reservoir_rollout_flags_rejected, the
// dashboard's banner).
type rejection struct {
	mu  sync.Mutex
	err error
	at  time.Time
}

// reject records err as the reason the newest document (what: "flags
// file", ...) was refused, and logs the refusal first, under the same
// lock as refusal reads: whoever has seen the line sees the refusal, and
// whoever sees the refusal finds its line in the log. loaded says whether
// valid flags stay in force; attrs go before the error in the line.
func (r *rejection) reject(log *slog.Logger, what string, loaded bool, err error, attrs ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	attrs = append(attrs, "err", err)
	if loaded {
		log.Error("rollout: "+what+" rejected; keeping the last valid flags", attrs...)
	} else {
		log.Error("rollout: "+what+" could not be loaded; no decisions until it is fixed", attrs...)
	}
	r.err, r.at = err, time.Now().UTC()
}

// accept clears the refusal: the newest document is the one in force.
func (r *rejection) accept() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err, r.at = nil, time.Time{}
}

func (r *rejection) refusal() (time.Time, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at, r.err
}

// readFailure is a feed's last failure to read its flags at all (a file
// missing or unreadable or empty, a database or a daemon that does not
// answer, no document there yet), until a read succeeds: with rejection,
// it says why a source is not loaded.
type readFailure struct {
	mu  sync.Mutex
	err error
}

func (r *readFailure) set(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
}

func (r *readFailure) get() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// ReadError is the last failure to read the flags from where they are (a
// file missing, unreadable or empty; a control database or a flagd daemon
// that does not answer; no flags document there yet), and nil once a
// read succeeds (a document read but refused is Rejected's). A replica
// that is not Loaded says why with it. nil with a Provider (unless its
// kill switch document, Config.Kills, cannot be read).
func (s *Source) ReadError() error {
	if f, ok := s.feed.(interface{ readErr() error }); ok {
		if err := f.readErr(); err != nil {
			return err
		}
	}
	return s.killsReadError()
}

func (f *fileFeed) readErr() error { return f.readFail.get() }

func (f *dbFeed) readErr() error { return f.readFail.get() }

func (f *grpcFeed) readErr() error { return f.readFail.get() }

// rejecter is a feed that reports its refusals (fileFeed, dbFeed,
// grpcFeed).
type rejecter interface {
	refusal() (at time.Time, err error)
}

var (
	_ rejecter = (*fileFeed)(nil)
	_ rejecter = (*dbFeed)(nil)
	_ rejecter = (*grpcFeed)(nil)
)

func (f *fileFeed) refusal() (time.Time, error) { return f.rej.refusal() }

func (f *dbFeed) refusal() (time.Time, error) { return f.rej.refusal() }

func (f *grpcFeed) refusal() (time.Time, error) { return f.rej.refusal() }

// Rejected reports whether the newest flags document the source saw was
// refused, why (the error names the line and column, or the JSON path, of
// the problem) and when. While it is, the source answers from the last
// valid document (Loaded) or, if none has loaded since it started, from
// nothing (not Loaded). err is nil once a valid document loads, or the
// one in force is put back. A source whose flags come from elsewhere
// (an OpenFeature provider passed in) reports nil: it sees no documents.
func (s *Source) Rejected() (at time.Time, err error) {
	if r, ok := s.feed.(rejecter); ok {
		if at, err := r.refusal(); err != nil {
			return at, err
		}
	}
	return s.killsRejected()
}

// inForcer is a feed that tells the document it passed on last (fileFeed,
// dbFeed, grpcFeed).
type inForcer interface {
	inForce() []byte
}

var (
	_ inForcer = (*fileFeed)(nil)
	_ inForcer = (*dbFeed)(nil)
	_ inForcer = (*grpcFeed)(nil)
)

func (f *fileFeed) inForce() []byte { f.mu.Lock(); defer f.mu.Unlock(); return f.current }

func (f *dbFeed) inForce() []byte { f.mu.Lock(); defer f.mu.Unlock(); return f.current }

func (f *grpcFeed) inForce() []byte { f.mu.Lock(); defer f.mu.Unlock(); return f.current }

// InForce returns the flags document the source answers from now, and
// false while none has loaded (or with a Provider, which has no
// document); with Config.Kills, the kill switch document. The kill switch builds on it over an invalid document
// (ControllerConfig.InForce): it is what this replica obeys, valid by
// construction, even when it was written outside the controller.
func (s *Source) InForce() (doc []byte, ok bool) {
	if s.kills != nil {
		// The document reservoir writes is the kill switch's.
		return s.kills.InForce()
	}
	f, isFeed := s.feed.(inForcer)
	if !isFeed || !s.Loaded() {
		return nil, false
	}
	return append([]byte{}, f.inForce()...), true
}
