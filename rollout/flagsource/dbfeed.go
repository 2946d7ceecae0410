package flagsource

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	isync "github.com/open-feature/flagd/core/pkg/sync"
	"github.com/seed31b0e981/reservoir/internal/controldb"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// dbSource names the control database as flagd's sync source.
const dbSource = "reservoir-control-db"

// ErrNoFlagsDocument is the read failure of a control database that
// holds no flags document yet.
var ErrNoFlagsDocument = errors.New("the control database holds no flags document yet: `reservoir rollout --topology FILE init` writes the first")

// dbFeed feeds the control database's flags document (FlagsTable) to
// flagd's in-process provider, as fileFeed feeds a file. It polls the
// document's row, one primary key read, every poll interval, and the
// answer carries the document only when its version is not one the feed
// has seen (controldb.PollFlags): a fleet of replicas costs the database a point
// read each per interval, and a change reaches a replica in one round
// trip, not two (under a flood of the checkout listener, each round trip
// waits behind it). Each new document is checked
// with flagd's own parser and for flags that agree on a metadata.version
// above the one in force (flagdoc.Evaluator.Check) before it is passed on, so the
// provider always holds the last valid version; a database that cannot be
// reached leaves it in effect.
type dbFeed struct {
	syncReady
	db      *sql.DB
	poll    time.Duration
	timeout time.Duration
	log     *slog.Logger
	problem func(key string, level slog.Level, msg string, args ...any)
	check   *flagdoc.Evaluator
	// doc is the row followed: the flags document, or the kill switch
	// document (which may be missing: no switch was ever engaged).
	doc controldb.Doc

	loaded atomic.Bool
	// soon asks Sync to poll at once (PollNow), not at the next tick.
	soon chan struct{}

	mu       sync.Mutex
	current  []byte // the document in effect (noFlags before any)
	version  int64  // current's metadata.version (0 before any); only grows
	row      int64  // the row version of current (-1 before any)
	rejected int64  // the row version last refused (-1: none)

	// rej is the refusal Source.Rejected reports.
	rej rejection
	// readFail is the read failure Source.ReadError reports.
	readFail readFailure
}

var _ isync.ISync = (*dbFeed)(nil)

func newDBFeed(db *sql.DB, doc controldb.Doc, poll, timeout time.Duration, log *slog.Logger, problem func(key string, level slog.Level, msg string, args ...any)) *dbFeed {
	return &dbFeed{db: db, doc: doc, poll: poll, timeout: timeout, log: log, problem: problem, soon: make(chan struct{}, 1),
		check: flagdoc.NewEvaluator(dbSource), current: []byte(noFlags), row: -1, rejected: -1}
}

// pollNow makes Sync poll at once. Asking again before it did adds
// nothing: one poll reads whatever was written before it.
func (f *dbFeed) pollNow() {
	select {
	case f.soon <- struct{}{}:
	default:
	}
}

func (f *dbFeed) isLoaded() bool { return f.loaded.Load() }

func (f *dbFeed) source() string { return dbSource }

// prime reads the document once before the provider starts. A database
// that cannot be reached, or holds no document yet, is not an error here:
// Sync keeps polling.
func (f *dbFeed) prime() {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	if _, err := f.fetch(ctx); err != nil {
		f.log.Error("rollout: flags cannot be read from the control database; no decisions until they can (polling)", "err", err)
	}
}

// ReSync implements sync.ISync: it sends the document in effect again.
func (f *dbFeed) ReSync(ctx context.Context, out chan<- isync.DataSync) error {
	f.mu.Lock()
	data := f.current
	f.mu.Unlock()
	sendFlags(ctx, out, dbSource, data)
	return nil
}

// Sync implements sync.ISync: the document in effect, then every new valid
// one, until ctx ends.
func (f *dbFeed) Sync(ctx context.Context, out chan<- isync.DataSync) error {
	if err := f.ReSync(ctx, out); err != nil {
		return err
	}
	poll := time.NewTicker(f.poll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-poll.C:
		case <-f.soon:
		}
		pctx, cancel := context.WithTimeout(ctx, f.timeout)
		data, err := f.fetch(pctx)
		cancel()
		switch {
		case err != nil && f.loaded.Load():
			f.problem("feed/db", slog.LevelWarn, "rollout: flags unreadable in the control database; keeping the last valid flags", "err", err)
		case err != nil:
			f.problem("feed/db", slog.LevelError, "rollout: flags cannot be read from the control database; no decisions until they can", "err", err)
		case data != nil:
			sendFlags(ctx, out, dbSource, data)
		}
	}
}

// fetch reads the document when its version changed and, if it is valid,
// makes it current and returns it (nil when nothing new). Only the feed's
// one goroutine (prime, then Sync) calls it.
func (f *dbFeed) fetch(ctx context.Context) ([]byte, error) {
	f.mu.Lock()
	seen, refused := f.row, f.rejected
	f.mu.Unlock()
	row, doc, err := controldb.PollFlags(ctx, f.db, f.doc, seen, refused)
	if errors.Is(err, sql.ErrNoRows) && f.doc == controldb.KillDoc {
		// No kill switch was ever engaged: none is, which is an answer
		// (the flags document has no such default: its modes must be set).
		f.readFail.set(nil)
		if !f.loaded.Swap(true) {
			f.log.Info("rollout: no kill switch document in the control database yet: no kill switch engaged")
		}
		return nil, nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNoFlagsDocument
	}
	f.readFail.set(err)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	if row == f.row && f.rejected >= 0 {
		// Put back at the version in force: the newest again.
		f.rejected = -1
		f.rej.accept()
	}
	same := row == f.row || row == f.rejected
	f.mu.Unlock()
	if same || !doc.Valid {
		return nil, nil
	}
	data := []byte(doc.String)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.loaded.Load() && bytes.Equal(data, f.current) {
		// The document in force at a new row version (written again, or
		// put back): no change, so nothing to check, pass on or log.
		f.row, f.rejected = row, -1
		f.rej.accept()
		return nil, nil
	}
	version, err := f.check.Check(data, f.version)
	if err != nil {
		f.rejected = row
		f.rej.reject(f.log, "flags document", f.loaded.Load(), err, "row_version", row)
		return nil, nil
	}
	f.current, f.version, f.row, f.rejected = data, version, row, -1
	f.rej.accept()
	if !f.loaded.Swap(true) {
		f.log.Info("rollout: flags loaded from the control database", "bytes", len(data), "version", version)
	} else {
		f.log.Info("rollout: flags reloaded from the control database", "bytes", len(data), "version", version)
	}
	return data, nil
}
