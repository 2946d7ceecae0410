package flagsource

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed31b0e981/reservoir/rollout/flagdoc"

	"github.com/fsnotify/fsnotify"
	isync "github.com/open-feature/flagd/core/pkg/sync"
)

// settleDelay is how long the directory must be quiet after an event
// before the file is read: long enough for an editor's create-then-write
// to finish (so a half-saved file is not reported as rejected), short
// against the propagation budget.
const settleDelay = 5 * time.Millisecond

// noFlags is what the provider starts from when the file cannot be loaded
// at start: flagd needs a valid first version to finish starting. Decide
// does not evaluate it (the feed is not loaded), so it answers nothing.
const noFlags = `{"flags": {}}`

// errEmptyFile is the read failure of an empty flags file.
var errEmptyFile = errors.New("the file is empty")

// fileFeed feeds the flags file to flagd's in-process provider (it is the
// provider's sync.ISync). It watches the file's directory rather than the
// file, so every way of replacing the file is seen: a rename over it, an
// editor that renames the original away, a delete and recreate, a
// Kubernetes ConfigMap's symlink swap; a stat poll backs the watch up (and
// alone sees a file made readable by a chmod on a filesystem without
// inotify). A file missing or unreadable at start is read as soon as it
// appears or can be read. Each new version is checked with flagd's own
// parser, and its flags must agree on a metadata.version above the one in
// force (flagdoc.Evaluator.Check); it is passed on only then, so the provider always
// holds the last valid version and never wedges on a bad first one.
type fileFeed struct {
	syncReady
	path string
	poll time.Duration
	log  *slog.Logger
	// problem logs a recurring problem, rate-limited.
	problem func(key string, level slog.Level, msg string, args ...any)
	check   *flagdoc.Evaluator

	// loaded is true once a valid version has been passed on.
	loaded atomic.Bool

	mu       sync.Mutex
	current  []byte      // the last version passed on (noFlags before any)
	version  int64       // current's metadata.version (0 before any); only grows
	seen     os.FileInfo // the file as last read (nil before a read succeeds)
	rejected []byte      // the last version refused, logged once (nil: none)

	// rej is the refusal Source.Rejected reports.
	rej rejection
	// readFail is the read failure Source.ReadError reports.
	readFail readFailure
}

var _ isync.ISync = (*fileFeed)(nil)

func newFileFeed(path string, poll time.Duration, log *slog.Logger, problem func(key string, level slog.Level, msg string, args ...any)) *fileFeed {
	return &fileFeed{
		path: path, poll: poll, log: log, problem: problem,
		check:   flagdoc.NewEvaluator(path),
		current: []byte(noFlags),
	}
}

// prime reads the file once before the provider starts, so the provider's
// first version is the file when it is valid. A file that is missing or
// unreadable is not an error here: Sync keeps looking for it.
func (f *fileFeed) prime() {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, fi, err := f.read()
	f.readFail.set(err)
	if err != nil {
		f.log.Error("rollout: flags file cannot be read; no decisions until it can (watching for it)", "err", err)
		return
	}
	f.seen = fi
	if len(data) == 0 {
		f.readFail.set(errEmptyFile)
	}
	version, err := f.validate(data)
	if err != nil {
		f.rejected = data
		f.rej.reject(f.log, "flags file", false, err)
		return
	}
	f.current, f.version = data, version
	f.loaded.Store(true)
	f.log.Info("rollout: flags file loaded", "bytes", len(data), "version", version)
}

// ReSync implements sync.ISync: it sends the version in effect again.
func (f *fileFeed) ReSync(ctx context.Context, out chan<- isync.DataSync) error {
	f.mu.Lock()
	data := f.current
	f.mu.Unlock()
	sendFlags(ctx, out, f.path, data)
	return nil
}

// Sync implements sync.ISync: it sends the version in effect, then every
// new valid version until ctx ends (the provider's shutdown). When the
// file's directory cannot be watched (it does not exist yet, or was
// removed) the poll alone finds changes, and each poll tries to watch it
// again.
func (f *fileFeed) Sync(ctx context.Context, out chan<- isync.DataSync) error {
	dir := filepath.Dir(f.path)
	var events chan fsnotify.Event
	var errs chan error
	w, err := fsnotify.NewWatcher()
	watching := false
	if err == nil {
		defer w.Close()
		events, errs = w.Events, w.Errors
		err = w.Add(dir)
		watching = err == nil
	}
	if err != nil {
		f.log.Warn("rollout: cannot watch the flags file's directory; polling it", "every", f.poll, "err", err)
	}
	if err := f.ReSync(ctx, out); err != nil {
		return err
	}

	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	poll := time.NewTicker(f.poll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-events:
			if ev.Name == dir && ev.Op.Has(fsnotify.Remove|fsnotify.Rename) {
				// The directory itself went away, and its watch with it.
				watching = false
			}
			// Any change in the directory may be the file (renames, a
			// ConfigMap's ..data swap); reading it is cheap.
			settle.Reset(settleDelay)
		case err := <-errs:
			f.problem("feed/watch", slog.LevelWarn, "rollout: flags directory watch error; the poll still runs", "err", err)
		case <-settle.C:
			f.refresh(ctx, out, false)
		case <-poll.C:
			if w != nil && !watching && w.Add(dir) == nil {
				watching = true
				f.log.Info("rollout: watching the flags file's directory")
			}
			f.refresh(ctx, out, true)
		}
	}
}

// refresh reads the file and passes a new valid version on. From the poll
// it reads only when stat says the file changed, or when no read has
// succeeded yet (a file unreadable at start, made readable by a chmod,
// changes neither its inode, size nor mtime).
func (f *fileFeed) refresh(ctx context.Context, out chan<- isync.DataSync, polled bool) {
	f.mu.Lock()
	if polled {
		fi, err := os.Stat(f.path)
		if err == nil && f.seen != nil && os.SameFile(fi, f.seen) && fi.Size() == f.seen.Size() && fi.ModTime().Equal(f.seen.ModTime()) {
			f.mu.Unlock()
			return
		}
	}
	data, fi, err := f.read()
	f.readFail.set(err)
	if err != nil {
		f.mu.Unlock()
		if f.loaded.Load() {
			f.problem("feed/read", slog.LevelWarn, "rollout: flags file unreadable; keeping the last valid flags", "err", err)
		} else {
			f.problem("feed/read", slog.LevelError, "rollout: flags file cannot be read; no decisions until it can (watching for it)", "err", err)
		}
		return
	}
	f.seen = fi
	if bytes.Equal(data, f.current) && f.rejected != nil {
		// Put back as it was: the version in force is the newest again.
		f.rejected = nil
		f.rej.accept()
	}
	if bytes.Equal(data, f.current) || (f.rejected != nil && bytes.Equal(data, f.rejected)) {
		f.mu.Unlock()
		return
	}
	if len(data) == 0 {
		// Most likely a write in place caught between its truncate and
		// its write: the next event or poll reads the result. Not
		// rejected, so a file left empty is still reported, rate-limited.
		f.readFail.set(errEmptyFile)
		f.mu.Unlock()
		if f.loaded.Load() {
			f.problem("feed/empty", slog.LevelWarn, "rollout: flags file is empty (a write in progress?); keeping the last valid flags")
		} else {
			f.problem("feed/empty", slog.LevelError, "rollout: flags file is empty; no decisions until it is written")
		}
		return
	}
	version, err := f.validate(data)
	if err != nil {
		f.rejected = data
		f.rej.reject(f.log, "flags file", f.loaded.Load(), err)
		f.mu.Unlock()
		return
	}
	f.current, f.version, f.rejected = data, version, nil
	f.rej.accept()
	f.mu.Unlock()

	sendFlags(ctx, out, f.path, data)
	if !f.loaded.Swap(true) {
		f.log.Info("rollout: flags file loaded", "bytes", len(data), "version", version)
		return
	}
	f.log.Info("rollout: flags file reloaded", "bytes", len(data), "version", version)
}

func (f *fileFeed) read() ([]byte, os.FileInfo, error) {
	file, err := os.Open(f.path)
	if err != nil {
		return nil, nil, err
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(file); err != nil {
		return nil, nil, err
	}
	// Never nil, so an empty file is told apart from "nothing rejected".
	return append([]byte{}, buf.Bytes()...), fi, nil
}

// validate runs flagd's own parser over data (what it refuses, the
// provider would refuse too, keeping its previous version), then checks
// that both flags carry the same version, which it returns, and that it
// is above the version in force (flagdoc.Evaluator.Check). Called with f.mu held.
func (f *fileFeed) validate(data []byte) (int64, error) {
	return f.check.Check(data, f.version)
}

func (f *fileFeed) isLoaded() bool { return f.loaded.Load() }

// syncReady gives a feed the parts of sync.ISync that are the same for
// every feed: nothing to initialise, always ready (a feed that has no
// valid flags yet says so through isLoaded, not here).
type syncReady struct{}

// Init implements sync.ISync.
func (syncReady) Init(context.Context) error { return nil }

// IsReady implements sync.ISync.
func (syncReady) IsReady() bool { return true }

// sendFlags passes a document, read from source, to the provider, unless
// ctx ends first (the provider shutting down).
func sendFlags(ctx context.Context, out chan<- isync.DataSync, source string, data []byte) {
	select {
	case out <- isync.DataSync{FlagData: string(data), Source: source}:
	case <-ctx.Done():
	}
}

func (f *fileFeed) source() string { return f.path }
