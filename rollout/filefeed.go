package rollout

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/open-feature/flagd/core/pkg/evaluator"
	flagdlog "github.com/open-feature/flagd/core/pkg/logger"
	"github.com/open-feature/flagd/core/pkg/store"
	isync "github.com/open-feature/flagd/core/pkg/sync"
)

// settleDelay is how long the directory must be quiet after an event
// before the file is read: long enough for an editor's create-then-write
// to finish (so a half-saved file is not reported as rejected), short
// against the propagation budget.
const settleDelay = 5 * time.Millisecond

// noFlags is what the provider starts from when the file is invalid at
// start: flagd needs a valid first version to finish starting, and a file
// without flags means every code default, i.e. RedisSafe.
const noFlags = `{"flags": {}}`

// fileFeed feeds the flags file to flagd's in-process provider (it is the
// provider's sync.ISync). It watches the file's directory rather than the
// file, so every way of replacing the file is seen: a rename over it, an
// editor that renames the original away, a delete and recreate, a
// Kubernetes ConfigMap's symlink swap; a stat poll backs the watch up. Each
// new version is checked with flagd's own parser and passed on only when
// flagd would accept it, so the provider always holds the last valid
// version and never wedges on a bad first one.
type fileFeed struct {
	path string
	poll time.Duration
	log  *slog.Logger
	// problem logs a recurring problem, rate-limited.
	problem func(key string, level slog.Level, msg string, args ...any)
	check   *evaluator.JSON

	// loaded is true once a valid version has been passed on.
	loaded atomic.Bool

	mu       sync.Mutex
	current  []byte      // the last version passed on (noFlags before any)
	seen     os.FileInfo // the file as last read
	rejected []byte      // the last version refused, logged once
}

var _ isync.ISync = (*fileFeed)(nil)

func newFileFeed(path string, poll time.Duration, log *slog.Logger, problem func(key string, level slog.Level, msg string, args ...any)) *fileFeed {
	quiet := flagdlog.NewLogger(nil, false)
	checkStore, err := store.NewStore(quiet, []string{path})
	if err != nil {
		// Only fails for a duplicate source name; there is one.
		panic(fmt.Sprintf("rollout: flagd store: %v", err))
	}
	return &fileFeed{
		path: path, poll: poll, log: log, problem: problem,
		check:   evaluator.NewJSON(quiet, checkStore),
		current: []byte(noFlags),
	}
}

// prime reads the file once before the provider starts, so the provider's
// first version is the file when it is valid.
func (f *fileFeed) prime() {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, fi, err := f.read()
	if err == nil {
		f.seen = fi
		err = f.validate(data)
	}
	if err != nil {
		f.rejected = data
		f.log.Error("rollout: flags file could not be loaded; answering redis (the code default) until it is fixed", "err", err)
		return
	}
	f.current = data
	f.loaded.Store(true)
	f.log.Info("rollout: flags file loaded", "bytes", len(data))
}

// Init implements sync.ISync.
func (f *fileFeed) Init(context.Context) error { return nil }

// IsReady implements sync.ISync.
func (f *fileFeed) IsReady() bool { return true }

// ReSync implements sync.ISync: it sends the version in effect again.
func (f *fileFeed) ReSync(ctx context.Context, out chan<- isync.DataSync) error {
	f.mu.Lock()
	data := f.current
	f.mu.Unlock()
	f.send(ctx, out, data)
	return nil
}

// Sync implements sync.ISync: it sends the version in effect, then every
// new valid version until ctx ends (the provider's shutdown).
func (f *fileFeed) Sync(ctx context.Context, out chan<- isync.DataSync) error {
	var events chan fsnotify.Event
	var errs chan error
	w, err := fsnotify.NewWatcher()
	if err == nil {
		err = w.Add(filepath.Dir(f.path))
	}
	if err != nil {
		f.log.Warn("rollout: cannot watch the flags file's directory; polling it", "every", f.poll, "err", err)
	} else {
		defer w.Close()
		events, errs = w.Events, w.Errors
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
		case <-events:
			// Any change in the directory may be the file (renames, a
			// ConfigMap's ..data swap); reading it is cheap.
			settle.Reset(settleDelay)
		case err := <-errs:
			f.problem("feed/watch", slog.LevelWarn, "rollout: flags directory watch error; the poll still runs", "err", err)
		case <-settle.C:
			f.refresh(ctx, out, false)
		case <-poll.C:
			f.refresh(ctx, out, true)
		}
	}
}

// refresh reads the file and passes a new valid version on. From the poll
// it reads only when stat says the file changed.
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
	if err != nil {
		f.mu.Unlock()
		f.problem("feed/read", slog.LevelWarn, "rollout: flags file unreadable; keeping the flags in effect", "err", err)
		return
	}
	f.seen = fi
	if bytes.Equal(data, f.current) || bytes.Equal(data, f.rejected) {
		f.mu.Unlock()
		return
	}
	if err := f.validate(data); err != nil {
		f.rejected = data
		f.mu.Unlock()
		if f.loaded.Load() {
			f.log.Error("rollout: flags file rejected; keeping the last valid flags", "err", err)
		} else {
			f.log.Error("rollout: flags file could not be loaded; answering redis (the code default) until it is fixed", "err", err)
		}
		return
	}
	f.current, f.rejected = data, nil
	f.mu.Unlock()

	f.send(ctx, out, data)
	if f.loaded.Swap(true) {
		f.log.Info("rollout: flags file reloaded", "bytes", len(data))
	} else {
		f.log.Info("rollout: flags file loaded", "bytes", len(data))
	}
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
	return buf.Bytes(), fi, nil
}

// validate runs flagd's own parser over data: what it refuses, the
// provider would refuse too (keeping its previous version).
func (f *fileFeed) validate(data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return fmt.Errorf("the file is empty")
	}
	return f.check.SetState(isync.DataSync{FlagData: string(data), Source: f.path})
}

func (f *fileFeed) send(ctx context.Context, out chan<- isync.DataSync, data []byte) {
	select {
	case out <- isync.DataSync{FlagData: string(data), Source: f.path}:
	case <-ctx.Done():
	}
}
